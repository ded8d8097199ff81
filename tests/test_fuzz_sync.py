"""Fuzz test of tilewave's synchronisation through ``tilewave.lower`` (sm_90a, gfx1200).

Random shared-memory kernels (tests/fuzz_sync_kernels.py): no crash, every result verifies
clean or is refused with a TilewaveError, the barrier stage is idempotent, and where TVM's own
``ThreadSync`` gives a race-free reference, tilewave's lowered kernel computes the same
result under every interpreted thread order. ``benchmarks/fuzz_sync.py`` runs >= 5000.
"""

from __future__ import annotations

import collections

import pytest
from fuzz_sync_kernels import TARGETS, check_kernel, kernel_source, kernels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OUTCOMES: collections.Counter[str] = collections.Counter()


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=kernels(), target=st.sampled_from(TARGETS))
def test_lowered_kernels_verify_clean_and_match_the_thread_sync_reference(source, target):
    outcome = check_kernel(source, target)
    OUTCOMES[outcome.result.name] += 1
    OUTCOMES[f"compared:{target}"] += outcome.compared
    OUTCOMES[f"refused:{outcome.error}"] += bool(outcome.error)


def test_the_generator_reaches_every_outcome():
    """Run after the property test: results were compared on both targets, and some kernels
    were refused (a barrier needed in divergent code, or an unfixable two-arm write)."""
    if not OUTCOMES:
        test_lowered_kernels_verify_clean_and_match_the_thread_sync_reference()
    assert OUTCOMES["compared:sm_90a"] > 0 and OUTCOMES["compared:gfx1200"] > 0, OUTCOMES
    assert OUTCOMES["refused:DivergentBarrierError"] > 0, OUTCOMES
    assert OUTCOMES["LOWERED"] > OUTCOMES["REFUSED"], OUTCOMES


#: Found by this fuzz test: with StorageRewrite on, R's memory is reused as Q's and the read
#: of Q then races with the write through the view (TVM's ThreadSync puts a barrier there).
ALIASED = kernel_source("""
B[tx] = B[tx] * 2 + Q[tx]
R[31 - tx] = A[tx] + 1
""")


def test_aliased_kernel_is_correct_without_storage_rewrite():
    assert check_kernel(ALIASED, "sm_90a").compared


def test_storage_rewrite_alias_is_synchronised():
    """With StorageRewrite on (the fuzz default again), Q's memory is reused as R's view:
    the barrier stage orders the read of Q before the write through the view."""
    assert check_kernel(ALIASED, "sm_90a", config={}).compared


#: Found by benchmarks/fuzz_sync.py (5000 kernels): R is written only in a branch that cannot
#: run, TVM's CompactBufferAllocation gives it a negative size and its CUDA codegen crashed
#: ("bad optional access"); tilewave now refuses it with a MalformedKernelError.
DEAD_BRANCH = kernel_source("""
if tx < 8:
    if tx < 16:
        Q[tx] = A[tx] + 1
    else:
        R[tx] = A[tx] + 1
""")


def test_buffer_used_only_in_dead_code_is_refused_not_crashed():
    # found with StorageRewrite off (the fuzz config then); with it on, R is folded away
    outcome = check_kernel(DEAD_BRANCH, "sm_90a", config={"tirx.disable_storage_rewrite": True})
    assert outcome.error == "MalformedKernelError"


#: Found by this fuzz test: TVM's ThreadSync puts no barrier around an atomic through
#: `address_of` (its reference races; every thread-at-a-time order of the interpreter still
#: agrees on one result, which a warp in lockstep does not give), while tilewave orders the
#: stores, the atomic and the read.
RACY_REFERENCE = kernel_source("""
for k1 in range(1):
    Q[tx] = A[tx] + k1
    Q[tx] = A[tx] + k1
    T.evaluate(T.call_intrin("int32", "tirx.atomic_add", T.address_of(Q[31 - tx]), 1))
B[tx] = B[tx] % 65536 * 2 + Q[tx]
""")


def test_a_reference_racecheck_finds_racy_is_not_compared():
    outcome = check_kernel(RACY_REFERENCE, "sm_90a")
    assert outcome.reference_racy and not outcome.compared


#: Found by this fuzz test (benchmarks/fuzz_sync.py, seed 35): the verifier reported a WAW
#: between the arms of `if 1 < n` inside a thread-divergent branch, arms no two threads
#: take at once (racecheck runs tilewave's kernel clean for n = 1 and 3).
UNIFORM_INSIDE_DIVERGENT = kernel_source("""
if tx % 2 == 0:
    Q[tx] = A[tx] + 1
else:
    Q[tx] = A[tx] + 1
    if n > 1:
        S[(31 - tx) + 32] = A[tx] + 1
    else:
        S[(tx * 3 + 5) % 64] = A[tx] + 1
""")


@pytest.mark.parametrize("target", TARGETS)
def test_uniform_branches_inside_divergent_code_verify_clean(target):
    assert check_kernel(UNIFORM_INSIDE_DIVERGENT, target).result.name == "LOWERED"


#: Found by this fuzz test (benchmarks/fuzz_sync.py, seed 35): thread 7 reads R[8] in the
#: nested `if tx < 8` while thread 8 writes it in the other branch; the barrier pass checked
#: only the outermost divergent `if` and returned the race unchanged.
NESTED_DIVERGENT_RACE = kernel_source("""
if tx < 16:
    if tx < 8:
        B[tx] = B[tx] % 65536 * 2 + R[(tx + 1) % 32]
    else:
        R[tx] = A[tx] + 1
""")


@pytest.mark.parametrize("target", TARGETS)
def test_racing_branches_nested_in_divergent_code_are_refused(target):
    outcome = check_kernel(NESTED_DIVERGENT_RACE, target)
    assert outcome.error == "DivergentBarrierError", outcome


#: Found by this fuzz test (benchmarks/fuzz_sync.py, seed 35): under `n <= 1` the loop runs
#: at most once, so `Q[k2 * 5 + tx]` is `Q[tx]`. The pair proof fixed `k2` at iteration 1
#: of the loop without asking whether that iteration exists, so the verifier reported a WAW
#: (racecheck: clean for n = 0..3); the proof now keeps the loop's range (`1 < n` is false).
TRIP_COUNT_BOUNDED_BY_CONDITION = kernel_source("""
if n > 1:
    Q[tx] = A[tx] + 1
else:
    Q[tx] = A[tx] + 1
    for k2 in range(n):
        Q[(k2 * 5 + tx) % 32] = A[tx] + k2
""")


@pytest.mark.parametrize("target", TARGETS)
def test_a_trip_count_bounded_by_a_condition_verifies_clean(target):
    # (this suite checks the barrier stage's output: a report would refuse the kernel)
    outcome = check_kernel(TRIP_COUNT_BOUNDED_BY_CONDITION, target)
    assert outcome.result.name == "LOWERED" and not outcome.verifier_overruled, outcome


#: An `if` on a kernel parameter nothing writes, inside thread-divergent code: every thread
#: that reaches it reads one `A[0]`, so its arms exclude each other (the verifier took them
#: as concurrent, as for any loaded condition, until it asked whether the memory is written).
LOADED_UNIFORM_CONDITION = kernel_source("""
if tx < 16:
    if A[0] > 0:
        Q[tx] = A[tx] + 1
    else:
        Q[tx + 1] = A[tx] + 2
""")


@pytest.mark.parametrize("target", TARGETS)
def test_a_condition_on_unwritten_parameters_verifies_clean(target):
    outcome = check_kernel(LOADED_UNIFORM_CONDITION, target)
    assert outcome.result.name == "LOWERED" and not outcome.verifier_overruled, outcome


#: The verifier still takes the arms of an `if` on a shared word inside divergent code as
#: concurrent (conservative: it does not follow when the word is written); the pass knows
#: `S[0]` is written before the barrier only, so the arms are exclusive.
SHARED_UNIFORM_CONDITION = kernel_source("""
S[tx] = A[tx]
if tx < 16:
    if S[0] > 0:
        Q[tx] = A[tx] + 1
    else:
        Q[tx + 1] = A[tx] + 2
""")


def test_a_conservative_verifier_report_is_overruled_by_racecheck(monkeypatch):
    # as users lower (and benchmarks/fuzz_sync.py runs): the barrier stage's output check off
    monkeypatch.setenv("TILEWAVE_VERIFY_BARRIERS", "0")
    outcome = check_kernel(SHARED_UNIFORM_CONDITION, "sm_90a")
    assert outcome.verifier_overruled and outcome.result.name == "LOWERED", outcome
    # with the check on (this test suite's setting) the same report refuses the kernel
    monkeypatch.setenv("TILEWAVE_VERIFY_BARRIERS", "1")
    assert check_kernel(SHARED_UNIFORM_CONDITION, "sm_90a").error == "UnfixableHazardError"
