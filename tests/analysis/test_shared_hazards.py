"""The hazard verifier on hand-written kernels, and its errors."""

import pytest
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.shared_access import AccessKind
from tilewave.analysis.shared_hazards import (
    HazardKind,
    find_divergent_barriers,
    find_shared_hazards,
)
from tilewave.errors import UnclassifiedOpError, UnknownTargetError


@T.prim_func
def split_wrong_order(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        T.tilewave.barrier_signal(-1)
        S[tx] = A[tx]
        T.tilewave.barrier_wait(-1)
        B[tx] = S[63 - tx]


def test_signal_before_the_producer_does_not_synchronise():
    (hazard,) = find_shared_hazards(split_wrong_order, "gfx1200")
    assert hazard.kind is HazardKind.RAW and hazard.buffer == "S"
    assert hazard.first.kind is AccessKind.WRITE and hazard.second.kind is AccessKind.READ
    assert "RAW on S" in str(hazard)


@T.prim_func
def divergent_barrier(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        if tx < 32:
            T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]


def test_barrier_in_divergent_code_synchronises_nothing():
    assert len(find_shared_hazards(divergent_barrier, "gfx942")) == 1
    assert len(find_divergent_barriers(divergent_barrier)) == 1


@T.prim_func
def unknown_op(A: T.Buffer((64,), "float32")):
    for _tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        T.evaluate(T.call_extern("void", "mystery_copy", S.data, A.data))


def test_unknown_op_on_shared_memory_is_an_error():
    with pytest.raises(UnclassifiedOpError, match=r"'mystery_copy'.*register_intrinsic"):
        find_shared_hazards(unknown_op, "gfx942")


def test_unknown_target_is_an_error():
    with pytest.raises(UnknownTargetError, match="unknown target"):
        find_shared_hazards(split_wrong_order, "gfx9999")


@T.prim_func
def while_barrier_at_the_end(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < 5:
            S[tx] = A[tx]
            T.tilewave.lds_barrier()
            B[tx] = B[tx] + S[63 - tx]
            i = i + 1


def test_while_back_edge_carries_the_read_to_the_next_write():
    (hazard,) = find_shared_hazards(while_barrier_at_the_end, "gfx942")
    assert hazard.kind is HazardKind.WAR
    assert (hazard.first.describe(), hazard.second.describe()) == ("read S[63 - tx]", "write S[tx]")


@T.prim_func
def while_on_a_loaded_counter(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < T.Cast("int32", B[0]):
            S[tx] = A[tx]
            T.tilewave.lds_barrier()
            B[tx] = B[tx] + S[63 - tx]
            T.tilewave.lds_barrier()
            i = i + 1


def test_barrier_in_a_while_on_a_loaded_value_is_divergent():
    """Threads may load different values (thread 0 writes B[0] in the loop, unordered with
    the other threads' loads): the loop may diverge. A load of a buffer the kernel never
    writes is uniform (tests/analysis/test_uniformity.py)."""
    assert len(find_divergent_barriers(while_on_a_loaded_counter)) == 2
    (hazard,) = find_shared_hazards(while_on_a_loaded_counter, "gfx942")
    assert (hazard.first.describe(), hazard.second.describe()) == ("write S[tx]", "read S[63 - tx]")


@T.prim_func
def let_pointer_copy_no_wait(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            p = T.address_of(S[tx])
            T.ptx["cp.async.ca.shared.global"](p, T.address_of(A[k, tx]), 4)
            T.tilewave.commit_async_ops()
            T.tilewave.lds_barrier()  # the barrier alone does not wait for the copy
            B[k, tx] = S[31 - tx]
            T.tilewave.lds_barrier()


@T.prim_func
def let_pointer_copy_waited(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            p = T.address_of(S[tx])
            T.ptx["cp.async.ca.shared.global"](p, T.address_of(A[k, tx]), 4)
            T.tilewave.commit_async_ops()
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            B[k, tx] = S[31 - tx]
            T.tilewave.lds_barrier()


def test_copy_through_a_let_bound_pointer_without_its_wait_is_a_raw():
    # `p = T.address_of(S[tx])` then cp.async(p, ...): the copy writes S through p (the
    # unretired copies of two iterations are also a WAW)
    hazards = find_shared_hazards(let_pointer_copy_no_wait, "sm_90a")
    assert {h.kind for h in hazards} == {HazardKind.RAW, HazardKind.WAW}
    (hazard,) = [h for h in hazards if h.kind is HazardKind.RAW]
    assert hazard.buffer == "S"
    assert hazard.first.kind is AccessKind.ASYNC_WRITE and hazard.second.kind is AccessKind.READ
    assert find_shared_hazards(let_pointer_copy_waited, "sm_90a") == []


def _inner_loop_kernel(last_half: int):
    """An outer loop whose inner loop's last iteration writes ``S[32 * last_half + 31 - tx]``
    after its barrier; the next outer iteration writes ``S[tx]`` first."""

    @T.prim_func
    def kernel(A: T.Buffer((64,), "int32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "int32", scope="shared")
            for _k1 in range(2):
                S[tx] = A[tx] + 1
                for k4 in range(2):
                    T.tilewave.lds_barrier()
                    S[tx] = A[tx] + 1
                    T.tilewave.lds_barrier()
                    S[((k4 + last_half + 1) % 2) * 32 + 31 - tx] = A[tx] + 1

    return kernel


def test_outer_back_edge_keeps_where_an_exited_inner_loop_ended():
    # the inner loop's earlier iterations are ordered by its barriers; only its last
    # iteration's write (S[32..63]) meets the next outer iteration's S[tx]: no hazard
    assert find_shared_hazards(_inner_loop_kernel(last_half=1), "gfx942") == []


def test_outer_back_edge_still_finds_the_last_inner_iteration():
    # the last inner iteration writes S[31 - tx]: the next outer iteration's S[tx] races
    (hazard,) = find_shared_hazards(_inner_loop_kernel(last_half=0), "gfx942")
    assert hazard.kind is HazardKind.WAW and hazard.buffer == "S"
