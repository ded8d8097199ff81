"""A TIRx GEMM tile loop with sm_80 ``cp.async`` double buffering, synchronised by hand.

``C = A @ B`` (fp32, M = N = K = 1024): each CTA computes a 32 x 32 tile of ``C`` with 256
threads (4 outputs each, FMA in registers), stepping over K in 32-wide slices held in two
shared stages. The slices go global -> shared with ``cp.async.cg`` (16 bytes a thread):
slice ``k + 1`` is issued before slice ``k`` is used, so the copy overlaps the arithmetic.

The hand version, per step: issue the prefetch, ``commit_group``, ``wait_group 1`` (the
current slice has landed), ``cta_sync`` (every thread's copy has), compute, ``cta_sync``
(everyone is done reading before the stage is refilled). ``stripped()`` has no wait, no
commit and no barrier; ``tir_pipeline="tilewave-tirx"`` decides them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_kernel_variants import strip_sync

import tilewave  # noqa: F401 (registers tir_pipeline="tilewave-tirx")

M = N = K = 1024
TILE = 32
STEPS = K // TILE

#: What the H100 driver (examples/tirx_h100.py) needs to launch and check the kernel.
PROBLEM = {
    "name": "tirx_cp_async_gemm",
    "args": [
        ("A", [M, K], "float32", "in"),
        ("B", [K, N], "float32", "in"),
        ("C", [M, N], "float32", "out"),
    ],
    "reference": "matmul",
    "flops": 2 * M * N * K,
}

_COPY = "cp.async.cg.shared.global"


@T.prim_func
def hand(
    A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")
):
    T.func_attr({"global_symbol": "tirx_cp_async_gemm"})
    T.device_entry()
    by, bx = T.cta_id([M // TILE, N // TILE])
    tid = T.thread_id([256])
    As = T.alloc_shared((2, TILE, TILE), "float32")
    Bs = T.alloc_shared((2, TILE, TILE), "float32")
    acc = T.alloc_local((4,), "float32")
    # macros, not locals: the indices stay affine in tid for tilewave's analysis
    row = T.meta_var(tid // 8)
    col = T.meta_var(tid % 8 * 4)
    for j in range(4):
        acc[j] = T.float32(0)
    T.ptx[_COPY](T.address_of(As[0, row, col]), T.address_of(A[by * TILE + row, col]), 16)
    T.ptx[_COPY](T.address_of(Bs[0, row, col]), T.address_of(B[row, bx * TILE + col]), 16)
    T.ptx["cp.async.commit_group"]()
    for ko in range(STEPS):
        if ko + 1 < STEPS:
            T.ptx[_COPY](
                T.address_of(As[(ko + 1) % 2, row, col]),
                T.address_of(A[by * TILE + row, (ko + 1) * TILE + col]),
                16,
            )
            T.ptx[_COPY](
                T.address_of(Bs[(ko + 1) % 2, row, col]),
                T.address_of(B[(ko + 1) * TILE + row, bx * TILE + col]),
                16,
            )
        T.ptx["cp.async.commit_group"]()
        T.ptx["cp.async.wait_group"](1)
        T.cuda.cta_sync()
        for kk in range(TILE):
            for j in range(4):
                acc[j] = acc[j] + As[ko % 2, row, kk] * Bs[ko % 2, kk, col + j]
        T.cuda.cta_sync()
    for j in range(4):
        C[by * TILE + row, bx * TILE + col + j] = acc[j]


def stripped():
    """:data:`hand` without its waits, commits and barriers."""
    return strip_sync(hand)
