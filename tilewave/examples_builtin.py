"""Built-in example kernels that ``tilewave demo`` lowers for every target.

They live in a real file because TVMScript parses a ``@T.prim_func`` from its source.
Both share data between threads through shared memory (LDS) and are written *without*
barriers: tilewave's ``InsertSharedBarriers`` stage decides where they go, which is what
``tilewave demo`` shows. ``block_sum_hand_synced`` is the same reduction with the barriers a
TVM kernel written by hand would carry; the pass keeps them and adds none.
"""

from __future__ import annotations

import tvm
from tvm.script import tirx as T

import tilewave.ir.ops  # noqa: F401 (registers T.tilewave.* before the kernels are parsed)

__all__ = ["BUILTIN_KERNELS", "block_sum", "block_sum_hand_synced", "tiled_transpose"]

TILE = 32
ROWS_PER_THREAD = 4
REDUCE_THREADS = 256


@T.prim_func
def tiled_transpose(A: T.Buffer((256, 256), "float32"), B: T.Buffer((256, 256), "float32")):
    """B = A^T through a 32x32 shared tile per block (32x8 threads, 4 rows per thread)."""
    T.func_attr({"global_symbol": "tiled_transpose"})
    for by in T.thread_binding(8, thread="blockIdx.y"):
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for ty in T.thread_binding(8, thread="threadIdx.y"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    tile = T.alloc_buffer((32, 33), "float32", scope="shared")
                    for i in range(4):
                        tile[ty * 4 + i, tx] = A[by * 32 + ty * 4 + i, bx * 32 + tx]
                    # Each thread reads a column that other threads wrote: a RAW hazard, for
                    # which InsertSharedBarriers puts a barrier here.
                    for i in range(4):
                        B[bx * 32 + ty * 4 + i, by * 32 + tx] = tile[tx, ty * 4 + i]


@T.prim_func
def block_sum(A: T.Buffer((4096,), "float32"), B: T.Buffer((16,), "float32")):
    """B[b] = sum of A's 256-element block b, by a tree reduction in shared memory.

    No barriers: InsertSharedBarriers finds that each level reads what the previous level
    (or the load) wrote, and that the guarded update itself is race-free.
    """
    T.func_attr({"global_symbol": "block_sum"})
    for bx in T.thread_binding(16, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            partial = T.alloc_buffer((256,), "float32", scope="shared")
            partial[tx] = A[bx * 256 + tx]
            for level in range(8):
                # Thread tx adds the value of its neighbour `stride` slots away.
                if tx < T.shift_right(128, level):
                    partial[tx] = partial[tx] + partial[tx + T.shift_right(128, level)]
            if tx == 0:
                B[bx] = partial[0]


@T.prim_func
def block_sum_hand_synced(A: T.Buffer((4096,), "float32"), B: T.Buffer((16,), "float32")):
    """``block_sum`` with barriers written by hand, as TVM kernels usually carry them."""
    T.func_attr({"global_symbol": "block_sum_hand_synced"})
    for bx in T.thread_binding(16, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            partial = T.alloc_buffer((256,), "float32", scope="shared")
            partial[tx] = A[bx * 256 + tx]
            T.tilewave.lds_barrier()
            for level in range(8):
                if tx < T.shift_right(128, level):
                    partial[tx] = partial[tx] + partial[tx + T.shift_right(128, level)]
                T.tilewave.lds_barrier()
            if tx == 0:
                B[bx] = partial[0]


#: name -> kernel, in the order ``tilewave demo`` shows them.
BUILTIN_KERNELS: dict[str, tvm.tirx.PrimFunc] = {
    "tiled_transpose": tiled_transpose,
    "block_sum": block_sum,
}
