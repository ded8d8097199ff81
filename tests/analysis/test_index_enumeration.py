"""Exactness of the enumerated disjointness answer against brute force over every pair of
threads and iterations: small spaces get an answer (never ``None``) and it is the true one,
including where thread axes are reduced (conditions on one thread variable alone, threads
read only through ``t // g`` or not at all)."""

from __future__ import annotations

import itertools
from typing import Any

import hypothesis.strategies as st
from enumeration_space import (
    BUFFER,
    EXTENTS,
    K_LOOP,
    K_RANGE,
    TRIPS,
    TX,
    TX_EXTENT,
    TY,
    TY_EXTENT,
    K,
)
from expr_eval import evaluate
from hypothesis import example, given, settings
from tvm import tirx

from tilewave.analysis.index_enumeration import (
    ANY,
    MergedPoints,
    enumerate_no_overlap,
    small_spaces_overlap,
    whole_space_points,
)
from tilewave.analysis.shared_access import AccessKind, AccessScope, SharedAccess


def thread_term(draw: Any) -> Any:
    form = draw(st.sampled_from(["tx", "tx//2", "tx//4", "tx//8", "none"]))
    return {
        "tx": TX,
        "tx//2": tirx.floordiv(TX, 2),
        "tx//4": tirx.floordiv(TX, 4),
        "tx//8": tirx.floordiv(TX, 8),
        "none": tirx.IntImm("int32", 0),
    }[form]


@st.composite
def indices(draw: Any) -> Any:
    c_t, c_y, c_k = draw(st.integers(-2, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 4))
    base = c_t * thread_term(draw) + c_y * TY + c_k * K + draw(st.integers(0, 6)) + 32
    if draw(st.booleans()):
        return tirx.floormod(base, draw(st.sampled_from([3, 4, 8])))
    return base


@st.composite
def conditions(draw: Any) -> tuple[tuple[Any, bool], ...]:
    out = []
    for _ in range(draw(st.integers(0, 2))):
        c = draw(st.integers(0, 7))
        cond = draw(
            st.sampled_from(
                [
                    tirx.EQ(TX, c),
                    TX < c,
                    tirx.EQ(tirx.floordiv(TX, 4), c % 2),
                    tirx.EQ(TY, c % 2),
                    tirx.And(TX < c + 1, K < c % 3 + 1),
                    tirx.And(tirx.EQ(TY, c % 2), TX < c),
                    tirx.Cast("bool", tirx.floormod(TX, c % 3 + 2)),  # an int as a condition
                    tirx.Cast("bool", tirx.floormod(K + c, 2)),
                ]
            )
        )
        out.append((cond, draw(st.booleans())))
    return tuple(out)


def access(kind: AccessKind, index: Any, conds: tuple[tuple[Any, bool], ...]) -> SharedAccess:
    scope = AccessScope((K_RANGE,), conds)
    return SharedAccess(BUFFER, kind, (index,), None, scope.loops, scope)


def brute_force_overlap(a: SharedAccess, b: SharedAccess, distance: int, ordered: bool) -> bool:
    """Whether two threads (different ones when ``ordered``) touch one element, with their
    conditions holding, ``b`` ``distance`` iterations after ``a`` (ANY: any iterations)."""
    if distance == ANY:
        iterations = list(itertools.product(range(TRIPS), repeat=2))
    else:
        iterations = [(k, k + distance) for k in range(TRIPS - distance)]
    threads = list(itertools.product(range(TX_EXTENT), range(TY_EXTENT)))
    for (xa, ya), (xb, yb) in itertools.product(threads, repeat=2):
        if ordered and (xa, ya) == (xb, yb):
            continue
        for ka, kb in iterations:
            env_a, env_b = {"tx": xa, "ty": ya, "k": ka}, {"tx": xb, "ty": yb, "k": kb}
            if not all(bool(evaluate(c, env_a)) == h for c, h in a.scope.conditions):
                continue
            if not all(bool(evaluate(c, env_b)) == h for c, h in b.scope.conditions):
                continue
            if evaluate(a.indices[0], env_a) == evaluate(b.indices[0], env_b):
                return True
    return False


@settings(deadline=None, max_examples=200)
@given(
    index_a=indices(),
    index_b=indices(),
    conds_a=conditions(),
    conds_b=conditions(),
    distance=st.sampled_from([0, 1, ANY]),
    ordered=st.booleans(),
)
@example(  # a single-thread copy (tx == 0) against a read by warp-group-like classes
    index_a=K * 4 + TX * 0 + 32,
    index_b=tirx.floordiv(TX, 4) + K * 4 + 32,
    conds_a=((tirx.EQ(TX, 0), True),),
    conds_b=(),
    distance=0,
    ordered=True,
)
@example(  # odd threads only: a mask, not indices into the thread values
    index_a=tirx.floordiv(TX, 2) + TY * 4 + 32,
    index_b=tirx.floordiv(TX, 2) + TY * 4 + 33,
    conds_a=((tirx.Cast("bool", tirx.floormod(TX, 2)), True),),
    conds_b=((tirx.Cast("bool", tirx.floormod(TX, 2)), True),),
    distance=0,
    ordered=True,
)
@example(  # an integer condition on the loop variable alone
    index_a=K + 32,
    index_b=K + 33,
    conds_a=((tirx.Cast("bool", tirx.floormod(K, 2)), True),),
    conds_b=(),
    distance=1,
    ordered=False,
)
def test_enumeration_is_exact(index_a, index_b, conds_a, conds_b, distance, ordered):
    a = access(AccessKind.WRITE, index_a, conds_a)
    b = access(AccessKind.READ, index_b, conds_b)
    iterations = None if distance == ANY else {K_LOOP: frozenset({distance})}
    verdict = enumerate_no_overlap(a, b, EXTENTS, iterations, ordered)
    assert verdict is not None, "a space of a few hundred points must be enumerated"
    apart = not brute_force_overlap(a, b, distance, ordered)
    case = (
        f"{a.describe()} if {conds_a} / {b.describe()} if {conds_b}, distance {distance}, "
        f"ordered {ordered}: enumeration says apart={verdict}"
    )
    if verdict:
        assert apart, f"unsound: {case}"
    if reads_k(a) == reads_k(b):
        # where only one side reads k, its iterations are not tied to the other's (k
        # ranges over all of them): conservative, so exactness is asked only here
        assert verdict is apart, f"imprecise: {case}"


def reads_k(acc: SharedAccess) -> bool:
    """Whether the access's index or conditions read the loop variable."""
    exprs = [acc.indices[0], *(c for c, _ in acc.scope.conditions)]
    return any("k" in {str(v.name) for v in tirx.analysis.undefined_vars(e)} for e in exprs)


@settings(deadline=None, max_examples=150)
@given(
    index_a=indices(),
    index_b=indices(),
    conds_a=conditions(),
    conds_b=conditions(),
    ordered=st.booleans(),
)
def test_small_spaces_overlap_is_the_enumerated_answer(index_a, index_b, conds_a, conds_b, ordered):
    a = access(AccessKind.WRITE, index_a, conds_a)
    b = access(AccessKind.READ, index_b, conds_b)
    verdict = small_spaces_overlap(a, b, EXTENTS, ordered)
    assert verdict is not None, "a space of a few hundred points is small"
    assert verdict is (not enumerate_no_overlap(a, b, EXTENTS, None, ordered))
    assert verdict is brute_force_overlap(a, b, ANY, ordered)


@settings(deadline=None, max_examples=100)
@given(
    members=st.lists(st.tuples(indices(), conditions()), min_size=1, max_size=11),
    new=st.tuples(indices(), conditions()),
    ordered=st.booleans(),
)
def test_merged_points_answer_as_any_pair(members, new, ordered):
    """Each growing prefix of the group is asked (the placer's pattern: one more landed
    store per statement), so merges from a remembered prefix are checked too; up to 11
    members, so runs of 1, 2, 4 and 8 members are merged and carried; a fresh object asked
    the whole group at once builds it from its first member."""
    group = [access(AccessKind.WRITE, index, conds) for index, conds in members]
    b = access(AccessKind.READ, *new)
    merged = MergedPoints()
    points_b = whole_space_points(b, EXTENTS)
    for end in range(1, len(group) + 1):
        prefix = group[:end]
        want = any(small_spaces_overlap(a, b, EXTENTS, ordered) for a in prefix)
        points = tuple(whole_space_points(a, EXTENTS) for a in prefix)
        assert merged.overlaps_any(points, points_b, ordered) is want
    assert MergedPoints().overlaps_any(points, points_b, ordered) is want
