"""The compiled enumeration core against the NumPy path it replaces.

Random index expressions and conditions (arithmetic, floor and truncated division,
comparisons, logic, selects, bitwise operations and shifts, including zero divisors and
shift counts out of range) over two thread axes and a loop, with and without loop ties:
the points the compiled core groups are exactly the NumPy path's, and where the NumPy path
has no answer (a zero divisor) the core gives none either, so the pass falls back to it.
The core's own checks (malformed programs, buffers too small) and the build's failure
path are tested here too.
"""

from __future__ import annotations

import shutil
import warnings
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
import tvm
from enumeration_space import BUFFER, EXTENTS, K_RANGE, TX, TY, K
from hypothesis import given, settings
from tvm import tirx

from tilewave import native
from tilewave.analysis import index_enumeration
from tilewave.analysis.index_enumeration import _NotEnumerable, _Points, _side
from tilewave.analysis.index_program import Unsupported, compile_program
from tilewave.analysis.shared_access import AccessKind, AccessScope, SharedAccess
from tilewave.native.points import core, pack_programs

needs_compiler = pytest.mark.skipif(
    core() is None, reason="no C compiler: the compiled core is not built here"
)

LEAVES = st.sampled_from([TX, TY, K]) | st.integers(-4, 9).map(lambda v: tirx.IntImm("int32", v))
INT_OPS = [
    tirx.Add, tirx.Sub, tirx.Mul, tirx.floordiv, tirx.floormod, tirx.truncdiv, tirx.truncmod,
    tirx.min, tirx.max, tirx.bitwise_and, tirx.bitwise_or, tirx.bitwise_xor, tirx.shift_left,
    tirx.shift_right,
]  # fmt: skip
COMPARISONS = [tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE]


def _made(op: Any, *operands: Any) -> Any:
    """``op(*operands)``, or None where TVM's constant folding refuses it (a constant zero
    divisor or shift count out of range: InternalError; a folded constant outside int32:
    ValueError)."""
    try:
        return op(*operands)
    except (tvm.error.InternalError, ValueError):
        return None


def _apply(ops: list[Any], children: Any) -> Any:
    made = st.builds(_made, st.sampled_from(ops), children, children)
    return made.filter(lambda expr: expr is not None)


def _extend(children: Any) -> Any:
    booleans = _apply(COMPARISONS, children)
    return (
        _apply(INT_OPS, children)
        | st.builds(tirx.Select, booleans, children, children)
        | st.builds(tirx.if_then_else, booleans, children, children)
    )


INTEGERS = st.recursive(LEAVES, _extend, max_leaves=8)
BOOLEANS = st.recursive(
    _apply(COMPARISONS, INTEGERS),
    lambda children: st.builds(tirx.And, children, children)
    | st.builds(tirx.Or, children, children)
    | st.builds(tirx.Not, children),
    max_leaves=3,
)
CONDITIONS = BOOLEANS | INTEGERS.map(lambda e: tirx.Cast("bool", e))
INDICES = INTEGERS
CONDITION_LISTS = st.lists(CONDITIONS, max_size=2)


def _access(index: Any, conditions: list[Any]) -> SharedAccess:
    scope = AccessScope((K_RANGE,), tuple((c, True) for c in conditions))
    return SharedAccess(BUFFER, AccessKind.WRITE, (index,), None, scope.loops, scope)


def _outcome(side: Any, fixed: dict[Any, np.ndarray], ties: list[Any], native_on: bool) -> Any:
    """The grouped points (keys, lows, highs) or the exception type, one path forced."""
    saved = side._native
    if not native_on:
        side._native = None
    try:
        points = side._enumerate(fixed, ties, False)
        return points.keys.tolist(), points.lo.tolist(), points.hi.tolist()
    except (_NotEnumerable, ZeroDivisionError, FloatingPointError, TypeError) as err:
        return type(err)
    finally:
        side._native = saved


@needs_compiler
@pytest.mark.filterwarnings("ignore:Generating overly large repr")  # the expression strategies
@settings(deadline=None, max_examples=300)
@given(
    index=INDICES,
    conditions=CONDITION_LISTS,
    tied=st.booleans(),
    pinned=st.sampled_from([None, 0, 2]),
)
def test_compiled_points_are_the_numpy_points(index, conditions, tied, pinned):
    access = _access(index, conditions)
    try:
        side = _side(access, EXTENTS)
    except _NotEnumerable:
        return  # not enumerable by either path (the side is built before either runs)
    fixed = {} if pinned is None else {K: np.array([pinned], np.int64)}
    ties = [(K, 0, 3)] if tied and side.loops else []
    with np.errstate(all="ignore"):
        reference = _outcome(side, fixed, ties, native_on=False)
        compiled = _outcome(side, fixed, ties, native_on=True)
    assert compiled == reference, f"{access.describe()} if {conditions}: {compiled} != {reference}"


@needs_compiler
def test_a_zero_divisor_leaves_the_answer_to_the_numpy_path():
    side = _side(_access(tirx.floordiv(TX, TX - 3) + 32, []), EXTENTS)
    native_side = side.native()
    assert native_side is not None
    axes = [values for values in side.thread_values]
    assert native_side.points(axes, []) is None
    with pytest.raises(_NotEnumerable, match="division by zero"):
        side._enumerate({}, [], False)


@needs_compiler
def test_the_core_groups_lowest_and_highest_thread_per_key():
    # key tx // 4 over 8 threads: keys 0 and 1, threads 0-3 and 4-7
    side = _side(_access(tirx.floordiv(TX, 4) + 32, []), {TX: 8, TY: 1})
    points = side._enumerate({}, [], False)
    assert points.keys.tolist() == [32, 33]
    assert points.lo.tolist() == [0, 4]
    assert points.hi.tolist() == [3, 7]
    assert points.joined is not None, "made by the compiled core"


@needs_compiler
def test_the_compiled_overlap_is_the_numpy_overlap():
    rng = np.random.default_rng(7)
    points_core = core()
    for _ in range(200):
        sides = [_random_points(rng) for _ in range(2)]
        for ordered in (False, True):
            expected = _numpy_path(index_enumeration._overlap, *sides, ordered)
            got = points_core.overlap(*sides[0].words, *sides[1].words, ordered)
            assert got == expected


@needs_compiler
@settings(deadline=None, max_examples=200)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.tuples(st.integers(0, 9), st.integers(0, 9)))
def test_the_compiled_merge_is_the_numpy_merge(seed, sizes):
    """Merged point sets (the placer's runs of stores) are the NumPy path's, key for key,
    thread bounds included; either side may be empty or share every key."""
    rng = np.random.default_rng(seed)
    p, q = (_random_points(rng, size) for size in sizes)
    expected = _numpy_path(index_enumeration._merged_pair, p, q)
    got = index_enumeration._merged_pair(p, q)
    assert got.joined is not None, "made by the compiled core"
    for part in ("keys", "lo", "hi"):
        assert getattr(got, part).tolist() == getattr(expected, part).tolist(), part
    assert set(got.keys.tolist()) == set(p.keys.tolist()) | set(q.keys.tolist())


def _random_points(rng: np.random.Generator, size: int | None = None) -> _Points:
    """Distinct sorted keys (few values, so two sets share some), each with a thread range."""
    count = rng.integers(0, 8) if size is None else size
    keys = np.unique(rng.integers(0, 12, count)).astype(np.int64)
    lo = rng.integers(0, 4, len(keys)).astype(np.int64)
    return _Points(keys, lo, lo + rng.integers(0, 2, len(keys)))


def _numpy_path(function: Any, *args: Any) -> Any:
    """``function(*args)`` with the compiled core hidden from index_enumeration."""
    saved = index_enumeration.core
    index_enumeration.core = lambda: None
    try:
        return function(*args)
    finally:
        index_enumeration.core = saved


@needs_compiler
def test_malformed_programs_and_short_buffers_are_refused():
    points_core = core()
    ops = points_core.opcodes
    axes = [np.arange(4, dtype=np.int64)]
    unbalanced = pack_programs([[ops["const"], 1, ops["const"], 2]], [4])
    assert points_core.points(unbalanced, (1, 1), axes, []) == -3
    unknown_axis = pack_programs([[ops["var"], 5]], [4])
    assert points_core.points(unknown_axis, (1, 1), axes, []) == -3
    underflow = pack_programs([[ops["add"]]], [4])
    assert points_core.points(underflow, (1, 1), axes, []) == -3


def test_an_expression_without_a_program_is_unsupported():
    with pytest.raises(Unsupported, match="not an axis"):
        compile_program(TX + 1, {}, {"var": 1, "const": 0, "add": 2})
    with pytest.raises(Unsupported, match="two booleans"):
        ops = {name: i for i, name in enumerate(["const", "var", "add", "lt"])}
        compile_program(tirx.Add(TX < 1, TX < 2), {hash(TX): 0}, ops)


def test_a_failing_compiler_is_reported_and_the_numpy_path_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWAVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", shutil.which("false") or "false")
    with pytest.raises(native.NativeBuildError, match=r"failed on .*points\.c"):
        native.build("points")
    native.load.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert native.load("points") is None
        assert any("pure-Python path is used" in str(w.message) for w in caught)
    finally:
        native.load.cache_clear()


def test_compiled_cores_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TILEWAVE_NATIVE", "0")
    native.load.cache_clear()
    try:
        assert native.load("points") is None
    finally:
        native.load.cache_clear()


def test_an_unknown_source_is_an_error():
    with pytest.raises(native.NativeBuildError, match="no C source"):
        native.build("no_such_core")
