"""A 16x16 GEMM tile on the matrix cores, compiled by tilewave's own AMDGCN backend.

    python examples/amdgcn_gemm.py [gfx942|gfx950] [out_dir]

One wave computes C (16x16, float32) = A (16xK, float16) @ B (Kx16) with one
``v_mfma_f32_16x16x16_f16`` per 16-wide K step; the accumulator stays in the same four
VGPRs across the K loop. B is passed transposed (BT[n, k] = B[k, n]) so that both operand
fragments are 8-byte loads. Lane layout (lane l, j = 0..3): A[l % 16][4 * (l // 16) + j],
B[4 * (l // 16) + j][l % 16], acc[j] = C[4 * (l // 16) + j][l % 16] — see docs/amdgcn.md.
The same kernel also builds through TVM's LLVM backend: ``tilewave.build(gemm, "gfx942")``.

Needs llvm-mc-19/ld.lld-19 (gfx942) or triton 3.6 (gfx942, gfx950) to assemble.
"""

import sys

from tvm.script import tirx as T

from tilewave.codegen import amdgcn

K = 64


@T.prim_func
def gemm(A: T.Buffer((16, K), "float16"), BT: T.Buffer((16, K), "float16"),
         C: T.Buffer((16, 16), "float32")):
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            acc = T.alloc_buffer((4,), "float32", scope="local")
            acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
            for k in range(K // 16):
                acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                    "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                    A[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                    BT[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                    acc[T.Ramp(0, 1, 4)], 0, 0, 0)
            for r in T.unroll(4):
                C[tx // 16 * 4 + r, tx % 16] = acc[r]


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "gfx942"
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "amdgcn_out"
    print(amdgcn.emit(gemm, target=target).split(".size")[0])
    asm_path, hsaco_path = amdgcn.build_asm(gemm, target, out_dir)
    print(f"wrote {asm_path} and {hsaco_path}")
