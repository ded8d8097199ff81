"""Kernel files the CLI tests write to disk and pass to `tilewave lower` / `tilewave build`."""

import textwrap

#: A shared-memory reverse with a barrier written as tilewave's op.
REVERSE_KERNEL = textwrap.dedent(
    """
    from tvm.script import tirx as T
    import tilewave

    @T.prim_func
    def reverse(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        T.func_attr({"global_symbol": "reverse"})
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            S[tx] = A[tx]
            T.tilewave.lds_barrier()
            B[tx] = S[63 - tx]
    """
)
