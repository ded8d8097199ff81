"""TIRx kernels on an H100: hand-synchronised vs stripped + ``tir_pipeline="tilewave-tirx"``.

The kernels (examples/tirx_transpose.py, tirx_reduction.py, tirx_cp_async_gemm.py) are written
in TVM's TIRx with every barrier, ``cp.async`` wait and commit placed by hand. Three variants
of each:

* ``hand``: the kernel as written, ``tvm.compile(..., tir_pipeline="tirx")`` (TVM's TIRx
  pipeline inserts no synchronisation);
* ``stripped``: the kernel without its synchronisation, same pipeline (racy; for contrast);
* ``tilewave``: the stripped kernel through ``tir_pipeline="tilewave-tirx"``.

Two machines:

* ``python examples/tirx_h100.py --emit DIR`` (TVM + tilewave, no GPU) writes
  ``DIR/<kernel>__<variant>.cu`` and ``DIR/manifest.json``: launch shape, arguments, the
  synchronisation statements of each source, and the shared-memory hazards tilewave's
  verifier finds in each variant's IR (``tilewave`` after its barrier and fence stages);
* ``python examples/tirx_h100.py --run DIR [--racecheck]`` (nvcc, cupy, numpy; no TVM)
  compiles each source for sm_90a, launches it on random data, compares with NumPy, times
  it (median of CUDA-event timings) and prints one table; ``--racecheck`` also runs each
  variant under ``compute-sanitizer --tool racecheck``.

The Hopper TMA + wgmma GEMM (examples/tirx_tma_wgmma_gemm.py) needs tensor maps, which cupy
cannot pass: ``--emit`` also writes ``DIR/sm90`` and ``--run`` / ``--racecheck`` hand it to
``examples/tirx_h100_hopper.py`` (the CUDA driver API launcher of
benchmarks/real_kernels_sm90.py; hand and tilewave timed interleaved in one process, TFLOP/s
next to ``torch.matmul``). ``--part sm80`` / ``--part sm90`` runs one of the two parts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KERNEL_MODULES = ("tirx_transpose", "tirx_reduction", "tirx_cp_async_gemm")
VARIANTS = ("hand", "stripped", "tilewave")
PIPELINE = {"hand": "tirx", "stripped": "tirx", "tilewave": "tilewave-tirx"}
# tilewave's stages whose output is captured, in pipeline order
SYNCED_STAGES = ("tilewave.InsertSharedBarriers", "tilewave.InjectFenceProxy")
#: The synchronisation statements counted in each kernel body, by kind.
SYNC_PATTERNS = {
    "barriers": r"__syncthreads\(\);|tvm_builtin_cuda_cta_sync\(\);",
    "cp.async waits": r"cp_async_wait_group\w*\(\);",
    "cp.async commits": r"cp_async_commit_group\w*\(\);",
}
_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
SANITIZER_TIMEOUT_S = 90


def sync_counts(source: str) -> dict[str, int]:
    """Synchronisation statements in the kernel body of a CUDA source (not its helpers)."""
    body = source[source.rindex("__global__") :]
    return {kind: len(re.findall(pattern, body)) for kind, pattern in SYNC_PATTERNS.items()}


# --- the TVM side -------------------------------------------------------------------------------
def _compile(func: Any, pipeline: str) -> tuple[str, dict[str, Any]]:
    """CUDA source of ``func``, and IR captured inside the pipeline (by stage name)."""
    import tvm

    captured: dict[str, Any] = {}

    @tvm.instrument.pass_instrument
    class Capture:
        def run_after_pass(self, mod: Any, info: Any) -> None:
            if info.name in ("tirx.AnnotateEntryFunc", *SYNCED_STAGES):
                # a snapshot: later passes may update the module object in place
                snapshot = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
                captured.setdefault(info.name, snapshot)

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(instruments=[Capture()]):
        ex = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=pipeline)
    return ex.mod.imports[0].inspect_source(), captured


def synced_ir(captured: dict[str, Any]) -> Any:
    """The IR to verify: after tilewave's last synchronisation stage when the pipeline ran it
    (the proxy fences come from InjectFenceProxy, after the barriers), else the input of
    TVM's host/device split."""
    for stage in reversed(SYNCED_STAGES):
        if stage in captured:
            return captured[stage]
    return captured["tirx.AnnotateEntryFunc"]


def launch_shape(mod: Any) -> tuple[list[int], list[int]]:
    """``(grid, block)`` as [x, y, z] from the ``thread_extent`` attributes of lowered IR."""
    from tvm import tirx

    from tilewave.ir.walker import post_order_visit

    extents: dict[str, int] = {}

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
            extents[str(node.node.thread_tag)] = int(node.value)

    for func in mod.functions.values():
        post_order_visit(func.body, visit)
    grid = [extents.get(f"blockIdx.{a}", 1) for a in "xyz"]
    block = [extents.get(f"threadIdx.{a}", 1) for a in "xyz"]
    return grid, block


def _hazards(captured: dict[str, Any]) -> int:
    """The verifier's hazard count on :func:`synced_ir` of one compile's captured IR."""
    from tvm import tirx

    from tilewave.analysis.shared_hazards import find_shared_hazards

    mod = synced_ir(captured)
    return sum(
        len(find_shared_hazards(f)) for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)
    )


def variant_sources(module: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    """``variant -> (CUDA source, facts)`` for one kernel module."""
    funcs = {"hand": module.hand, "stripped": module.stripped(), "tilewave": module.stripped()}
    out = {}
    for variant in VARIANTS:
        source, captured = _compile(funcs[variant], PIPELINE[variant])
        grid, block = launch_shape(captured["tirx.AnnotateEntryFunc"])
        facts = {
            "sync": sync_counts(source),
            "hazards": _hazards(captured),
            "grid": grid,
            "block": block,
        }
        out[variant] = (source, facts)
    return out


def emit(out_dir: Path) -> int:
    """Write every variant's CUDA source and the manifest."""
    import importlib

    sys.path.insert(0, str(HERE))
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        problem = dict(module.PROBLEM)
        entry = {**problem, "kernel": f"{problem['name']}_kernel", "variants": {}}
        for variant, (source, facts) in variant_sources(module).items():
            (out_dir / f"{problem['name']}__{variant}.cu").write_text(source)
            entry["variants"][variant] = facts
            print(f"{problem['name']:<20} {variant:<9} {facts}")
        manifest.append(entry)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    import tirx_h100_hopper

    tirx_h100_hopper.emit(out_dir / tirx_h100_hopper.SUBDIR, _compile, _hazards)
    return 0


# --- the GPU side (no TVM) ------------------------------------------------------------------------
def _reference(kind: str, inputs: dict[str, Any]) -> Any:
    import numpy as np

    if kind == "transpose":
        return np.ascontiguousarray(inputs["A"].T)
    if kind == "block_sum":
        blocks = inputs["A"].reshape(16, -1).astype(np.float64)
        return blocks.sum(axis=1)
    if kind == "matmul":
        return inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    raise SystemExit(f"unknown reference {kind!r}")


def _cubin(in_dir: Path, stem: str) -> Path:
    source, cubin = in_dir / f"{stem}.cu", in_dir / f"{stem}.cubin"
    subprocess.run(
        ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3", "-o", cubin, source],
        check=True,
    )
    return cubin


def run_variant(in_dir: Path, entry: dict[str, Any], variant: str, repeats: int) -> dict:
    """Launch one variant: its max error against NumPy and its median time in microseconds."""
    import cupy as cp
    import numpy as np

    stem = f"{entry['name']}__{variant}"
    module = cp.RawModule(path=str(in_dir / f"{stem}.cubin"))
    kernel = module.get_function(entry["kernel"])
    rng = np.random.default_rng(0)
    host = {
        name: rng.standard_normal(shape).astype(dtype)
        for name, shape, dtype, role in entry["args"]
        if role == "in"
    }
    device = {name: cp.asarray(array) for name, array in host.items()}
    for name, shape, dtype, role in entry["args"]:
        if role == "out":
            device[name] = cp.full(shape, np.nan, dtype=dtype)
    facts = entry["variants"][variant]
    args = tuple(device[name] for name, *_ in entry["args"])
    launch = (tuple(facts["grid"]), tuple(facts["block"]), args)
    kernel(*launch)
    cp.cuda.Device().synchronize()
    out_name = next(name for name, *_, role in entry["args"] if role == "out")
    got = cp.asnumpy(device[out_name]).astype(np.float64)
    want = _reference(entry["reference"], host)
    error = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    times = []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(repeats):
        start.record()
        kernel(*launch)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    return {"error": error, "ok": bool(error < 1e-4), "us": float(np.median(times))}


def _racecheck(in_dir: Path, name: str, variant: str) -> str:
    command = [
        "compute-sanitizer", "--tool", "racecheck", "--racecheck-report", "hazard",
        sys.executable, os.path.abspath(__file__), "--run", str(in_dir),
        "--only", f"{name}:{variant}", "--repeats", "1", "--no-compile",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SANITIZER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "timeout"
    summary = _SUMMARY.search(done.stdout + done.stderr)
    return summary.group(1) if summary else f"no summary (exit {done.returncode})"


def run(in_dir: Path, only: str | None, repeats: int, compile_first: bool, sanitize: bool) -> int:
    """Compile, launch, compare and time every variant; print the table."""
    manifest = json.loads((in_dir / "manifest.json").read_text())
    rows, failed = [], 0
    for entry in manifest:
        hand_us = None
        for variant in VARIANTS:
            if only is not None and only != f"{entry['name']}:{variant}":
                continue
            if compile_first:
                _cubin(in_dir, f"{entry['name']}__{variant}")
            result = run_variant(in_dir, entry, variant, repeats)
            hand_us = result["us"] if variant == "hand" else hand_us
            facts = entry["variants"][variant]
            sync = "/".join(str(n) for n in facts["sync"].values())
            ratio = f"{result['us'] / hand_us:.2f}" if hand_us else "-"
            races = _racecheck(in_dir, entry["name"], variant) if sanitize else "-"
            rows.append(
                (entry["name"], variant, sync, str(facts["hazards"]), f"{result['error']:.1e}",
                 str(result["ok"]), f"{result['us']:.1f}", ratio, races)
            )  # fmt: skip
            failed += variant != "stripped" and not result["ok"]
    header = ("kernel", "variant", "bar/wait/commit", "verifier", "max rel err", "correct",
              "us", "vs hand", "racecheck")  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    return 1 if failed else 0


def run_parts(in_dir: Path, args: argparse.Namespace) -> int:
    """``--run``: the cupy-launched kernels (``sm80`` part) and the Hopper GEMM (``sm90``)."""
    status = 0
    if args.part in ("all", "sm80"):
        status |= run(in_dir, args.only, args.repeats, not args.no_compile, args.racecheck)
    if args.part in ("all", "sm90") and args.only is None:
        sys.path.insert(0, str(HERE))
        import tirx_h100_hopper

        hopper_dir = in_dir / tirx_h100_hopper.SUBDIR
        status |= tirx_h100_hopper.run(hopper_dir)
        if args.racecheck:
            status |= tirx_h100_hopper.racecheck(hopper_dir)
    return status


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR`` (TVM side) or ``--run DIR`` (GPU side)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, metavar="DIR")
    parser.add_argument("--run", type=Path, metavar="DIR")
    parser.add_argument("--only", help="KERNEL:VARIANT")
    parser.add_argument("--part", choices=("all", "sm80", "sm90"), default="all")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--racecheck", action="store_true")
    args = parser.parse_args(argv)
    if args.emit is not None:
        return emit(args.emit)
    if args.run is not None:
        return run_parts(args.run, args)
    parser.error("give --emit DIR or --run DIR")
    return 2


if __name__ == "__main__":
    sys.exit(main())
