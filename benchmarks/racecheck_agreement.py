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
hazard and error counts, and whether they agree. Data races (RAW/WAR/WAW) are compared with
racecheck's hazards, deadlocks and barrier misuse with synccheck's errors; ``PROXY``
findings (a generic write read by the async proxy without ``fence.proxy.async``) are shown
as seen by tilewave only, since compute-sanitizer does not model the async proxy. Kernels
that need host-built TMA tensor maps are checked here only.

Exit status 1 when a kernel compute-sanitizer can judge gets a different verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
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
SYNC_ERRORS = {"deadlock", "barrier-count"}
NVCC = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin"]
SANITIZER_TIMEOUT_S = 240  # racecheck on a racy multi-block kernel can take minutes
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
    tma = load("sm90_tma_wgmma_gemm")
    size = (tma.BLOCK_M, tma.BLOCK_N, 3 * tma.BLOCK_K)  # one block, three k-steps
    launch = tma.launch(*size)
    params = [p.name for p in tma.hand(*size).params]
    boxes = {p: s.box_rows * s.box_cols * 2 for p, s in zip(params, launch.tensor_maps,
                                                             strict=True)}
    for variant, func in (("hand", tma.hand(*size)), ("stripped", tma.stripped(*size))):
        out.append(Case("sm90_tma_wgmma_gemm", variant, func, as_written=True,
                        tensor_map_bytes=boxes))
    return out


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
        disabled = list(AS_WRITTEN) if case.as_written else []
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
            "racecheck_text": report.format(),
            "needs_tensor_maps": bool(case.tensor_map_bytes),
        })
        row.update(_launch_facts(kernel))
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
    import cupy as cp
    import numpy as np

    row = next(r for r in json.loads((in_dir / "manifest.json").read_text())["rows"]
               if r["file"] == slug)
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


def _sanitize(in_dir: Path, slug: str, tool: str) -> tuple[int | None, str]:
    command = ["compute-sanitizer", "--tool", tool]
    if tool == "racecheck":
        command += ["--racecheck-report", "hazard"]
    command += [sys.executable, str(Path(__file__).resolve()), "--launch", str(in_dir), slug]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=SANITIZER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    text = done.stdout + done.stderr
    pattern = _RACE_SUMMARY if tool == "racecheck" else _ERROR_SUMMARY
    match = pattern.search(text)
    if tool == "racecheck" and match is None:
        match = _ERROR_SUMMARY.search(text)
    return (int(match.group(1)) if match else None), text[-600:]


def run(in_dir: Path, parallel: int = 4, results_file: Path | None = None) -> int:
    """Compile, sanitize and print the agreement table (and save the logs to
    ``results_file``)."""
    rows = json.loads((in_dir / "manifest.json").read_text())["rows"]
    gpu_rows = [r for r in rows if "error" not in r and not r["needs_tensor_maps"]]

    def compile_one(row: dict) -> str:
        cubin, source = in_dir / f"{row['file']}.cubin", in_dir / f"{row['file']}.cu"
        done = subprocess.run([*NVCC, "-o", str(cubin), str(source)], capture_output=True,
                              text=True)
        return done.stderr[-400:] if done.returncode else ""

    with ThreadPoolExecutor(parallel) as pool:
        errors = dict(zip([r["file"] for r in gpu_rows], pool.map(compile_one, gpu_rows),
                          strict=True))

    def check(row: dict) -> tuple[str, dict]:
        if errors[row["file"]]:
            return row["file"], {"compile_error": errors[row["file"]]}
        race, race_log = _sanitize(in_dir, row["file"], "racecheck")
        sync, sync_log = _sanitize(in_dir, row["file"], "synccheck")
        return row["file"], {"racecheck": race, "synccheck": sync, "race_log": race_log,
                             "sync_log": sync_log}

    with ThreadPoolExecutor(parallel) as pool:
        results = dict(pool.map(check, gpu_rows))
    if results_file is not None:
        results_file.write_text(json.dumps(results, indent=2) + "\n")
    return print_table(rows, results, in_dir)


def _uses_bar_arrive(in_dir: Path | None, row: dict) -> bool:
    if in_dir is None or not (in_dir / f"{row['file']}.cu").exists():
        return False
    return "bar.arrive" in (in_dir / f"{row['file']}.cu").read_text()


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
        kinds = set(row.get("racecheck_kinds", []))
        mine = ", ".join(sorted(kinds)) or "clean"
        if "error" in row:
            print(f"| {row['kernel']} | {row['variant']} | build error: {row['error'][:60]} "
                  "| - | - | - | - |")
            continue
        only = ", ".join(sorted(kinds & {"PROXY"}))
        result = results.get(row["file"])
        if result is None:
            why = "needs host TMA tensor maps" if row.get("needs_tensor_maps") else "not run"
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
    parser.add_argument("--results", type=Path, help="with --run: write the sanitizer logs here")
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
        return run(args.run, results_file=args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
