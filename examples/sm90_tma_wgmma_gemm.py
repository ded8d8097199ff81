"""An sm_90a fp16 GEMM: TMA loads on mbarriers, wgmma from swizzled shared tiles, TMA store.

``C = A @ B.T`` with ``A`` (M x K), ``B`` (N x K), fp16 in, fp32 accumulate, fp16 out. One
block of 256 threads (two warp groups) computes a 128 x 256 tile of ``C``:

* a ring of :data:`STAGES` shared stages, each a 128 x 64 slice of ``A`` and 256 x 64 of ``B``
  (64 fp16 = one 128-byte swizzle row), filled by ``cp.async.bulk.tensor.2d`` (TMA, 128B
  swizzle) issued by thread 0, completing on the stage's *full* mbarrier
  (``mbarrier.arrive.expect_tx`` + the copies' ``complete_tx``);
* every thread waits for the stage with a ``mbarrier.try_wait.parity`` loop; each warp
  group runs four ``wgmma.mma_async.m64n256k16`` (its 64 rows of ``A`` x the 256 rows of
  ``B``) reading shared memory through matrix descriptors, commits, and waits until at
  most one wgmma group is in flight: the *previous* stage is then free. Every thread
  arrives on that stage's *empty* mbarrier; thread 0 waits for it and refills the stage;
* the epilogue converts the accumulators to fp16 into a 128B-swizzled shared C tile and
  thread 0 stores it with two TMA stores (``cp.async.bulk.tensor`` shared -> global).

Variants (functions returning a ``PrimFunc``):

* :func:`hand`: synchronised by hand: ``fence.mbarrier_init`` + ``__syncthreads()`` after
  the mbarrier initialisation, ``fence.proxy.async`` + ``__syncthreads()`` between the C
  tile's stores and the TMA store. No barrier in the K loop: the mbarriers order it.
* :func:`stripped`: :func:`hand` without those barriers and fences (the mbarrier protocol
  stays), to be re-synchronised by ``tilewave.build(..., "sm_90a")``.

:func:`launch` says how to run it (``benchmarks/real_kernels_sm90.py``). Needs TVM to
build the kernels; the module imports without it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm90_common import Sm90Launch, gemm_tensor_maps, strip_sync

NAME = "sm90_tma_wgmma_gemm"
M = N = K = 4096  #: the benchmarked problem
BLOCK_M = 128
BLOCK_N = 256  # 128 x 128 tiles with 4 stages ran at 582 TFLOP/s on the H100, 128 x 256: 688
BLOCK_K = 64  # 64 fp16 = 128 bytes: one 128B-swizzle row
STAGES = 3  # 3 x 48 KiB stages + the 64 KiB C tile fit in 227 KiB of shared memory
THREADS = 256  # two warp groups, 64 rows of the tile each
GROUP_M = 8  # block rasterisation: 8 row tiles share the B tiles they read
WGMMA_K = 16
STORE_COLS = 64  # the C tile goes out in 128 x 64 boxes (one 128B-swizzle row each)
A_TILE = BLOCK_M * BLOCK_K  # fp16 elements of one stage's A slice
B_TILE = BLOCK_N * BLOCK_K
STAGE_BYTES = (A_TILE + B_TILE) * 2  # what one stage's two TMA copies deliver
ACC_REGS = BLOCK_N // 2  # m64n256 f32 accumulator: 128 registers a thread
WGMMA = f"wgmma.mma_async.sync.aligned.m64n{BLOCK_N}k16.f32.f16.f16"
# wgmma descriptor fields for a K-major tile with 128B swizzle: the leading offset is
# unused (1), 8-row groups are 1024 bytes apart (stride 1024 >> 4 = 64), layout 3 = 128B.
DESC_LEADING, DESC_STRIDE, DESC_SWIZZLE_128B = 1, 64, 3
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"


def rasterisation(m: int, n: int) -> tuple[int, int, int]:
    """``(blocks, n_tiles, group_m)`` of the 1-D grid: groups of ``group_m`` row tiles walk
    the column tiles together, so they share the B tiles in L2.

    Raises:
        ValueError: a problem that is not a whole number of tiles and groups.
    """
    m_tiles, n_tiles = m // BLOCK_M, n // BLOCK_N
    group_m = min(GROUP_M, m_tiles)
    if m % BLOCK_M or n % BLOCK_N or m_tiles % group_m:
        raise ValueError(
            f"{NAME}: M={m}, N={n} must be multiples of {BLOCK_M} and {BLOCK_N}, and M/{BLOCK_M} "
            f"a multiple of {group_m}; pad the problem to whole tiles"
        )
    return m_tiles * n_tiles, n_tiles, group_m


def kernel_macros() -> Any:
    """The TVMScript macros both sm_90a GEMMs are built from; needs TVM.

    They are unhygienic: they use the caller's ``ready``, ``full``, ``A_s``, ``B_s``,
    ``C_s`` (fp16 pairs as ``uint32``), ``acc``, ``packed``, ``desc_a``, ``desc_b``,
    ``A_map``, ``B_map``, ``C_map``, ``bm``, ``bn``, ``lane`` and this module's tile
    constants (a caller in another module imports them).
    """
    from types import SimpleNamespace

    from tvm.script import tirx as T

    @T.macro(hygienic=False)
    def wait_parity(bar, parity):
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(
                ready[0], T.address_of(bar), T.Cast("uint32", parity)
            )

    @T.macro(hygienic=False)
    def load_stage(stage, kt):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(
            T.address_of(full[stage]), T.uint32(STAGE_BYTES)
        )
        T.ptx[TMA_LOAD](
            T.address_of(A_s[stage * A_TILE]), T.address_of(A_map), kt * BLOCK_K, bm * BLOCK_M,
            T.address_of(full[stage]),
        )
        T.ptx[TMA_LOAD](
            T.address_of(B_s[stage * B_TILE]), T.address_of(B_map), kt * BLOCK_K, bn * BLOCK_N,
            T.address_of(full[stage]),
        )

    @T.macro(hygienic=False)
    def mma_stage(stage, a_row0):
        # rows a_row0 .. a_row0 + 63 of the stage's A slice x all of its B slice
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BLOCK_K // WGMMA_K):
            T.cuda.wgmma.encode_matrix_descriptor(
                desc_a.data,
                T.address_of(A_s[stage * A_TILE + a_row0 * BLOCK_K + kk * WGMMA_K]),
                DESC_LEADING, DESC_STRIDE, DESC_SWIZZLE_128B,
            )
            T.cuda.wgmma.encode_matrix_descriptor(
                desc_b.data,
                T.address_of(B_s[stage * B_TILE + kk * WGMMA_K]),
                DESC_LEADING, DESC_STRIDE, DESC_SWIZZLE_128B,
            )
            T.ptx[WGMMA](
                *[acc[i] for i in range(ACC_REGS)],
                desc_a[0], desc_b[0], T.bool(True), 1, 1, 0, 0,
            )
        T.ptx.wgmma.commit_group.sync.aligned()

    @T.macro(hygienic=False)
    def store_accumulators(row):
        # accumulators (row (+8), 8j + 2(lane % 4) + {0, 1}) -> one 32-bit word of the
        # swizzled 128 x 64 C boxes. Pairs are converted by one cvt.rn.f16x2.f32 (high half
        # first): single cvt.rn.f16.f32 conversions make ptxas serialise the K loop's
        # wgmmas (C7514).
        for j in T.unroll(BLOCK_N // 8):
            for h in T.unroll(2):
                T.ptx["cvt.rn.f16x2.f32"](
                    packed[0], acc[j * 4 + h * 2 + 1], acc[j * 4 + h * 2]
                )
                C_s[
                    j // 8 * BLOCK_M * STORE_COLS // 2
                    + (row + h * 8) * STORE_COLS // 2
                    + T.bitwise_xor(j % 8, lane // 4) * 4
                    + lane % 4
                ] = packed[0]

    @T.macro(hygienic=False)
    def store_tile():
        for box in range(BLOCK_N // STORE_COLS):
            T.ptx[TMA_STORE](
                T.address_of(C_map), bn * BLOCK_N + box * STORE_COLS, bm * BLOCK_M,
                T.address_of(C_s[box * BLOCK_M * STORE_COLS // 2]),
            )
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)

    return SimpleNamespace(
        wait_parity=wait_parity,
        load_stage=load_stage,
        mma_stage=mma_stage,
        store_accumulators=store_accumulators,
        store_tile=store_tile,
    )


def hand(m: int = M, n: int = N, k: int = K) -> Any:
    """The hand-synchronised kernel for an ``m x n x k`` problem; needs TVM."""
    from tvm.script import tirx as T

    k_tiles = k // BLOCK_K
    blocks, n_tiles, group_m = rasterisation(m, n)
    mac = kernel_macros()

    @T.prim_func
    def sm90_tma_wgmma_gemm(
        A_map: T.handle("tensormap"), B_map: T.handle("tensormap"), C_map: T.handle("tensormap")
    ):
        T.func_attr({"global_symbol": NAME})
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                A_s = T.alloc_buffer((STAGES * A_TILE,), "float16", scope="shared.dyn")
                B_s = T.alloc_buffer((STAGES * B_TILE,), "float16", scope="shared.dyn")
                C_s = T.alloc_buffer((BLOCK_M * BLOCK_N // 2,), "uint32", scope="shared.dyn")
                full = T.alloc_buffer((STAGES,), "uint64", scope="shared.dyn")
                empty = T.alloc_buffer((STAGES,), "uint64", scope="shared.dyn")
                acc = T.alloc_buffer((ACC_REGS,), "float32", scope="local")
                desc_a = T.alloc_buffer((1,), "uint64", scope="local")
                desc_b = T.alloc_buffer((1,), "uint64", scope="local")
                ready = T.alloc_buffer((1,), "uint32", scope="local")
                packed = T.alloc_buffer((1,), "uint32", scope="local")
                group = bx // (group_m * n_tiles)
                bm = group * group_m + bx % group_m
                bn = bx % (group_m * n_tiles) // group_m
                wg = tx // 128
                lane = tx % 32
                if tx == 0:
                    for s in range(STAGES):
                        T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
                        T.ptx.mbarrier.init.shared.b64(
                            T.address_of(empty[s]), T.uint32(THREADS)
                        )
                    T.ptx.fence.mbarrier_init.release.cluster()
                T.tvm_storage_sync("shared")
                if tx == 0:
                    for s in range(STAGES):
                        mac.load_stage(s, s)
                for i in T.unroll(ACC_REGS):
                    acc[i] = T.float32(0)
                for kt in range(k_tiles):
                    mac.wait_parity(full[kt % STAGES], kt // STAGES % 2)
                    mac.mma_stage(kt % STAGES, wg * 64)
                    # at most this step's group in flight: step kt - 1's stage is read
                    T.ptx.wgmma.wait_group.sync.aligned(1)
                    if kt > 0:
                        T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[(kt - 1) % STAGES]))
                        if tx == 0 and kt - 1 + STAGES < k_tiles:
                            mac.wait_parity(empty[(kt - 1) % STAGES], (kt - 1) // STAGES % 2)
                            mac.load_stage((kt - 1) % STAGES, kt - 1 + STAGES)
                T.ptx.wgmma.wait_group.sync.aligned(0)
                mac.store_accumulators(wg * 64 + tx % 128 // 32 * 16 + lane // 4)
                T.ptx["fence.proxy.async.shared::cta"]()
                T.tvm_storage_sync("shared")
                if tx == 0:
                    mac.store_tile()

    return sm90_tma_wgmma_gemm


def stripped(m: int = M, n: int = N, k: int = K) -> Any:
    """:func:`hand` without block barriers and fences (mbarrier protocol kept); needs TVM."""
    return strip_sync(hand(m, n, k))


def launch(m: int = M, n: int = N, k: int = K) -> Sm90Launch:
    """Launch facts of the kernel at ``m x n x k``."""
    return Sm90Launch(
        kernel=f"{NAME}_kernel",
        grid=((m // BLOCK_M) * (n // BLOCK_N), 1, 1),
        block=(THREADS, 1, 1),
        tensor_maps=gemm_tensor_maps(m, n, k, BLOCK_M, BLOCK_N, BLOCK_K, STORE_COLS),
        m=m,
        n=n,
        k=k,
    )


__all__ = ["hand", "kernel_macros", "launch", "rasterisation", "stripped"]
