"""The period of an index in a loop variable (``index_enumeration.index_period``):
enumeration visits one iteration per residue of it, so a period that is not one would
drop addresses. Checked by evaluation, not by the analysis's own rules."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from enumeration_space import BUFFER, EXTENTS, TX, TY, K, arithmetic_indices
from hypothesis import given, settings
from tvm import tirx

from tilewave.analysis.index_enumeration import (
    _evaluate,
    _mentions,
    _operands,
    _period_and_mention,
    _side,
    index_period,
)
from tilewave.analysis.interval_bounds import interval_tree
from tilewave.analysis.shared_access import (
    AccessKind,
    AccessScope,
    LoopRange,
    SharedAccess,
    may_conflict,
)
from tilewave.analysis.tree_period import tree_period

LEAVES = st.sampled_from([TX, TY, K]) | st.integers(-3, 9).map(lambda v: tirx.IntImm("int32", v))
MODULI = st.integers(1, 12).map(lambda v: tirx.IntImm("int32", v))
MASKS = st.sampled_from([1, 3, 7, 15]).map(lambda v: tirx.IntImm("int32", v))


def _extend(children: Any) -> Any:
    pairs = st.tuples(children, children)
    return (
        arithmetic_indices(children, MODULI)
        | st.builds(tirx.bitwise_and, children, MASKS)
        | st.builds(lambda p: tirx.Select(p[0] < p[1], p[0], p[1]), pairs)
    )


#: indices mixing the loop variable ``k`` with the threads through sums, products,
#: moduli, masks, divisions and xors (the shapes of swizzled and multibuffered indices)
INDICES = st.recursive(LEAVES, _extend, max_leaves=8)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=300, deadline=None)
@given(index=INDICES)
def test_a_period_repeats_the_index_and_an_unmentioned_variable_has_period_one(index):
    period = index_period(index, K)
    if not _mentions(index, K):
        assert period == 1
        return
    if period is None:
        return  # not periodic (or not known to be): enumeration visits every iteration
    assert period >= 1
    k = np.arange(0, 3 * period + 5, dtype=np.int64)
    grid = np.meshgrid(np.arange(8), np.arange(2), k, indexing="ij", sparse=True)
    later = np.meshgrid(np.arange(8), np.arange(2), k + period, indexing="ij", sparse=True)
    now_values = _evaluate(index, dict(zip((TX, TY, K), grid, strict=True)))
    later_values = _evaluate(index, dict(zip((TX, TY, K), later, strict=True)))
    shape = (8, 2, len(k))
    assert np.array_equal(np.broadcast_to(now_values, shape), np.broadcast_to(later_values, shape))


def _with_masks_and_scales(children: Any) -> Any:
    constants = st.integers(-3, 9).map(lambda v: tirx.IntImm("int32", v))
    return (
        _extend(children)
        | st.builds(tirx.bitwise_and, children, constants)  # masks and non-masks
        | st.builds(tirx.Mul, children, constants)
        | st.builds(tirx.Mul, constants, children)
    )


#: :data:`INDICES` with any constant as a mask and constant factors on either side
SCALED_INDICES = st.recursive(LEAVES, _with_masks_and_scales, max_leaves=8)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=500, deadline=None)
@given(index=SCALED_INDICES, var=st.sampled_from([TX, K]))
def test_the_period_read_from_a_complete_interval_tree_is_the_one_read_from_the_tir(index, var):
    """The loop-fixed screen reads periods from its interval trees: where a tree is
    complete it must give exactly ``index_period``'s answer (and whether the index
    mentions the variable); where it is not, it defers (``None``)."""
    found = tree_period(interval_tree(index), hash(var))
    if found is not None:
        assert found == _period_and_mention(index, var)


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (tirx.floormod(K, 4) * 64 + TX, 4),
        (tirx.floormod(K * 2 + TX, 8), 4),
        (tirx.bitwise_and(K + TY, tirx.IntImm("int32", 3)) + tirx.floormod(K, 3), 12),
        (TX * 32 + TY, 1),
        (K * 64 + TX, None),
        (tirx.floormod(K, 4) + tirx.floordiv(K, 2), None),
    ],
)
def test_periods_of_multibuffered_and_swizzled_indices(index, expected):
    assert index_period(index, K) == expected
    # (these indices' interval trees are complete: the screen reads the same period)
    found = tree_period(interval_tree(index), hash(K))
    assert found is not None and found[0] == expected


def test_two_loops_without_a_for_statement_keep_their_own_ranges():
    """Loops known by variable only (a copied-element range, a unit spread, a ``For``
    met at two places) are told apart by variable: a side with two of them enumerates
    each over its own range (they once shared one cache entry, so the second loop took
    the first one's values and the 16 copied elements looked like 4)."""
    rows = LoopRange(tirx.Var("row", "int32"), 0, 2)
    lanes = LoopRange(tirx.Var("lane", "int32"), 0, 8)
    scope = AccessScope((rows, lanes))
    index = tirx.floormod(rows.var, 2) * 8 + tirx.floormod(lanes.var, 8)  # periodic in both
    copy = SharedAccess(BUFFER, AccessKind.WRITE, (index,), None, scope.loops, scope)
    read = SharedAccess(BUFFER, AccessKind.READ, (TX + 5,), None, (), AccessScope())
    side = _side(copy, EXTENTS)
    points = side._enumerate({}, [], False)
    assert sorted(set(points.keys.tolist())) == list(range(16))
    # thread 0's read of element 5 meets every thread's copy of it
    assert may_conflict(copy, read, EXTENTS) is True


@pytest.mark.parametrize(
    ("make", "count"),
    [
        (lambda: tirx.Add(TX, K), 2),
        (lambda: tirx.FloorMod(TX, tirx.IntImm("int32", 4)), 2),
        (lambda: TX == K, 2),  # the Python-side comparison wrapper, read per object
        (lambda: tirx.Cast("int64", TX), 1),
        (lambda: tirx.Not(TX < K), 1),
        (lambda: tirx.Select(TX < K, TX, K), 3),
        (lambda: tirx.bitwise_xor(TX, K), 2),
        (lambda: TX, None),
        (lambda: tirx.IntImm("int32", 7), None),
    ],
)
def test_operands_are_read_by_node_class(make, count):
    # twice: the second read comes from the per-class table the first one filled
    for _ in range(2):
        found = _operands(make())
        assert (None if found is None else len(found)) == count
