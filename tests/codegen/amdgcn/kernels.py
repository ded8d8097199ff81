"""TVMScript kernels the AMDGCN backend tests compile (one workgroup size per kernel)."""

from example_loader import load_example
from tvm.script import tirx as T

import tilewave  # noqa: F401  (registers T.tilewave.* before the kernels are parsed)

N = 256


@T.prim_func
def copy_f32(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            B[bx * 64 + tx] = A[bx * 64 + tx]


@T.prim_func
def copy_vec4(A: T.Buffer((N * 4,), "float32"), B: T.Buffer((N * 4,), "float32")):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            for v in T.vectorized(4):
                B[(bx * 64 + tx) * 4 + v] = A[(bx * 64 + tx) * 4 + v]


@T.prim_func
def axpy_f32(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"),
             C: T.Buffer((N,), "float32"), alpha: T.float32):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            C[bx * 64 + tx] = A[bx * 64 + tx] * alpha + B[bx * 64 + tx]


@T.prim_func
def mul_add_f32(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"),
                C: T.Buffer((N,), "float32")):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            C[bx * 64 + tx] = (A[bx * 64 + tx] + B[bx * 64 + tx]) * T.float32(3.0)


@T.prim_func
def fma_f16(A: T.Buffer((N,), "float16"), B: T.Buffer((N,), "float16"),
            C: T.Buffer((N,), "float16")):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            C[bx * 64 + tx] = A[bx * 64 + tx] * B[bx * 64 + tx] + T.float16(1.5)


@T.prim_func
def transpose_lds(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for ty in T.thread_binding(16, thread="threadIdx.y"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                S = T.alloc_buffer((16, 17), "float32", scope="shared")
                S[ty, tx] = A[ty, tx]
                T.tilewave.lds_barrier()
                B[ty, tx] = S[tx, ty]


@T.prim_func
def row_sum(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64,), "float32")):
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            acc = T.alloc_buffer((1,), "float32", scope="local")
            acc[0] = T.float32(0)
            for k in range(32):
                acc[0] = acc[0] + A[tx, k]
            B[tx] = acc[0]


@T.prim_func
def guarded_scale(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"), n: T.int32):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:
                B[bx * 64 + tx] = A[bx * 64 + tx] * T.float32(2.0)
            else:
                B[bx * 64 + tx] = T.float32(-1.0)


# -- MFMA GEMM: one 16x16 output tile per wave, K loop of 16x16x16 steps ------------------
# v_mfma_f32_16x16x16_{f16,bf16} lane layout (lane l, j = 0..3): A[l % 16][4 * (l // 16) + j],
# B[4 * (l // 16) + j][l % 16], result acc[j] = C[4 * (l // 16) + j][l % 16]. With B given
# transposed (BT[n, k] = B[k, n]) both fragments are 4 contiguous 16-bit values.
# The copyable example is the f16 GEMM under test.
_GEMM_EXAMPLE = load_example("amdgcn_gemm.py")
GEMM_K = _GEMM_EXAMPLE.K
gemm_f16 = _GEMM_EXAMPLE.gemm.with_attr("global_symbol", "gemm_f16")


@T.prim_func
def gemm_bf16(A: T.Buffer((16, GEMM_K), "bfloat16"), BT: T.Buffer((16, GEMM_K), "bfloat16"),
              C: T.Buffer((16, 16), "float32")):
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            acc = T.alloc_buffer((4,), "float32", scope="local")
            # the first step starts from an inline-constant C (0): no zeroing instructions
            acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                "float32x4", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k",
                A[tx % 16, T.Ramp(tx // 16 * 4, 1, 4)], BT[tx % 16, T.Ramp(tx // 16 * 4, 1, 4)],
                T.Broadcast(T.float32(0), 4), 0, 0, 0)
            for k in range(1, GEMM_K // 16):
                acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                    "float32x4", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k",
                    A[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                    BT[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                    acc[T.Ramp(0, 1, 4)], 0, 0, 0)
            for r in T.unroll(4):
                C[tx // 16 * 4 + r, tx % 16] = acc[r]


@T.prim_func
def gemm_lds_f16(A: T.Buffer((16, GEMM_K), "float16"), B: T.Buffer((GEMM_K, 16), "float16"),
                 C: T.Buffer((16, 16), "float32")):
    # A and B (row-major, not transposed) staged through LDS; B is transposed on the way in
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            SA = T.alloc_buffer((16, GEMM_K), "float16", scope="shared")
            SBT = T.alloc_buffer((16, GEMM_K), "float16", scope="shared")
            acc = T.alloc_buffer((4,), "float32", scope="local")
            for i in range(16):
                SA[i, tx] = A[i, tx]
                SBT[i, tx] = B[tx, i]
            T.tilewave.lds_barrier()
            acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
            for k in range(GEMM_K // 16):
                acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                    "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                    SA[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                    SBT[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                    acc[T.Ramp(0, 1, 4)], 0, 0, 0)
            for r in T.unroll(4):
                C[tx // 16 * 4 + r, tx % 16] = acc[r]


@T.prim_func
def block_sum_tree(A: T.Buffer((4, 256), "float32"), B: T.Buffer((4,), "float32")):
    # one workgroup (4 waves) per row: LDS tree reduction, halving the active threads
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            S = T.alloc_buffer((256,), "float32", scope="shared")
            S[tx] = A[bx, tx]
            T.tilewave.lds_barrier()
            for i in range(8):
                if tx < T.shift_right(128, i):
                    S[tx] = S[tx] + S[tx + T.shift_right(128, i)]
                T.tilewave.lds_barrier()
            if tx == 0:
                B[bx] = S[0]


# -- LDS DMA (buffer_load ... lds): global -> LDS without VGPRs ------------------------------
@T.prim_func
def lds_dma_reverse(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    # two waves: each copies its 64 floats to LDS at its own base, then reads the other half
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            S = T.alloc_buffer((128,), "float32", scope="shared")
            T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                               T.address_of(S[tx // 64 * 64]), 4, 0, 0)
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            B[tx] = S[127 - tx] * T.float32(2)


@T.prim_func
def lds_dma_x4(A: T.Buffer((4, 256), "float32"), B: T.Buffer((4, 256), "float32")):
    # gfx950: 16 bytes per lane; workgroup bx stages row bx (offset by a uniform soffset)
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((256,), "float32", scope="shared")
            T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds",
                               T.address_of(A[bx, tx * 4]), T.address_of(S[0]), 16, 0, 0)
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            for j in range(4):
                B[bx, j * 64 + tx] = S[tx * 4 + j]


# -- kernels real programs use (issue 13): halos, rows, runtime sizes, tiled GEMMs ----------
STENCIL_N = 320


@T.prim_func
def stencil_1d(A: T.Buffer((STENCIL_N,), "float32"), B: T.Buffer((STENCIL_N,), "float32")):
    # 3-point stencil: the halo reads A[i - 1] make the per-lane offset negative at tx = 0
    for bx in T.thread_binding(STENCIL_N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx >= 1 and bx * 64 + tx < STENCIL_N - 1:
                B[bx * 64 + tx] = (A[bx * 64 + tx - 1] + A[bx * 64 + tx]
                                   + A[bx * 64 + tx + 1]) * T.float32(1.0 / 3.0)


LAP_H, LAP_W = 32, 48


@T.prim_func
def laplacian_2d(A: T.Buffer((LAP_H, LAP_W), "float32"), B: T.Buffer((LAP_H, LAP_W), "float32")):
    for by in T.thread_binding(LAP_H // 16, thread="blockIdx.y"):
        for bx in T.thread_binding(LAP_W // 16, thread="blockIdx.x"):
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    y = T.meta_var(by * 16 + ty)
                    x = T.meta_var(bx * 16 + tx)
                    if 1 <= y and y < LAP_H - 1 and 1 <= x and x < LAP_W - 1:
                        B[y, x] = (A[y - 1, x] + A[y + 1, x] + A[y, x - 1] + A[y, x + 1]
                                   - T.float32(4) * A[y, x])


@T.prim_func
def laplacian_2d_lds(A: T.Buffer((LAP_H, LAP_W), "float32"),
                     B: T.Buffer((LAP_H, LAP_W), "float32")):
    # the 16x16 tile and its one-element halo staged through LDS
    for by in T.thread_binding(LAP_H // 16, thread="blockIdx.y"):
        for bx in T.thread_binding(LAP_W // 16, thread="blockIdx.x"):
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    S = T.alloc_buffer((18, 18), "float32", scope="shared")
                    y = T.meta_var(by * 16 + ty)
                    x = T.meta_var(bx * 16 + tx)
                    S[ty + 1, tx + 1] = A[y, x]
                    if tx == 0 and x >= 1:
                        S[ty + 1, 0] = A[y, x - 1]
                    if tx == 15 and x < LAP_W - 1:
                        S[ty + 1, 17] = A[y, x + 1]
                    if ty == 0 and y >= 1:
                        S[0, tx + 1] = A[y - 1, x]
                    if ty == 15 and y < LAP_H - 1:
                        S[17, tx + 1] = A[y + 1, x]
                    T.tilewave.lds_barrier()
                    if 1 <= y and y < LAP_H - 1 and 1 <= x and x < LAP_W - 1:
                        B[y, x] = (S[ty, tx + 1] + S[ty + 2, tx + 1] + S[ty + 1, tx]
                                   + S[ty + 1, tx + 2] - T.float32(4) * S[ty + 1, tx + 1])


@T.prim_func
def saxpy_runtime(x: T.handle, y: T.handle, n: T.int32, alpha: T.float32):
    # the length is a kernel argument: buffer sizes and the grid follow it
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (n,), "float32")
    for bx in T.thread_binding((n + 63) // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:
                Y[bx * 64 + tx] = alpha * X[bx * 64 + tx] + Y[bx * 64 + tx]


ROWS, COLS = 64, 16


@T.prim_func
def softmax_rows(A: T.Buffer((ROWS, COLS), "float32"), B: T.Buffer((ROWS, COLS), "float32")):
    # one thread per row: max, sum of exp(x - max), normalise
    for tx in T.thread_binding(ROWS, thread="threadIdx.x"):
        red = T.alloc_buffer((2,), "float32", scope="local")
        red[0] = T.float32(-3.4e38)
        for j in range(COLS):
            red[0] = T.max(red[0], A[tx, j])
        red[1] = T.float32(0)
        for j in range(COLS):
            red[1] = red[1] + T.exp(A[tx, j] - red[0])
        for j in range(COLS):
            B[tx, j] = T.exp(A[tx, j] - red[0]) / red[1]


@T.prim_func
def layernorm_rows(A: T.Buffer((ROWS, COLS), "float32"), G: T.Buffer((COLS,), "float32"),
                   B: T.Buffer((ROWS, COLS), "float32")):
    # one thread per row: mean, variance, (x - mean) * rsqrt(var + eps) * gamma
    for tx in T.thread_binding(ROWS, thread="threadIdx.x"):
        red = T.alloc_buffer((2,), "float32", scope="local")
        red[0] = T.float32(0)
        for j in range(COLS):
            red[0] = red[0] + A[tx, j]
        red[0] = red[0] * T.float32(1.0 / COLS)
        red[1] = T.float32(0)
        for j in range(COLS):
            red[1] = red[1] + (A[tx, j] - red[0]) * (A[tx, j] - red[0])
        red[1] = T.rsqrt(red[1] * T.float32(1.0 / COLS) + T.float32(1e-5))
        for j in range(COLS):
            B[tx, j] = (A[tx, j] - red[0]) * red[1] * G[j]


SG = 32  # SGEMM: 32x32x32, 4x4 outputs per thread (8x8 threads)


@T.prim_func
def sgemm_regtile(A: T.Buffer((SG, SG), "float32"), B: T.Buffer((SG, SG), "float32"),
                  C: T.Buffer((SG, SG), "float32")):
    for ty in T.thread_binding(SG // 4, thread="threadIdx.y"):
        for tx in T.thread_binding(SG // 4, thread="threadIdx.x"):
            acc = T.alloc_buffer((16,), "float32", scope="local")
            for i in T.unroll(16):
                acc[i] = T.float32(0)
            for k in range(SG):
                for i in T.unroll(4):
                    for j in T.unroll(4):
                        acc[i * 4 + j] = acc[i * 4 + j] + A[ty * 4 + i, k] * B[k, tx * 4 + j]
            for i in T.unroll(4):
                for j in T.unroll(4):
                    C[ty * 4 + i, tx * 4 + j] = acc[i * 4 + j]


MG = 32  # 4-wave LDS MFMA GEMM: C[32, 32] = A[32, K] @ B[K, 32], one 16x16 tile per wave


@T.prim_func
def gemm_lds_4wave(A: T.Buffer((MG, GEMM_K), "float16"), BT: T.Buffer((MG, GEMM_K), "float16"),
                   C: T.Buffer((MG, MG), "float32")):
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            SA = T.alloc_buffer((MG, GEMM_K), "float16", scope="shared")
            SB = T.alloc_buffer((MG, GEMM_K), "float16", scope="shared")
            acc = T.alloc_buffer((4,), "float32", scope="local")
            for i in range(MG * GEMM_K // 256):
                SA[i * 256 // GEMM_K + tx // GEMM_K, tx % GEMM_K] = A[
                    i * 256 // GEMM_K + tx // GEMM_K, tx % GEMM_K]
                SB[i * 256 // GEMM_K + tx // GEMM_K, tx % GEMM_K] = BT[
                    i * 256 // GEMM_K + tx // GEMM_K, tx % GEMM_K]
            T.tilewave.lds_barrier()
            acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
            for k in range(GEMM_K // 16):
                acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                    "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                    SA[tx // 128 * 16 + tx % 16, T.Ramp(k * 16 + tx % 64 // 16 * 4, 1, 4)],
                    SB[tx // 64 % 2 * 16 + tx % 16, T.Ramp(k * 16 + tx % 64 // 16 * 4, 1, 4)],
                    acc[T.Ramp(0, 1, 4)], 0, 0, 0)
            for r in T.unroll(4):
                C[tx // 128 * 16 + tx % 64 // 16 * 4 + r, tx // 64 % 2 * 16 + tx % 16] = acc[r]


@T.prim_func
def sigmoid_f32(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            B[bx * 64 + tx] = T.float32(1) / (T.float32(1) + T.exp(T.float32(0) - A[bx * 64 + tx]))


@T.prim_func
def index_div_mod(A: T.Buffer((3 * N,), "float32"), B: T.Buffer((3 * N,), "float32")):
    # an (N, 3) -> (3, N) transpose addressed through // 3 and % 3
    for bx in T.thread_binding(3 * N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            B[(bx * 64 + tx) % 3 * N + (bx * 64 + tx) // 3] = A[bx * 64 + tx]


@T.prim_func
def quantize_int8(A: T.Buffer((N,), "float32"), Q: T.Buffer((N,), "int8"), scale: T.float32):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            Q[bx * 64 + tx] = T.Cast("int8", T.max(T.min(
                A[bx * 64 + tx] * scale, T.float32(127)), T.float32(-128)))


@T.prim_func
def scale_bf16(A: T.Buffer((N,), "bfloat16"), B: T.Buffer((N,), "bfloat16")):
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            B[bx * 64 + tx] = A[bx * 64 + tx] * T.bfloat16(1.5) + T.bfloat16(0.25)
