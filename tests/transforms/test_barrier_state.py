"""Pending-access states around loop back edges (:func:`state_around`)."""

from __future__ import annotations

from typing import Any

import pytest
from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis.shared_access import (
    ANY,
    FAR,
    AccessScope,
    LoopRange,
    collect_thread_extents,
    may_conflict,
    statement_accesses,
)
from tilewave.ir.walker import post_order_visit
from tilewave.transforms.barrier_state import OPEN_GROUP, Instance, Pending, state_around


@T.prim_func
def looped(A: T.Buffer((128,), "float32"), B: T.Buffer((4, 128), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx]
        for k in range(4):
            S[tx] = A[tx]
            B[k, tx] = S[(tx + k) % 128]


PLAIN = Pending(True, frozenset())
IN_FLIGHT = Pending(False, frozenset(), OPEN_GROUP, "cp.async")


def _setup() -> tuple[Any, Any, Any, Any]:
    """The loop, the write before it, and the loop's write and read (in its scope)."""
    loops: list = []
    post_order_visit(looped.body, loops.append, (tirx.For,))
    loop = next(lp for lp in loops if lp.kind == tirx.ForKind.SERIAL)
    tx = next(lp for lp in loops if lp.kind == tirx.ForKind.THREAD_BINDING).loop_var
    stores: list = []
    post_order_visit(looped.body, stores.append, (tirx.BufferStore,))
    before = statement_accesses(stores[0], AccessScope())[-1]
    scope = AccessScope().within_loop(LoopRange.of(loop, AccessScope(), [tx]))
    write, read = (statement_accesses(s, scope)[-1] for s in loop.body.seq)
    return loop, before, write, read


def _rounds(inst: Instance, record: Pending, loop: Any, count: int) -> list[Instance]:
    """The instances after 1..count back edges (each round joined with the last)."""
    state, moved, seen = {inst: record}, {}, []
    for _ in range(count):
        state = state_around(state, loop, moved)
        seen.append(sorted(state, key=repr))
    return seen


def test_a_plain_access_the_loop_does_not_read_goes_around_once() -> None:
    loop, _, write, _ = _setup()
    rounds = _rounds(Instance(write), PLAIN, loop, 3)
    assert [[i.carried for i in r] for r in rounds] == [[((loop, 1),)]] * 3


def test_an_access_that_reads_the_loop_keeps_each_distance() -> None:
    loop, _, _, read = _setup()
    state, moved = {Instance(read): PLAIN}, {}
    distances = []
    for _ in range(5):
        state = state_around(state, loop, moved)
        (inst,) = state
        distances.append(dict(inst.carried)[loop])
    assert distances == [1, 2, 3, FAR, FAR]


def test_a_copy_in_flight_keeps_each_distance() -> None:
    # (its commit group counts differ per iteration: waits retire them one by one)
    loop, _, write, _ = _setup()
    state, moved = {Instance(write): IN_FLIGHT}, {}
    state = state_around(state, loop, moved)
    state = state_around(state, loop, moved)
    assert [dict(i.carried)[loop] for i in state] == [2]


def test_an_access_from_before_the_loop_is_at_any_later_iteration() -> None:
    loop, before, _, _ = _setup()
    entered = Instance(before).entering(loop)
    assert entered.positions == ((loop, 0),)
    rounds = _rounds(entered, PLAIN, loop, 3)
    assert [[i.positions for i in r] for r in rounds] == [[((loop, ANY),)]] * 3


def test_distance_one_covers_every_larger_distance() -> None:
    # what makes the plain instance sound: for a later access that reads the loop, the
    # iterations a larger distance allows are among those distance 1 allows
    loop, before, write, read = _setup()
    extents = collect_thread_extents(looped)
    verdicts = {
        d: may_conflict(write, read, extents, {loop: frozenset({d})}) for d in (1, 2, 3, FAR)
    }
    assert verdicts[1] and all(verdicts[1] >= v for v in verdicts.values())
    # and for an access entered before the loop, "any iteration" covers each position
    anywhere = may_conflict(before, read, extents, None, {loop: ANY})
    assert all(
        anywhere >= may_conflict(before, read, extents, None, {loop: p}) for p in (0, 1, 2, FAR)
    )


def test_instances_are_interned_and_immutable() -> None:
    # states compare instances by identity: equal contexts must give the one object
    loop, _, write, _ = _setup()
    first = Instance(write, ((loop, 1),))
    assert Instance(write, ((loop, 1),)) is first
    assert Instance(write).around(loop) is first
    assert Instance(write, ((loop, 2),)) is not first
    with pytest.raises(AttributeError, match="Instance is immutable"):
        first.carried = ()  # type: ignore[misc]
