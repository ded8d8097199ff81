"""The barrier's waits, and which in-flight copies the pass need not ask about.

``barrier_waiting_for`` decides a barrier's waits from the copies it must land;
``joins_that_matter`` keeps only the in-flight copies whose joining those copies could
change that barrier, so the pass asks fewer pair questions. The claim it rests on: a copy
it drops changes nothing for the copies found so far *and for any more found later*. Checked
here on random pending states by computing the barrier both ways (the function itself, not
a model of it), and by the real kernels' questions going down with their output unchanged.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from tilewave.transforms.barrier_state import MAX_NEWER_GROUPS, OPEN_GROUP, Pending
from tilewave.transforms.barrier_waits import barrier_waiting_for, joins_that_matter

#: async units of in-flight copies: grouped ones, and one completed by a full wait only
DOMAINS = ("cp.async", "wgmma", "bulk", "lds_dma")


@st.composite
def pending_states(draw: st.DrawFn) -> dict[int, Pending]:
    """States of 1-8 in-flight copies (keys stand for instances: the functions read only
    the records) and up to 3 landed accesses."""
    state: dict[int, Pending] = {}
    for key in range(draw(st.integers(1, 8))):
        domain = draw(st.sampled_from(DOMAINS))
        grouped = domain != "lds_dma"
        group = draw(st.integers(OPEN_GROUP, MAX_NEWER_GROUPS)) if grouped else 0
        state[key] = Pending(False, frozenset(), group, domain)
    for key in range(100, 100 + draw(st.integers(0, 3))):
        state[key] = Pending(True, frozenset())
    return state


def _outcome(state: dict[int, Pending], unlanded: set[int]) -> tuple[object, object]:
    barrier, kept = barrier_waiting_for(state, unlanded, False)
    return barrier, sorted(kept.items())


@settings(max_examples=400, deadline=None)
@given(state=pending_states(), data=st.data())
def test_a_copy_that_does_not_matter_never_changes_the_barrier(state, data):
    copies = [k for k, p in state.items() if not p.landed]
    found = set(data.draw(st.lists(st.sampled_from(copies), unique=True)))
    dropped = [k for k in copies if k not in found and k not in joins_that_matter(
        state, found, copies
    )]
    if not dropped:
        return
    candidate = data.draw(st.sampled_from(dropped))
    # any copies found later, the candidate's joining changes nothing
    later = set(data.draw(st.lists(st.sampled_from(copies), unique=True))) - {candidate}
    for unlanded in (found, found | later):
        assert _outcome(state, unlanded) == _outcome(state, unlanded | {candidate})


@settings(max_examples=200, deadline=None)
@given(state=pending_states())
def test_with_no_copy_found_every_copy_matters(state):
    copies = [k for k, p in state.items() if not p.landed]
    assert joins_that_matter(state, set(), copies) == copies


def test_an_older_committed_copy_is_retired_by_the_same_wait():
    # wait_group 1 (the newest committed group may stay in flight) retires a copy with two
    # newer groups too: it need not be asked about; a copy of the open group needs a commit
    state = {
        1: Pending(False, frozenset(), 1, "cp.async"),
        2: Pending(False, frozenset(), 2, "cp.async"),
        3: Pending(False, frozenset(), OPEN_GROUP, "cp.async"),
        4: Pending(False, frozenset(), 0, "cp.async"),
    }
    assert joins_that_matter(state, {1}, [2, 3, 4]) == [3, 4]
    barrier, _ = barrier_waiting_for(state, {1}, False)
    assert (barrier.wait, barrier.commit) == (1, False)
    assert barrier_waiting_for(state, {1, 2}, False)[0] == barrier
