"""TVMScript kernels the AMDGCN backend tests compile (one workgroup size per kernel).

Each benchmark kernel is the default instance of a factory (``make_<kernel>(sizes...)``):
the benchmark (benchmarks/asm_vs_llvm.py) and most tests use the module-level instance, and
tests/codegen/amdgcn/test_amdgcn_edge_sizes.py builds the same kernel at edge sizes (one
element, a partial last wave, one block more than a multiple of 64...). Guards such as
``i < n`` that a default size makes always true are simplified away by the lowering, so the
default instance compiles to what the plain kernel did.
"""

from example_loader import load_example
from tvm import tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401  (registers T.tilewave.* before the kernels are parsed)

N = 256


def blocks_of(n: int, per_block: int = 64) -> int:
    """Workgroups that cover ``n`` items, ``per_block`` per workgroup (at least one)."""
    return max((n + per_block - 1) // per_block, 1)


def _named(func: tirx.PrimFunc, name: str) -> tirx.PrimFunc:
    return func.with_attr("global_symbol", name)


# -- 1-D elementwise kernels: one element per lane, 64 lanes per workgroup; a length that is
# not a multiple of 64 leaves the last wave partial (its lanes past n are guarded off) ------
def make_copy_f32(n: int = N) -> tirx.PrimFunc:
    """``B = A`` over ``n`` float32 elements."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    B[bx * 64 + tx] = A[bx * 64 + tx]

    return _named(kernel, "copy_f32")


def make_copy_vec4(n: int = N) -> tirx.PrimFunc:
    """``B = A`` over ``n`` groups of 4 float32 (16-byte accesses), one group per lane."""
    @T.prim_func
    def kernel(A: T.Buffer((n * 4,), "float32"), B: T.Buffer((n * 4,), "float32")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    for v in T.vectorized(4):
                        B[(bx * 64 + tx) * 4 + v] = A[(bx * 64 + tx) * 4 + v]

    return _named(kernel, "copy_vec4")


def make_axpy_f32(n: int = N) -> tirx.PrimFunc:
    """``C = A * alpha + B`` (float32, ``alpha`` a kernel argument)."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32"),
               C: T.Buffer((n,), "float32"), alpha: T.float32):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    C[bx * 64 + tx] = A[bx * 64 + tx] * alpha + B[bx * 64 + tx]

    return _named(kernel, "axpy_f32")


def make_mul_add_f32(n: int = N) -> tirx.PrimFunc:
    """``C = (A + B) * 3``."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32"),
               C: T.Buffer((n,), "float32")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    C[bx * 64 + tx] = (A[bx * 64 + tx] + B[bx * 64 + tx]) * T.float32(3.0)

    return _named(kernel, "mul_add_f32")


def make_fma_f16(n: int = N) -> tirx.PrimFunc:
    """``C = A * B + 1.5`` in float16."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float16"), B: T.Buffer((n,), "float16"),
               C: T.Buffer((n,), "float16")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    C[bx * 64 + tx] = A[bx * 64 + tx] * B[bx * 64 + tx] + T.float16(1.5)

    return _named(kernel, "fma_f16")


def make_sigmoid_f32(n: int = N) -> tirx.PrimFunc:
    """``B = 1 / (1 + exp(-A))``."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    B[bx * 64 + tx] = T.float32(1) / (
                        T.float32(1) + T.exp(T.float32(0) - A[bx * 64 + tx]))

    return _named(kernel, "sigmoid_f32")


def make_index_div_mod(n: int = N) -> tirx.PrimFunc:
    """An (n, 3) -> (3, n) transpose addressed through ``// 3`` and ``% 3`` (3n lanes)."""
    @T.prim_func
    def kernel(A: T.Buffer((3 * n,), "float32"), B: T.Buffer((3 * n,), "float32")):
        for bx in T.thread_binding(blocks_of(3 * n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < 3 * n:
                    B[(bx * 64 + tx) % 3 * n + (bx * 64 + tx) // 3] = A[bx * 64 + tx]

    return _named(kernel, "index_div_mod")


def make_quantize_int8(n: int = N) -> tirx.PrimFunc:
    """``Q = int8(clamp(A * scale, -128, 127))`` (truncating cast)."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), Q: T.Buffer((n,), "int8"), scale: T.float32):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    Q[bx * 64 + tx] = T.Cast("int8", T.max(T.min(
                        A[bx * 64 + tx] * scale, T.float32(127)), T.float32(-128)))

    return _named(kernel, "quantize_int8")


def make_scale_bf16(n: int = N) -> tirx.PrimFunc:
    """``B = A * 1.5 + 0.25`` in bfloat16."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "bfloat16"), B: T.Buffer((n,), "bfloat16")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx < n:
                    B[bx * 64 + tx] = A[bx * 64 + tx] * T.bfloat16(1.5) + T.bfloat16(0.25)

    return _named(kernel, "scale_bf16")


copy_f32 = make_copy_f32()
copy_vec4 = make_copy_vec4()
axpy_f32 = make_axpy_f32()
mul_add_f32 = make_mul_add_f32()
fma_f16 = make_fma_f16()
sigmoid_f32 = make_sigmoid_f32()
index_div_mod = make_index_div_mod()
quantize_int8 = make_quantize_int8()
scale_bf16 = make_scale_bf16()


def make_transpose_lds(tiles: int = 1) -> tirx.PrimFunc:
    """B (16*tiles x 16) = A (16 x 16*tiles) transposed, one 16x16 tile per workgroup through
    LDS (a padded row of 17 against bank conflicts)."""
    @T.prim_func
    def kernel(A: T.Buffer((16, 16 * tiles), "float32"),
               B: T.Buffer((16 * tiles, 16), "float32")):
        for bx in T.thread_binding(tiles, thread="blockIdx.x"):
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    S = T.alloc_buffer((16, 17), "float32", scope="shared")
                    S[ty, tx] = A[ty, bx * 16 + tx]
                    T.tilewave.lds_barrier()
                    B[bx * 16 + ty, tx] = S[tx, ty]

    return _named(kernel, "transpose_lds")


def make_row_sum(rows: int = 64, cols: int = 32) -> tirx.PrimFunc:
    """``B[r] = sum(A[r, :])``, one lane per row in one workgroup of ``rows`` lanes."""
    @T.prim_func
    def kernel(A: T.Buffer((rows, cols), "float32"), B: T.Buffer((rows,), "float32")):
        for _bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(rows, thread="threadIdx.x"):
                acc = T.alloc_buffer((1,), "float32", scope="local")
                acc[0] = T.float32(0)
                for k in range(cols):
                    acc[0] = acc[0] + A[tx, k]
                B[tx] = acc[0]

    return _named(kernel, "row_sum")


@T.prim_func
def guarded_scale(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"), n: T.int32):
    # the length n is a kernel argument; the buffers and the grid are N long
    for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:
                B[bx * 64 + tx] = A[bx * 64 + tx] * T.float32(2.0)
            else:
                B[bx * 64 + tx] = T.float32(-1.0)


transpose_lds = make_transpose_lds()
row_sum = make_row_sum()

# -- MFMA GEMM: one 16x16 output tile per wave, K loop of 16x16x16 steps ------------------
# v_mfma_f32_16x16x16_{f16,bf16} lane layout (lane l, j = 0..3): A[l % 16][4 * (l // 16) + j],
# B[4 * (l // 16) + j][l % 16], result acc[j] = C[4 * (l // 16) + j][l % 16]. With B given
# transposed (BT[n, k] = B[k, n]) both fragments are 4 contiguous 16-bit values.
# The copyable example is the f16 GEMM under test; make_gemm_f16(K) is the same kernel for
# another K (a test checks that make_gemm_f16(GEMM_K) is the example).
_GEMM_EXAMPLE = load_example("amdgcn_gemm.py")
GEMM_K = _GEMM_EXAMPLE.K
gemm_f16 = _GEMM_EXAMPLE.gemm.with_attr("global_symbol", "gemm_f16")


def make_gemm_f16(k: int = GEMM_K) -> tirx.PrimFunc:
    """The example's f16 GEMM (C = A @ BT^T, 16x16) for a reduction length ``k``."""
    @T.prim_func
    def gemm(A: T.Buffer((16, k), "float16"), BT: T.Buffer((16, k), "float16"),
             C: T.Buffer((16, 16), "float32")):
        for _bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                acc = T.alloc_buffer((4,), "float32", scope="local")
                acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
                for kk in range(k // 16):
                    acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                        "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                        A[tx % 16, T.Ramp(kk * 16 + tx // 16 * 4, 1, 4)],
                        BT[tx % 16, T.Ramp(kk * 16 + tx // 16 * 4, 1, 4)],
                        acc[T.Ramp(0, 1, 4)], 0, 0, 0)
                for r in T.unroll(4):
                    C[tx // 16 * 4 + r, tx % 16] = acc[r]

    return _named(gemm, "gemm_f16")


def make_gemm_bf16(k: int = GEMM_K) -> tirx.PrimFunc:
    """C = A @ BT^T in bf16 (16x16, f32 accumulator); the first K step is peeled (k = 16
    leaves the loop empty)."""
    @T.prim_func
    def kernel(A: T.Buffer((16, k), "bfloat16"), BT: T.Buffer((16, k), "bfloat16"),
               C: T.Buffer((16, 16), "float32")):
        for _bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                acc = T.alloc_buffer((4,), "float32", scope="local")
                # the first step starts from an inline-constant C (0): no zeroing instructions
                acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                    "float32x4", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k",
                    A[tx % 16, T.Ramp(tx // 16 * 4, 1, 4)],
                    BT[tx % 16, T.Ramp(tx // 16 * 4, 1, 4)],
                    T.Broadcast(T.float32(0), 4), 0, 0, 0)
                for kk in range(1, k // 16):
                    acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                        "float32x4", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k",
                        A[tx % 16, T.Ramp(kk * 16 + tx // 16 * 4, 1, 4)],
                        BT[tx % 16, T.Ramp(kk * 16 + tx // 16 * 4, 1, 4)],
                        acc[T.Ramp(0, 1, 4)], 0, 0, 0)
                for r in T.unroll(4):
                    C[tx // 16 * 4 + r, tx % 16] = acc[r]

    return _named(kernel, "gemm_bf16")


def make_gemm_lds_f16(k: int = GEMM_K) -> tirx.PrimFunc:
    """C = A @ B (16x16, A 16 x k and B k x 16 row-major, k a multiple of 64) staged through
    LDS, B transposed on the way in; 64 columns per staging step."""
    @T.prim_func
    def kernel(A: T.Buffer((16, k), "float16"), B: T.Buffer((k, 16), "float16"),
               C: T.Buffer((16, 16), "float32")):
        for _bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                SA = T.alloc_buffer((16, k), "float16", scope="shared")
                SBT = T.alloc_buffer((16, k), "float16", scope="shared")
                acc = T.alloc_buffer((4,), "float32", scope="local")
                for c in range(k // 64):
                    for i in range(16):
                        SA[i, c * 64 + tx] = A[i, c * 64 + tx]
                        SBT[i, c * 64 + tx] = B[c * 64 + tx, i]
                T.tilewave.lds_barrier()
                acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
                for kk in range(k // 16):
                    acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                        "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                        SA[tx % 16, T.Ramp(kk * 16 + tx // 16 * 4, 1, 4)],
                        SBT[tx % 16, T.Ramp(kk * 16 + tx // 16 * 4, 1, 4)],
                        acc[T.Ramp(0, 1, 4)], 0, 0, 0)
                for r in T.unroll(4):
                    C[tx // 16 * 4 + r, tx % 16] = acc[r]

    return _named(kernel, "gemm_lds_f16")


def make_block_sum_tree(rows: int = 4) -> tirx.PrimFunc:
    """``B[r] = sum(A[r, :])`` over rows of 256: one workgroup (4 waves) per row, an LDS tree
    reduction halving the active threads."""
    @T.prim_func
    def kernel(A: T.Buffer((rows, 256), "float32"), B: T.Buffer((rows,), "float32")):
        for bx in T.thread_binding(rows, thread="blockIdx.x"):
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

    return _named(kernel, "block_sum_tree")


gemm_bf16 = make_gemm_bf16()
gemm_lds_f16 = make_gemm_lds_f16()
block_sum_tree = make_block_sum_tree()


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


def make_stencil_1d(n: int = STENCIL_N) -> tirx.PrimFunc:
    """3-point stencil over the interior of ``n`` points: the halo reads A[i - 1] make the
    per-lane offset negative at tx = 0."""
    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for bx in T.thread_binding(blocks_of(n), thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx >= 1 and bx * 64 + tx < n - 1:
                    B[bx * 64 + tx] = (A[bx * 64 + tx - 1] + A[bx * 64 + tx]
                                       + A[bx * 64 + tx + 1]) * T.float32(1.0 / 3.0)

    return _named(kernel, "stencil_1d")


LAP_H, LAP_W = 32, 48


def make_laplacian_2d(h: int = LAP_H, w: int = LAP_W) -> tirx.PrimFunc:
    """5-point Laplacian of the interior of an h x w grid, 16x16 tiles (the last row and
    column of tiles partial when h or w is not a multiple of 16)."""
    @T.prim_func
    def kernel(A: T.Buffer((h, w), "float32"), B: T.Buffer((h, w), "float32")):
        for by in T.thread_binding(blocks_of(h, 16), thread="blockIdx.y"):
            for bx in T.thread_binding(blocks_of(w, 16), thread="blockIdx.x"):
                for ty in T.thread_binding(16, thread="threadIdx.y"):
                    for tx in T.thread_binding(16, thread="threadIdx.x"):
                        y = T.meta_var(by * 16 + ty)
                        x = T.meta_var(bx * 16 + tx)
                        if 1 <= y and y < h - 1 and 1 <= x and x < w - 1:
                            B[y, x] = (A[y - 1, x] + A[y + 1, x] + A[y, x - 1] + A[y, x + 1]
                                       - T.float32(4) * A[y, x])

    return _named(kernel, "laplacian_2d")


def make_laplacian_2d_lds(h: int = LAP_H, w: int = LAP_W) -> tirx.PrimFunc:
    """The Laplacian with each 16x16 tile and its one-element halo staged through LDS; lanes
    past the grid's edge (partial tiles) stage nothing."""
    @T.prim_func
    def kernel(A: T.Buffer((h, w), "float32"), B: T.Buffer((h, w), "float32")):
        for by in T.thread_binding(blocks_of(h, 16), thread="blockIdx.y"):
            for bx in T.thread_binding(blocks_of(w, 16), thread="blockIdx.x"):
                for ty in T.thread_binding(16, thread="threadIdx.y"):
                    for tx in T.thread_binding(16, thread="threadIdx.x"):
                        S = T.alloc_buffer((18, 18), "float32", scope="shared")
                        y = T.meta_var(by * 16 + ty)
                        x = T.meta_var(bx * 16 + tx)
                        if y < h and x < w:
                            S[ty + 1, tx + 1] = A[y, x]
                            if tx == 0 and x >= 1:
                                S[ty + 1, 0] = A[y, x - 1]
                            if tx == 15 and x < w - 1:
                                S[ty + 1, 17] = A[y, x + 1]
                            if ty == 0 and y >= 1:
                                S[0, tx + 1] = A[y - 1, x]
                            if ty == 15 and y < h - 1:
                                S[17, tx + 1] = A[y + 1, x]
                        T.tilewave.lds_barrier()
                        if 1 <= y and y < h - 1 and 1 <= x and x < w - 1:
                            B[y, x] = (S[ty, tx + 1] + S[ty + 2, tx + 1] + S[ty + 1, tx]
                                       + S[ty + 1, tx + 2] - T.float32(4) * S[ty + 1, tx + 1])

    return _named(kernel, "laplacian_2d_lds")


stencil_1d = make_stencil_1d()
laplacian_2d = make_laplacian_2d()
laplacian_2d_lds = make_laplacian_2d_lds()


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


def make_softmax_rows(rows: int = ROWS, cols: int = COLS) -> tirx.PrimFunc:
    """Row softmax, one lane per row in one workgroup of ``rows`` lanes: max, sum of
    exp(x - max), normalise."""
    @T.prim_func
    def kernel(A: T.Buffer((rows, cols), "float32"), B: T.Buffer((rows, cols), "float32")):
        for tx in T.thread_binding(rows, thread="threadIdx.x"):
            red = T.alloc_buffer((2,), "float32", scope="local")
            red[0] = T.float32(-3.4e38)
            for j in range(cols):
                red[0] = T.max(red[0], A[tx, j])
            red[1] = T.float32(0)
            for j in range(cols):
                red[1] = red[1] + T.exp(A[tx, j] - red[0])
            for j in range(cols):
                B[tx, j] = T.exp(A[tx, j] - red[0]) / red[1]

    return _named(kernel, "softmax_rows")


def make_layernorm_rows(rows: int = ROWS, cols: int = COLS) -> tirx.PrimFunc:
    """Row layernorm, one lane per row: mean, variance, (x - mean) * rsqrt(var + eps) *
    gamma."""
    @T.prim_func
    def kernel(A: T.Buffer((rows, cols), "float32"), G: T.Buffer((cols,), "float32"),
               B: T.Buffer((rows, cols), "float32")):
        for tx in T.thread_binding(rows, thread="threadIdx.x"):
            red = T.alloc_buffer((2,), "float32", scope="local")
            red[0] = T.float32(0)
            for j in range(cols):
                red[0] = red[0] + A[tx, j]
            red[0] = red[0] * T.float32(1.0 / cols)
            red[1] = T.float32(0)
            for j in range(cols):
                red[1] = red[1] + (A[tx, j] - red[0]) * (A[tx, j] - red[0])
            red[1] = T.rsqrt(red[1] * T.float32(1.0 / cols) + T.float32(1e-5))
            for j in range(cols):
                B[tx, j] = (A[tx, j] - red[0]) * red[1] * G[j]

    return _named(kernel, "layernorm_rows")


SG = 32  # SGEMM: 32x32x32, 4x4 outputs per thread (8x8 threads)


def make_sgemm_regtile(m: int = SG, n: int = SG, depth: int = SG) -> tirx.PrimFunc:
    """C (m x n) = A (m x depth) @ B (depth x n), 4x4 outputs per lane in registers: one
    workgroup of (n / 4) x (m / 4) lanes (m and n multiples of 4)."""
    @T.prim_func
    def kernel(A: T.Buffer((m, depth), "float32"), B: T.Buffer((depth, n), "float32"),
               C: T.Buffer((m, n), "float32")):
        for ty in T.thread_binding(m // 4, thread="threadIdx.y"):
            for tx in T.thread_binding(n // 4, thread="threadIdx.x"):
                acc = T.alloc_buffer((16,), "float32", scope="local")
                for i in T.unroll(16):
                    acc[i] = T.float32(0)
                for k in range(depth):
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            acc[i * 4 + j] = acc[i * 4 + j] + A[ty * 4 + i, k] * B[k, tx * 4 + j]
                for i in T.unroll(4):
                    for j in T.unroll(4):
                        C[ty * 4 + i, tx * 4 + j] = acc[i * 4 + j]

    return _named(kernel, "sgemm_regtile")


MG = 32  # 4-wave LDS MFMA GEMM: C[32, 32] = A[32, K] @ B[K, 32], one 16x16 tile per wave


def make_gemm_lds_4wave(k: int = GEMM_K) -> tirx.PrimFunc:
    """C (32x32) = A (32 x k) @ BT^T through LDS, 4 waves each computing one 16x16 tile with
    MFMA (k a multiple of 16 dividing 256: the 256 lanes stage whole rows)."""
    @T.prim_func
    def kernel(A: T.Buffer((MG, k), "float16"), BT: T.Buffer((MG, k), "float16"),
               C: T.Buffer((MG, MG), "float32")):
        for _bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(256, thread="threadIdx.x"):
                SA = T.alloc_buffer((MG, k), "float16", scope="shared")
                SB = T.alloc_buffer((MG, k), "float16", scope="shared")
                acc = T.alloc_buffer((4,), "float32", scope="local")
                for i in range(MG * k // 256):
                    SA[i * 256 // k + tx // k, tx % k] = A[i * 256 // k + tx // k, tx % k]
                    SB[i * 256 // k + tx // k, tx % k] = BT[i * 256 // k + tx // k, tx % k]
                T.tilewave.lds_barrier()
                acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
                for kk in range(k // 16):
                    acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                        "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                        SA[tx // 128 * 16 + tx % 16, T.Ramp(kk * 16 + tx % 64 // 16 * 4, 1, 4)],
                        SB[tx // 64 % 2 * 16 + tx % 16, T.Ramp(kk * 16 + tx % 64 // 16 * 4, 1,
                                                               4)],
                        acc[T.Ramp(0, 1, 4)], 0, 0, 0)
                for r in T.unroll(4):
                    C[tx // 128 * 16 + tx % 64 // 16 * 4 + r, tx // 64 % 2 * 16 + tx % 16] = acc[r]

    return _named(kernel, "gemm_lds_4wave")


softmax_rows = make_softmax_rows()
layernorm_rows = make_layernorm_rows()
sgemm_regtile = make_sgemm_regtile()
gemm_lds_4wave = make_gemm_lds_4wave()
