"""An fp16 GEMM written with sm_80 instructions, in three synchronisation variants.

``C = A @ B.T`` with ``A`` (M x K), ``B`` (N x K, the ``nn.Linear`` weight layout), fp16 in,
fp32 accumulate, fp16 out (``C`` is declared as ``uint32`` pairs of fp16: the epilogue stores
one packed ``half2`` word per pair of adjacent columns). One block computes a 128x128 tile
of ``C`` with 4 warps (2 x 2, a 64x64 tile each), stepping over K in 32-wide slices:

* the slices of ``A`` and ``B`` go global -> shared with ``cp.async.cg`` (16 bytes a thread);
* the shared tiles are XOR-swizzled: 16-byte chunk ``c`` of row ``r`` is stored at chunk
  ``c ^ ((r >> 1) & 3)``, so the eight rows one ``ldmatrix`` phase reads fall on eight
  different bank groups;
* warps read their fragments with ``ldmatrix.x4`` and multiply with
  ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``.

Variants (each a function returning a ``PrimFunc``):

* :func:`hand`: a 3-stage ``cp.async`` pipeline synchronised by hand: per K step one
  ``cp.async.wait_group 1`` + ``__syncthreads()`` before the reads, then the prefetch of the
  slice two steps ahead and one ``commit_group``;
* :func:`stripped`: :func:`hand` with every barrier, wait and commit removed, to be
  re-synchronised by ``tilewave.build(..., "sm_90a")``;
* :func:`plain`: one shared stage, no pipelining and no synchronisation at all, for
  ``tilewave.build(k, "sm_90a", multi_buffer_count=N)``.

:data:`BENCH_VARIANTS` lists how ``benchmarks/real_kernels_h100.py`` builds each variant.
Needs TVM (the kernels are TVMScript).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the examples folder is not a package: its helper module is imported by path
from real_kernel_variants import (
    KernelFamily,
    standard_variants,
    strip_sync,
)
from sm80_fragments import ldmatrix_x4, mma_m16n8k16

M = N = K = 4096  #: the benchmarked problem
SMALL = (256, 256, 256)  #: (M, N, K) of the race-check run
BLOCK_M = BLOCK_N = 128
BLOCK_K = 32
WARPS = 4  # 2 x 2 warps, 64 x 64 each
THREADS = 32 * WARPS
STAGES = 3  # shared stages of the hand pipeline
GROUP_M = 8  # block rasterisation: up to 8 row-tiles share the B tiles they read
CHUNKS = BLOCK_K // 8  # 16-byte chunks per shared row
COPIES = BLOCK_M * CHUNKS // THREADS  # cp.async per thread per tile


def _kernel(m: int, n: int, k: int, mode: str):
    """The GEMM for an ``m x n x k`` problem; ``mode`` is ``"hand"`` or ``"plain"``."""
    from tvm.script import tirx as T

    k_tiles = k // BLOCK_K
    n_tiles = n // BLOCK_N
    group_m = math.gcd(GROUP_M, m // BLOCK_M)  # row-tiles per raster group
    blocks = (m // BLOCK_M) * n_tiles
    pipelined = mode == "hand"
    stages = STAGES if pipelined else 1
    prefetch = STAGES - 1

    @T.macro(hygienic=False)
    def load_tile(stage, kt):
        # Every thread copies COPIES 16-byte chunks of A's and of B's 128x32 slice.
        for i in T.unroll(COPIES):
            row: T.let[T.int32] = i * (THREADS // CHUNKS) + tx // CHUNKS
            chunk: T.let[T.int32] = tx % CHUNKS
            col: T.let[T.int32] = (chunk ^ ((row >> 1) & 3)) * 8
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(As[stage, row, col]),
                T.address_of(A[bm * BLOCK_M + row, kt * BLOCK_K + chunk * 8]),
                16,
            )
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(Bs[stage, row, col]),
                T.address_of(B[bn * BLOCK_N + row, kt * BLOCK_K + chunk * 8]),
                16,
            )

    @T.macro(hygienic=False)
    def mma_tile(stage):
        for kk in T.unroll(BLOCK_K // 16):
            for mi in T.unroll(4):
                # ldmatrix.x4 of A: lanes 0-15 give rows, lanes 16-31 the second 8 columns.
                row: T.let[T.int32] = wm * 64 + mi * 16 + lane % 16
                chunk: T.let[T.int32] = kk * 2 + lane // 16
                col: T.let[T.int32] = (chunk ^ ((row >> 1) & 3)) * 8
                ldmatrix_x4(af, mi * 4, T.address_of(As[stage, row, col]))
            for nj in T.unroll(4):
                # ldmatrix.x4 of B (N x K rows): two n8 tiles x two k8 halves.
                row: T.let[T.int32] = wn * 64 + nj * 16 + (lane // 16) * 8 + lane % 8
                chunk: T.let[T.int32] = kk * 2 + (lane // 8) % 2
                col: T.let[T.int32] = (chunk ^ ((row >> 1) & 3)) * 8
                ldmatrix_x4(bf, nj * 4, T.address_of(Bs[stage, row, col]))
            for mi in T.unroll(4):
                for ni in T.unroll(8):
                    mma_m16n8k16(acc, (mi * 8 + ni) * 4, af, mi * 4, bf, ni * 2)

    @T.macro(hygienic=False)
    def store_tile():
        # Each accumulator pair (two adjacent columns) leaves as one packed half2 word.
        for mi in T.unroll(4):
            for ni in T.unroll(8):
                for h in T.unroll(2):
                    T.ptx["cvt.rn.f16x2.f32"](
                        packed[0],
                        acc[(mi * 8 + ni) * 4 + h * 2 + 1],
                        acc[(mi * 8 + ni) * 4 + h * 2],
                    )
                    C[
                        bm * BLOCK_M + wm * 64 + mi * 16 + lane // 4 + h * 8,
                        bn * (BLOCK_N // 2) + wn * 32 + ni * 4 + lane % 4,
                    ] = packed[0]

    @T.prim_func
    def sm80_gemm(
        A: T.Buffer((m, k), "float16"),
        B: T.Buffer((n, k), "float16"),
        C: T.Buffer((m, n // 2), "uint32"),
    ):
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                As = T.alloc_buffer((stages, BLOCK_M, BLOCK_K), "float16", scope="shared")
                Bs = T.alloc_buffer((stages, BLOCK_N, BLOCK_K), "float16", scope="shared")
                af = T.alloc_buffer((16,), "uint32", scope="local")
                bf = T.alloc_buffer((16,), "uint32", scope="local")
                acc = T.alloc_buffer((128,), "float32", scope="local")
                packed = T.alloc_buffer((1,), "uint32", scope="local")
                group: T.let[T.int32] = bx // (group_m * n_tiles)
                bm: T.let[T.int32] = group * group_m + bx % group_m
                bn: T.let[T.int32] = bx % (group_m * n_tiles) // group_m
                warp: T.let[T.int32] = tx // 32
                lane: T.let[T.int32] = tx % 32
                wm: T.let[T.int32] = warp // 2
                wn: T.let[T.int32] = warp % 2
                for i in T.unroll(128):
                    acc[i] = T.float32(0)
                if pipelined:  # decided when the kernel is parsed
                    for s in T.unroll(prefetch):
                        load_tile(s, s)
                        T.ptx["cp.async.commit_group"]()
                    for kt in range(k_tiles):
                        # Slice kt has landed once at most the newest (kt + 1) group is open.
                        T.ptx["cp.async.wait_group"](STAGES - 2)
                        # Everyone's copies of slice kt are visible; everyone is done with
                        # slice kt - 1, whose stage the prefetch below overwrites.
                        T.tvm_storage_sync("shared")
                        if kt + prefetch < k_tiles:
                            load_tile((kt + prefetch) % STAGES, kt + prefetch)
                        T.ptx["cp.async.commit_group"]()
                        mma_tile(kt % STAGES)
                else:
                    for kt in range(k_tiles):
                        load_tile(0, kt)
                        mma_tile(0)
                store_tile()

    return sm80_gemm

    @T.prim_func
    def sm80_gemm(
        A: T.Buffer((m, k), "float16"),
        B: T.Buffer((n, k), "float16"),
        C: T.Buffer((m, n // 2), "uint32"),
    ):
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                As = T.alloc_buffer((1, BLOCK_M, BLOCK_K), "float16", scope="shared")
                Bs = T.alloc_buffer((1, BLOCK_N, BLOCK_K), "float16", scope="shared")
                af = T.alloc_buffer((16,), "uint32", scope="local")
                bf = T.alloc_buffer((16,), "uint32", scope="local")
                acc = T.alloc_buffer((128,), "float32", scope="local")
                packed = T.alloc_buffer((1,), "uint32", scope="local")
                group: T.let[T.int32] = bx // (group_m * n_tiles)
                bm: T.let[T.int32] = group * group_m + bx % group_m
                bn: T.let[T.int32] = bx % (group_m * n_tiles) // group_m
                warp: T.let[T.int32] = tx // 32
                lane: T.let[T.int32] = tx % 32
                wm: T.let[T.int32] = warp // 2
                wn: T.let[T.int32] = warp % 2
                for i in T.unroll(128):
                    acc[i] = T.float32(0)
                for kt in range(k_tiles):
                    load_tile(0, kt)
                    mma_tile(0)
                store_tile()

    return sm80_gemm


def hand(m: int = M, n: int = N, k: int = K):
    """The hand-synchronised 3-stage pipeline (``wait_group 1`` + one barrier per K step)."""
    return _kernel(m, n, k, "hand")


def stripped(m: int = M, n: int = N, k: int = K):
    """:func:`hand` without any barrier, ``wait_group`` or ``commit_group``."""
    return strip_sync(hand(m, n, k))


def plain(m: int = M, n: int = N, k: int = K):
    """One shared stage, no pipelining, no synchronisation (for tilewave's multibuffer)."""
    return _kernel(m, n, k, "plain")


def family(m: int = M, n: int = N, k: int = K) -> KernelFamily:
    """The benchmark's description of this GEMM at ``m x n x k``."""
    return KernelFamily(
        name="sm80_gemm",
        problem={"kind": "gemm_nt", "m": m, "n": n, "k": k, "dtype": "float16"},
        grid=((m // BLOCK_M) * (n // BLOCK_N), 1, 1),
        block=(THREADS, 1, 1),
        flops=2.0 * m * n * k,
        variants=standard_variants(lambda: hand(m, n, k), lambda: plain(m, n, k)),
    )


def bench_families(small: bool = False) -> list[KernelFamily]:
    """The families the benchmark emits (the race-check size when ``small``)."""
    return [family(*SMALL)] if small else [family()]


__all__ = ["bench_families", "family", "hand", "plain", "stripped"]
