"""InsertSharedBarriers precision rules, before/after: guards on the thread index, ``Bind``
values, injective affine thread maps, multibuffer slots of consecutive iterations, and the
pipeline's own IR shape (``T.launch_thread``, CSE ``Bind``s)."""

from __future__ import annotations

import pytest
import tvm
from structural import same
from tvm.script import tirx as T

import tilewave  # noqa: F401 (registers T.tilewave.*)
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.errors import MalformedKernelError
from tilewave.examples_builtin import block_sum, block_sum_hand_synced
from tilewave.pipeline import STAGES, LowerOptions
from tilewave.targets import get_target
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers
from tilewave.transforms.multibuffer import multi_buffer

# ---------------------------------------------------------------- tree reduction


@T.prim_func
def tree_before(A: T.Buffer((64,), "float32"), B: T.Buffer((1,), "float32")):
    partial = T.alloc_shared((64,), "float32")
    with T.launch_thread("threadIdx.x", 64) as tx:
        partial[tx] = A[tx]
        for level in range(6):
            stride: T.let[T.int32] = T.shift_right(32, level)
            if tx < stride:
                partial[tx] = partial[tx] + partial[tx + stride]
        if tx == 0:
            B[0] = partial[0]


@T.prim_func
def tree_after(A: T.Buffer((64,), "float32"), B: T.Buffer((1,), "float32")):
    partial = T.alloc_shared((64,), "float32")
    with T.launch_thread("threadIdx.x", 64) as tx:
        partial[tx] = A[tx]
        for level in range(6):
            stride: T.let[T.int32] = T.shift_right(32, level)
            # one barrier per level: RAW from the load / the previous level, WAR on the
            # previous level's reads. The guarded update itself is race-free (tx < stride).
            T.tilewave.lds_barrier()
            if tx < stride:
                partial[tx] = partial[tx] + partial[tx + stride]
        # thread 0 reads partial[0], which only thread 0 wrote: no barrier
        if tx == 0:
            B[0] = partial[0]


def test_tree_reduction_gets_one_barrier_per_level_and_no_race_error():
    assert find_shared_hazards(tree_before)  # the input races
    after = insert_shared_barriers(tree_before, "gfx942")
    same(after, tree_after)
    assert find_shared_hazards(after) == []


@T.prim_func
def racy_guarded(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 17:
            S[tx] = S[tx + 16]  # thread 16 writes S[16], which thread 0 reads


def test_a_guard_that_does_not_separate_the_halves_is_still_a_race():
    with pytest.raises(
        MalformedKernelError,
        match=r"`read S\[tx \+ 16\]` and `write S\[tx\]` may race between threads inside one "
        r"statement in function 'racy_guarded'.*Load the value into a local variable",
    ):
        insert_shared_barriers(racy_guarded, "gfx942")


# ---------------------------------------------------------------- injective thread maps


@T.prim_func
def mirrored(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        S[31 - tx] = A[tx]
        S[31 - tx] = S[31 - tx] * T.float32(2)
        B[tx] = S[31 - tx]


def test_negative_coefficient_is_one_element_per_thread():
    # every access touches the thread's own element S[31 - tx]: nothing to order
    after = insert_shared_barriers(mirrored, "gfx942")
    assert after.same_as(mirrored)
    assert find_shared_hazards(mirrored) == []


@T.prim_func
def bound_index(A: T.Buffer((64,), "float32"), B: T.Buffer((32,), "float32")):
    S = T.alloc_shared((64,), "float32")
    with T.launch_thread("threadIdx.x", 32) as tx:
        v: T.let[T.int32] = tx * 2
        S[v] = A[tx]
        S[v + 1] = A[tx + 32]
        B[tx] = S[v] + S[v + 1]


@T.prim_func
def bound_index_shifted(A: T.Buffer((64,), "float32"), B: T.Buffer((32,), "float32")):
    S = T.alloc_shared((64,), "float32")
    with T.launch_thread("threadIdx.x", 32) as tx:
        v: T.let[T.int32] = tx * 2
        S[v] = A[tx]
        S[v + 1] = A[tx + 32]
        B[tx] = S[(v + 2) % 64]


@T.prim_func
def bound_index_shifted_after(A: T.Buffer((64,), "float32"), B: T.Buffer((32,), "float32")):
    S = T.alloc_shared((64,), "float32")
    with T.launch_thread("threadIdx.x", 32) as tx:
        v: T.let[T.int32] = tx * 2
        S[v] = A[tx]
        S[v + 1] = A[tx + 32]
        T.tilewave.lds_barrier()
        B[tx] = S[(v + 2) % 64]


def test_bind_values_resolve_to_private_slices():
    after = insert_shared_barriers(bound_index, "gfx942")
    assert after.same_as(bound_index)
    # the neighbour's slice through the same Bind: a RAW barrier
    after = insert_shared_barriers(bound_index_shifted, "gfx942")
    same(after, bound_index_shifted_after)


# ---------------------------------------------------------------- multibuffer slots


@T.prim_func
def pipelined(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            S[tx] = A[k, tx]
            B[k, tx] = S[31 - tx]


@T.prim_func
def pipelined_single_after(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()  # WAR: iteration k-1 still reads S
            S[tx] = A[k, tx]
            T.tilewave.lds_barrier()  # RAW
            B[k, tx] = S[31 - tx]


@T.prim_func
def pipelined_double_after(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k in range(8):
            S[k & 1, tx] = A[k, tx]  # iteration k-1 read the other copy
            T.tilewave.lds_barrier()  # RAW; also orders iteration k-2's reads of this copy
            B[k, tx] = S[k & 1, 31 - tx]


@T.prim_func
def pipelined_triple_after(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (3, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        for k in range(8):
            S[k % 3, tx] = A[k, tx]
            T.tilewave.lds_barrier()
            B[k, tx] = S[k % 3, 31 - tx]


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, pipelined_single_after), (2, pipelined_double_after), (3, pipelined_triple_after)],
)
def test_multibuffered_loop_drops_the_war_barrier(count, expected):
    after = insert_shared_barriers(multi_buffer(pipelined, count=count), "gfx942")
    same(after, expected)
    assert find_shared_hazards(after) == []


@T.prim_func
def reads_previous_slot(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 32), "float32", scope="shared")
        for k in range(8):
            B[k, tx] = S[(k + 1) & 1, 31 - tx]  # the copy iteration k-1 wrote
            S[k & 1, tx] = A[k, tx]


@T.prim_func
def reads_previous_slot_after(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 32), "float32", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()
            B[k, tx] = S[(k + 1) & 1, 31 - tx]
            S[k & 1, tx] = A[k, tx]


def test_slot_written_by_the_previous_iteration_still_gets_its_barrier():
    # RAW across the back edge: (k+1) & 1 at iteration k is k-1's copy. With no barrier in
    # the body, the reads of iteration k-2 (same copy as k's write) also stay ordered only
    # by this one barrier, which the pass keeps.
    after = insert_shared_barriers(reads_previous_slot, "gfx942")
    same(after, reads_previous_slot_after)
    assert find_shared_hazards(after) == []
    assert find_shared_hazards(reads_previous_slot)


@T.prim_func
def slot_reused_two_iterations_later(
    A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")
):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 64), "float32", scope="shared")
        for k in range(8):
            # Each thread reads back its own element (no RAW in one iteration) and the next
            # iteration uses the other copy; but iteration k+2 writes the element thread
            # tx + 2 read at iteration k, and no barrier separates the two.
            S[k & 1, tx + k] = A[k, tx]
            B[k, tx] = S[k & 1, tx + k]


@T.prim_func
def slot_reused_two_iterations_later_after(
    A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")
):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 64), "float32", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()
            S[k & 1, tx + k] = A[k, tx]
            B[k, tx] = S[k & 1, tx + k]


def test_only_the_next_iteration_is_excused():
    # An access still pending after a whole iteration is "any distance": k and k+2 share
    # the copy, so both the verifier and the pass see the hazard.
    hazards = find_shared_hazards(slot_reused_two_iterations_later)
    assert {h.kind.name for h in hazards} == {"RAW", "WAW"}  # a pair is reported once
    after = insert_shared_barriers(slot_reused_two_iterations_later, "gfx942")
    same(after, slot_reused_two_iterations_later_after)
    assert find_shared_hazards(after) == []


# ---------------------------------------------------------------- the pipeline's IR


def _before_barrier_stage(func):
    info, options = get_target("sm_90a"), LowerOptions()
    passes = []
    for stage in STAGES:
        if stage.name == "tilewave.InsertSharedBarriers":
            break
        if stage.when(info, options):
            passes.append(stage.make(info, options))
    mod = tvm.transform.Sequential(passes)(tvm.IRModule({"main": func}))
    return mod["main"]


def test_pipeline_shaped_block_sum_gets_barriers_and_no_hazard():
    # T.launch_thread bindings and a CSE Bind (`cse_v1 = 128 >> level`) in the guard
    func = _before_barrier_stage(block_sum)
    assert "cse_v1" in func.script() and "T.launch_thread" in func.script()
    after = insert_shared_barriers(func, "sm_90a")
    assert after.script().count("T.tilewave.lds_barrier()") == 1
    assert find_shared_hazards(func) and find_shared_hazards(after) == []


def test_hand_synced_block_sum_is_left_unchanged():
    func = _before_barrier_stage(block_sum_hand_synced)
    assert func.script().count("T.tilewave.lds_barrier()") == 2
    assert insert_shared_barriers(func, "sm_90a").same_as(func)
    assert find_shared_hazards(func) == []
