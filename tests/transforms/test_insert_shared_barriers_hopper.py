"""InsertSharedBarriers with Hopper's async machinery: mbarrier init / arrive / wait
(polling loops in role branches), TMA loads landing at their mbarrier, wgmma operand
reads through matrix descriptors, warp roles with named barriers over the role.

Small kernels check each construct before/after (with ``tilewave.racecheck`` executing
the input as racy and the output as clean); the sm90 GEMM examples check the whole
model on the kernels it exists for.
"""

import sys
from pathlib import Path

import pytest
import tvm
from tvm.script import tirx as T
from wgmma_kernels import wgmma_after_stores

import tilewave
from tilewave.analysis.proxy_fence_check import MissingFenceHazard
from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.errors import MalformedKernelError
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def check(before, expected, target="sm_90a"):
    after = insert_shared_barriers(before, target)
    expected = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    assert find_shared_hazards(before, target) != []
    assert find_shared_hazards(after, target) == []
    assert not tilewave.racecheck(before, target).ok
    assert tilewave.racecheck(after, target).ok
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, target), after)


# --- mbarrier.init needs a fence and a barrier before other threads use it ---------------
@T.prim_func
def init_then_wait(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(128))
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))


@T.prim_func
def init_then_wait_after(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(128))
        T.ptx.fence.mbarrier_init.release.cluster()
        T.tilewave.lds_barrier()
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
        ready[0] = T.uint32(0)
        # a polling loop in every thread is a point-to-point wait, not a block barrier
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))


def test_mbarrier_init_gets_fence_and_barrier_before_first_use():
    check(init_then_wait, init_then_wait_after)


# --- a wgmma reads its shared operands through matrix descriptors --------------------------
def test_stores_read_by_a_wgmma_through_descriptors_get_a_barrier():
    before, expected = wgmma_after_stores(), wgmma_after_stores(lds_barrier=True)
    after = insert_shared_barriers(before, "sm_90a")
    tvm.ir.assert_structural_equal(after, expected)
    hazards = find_shared_hazards(before, "sm_90a")
    fences = [h for h in hazards if isinstance(h, MissingFenceHazard)]
    raw = {h.buffer for h in hazards if h.kind is HazardKind.RAW and h not in fences}
    assert raw == {"A_s", "B_s"}
    # what is left is the generic -> async proxy fence, InjectFenceProxy's to insert
    left = find_shared_hazards(after, "sm_90a")
    assert left and all(isinstance(h, MissingFenceHazard) for h in left)
    lowered = tilewave.lower(before, "sm_90a")["wgmma_reads"]  # (the fence pass included)
    assert find_shared_hazards(lowered, "sm_90a") == []


# --- a warp role's own barrier is a named barrier over the role ---------------------------
@T.prim_func
def role_epilogue(A: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tx >= 128:
            S[tx - 128] = T.float32(1)
            if tx == 128:
                for i in range(128):
                    A[i] = S[i]


@T.prim_func
def role_epilogue_after(A: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tx >= 128:
            S[tx - 128] = T.float32(1)
            T.ptx.barrier.sync(T.uint32(1), T.uint32(128))  # the 128 threads of the role
            if tx == 128:
                for i in range(128):
                    A[i] = S[i]


def test_barrier_inside_a_warp_role_is_a_named_barrier_over_the_role():
    check(role_epilogue, role_epilogue_after)


@T.prim_func
def role_not_whole_warps(A: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tx >= 100:
            S[tx % 128] = T.float32(1)
            if tx == 128:
                for i in range(128):
                    A[i] = S[i]


def test_a_branch_that_is_not_whole_warps_still_cannot_take_a_barrier():
    with pytest.raises(tilewave.errors.DivergentBarrierError, match="thread-divergent"):
        insert_shared_barriers(role_not_whole_warps, "sm_90a")


# --- a TMA tile read before any wait on its mbarrier ------------------------------------
@T.prim_func
def tma_without_wait(A_map: T.handle("tensormap"), B: T.Buffer((128,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((2 * 4096,), "float16", scope="shared.dyn")
        full = T.alloc_buffer((2,), "uint64", scope="shared.dyn")
        if tx == 0:
            for s in range(2):
                T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        if tx == 0:
            for s in range(2):
                T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(full[s]), T.uint32(8192))
                T.ptx[
                    "cp.async.bulk.tensor.2d.shared::cluster.global"
                    ".mbarrier::complete_tx::bytes"
                ](T.address_of(S[s * 4096]), T.address_of(A_map), 0, s * 64, T.address_of(full[s]))
        B[tx] = S[tx * 64]


def test_tma_tile_read_without_mbarrier_wait_is_an_error_and_a_hazard():
    assert any(h.kind.name == "RAW" for h in find_shared_hazards(tma_without_wait, "sm_90a"))
    with pytest.raises(MalformedKernelError, match="wait on its mbarrier phase"):
        insert_shared_barriers(tma_without_wait, "sm_90a")


# --- the sm90 GEMM examples -------------------------------------------------------------
def _loop_barriers(func):
    """Block barriers inside serial loops of ``func``."""
    found = []

    def visit(node, in_loop):
        if isinstance(node, tvm.tirx.For) and node.kind == tvm.tirx.ForKind.SERIAL:
            in_loop = True
        if isinstance(node, tvm.tirx.Evaluate) and in_loop:
            text = str(node)
            if "lds_barrier" in text or "tvm_storage_sync" in text:
                found.append(node)
        for name in ("body", "then_case", "else_case"):
            child = getattr(node, name, None)
            if isinstance(child, tvm.tirx.Stmt):
                visit(child, in_loop)
        if isinstance(node, tvm.tirx.SeqStmt):
            for child in node.seq:
                visit(child, in_loop)

    visit(func.body, False)
    return found


@pytest.mark.parametrize("name", ["sm90_tma_wgmma_gemm", "sm90_ws_gemm"])
def test_stripped_sm90_gemms_get_their_synchronisation_back(name):
    module = __import__(name)
    stripped = module.stripped(256, 256, 256)
    assert find_shared_hazards(stripped, "sm_90a") != []
    after = insert_shared_barriers(stripped, "sm_90a")
    # barrier hazards: the C tile's fence.proxy.async comes from InjectFenceProxy, later
    assert find_shared_hazards(after, "sm_90a", protocol=False) == []
    assert _loop_barriers(after) == []  # the K loop is ordered by the mbarrier ring alone
    text = after.script()
    assert text.count("mbarrier_init") == 1  # one fence.mbarrier_init before first use
    hand = module.hand(256, 256, 256)
    assert insert_shared_barriers(hand, "sm_90a").same_as(hand)


# --- a bulk copy completing on an mbarrier the same thread just initialised ----------------
@T.prim_func
def bulk_after_init(G: T.Buffer((4096,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
        full = T.alloc_buffer((2,), "uint64", scope="shared.dyn")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(full[0]), T.uint32(1))
        if tx == 0:
            T.ptx["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"](
                T.address_of(S[0]), T.address_of(G[0]), 512, T.address_of(full[0])
            )


@T.prim_func
def bulk_after_init_after(G: T.Buffer((4096,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
        full = T.alloc_buffer((2,), "uint64", scope="shared.dyn")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(full[0]), T.uint32(1))
        T.ptx.fence.mbarrier_init.release.cluster()
        T.tilewave.lds_barrier()
        if tx == 0:
            T.ptx["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"](
                T.address_of(S[0]), T.address_of(G[0]), 512, T.address_of(full[0])
            )


def test_a_bulk_copy_on_a_fresh_mbarrier_gets_the_init_fence_and_barrier():
    """The copy's complete_tx comes from the async proxy, not ordered after the thread's
    own init: the fence and barrier are needed even though one thread does both (the
    copy's operands are plain, so its accesses are read without the collector's walk:
    the mbarrier access must not be lost there). Not through ``check``: racecheck does
    not model the init's visibility to the async proxy, so it reports no race before."""
    after = insert_shared_barriers(bulk_after_init, "sm_90a")
    expected = bulk_after_init_after.with_attr(
        "global_symbol", bulk_after_init.attrs["global_symbol"]
    )
    tvm.ir.assert_structural_equal(after, expected)
    assert find_shared_hazards(bulk_after_init, "sm_90a") != []
    assert find_shared_hazards(after, "sm_90a") == []
