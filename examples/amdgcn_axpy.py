"""Compile a kernel straight to AMDGCN assembly and a code object with tilewave's own backend.

    python examples/amdgcn_axpy.py [gfx942|gfx950] [out_dir]

Needs llvm-mc-19/ld.lld-19 (gfx942) or triton 3.6 (gfx942, gfx950) to assemble.
"""

import sys

from tvm.script import tirx as T

from tilewave.codegen import amdgcn


@T.prim_func
def axpy(A: T.Buffer((1024,), "float32"), B: T.Buffer((1024,), "float32"),
         C: T.Buffer((1024,), "float32"), alpha: T.float32):
    for bx in T.thread_binding(16, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            C[bx * 64 + tx] = A[bx * 64 + tx] * alpha + B[bx * 64 + tx]


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "gfx942"
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "amdgcn_out"
    print(amdgcn.emit(axpy, target=target).split(".size")[0])
    asm_path, hsaco_path = amdgcn.build_asm(axpy, target, out_dir)
    print(f"wrote {asm_path} and {hsaco_path}")
