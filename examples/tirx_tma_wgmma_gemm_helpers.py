"""The TIRx TMA + wgmma GEMM of examples/tirx_tma_wgmma_gemm.py with TVM's pipeline helpers.

Shared memory comes from ``tvm.backend.cuda.lang.SMEMPool`` (a 0-byte ``shared.dyn`` pool
whose size TVM launches the kernel with), the *full* ring is a ``TMABar`` (``arrive`` with the
stage's byte count is the ``expect_tx``; the TMA loads complete on ``full.ptr_to``), the
*empty* ring an ``MBarrier``; both initialise themselves in thread 0 (``init``) and ``wait``
with ``T.cuda.mbarrier_wait``. The stage and phase still come from the K step (``kt % STAGES``,
``kt // STAGES % 2``). The wgmma, epilogue and TMA-store macros are examples/sm90's.

``hand`` synchronises the block as the macro version does (``fence.mbarrier_init`` +
``cta_sync`` after the barriers' initialisation, ``fence.proxy.async`` + ``cta_sync`` before
the TMA store; every thread runs the init fence, the helpers' init has no hook for it);
``stripped`` drops them for ``tir_pipeline="tilewave-tirx"``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tvm.backend.cuda.lang import MBarrier, SMEMPool, TMABar
from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tirx_tma_wgmma_gemm as base
from sm90_common import Sm90Launch, strip_sync

# The macros are unhygienic: they read the tile constants from the calling module.
globals().update({name: value for name, value in vars(base).items() if name.isupper()})
NAME = "tirx_tma_wgmma_gemm_helpers"
mac = base.mac


def hand(m: int = base.M, n: int = base.N, k: int = base.K) -> Any:
    """The hand-synchronised kernel for an ``m x n x k`` problem."""
    k_tiles = k // BLOCK_K
    blocks, n_tiles, group_m = base.sm90.rasterisation(m, n)

    @T.macro(hygienic=False)
    def load_stage(stage, kt):
        full.arrive(stage, tx_count=STAGE_BYTES)
        T.ptx[TMA_LOAD](
            T.address_of(A_s[stage * A_TILE]), T.address_of(A_map), kt * BLOCK_K, bm * BLOCK_M,
            full.ptr_to([stage]),
        )  # fmt: skip
        T.ptx[TMA_LOAD](
            T.address_of(B_s[stage * B_TILE]), T.address_of(B_map), kt * BLOCK_K, bn * BLOCK_N,
            full.ptr_to([stage]),
        )  # fmt: skip

    @T.prim_func
    def tirx_tma_wgmma_gemm_helpers(
        A_map: T.handle("tensormap"), B_map: T.handle("tensormap"), C_map: T.handle("tensormap")
    ):
        T.func_attr({"global_symbol": NAME})
        T.device_entry()
        bx = T.cta_id([blocks])
        tx = T.thread_id([THREADS])
        pool = SMEMPool()
        A_s = pool.alloc((STAGES * A_TILE,), "float16", align=1024)
        B_s = pool.alloc((STAGES * B_TILE,), "float16", align=1024)
        C_s = pool.alloc((BLOCK_M * BLOCK_N // 2,), "uint32", align=1024)
        full = TMABar(pool, STAGES)
        empty = MBarrier(pool, STAGES)
        pool.commit()
        acc = T.alloc_buffer((ACC_REGS,), "float32", scope="local")
        desc_a = T.alloc_buffer((1,), "uint64", scope="local")
        desc_b = T.alloc_buffer((1,), "uint64", scope="local")
        packed = T.alloc_buffer((1,), "uint32", scope="local")
        group = T.meta_var(bx // (group_m * n_tiles))
        bm = T.meta_var(group * group_m + bx % group_m)
        bn = T.meta_var(bx % (group_m * n_tiles) // group_m)
        wg = T.meta_var(tx // 128)
        lane = T.meta_var(tx % 32)
        full.init(1)
        empty.init(THREADS)
        T.ptx.fence.mbarrier_init.release.cluster()
        T.cuda.cta_sync()
        if tx == 0:
            for s in range(STAGES):
                load_stage(s, s)
        for i in T.unroll(ACC_REGS):
            acc[i] = T.float32(0)
        for kt in range(k_tiles):
            full.wait(kt % STAGES, kt // STAGES % 2)
            mac.mma_stage(kt % STAGES, wg * 64)
            T.ptx.wgmma.wait_group.sync.aligned(1)
            if kt > 0:
                empty.arrive((kt - 1) % STAGES)
                if tx == 0 and kt - 1 + STAGES < k_tiles:
                    empty.wait((kt - 1) % STAGES, (kt - 1) // STAGES % 2)
                    load_stage((kt - 1) % STAGES, kt - 1 + STAGES)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        mac.store_accumulators(wg * 64 + tx % 128 // 32 * 16 + lane // 4)
        T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        if tx == 0:
            mac.store_tile()

    return tirx_tma_wgmma_gemm_helpers


def stripped(m: int = base.M, n: int = base.N, k: int = base.K) -> Any:
    """:func:`hand` without its block barriers and fences (the mbarrier protocol stays)."""
    return strip_sync(hand(m, n, k))


def launch(m: int = base.M, n: int = base.N, k: int = base.K) -> Sm90Launch:
    """Launch facts of the kernel at ``m x n x k`` (the macro version's, renamed)."""
    facts = base.launch(m, n, k)
    return Sm90Launch(f"{NAME}_kernel", facts.grid, facts.block, facts.tensor_maps, m, n, k)
