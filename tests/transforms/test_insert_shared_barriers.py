"""Before/after tests for InsertSharedBarriers; the hazard verifier checks every output."""

import pytest
import tvm
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.errors import MalformedKernelError, PassOptionError
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    InsertSharedBarriers,
    insert_shared_barriers,
)


def renamed(expected, like):
    """``expected`` carrying the global symbol of ``like`` (TVMScript names them apart)."""
    return expected.with_attr("global_symbol", like.attrs["global_symbol"])


def check(before, expected, target="gfx942", **kwargs):
    after = insert_shared_barriers(before, target, **kwargs)
    tvm.ir.assert_structural_equal(after, renamed(expected, before))
    assert find_shared_hazards(after, target) == []
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, target, **kwargs), after)
    return after


# --- RAW ---------------------------------------------------------------------------------
@T.prim_func
def raw_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]


@T.prim_func
def raw_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]


def test_raw():
    assert [h.kind.name for h in find_shared_hazards(raw_before, "gfx942")] == ["RAW"]
    check(raw_before, raw_after)


# --- WAR ---------------------------------------------------------------------------------
@T.prim_func
def war_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        B[tx] = S[63 - tx]
        S[tx] = A[tx]


@T.prim_func
def war_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        B[tx] = S[63 - tx]
        T.tilewave.lds_barrier()
        S[tx] = A[tx]


def test_war():
    assert [h.kind.name for h in find_shared_hazards(war_before, "gfx942")] == ["WAR"]
    check(war_before, war_after)


# --- WAW ---------------------------------------------------------------------------------
@T.prim_func
def waw_before(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        S[63 - tx] = A[tx]


@T.prim_func
def waw_after(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        S[63 - tx] = A[tx]


def test_waw():
    assert [h.kind.name for h in find_shared_hazards(waw_before, "gfx942")] == ["WAW"]
    check(waw_before, waw_after)


# --- atomic ------------------------------------------------------------------------------
@T.prim_func
def atomic_before(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "int32", scope="shared")
        S[tx] = A[tx]
        T.evaluate(T.call_intrin("int32", "tirx.atomic_add", T.address_of(S[0]), 1))
        B[tx] = S[tx]


@T.prim_func
def atomic_after(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "int32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        T.evaluate(T.call_intrin("int32", "tirx.atomic_add", T.address_of(S[0]), 1))
        T.tilewave.lds_barrier()
        B[tx] = S[tx]


def test_atomic_is_read_and_write():
    check(atomic_before, atomic_after)


# --- async copy --------------------------------------------------------------------------
@T.prim_func
def async_before(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        B[tx] = S[tx * 4]


@T.prim_func
def async_after(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.tilewave.commit_async_ops()  # closes the copy's group: wait_group retires it
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        B[tx] = S[tx * 4]


def test_read_after_async_copy_waits_then_barriers():
    check(async_before, async_after, target="sm_90a")


@T.prim_func
def async_barrier_only(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.tilewave.lds_barrier()
        B[tx] = S[tx * 4]


@T.prim_func
def async_barrier_upgraded(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.tilewave.commit_async_ops()  # closes the copy's group: wait_group retires it
        T.tilewave.lds_barrier()
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        B[tx] = S[tx * 4]


def test_barrier_without_async_wait_is_not_enough():
    assert len(find_shared_hazards(async_barrier_only, "sm_90a")) == 1
    check(async_barrier_only, async_barrier_upgraded, target="sm_90a")


# --- disjoint per-thread ------------------------------------------------------------------
@T.prim_func
def disjoint(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for ty in T.thread_binding(2, thread="threadIdx.y"):
        for tx in T.thread_binding(16, thread="threadIdx.x"):
            S = T.alloc_buffer((128,), "float32", scope="shared")
            S2 = T.alloc_buffer((2, 64), "float32", scope="shared")
            for k in range(4):
                S[ty * 64 + tx * 4 + k] = A[ty * 64 + tx * 4 + k]
            for k in range(4):
                B[ty * 64 + tx * 4 + k] = S[ty * 64 + tx * 4 + k] * T.float32(2)
            S2[ty, tx] = A[tx]
            B[tx] = S2[ty, tx]
            S2[1, 32 + tx] = A[tx]
            B[tx] = S2[0, tx + 16]


def test_disjoint_per_thread_access_needs_no_barrier():
    assert find_shared_hazards(disjoint, "gfx942") == []
    tvm.ir.assert_structural_equal(insert_shared_barriers(disjoint, "gfx942"), disjoint)


# --- already synchronised -----------------------------------------------------------------
def test_already_synchronised_input_is_unchanged():
    assert insert_shared_barriers(raw_after, "gfx942").same_as(raw_after)


@T.prim_func
def storage_sync(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        B[tx] = S[63 - tx]


def test_foreign_barrier_is_understood():
    assert find_shared_hazards(storage_sync, "sm_90a") == []
    assert insert_shared_barriers(storage_sync, "sm_90a").same_as(storage_sync)


# --- loops --------------------------------------------------------------------------------
@T.prim_func
def carried_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for k in range(8):
            B[tx] = B[tx] + S[(tx + 1) % 64]
            S[tx] = A[tx] + T.Cast("float32", k)


@T.prim_func
def carried_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()
            B[tx] = B[tx] + S[(tx + 1) % 64]
            T.tilewave.lds_barrier()
            S[tx] = A[tx] + T.Cast("float32", k)


def test_loop_carried_hazard():
    # one unordered pair: the WAR within an iteration, the RAW across iterations
    hazards = find_shared_hazards(carried_before, "gfx942")
    assert [h.kind.name for h in hazards] == ["WAR"]
    check(carried_before, carried_after)


@T.prim_func
def invariant_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        for k in range(8):
            B[tx] = B[tx] + S[(tx + k) % 64]


@T.prim_func
def invariant_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        for k in range(8):
            B[tx] = B[tx] + S[(tx + k) % 64]


def test_loop_invariant_barrier_stays_outside_the_loop():
    check(invariant_before, invariant_after)


@T.prim_func
def nested_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for i in range(4):
            S[tx] = A[tx] + T.Cast("float32", i)
            for j in range(4):
                B[tx] = B[tx] + S[(tx + j) % 64]


@T.prim_func
def nested_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for i in range(4):
            T.tilewave.lds_barrier()
            S[tx] = A[tx] + T.Cast("float32", i)
            T.tilewave.lds_barrier()
            for j in range(4):
                B[tx] = B[tx] + S[(tx + j) % 64]


def test_nested_loops():
    check(nested_before, nested_after)


@T.prim_func
def after_loop_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for _k in range(4):
            S[tx] = S[tx] + A[tx]
        B[tx] = B[tx] * T.float32(2)
        B[tx] = S[63 - tx]


@T.prim_func
def after_loop_split(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for _k in range(4):
            S[tx] = S[tx] + A[tx]
        T.tilewave.barrier_signal(-1)
        B[tx] = B[tx] * T.float32(2)
        T.tilewave.barrier_wait(-1)
        B[tx] = S[63 - tx]


def test_producer_in_loop_consumer_after_loop_split_gfx1200():
    check(after_loop_before, after_loop_split, target="gfx1200")


@T.prim_func
def after_loop_basic(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for _k in range(4):
            S[tx] = S[tx] + A[tx]
        B[tx] = B[tx] * T.float32(2)
        T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]


def test_producer_in_loop_consumer_after_loop_basic():
    check(after_loop_before, after_loop_basic, target="gfx950")


# --- split barriers -----------------------------------------------------------------------
@T.prim_func
def split_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"),
                 C: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        C[tx] = A[tx] * T.float32(3)
        C[tx] = C[tx] + T.float32(1)
        B[tx] = S[63 - tx]


@T.prim_func
def split_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"),
                C: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(-1)
        C[tx] = A[tx] * T.float32(3)
        C[tx] = C[tx] + T.float32(1)
        T.tilewave.barrier_wait(-1)
        B[tx] = S[63 - tx]


def test_split_barrier_gfx1200_signal_after_producer_wait_before_consumer():
    check(split_before, split_after, target="gfx1200")


def test_split_barrier_cuda():
    check(split_before, split_after, target="sm_90a", barrier_style="split")


def test_existing_split_barrier_is_reused():
    assert insert_shared_barriers(split_after, "gfx1200").same_as(split_after)


@T.prim_func
def split_async_before(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        B[tx] = B[tx] + T.float32(1)
        B[tx] = S[tx * 4]


@T.prim_func
def split_async_after(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.tilewave.commit_async_ops()  # closes the copy's group: wait_group retires it
        B[tx] = B[tx] + T.float32(1)
        T.tilewave.wait_async_ops(0)
        T.tilewave.barrier_signal(-1)
        T.tilewave.barrier_wait(-1)
        B[tx] = S[tx * 4]


def test_split_barrier_after_async_copy_waits_before_signalling():
    check(split_async_before, split_async_after, target="sm_90a", barrier_style="split")


# --- branches -----------------------------------------------------------------------------
@T.prim_func
def if_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            S[tx] = A[tx]
        else:
            S[tx] = A[tx] * T.float32(2)
        B[tx] = S[63 - tx]


@T.prim_func
def if_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            S[tx] = A[tx]
        else:
            S[tx] = A[tx] * T.float32(2)
        T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]


def test_hazard_across_if():
    check(if_before, if_after)


@T.prim_func
def into_if_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        if tx < 32:
            B[tx] = S[63 - tx]


@T.prim_func
def into_if_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        if tx < 32:
            B[tx] = S[63 - tx]


def test_barrier_hoisted_out_of_divergent_if():
    check(into_if_before, into_if_after)


@T.prim_func
def uniform_if_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if n > 0:
            S[tx] = A[tx]
            B[tx] = S[63 - tx]


@T.prim_func
def uniform_if_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if n > 0:
            S[tx] = A[tx]
            T.tilewave.lds_barrier()
            B[tx] = S[63 - tx]


def test_barrier_inside_uniform_if():
    check(uniform_if_before, uniform_if_after)


@T.prim_func
def divergent_bad(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            S[tx] = A[tx]
            B[tx] = S[31 - tx]


def test_barrier_needed_inside_divergent_code_is_an_error():
    msg = "inside thread-divergent control flow in function 'divergent_bad'"
    with pytest.raises(DivergentBarrierError, match=msg):
        insert_shared_barriers(divergent_bad, "gfx942")


@T.prim_func
def divergent_branches_bad(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            S[tx] = A[tx]
        else:
            B[tx] = S[tx - 32]


def test_divergent_branches_racing_is_an_error():
    assert len(find_shared_hazards(divergent_branches_bad, "gfx942")) == 1
    with pytest.raises(DivergentBarrierError, match="Split the divergent region"):
        insert_shared_barriers(divergent_branches_bad, "gfx942")


@T.prim_func
def divergent_existing_barrier(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            T.tilewave.lds_barrier()
        S[tx] = A[tx]


def test_existing_barrier_in_divergent_code_is_an_error():
    with pytest.raises(DivergentBarrierError, match="barrier sits in thread-divergent"):
        insert_shared_barriers(divergent_existing_barrier, "gfx942")


@T.prim_func
def same_statement_race(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = S[(tx + 1) % 64] + A[tx]


def test_race_inside_one_statement_is_an_error():
    assert len(find_shared_hazards(same_statement_race, "gfx942")) == 1
    with pytest.raises(MalformedKernelError, match=r"inside one statement.*local variable"):
        insert_shared_barriers(same_statement_race, "gfx942")


# --- options and the Pass wrapper ---------------------------------------------------------
def test_split_on_target_without_split_barrier_is_an_error():
    with pytest.raises(PassOptionError, match="gfx942 has no split barrier"):
        insert_shared_barriers(raw_before, "gfx942", barrier_style="split")


def test_unknown_barrier_style_is_an_error():
    with pytest.raises(PassOptionError, match="must be 'basic' or 'split'"):
        InsertSharedBarriers("gfx942", barrier_style="fancy")


def test_pass_wrapper_on_module():
    mod = InsertSharedBarriers(target="gfx942")(tvm.IRModule({"main": raw_before}))
    tvm.ir.assert_structural_equal(mod["main"], renamed(raw_after, raw_before))
