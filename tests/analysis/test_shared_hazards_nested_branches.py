"""find_shared_hazards on ``if``s nested in thread-divergent code.

A block-uniform condition that reads no memory sends every thread that reaches it the same
way, in divergent code too: its branches exclude each other (found by the fuzz test: a WAW
reported between the two arms of ``if 1 < n`` inside ``if tx % 2 == 0``'s else-branch, on
a kernel racecheck runs clean). A condition that loads, or that differs between threads,
keeps its branches concurrent.
"""

from __future__ import annotations

import pytest
from tvm import tirx
from tvm.script import from_source
from tvm.script import tirx as T

from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.racecheck import racecheck


def nested_inside_divergent(condition: str) -> tirx.PrimFunc:
    """Odd threads write ``S`` in the two branches of ``if condition`` (in ``tx``, ``n`` and
    ``A``); ``S[62]`` is thread 1's in the first and thread 19's in the second."""
    return from_source(
        f"""
@T.prim_func
def nested(A: T.Buffer((32,), "int32"), B: T.Buffer((64,), "int32"), n: T.int32):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "int32", scope="shared")
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
thread_condition_inside_divergent = nested_inside_divergent("tx % 4 == 1")


@pytest.mark.parametrize("target", ["sm_90a", "gfx1200"])
def test_branches_of_a_uniform_scalar_condition_exclude_each_other(target):
    assert find_shared_hazards(uniform_scalar_inside_divergent, target) == []
    # the independent oracle agrees: no race for either value of n
    for n in (1, 3):
        assert racecheck(uniform_scalar_inside_divergent, target=target, args={"n": n}).ok


def test_branches_of_a_loaded_condition_stay_concurrent():
    """Conservative: threads reaching the ``if`` at different times may load different
    values (here ``A`` is never written, which the verifier does not look for; the barrier
    pass, whose uniformity analysis does, leaves the kernel as it is)."""
    hazards = find_shared_hazards(loaded_condition_inside_divergent, "sm_90a")
    assert [h.kind for h in hazards] == [HazardKind.WAW], hazards


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
    for func in (uniform_scalar_inside_divergent, loaded_condition_inside_divergent):
        assert insert_shared_barriers(func, "sm_90a").same_as(func)
