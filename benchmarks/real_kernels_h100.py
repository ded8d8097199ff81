"""Real tensor-core kernels on an H100: hand-synchronised vs tilewave-synchronised variants.

The kernels come from example modules (``FAMILY_MODULES``: ``examples/<name>.py``), each
exposing ``bench_families(small: bool) -> list[KernelFamily]`` (see
``examples/real_kernel_variants.py``). A family is one kernel (a GEMM, an attention forward)
with its variants: ``hand`` (the hand-synchronised reference) and the variants whose
synchronisation tilewave decides. To add kernels, add a module name to ``FAMILY_MODULES``; to
add a problem kind the GPU side does not know yet, add an entry to ``PROBLEMS``.

Two machines:

* ``python benchmarks/real_kernels_h100.py --emit DIR`` (TVM and tilewave, no GPU) builds
  every variant at the benchmark size (``DIR/full``) and at the race-check size
  (``DIR/small``), writes ``<family>__<variant>.cu`` and a ``manifest.json`` per size: launch
  shape, parameter order, the build time, the synchronisation in the kernel body
  (``__syncthreads``, ``cp.async.wait_group N``, ``commit_group``) and, for a variant tilewave
  failed to build, the error. A failed build is a row, never a crash.
* ``python real_kernels_h100.py --run DIR`` (nvcc, torch, cupy; no TVM) compiles every source
  with ``nvcc -gencode arch=compute_90a,code=sm_90a -cubin`` in parallel, then runs each
  variant in its own process (a faulting kernel cannot poison the others): result checked
  against an fp32 torch reference, time = median of 30 launches with L2 flushed between
  them, and the same for torch's own kernel (cuBLAS ``matmul`` / ``scaled_dot_product_attention``).
  Prints one table per family with TFLOP/s and the ratios to torch and to ``hand``.
* ``--racecheck DIR`` runs every small variant under ``compute-sanitizer --tool racecheck``
  and prints the hazard counts. ``--run DIR --racecheck DIR`` does both with one compile.

Exit status 1 when a tilewave variant is wrong, fails to build, or has a race hazard.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
#: example modules (``examples/<name>.py``) whose ``bench_families`` the benchmark runs
FAMILY_MODULES: list[str] = ["sm80_gemm", "sm80_flash_attention"]
SIZES = ("full", "small")
NVCC = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v"]
RUN_TIMEOUT_S = 60  # one variant's process (seconds when it works)
RACECHECK_TIMEOUT_S = 100
TOLERANCE = 2e-2  # max |error| / max |reference| (fp16 output of an fp32 accumulation)
REPS, WARMUP = 30, 5
_WAIT = re.compile(r"cp_async_wait_group_async_wait_group_(\d+)\(\)")
_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores")


# ---------------------------------------------------------------- emit (TVM side)


def _slug(variant: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", variant).strip("_")


def kernel_body(source: str) -> str:
    """The ``__global__`` function definitions of a CUDA source (helpers left out)."""
    start = source.find('extern "C" __global__')
    return source[start:] if start >= 0 else source


def sync_counts(source: str) -> dict[str, object]:
    """Static synchronisation in the kernel body: barriers, waits by group count, commits."""
    body = kernel_body(source)
    waits: dict[str, int] = {}
    for n in _WAIT.findall(body):
        waits[n] = waits.get(n, 0) + 1
    return {
        "barriers": body.count("__syncthreads()"),
        "waits": dict(sorted(waits.items())),
        "wait_all": body.count("cp_async_wait_all"),
        "commits": body.count("cp_async_commit_group_async_commit_group()"),
    }


def _kernel_signature(source: str) -> tuple[str, list[str]]:
    match = re.search(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\)\s*\{',
                      source)
    if match is None:
        raise RuntimeError("no __global__ kernel definition in the generated source")
    return match.group(1), re.findall(r"(\w+)_ptr\b", match.group(2))


def load_families(small: bool) -> list:
    """Every family of every module in ``FAMILY_MODULES``."""
    sys.path.insert(0, str(EXAMPLES))
    families = []
    for name in FAMILY_MODULES:
        families.extend(importlib.import_module(name).bench_families(small=small))
    return families


def emit_size(out_dir: Path, small: bool) -> dict:
    """Build every variant of every family at one size into ``out_dir``; return the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"families": {}}
    for family in load_families(small):
        entry = {
            "problem": family.problem,
            "grid": list(family.grid),
            "block": list(family.block),
            "flops": family.flops,
            "dynamic_smem": family.dynamic_smem,
            "variants": {},
        }
        for variant in family.variants:
            record: dict = {"role": variant.role, "note": variant.note}
            start = time.perf_counter()
            try:
                source = variant.build()
            except Exception as err:  # a failed build is a row of the table, not a crash
                record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            else:
                file_name = f"{family.name}__{_slug(variant.name)}.cu"
                (out_dir / file_name).write_text(source)
                kernel, params = _kernel_signature(source)
                record.update(
                    file=file_name, kernel=kernel, params=params, sync=sync_counts(source)
                )
            record["build_s"] = round(time.perf_counter() - start, 3)
            entry["variants"][variant.name] = record
            status = record.get("error", "ok")
            print(f"  {family.name:<22} {variant.name:<22} {record['build_s']:6.2f} s  {status}")
        manifest["families"][family.name] = entry
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def emit(out_dir: Path, sizes: tuple[str, ...] = SIZES) -> None:
    """``out_dir/full`` and ``out_dir/small`` (or the ``sizes`` given)."""
    for size in sizes:
        print(f"emitting {size} -> {out_dir / size}")
        emit_size(out_dir / size, small=size == "small")


# ---------------------------------------------------------------- GPU side (no TVM)


def _gemm_inputs(problem: dict, torch) -> dict:
    m, n, k = problem["m"], problem["n"], problem["k"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen)
    return {"A": a, "B": b, "C": torch.full((m, n), float("nan"), device="cuda",
                                             dtype=torch.float16)}


def _gemm_reference(t: dict, torch) -> tuple:
    return t["C"], t["A"].float() @ t["B"].float().t(), lambda: torch.matmul(t["A"], t["B"].t())


def _attention_inputs(problem: dict, torch) -> dict:
    shape = (problem["bh"], problem["seq"], problem["dim"])
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
               for _ in range(3))
    out = torch.full(shape, float("nan"), device="cuda", dtype=torch.float16)
    return {"Q": q, "K": k, "V": v, "Out": out}


def _attention_reference(t: dict, torch) -> tuple:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (t[name].unsqueeze(0) for name in ("Q", "K", "V"))
    expected = sdpa(q.float(), k.float(), v.float()).squeeze(0)
    return t["Out"], expected, lambda: sdpa(q, k, v).squeeze(0)


#: problem kind -> (make the named input/output tensors, (output, fp32 expected, torch's
#: own kernel as a callable))
PROBLEMS = {
    "gemm_nt": (_gemm_inputs, _gemm_reference),
    "attention": (_attention_inputs, _attention_reference),
}


def _median_ms(fn, torch) -> float:
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(REPS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def run_one(size_dir: Path, family: str, variant: str, timed: bool) -> dict:
    """Launch one variant (or ``__torch__``: torch's own kernel) and check it; in-process."""
    import torch

    torch.cuda.init()
    entry = json.loads((size_dir / "manifest.json").read_text())["families"][family]
    make_inputs, reference = PROBLEMS[entry["problem"]["kind"]]
    tensors = make_inputs(entry["problem"], torch)
    out, expected, torch_fn = reference(tensors, torch)
    if variant == "__torch__":
        launch = torch_fn
        got = torch_fn()
    else:
        import cupy

        spec = entry["variants"][variant]
        kernel = cupy.RawModule(path=str(size_dir / _cubin(spec["file"]))).get_function(
            spec["kernel"]
        )
        if entry["dynamic_smem"]:
            kernel.max_dynamic_shared_size_bytes = entry["dynamic_smem"]
        args = tuple(cupy.asarray(tensors[name]) for name in spec["params"])
        grid, block = tuple(entry["grid"]), tuple(entry["block"])

        def launch():
            kernel(grid, block, args, shared_mem=entry["dynamic_smem"])

        launch()
        torch.cuda.synchronize()
        got = out
    scale = max(float(expected.abs().max()), 1e-30)
    diff = (got.float() - expected).abs().nan_to_num(float("inf"))
    err = float(diff.max()) / scale
    result = {"correct": err < TOLERANCE, "rel_err": err}
    if not result["correct"]:  # where it goes wrong, to debug a layout from one run
        bad = diff > TOLERANCE * scale
        first = [int(i) for i in bad.nonzero()[0]]
        result["bad"] = f"{float(bad.float().mean()):.1%} wrong, first at {first}"
    if timed:
        ms = _median_ms(launch, torch)
        result.update(ms=ms, tflops=entry["flops"] / ms / 1e9)
    return result


def _cubin(file_name: str) -> str:
    return Path(file_name).stem + ".cubin"


def compile_all(size_dir: Path) -> dict[str, dict]:
    """nvcc every source of ``size_dir`` in parallel; per file: error or registers/spills."""
    files = sorted(p.name for p in size_dir.glob("*.cu"))

    def one(name: str) -> tuple[str, dict]:
        done = subprocess.run(
            [*NVCC, "-o", str(size_dir / _cubin(name)), str(size_dir / name)],
            capture_output=True, text=True,
        )
        log = done.stdout + done.stderr
        if done.returncode != 0:
            return name, {"error": "nvcc: " + " ".join(log.split())[:300]}
        regs, spill = _REGS.search(log), _SPILL.search(log)
        return name, {"regs": int(regs.group(1)) if regs else None,
                      "spill": int(spill.group(1)) if spill else None}

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        return dict(pool.map(one, files))


def _subprocess_result(command: list[str], timeout: int) -> tuple[dict | None, str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout} s"
    log = done.stdout + done.stderr
    match = re.search(r"^RESULT (\{.*\})$", log, re.M)
    if match is None:
        lines = [line.strip() for line in log.splitlines() if line.strip()]
        return None, f"exit {done.returncode}: {' / '.join(lines[-2:])[-300:]}"
    return json.loads(match.group(1)), log


def _one_command(size_dir: Path, family: str, variant: str, timed: bool) -> list[str]:
    command = [sys.executable, os.path.abspath(__file__), "--one", str(size_dir), family, variant]
    return command if timed else [*command, "--untimed"]


def _sync_text(record: dict) -> str:
    sync = record.get("sync")
    if not sync:
        return "-"
    waits = ",".join(f"{n}x{c}" for n, c in sync["waits"].items()) or "0"
    return f"bar {sync['barriers']} wait[N x count] {waits} commit {sync['commits']}"


def run(in_dir: Path, compiled: dict | None = None) -> int:
    """Compile (unless given), run, check and time every full-size variant; print tables."""
    size_dir = in_dir / "full"
    manifest = json.loads((size_dir / "manifest.json").read_text())
    compiled = compiled if compiled is not None else compile_all(size_dir)
    bad = 0
    for family, entry in manifest["families"].items():
        torch_result, log = _subprocess_result(
            _one_command(size_dir, family, "__torch__", True), RUN_TIMEOUT_S
        )
        rows = []
        for variant, record in entry["variants"].items():
            error = record.get("error") or compiled.get(record.get("file", ""), {}).get("error")
            result, log = (None, error) if error else _subprocess_result(
                _one_command(size_dir, family, variant, True), RUN_TIMEOUT_S
            )
            rows.append((variant, record, result, log))
        hand = next((r for v, rec, r, _ in rows if rec["role"] == "hand" and r), None)
        ref_name = "cuBLAS" if entry["problem"]["kind"].startswith("gemm") else "SDPA"
        print(f"\n## {family} {entry['problem']}")
        if torch_result:
            print(f"torch ({ref_name}): {torch_result['tflops']:.1f} TFLOP/s "
                  f"({torch_result['ms']:.3f} ms), rel err vs fp32 {torch_result['rel_err']:.2e}")
        else:
            print(f"torch ({ref_name}): failed: {log}")
        print(f"| variant | role | correct (rel err) | ms | TFLOP/s | vs {ref_name} | vs hand | "
              "regs/spill | build s | sync in kernel |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for variant, record, result, log in rows:
            nv = compiled.get(record.get("file", ""), {})
            regs = f"{nv.get('regs')}/{nv.get('spill')}" if "regs" in nv else "-"
            if result is None:
                print(f"| {variant} | {record['role']} | FAILED: {log} | - | - | - | - | {regs} | "
                      f"{record['build_s']} | {_sync_text(record)} |")
                bad += record["role"] == "tilewave"
                continue
            vs_torch = result["tflops"] / torch_result["tflops"] if torch_result else float("nan")
            vs_hand = result["tflops"] / hand["tflops"] if hand else float("nan")
            correct = f"{result['correct']} ({result['rel_err']:.1e})"
            if "bad" in result:
                correct += f" {result['bad']}"
            print(f"| {variant} | {record['role']} | {correct} | {result['ms']:.3f} | "
                  f"{result['tflops']:.1f} | {vs_torch:.2f} | {vs_hand:.2f} | {regs} | "
                  f"{record['build_s']} | {_sync_text(record)} |")
            bad += record["role"] == "tilewave" and not result["correct"]
    return 1 if bad else 0


def racecheck(in_dir: Path, parallel: int = 6, deadline: float = float("inf")) -> int:
    """Every small variant under ``compute-sanitizer --tool racecheck``; print the hazards.

    A job not started by ``deadline`` (``time.monotonic()``) is reported as skipped.
    """
    size_dir = in_dir / "small"
    manifest = json.loads((size_dir / "manifest.json").read_text())
    compiled = compile_all(size_dir)
    jobs = []
    for family, entry in manifest["families"].items():
        for variant, record in entry["variants"].items():
            error = record.get("error") or compiled.get(record.get("file", ""), {}).get("error")
            jobs.append((family, variant, record, error))

    def one(job):
        family, variant, _record, error = job
        if error:
            return None, error
        if time.monotonic() > deadline:
            return None, "skipped: out of the time budget"
        command = ["compute-sanitizer", "--tool", "racecheck", "--racecheck-report", "hazard",
                   *_one_command(size_dir, family, variant, False)]
        return _subprocess_result(command, RACECHECK_TIMEOUT_S)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(one, jobs))
    print("\n| family | variant | role | racecheck hazards | result correct |")
    print("|---|---|---|---|---|")
    bad = 0
    for (family, variant, record, _), (result, log) in zip(jobs, results, strict=True):
        summary = _SUMMARY.search(log or "")
        hazards = summary.group(1) if summary else "no summary"
        correct = result["correct"] if result else f"FAILED: {log[-200:]}"
        print(f"| {family} | {variant} | {record['role']} | {hazards} | {correct} |")
        if record["role"] == "tilewave" and (hazards != "0" or correct is not True):
            bad += 1
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR``, ``--run DIR``, ``--racecheck DIR`` (or both)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, help="write CUDA sources (needs TVM)")
    parser.add_argument("--size", choices=SIZES, help="with --emit: only this size")
    parser.add_argument("--run", type=Path, help="compile, check and time (needs the GPU)")
    parser.add_argument("--racecheck", type=Path, help="race-check the small variants")
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="start no race-check job after this many seconds")
    parser.add_argument("--one", nargs=3, metavar=("SIZE_DIR", "FAMILY", "VARIANT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--untimed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        size_dir, family, variant = args.one
        result = run_one(Path(size_dir), family, variant, timed=not args.untimed)
        print("RESULT " + json.dumps(result))
        return 0
    if args.emit is None and args.run is None and args.racecheck is None:
        parser.error("give --emit DIR, --run DIR or --racecheck DIR")
    status, deadline = 0, time.monotonic() + args.budget_s
    if args.emit is not None:
        emit(args.emit, (args.size,) if args.size else SIZES)
    if args.run is not None:
        status |= run(args.run)
    if args.racecheck is not None:
        status |= racecheck(args.racecheck, deadline=deadline)
    return status


if __name__ == "__main__":
    sys.exit(main())
