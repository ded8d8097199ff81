"""The sm_90a TMA + wgmma GEMM of examples/sm90_tma_wgmma_gemm.py, written in TIRx.

Same algorithm and the same TVMScript macros (TMA loads completing on *full* mbarriers, a
ring of ``STAGES`` 128B-swizzled stages, two warp groups of wgmma, *empty* mbarriers before
a stage is refilled, a TMA store of the C tile), with TIRx's scopes (``T.device_entry``,
``T.cta_id``, ``T.thread_id``). TVM's ``tirx`` pipeline does not merge shared allocations,
so the A, B and C tiles and the mbarriers are views of one dynamic shared pool, aligned to
1024 bytes (the only shared memory of the kernel, as in the s_tir version).

The hand version synchronises the block twice: ``fence.mbarrier_init`` + ``cta_sync`` after
thread 0 initialises the mbarriers, and ``fence.proxy.async`` + ``cta_sync`` between the
generic stores of the C tile and the TMA store that reads it. ``stripped()`` drops both
pairs (the mbarrier protocol stays: it is the kernel's dataflow) for
``tir_pipeline="tilewave-tirx"``. ``hand(m, n, k)`` / ``stripped(m, n, k)`` build it for a
problem size, :func:`launch` says how to launch it; ``examples/tirx_h100.py`` (its Hopper
part, examples/tirx_h100_hopper.py) runs it on an H100.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sm90_tma_wgmma_gemm as sm90
from sm90_common import Sm90Launch, gemm_tensor_maps, strip_sync

import tilewave  # noqa: F401 (registers tir_pipeline="tilewave-tirx")

# The macros are unhygienic: they read the tile constants from the calling module.
globals().update({name: value for name, value in vars(sm90).items() if name.isupper()})
A_TILE, B_TILE, ACC_REGS = sm90.A_TILE, sm90.B_TILE, sm90.ACC_REGS
BLOCK_M, BLOCK_N, BLOCK_K = sm90.BLOCK_M, sm90.BLOCK_N, sm90.BLOCK_K
STAGES, THREADS, STORE_COLS = sm90.STAGES, sm90.THREADS, sm90.STORE_COLS
NAME = "tirx_tma_wgmma_gemm"
M = N = K = 4096  #: the benchmarked problem
SMALL = (256, 256, 512)  #: (M, N, K) of the race-check run
A_BYTES = STAGES * A_TILE * 2
B_BYTES = STAGES * B_TILE * 2
C_BYTES = BLOCK_M * BLOCK_N * 2
#: the pool: A stages, B stages, the C tile, then the full and the empty mbarriers (8 bytes
#: each). No static shared memory: the pool starts the block's shared window, 1024-aligned as
#: the 128B-swizzled TMA tiles and the wgmma descriptors (base offset 0) need.
POOL_BYTES = A_BYTES + B_BYTES + C_BYTES + 2 * STAGES * 8
BARRIERS = (A_BYTES + B_BYTES + C_BYTES) // 8  # first mbarrier, in uint64 elements
mac = sm90.kernel_macros()


def hand(m: int = M, n: int = N, k: int = K) -> Any:
    """The hand-synchronised kernel for an ``m x n x k`` problem."""
    k_tiles = k // BLOCK_K
    blocks, n_tiles, group_m = sm90.rasterisation(m, n)

    @T.prim_func
    def tirx_tma_wgmma_gemm(
        A_map: T.handle("tensormap"), B_map: T.handle("tensormap"), C_map: T.handle("tensormap")
    ):
        T.func_attr({"global_symbol": NAME})
        T.device_entry()
        bx = T.cta_id([blocks])
        tx = T.thread_id([THREADS])
        pool = T.alloc_buffer((POOL_BYTES,), "uint8", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((STAGES * A_TILE,), "float16", data=pool.data, scope="shared.dyn")
        B_s = T.decl_buffer(
            (STAGES * B_TILE,), "float16", data=pool.data, elem_offset=A_BYTES // 2,
            scope="shared.dyn",
        )  # fmt: skip
        C_s = T.decl_buffer(
            (BLOCK_M * BLOCK_N // 2,), "uint32", data=pool.data,
            elem_offset=(A_BYTES + B_BYTES) // 4, scope="shared.dyn",
        )  # fmt: skip
        full = T.decl_buffer(
            (STAGES,), "uint64", data=pool.data, elem_offset=BARRIERS, scope="shared.dyn"
        )
        empty = T.decl_buffer(
            (STAGES,), "uint64", data=pool.data, elem_offset=BARRIERS + STAGES,
            scope="shared.dyn",
        )  # fmt: skip
        acc = T.alloc_buffer((ACC_REGS,), "float32", scope="local")
        desc_a = T.alloc_buffer((1,), "uint64", scope="local")
        desc_b = T.alloc_buffer((1,), "uint64", scope="local")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        packed = T.alloc_buffer((1,), "uint32", scope="local")
        group = T.meta_var(bx // (group_m * n_tiles))
        bm = T.meta_var(group * group_m + bx % group_m)
        bn = T.meta_var(bx % (group_m * n_tiles) // group_m)
        wg = T.meta_var(tx // 128)
        lane = T.meta_var(tx % 32)
        if tx == 0:
            for s in range(STAGES):
                T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(empty[s]), T.uint32(THREADS))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.cuda.cta_sync()
        if tx == 0:
            for s in range(STAGES):
                mac.load_stage(s, s)
        for i in T.unroll(ACC_REGS):
            acc[i] = T.float32(0)
        for kt in range(k_tiles):
            mac.wait_parity(full[kt % STAGES], kt // STAGES % 2)
            mac.mma_stage(kt % STAGES, wg * 64)
            T.ptx.wgmma.wait_group.sync.aligned(1)
            if kt > 0:
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[(kt - 1) % STAGES]))
                if tx == 0 and kt - 1 + STAGES < k_tiles:
                    mac.wait_parity(empty[(kt - 1) % STAGES], (kt - 1) // STAGES % 2)
                    mac.load_stage((kt - 1) % STAGES, kt - 1 + STAGES)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        mac.store_accumulators(wg * 64 + tx % 128 // 32 * 16 + lane // 4)
        T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        if tx == 0:
            mac.store_tile()

    return tirx_tma_wgmma_gemm


def stripped(m: int = M, n: int = N, k: int = K) -> Any:
    """:func:`hand` without its block barriers and fences (the mbarrier protocol stays)."""
    return strip_sync(hand(m, n, k))


def launch(m: int = M, n: int = N, k: int = K) -> Sm90Launch:
    """Launch facts of the kernel at ``m x n x k`` (grid, block, tensor maps)."""
    return Sm90Launch(
        kernel=f"{NAME}_kernel",
        grid=(sm90.rasterisation(m, n)[0], 1, 1),
        block=(THREADS, 1, 1),
        tensor_maps=gemm_tensor_maps(m, n, k, BLOCK_M, BLOCK_N, BLOCK_K, STORE_COLS),
        m=m,
        n=n,
        k=k,
    )
