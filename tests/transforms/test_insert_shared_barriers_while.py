"""InsertSharedBarriers on ``While`` loops: zero or more iterations, hazards carried over
the back edge, condition accesses, divergent loops. The verifier checks every output."""

import pytest
import tvm
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    insert_shared_barriers,
)


def check(before, expected, target="gfx942"):
    after = insert_shared_barriers(before, target)
    expected = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    assert find_shared_hazards(after, target) == []
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, target), after)


# --- a hazard carried from the end of one iteration to the start of the next ------------
@T.prim_func
def carried_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < n:
            B[tx] = B[tx] + S[63 - tx]
            S[tx] = A[tx]
            i = i + 1


@T.prim_func
def carried_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < n:
            T.tilewave.lds_barrier()  # RAW: the write of the previous iteration
            B[tx] = B[tx] + S[63 - tx]
            T.tilewave.lds_barrier()  # WAR within the iteration
            S[tx] = A[tx]
            i = i + 1


def test_hazard_carried_over_the_while_back_edge():
    assert find_shared_hazards(carried_before, "gfx942")
    check(carried_before, carried_after)


# --- a barrier guarding only accesses before the loop goes before it ---------------------
@T.prim_func
def hoist_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        i: T.int32 = 0
        while i < n:
            B[tx] = B[tx] + S[63 - tx]
            i = i + 1


@T.prim_func
def hoist_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        i: T.int32 = 0
        T.tilewave.lds_barrier()
        while i < n:
            B[tx] = B[tx] + S[63 - tx]
            i = i + 1


@T.prim_func
def hoist_split_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(-1)
        i: T.int32 = 0
        T.tilewave.barrier_wait(-1)
        while i < n:
            B[tx] = B[tx] + S[63 - tx]
            i = i + 1


def test_barrier_for_accesses_before_the_loop_is_hoisted():
    check(hoist_before, hoist_after)


def test_hoisted_split_barrier_gfx1200():
    check(hoist_before, hoist_split_after, "gfx1200")


# --- a loop nested in the while starts a new instance every while iteration -------------
@T.prim_func
def nested_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((192,), "float32", scope="shared")
        i: T.int32 = 0
        while i < n:
            for j in range(2):
                B[tx] = B[tx] + S[(j + 1) % 3 * 64 + 63 - tx]
                T.tilewave.lds_barrier()
                S[j % 3 * 64 + tx] = A[tx]
            i = i + 1


@T.prim_func
def nested_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((192,), "float32", scope="shared")
        i: T.int32 = 0
        while i < n:
            # row 1 written by j = 1 is read by j = 0 of the next while iteration
            T.tilewave.lds_barrier()
            for j in range(2):
                B[tx] = B[tx] + S[(j + 1) % 3 * 64 + 63 - tx]
                T.tilewave.lds_barrier()
                S[j % 3 * 64 + tx] = A[tx]
            i = i + 1


def test_loop_inside_the_while_restarts_each_iteration():
    assert [h.kind.name for h in find_shared_hazards(nested_before, "gfx942")] == ["RAW"]
    check(nested_before, nested_after)


# --- the condition's own accesses ---------------------------------------------------------
@T.prim_func
def cond_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        i: T.int32 = 0
        while i < T.Cast("int32", S[63]):
            B[tx] = B[tx] + T.float32(1)
            i = i + 1


@T.prim_func
def cond_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        i: T.int32 = 0
        T.tilewave.lds_barrier()
        while i < T.Cast("int32", S[63]):
            B[tx] = B[tx] + T.float32(1)
            i = i + 1


def test_condition_reading_shared_memory_gets_a_barrier_before_the_loop():
    hazards = find_shared_hazards(cond_before, "gfx942")
    assert [(h.kind.name, h.second.describe()) for h in hazards] == [("RAW", "read S[63]")]
    check(cond_before, cond_after)


@T.prim_func
def cond_in_body(A: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < n:
            S[tx] = A[tx] + T.Cast("float32", i)
            i = i + T.Cast("int32", S[63 - tx])


def test_loaded_counter_is_divergent_and_its_barrier_an_error():
    with pytest.raises(DivergentBarrierError, match=r"thread-divergent control flow in function"):
        insert_shared_barriers(cond_in_body, "gfx942")


# --- divergent while: barriers would be needed where only some threads run ------------
@T.prim_func
def divergent_while(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < tx % 4:
            B[tx] = B[tx] + S[63 - tx]
            S[tx] = A[tx]
            i = i + 1


def test_divergent_while_needing_a_barrier_inside_is_an_error():
    assert find_shared_hazards(divergent_while, "gfx942")
    with pytest.raises(
        DivergentBarrierError, match=r"inside thread-divergent control flow in function 'div"
    ):
        insert_shared_barriers(divergent_while, "gfx942")


@T.prim_func
def divergent_private(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        i: T.int32 = 0
        while i < tx % 4:
            S[tx] = S[tx] + T.float32(1)
            i = i + 1
        B[tx] = S[tx]


def test_divergent_while_on_private_slots_is_left_alone():
    assert find_shared_hazards(divergent_private, "gfx942") == []
    assert insert_shared_barriers(divergent_private, "gfx942").same_as(divergent_private)


# --- while inside a for: the outer iteration stays the same around the while -----------
@T.prim_func
def in_for_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(4):
            i: T.int32 = 0
            while i < n:
                S[(k & 1) * 64 + tx] = A[tx]
                i = i + 1
            B[tx] = B[tx] + S[(k & 1) * 64 + 63 - tx]


@T.prim_func
def in_for_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(4):
            i: T.int32 = 0
            while i < n:
                S[(k & 1) * 64 + tx] = A[tx]
                i = i + 1
            T.tilewave.lds_barrier()
            B[tx] = B[tx] + S[(k & 1) * 64 + 63 - tx]


def test_while_in_a_multibuffered_for():
    check(in_for_before, in_for_after)
