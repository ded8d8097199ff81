"""The sm_90a TMA + wgmma GEMM of examples/sm90_tma_wgmma_gemm.py, written in TIRx.

Same algorithm and the same TVMScript macros (TMA loads completing on *full* mbarriers, a
ring of ``STAGES`` 128B-swizzled stages, two warp groups of wgmma, *empty* mbarriers before
a stage is refilled, a TMA store of the C tile), with TIRx's scopes (``T.device_entry``,
``T.cta_id``, ``T.thread_id``). TVM's ``tirx`` pipeline does not merge shared allocations,
so the A, B and C tiles are views of one dynamic shared pool.

The hand version synchronises the block twice: ``fence.mbarrier_init`` + ``cta_sync`` after
thread 0 initialises the mbarriers, and ``fence.proxy.async`` + ``cta_sync`` between the
generic stores of the C tile and the TMA store that reads it. ``stripped()`` drops both
pairs (the mbarrier protocol stays: it is the kernel's dataflow) for
``tir_pipeline="tilewave-tirx"``. Built and compared on the CPU only (tests); the GPU side
needs tensor maps (see benchmarks/real_kernels_sm90.py for the s_tir version's runner).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sm90_tma_wgmma_gemm as sm90
from sm90_common import strip_sync

import tilewave  # noqa: F401 (registers tir_pipeline="tilewave-tirx")

# The macros are unhygienic: they read the tile constants from the calling module.
globals().update({name: value for name, value in vars(sm90).items() if name.isupper()})
A_TILE, B_TILE, ACC_REGS = sm90.A_TILE, sm90.B_TILE, sm90.ACC_REGS
BLOCK_M, BLOCK_N, BLOCK_K = sm90.BLOCK_M, sm90.BLOCK_N, sm90.BLOCK_K
STAGES, THREADS, GROUP_M = sm90.STAGES, sm90.THREADS, sm90.GROUP_M
M = N = K = 4096
K_TILES = K // BLOCK_K
N_TILES = N // BLOCK_N
BLOCKS = (M // BLOCK_M) * N_TILES
A_BYTES = STAGES * A_TILE * 2
B_BYTES = STAGES * B_TILE * 2
POOL_BYTES = A_BYTES + B_BYTES + BLOCK_M * BLOCK_N * 2
mac = sm90.kernel_macros()


@T.prim_func
def hand(A_map: T.handle("tensormap"), B_map: T.handle("tensormap"), C_map: T.handle("tensormap")):
    T.func_attr({"global_symbol": "tirx_tma_wgmma_gemm"})
    T.device_entry()
    bx = T.cta_id([BLOCKS])
    tx = T.thread_id([THREADS])
    pool = T.alloc_buffer((POOL_BYTES,), "uint8", scope="shared.dyn")
    A_s = T.decl_buffer((STAGES * A_TILE,), "float16", data=pool.data, scope="shared.dyn")
    B_s = T.decl_buffer(
        (STAGES * B_TILE,), "float16", data=pool.data, elem_offset=A_BYTES // 2,
        scope="shared.dyn",
    )  # fmt: skip
    C_s = T.decl_buffer(
        (BLOCK_M * BLOCK_N // 2,), "uint32", data=pool.data,
        elem_offset=(A_BYTES + B_BYTES) // 4, scope="shared.dyn",
    )  # fmt: skip
    full = T.alloc_buffer((STAGES,), "uint64", scope="shared")
    empty = T.alloc_buffer((STAGES,), "uint64", scope="shared")
    acc = T.alloc_buffer((ACC_REGS,), "float32", scope="local")
    desc_a = T.alloc_buffer((1,), "uint64", scope="local")
    desc_b = T.alloc_buffer((1,), "uint64", scope="local")
    ready = T.alloc_buffer((1,), "uint32", scope="local")
    packed = T.alloc_buffer((1,), "uint32", scope="local")
    group = T.meta_var(bx // (GROUP_M * N_TILES))
    bm = T.meta_var(group * GROUP_M + bx % GROUP_M)
    bn = T.meta_var(bx % (GROUP_M * N_TILES) // GROUP_M)
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
    for kt in range(K_TILES):
        mac.wait_parity(full[kt % STAGES], kt // STAGES % 2)
        mac.mma_stage(kt % STAGES, wg * 64)
        T.ptx.wgmma.wait_group.sync.aligned(1)
        if kt > 0:
            T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[(kt - 1) % STAGES]))
            if tx == 0 and kt - 1 + STAGES < K_TILES:
                mac.wait_parity(empty[(kt - 1) % STAGES], (kt - 1) // STAGES % 2)
                mac.load_stage((kt - 1) % STAGES, kt - 1 + STAGES)
    T.ptx.wgmma.wait_group.sync.aligned(0)
    mac.store_accumulators(wg * 64 + tx % 128 // 32 * 16 + lane // 4)
    T.ptx["fence.proxy.async.shared::cta"]()
    T.cuda.cta_sync()
    if tx == 0:
        mac.store_tile()


def stripped() -> Any:
    """:data:`hand` without its block barriers and fences."""
    return strip_sync(hand)
