"""H100 check for InjectFenceProxy: ordinary shared stores, then a bulk async copy to global.

Every block's threads write a tile of shared memory with ordinary (generic-proxy) stores,
synchronise, and one thread copies the tile to global memory with
``cp.async.bulk.global.shared::cta.bulk_group`` (an async-proxy read of shared memory; the
non-tensor form needs no tensor map). Without ``fence.proxy.async`` between the stores and
the copy, the copy is not ordered after the stores. InjectFenceProxy inserts the fence and
the ``commit_group`` / ``wait_group.read`` handshake after the copy.

Two modes, because the GPU machine has no TVM:

* ``--emit DIR`` (needs TVM and tilewave): writes ``fenced.cu`` (after InjectFenceProxy),
  ``unfenced.cu`` (the same kernel with only the handshake, no fence) and ``launch.json``.
* ``--run DIR`` (needs nvcc, cupy, numpy; imports no TVM): compiles each ``.cu`` with
  ``nvcc -gencode=arch=compute_90a,code=sm_90a -cubin``, launches it on random data,
  compares with NumPy, prints PASS/FAIL and the max error. Exits non-zero when the fenced
  kernel is wrong (the unfenced one is reported for comparison only).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TILE = 2048  # floats per block: 8 KiB of shared memory
THREADS = 256
BLOCKS = 264  # two waves on a 132-SM H100
KERNEL = "fence_proxy_tile_copy"


# ---------------------------------------------------------------------------------------
# --emit: build the kernel with TVM, apply InjectFenceProxy, write CUDA source
# ---------------------------------------------------------------------------------------


def build_kernel():  # pragma: no cover - exercised by the emit test
    """The kernel before InjectFenceProxy: generic shared stores, barrier, bulk copy."""
    from tvm.script import tirx as T

    n = TILE * BLOCKS
    per_thread = TILE // THREADS

    @T.prim_func
    def fence_proxy_tile_copy(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": KERNEL})
        for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                tile = T.alloc_buffer((TILE,), "float32", scope="shared")
                for i in range(per_thread):
                    tile[i * THREADS + tx] = A[bx * TILE + i * THREADS + tx] * T.float32(
                        2
                    ) + T.float32(1)
                T.tvm_storage_sync("shared")
                if tx == 0:
                    T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(
                        T.address_of(B[bx * TILE]), tile.data, TILE * 4
                    )

    return fence_proxy_tile_copy


def _cuda_source(func) -> str:  # pragma: no cover - exercised by the emit test
    import tvm

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    ex = tvm.compile(tvm.IRModule({KERNEL: func}), target=target)
    return ex.mod.imports[0].inspect_source()


def emit(out_dir: Path) -> None:
    """Write fenced.cu, unfenced.cu and launch.json into ``out_dir``."""
    from tilewave.transforms.inject_fence_proxy import (
        inject_fence_proxy,
        normalize_bulk_store_handshake,
    )

    kernel = build_kernel()
    fenced = inject_fence_proxy(kernel, target="sm_90a")
    unfenced = normalize_bulk_store_handshake(kernel)
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = {"fenced": _cuda_source(fenced), "unfenced": _cuda_source(unfenced)}
    if "fence.proxy.async" not in sources["fenced"]:
        raise SystemExit("emit: the fenced kernel has no fence.proxy.async; the pass did nothing")
    for name, text in sources.items():
        (out_dir / f"{name}.cu").write_text(text)
    launch = {
        "kernel": f"{KERNEL}_kernel",
        "grid": [BLOCKS, 1, 1],
        "block": [THREADS, 1, 1],
        "n": TILE * BLOCKS,
        "variants": {"fenced": "fenced.cu", "unfenced": "unfenced.cu"},
        "reference": "B = A * 2 + 1",
    }
    (out_dir / "launch.json").write_text(json.dumps(launch, indent=2) + "\n")
    print(f"wrote {', '.join(sorted(sources))} sources and launch.json to {out_dir}")


# ---------------------------------------------------------------------------------------
# --run: compile with nvcc, launch with cupy, compare with NumPy (no TVM)
# ---------------------------------------------------------------------------------------


def _compile(source: Path) -> Path:
    cubin = source.with_suffix(".cubin")
    cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-o", str(cubin),
           str(source)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"nvcc failed on {source} (exit {result.returncode}):\n{result.stdout}"
              f"{result.stderr}", file=sys.stderr)
        raise SystemExit(2)
    return cubin


def _run_variant(source: Path, launch: dict, repeats: int) -> tuple[int, float]:
    import cupy
    import numpy as np

    module = cupy.RawModule(path=str(_compile(source)))
    kernel = module.get_function(launch["kernel"])
    rng = np.random.default_rng(0)
    bad_runs, worst = 0, 0.0
    for _ in range(repeats):
        a = rng.standard_normal(launch["n"], dtype=np.float32)
        d_a = cupy.asarray(a)
        d_b = cupy.full(launch["n"], cupy.nan, dtype=cupy.float32)
        kernel(tuple(launch["grid"]), tuple(launch["block"]), (d_a, d_b))
        cupy.cuda.Device().synchronize()
        err = float(np.nan_to_num(np.abs(cupy.asnumpy(d_b) - (a * 2 + 1)), nan=np.inf).max())
        worst = max(worst, err)
        bad_runs += err > 1e-6
    return bad_runs, worst


def run(out_dir: Path, repeats: int) -> int:
    """Compile and check every variant in ``out_dir``; returns the process exit code."""
    launch = json.loads((out_dir / "launch.json").read_text())
    status = 0
    for name, file in launch["variants"].items():
        bad_runs, worst = _run_variant(out_dir / file, launch, repeats)
        verdict = "PASS" if bad_runs == 0 else "FAIL"
        print(f"{name:9s} {verdict}  wrong runs {bad_runs}/{repeats}  max error {worst:.3g}")
        if name == "fenced" and bad_runs:
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR`` or ``--run DIR`` (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--emit", type=Path, metavar="DIR", help="write CUDA sources (needs TVM)")
    mode.add_argument("--run", type=Path, metavar="DIR", help="compile and run (needs a GPU)")
    parser.add_argument("--repeats", type=int, default=20, help="launches per variant")
    args = parser.parse_args(argv)
    if args.emit is not None:
        emit(args.emit)
        return 0
    return run(args.run, args.repeats)


if __name__ == "__main__":
    sys.exit(main())
