"""sm_90a GEMMs on an H100 (TMA, mbarriers, wgmma): hand-synchronised vs tilewave variants.

``benchmarks/real_kernels_h100.py`` launches its kernels through cupy with pointer
arguments; these kernels take ``const __grid_constant__ CUtensorMap`` parameters, which
cupy's launcher cannot pass, so they have this runner of the same shape (emit here, run
there), launching through the CUDA driver API (``libcuda.so.1`` via ctypes:
``cuTensorMapEncodeTiled``, ``cuModuleLoad``, ``cuFuncSetAttribute``, ``cuLaunchKernel``).
It reuses that script's timing and subprocess helpers.

Kernels (:data:`MODULES`): ``examples/sm90_tma_wgmma_gemm.py`` and
``examples/sm90_ws_gemm.py``. Variants of each:

* ``hand``: the hand-synchronised kernel, tilewave's barrier and fence stages left out;
* ``hand+tilewave``: the hand kernel through tilewave's full pass list;
* ``stripped+tilewave``: the kernel without its block / named barriers and fences,
  re-synchronised by tilewave (issue 11's variant (b)).

* ``python benchmarks/real_kernels_sm90.py --emit DIR`` (TVM, tilewave; no GPU): writes
  ``DIR/<size>/<kernel>__<variant>.cu`` and ``manifest.json`` for the benchmark size
  (``full``, 4096^3) and a race-check size (``small``): launch shape, tensor maps, dynamic
  shared memory, nvcc flags, the synchronisation in the kernel body and inside the K loop
  (``__syncthreads``, named ``bar.sync``/``bar.arrive``, ``fence.proxy.async``), the
  InsertSharedBarriers time, or the build error (a row, not a crash).
* ``python real_kernels_sm90.py --run DIR`` (nvcc, torch; no TVM): compiles with
  ``nvcc -gencode arch=compute_90a,code=sm_90a``, runs each variant in its own process,
  checks ``C`` against ``A.float() @ B.float().T``, times the median of 30 launches with L2
  flushed, and prints TFLOP/s with the ratios to cuBLAS (``torch.matmul``) and to ``hand``.
* ``--racecheck DIR``: the small size under ``compute-sanitizer --tool racecheck``.

Exit status 1 when a tilewave variant fails to build, is wrong, or (with ``--racecheck``)
has a hazard.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import io
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "benchmarks"))

from real_kernels_h100 import TOLERANCE, _median_ms, _subprocess_result  # noqa: E402

MODULES = ("sm90_tma_wgmma_gemm", "sm90_ws_gemm")
SIZES = {"full": (4096, 4096, 4096), "small": (256, 256, 512)}
NVCC = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v"]
RUN_TIMEOUT_S = 90
RACECHECK_TIMEOUT_S = 150
_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores")
_K_LOOP = re.compile(r"for \(int kt = 0; kt < \d+; \+\+kt\) \{")
_SYNC_PATTERNS = {
    "syncthreads": re.compile(r"__syncthreads\(\)"),
    "bar_sync": re.compile(r"tvm_builtin_ptx_bar(rier)?_sync\w*\("),
    "bar_arrive": re.compile(r"tvm_builtin_ptx_bar(rier)?_arrive\w*\("),
    "fence_proxy_async": re.compile(r"tvm_builtin_ptx_fence_proxy_proxy_async\w*\("),
    "fence_mbarrier_init": re.compile(r"tvm_builtin_ptx_fence_mbarrier_init\w*\("),
}
BARRIER_STAGE = "tilewave.InsertSharedBarriers"
FENCE_STAGE = "tilewave.InjectFenceProxy"


# ---------------------------------------------------------------- emit (TVM side)


def kernel_body(source: str) -> str:
    """The ``__global__`` function definitions of a CUDA source (helpers left out)."""
    start = source.find('extern "C" __global__')
    return source[start:] if start >= 0 else source


def _block(text: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_brace : i + 1]
    return text[open_brace:]


def sync_counts(text: str) -> dict[str, int]:
    """How many of each synchronisation statement ``text`` has (see ``_SYNC_PATTERNS``)."""
    return {name: len(pattern.findall(text)) for name, pattern in _SYNC_PATTERNS.items()}


def k_loop_sync(source: str) -> dict[str, int]:
    """Synchronisation statements inside the kernel's K loops (``for (int kt ...)``), summed
    over every such loop (the warp-specialised kernel has one per role)."""
    body = kernel_body(source)
    total = {name: 0 for name in _SYNC_PATTERNS}
    for match in _K_LOOP.finditer(body):
        for name, count in sync_counts(_block(body, match.end() - 1)).items():
            total[name] += count
    return total


def _dynamic_smem(device_mod) -> int:
    from tvm import tirx

    from tilewave.ir.walker import post_order_visit

    sizes: list[int] = []

    def visit(node):
        if isinstance(node, tirx.AllocBuffer) and str(node.buffer.ty.storage_scope) == (
            "shared.dyn"
        ):
            ty = node.buffer.ty
            bits = int(ty.shape[0]) * tvm_bits(ty.dtype)
            sizes.append(bits // 8)

    for func in device_mod.functions.values():
        post_order_visit(func.body, visit)
    return sum(sizes)


def tvm_bits(dtype) -> int:
    """Bits of one element of ``dtype``."""
    import tvm

    d = tvm.DataType(str(dtype))
    return d.bits * d.lanes


def _build(func, disabled: list[str]) -> tuple[str, int, float | None]:
    import tvm

    from tilewave.instruments import PassTimings
    from tilewave.pipeline import build

    timings = PassTimings(stream=io.StringIO())
    with tvm.transform.PassContext(disabled_pass=disabled):
        result = build(func, "sm_90a", instruments=[timings])
    barrier_s = [s for name, s in timings.rows if BARRIER_STAGE in name]
    return result.source, _dynamic_smem(result.device), barrier_s[0] if barrier_s else None


def variants(module) -> dict[str, tuple[object, list[str]]]:
    """Variant name -> (how to get the PrimFunc, stages to leave out)."""
    return {
        "hand": (module.hand, [BARRIER_STAGE, FENCE_STAGE]),
        "hand+tilewave": (module.hand, []),
        "stripped+tilewave": (module.stripped, []),
    }


def emit_size(out_dir: Path, size: tuple[int, int, int]) -> dict:
    """Build every variant of every module at ``size``; write sources and the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"kernels": {}}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        launch = module.launch(*size)
        entry = {**launch.to_json(), "flops": launch.flops,
                 "nvcc_flags": list(getattr(module, "NVCC_FLAGS", ())), "variants": {}}
        for variant, (make, disabled) in variants(module).items():
            start = time.perf_counter()
            record: dict = {"role": "hand" if variant == "hand" else "tilewave"}
            try:
                source, smem, barrier_s = _build(make(*size), disabled)
            except Exception as err:  # a failed build is a row of the table
                record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:400]
            else:
                file_name = f"{module.NAME}__{variant.replace('+', '_')}.cu"
                (out_dir / file_name).write_text(source)
                record.update(file=file_name, dynamic_smem=smem,
                              sync=sync_counts(kernel_body(source)),
                              k_loop_sync=k_loop_sync(source),
                              barrier_pass_ms=None if barrier_s is None else barrier_s * 1e3)
            record["build_s"] = round(time.perf_counter() - start, 2)
            entry["variants"][variant] = record
            print(f"  {module.NAME:<22} {variant:<18} {record['build_s']:6.2f} s  "
                  f"{record.get('error', 'ok')}")
        manifest["kernels"][module.NAME] = entry
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def emit(out_dir: Path) -> None:
    """Every size into ``out_dir/<size>``."""
    for name, size in SIZES.items():
        print(f"emitting {name} {size} -> {out_dir / name}")
        emit_size(out_dir / name, size)


# ---------------------------------------------------------------- GPU side (no TVM)

_SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
_FLOAT16 = 6  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16
_L2_PROMOTION_256B = 3
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class _TensorMap(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_uint64 * 16)]  # CUtensorMap: 128 bytes, 64-aligned


def _aligned_tensor_map() -> _TensorMap:
    # ctypes cannot align a Structure to 64 bytes: place one inside a larger buffer
    raw = ctypes.create_string_buffer(ctypes.sizeof(_TensorMap) + 64)
    tmap = _TensorMap.from_address((ctypes.addressof(raw) + 63) & ~63)
    tmap._keep = raw  # the buffer lives as long as the map
    return tmap


class Driver:
    """The few CUDA driver calls the runner needs, through ctypes (torch's context)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def check(self, status: int, what: str) -> None:
        """Raise with the driver's error name when ``status`` is not CUDA_SUCCESS."""
        if status != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else status}")

    def function(self, cubin: Path, kernel: str, smem: int) -> ctypes.c_void_p:
        """Load ``cubin`` and return ``kernel`` with its dynamic shared limit raised."""
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuModuleLoad(ctypes.byref(module), str(cubin).encode()),
                   "cuModuleLoad")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(func), module, kernel.encode()),
                   "cuModuleGetFunction")
        self.check(self.lib.cuFuncSetAttribute(func, _MAX_DYNAMIC_SHARED, smem),
                   "cuFuncSetAttribute")
        return func

    def tensor_map(self, tensor, spec: dict) -> _TensorMap:
        """A 2-D fp16 tiled tensor map over row-major ``tensor`` as ``spec`` describes."""
        tmap = _aligned_tensor_map()
        dims = (ctypes.c_uint64 * 2)(spec["cols"], spec["rows"])
        strides = (ctypes.c_uint64 * 1)(spec["cols"] * 2)
        box = (ctypes.c_uint32 * 2)(spec["box_cols"], spec["box_rows"])
        steps = (ctypes.c_uint32 * 2)(1, 1)
        status = self.lib.cuTensorMapEncodeTiled(
            ctypes.byref(tmap), _FLOAT16, 2, ctypes.c_void_p(tensor.data_ptr()), dims, strides,
            box, steps, 0, _SWIZZLE[spec["swizzle"]], _L2_PROMOTION_256B, 0,
        )
        self.check(status, f"cuTensorMapEncodeTiled({spec['param']})")
        return tmap

    def launch(self, func, grid, block, smem: int, stream: int, params: list) -> None:
        """``cuLaunchKernel`` with each parameter passed by address."""
        pointers = (ctypes.c_void_p * len(params))(
            *[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in params]
        )
        self.check(self.lib.cuLaunchKernel(func, *grid, *block, smem, ctypes.c_void_p(stream),
                                           pointers, None), "cuLaunchKernel")


def run_one(size_dir: Path, kernel: str, variant: str, timed: bool) -> dict:
    """Launch one variant (or ``__torch__``: cuBLAS via torch.matmul) and check it."""
    import torch

    entry = json.loads((size_dir / "manifest.json").read_text())["kernels"][kernel]
    m, n, k = entry["m"], entry["n"], entry["k"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors = {
        "A": torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen),
        "B": torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen),
        "C": torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16),
    }
    expected = tensors["A"].float() @ tensors["B"].float().t()
    if variant == "__torch__":

        def launch():
            return torch.matmul(tensors["A"], tensors["B"].t())

        got = launch()
    else:
        spec = entry["variants"][variant]
        driver = Driver()
        func = driver.function(size_dir / (Path(spec["file"]).stem + ".cubin"),
                               entry["kernel"], spec["dynamic_smem"])
        maps = [driver.tensor_map(tensors[t["tensor"]], t) for t in entry["tensor_maps"]]
        stream = torch.cuda.current_stream().cuda_stream

        def launch():
            driver.launch(func, entry["grid"], entry["block"], spec["dynamic_smem"], stream, maps)

        launch()
        torch.cuda.synchronize()
        got = tensors["C"]
    scale = max(float(expected.abs().max()), 1e-30)
    diff = (got.float() - expected).abs().nan_to_num(float("inf"))
    err = float(diff.max()) / scale
    result: dict = {"correct": err < TOLERANCE, "rel_err": err}
    if not result["correct"]:
        bad = diff > TOLERANCE * scale
        result["bad"] = f"{float(bad.float().mean()):.1%} wrong, first at " \
                        f"{[int(i) for i in bad.nonzero()[0]]}"
    if timed:
        ms = _median_ms(launch, torch)
        result.update(ms=ms, tflops=entry["flops"] / ms / 1e9)
    return result


def compile_all(size_dir: Path) -> dict[str, dict]:
    """nvcc every source of ``size_dir`` in parallel (with its kernel's nvcc flags)."""
    manifest = json.loads((size_dir / "manifest.json").read_text())
    jobs = [(spec["file"], entry["nvcc_flags"]) for entry in manifest["kernels"].values()
            for spec in entry["variants"].values() if "file" in spec]

    def one(job):
        name, flags = job
        done = subprocess.run([*NVCC, *flags, "-o", str(size_dir / (Path(name).stem + ".cubin")),
                               str(size_dir / name)], capture_output=True, text=True)
        log = done.stdout + done.stderr
        if done.returncode != 0:
            return name, {"error": "nvcc: " + " ".join(log.split())[:300]}
        regs, spill = _REGS.search(log), _SPILL.search(log)
        return name, {"regs": int(regs.group(1)) if regs else None,
                      "spill": int(spill.group(1)) if spill else None,
                      "serialised_wgmma": "C7514" in log, "setmaxnreg_ignored": "C7508" in log}

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        return dict(pool.map(one, jobs))


def _command(size_dir: Path, kernel: str, variant: str, timed: bool) -> list[str]:
    command = [sys.executable, os.path.abspath(__file__), "--one", str(size_dir), kernel, variant]
    return command if timed else [*command, "--untimed"]


def _sync_text(counts: dict | None) -> str:
    if not counts:
        return "-"
    short = {"syncthreads": "bar", "bar_sync": "bar.sync", "bar_arrive": "bar.arrive",
             "fence_proxy_async": "fence.proxy", "fence_mbarrier_init": "fence.mbar_init"}
    return " ".join(f"{short[k]} {v}" for k, v in counts.items() if v) or "none"


def run(in_dir: Path) -> int:
    """Compile, check and time the full size; print one table per kernel."""
    size_dir = in_dir / "full"
    manifest = json.loads((size_dir / "manifest.json").read_text())
    compiled = compile_all(size_dir)
    bad = 0
    for kernel, entry in manifest["kernels"].items():
        torch_result, log = _subprocess_result(_command(size_dir, kernel, "__torch__", True),
                                               RUN_TIMEOUT_S)
        rows = []
        for variant, record in entry["variants"].items():
            nv = compiled.get(record.get("file", ""), {})
            error = record.get("error") or nv.get("error")
            result, log = (None, error) if error else _subprocess_result(
                _command(size_dir, kernel, variant, True), RUN_TIMEOUT_S)
            rows.append((variant, record, result, log, nv))
        hand = next((r for v, _, r, _, _ in rows if v == "hand" and r), None)
        print(f"\n## {kernel} {entry['m']}x{entry['n']}x{entry['k']} fp16, "
              f"grid {entry['grid'][0]} x {entry['block'][0]} threads")
        if torch_result:
            print(f"cuBLAS (torch.matmul): {torch_result['tflops']:.1f} TFLOP/s "
                  f"({torch_result['ms']:.3f} ms)")
        else:
            print(f"cuBLAS (torch.matmul): failed: {log}")
        print("| variant | correct (rel err) | ms | TFLOP/s | vs cuBLAS | vs hand | regs/spill "
              "| sync in kernel | sync in K loop | barrier pass ms |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for variant, record, result, log, nv in rows:
            regs = f"{nv.get('regs')}/{nv.get('spill')}" if "regs" in nv else "-"
            if nv.get("serialised_wgmma"):
                regs += " C7514"
            ms_pass = record.get("barrier_pass_ms")
            tail = (f"{regs} | {_sync_text(record.get('sync'))} | "
                    f"{_sync_text(record.get('k_loop_sync'))} | "
                    f"{'-' if ms_pass is None else f'{ms_pass:.1f}'} |")
            if result is None:
                print(f"| {variant} | FAILED: {log} | - | - | - | - | {tail}")
                bad += record["role"] == "tilewave"
                continue
            vs_torch = result["tflops"] / torch_result["tflops"] if torch_result else float("nan")
            vs_hand = result["tflops"] / hand["tflops"] if hand else float("nan")
            correct = f"{result['correct']} ({result['rel_err']:.1e})" + (
                f" {result['bad']}" if "bad" in result else "")
            print(f"| {variant} | {correct} | {result['ms']:.3f} | {result['tflops']:.1f} | "
                  f"{vs_torch:.2f} | {vs_hand:.2f} | {tail}")
            bad += record["role"] == "tilewave" and not result["correct"]
        k_loop_barriers = {v: r.get("k_loop_sync", {}).get("syncthreads") for v, r, *_ in rows}
        print(f"block barriers (__syncthreads) inside the K loop: {k_loop_barriers}")
    return 1 if bad else 0


def racecheck(in_dir: Path) -> int:
    """The small size under ``compute-sanitizer --tool racecheck``; print the hazards."""
    size_dir = in_dir / "small"
    manifest = json.loads((size_dir / "manifest.json").read_text())
    compiled = compile_all(size_dir)
    jobs = [(k, v, rec) for k, e in manifest["kernels"].items() for v, rec in e["variants"].items()]

    def one(job):
        kernel, variant, record = job
        error = record.get("error") or compiled.get(record.get("file", ""), {}).get("error")
        if error:
            return None, error
        command = ["compute-sanitizer", "--tool", "racecheck", "--racecheck-report", "hazard",
                   *_command(size_dir, kernel, variant, False)]
        return _subprocess_result(command, RACECHECK_TIMEOUT_S)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(one, jobs))
    print("\n| kernel | variant (small size) | racecheck hazards | result correct |")
    print("|---|---|---|---|")
    bad = 0
    for (kernel, variant, record), (result, log) in zip(jobs, results, strict=True):
        summary = _SUMMARY.search(log or "")
        hazards = summary.group(1) if summary else "no summary"
        correct = result["correct"] if result else f"FAILED: {(log or '')[-200:]}"
        print(f"| {kernel} | {variant} | {hazards} | {correct} |")
        bad += record["role"] == "tilewave" and (hazards != "0" or correct is not True)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR``, ``--run DIR``, ``--racecheck DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, help="write CUDA sources (needs TVM)")
    parser.add_argument("--run", type=Path, help="compile, check and time (needs the GPU)")
    parser.add_argument("--racecheck", type=Path, help="race-check the small size")
    parser.add_argument("--one", nargs=3, metavar=("SIZE_DIR", "KERNEL", "VARIANT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--untimed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        size_dir, kernel, variant = args.one
        print("RESULT " + json.dumps(run_one(Path(size_dir), kernel, variant, not args.untimed)))
        return 0
    if args.emit is None and args.run is None and args.racecheck is None:
        parser.error("give --emit DIR, --run DIR or --racecheck DIR")
    status = 0
    if args.emit is not None:
        emit(args.emit)
    if args.run is not None:
        status |= run(args.run)
    if args.racecheck is not None:
        status |= racecheck(args.racecheck)
    return status


if __name__ == "__main__":
    sys.exit(main())
