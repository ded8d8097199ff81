"""Kernels written with tilewave's own ops, parsed from TVMScript."""

from tvm.script import tirx as T

import tilewave  # noqa: F401  (registers the T.tilewave.* ops before parsing)


@T.prim_func
def uses_every_tilewave_op(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.commit_async_ops()
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        T.tilewave.barrier_signal(0)
        T.tilewave.barrier_wait(0)
        T.tilewave.fence_proxy_async()
        A[tx] = S[63 - tx]
