"""A TIRx tiled transpose, synchronised by hand, for ``tir_pipeline="tilewave-tirx"``.

``B = A^T`` for a 256 x 256 fp32 matrix: each CTA (8 x 8 grid) stages a 32 x 32 tile in shared
memory (padded to 33 columns), 8 x 32 threads, 4 rows per thread. Every thread then reads a
column other threads wrote, so the hand version has one ``T.cuda.cta_sync()`` between the
two loops. ``stripped()`` is the same kernel without it: ``tir_pipeline="tirx"`` (TVM's TIRx
pipeline inserts no synchronisation) leaves it racy; ``tir_pipeline="tilewave-tirx"`` puts
the barrier back.

    import tilewave, tvm
    ex = tvm.compile(stripped(), target={"kind": "cuda", "arch": "sm_90a"},
                     tir_pipeline="tilewave-tirx")
"""

from __future__ import annotations

import sys
from pathlib import Path

from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_kernel_variants import strip_sync

import tilewave  # noqa: F401 (registers tir_pipeline="tilewave-tirx")

N = 256
TILE = 32

#: What the H100 driver (examples/tirx_h100.py) needs to launch and check the kernel.
PROBLEM = {
    "name": "tirx_transpose",
    "args": [("A", [N, N], "float32", "in"), ("B", [N, N], "float32", "out")],
    "reference": "transpose",
}


@T.prim_func
def hand(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32")):
    T.func_attr({"global_symbol": "tirx_transpose"})
    T.device_entry()
    by, bx = T.cta_id([N // TILE, N // TILE])
    ty, tx = T.thread_id([8, TILE])
    tile = T.alloc_shared((TILE, TILE + 1), "float32")
    for i in range(4):
        tile[ty * 4 + i, tx] = A[by * TILE + ty * 4 + i, bx * TILE + tx]
    T.cuda.cta_sync()
    for i in range(4):
        B[bx * TILE + ty * 4 + i, by * TILE + tx] = tile[tx, ty * 4 + i]


def stripped():
    """:data:`hand` without its barrier."""
    return strip_sync(hand)
