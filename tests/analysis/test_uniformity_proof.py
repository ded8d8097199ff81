"""The verifier's own uniformity proof (two symbolic threads), and the verifier on
uniform branches: barriers inside block-uniform branches count, barriers inside branches
that only look uniform do not."""

import pytest
from example_loader import REPO_ROOT, load_module
from hypothesis import HealthCheck, example, given, settings
from tvm.script import tirx as T

from tilewave.analysis.shared_hazards import find_divergent_barriers, find_shared_hazards
from tilewave.analysis.uniformity import Uniformity, UniformityAnalysis
from tilewave.analysis.uniformity_proof import UniformityProof

CASES = load_module(REPO_ROOT / "benchmarks" / "issue15_uniform_cases.py")
LEVELS = load_module(REPO_ROOT / "tests" / "analysis" / "test_uniformity.py", "uniformity_forms")
PROPERTY = load_module(
    REPO_ROOT / "tests" / "analysis" / "test_uniformity_property.py", "uniformity_property"
)
conditions = LEVELS.conditions


def proved(func):
    proof = UniformityProof(func)
    return [proof.is_block_uniform(cond, scope) for cond, scope in conditions(func)]


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (LEVELS.forms, [1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0]),
        (LEVELS.premises, [1, 1, 0, 0, 1, 1]),
        (LEVELS.scoped_premises, [0, 1, 1, 0, 1, 1, 0]),
        (LEVELS.locals_and_loops, [1, 0, 1, 1, 0]),
        (LEVELS.view_write, [0]),
        (LEVELS.address_taken, [0]),
        (LEVELS.odd_block, [1, 0]),
        (LEVELS.nested_loads, [0, 1]),
    ],
    ids=["forms", "premises", "scoped_premises", "locals_and_loops", "view_write",
         "address_taken", "odd_block", "nested_loads"],
)
def test_the_proof_on_each_form(func, expected):
    assert proved(func) == [bool(e) for e in expected]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PROPERTY.EXAMPLES)
# found by this property: the load index needs the premise `n % 16 == 0` (n = 16 n')
@example(
    tree=("<", ("bx",), ("C", ("//", ("+", ("ty",), ("n",)), 2))),
    premise=16, tx_extent=32, ty_extent=2, seed=0,
)
def test_proved_uniform_means_one_value_and_covers_the_pass(
    tree, premise, tx_extent, ty_extent, seed
):
    """Sound against evaluation, and at least as strong as the pass's analysis (a barrier
    the pass puts in a branch it finds uniform must count for the verifier, or the checked
    pipeline would report its own output)."""
    func, cond = PROPERTY.kernel(tree, premise, tx_extent, ty_extent)
    uniform = UniformityProof(func).is_block_uniform(cond)
    if UniformityAnalysis(func).level(cond) is Uniformity.BLOCK:
        assert uniform, tree
    if uniform:
        PROPERTY.check_one_value(tree, premise, tx_extent, ty_extent, seed, Uniformity.BLOCK)


# --- the verifier ------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES.uniform_cases(), ids=lambda c: c.name)
def test_hand_barriers_in_uniform_branches_count(case):
    func = case.hand()
    assert find_shared_hazards(func, "sm_90a") == []
    listed = find_divergent_barriers(func)
    if case.name.startswith("warp_"):
        # a warp role's named barrier is listed (it sits under a thread-dependent `if`) but
        # orders the role's accesses: no hazard above
        named = 'T.ptx.barrier(T.uint32(1), T.uint32(32), "", "sync", "", "")'
        assert [b.script() for b in listed] == [named]
    else:
        assert listed == []


@pytest.mark.parametrize("case", CASES.uniform_cases(), ids=lambda c: c.name)
def test_the_missing_barrier_is_a_hazard(case):
    (hazard, *_) = find_shared_hazards(case.stripped(), "sm_90a")
    assert hazard.buffer in ("S", "flag")


@T.prim_func
def barrier_under_a_written_flag(
    A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32")
):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if C[bx] > 0:  # C is written below: not the same in every thread
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]
            if tx == 0:
                C[bx] = 0


@T.prim_func
def barrier_under_a_split_tail(
    A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), n: T.int32
):
    assert n % 32 == 0, "n must be a multiple of 32"
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if bx * 64 + tx < n:  # a multiple of 32 may split a block of 64
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


@pytest.mark.parametrize("func", [barrier_under_a_written_flag, barrier_under_a_split_tail])
def test_barriers_in_branches_that_only_look_uniform_are_divergent(func):
    (barrier,) = find_divergent_barriers(func)
    assert "barrier" in barrier.script()
    (hazard,) = find_shared_hazards(func, "sm_90a")
    assert (hazard.first.describe(), hazard.second.describe()) == ("write S[tx]", "read S[63 - tx]")
