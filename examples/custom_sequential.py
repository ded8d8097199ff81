"""Put tilewave passes into your own tvm.transform.Sequential (the README's example)."""

import tvm
from tvm.script import tirx as T

from tilewave.codegen.lower_ops import LowerTilewaveOps
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers


@T.prim_func
def reverse(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[255 - tx]  # reads another thread's write: needs a barrier


seq = tvm.transform.Sequential(
    [
        InsertSharedBarriers("gfx1200"),  # adds T.tilewave.barrier_signal/wait (split style)
        LowerTilewaveOps("gfx1200"),  # -> llvm.amdgcn.s.barrier.signal / .wait
    ]
)
print(seq(tvm.IRModule({"reverse": reverse})).script())
