"""A TIRx block reduction, synchronised by hand, for ``tir_pipeline="tilewave-tirx"``.

``B[b] = sum(A[256 b : 256 (b + 1)])`` for 16 blocks: each CTA loads its 256 values into
shared memory and halves the active threads eight times. The hand version synchronises
after the load and after every level (``T.cuda.cta_sync()``); ``stripped()`` has none and
``tir_pipeline="tilewave-tirx"`` decides them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_kernel_variants import strip_sync

import tilewave  # noqa: F401 (registers tir_pipeline="tilewave-tirx")

BLOCKS = 16
THREADS = 256

#: What the H100 driver (examples/tirx_h100.py) needs to launch and check the kernel.
PROBLEM = {
    "name": "tirx_reduction",
    "args": [
        ("A", [BLOCKS * THREADS], "float32", "in"),
        ("B", [BLOCKS], "float32", "out"),
    ],
    "reference": "block_sum",
}


@T.prim_func
def hand(A: T.Buffer((BLOCKS * THREADS,), "float32"), B: T.Buffer((BLOCKS,), "float32")):
    T.func_attr({"global_symbol": "tirx_reduction"})
    T.device_entry()
    bx = T.cta_id([BLOCKS])
    tx = T.thread_id([THREADS])
    partial = T.alloc_shared((THREADS,), "float32")
    partial[tx] = A[bx * THREADS + tx]
    T.cuda.cta_sync()
    for level in range(8):
        if tx < (THREADS // 2 >> level):
            partial[tx] = partial[tx] + partial[tx + (THREADS // 2 >> level)]
        T.cuda.cta_sync()
    if tx == 0:
        B[bx] = partial[0]


def stripped():
    """:data:`hand` without its barriers."""
    return strip_sync(hand)
