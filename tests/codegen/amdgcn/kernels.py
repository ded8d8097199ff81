"""TVMScript kernels the AMDGCN backend tests compile (one workgroup size per kernel)."""

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
