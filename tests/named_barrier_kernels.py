"""Warp-specialised producer/consumer kernels shared by the named-barrier tests."""

from tvm.script import tirx as T

import tilewave  # noqa: F401


@T.prim_func
def ws_before(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
            else:
                B[k, tx - 128] = S[255 - tx] + T.float32(1)


@T.prim_func
def ws_after(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(256))  # RAW: tile k written
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))  # WAR: wait for tile k's reads
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx] + T.float32(1)
                T.ptx.bar.arrive(T.uint32(2), T.uint32(256))  # done reading tile k


@T.prim_func
def straight_split(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tx < 128:
            S[tx] = A[tx] * T.float32(2)
        else:
            B[tx - 128] = S[255 - tx]
