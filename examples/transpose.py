"""A tiled shared-memory transpose to copy and adapt; lower it with

    tilewave lower examples/transpose.py --target sm_90a --emit source
    tilewave lower examples/transpose.py --target gfx942 --emit source

or from Python: ``python examples/transpose.py``.
"""

import tvm
from tvm.script import tirx as T

import tilewave


@T.prim_func
def transpose(A: T.Buffer((1024, 1024), "float16"), B: T.Buffer((1024, 1024), "float16")):
    T.func_attr({"global_symbol": "transpose"})
    for by in T.thread_binding(32, thread="blockIdx.y"):
        for bx in T.thread_binding(32, thread="blockIdx.x"):
            for ty in T.thread_binding(8, thread="threadIdx.y"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    tile = T.alloc_buffer((32, 33), "float16", scope="shared")
                    for i in range(4):
                        tile[ty * 4 + i, tx] = A[by * 32 + ty * 4 + i, bx * 32 + tx]
                    # Threads read what other threads wrote: tilewave's barrier op.
                    T.tilewave.lds_barrier()
                    for i in range(4):
                        B[bx * 32 + ty * 4 + i, by * 32 + tx] = tile[tx, ty * 4 + i]


if __name__ == "__main__":
    for target in ("sm_90a", "gfx942"):
        result = tilewave.build(transpose, target)
        print(f"== {target}: {len(result.source.splitlines())} lines of {result.source_language}")
    print(tvm.IRModule({"transpose": transpose}).script())
