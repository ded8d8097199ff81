"""find_shared_hazards on ``if``s nested in thread-divergent code.

A block-uniform condition that reads no memory sends every thread that reaches it the same
way, in divergent code too: its branches exclude each other (found by the fuzz test: a WAW
reported between the two arms of ``if 1 < n`` inside ``if tx % 2 == 0``'s else-branch, on
a kernel racecheck runs clean). So does one that loads only kernel parameters nothing in
the kernel writes (their words hold one value all along). A condition that loads memory
the kernel writes (shared memory included: conservative), or that differs between threads,
keeps its branches concurrent.
"""

from __future__ import annotations

import pytest
from tvm import tirx
from tvm.script import from_source
from tvm.script import tirx as T

from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.racecheck import racecheck


def nested_inside_divergent(condition: str, before: str = "R[tx] = 0") -> tirx.PrimFunc:
    """Odd threads write ``S`` in the two branches of ``if condition`` (in ``tx``, ``n``,
    ``A`` and ``R``), after every thread ran ``before``; ``S[62]`` is thread 1's in the first
    and thread 19's in the second."""
    return from_source(
        f"""
@T.prim_func
def nested(A: T.Buffer((32,), "int32"), B: T.Buffer((64,), "int32"), n: T.int32):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "int32", scope="shared")
        R = T.alloc_buffer((32,), "int32", scope="shared")
        {before}
        T.tvm_storage_sync("shared")
        if tx % 2 == 1:
            if {condition}:
                S[63 - tx] = A[tx]
            else:
                S[(tx * 3 + 5) % 64] = A[tx]
""",
        extra_vars={"T": T},
    )


uniform_scalar_inside_divergent = nested_inside_divergent("1 < n")
loaded_condition_inside_divergent = nested_inside_divergent("A[0] > 0")
written_loaded_condition_inside_divergent = nested_inside_divergent(
    "A[0] > 0", before="A[tx] = A[tx] + 1"
)
shared_loaded_condition_inside_divergent = nested_inside_divergent("R[0] > 0")
thread_condition_inside_divergent = nested_inside_divergent("tx % 4 == 1")


@pytest.mark.parametrize("target", ["sm_90a", "gfx1200"])
def test_branches_of_a_uniform_scalar_condition_exclude_each_other(target):
    assert find_shared_hazards(uniform_scalar_inside_divergent, target) == []
    # the independent oracle agrees: no race for either value of n
    for n in (1, 3):
        assert racecheck(uniform_scalar_inside_divergent, target=target, args={"n": n}).ok


def test_branches_of_a_condition_on_unwritten_parameters_exclude_each_other():
    # `A` is never written: every thread that reaches the `if` reads one A[0]
    assert find_shared_hazards(loaded_condition_inside_divergent, "sm_90a") == []
    assert racecheck(loaded_condition_inside_divergent, target="sm_90a", args={"n": 1}).ok


def test_branches_of_a_condition_on_written_memory_stay_concurrent():
    """Conservative: the kernel writes ``A``, so the verifier does not take ``A[0]`` as one
    value for every thread (it does not follow when the words are written). Here the write
    precedes the barrier and racecheck finds no race; a write after it, by another block or
    in another branch, would let two threads take different arms."""
    func = written_loaded_condition_inside_divergent
    hazards = find_shared_hazards(func, "sm_90a")
    assert [h.kind for h in hazards] == [HazardKind.WAW], hazards
    assert racecheck(func, target="sm_90a", args={"n": 1}).ok


def test_branches_of_a_condition_on_shared_memory_stay_concurrent():
    """Conservative: ``R[0]`` is written before the barrier only, so every thread reads one
    value (racecheck: clean), but the verifier does not follow shared words' writes (the
    barrier pass's uniformity analysis does, and leaves the kernel as it is)."""
    func = shared_loaded_condition_inside_divergent
    hazards = find_shared_hazards(func, "sm_90a")
    assert [h.kind for h in hazards] == [HazardKind.WAW], hazards
    assert racecheck(func, target="sm_90a", args={"n": 1}).ok


def test_branches_of_a_thread_dependent_condition_race():
    hazards = find_shared_hazards(thread_condition_inside_divergent, "sm_90a")
    assert [h.kind for h in hazards] == [HazardKind.WAW], hazards
    # threads 1 (then: S[62]) and 19 (else: S[62]) write one element: racecheck sees it
    assert not racecheck(thread_condition_inside_divergent, target="sm_90a", args={"n": 3}).ok


def test_the_barrier_pass_refuses_racing_branches_nested_in_divergent_code():
    """The pass checked only the outermost divergent ``if``'s branches: the nested one's
    race was left in the kernel without a word."""
    from tilewave.transforms import insert_shared_barriers
    from tilewave.transforms.insert_shared_barriers import DivergentBarrierError

    with pytest.raises(DivergentBarrierError, match="thread-divergent"):
        insert_shared_barriers(thread_condition_inside_divergent, "sm_90a")
    # the uniform and the loaded conditions are left as they are
    for func in (
        uniform_scalar_inside_divergent,
        loaded_condition_inside_divergent,
        shared_loaded_condition_inside_divergent,
    ):
        assert insert_shared_barriers(func, "sm_90a").same_as(func)
