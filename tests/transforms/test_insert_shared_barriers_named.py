"""InsertSharedBarriers on warp-specialised producer/consumer branches: named barriers."""

import pytest
import tvm
from named_barrier_kernels import ws_after, ws_before
from tvm.script import tirx as T

import tilewave
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    insert_shared_barriers,
)


def test_producer_consumer_branches_get_raw_and_war_named_barriers():
    after = insert_shared_barriers(ws_before, "sm_90a")
    expected = ws_after.with_attr("global_symbol", ws_before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, "sm_90a"), after)


def test_cuda_source_has_the_named_barriers():
    src = tilewave.build(insert_shared_barriers(ws_before, "sm_90a"), "sm_90a").source
    assert 'asm volatile("bar.arrive %0, %1;"' in src
    assert 'asm volatile("bar.sync %0, %1;"' in src
    assert "tvm_builtin_ptx_bar_arrive_arrive((uint)1, (uint)256);" in src
    assert "tvm_builtin_ptx_bar_sync_count_sync((uint)1, (uint)256);" in src
    assert "tvm_builtin_ptx_bar_arrive_arrive((uint)2, (uint)256);" in src
    assert "tvm_builtin_ptx_bar_sync_count_sync((uint)2, (uint)256);" in src


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
