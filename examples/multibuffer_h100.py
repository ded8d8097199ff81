"""Single- vs double-buffered shared-memory pipeline on an H100, built through tilewave.

The kernel streams each row of ``A`` through a shared tile (``cp.async`` global -> shared),
and every thread sums a window of the tile weighted by ``W``::

    B[row, t] = sum_k sum_j A[row, k*TILE + (t + j) % TILE] * W[j]

Three variants are emitted as CUDA source for sm_90a:

* ``single``: one shared tile, barriers after the copy (RAW) and after the compute (WAR);
* ``double``: the same kernel through ``tilewave.build(..., multi_buffer_count=2)``;
* ``double_nowar``: the kernel *without* the WAR barrier, double-buffered: racy. With a
  multi-buffer count, tilewave's pipeline also prefetches (``PrefetchAsyncCopies``): the
  copy of tile ``k+1`` issues at the top of iteration ``k``, into the copy iteration ``k-1``
  read, before that iteration's barrier, so without the WAR barrier nothing orders those
  reads first (``compute-sanitizer --tool racecheck`` and ``tilewave.racecheck`` both flag
  it). Shown for contrast, not part of PASS/FAIL (it used to be checked, from before the
  prefetch existed);
* ``single_nowar``: the kernel without the WAR barrier and single-buffered: racy, shown for
  contrast too.

Two steps, on two machines:

* ``python examples/multibuffer_h100.py --emit DIR`` (needs TVM and tilewave, no GPU) writes
  ``DIR/<variant>.cu`` and ``DIR/manifest.json``;
* ``python multibuffer_h100.py --run DIR`` (needs nvcc, cupy, numpy; torch optional; no TVM)
  compiles each file with ``nvcc -gencode=arch=compute_90a,code=sm_90a -cubin``, runs it on
  random data and checks ``double == single`` (bit for bit) and ``single`` against a NumPy
  (and PyTorch, when present) reference; the two racy variants are printed, not checked.
  Prints PASS/FAIL; exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROWS = 64  # one block per row
TILE = 128  # threads per block = shared tile length
TILES = 32  # loop trip count
WINDOW = 8  # taps per thread


def kernels():
    """The two TVMScript kernels (with and without the WAR barrier); needs TVM."""
    from tvm.script import tirx as T

    @T.prim_func
    def mb_window(
        A: T.Buffer((ROWS, TILES * TILE), "float32"),
        W: T.Buffer((WINDOW,), "float32"),
        B: T.Buffer((ROWS, TILE), "float32"),
    ):
        for bx in T.thread_binding(ROWS, thread="blockIdx.x"):
            for tx in T.thread_binding(TILE, thread="threadIdx.x"):
                S = T.alloc_buffer((TILE,), "float32", scope="shared")
                acc = T.alloc_buffer((1,), "float32", scope="local")
                acc[0] = T.float32(0)
                for k in range(TILES):
                    T.ptx["cp.async.ca.shared.global"](
                        T.address_of(S[tx]), T.address_of(A[bx, k * TILE + tx]), 4
                    )
                    T.ptx["cp.async.commit_group"]()
                    T.ptx["cp.async.wait_group"](0)
                    T.tvm_storage_sync("shared")
                    for j in range(WINDOW):
                        acc[0] = acc[0] + S[(tx + j) % TILE] * W[j]
                    T.tvm_storage_sync("shared")
                B[bx, tx] = acc[0]

    return mb_window, _without_war_barrier(mb_window).with_attr("global_symbol", "mb_window_nowar")


def _without_war_barrier(func):
    """``func`` with the barrier that ends each iteration of the tile loop removed."""
    from tvm import tirx

    from tilewave.ir.walker import TIRMutator, rebuild

    class DropTrailingBarrier(TIRMutator):
        def visit_For(self, loop):
            body = loop.body
            if loop.kind == tirx.ForKind.SERIAL and isinstance(body, tirx.SeqStmt):
                return rebuild(loop, {"body": tirx.SeqStmt(list(body.seq)[:-1])})
            return self.generic_visit(loop)

    return func.with_body(DropTrailingBarrier().visit(func.body))


def emit(out_dir: Path) -> dict:
    """Write the CUDA source of every variant and a manifest into ``out_dir``."""
    import tvm

    from tilewave.pipeline import build

    with_war, without_war = kernels()
    sources = {
        "single": (with_war, 1),
        "double": (with_war, 2),
        "double_nowar": (without_war, 2),
        "single_nowar": (without_war, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "rows": ROWS,
        "tile": TILE,
        "tiles": TILES,
        "window": WINDOW,
        "variants": {},
    }
    for variant, (func, count) in sources.items():
        # The variants' barriers are placed by hand (with or without the WAR barrier), so
        # tilewave's own barrier stage must not add the missing one back.
        with tvm.transform.PassContext(disabled_pass=["tilewave.InsertSharedBarriers"]):
            source = build(func, "sm_90a", multi_buffer_count=count).source
        (out_dir / f"{variant}.cu").write_text(source)
        name = str(func.attrs["global_symbol"]) + "_kernel"
        manifest["variants"][variant] = {
            "file": f"{variant}.cu",
            "kernel": name,
            "count": count,
            "params": _kernel_params(source, name),
        }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _kernel_params(source: str, kernel: str) -> list[str]:
    """Buffer names in the order of the kernel's signature (TVM orders them by name)."""
    match = re.search(rf"void __launch_bounds__\(\d+\) {kernel}\(([^)]*)\)", source)
    if match is None:
        raise RuntimeError(f"kernel {kernel} not found in the generated source")
    return re.findall(r"(\w+)_ptr\b", match.group(1))


def reference(a, w, rows: int, tile: int, tiles: int, window: int):
    """NumPy reference of the kernel."""
    import numpy as np

    tiles_view = a.reshape(rows, tiles, tile).astype(np.float64)
    out = np.zeros((rows, tile))
    for j in range(window):
        out += np.roll(tiles_view, -j, axis=2).sum(axis=1) * float(w[j])
    return out.astype(np.float32)


def torch_reference(a, w, rows: int, tile: int, tiles: int, window: int):
    """The same computation in PyTorch on the GPU, or None when torch is absent."""
    try:
        import torch
    except ImportError:
        return None
    t = torch.as_tensor(a, device="cuda").reshape(rows, tiles, tile).double()
    out = torch.zeros(rows, tile, dtype=torch.float64, device="cuda")
    for j in range(window):
        out += torch.roll(t, -j, dims=2).sum(dim=1) * float(w[j])
    return out.float().cpu().numpy()


def run(in_dir: Path) -> int:
    """Compile, run and compare every variant in ``in_dir``; return the exit status."""
    import cupy
    import numpy as np

    manifest = json.loads((in_dir / "manifest.json").read_text())
    rows, tile, tiles, window = (manifest[k] for k in ("rows", "tile", "tiles", "window"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, tiles * tile)).astype(np.float32)
    w = rng.standard_normal(window).astype(np.float32)
    outputs = {}
    for variant, spec in manifest["variants"].items():
        cubin = in_dir / f"{variant}.cubin"
        subprocess.run(
            ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-o", str(cubin),
             str(in_dir / spec["file"])],
            check=True,
        )
        function = cupy.RawModule(path=str(cubin)).get_function(spec["kernel"])
        buffers = {
            "A": cupy.asarray(a),
            "W": cupy.asarray(w),
            "B": cupy.zeros((rows, tile), dtype=cupy.float32),
        }
        function((rows,), (tile,), tuple(buffers[name] for name in spec["params"]))
        cupy.cuda.runtime.deviceSynchronize()
        outputs[variant] = cupy.asnumpy(buffers["B"])
    expected = reference(a, w, rows, tile, tiles, window)
    checks = [
        ("double == single (bitwise)", np.array_equal(outputs["double"], outputs["single"])),
        ("single ~= numpy", np.allclose(outputs["single"], expected, rtol=1e-4, atol=1e-4)),
    ]
    torch_out = torch_reference(a, w, rows, tile, tiles, window)
    if torch_out is not None:
        checks.append(
            ("single ~= torch", np.allclose(outputs["single"], torch_out, rtol=1e-4, atol=1e-4))
        )
    else:
        print("torch not available: skipping the PyTorch comparison")
    for racy in ("double_nowar", "single_nowar"):
        if racy in outputs:
            same = np.array_equal(outputs[racy], outputs["single"])
            print(f"info  {racy} == single: {same} (racy kernel, not checked)")
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    failed = [label for label, ok in checks if not ok]
    print("PASS" if not failed else f"FAIL ({len(failed)} of {len(checks)} checks)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR`` or ``--run DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--emit", type=Path, help="write CUDA sources (needs TVM)")
    group.add_argument("--run", type=Path, help="compile and run the sources (needs a GPU)")
    args = parser.parse_args(argv)
    if args.emit is not None:
        manifest = emit(args.emit)
        print(f"wrote {', '.join(v['file'] for v in manifest['variants'].values())} to {args.emit}")
        return 0
    return run(args.run)


if __name__ == "__main__":
    sys.exit(main())
