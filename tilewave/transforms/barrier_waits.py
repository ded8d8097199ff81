"""The waits a barrier issues so that in-flight async copies land, and which copies matter.

When InsertSharedBarriers places a barrier while copies are in flight, the copies some
access needs must land at it: :func:`barrier_waiting_for` turns those copies into the
barrier's waits (the largest ``wait_group N`` that retires them, a commit when one is in the
open group, waits of the other async units) and the pending state after it.
:func:`joins_that_matter` says which further in-flight copies could still change those
waits, so the pass asks pair questions about those only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from tilewave.analysis.shared_access import SyncAction, SyncKind
from tilewave.transforms.barrier_state import (
    OPEN_GROUP,
    Barrier,
    Instance,
    State,
    committed,
    retired,
)

__all__ = ["barrier_waiting_for", "joins_that_matter"]


def barrier_waiting_for(
    state: State, unlanded: set[Instance], fence_init: bool
) -> tuple[Barrier, State]:
    """The barrier that makes the in-flight copies ``unlanded`` land (and fences mbarrier
    initialisations when ``fence_init``), and the state after it: each async unit other than
    ``cp.async`` waits for its least group (``wait_async_ops``), then ``cp.async`` commits
    when one of the copies is in the open group and waits with the largest ``N`` that
    retires them all (``N = 0`` when one is not grouped)."""
    unit_waits = []
    for domain in sorted({state[i].domain for i in unlanded if state[i].grouped} - {"cp.async"}):
        own = [state[i].group for i in unlanded if state[i].domain == domain]
        unit_waits.append((domain, max(min(own), 0)))
        action = SyncAction(SyncKind.ASYNC_WAIT, unit_waits[-1][1], groups=True, domain=domain)
        state = {
            i: committed(p, domain) if p.group == OPEN_GROUP else p for i, p in state.items()
        }
        state = {i: replace(p, landed=retired(p, action)) for i, p in state.items()}
    copies = [i for i in unlanded if not state[i].landed]
    if not copies:
        kept = {i: p for i, p in state.items() if not p.landed}
        return Barrier(unit_waits=tuple(unit_waits), fence_init=fence_init), kept
    commit = any(state[i].grouped and state[i].group == OPEN_GROUP for i in copies)
    if commit:
        state = {i: committed(p) for i, p in state.items()}
    plain = any(not state[i].grouped for i in copies)
    wait = 0 if plain else min(state[i].group for i in copies)
    action = SyncAction(SyncKind.ASYNC_WAIT, wait, groups=True)
    kept = {i: p for i, p in state.items() if not retired(p, action)}
    return Barrier(wait, commit, tuple(unit_waits), fence_init), kept


def joins_that_matter(
    state: State, unlanded: set[Instance], candidates: Iterable[Instance]
) -> list[Instance]:
    """The in-flight copies of ``candidates`` (not in ``unlanded``) whose joining the
    copies a barrier waits for (``unlanded``) could change that barrier or the state after
    it. The barrier (:func:`barrier_waiting_for`) depends on those copies only through
    whether there are any, which units get a wait, each unit's least group (``wait_group
    N``), whether one is in the open group (a commit) and whether one is not grouped (a full
    wait). Those are minima and any-tests, so a copy that changes none of them for the
    copies found so far changes none for any more that join later: it need not be asked
    about."""
    found = [state[i] for i in unlanded if state[i].domain != "mbarrier"]
    copies = [p for p in found if p.domain == "cp.async" or not p.grouped]
    least: dict[str | None, int] = {}
    for p in found:
        least[p.domain] = min(p.group, least.get(p.domain, p.group))
    opened = any(p.group == OPEN_GROUP for p in copies)
    plain = any(not p.grouped for p in copies)
    out = []
    for inst in candidates:
        if inst in unlanded:
            continue
        p = state[inst]
        if not found:
            matters = True  # the first copy turns "no wait" into a wait
        elif p.grouped and p.domain != "cp.async":  # its unit's own wait, `max(least, 0)`
            matters = p.domain not in least or max(p.group, 0) < max(least[p.domain], 0)
        elif not copies:
            matters = True
        elif not p.grouped:
            matters = not plain  # a full wait instead of wait_group N
        elif p.group == OPEN_GROUP and not opened:
            matters = True  # a commit
        else:
            matters = not plain and p.group < least["cp.async"]
        if matters:
            out.append(inst)
    return out
