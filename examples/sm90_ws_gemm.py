"""A warp-specialised sm_90a fp16 GEMM: one TMA producer warp group, two wgmma consumers.

``C = A @ B.T`` (A: M x K, B: N x K, fp16 in, fp32 accumulate, fp16 out), the same
128 x 256 block tile, 3-stage ring, descriptors and epilogue as
``examples/sm90_tma_wgmma_gemm.py`` (whose macros it reuses), but with 384 threads in
three roles, chosen by the warp-group index ``tx // 128``:

* warp group 0, the producer: gives registers back (``setmaxnreg.dec 40``); its thread 0
  waits for a stage's *empty* mbarrier, arms the stage's *full* mbarrier with
  ``expect_tx`` and issues the two TMA loads, :data:`STAGES` stages ahead;
* warp groups 1 and 2, the consumers (``setmaxnreg.inc 232``): wait on *full*, run four
  ``wgmma m64n256k16`` on their 64 rows, keep one wgmma group in flight and release the
  previous stage by arriving on its *empty* mbarrier (256 arrivals complete a phase);
  then they write the C tile to shared memory and thread 128 stores it with TMA.

Variants (functions returning a ``PrimFunc``):

* :func:`hand`: ``fence.mbarrier_init`` + ``__syncthreads()`` after the initialisation
  (before the roles split), and in the consumers' epilogue ``fence.proxy.async`` + a
  named barrier over the 256 consumer threads (``bar.sync 1, 256``) before the TMA store;
* :func:`stripped`: :func:`hand` without those, to be re-synchronised by
  ``tilewave.build(..., "sm_90a")`` (which must not put a ``__syncthreads()`` in a role
  branch).

``setmaxnreg`` only takes effect when the kernel starts under a register cap: compile with
``-maxrregcount 168`` (:data:`NVCC_FLAGS`; TVM writes ``__launch_bounds__(384)`` without a
minimum block count). Needs TVM to build the kernels; the module imports without it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm90_common import Sm90Launch, gemm_tensor_maps, strip_sync
from sm90_tma_wgmma_gemm import (  # the macros read these names at the call site
    A_TILE,
    ACC_REGS,
    B_TILE,
    BLOCK_K,
    BLOCK_M,
    BLOCK_N,
    DESC_LEADING,
    DESC_STRIDE,
    DESC_SWIZZLE_128B,
    STAGE_BYTES,
    STAGES,
    STORE_COLS,
    TMA_LOAD,
    TMA_STORE,
    WGMMA,
    WGMMA_K,
    K,
    M,
    N,
    kernel_macros,
    rasterisation,
)

NAME = "sm90_ws_gemm"
THREADS = 384  # producer warp group + two consumer warp groups
CONSUMERS = 256
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # 128 * 40 + 256 * 232 <= 65536
EPILOGUE_BARRIER = 1  # named barrier id of the consumers' epilogue
NVCC_FLAGS = ("-maxrregcount", "168")  # 65536 / 384 rounded down to a multiple of 8

# Names the shared macros resolve at the call site (imported above, used there only).
_MACRO_NAMES = (A_TILE, B_TILE, BLOCK_K, DESC_LEADING, DESC_STRIDE, DESC_SWIZZLE_128B,
                STAGE_BYTES, STORE_COLS, TMA_LOAD, TMA_STORE, WGMMA, WGMMA_K)


def hand(m: int = M, n: int = N, k: int = K) -> Any:
    """The hand-synchronised warp-specialised kernel for ``m x n x k``; needs TVM."""
    from tvm.script import tirx as T

    k_tiles = k // BLOCK_K
    blocks, n_tiles, group_m = rasterisation(m, n)
    mac = kernel_macros()

    @T.prim_func
    def sm90_ws_gemm(
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
                            T.address_of(empty[s]), T.uint32(CONSUMERS)
                        )
                    T.ptx.fence.mbarrier_init.release.cluster()
                T.tvm_storage_sync("shared")
                if wg == 0:
                    T.ptx.setmaxnreg.dec.sync.aligned.u32(PRODUCER_REGS)
                    if tx == 0:
                        for kt in range(k_tiles):
                            # a fresh mbarrier counts as having completed the phase before
                            # phase 0, so round 0 waits on parity 1 and passes at once
                            mac.wait_parity(empty[kt % STAGES], (kt // STAGES + 1) % 2)
                            mac.load_stage(kt % STAGES, kt)
                else:
                    T.ptx.setmaxnreg.inc.sync.aligned.u32(CONSUMER_REGS)
                    for i in T.unroll(ACC_REGS):
                        acc[i] = T.float32(0)
                    for kt in range(k_tiles):
                        mac.wait_parity(full[kt % STAGES], kt // STAGES % 2)
                        mac.mma_stage(kt % STAGES, (wg - 1) * 64)
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        if kt > 0:
                            T.ptx.mbarrier.arrive.shared.b64(
                                T.address_of(empty[(kt - 1) % STAGES])
                            )
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    mac.store_accumulators((wg - 1) * 64 + tx % 128 // 32 * 16 + lane // 4)
                    T.ptx["fence.proxy.async.shared::cta"]()
                    T.ptx.bar.sync(T.uint32(EPILOGUE_BARRIER), T.uint32(CONSUMERS))
                    if tx == 128:
                        mac.store_tile()

    return sm90_ws_gemm


def stripped(m: int = M, n: int = N, k: int = K) -> Any:
    """:func:`hand` without block / named barriers and fences (mbarriers kept); needs TVM."""
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


__all__ = ["NVCC_FLAGS", "hand", "launch", "stripped"]
