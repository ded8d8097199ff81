"""The Hopper part of examples/tirx_h100.py: the TIRx TMA + wgmma GEMM on an H100.

``examples/tirx_tma_wgmma_gemm.py`` takes ``const __grid_constant__ CUtensorMap`` parameters,
which cupy's launcher cannot pass, so this part reuses the launcher, nvcc driver and race-check
of ``benchmarks/real_kernels_sm90.py`` (CUDA driver API through ctypes) over a directory of the
same layout: ``DIR/full`` (4096^3) and ``DIR/small`` (the race-check size), each with
``<kernel>__<variant>.cu`` and that script's ``manifest.json``.

Variants: ``hand`` (``tir_pipeline="tirx"``), ``stripped`` (same pipeline, racy: for
contrast, not judged) and ``stripped+tilewave-tirx``. The hand and tilewave variants are
timed in one process, interleaved: :data:`ROUNDS` rounds, each timing every variant and
``torch.matmul`` once (median of 30 launches with L2 flushed), in alternating order. The
table shows each one's median round and two ratios to the hand version: of the medians, and
the median over rounds of the same round's ratio ("paired"), which clock drift across the run
(the GPU warming up) cannot move; the 0.98x criterion is on the paired ratio. The stripped
variant runs in its own process under a timeout (it may hang on an uninitialised mbarrier).
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import real_kernels_sm90 as sm90_runner  # noqa: E402

#: the GEMM with the example's mbarrier macros, and with TVM's pipeline helpers
MODULES = ("tirx_tma_wgmma_gemm", "tirx_tma_wgmma_gemm_helpers")
#: variant -> (kernel builder attribute, tir_pipeline, role for the runner)
VARIANTS = {
    "hand": ("hand", "tirx", "hand"),
    "stripped": ("stripped", "tirx", "contrast"),
    "stripped+tilewave-tirx": ("stripped", "tilewave-tirx", "tilewave"),
}
ROUNDS = 11
#: seconds for one run of the stripped variant (its own process) and one race-check run; a
#: stripped kernel can spin forever on an mbarrier nobody initialised in time.
CONTRAST_TIMEOUT_S = 40
RACECHECK_TIMEOUT_S = 60
#: the tilewave variant's paired speed ratio to the hand version must be at least this
MIN_VS_HAND = 0.98
SUBDIR = "sm90"
CTA_SYNC = "tvm_builtin_cuda_cta_sync"


def emit(out_dir: Path, compile_with: Any, hazards: Any) -> None:
    """Write both sizes of the GEMM's variants and their manifests under ``out_dir``.

    Args:
        out_dir: ``DIR/sm90``.
        compile_with: ``(PrimFunc, pipeline) -> (CUDA source, IR captured by stage name)``
            (:func:`tirx_h100._compile`).
        hazards: ``captured IR -> int``, the verifier's hazard count (:func:`tirx_h100._hazards`).
    """
    base = importlib.import_module(MODULES[0])
    for size_name, size in (("full", (base.M, base.N, base.K)), ("small", base.SMALL)):
        size_dir = out_dir / size_name
        size_dir.mkdir(parents=True, exist_ok=True)
        kernels = {}
        for module_name in MODULES:
            gemm = importlib.import_module(module_name)
            kernels[gemm.NAME] = _emit_kernel(size_dir, gemm, size, compile_with, hazards)
        manifest = {"kernels": kernels}
        (size_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _dynamic_bytes(mod: Any) -> int:
    """The kernel's dynamic shared memory: its ``shared.dyn`` allocations, or the size an
    ``SMEMPool`` declared for its 0-byte pool (``tirx.dyn_smem_bytes``)."""
    from tvm import tirx

    from tilewave.ir.walker import post_order_visit
    from tilewave.tvm_pipelines import DYN_SMEM_ATTR

    declared = [0]

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AttrStmt) and node.attr_key == DYN_SMEM_ATTR:
            declared.append(int(node.value))

    for func in mod.functions.values():
        post_order_visit(func.body, visit)
    return max(sm90_runner._dynamic_smem(mod), *declared)


def _emit_kernel(size_dir: Path, gemm: Any, size: tuple, compile_with: Any, hazards: Any) -> dict:
    """Every variant of one GEMM module at ``size`` into ``size_dir``; its manifest entry."""
    launch = gemm.launch(*size)
    entry = {**launch.to_json(), "flops": launch.flops, "nvcc_flags": [], "variants": {}}
    for variant, (builder, pipeline, role) in VARIANTS.items():
        source, captured = compile_with(getattr(gemm, builder)(*size), pipeline)
        file_name = f"{gemm.NAME}__{variant.replace('+', '_')}.cu"
        (size_dir / file_name).write_text(source)
        # TIRx's T.cuda.cta_sync() is a helper that calls __syncthreads(): count it as one
        counted = source.replace(f"{CTA_SYNC}()", "__syncthreads()")
        record = {
            "role": role,
            "pipeline": pipeline,
            "file": file_name,
            "dynamic_smem": _dynamic_bytes(captured["tirx.AnnotateEntryFunc"]),
            "sync": sm90_runner.sync_counts(sm90_runner.kernel_body(counted)),
            "k_loop_sync": sm90_runner.k_loop_sync(counted),
            "hazards": hazards(captured),
        }
        entry["variants"][variant] = record
        print(f"{gemm.NAME} {size} {variant:<22} {record['sync']} hazards {record['hazards']}")
    return entry


def _timed_launches(size_dir: Path, kernel: str, variants: list[str]) -> dict[str, dict]:
    """Check every variant in ``variants`` and time them with ``torch.matmul``, interleaved."""
    import torch
    from real_kernels_h100 import TOLERANCE, _median_ms

    entry = json.loads((size_dir / "manifest.json").read_text())["kernels"][kernel]
    m, n, k = entry["m"], entry["n"], entry["k"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen)
    expected = a.float() @ b.float().t()
    driver = sm90_runner.Driver()
    stream = torch.cuda.current_stream().cuda_stream
    launches, results = {"torch.matmul": lambda: torch.matmul(a, b.t())}, {}
    for variant in variants:
        spec = entry["variants"][variant]
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        tensors = {"A": a, "B": b, "C": c}
        cubin = size_dir / (Path(spec["file"]).stem + ".cubin")
        func = driver.function(cubin, entry["kernel"], spec["dynamic_smem"])
        maps = [driver.tensor_map(tensors[t["tensor"]], t) for t in entry["tensor_maps"]]

        def launch(func=func, maps=maps, smem=spec["dynamic_smem"]) -> None:
            driver.launch(func, entry["grid"], entry["block"], smem, stream, maps)

        launch()
        torch.cuda.synchronize()
        diff = (c.float() - expected).abs().nan_to_num(float("inf"))
        error = float(diff.max()) / float(expected.abs().max())
        results[variant] = {"rel_err": error, "correct": error < TOLERANCE}
        launches[variant] = launch
    rounds: dict[str, list[float]] = {name: [] for name in launches}
    order = list(launches)
    for index in range(ROUNDS):
        for name in order if index % 2 == 0 else order[::-1]:
            rounds[name].append(_median_ms(launches[name], torch))
    for name, times in rounds.items():
        paired = statistics.median(h / t for h, t in zip(rounds["hand"], times, strict=True))
        results.setdefault(name, {}).update(
            ms=statistics.median(times), rounds_ms=times, paired_vs_hand=paired
        )
    return results


def run(in_dir: Path) -> int:
    """Compile, check and time the full size; print the table. 1 when tilewave's variant is
    wrong or slower than :data:`MIN_VS_HAND` times the hand version (paired ratio)."""
    size_dir = in_dir / "full"
    manifest = json.loads((size_dir / "manifest.json").read_text())
    compiled = sm90_runner.compile_all(size_dir)
    bad = 0
    for kernel, entry in manifest["kernels"].items():
        bad += run_kernel(size_dir, kernel, entry, compiled)
    return 1 if bad else 0


def run_kernel(size_dir: Path, kernel: str, entry: dict, compiled: dict) -> int:
    """One kernel's variants: check, time, print the table; the number of failed judged
    variants."""
    judged = [v for v, rec in entry["variants"].items() if rec["role"] != "contrast"]
    results = _timed_launches(size_dir, kernel, judged)
    contrast = [v for v in entry["variants"] if v not in judged]
    for variant in contrast:
        result, log = sm90_runner._subprocess_result(
            sm90_runner._command(size_dir, kernel, variant, True), CONTRAST_TIMEOUT_S
        )
        results[variant] = result or {"failed": log}
    torch_ms, hand_ms = results["torch.matmul"]["ms"], results["hand"]["ms"]
    print(
        f"\n## {kernel} {entry['m']}x{entry['n']}x{entry['k']} fp16, grid {entry['grid'][0]}"
        f" x {entry['block'][0]} threads; {ROUNDS} interleaved rounds (median shown)"
    )
    print(
        f"cuBLAS (torch.matmul): {entry['flops'] / torch_ms / 1e9:.1f} TFLOP/s ({torch_ms:.3f} ms)"
    )
    print(
        "| variant | tir_pipeline | sync in kernel | sync in K loop | verifier | regs/spill "
        "| correct (rel err) | ms | TFLOP/s | vs cuBLAS | vs hand | vs hand, paired |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for variant, record in entry["variants"].items():
        result, nv = results[variant], compiled.get(record["file"], {})
        regs = f"{nv.get('regs')}/{nv.get('spill')}" if "regs" in nv else nv.get("error", "-")
        head = (
            f"| {variant} | {record['pipeline']} | {sm90_runner._sync_text(record['sync'])} "
            f"| {sm90_runner._sync_text(record['k_loop_sync'])} | {record['hazards']} "
            f"| {regs} |"
        )
        if "ms" not in result:
            print(f"{head} FAILED: {result.get('failed', '')[-200:]} | - | - | - | - | - |")
            bad += record["role"] == "tilewave"
            continue
        tflops = entry["flops"] / result["ms"] / 1e9
        paired = result.get("paired_vs_hand")
        print(
            f"{head} {result['correct']} ({result['rel_err']:.1e}) | {result['ms']:.3f} | "
            f"{tflops:.1f} | {torch_ms / result['ms']:.2f} | {hand_ms / result['ms']:.2f} | "
            f"{'-' if paired is None else f'{paired:.3f}'} |"
        )
        if record["role"] == "tilewave":
            bad += not result["correct"] or paired is None or paired < MIN_VS_HAND
    rounds = {
        v: " ".join(f"{t:.3f}" for t in r["rounds_ms"])
        for v, r in results.items()
        if "rounds_ms" in r
    }
    print("per-round medians (ms): " + "; ".join(f"{v}: {t}" for v, t in rounds.items()))
    return bad


def racecheck(in_dir: Path) -> int:
    """The small size under ``compute-sanitizer --tool racecheck`` (real_kernels_sm90's)."""
    sm90_runner.RACECHECK_TIMEOUT_S = RACECHECK_TIMEOUT_S
    return sm90_runner.racecheck(in_dir)
