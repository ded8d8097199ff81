"""InsertSharedBarriers on an H100: strip a kernel's barriers, re-insert them, race-check.

Four CUDA kernels that need shared-memory barriers, written with hand-placed
``__syncthreads()`` the way a user would:

* ``reverse``: each block reverses its 128-element slice through shared memory (RAW), with
  independent work (``C = 3 * A``) a split barrier can overlap;
* ``transpose``: 16x16 tiled transpose (RAW across warps);
* ``stencil``: a 3-point 1-D stencil reading both neighbours from shared memory;
* ``loop_tile``: one shared tile reused every iteration of a loop (RAW inside the iteration,
  WAR from iteration k's reads to iteration k+1's writes).

Each is emitted in three variants: ``stripped`` (every barrier removed: racy, for contrast),
``tilewave-basic`` (barriers re-inserted by ``InsertSharedBarriers``: ``__syncthreads()``)
and ``tilewave-split`` (re-inserted as split barriers, lowered on CUDA to an mbarrier:
``mbarrier.arrive`` after the producer, a ``mbarrier.try_wait.parity`` loop before the
consumer).

A fifth kernel is warp-specialised: ``warp_specialized`` runs 256 threads per block;
warps 0-3 produce (copy tile k of the input into shared memory) and warps 4-7 consume
(read the tile reversed, accumulate ``(k + 1) * tile``), for ``STEPS`` tiles, written with
hand-placed named barriers (``bar.arrive`` / ``bar.sync`` ids 1 and 2). Its variants:
``stripped``; ``tilewave-named`` (the named barriers re-inserted by
``InsertSharedBarriers``: RAW id 1, WAR id 2; judged); ``hand-arrive``, the kernel as
written, whose consumers signal WAR with ``bar.arrive 2`` (shown, not judged); and
``named-all-sync``, the hand kernel with every ``bar.arrive`` turned into a ``bar.sync`` on
the same id and count (a diagnostic, shown, not judged: one generation of an aligned
barrier completed at two instructions, which PTX leaves undefined and synccheck reports;
the pass emits ``barrier.sync`` without ``.aligned`` for exactly that reason).

The WAR signal (decided for issue 11): the consumers ``barrier.sync`` on the WAR id, they
do not ``bar.arrive``. ``compute-sanitizer --tool racecheck`` reports every consumer read
that precedes a ``bar.arrive`` against the producer's next write (57,344 WAR reports on
this kernel; in SASS the ``BAR.ARV`` is issued right after the ``LDS``, before its data
returns) and reports 0 with ``bar.sync``, which PTX guarantees to complete only once the
thread's prior shared accesses are performed. In this single-buffer protocol the
consumer's ``bar.sync`` should cost next to nothing (not measured): the producer reaches
its own ``bar.sync`` on the WAR id right after arriving on the RAW id, before the
consumers can pass theirs.
Multi-stage rings use mbarriers, not named barriers.

Two machines:

* ``python examples/shared_barriers_racecheck_h100.py --emit DIR`` (needs TVM and tilewave,
  no GPU) writes ``DIR/<kernel>__<variant>.cu`` and ``DIR/manifest.json``: kernel names,
  grid/block, argument names/shapes/dtypes, which arguments are outputs, the reference id,
  and the hazards tilewave's own verifier finds in each variant;
* ``python shared_barriers_racecheck_h100.py --run DIR`` (needs nvcc, cupy, numpy; no TVM)
  compiles every file with ``nvcc -gencode=arch=compute_90a,code=sm_90a -cubin``, launches
  it on random data and compares it with the NumPy reference of this file;
* ``--racecheck DIR`` does the same, then runs each variant again in its own
  ``compute-sanitizer --tool racecheck --racecheck-report hazard`` process, reads its
  ``RACECHECK SUMMARY: N hazards displayed`` line, counts the ``Potential RAW/WAR/WAW
  hazard`` reports by kind and prints ``kernel | variant | hazards | kinds | result
  matches | tilewave verifier hazards``. With ``--log-dir`` the sanitizer's output
  is kept. Exit status 1 when a tilewave variant has a hazard or a wrong result (the
  stripped variants are shown, not judged).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BLOCKS = 16  # blocks of the 1-D kernels
WIDTH = 128  # threads per block of the 1-D kernels = shared tile length
TILE = 16  # transpose tile (TILE x TILE threads)
N = 64  # transpose matrix side
STEPS = 8  # loop_tile trip count
VARIANTS = ("stripped", "tilewave-basic", "tilewave-split")
TILEWAVE_VARIANTS = ("tilewave-basic", "tilewave-split", "tilewave-named")
WARP_SPECIALIZED = "warp_specialized"  # the kernel whose variants are stripped / named
ALL_SYNC = "named-all-sync"  # diagnostic variant of the warp-specialised kernel
HAND_ARRIVE = "hand-arrive"  # the warp-specialised kernel as written (WAR via bar.arrive)
SANITIZER_TIMEOUT_S = 120  # one racecheck process (a few seconds when it works)
_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
_HAZARD = re.compile(r"Potential (RAW|WAR|WAW) hazard")


@dataclass(frozen=True)
class KernelSpec:
    """What the runner needs to launch one kernel: launch shape and arguments."""

    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    inputs: dict[str, tuple[int, ...]]
    outputs: dict[str, tuple[int, ...]]


SPECS: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        KernelSpec(
            "reverse",
            (BLOCKS,),
            (WIDTH,),
            {"A": (BLOCKS * WIDTH,)},
            {"B": (BLOCKS * WIDTH,), "C": (BLOCKS * WIDTH,)},
        ),
        KernelSpec("transpose", (N // TILE, N // TILE), (TILE, TILE), {"A": (N, N)}, {"B": (N, N)}),
        KernelSpec(
            "stencil", (BLOCKS,), (WIDTH,), {"A": (BLOCKS * WIDTH,)}, {"B": (BLOCKS * WIDTH,)}
        ),
        KernelSpec(
            "loop_tile",
            (BLOCKS,),
            (WIDTH,),
            {"A": (BLOCKS, STEPS * WIDTH)},
            {"B": (BLOCKS, WIDTH)},
        ),
        KernelSpec(
            WARP_SPECIALIZED,
            (BLOCKS,),
            (2 * WIDTH,),
            {"A": (BLOCKS, STEPS * WIDTH)},
            {"B": (BLOCKS, WIDTH)},
        ),
    )
}


# ---------------------------------------------------------------- references (NumPy)


def _reverse_ref(a):
    import numpy as np

    return {"B": a.reshape(BLOCKS, WIDTH)[:, ::-1].reshape(-1), "C": a * np.float32(3)}


def _transpose_ref(a):
    return {"B": a.T.copy()}


def _stencil_ref(a):
    import numpy as np

    rows = a.reshape(BLOCKS, WIDTH)
    out = np.roll(rows, 1, axis=1) + rows * np.float32(2) + np.roll(rows, -1, axis=1)
    return {"B": out.reshape(-1)}


def _loop_tile_ref(a):
    import numpy as np

    tiles = a.reshape(BLOCKS, STEPS, WIDTH).astype(np.float64)
    weights = np.arange(STEPS, dtype=np.float64).reshape(1, STEPS, 1) + 1
    out = (np.roll(tiles, -1, axis=2) * weights).sum(axis=1)
    return {"B": out.astype(np.float32)}


def _warp_specialized_ref(a):
    import numpy as np

    tiles = a.reshape(BLOCKS, STEPS, WIDTH).astype(np.float64)[:, :, ::-1]
    weights = np.arange(STEPS, dtype=np.float64).reshape(1, STEPS, 1) + 1
    return {"B": (tiles * weights).sum(axis=1).astype(np.float32)}


#: kernel id -> NumPy reference: inputs -> {output name: expected array}
REFERENCES: dict[str, Callable] = {
    "reverse": _reverse_ref,
    "transpose": _transpose_ref,
    "stencil": _stencil_ref,
    "loop_tile": _loop_tile_ref,
    WARP_SPECIALIZED: _warp_specialized_ref,
}


# ---------------------------------------------------------------- kernels (TVMScript)


def kernels() -> dict:
    """The hand-synchronised TVMScript kernels, by kernel id; needs TVM."""
    from tvm.script import tirx as T

    @T.prim_func
    def reverse(
        A: T.Buffer((BLOCKS * WIDTH,), "float32"),
        B: T.Buffer((BLOCKS * WIDTH,), "float32"),
        C: T.Buffer((BLOCKS * WIDTH,), "float32"),
    ):
        for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
            for tx in T.thread_binding(WIDTH, thread="threadIdx.x"):
                S = T.alloc_buffer((WIDTH,), "float32", scope="shared")
                S[tx] = A[bx * WIDTH + tx]
                C[bx * WIDTH + tx] = A[bx * WIDTH + tx] * T.float32(3)
                T.tvm_storage_sync("shared")
                B[bx * WIDTH + tx] = S[WIDTH - 1 - tx]

    @T.prim_func
    def transpose(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32")):
        for by in T.thread_binding(N // TILE, thread="blockIdx.y"):
            for bx in T.thread_binding(N // TILE, thread="blockIdx.x"):
                for ty in T.thread_binding(TILE, thread="threadIdx.y"):
                    for tx in T.thread_binding(TILE, thread="threadIdx.x"):
                        S = T.alloc_buffer((TILE, TILE), "float32", scope="shared")
                        S[ty, tx] = A[by * TILE + ty, bx * TILE + tx]
                        T.tvm_storage_sync("shared")
                        B[bx * TILE + ty, by * TILE + tx] = S[tx, ty]

    @T.prim_func
    def stencil(
        A: T.Buffer((BLOCKS * WIDTH,), "float32"), B: T.Buffer((BLOCKS * WIDTH,), "float32")
    ):
        for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
            for tx in T.thread_binding(WIDTH, thread="threadIdx.x"):
                S = T.alloc_buffer((WIDTH,), "float32", scope="shared")
                S[tx] = A[bx * WIDTH + tx]
                T.tvm_storage_sync("shared")
                B[bx * WIDTH + tx] = (
                    S[(tx + WIDTH - 1) % WIDTH] + S[tx] * T.float32(2) + S[(tx + 1) % WIDTH]
                )

    @T.prim_func
    def loop_tile(
        A: T.Buffer((BLOCKS, STEPS * WIDTH), "float32"), B: T.Buffer((BLOCKS, WIDTH), "float32")
    ):
        for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
            for tx in T.thread_binding(WIDTH, thread="threadIdx.x"):
                S = T.alloc_buffer((WIDTH,), "float32", scope="shared")
                acc = T.alloc_buffer((1,), "float32", scope="local")
                acc[0] = T.float32(0)
                for k in range(STEPS):
                    S[tx] = A[bx, k * WIDTH + tx]
                    T.tvm_storage_sync("shared")
                    acc[0] = acc[0] + S[(tx + 1) % WIDTH] * T.Cast("float32", k + 1)
                    T.tvm_storage_sync("shared")
                B[bx, tx] = acc[0]

    @T.prim_func
    def warp_specialized(
        A: T.Buffer((BLOCKS, STEPS * WIDTH), "float32"), B: T.Buffer((BLOCKS, WIDTH), "float32")
    ):
        for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
            for tx in T.thread_binding(2 * WIDTH, thread="threadIdx.x"):
                S = T.alloc_buffer((WIDTH,), "float32", scope="shared")
                acc = T.alloc_buffer((1,), "float32", scope="local")
                acc[0] = T.float32(0)
                for k in range(STEPS):
                    if tx < WIDTH:  # producer warps 0-3
                        S[tx] = A[bx, k * WIDTH + tx]
                        T.ptx.bar.arrive(T.uint32(1), T.uint32(2 * WIDTH))  # tile k written
                        T.ptx.bar.sync(T.uint32(2), T.uint32(2 * WIDTH))  # tile k read
                    else:  # consumer warps 4-7
                        T.ptx.bar.sync(T.uint32(1), T.uint32(2 * WIDTH))
                        acc[0] = acc[0] + S[2 * WIDTH - 1 - tx] * T.Cast("float32", k + 1)
                        T.ptx.bar.arrive(T.uint32(2), T.uint32(2 * WIDTH))
                if tx >= WIDTH:
                    B[bx, tx - WIDTH] = acc[0]

    return {
        "reverse": reverse,
        "transpose": transpose,
        "stencil": stencil,
        "loop_tile": loop_tile,
        WARP_SPECIALIZED: warp_specialized,
    }


def strip_barriers(func):
    """``func`` without its barriers (full barriers, split signal/wait, named barriers'
    arrive and sync); needs TVM."""
    from tvm import ir

    from tilewave.analysis.shared_access import SyncKind, sync_action
    from tilewave.ir.intrinsics import callee_name
    from tilewave.ir.walker import TIRMutator

    removed = {SyncKind.BARRIER, SyncKind.SIGNAL, SyncKind.WAIT}
    named_arrive = {"tirx.ptx.bar_arrive", "tirx.ptx.barrier_arrive"}

    class _Strip(TIRMutator):
        def visit_Evaluate(self, node):
            action = sync_action(node)
            if action is not None and action.kind in removed:
                return None
            call = node.value
            if isinstance(call, ir.expr.Call) and callee_name(call) in named_arrive:
                return None
            return node

    return func.with_body(_Strip().visit(func.body))


def arrives_to_syncs(func):
    """``func`` with every named ``bar.arrive(id, n)`` replaced by ``bar.sync(id, n)``;
    needs TVM."""
    from tvm import ir

    from tilewave.ir.intrinsics import callee_name
    from tilewave.ir.walker import TIRMutator, rebuild

    sync_op = ir.Op.get("tirx.ptx.bar_sync_count")

    class _ArriveToSync(TIRMutator):
        def visit_Evaluate(self, node):
            call = node.value
            if not isinstance(call, ir.expr.Call) or callee_name(call) != "tirx.ptx.bar_arrive":
                return node
            bar_id, count = list(call.args)[:2]
            args = [bar_id, count, "", "sync", ""]
            return rebuild(node, {"value": rebuild(call, {"op": sync_op, "args": args})})

    return func.with_body(_ArriveToSync().visit(func.body))


def variants_of(func, kernel_id: str = "") -> dict:
    """The variants of one kernel, as PrimFuncs; needs TVM."""
    from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

    stripped = strip_barriers(func)
    if kernel_id == WARP_SPECIALIZED:
        named = insert_shared_barriers(stripped, "sm_90a")
        return {
            "stripped": stripped,
            "tilewave-named": named,
            HAND_ARRIVE: func,
            ALL_SYNC: arrives_to_syncs(func),
        }
    return {
        "stripped": stripped,
        "tilewave-basic": insert_shared_barriers(stripped, "sm_90a", barrier_style="basic"),
        "tilewave-split": insert_shared_barriers(stripped, "sm_90a", barrier_style="split"),
    }


def _kernel_params(source: str, kernel: str) -> list[str]:
    """Buffer names in the order of the kernel's signature."""
    match = re.search(rf"void __launch_bounds__\(\d+\) {kernel}\(([^)]*)\)", source)
    if match is None:
        raise RuntimeError(f"kernel {kernel} not found in the generated source")
    return re.findall(r"(\w+)_ptr\b", match.group(1))


def emit(out_dir: Path) -> dict:
    """Write every variant's CUDA source and the manifest into ``out_dir``; needs TVM."""
    import tvm

    from tilewave.analysis.shared_hazards import find_shared_hazards
    from tilewave.pipeline import build

    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"target": "sm_90a", "kernels": {}}
    for kernel_id, func in kernels().items():
        spec = SPECS[kernel_id]
        func = func.with_attr("global_symbol", kernel_id)
        entry = {
            "grid": list(spec.grid),
            "block": list(spec.block),
            "inputs": {k: list(v) for k, v in spec.inputs.items()},
            "outputs": {k: list(v) for k, v in spec.outputs.items()},
            "dtype": "float32",
            "reference": kernel_id,
            "variants": {},
        }
        for variant, prim in variants_of(func, kernel_id).items():
            # Only the barriers placed above: keep a pipeline stage from re-inserting any.
            with tvm.transform.PassContext(disabled_pass=["tilewave.InsertSharedBarriers"]):
                source = build(prim, "sm_90a").source
            file_name = f"{kernel_id}__{variant}.cu"
            (out_dir / file_name).write_text(source)
            name = f"{kernel_id}_kernel"
            entry["variants"][variant] = {
                "file": file_name,
                "kernel": name,
                "params": _kernel_params(source, name),
                "verifier_hazards": len(find_shared_hazards(prim, "sm_90a")),
            }
        manifest["kernels"][kernel_id] = entry
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# ---------------------------------------------------------------- GPU side (no TVM)


def _cubin(in_dir: Path, file_name: str) -> Path:
    return in_dir / (Path(file_name).stem + ".cubin")


def compile_all(in_dir: Path, manifest: dict) -> None:
    """nvcc every variant's source into a cubin next to it."""
    for entry in manifest["kernels"].values():
        for spec in entry["variants"].values():
            source = in_dir / spec["file"]
            subprocess.run(
                [
                    "nvcc",
                    "-gencode=arch=compute_90a,code=sm_90a",
                    "-cubin",
                    "-o",
                    str(_cubin(in_dir, spec["file"])),
                    str(source),
                ],
                check=True,
            )


def run_variant(in_dir: Path, manifest: dict, kernel_id: str, variant: str) -> tuple[bool, float]:
    """Launch one compiled variant on seeded random data; (matches reference, max error)."""
    import cupy
    import numpy as np

    entry = manifest["kernels"][kernel_id]
    spec = entry["variants"][variant]
    rng = np.random.default_rng(0)
    inputs = {
        name: rng.standard_normal(shape).astype(np.float32)
        for name, shape in entry["inputs"].items()
    }
    buffers = {name: cupy.asarray(value) for name, value in inputs.items()}
    for name, shape in entry["outputs"].items():
        buffers[name] = cupy.full(shape, np.nan, dtype=cupy.float32)
    function = cupy.RawModule(path=str(_cubin(in_dir, spec["file"]))).get_function(spec["kernel"])
    function(tuple(entry["grid"]), tuple(entry["block"]), tuple(buffers[p] for p in spec["params"]))
    cupy.cuda.runtime.deviceSynchronize()
    expected = REFERENCES[entry["reference"]](*inputs.values())
    ok, worst = True, 0.0
    for name, want in expected.items():
        got = cupy.asnumpy(buffers[name])
        err = float(np.nanmax(np.abs(got - want))) if not np.isnan(got).any() else float("inf")
        worst = max(worst, err)
        ok = ok and bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))
    return ok, worst


def _all_variants(manifest: dict, only: str | None) -> list[tuple[str, str]]:
    pairs = [(k, v) for k, entry in manifest["kernels"].items() for v in entry["variants"]]
    if only is None:
        return pairs
    kernel_id, _, variant = only.partition(":")
    if (kernel_id, variant) not in pairs:
        raise SystemExit(f"--only {only}: no such kernel:variant in the manifest")
    return [(kernel_id, variant)]


def run(in_dir: Path, only: str | None = None, compile_first: bool = True) -> int:
    """Compile (unless told not to), launch and compare; print one line per variant."""
    manifest = json.loads((in_dir / "manifest.json").read_text())
    if compile_first:
        compile_all(in_dir, manifest)
    failed = 0
    print(f"{'kernel':<16} | {'variant':<15} | {'max error':>10} | result matches")
    for kernel_id, variant in _all_variants(manifest, only):
        ok, err = run_variant(in_dir, manifest, kernel_id, variant)
        print(f"{kernel_id:<16} | {variant:<15} | {err:>10.3g} | {ok}")
        print(f"RESULT {kernel_id}:{variant} match={ok}")
        failed += variant in TILEWAVE_VARIANTS and not ok
    return 1 if failed else 0


def _text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def racecheck(in_dir: Path, log_dir: Path | None) -> int:
    """One ``compute-sanitizer --tool racecheck`` process per variant; print the table."""
    manifest = json.loads((in_dir / "manifest.json").read_text())
    compile_all(in_dir, manifest)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    rows, bad = [], 0
    for kernel_id, variant in _all_variants(manifest, None):
        command = [
            "compute-sanitizer",
            "--tool",
            "racecheck",
            "--racecheck-report",
            "hazard",
            sys.executable,
            os.path.abspath(__file__),
            "--run",
            str(in_dir),
            "--only",
            f"{kernel_id}:{variant}",
            "--no-compile",
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=SANITIZER_TIMEOUT_S
            )
            log, status = done.stdout + done.stderr, f"exit {done.returncode}"
        except subprocess.TimeoutExpired as err:  # a hung kernel (e.g. a barrier deadlock)
            log = _text(err.stdout) + _text(err.stderr)
            status = f"timeout after {SANITIZER_TIMEOUT_S} s"
        if log_dir is not None:
            (log_dir / f"{kernel_id}__{variant}.log").write_text(log)
        summary = _SUMMARY.search(log)
        hazards = int(summary.group(1)) if summary else None
        counts = {kind: 0 for kind in ("RAW", "WAR", "WAW")}
        for kind in _HAZARD.findall(log):
            counts[kind] += 1
        kinds = " ".join(f"{k}:{n}" for k, n in counts.items() if n) or "-"
        match = re.search(rf"RESULT {re.escape(kernel_id)}:{re.escape(variant)} match=(\w+)", log)
        matches = match.group(1) if match else f"no result ({status})"
        verifier = manifest["kernels"][kernel_id]["variants"][variant]["verifier_hazards"]
        rows.append(
            (
                kernel_id,
                variant,
                "no summary" if hazards is None else str(hazards),
                kinds,
                matches,
                verifier,
            )
        )
        if variant in TILEWAVE_VARIANTS and (hazards != 0 or matches != "True"):
            bad += 1
    print(
        f"{'kernel':<16} | {'variant':<15} | {'hazards':>10} | {'kinds':<20} | "
        f"{'result matches':<14} | tilewave verifier hazards"
    )
    for kernel_id, variant, hazards, kinds, matches, verifier in rows:
        print(
            f"{kernel_id:<16} | {variant:<15} | {hazards:>10} | {kinds:<20} | {matches:<14} | "
            f"{verifier}"
        )
    print("PASS" if not bad else f"FAIL ({bad} tilewave variant(s) with hazards or mismatches)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR``, ``--run DIR`` or ``--racecheck DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--emit", type=Path, help="write CUDA sources (needs TVM)")
    group.add_argument("--run", type=Path, help="compile and run the sources (needs a GPU)")
    group.add_argument("--racecheck", type=Path, help="run each variant under racecheck")
    parser.add_argument("--only", help="with --run: one KERNEL:VARIANT")
    parser.add_argument("--no-compile", action="store_true", help="with --run: reuse cubins")
    parser.add_argument("--log-dir", type=Path, help="with --racecheck: keep sanitizer logs")
    args = parser.parse_args(argv)
    if args.emit is not None:
        manifest = emit(args.emit)
        count = sum(len(e["variants"]) for e in manifest["kernels"].values())
        print(f"wrote {count} CUDA sources and manifest.json to {args.emit}")
        return 0
    if args.run is not None:
        return run(args.run, args.only, compile_first=not args.no_compile)
    return racecheck(args.racecheck, args.log_dir)


if __name__ == "__main__":
    sys.exit(main())
