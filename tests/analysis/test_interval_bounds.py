"""Interval bounds of indices and disjointness with the related loops fixed
(``tilewave.analysis.interval_bounds``), checked by evaluating the indices over every
thread and iteration (NumPy), not by the bounds' own rules."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from enumeration_space import (
    BUFFER,
    EXTENTS,
    K_LOOP,
    K_RANGE,
    TRIPS,
    TX,
    TY,
    K,
    arithmetic_indices,
)
from hypothesis import given, settings
from tvm import tirx

from tilewave.analysis.index_enumeration import ANY, FAR, _evaluate
from tilewave.analysis.interval_bounds import (
    _reduced,
    apart_with_loops_fixed,
    apart_with_loops_fixed_each,
    fix_signature,
    index_bounds,
    interval_of,
    interval_tree,
    variable_ranges,
)
from tilewave.analysis.shared_access import (
    AccessKind,
    AccessScope,
    EarlierAccess,
    LoopRange,
    SharedAccess,
    may_conflict,
    proven_apart_together,
)

C = lambda v: tirx.IntImm("int32", v)  # noqa: E731
LEAVES = st.sampled_from([TX, TY, K]) | st.integers(-3, 9).map(C)
SMALL = st.integers(0, 3).map(C)
MODULI = st.integers(1, 12).map(C)


def _extend(children: Any) -> Any:
    pairs = st.tuples(children, children)
    return (
        arithmetic_indices(children, MODULI)
        | st.builds(lambda p: tirx.Min(*p), pairs)
        | st.builds(lambda p: tirx.Max(*p), pairs)
        | st.builds(lambda p: tirx.bitwise_or(*p), pairs)
        | st.builds(lambda p: tirx.bitwise_and(*p), pairs)
        | st.builds(tirx.shift_right, children, SMALL)
        | st.builds(tirx.shift_left, children, SMALL)
    )


#: indices over the threads and the loop variable ``k``: sums, products, moduli,
#: divisions, shifts and bitwise operations (swizzles, ring-buffer stage offsets)
INDICES = st.recursive(LEAVES, _extend, max_leaves=8)


def _values(index: Any, k_values: Any) -> np.ndarray:
    """Every value ``index`` takes over all threads and the given values of ``k``."""
    grid = np.meshgrid(
        np.arange(EXTENTS[TX]), np.arange(EXTENTS[TY]), np.asarray(k_values), indexing="ij"
    )
    values = _evaluate(index, dict(zip((TX, TY, K), grid, strict=True)))
    return np.broadcast_to(values, grid[0].shape).ravel()


def _access(index: Any, *, in_loop: bool, kind: AccessKind = AccessKind.WRITE) -> SharedAccess:
    loops = (K_RANGE,) if in_loop else ()
    return SharedAccess(BUFFER, kind, (index,), None, loops, AccessScope(loops))


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=400, deadline=None)
@given(index=INDICES)
def test_bounds_hold_every_value_the_index_takes(index):
    ranges = variable_ranges(_access(index, in_loop=True), EXTENTS)
    bounds = interval_of(interval_tree(index), ranges)
    if bounds is None:
        return  # not bounded (a negative operand of a bitwise operation, ...)
    values = _values(index, range(TRIPS))
    assert bounds[0] <= values.min() and values.max() <= bounds[1]


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=400, deadline=None)
@given(index=INDICES)
def test_whole_range_bounds_are_those_of_the_tree_reduced_with_nothing_kept(index):
    """``index_bounds`` evaluates the tree directly; reducing it with no variable kept (the
    path bounds with fixed loops take) must give the same bounds."""
    access = _access(index, in_loop=True)
    reduced = _reduced(interval_tree(index), variable_ranges(access, EXTENTS), frozenset())
    expected = None if reduced is None else interval_of(reduced, {})
    assert index_bounds(access, EXTENTS) == (expected,)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=400, deadline=None)
@given(first=INDICES, second=INDICES, distance=st.integers(0, TRIPS))
def test_apart_in_a_shared_loop_means_no_common_element(first, second, distance):
    """``second`` runs ``distance`` iterations of ``k`` after ``first``."""
    a, b = _access(first, in_loop=True), _access(second, in_loop=True)
    iterations = {K_LOOP: frozenset({distance})}
    if not apart_with_loops_fixed(a, b, EXTENTS, [(K_RANGE, K_RANGE)], iterations, {}, {}):
        return
    for k in range(TRIPS - distance):
        assert not np.intersect1d(_values(first, [k]), _values(second, [k + distance])).size


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=300, deadline=None)
@given(first=INDICES, second=INDICES, iteration=st.integers(0, FAR))
def test_apart_at_a_position_or_after_a_loop_means_no_common_element(first, second, iteration):
    """A loop only ``b`` runs in, entered ``iteration`` iterations before ``b`` (FAR: that
    many or more); then a loop only ``a`` ran in, left ``iteration`` iterations before its
    end."""
    chosen = range(iteration, TRIPS) if iteration == FAR else [iteration]
    a, b = _access(first, in_loop=False), _access(second, in_loop=True)
    if apart_with_loops_fixed(a, b, EXTENTS, [], {}, {K_LOOP: iteration}, {}):
        b_values = _values(second, [k for k in chosen if k < TRIPS])
        assert not np.intersect1d(_values(first, [0]), b_values).size
    a, b = _access(first, in_loop=True), _access(second, in_loop=False)
    ended = [TRIPS - 1 - k for k in chosen]
    if apart_with_loops_fixed(a, b, EXTENTS, [], {}, {}, {K_LOOP: iteration}):
        a_values = _values(first, [k for k in ended if 0 <= k < TRIPS])
        assert not np.intersect1d(a_values, _values(second, [0])).size


RING_WRITE = tirx.floormod(K + 2, 3) * 64 + TX * 8 + TY  # the copy into stage k + 2
RING_READ = tirx.floormod(K, 3) * 64 + tirx.bitwise_xor(TX, TY) * 8  # the read of stage k


@pytest.mark.parametrize(
    ("distance", "apart"),
    [
        (0, True),  # stage k + 2 against stage k
        (1, True),  # stage k + 2 against stage k + 1
        (2, False),  # the stage written two iterations ago is the one read now
    ],
)
def test_ring_buffer_stages_are_apart_unless_the_distance_meets_the_written_stage(
    distance, apart
):
    a, b = _access(RING_WRITE, in_loop=True), _access(RING_READ, in_loop=True, kind=AccessKind.READ)
    iterations = {K_LOOP: frozenset({distance})}
    assert apart_with_loops_fixed(a, b, EXTENTS, [(K_RANGE, K_RANGE)], iterations, {}, {}) is apart


def test_a_question_that_fixes_no_loop_is_left_to_the_other_rules():
    a, b = _access(RING_WRITE, in_loop=True), _access(RING_READ, in_loop=True)
    any_distance = {K_LOOP: frozenset({ANY})}
    assert not apart_with_loops_fixed(a, b, EXTENTS, [(K_RANGE, K_RANGE)], any_distance, {}, {})
    assert not apart_with_loops_fixed(a, b, EXTENTS, [], {}, {}, {})


def test_an_unbounded_dimension_proves_nothing():
    load = tirx.BufferLoad(BUFFER, [TX])  # an index read from memory: no bounds
    a = _access(tirx.floormod(K, 3) * 64 + load, in_loop=True)
    b = _access(RING_READ, in_loop=True)
    iterations = {K_LOOP: frozenset({0})}
    assert interval_of(interval_tree(load), {}) is None
    assert not apart_with_loops_fixed(a, b, EXTENTS, [(K_RANGE, K_RANGE)], iterations, {}, {})


def test_far_into_a_loop_narrows_its_range():
    """``b`` runs FAR or more iterations into an 8-iteration loop: ``k >= FAR``."""
    long_loop = LoopRange(K, 0, 8, loop=K_LOOP, aligned=True)
    a = _access(TX, in_loop=False)
    later = K * 8 + TX
    scope = AccessScope((long_loop,))
    b = SharedAccess(BUFFER, AccessKind.READ, (later,), None, scope.loops, scope)
    assert apart_with_loops_fixed(a, b, EXTENTS, [], {}, {K_LOOP: FAR}, {})
    assert not apart_with_loops_fixed(a, b, EXTENTS, [], {}, {K_LOOP: ANY}, {})
    assert not apart_with_loops_fixed(a, b, EXTENTS, [], {}, {K_LOOP: 0}, {})


def test_a_distance_beyond_the_trip_count_leaves_no_pair():
    a, b = _access(RING_WRITE, in_loop=True), _access(RING_WRITE, in_loop=True)
    iterations = {K_LOOP: frozenset({TRIPS})}  # b would run after the loop's last iteration
    assert apart_with_loops_fixed(a, b, EXTENTS, [(K_RANGE, K_RANGE)], iterations, {}, {})


@pytest.mark.parametrize(
    ("index", "bounds"),
    [
        (tirx.shift_right(TX * 4 + 3, C(1)), (1, 15)),
        (tirx.shift_left(TY, C(3)), (0, 8)),
        (tirx.floormod(K + 4, 8), (4, 6)),  # k + 4 in [4, 6]: one period, no wrap-around
        (tirx.floormod(K + 2, 3), (0, 2)),  # k + 2 in [2, 4] wraps around
        (tirx.bitwise_and(tirx.shift_right(TX, C(1)), C(3)), (0, 3)),
    ],
)
def test_bounds_of_shifts_and_moduli(index, bounds):
    ranges = variable_ranges(_access(index, in_loop=True), EXTENTS)
    assert interval_of(interval_tree(index), ranges) == bounds


def test_swizzled_chunks_with_shifts_are_apart_without_enumeration():
    """Two 16-byte copy chunks of a swizzled tile, rows ``tx // 4`` and ``tx // 4 + 2``:
    the shift in the swizzle (``row >> 1 & 3``) is bounded, so the row ranges decide."""

    def chunk(row: Any) -> Any:
        row_bits = tirx.bitwise_and(tirx.shift_right(row, C(1)), C(3))
        swizzle = tirx.bitwise_xor(tirx.floormod(TX, 4), row_bits)
        return row * 32 + swizzle * 8

    first = _access(chunk(tirx.floordiv(TX, 4)), in_loop=False, kind=AccessKind.ASYNC_WRITE)
    second = _access(chunk(tirx.floordiv(TX, 4) + 2), in_loop=False, kind=AccessKind.ASYNC_WRITE)
    ranges = variable_ranges(first, EXTENTS)
    assert interval_of(interval_tree(first.indices[0]), ranges) == (0, 56)
    assert interval_of(interval_tree(second.indices[0]), ranges) == (64, 120)
    assert may_conflict(first, second, EXTENTS) is False


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=300, deadline=None)
@given(
    group=st.lists(INDICES, min_size=2, max_size=4),
    later=INDICES,
    distance=st.integers(0, TRIPS),
)
def test_a_group_screened_together_gets_each_pairs_answer(group, later, distance):
    """``apart_with_loops_fixed_each`` fixes the loops once, from the group's first access,
    for accesses with that access's ``fix_signature``: each answer must be the one the
    access gets on its own, and a True answer must hold over every thread and iteration
    (NumPy)."""
    accesses = [_access(index, in_loop=True) for index in group]
    signature = fix_signature(accesses[0])
    alike = [a for a in accesses if fix_signature(a) == signature]
    b = _access(later, in_loop=True, kind=AccessKind.READ)
    iterations = {K_LOOP: frozenset({distance})}
    common = [(K_RANGE, K_RANGE)]
    together = apart_with_loops_fixed_each(alike, b, EXTENTS, common, iterations, {}, {})
    alone = [apart_with_loops_fixed(a, b, EXTENTS, common, iterations, {}, {}) for a in alike]
    assert together == alone
    for a, apart in zip(alike, together, strict=True):
        if apart:
            for k in range(TRIPS - distance):
                later_values = _values(later, [k + distance])
                assert not np.intersect1d(_values(a.indices[0], [k]), later_values).size


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=300, deadline=None)
@given(
    group=st.lists(st.tuples(INDICES, st.booleans()), min_size=1, max_size=5),
    later=INDICES,
    distance=st.integers(0, TRIPS),
)
def test_what_is_proven_apart_together_may_conflict_denies(group, later, distance):
    """Earlier accesses in the loop or before it, of every signature: a True answer of
    ``proven_apart_together`` must be a False of ``may_conflict`` (asked pair by pair, the
    way the barrier pass asks when nothing is screened together), and a group of one
    access is left to ``may_conflict``."""
    b = _access(later, in_loop=True, kind=AccessKind.READ)
    earlier = []
    for index, in_loop in group:
        a = _access(index, in_loop=in_loop)
        relation = {K_LOOP: frozenset({distance})} if in_loop else {}
        positions = {} if in_loop else {K_LOOP: min(distance, FAR)}
        earlier.append(EarlierAccess(a, (in_loop, distance), relation, positions, {}))
    proven = proven_apart_together(b, earlier, EXTENTS)
    signatures = [(item.question, fix_signature(item.access)) for item in earlier]
    for item, apart, signature in zip(earlier, proven, signatures, strict=True):
        if apart:
            assert signatures.count(signature) > 1
            assert not may_conflict(
                item.access, b, EXTENTS, item.iterations, item.positions, item.finished
            )


def test_a_run_of_copies_into_the_next_stage_is_apart_from_reads_of_this_one():
    """Four copy chunks into stage ``k + 1`` of a double buffer (one signature) and a read
    of stage ``k`` in the same iteration: all four are kept apart at once; a chunk into
    stage ``k`` is not."""
    chunks = [
        tirx.floormod(K + 1, 2) * 256 + c * 64 + TX * 8 + TY for c in range(4)
    ]  # fmt: skip
    read = _access(tirx.floormod(K, 2) * 256 + TX * 8, in_loop=True, kind=AccessKind.READ)
    same_stage = tirx.floormod(K, 2) * 256 + TX * 8 + TY
    relation = {K_LOOP: frozenset({0})}
    copies = [_access(x, in_loop=True, kind=AccessKind.ASYNC_WRITE) for x in [*chunks, same_stage]]
    earlier = [EarlierAccess(copy, 0, relation, {}, {}) for copy in copies]
    assert proven_apart_together(read, earlier, EXTENTS) == [True, True, True, True, False]
