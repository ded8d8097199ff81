"""InsertSharedBarriers on warp-specialised producer/consumer branches: named barriers."""

import pytest
import tvm
from named_barrier_kernels import straight_split, ws_before
from tvm.script import tirx as T

import tilewave
from tilewave.analysis.shared_hazards import find_divergent_barriers, find_shared_hazards
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import TIRMutator, post_order_visit
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    insert_shared_barriers,
)


@T.prim_func
def ws_pass_after(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                # barrier.sync (not .aligned: one generation completes at two
                # instructions) on both ids, both sides (issue 11's decision: the form
                # compute-sanitizer racecheck and synccheck accept, see the pass docs)
                T.ptx.barrier.sync(T.uint32(1), T.uint32(256))  # RAW: tile k written
                T.ptx.barrier.sync(T.uint32(2), T.uint32(256))  # WAR: wait for tile k's reads
            else:
                T.ptx.barrier.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx] + T.float32(1)
                T.ptx.barrier.sync(T.uint32(2), T.uint32(256))  # done reading tile k


def test_producer_consumer_branches_get_raw_and_war_named_barriers():
    after = insert_shared_barriers(ws_before, "sm_90a")
    expected = ws_pass_after.with_attr("global_symbol", ws_before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, "sm_90a"), after)


def test_cuda_source_has_the_named_barriers():
    src = tilewave.build(insert_shared_barriers(ws_before, "sm_90a"), "sm_90a").source
    assert "bar.arrive" not in src
    assert 'asm volatile("barrier.sync %0, %1;"' in src
    assert "bar.sync" not in src  # the aligned form: PTX-undefined at two sites
    assert "tvm_builtin_ptx_bar_arrive_arrive((uint)1, (uint)256);" not in src
    assert "tvm_builtin_ptx_barrier_sync_count_sync((uint)1, (uint)256);" in src
    assert "tvm_builtin_ptx_bar_arrive_arrive((uint)2, (uint)256);" not in src
    assert "tvm_builtin_ptx_barrier_sync_count_sync((uint)2, (uint)256);" in src


@T.prim_func
def not_warp_aligned(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 112:
                S[tx] = A[k, tx]
            else:
                B[k, tx - 128] = S[255 - tx]


def test_split_not_at_a_warp_boundary_is_an_error():
    with pytest.raises(DivergentBarrierError, match=r"multiple of the warp size \(32\).*tx < 112"):
        insert_shared_barriers(not_warp_aligned, "sm_90a")


def test_amd_has_no_named_barriers():
    with pytest.raises(DivergentBarrierError, match=r"gfx942 has no named barriers \(AMD"):
        insert_shared_barriers(ws_before, "gfx942")


# -- the pass's named-barrier output checked by the independent hazard verifier ------------


@T.prim_func
def two_buffers_inner_loops(
    A: T.Buffer((4, 512), "float32"), B: T.Buffer((4, 256), "float32"),
    C: T.Buffer((4, 128), "float32"),
):
    for tx in T.thread_binding(384, thread="threadIdx.x"):
        S = T.alloc_buffer((512,), "float32", scope="shared")
        R = T.alloc_buffer((64,), "float32", scope="shared")
        for k in range(4):
            if tx < 128:  # warps 0-3 produce S (4 elements each) and R
                for j in range(4):
                    S[tx * 4 + j] = A[k, tx * 4 + j]
                if tx < 64:
                    R[tx] = A[k, tx] * T.float32(0.5)
                C[k, tx] = A[k, tx]  # no shared traffic: after the producer's arrive
            else:  # warps 4-11 consume
                B[k, tx - 128] = A[k, tx - 128] + T.float32(1)
                for j in range(2):
                    B[k, tx - 128] = B[k, tx - 128] + S[(tx - 128) * 2 + j] + R[tx % 64]


@T.prim_func
def split_in_nested_loops(A: T.Buffer((2, 3, 64), "float32"), B: T.Buffer((2, 3, 64), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for i in range(2):
            for k in range(3):
                if tx >= 64:  # warps 2-3 produce
                    S[tx - 64] = A[i, k, tx - 64]
                else:
                    B[i, k, tx] = S[63 - tx]


@pytest.mark.parametrize(
    "before", [ws_before, straight_split, two_buffers_inner_loops, split_in_nested_loops]
)
def test_the_verifier_certifies_the_passs_named_barriers(before):
    assert find_shared_hazards(before, "sm_90a"), "the kernel must race without barriers"
    after = insert_shared_barriers(before, "sm_90a")
    assert "T.ptx.barrier(" in after.script()  # named barriers, not __syncthreads
    assert find_shared_hazards(after, "sm_90a") == []
    assert find_divergent_barriers(after) == []


def test_the_verifier_rejects_the_passs_output_with_one_barrier_removed():
    after = insert_shared_barriers(two_buffers_inner_loops, "sm_90a")
    barriers = _named_barrier_statements(after)
    assert len(barriers) == 4  # RAW arrive/sync, WAR arrive/sync
    for dropped in barriers:
        broken = after.with_body(_Drop(dropped).visit(after.body))
        hazards = find_shared_hazards(broken, "sm_90a")
        assert {h.buffer for h in hazards} >= {"S"}, broken.script()


def _named_barrier_statements(func):
    found = []

    def visit(node):
        if isinstance(node, tvm.tirx.Evaluate) and callee_name(node.value).startswith(
            ("tirx.ptx.bar_arrive", "tirx.ptx.bar_sync", "tirx.ptx.barrier_sync")
        ):
            found.append(node)

    post_order_visit(func.body, visit)
    return found


class _Drop(TIRMutator):
    def __init__(self, stmt):
        self.stmt = stmt

    def visit_Evaluate(self, node):
        return None if node.same_as(self.stmt) else node
