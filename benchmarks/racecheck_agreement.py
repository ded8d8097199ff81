"""tilewave racecheck (CPU) against compute-sanitizer racecheck + synccheck (H100), per kernel.

Every CUDA example kernel, in its racy and its synchronised variants, is checked twice:

* here (``--emit DIR``: TVM and tilewave, no GPU): each variant is lowered exactly as it is
  built (hand/stripped variants with tilewave's barrier stage disabled, so their sync is what
  the author wrote), ``tilewave.racecheck`` runs one block of the lowered device kernel, and
  the CUDA source, the launch shape and racecheck's verdict go into ``DIR/manifest.json``;
* on the GPU (``--run DIR``: nvcc, cupy, compute-sanitizer; no TVM): every source is compiled
  for sm_90a and launched (random inputs) under ``compute-sanitizer --tool racecheck`` and
  ``--tool synccheck``, each in its own process.

``--run`` prints one row per kernel: racecheck's verdict (kinds found), the sanitizer's
hazard and error counts, and whether they agree. Data races (RAW/WAR/WAW) between threads
are compared with racecheck's hazards, deadlocks and barrier misuse (``barrier-count``,
``barrier-divergent``) with synccheck's errors. Findings compute-sanitizer cannot see are
shown as seen by tilewave only: ``PROXY`` (a generic write read by the async proxy without
``fence.proxy.async``) and races whose one side is a TMA/bulk-copy or wgmma unit (the async
proxy). The sm_90a TMA + wgmma GEMMs run on one block (128 x 256 x 192) with tensor maps
built on the device by ``cuTensorMapEncodeTiled`` (``benchmarks/real_kernels_sm90.py``'s
driver); ``--logs DIR`` keeps every sanitizer log whole.

Exit status 1 when a kernel compute-sanitizer can judge gets a different verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: passes left out when a variant is built "as written": its sync is exactly the author's
AS_WRITTEN = ("tilewave.InsertSharedBarriers", "tilewave.InjectFenceProxy",
              "s_tir.CompactBufferAllocation")
RACES = {"RAW", "WAR", "WAW"}
SYNC_ERRORS = {"deadlock", "barrier-count", "barrier-divergent"}
#: actors of the async proxy (racecheck's names for them), which compute-sanitizer ignores
ASYNC_ACTORS = ("bulk/TMA unit", "wgmma unit")
#: racecheck's message for an mbarrier operation before its ``mbarrier.init`` was made
#: visible: neither sanitizer tool reported it on the H100 (racecheck 0 hazards, synccheck 0
#: errors on both stripped sm90 GEMMs, whose consumers can reach try_wait before the init)
MBARRIER_BEFORE_INIT = "used before mbarrier.init"
NVCC = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin"]
SANITIZER_TIMEOUT_S = 150  # one sanitizer process; the whole --run must fit a 420 s call
#: diagnostic: tilewave-named with every named sync spelled ``bar.sync`` (aligned) at both
#: sites, the form InsertSharedBarriers emitted before it switched to ``barrier.sync``
ALIGNED = "named-aligned"
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")


@dataclass
class Case:
    """One kernel variant: how to get its TIR and how to lower it."""

    kernel: str
    variant: str
    func: Any
    as_written: bool  # True: build without tilewave's sync passes (see AS_WRITTEN)
    multi_buffer_count: int | None = None
    tensor_map_bytes: dict[str, int] = field(default_factory=dict)
    launch: dict[str, Any] | None = None  # sm90 GEMMs: Sm90Launch.to_json()
    nvcc_flags: tuple[str, ...] = ()
    disabled: tuple[str, ...] | None = None  # passes left out, overriding as_written

    def passes_left_out(self) -> list[str]:
        """The passes this variant is built without."""
        if self.disabled is not None:
            return list(self.disabled)
        return list(AS_WRITTEN) if self.as_written else []


def _examples() -> Any:
    sys.path.insert(0, str(REPO / "examples"))
    import importlib

    return importlib.import_module


def cases() -> list[Case]:
    """Every example kernel variant, racy ones included; needs TVM."""
    load = _examples()
    out: list[Case] = []
    shared = load("shared_barriers_racecheck_h100")
    for kernel_id, func in shared.kernels().items():
        for variant, vfunc in shared.variants_of(func, kernel_id).items():
            out.append(Case(kernel_id, variant, vfunc, as_written=True))
            if variant == "tilewave-named":
                out.append(Case(kernel_id, ALIGNED, respell_named_syncs(vfunc, aligned=True),
                                as_written=True))
    mb = load("multibuffer_h100")
    with_war, without_war = mb.kernels()
    for variant, func, count in (("single", with_war, 1), ("double", with_war, 2),
                                 ("double_nowar", without_war, 2),
                                 ("single_nowar", without_war, 1)):
        out.append(Case("mb_window", variant, func, as_written=True, multi_buffer_count=count))
    gemm = load("sm80_gemm")
    m, n, k = gemm.SMALL
    out.append(Case("sm80_gemm", "hand", gemm.hand(m, n, k), as_written=True))
    out.append(Case("sm80_gemm", "stripped", gemm.stripped(m, n, k), as_written=True))
    out.append(Case("sm80_gemm", "stripped+tilewave", gemm.stripped(m, n, k), as_written=False))
    attention = load("sm80_flash_attention")
    bh, seq, _dim = attention.SMALL
    out.append(Case("sm80_flash_attention", "hand", attention.hand(bh, seq), as_written=True))
    out.append(Case("sm80_flash_attention", "stripped", attention.stripped(bh, seq),
                    as_written=True))
    out.append(Case("sm80_flash_attention", "stripped+tilewave", attention.stripped(bh, seq),
                    as_written=False))
    fence = load("fence_proxy_tma_store_h100")
    tile_copy = fence.build_kernel()  # generic stores, a barrier, then a bulk store
    out.append(Case("bulk_store_tile_copy", "as written", tile_copy, as_written=True))
    out.append(Case("bulk_store_tile_copy", "tilewave", tile_copy, as_written=False))
    out += sm90_cases(load)
    return out


def sm90_cases(load: Any) -> list[Case]:
    """The two TMA + wgmma GEMMs at one block (128 x 256 x 192: three k-steps), built as
    ``benchmarks/real_kernels_sm90.py`` builds them, plus the stripped kernel as written."""
    out = []
    sync_stages = ("tilewave.InsertSharedBarriers", "tilewave.InjectFenceProxy")
    for name in ("sm90_tma_wgmma_gemm", "sm90_ws_gemm"):
        module = load(name)
        tma = load("sm90_tma_wgmma_gemm")  # the block shape both share
        size = (tma.BLOCK_M, tma.BLOCK_N, 3 * tma.BLOCK_K)
        launch = module.launch(*size)
        params = [p.name for p in module.hand(*size).params]
        boxes = {p: spec.box_rows * spec.box_cols * 2
                 for p, spec in zip(params, launch.tensor_maps, strict=True)}
        flags = tuple(getattr(module, "NVCC_FLAGS", ()))
        for variant, make, disabled in (("hand", module.hand, sync_stages),
                                        ("stripped", module.stripped, sync_stages),
                                        ("hand+tilewave", module.hand, ()),
                                        ("stripped+tilewave", module.stripped, ())):
            out.append(Case(name, variant, make(*size), as_written=bool(disabled),
                            tensor_map_bytes=boxes, launch=launch.to_json(), nvcc_flags=flags,
                            disabled=disabled))
    return out


def respell_named_syncs(func: Any, aligned: bool) -> Any:
    """``func`` with every named sync (``bar.sync id, n`` or ``barrier.sync id, n``) spelled
    ``bar.sync`` (``aligned``: PTX's ``barrier.sync.aligned``) or ``barrier.sync`` (not
    aligned: what PTX allows when one barrier generation is reached from different
    instructions); needs TVM."""
    from tvm import ir

    from tilewave.ir.intrinsics import callee_name
    from tilewave.ir.walker import TIRMutator, rebuild

    names = ("tirx.ptx.bar_sync_count", "tirx.ptx.barrier_sync_count")
    target = ir.Op.get(names[0] if aligned else names[1])

    class _Respell(TIRMutator):
        def visit_Evaluate(self, node: Any) -> Any:
            call = node.value
            if not isinstance(call, ir.expr.Call) or callee_name(call) not in names:
                return node
            bar_id, count = list(call.args)[:2]
            # bar: .cta, action, predicate; barrier: .cta, action, .aligned, predicate
            args = [bar_id, count, "", "sync", ""] + ([] if aligned else [""])
            return rebuild(node, {"value": rebuild(call, {"op": target, "args": args})})

    return func.with_body(_Respell().visit(func.body))


# ---------------------------------------------------------------- emit (TVM side)


def _device_kernels(mod: Any) -> list[tuple[str, Any]]:
    out = []
    for gv, func in mod.functions.items():
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is not None and target.kind.name == "cuda":
            out.append((gv.name_hint, func))
    return out


def _launch_facts(func: Any) -> dict[str, Any]:
    """Grid, block, dynamic shared bytes and pointer parameters of a lowered kernel."""
    from tvm import tirx

    from tilewave.ir.walker import post_order_visit
    from tilewave.racecheck.memory import np_dtype
    from tilewave.racecheck.program import compile_program

    launch = compile_program(func, "kernel").launch
    views: dict[str, tuple[str, int]] = {}
    dyn = [0]

    def visit(node: Any) -> None:
        kind = type(node).__name__
        if kind == "DeclBuffer" and node.data is not None and node.data in set(func.params):
            ty = node.buffer.ty
            count = 1
            for dim in ty.shape:
                count *= int(dim.value) if isinstance(dim, tirx.IntImm) else 1
            size = count * np_dtype(str(ty.dtype)).itemsize
            old = views.get(node.data.name, ("", 0))
            views[node.data.name] = (str(ty.dtype), max(size, old[1]))
        if kind == "AllocBuffer" and str(node.buffer.ty.storage_scope) == "shared.dyn":
            ty = node.buffer.ty
            count = 1
            for dim in ty.shape:
                count *= int(dim.value)
            dyn[0] += count * np_dtype(str(ty.dtype)).itemsize

    post_order_visit(func.body, visit)
    axes = ("x", "y", "z")
    return {
        "grid": [launch.blocks.get(f"blockIdx.{a}", 1) for a in axes],
        "block": [launch.threads.get(f"threadIdx.{a}", 1) for a in axes],
        "dynamic_smem": dyn[0],
        "params": [{"name": p.name, "dtype": views.get(p.name, ("uint8", 0))[0],
                    "bytes": views.get(p.name, ("", 0))[1]} for p in func.params],
    }


def emit(out_dir: Path) -> dict:
    """Lower every case, racecheck it, write its CUDA source and the manifest."""
    import tvm

    import tilewave

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases():
        disabled = case.passes_left_out()
        slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{case.kernel}__{case.variant}")
        row: dict[str, Any] = {"kernel": case.kernel, "variant": case.variant, "file": slug}
        try:
            with tvm.transform.PassContext(disabled_pass=disabled):
                lowered = tilewave.lower(case.func, "sm_90a",
                                         multi_buffer_count=case.multi_buffer_count)
                source = tilewave.build(case.func, "sm_90a",
                                        multi_buffer_count=case.multi_buffer_count).source
        except Exception as err:  # a row, never a crash
            row["error"] = f"{type(err).__name__}: {err}"
            rows.append(row)
            continue
        name, kernel = _device_kernels(lowered)[0]
        start = time.perf_counter()
        report = tilewave.racecheck(kernel, "sm_90a", func_name=name,
                                    tensor_map_bytes=case.tensor_map_bytes)
        row.update({
            "kernel_symbol": name,
            "racecheck_seconds": round(time.perf_counter() - start, 2),
            "racecheck_kinds": sorted(report.kinds() - {"uninitialised"}),
            "racecheck_findings": [{"kind": f.kind, "actors": list(f.threads),
                                    "message": f.message} for f in report.errors],
            "racecheck_text": report.format(),
            "needs_tensor_maps": bool(case.tensor_map_bytes),
            "nvcc_flags": list(case.nvcc_flags),
        })
        row.update(_launch_facts(kernel))
        if case.launch is not None:
            row["launch"] = case.launch
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{slug}.cu").write_text(source)
        rows.append(row)
        print(f"{case.kernel:22s} {case.variant:18s} {row['racecheck_kinds']} "
              f"{row['racecheck_seconds']}s", flush=True)
    manifest = {"rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# ---------------------------------------------------------------- run (GPU side)


def launch_one(in_dir: Path, slug: str) -> None:
    """Launch one kernel on random inputs (run under compute-sanitizer)."""
    import numpy as np

    row = next(r for r in json.loads((in_dir / "manifest.json").read_text())["rows"]
               if r["file"] == slug)
    if "launch" in row:
        _launch_tensor_map_kernel(in_dir, row)
        return
    import cupy as cp

    module = cp.RawModule(path=str(in_dir / f"{slug}.cubin"))
    kernel = module.get_function(row["kernel_symbol"])
    if row["dynamic_smem"] > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = row["dynamic_smem"]
    rng = np.random.default_rng(0)
    args = []
    for param in row["params"]:
        dtype = np.dtype(param["dtype"]) if param["dtype"] not in ("", "bfloat16") else np.uint8
        count = max(1, param["bytes"] // dtype.itemsize)
        host = rng.standard_normal(count).astype(dtype) if dtype.kind == "f" else \
            rng.integers(0, 4, count).astype(dtype)
        args.append(cp.asarray(host))
    kernel(tuple(row["grid"]), tuple(row["block"]), tuple(args),
           shared_mem=row["dynamic_smem"])
    cp.cuda.runtime.deviceSynchronize()


def _launch_tensor_map_kernel(in_dir: Path, row: dict) -> None:
    """Launch an sm90 GEMM through the driver API with tensor maps encoded here, and print
    its error against ``A.float() @ B.float().T``."""
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    from real_kernels_sm90 import Driver

    spec = row["launch"]
    m, n, k = spec["m"], spec["n"], spec["k"]
    gen = torch.Generator(device="cuda").manual_seed(0)  # makes torch's context current
    tensors = {
        "A": torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen),
        "B": torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen),
        "C": torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16),
    }
    driver = Driver()
    func = driver.function(in_dir / f"{row['file']}.cubin", row["kernel_symbol"],
                           row["dynamic_smem"])
    maps = [driver.tensor_map(tensors[t["tensor"]], t) for t in spec["tensor_maps"]]
    driver.launch(func, spec["grid"], spec["block"], row["dynamic_smem"],
                  torch.cuda.current_stream().cuda_stream, maps)
    torch.cuda.synchronize()
    expected = tensors["A"].float() @ tensors["B"].float().t()
    err = (tensors["C"].float() - expected).abs().nan_to_num(float("inf")).max()
    print(f"racecheck_agreement: {row['file']} max relative error "
          f"{float(err) / float(expected.abs().max()):.3g}")


def _sanitize(in_dir: Path, slug: str, tool: str,
              log_dir: Path | None = None) -> tuple[int | None, str, int | None]:
    """Run one launch under ``tool``: (its count, the log's tail, the exit status);
    the whole log goes to ``log_dir/<slug>.<tool>.log``."""
    command = ["compute-sanitizer", "--tool", tool]
    if tool == "racecheck":
        command += ["--racecheck-report", "hazard"]
    command += [sys.executable, str(Path(__file__).resolve()), "--launch", str(in_dir), slug]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=SANITIZER_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        text = f"timeout after {SANITIZER_TIMEOUT_S} s\n{err.stdout or ''}{err.stderr or ''}"
        if log_dir is not None:
            (log_dir / f"{slug}.{tool}.log").write_text(text)
        return None, "timeout", None
    text = done.stdout + done.stderr
    if log_dir is not None:
        (log_dir / f"{slug}.{tool}.log").write_text(" ".join(command) + "\n" + text)
    pattern = _RACE_SUMMARY if tool == "racecheck" else _ERROR_SUMMARY
    match = pattern.search(text)
    if tool == "racecheck" and match is None:
        match = _ERROR_SUMMARY.search(text)
    return (int(match.group(1)) if match else None), text[-600:], done.returncode


def run(in_dir: Path, parallel: int = 8, results_file: Path | None = None,
        log_dir: Path | None = None) -> int:
    """Compile, sanitize and print the agreement table (the counts and log tails go to
    ``results_file``, written after every kernel; whole logs to ``log_dir``)."""
    rows = json.loads((in_dir / "manifest.json").read_text())["rows"]
    gpu_rows = [r for r in rows if "error" not in r and (not r["needs_tensor_maps"]
                                                         or "launch" in r)]
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)

    def compile_one(row: dict) -> str:
        cubin, source = in_dir / f"{row['file']}.cubin", in_dir / f"{row['file']}.cu"
        done = subprocess.run([*NVCC, *row.get("nvcc_flags", []), "-o", str(cubin),
                               str(source)], capture_output=True, text=True)
        return done.stderr[-400:] if done.returncode else ""

    with ThreadPoolExecutor(parallel) as pool:
        errors = dict(zip([r["file"] for r in gpu_rows], pool.map(compile_one, gpu_rows),
                          strict=True))

    results: dict[str, dict] = {}
    lock = threading.Lock()

    def check(row: dict) -> None:
        if errors[row["file"]]:
            results[row["file"]] = {"compile_error": errors[row["file"]]}
            return
        race, race_log, race_rc = _sanitize(in_dir, row["file"], "racecheck", log_dir)
        sync, sync_log, sync_rc = _sanitize(in_dir, row["file"], "synccheck", log_dir)
        with lock:
            results[row["file"]] = {"racecheck": race, "synccheck": sync,
                                    "race_log": race_log, "sync_log": sync_log,
                                    "race_rc": race_rc, "sync_rc": sync_rc}
            if results_file is not None:  # kept up to date: a cut-off run keeps what it did
                results_file.write_text(json.dumps(results, indent=2) + "\n")
        print(f"sanitized {row['file']}: racecheck {race}, synccheck {sync}", flush=True)

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(check, gpu_rows))
    if results_file is not None:
        results_file.write_text(json.dumps(results, indent=2) + "\n")
    return print_table(rows, results, in_dir)


def _uses_bar_arrive(in_dir: Path | None, row: dict) -> bool:
    if in_dir is None or not (in_dir / f"{row['file']}.cu").exists():
        return False
    return "bar.arrive" in (in_dir / f"{row['file']}.cu").read_text()


def split_findings(row: dict) -> tuple[set[str], set[str]]:
    """racecheck's error kinds of ``row``: (what compute-sanitizer can also see, what only
    tilewave sees: ``PROXY``, races with an async-proxy unit on one side, and mbarriers used
    before their initialisation is ordered before the use)."""
    findings = row.get("racecheck_findings")
    if findings is None:  # a manifest from before findings were recorded
        kinds = set(row.get("racecheck_kinds", []))
        return kinds - {"PROXY"}, kinds & {"PROXY"}
    both: set[str] = set()
    only: set[str] = set()
    for finding in findings:
        kind = finding["kind"]
        if kind == "PROXY":
            only.add(kind)
        elif MBARRIER_BEFORE_INIT in finding.get("message", ""):
            only.add("mbarrier used before init")
        elif kind in RACES and any(a in actor for actor in finding["actors"]
                                   for a in ASYNC_ACTORS):
            only.add(f"{kind} (async proxy)")
        else:
            both.add(kind)
    return both, only


def print_table(rows: list[dict], results: dict[str, dict], in_dir: Path | None = None) -> int:
    """One row per kernel variant: both verdicts and whether they agree.

    compute-sanitizer's racecheck does not count ``bar.arrive`` as ordering the arriving
    thread's earlier accesses, which PTX guarantees ("The barrier{.cta}.sync or
    barrier{.cta}.red or barrier{.cta}.arrive instruction guarantees that when the barrier
    completes, prior memory accesses requested by this thread are performed relative to all
    threads participating in the barrier", PTX ISA, bar): its hazards on kernels that use
    ``bar.arrive`` are shown but not judged.
    """
    status = 0
    print("| kernel | variant | tilewave racecheck | cs racecheck hazards | cs synccheck errors "
          "| agree | only tilewave sees |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['kernel']} | {row['variant']} | build error: {row['error'][:60]} "
                  "| - | - | - | - |")
            continue
        kinds, only_kinds = split_findings(row)
        mine = ", ".join(sorted(kinds | only_kinds)) or "clean"
        only = ", ".join(sorted(only_kinds))
        result = results.get(row["file"])
        if result is None:
            why = "needs host TMA tensor maps" if row.get("needs_tensor_maps") and \
                "launch" not in row else "not run"
            print(f"| {row['kernel']} | {row['variant']} | {mine} | {why} | - | - | {only} |")
            continue
        if "compile_error" in result:
            print(f"| {row['kernel']} | {row['variant']} | {mine} | nvcc failed | - | - | "
                  f"{only} |")
            status = 1
            continue
        race, sync = result["racecheck"], result["synccheck"]
        judged = race is not None and sync is not None
        agree = judged and (bool(kinds & RACES) == (race > 0)) and (
            bool(kinds & SYNC_ERRORS) == (sync > 0))
        arrive = _uses_bar_arrive(in_dir, row) and race is not None and race > 0 and not (
            kinds & RACES)
        if arrive:
            verdict = "not judged: cs ignores bar.arrive ordering"
        elif not judged:
            timeout = "timeout" in (result.get("race_log", ""), result.get("sync_log", ""))
            verdict = f"cs gave no verdict ({'timeout' if timeout else 'no summary'})"
        else:
            verdict = "yes" if agree else "NO"
            status |= 0 if agree else 1
        print(f"| {row['kernel']} | {row['variant']} | {mine} | {race} | {sync} | {verdict} "
              f"| {only} |")
    return status


def main(argv: list[str] | None = None) -> int:
    """``--emit DIR`` (TVM side), ``--run DIR`` (GPU side), ``--launch DIR SLUG`` (internal)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, help="lower, racecheck and write CUDA sources")
    parser.add_argument("--run", type=Path, help="compile and run under compute-sanitizer")
    parser.add_argument("--results", type=Path,
                        help="with --run: write the sanitizer counts and log tails here")
    parser.add_argument("--logs", type=Path, help="with --run: keep every sanitizer log here")
    parser.add_argument("--table", nargs=2, type=Path, metavar=("DIR", "RESULTS"),
                        help="reprint the table of an earlier --run from its --results file")
    parser.add_argument("--launch", nargs=2, metavar=("DIR", "SLUG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.launch:
        launch_one(Path(args.launch[0]), args.launch[1])
        return 0
    if args.table:
        rows = json.loads((args.table[0] / "manifest.json").read_text())["rows"]
        return print_table(rows, json.loads(args.table[1].read_text()), args.table[0])
    if args.emit is None and args.run is None:
        parser.error("give --emit DIR or --run DIR")
    if args.emit is not None:
        emit(args.emit)
    if args.run is not None:
        import shutil

        if shutil.which("compute-sanitizer") is None or shutil.which("nvcc") is None:
            print("racecheck_agreement: no nvcc / compute-sanitizer here; skipping the GPU "
                  "side (run --run DIR on the H100)")
            return 0
        return run(args.run, results_file=args.results, log_dir=args.logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
