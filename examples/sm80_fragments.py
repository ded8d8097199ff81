"""TVMScript macros for sm_80 warp-level matrix fragments, shared by the sm80_* examples.

Register fragments live in ``local`` buffers and are named by a buffer and the index of their
first register (``acc, 12`` = ``acc[12..15]``), the way the kernels keep them in flat arrays
indexed by unrolled-loop constants. Needs TVM (the macros are parsed at import).
"""

from __future__ import annotations

from tvm.script import tirx as T


@T.macro
def mma_m16n8k16(D, d, A, a, B, b):
    """``D[d:d+4] += A[a:a+4] @ B[b:b+2]``: one ``mma.sync.m16n8k16`` (fp16 in, fp32 acc)."""
    T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"](
        D[d + 0],
        D[d + 1],
        D[d + 2],
        D[d + 3],
        A[a + 0],
        A[a + 1],
        A[a + 2],
        A[a + 3],
        B[b + 0],
        B[b + 1],
        D[d + 0],
        D[d + 1],
        D[d + 2],
        D[d + 3],
    )


@T.macro
def ldmatrix_x4(R, r, address):
    """``R[r:r+4]`` = four 8x8 fp16 matrices whose row addresses lanes 0-31 give."""
    T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"](
        R[r + 0], R[r + 1], R[r + 2], R[r + 3], address
    )


@T.macro
def ldmatrix_x4_trans(R, r, address):
    """:func:`ldmatrix_x4` with each matrix transposed (``.trans``)."""
    T.ptx["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"](
        R[r + 0], R[r + 1], R[r + 2], R[r + 3], address
    )
