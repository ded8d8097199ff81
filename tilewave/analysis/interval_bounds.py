"""Integer interval bounds of index expressions, and disjointness by them.

The cheapest proof that two shared accesses never touch a common element is an index
dimension whose value ranges do not meet. :mod:`tilewave.analysis.shared_access` asks it
once per access pair with every loop variable free. :func:`apart_with_loops_fixed` asks it
again for one question of the barrier pass or the verifier, with the loops that question
relates set to their values: a loop both accesses run in at a known iteration distance, a
loop the later access entered a known number of iterations ago, a loop the earlier one
left a known number of iterations before its end. A ring buffer's stage offsets,
``(k + 2) % 3 * 4096`` against ``k % 3 * 4096`` one iteration apart, then become
constants, and the pair is decided without enumerating its threads.

Expressions are read once into plain tuples (:func:`interval_tree`) so that evaluating
them again under other variable ranges does not go back through the FFI.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tvm import ir, tirx

from tilewave.analysis.index_enumeration import ANY, FAR, index_period
from tilewave.analysis.index_program import BINARY_OPERATIONS, bitwise_parts
from tilewave.analysis.tree_period import IntervalTree, tree_period
from tilewave.kernel_memory import kernel_table, node_fact, remember

if TYPE_CHECKING:
    from tilewave.analysis.access_model import LoopRange, SharedAccess

__all__ = [
    "Bounds",
    "apart_with_loops_fixed",
    "apart_with_loops_fixed_each",
    "fix_signature",
    "index_bounds",
    "interval_of",
    "interval_tree",
    "variable_ranges",
]

#: inclusive ``(low, high)``
Bounds = tuple[int, int]



def interval_tree(expr: Any) -> IntervalTree:
    """``expr`` as nested tuples for :func:`interval_of` (variables by handle); a compound
    node's tree is remembered per node (the indices of a kernel's accesses share the
    values of its ``Bind`` temporaries: one node read once, however many indices hold it)."""
    kind = type(expr)
    if kind is tirx.IntImm:
        return ("c", int(expr.value))
    if isinstance(expr, ir.expr.Var):
        return ("v", hash(expr))
    return node_fact(_TREES, expr, _compound_tree, _TREES_LIMIT)


#: interval trees of compound nodes by node handle, with the node
_TREES: dict[int, tuple[IntervalTree, Any]] = kernel_table()
_TREES_LIMIT = 100_000


def _compound_tree(expr: Any) -> IntervalTree:
    kind = type(expr)
    if kind is tirx.Cast:
        return ("cast", interval_tree(expr.value))
    name = BINARY_OPERATIONS.get(kind)
    if name is not None:
        if name not in _COMBINE:  # (truncating division, comparisons: not bounded here)
            return None
        return (name, interval_tree(expr.a), interval_tree(expr.b))
    bitwise = bitwise_parts(expr)
    if bitwise is not None:
        operation, a, b = bitwise
        return (operation, interval_tree(a), interval_tree(b))
    return None


def interval_of(tree: IntervalTree, ranges: Mapping[int, Bounds]) -> Bounds | None:
    """Inclusive bounds of ``tree`` given inclusive bounds of its variables (keyed by
    handle); ``None`` when some part is unbounded or unknown."""
    if tree is None:
        return None
    op = tree[0]
    if op == "c":
        return tree[1], tree[1]
    if op == "k":
        return tree[1], tree[2]
    if op == "v":
        return ranges.get(tree[1])
    a = interval_of(tree[1], ranges)
    if a is None or op == "cast":
        return a
    b = interval_of(tree[2], ranges)
    if b is None:
        return None
    return _COMBINE[op](a, b)


def _reduced(
    tree: IntervalTree, ranges: Mapping[int, Bounds], kept: frozenset[int]
) -> IntervalTree:
    """``tree`` with every part that reads none of the variables ``kept`` replaced by its
    bounds under ``ranges`` (so evaluating it again for values of ``kept`` is short)."""
    if tree is None or tree[0] in ("c", "k"):
        return tree
    if tree[0] == "v":
        if tree[1] in kept:
            return tree
        bounds = ranges.get(tree[1])
        return None if bounds is None else ("k", *bounds)
    # (remembered per compound tree, by what the answer reads of ``kept`` and ``ranges``:
    # the kept variables the tree shows and the ranges of the others; the trees of a
    # kernel's indices share their Bind values' subtrees)
    reads = _handles(tree)
    key = (id(tree), reads & kept, tuple(ranges.get(h) for h in _ordered(reads) if h not in kept))
    found = _REDUCED.get(key)
    if found is None:
        # (the tree kept alive with its answer: its id cannot come to name another)
        found = remember(_REDUCED, key, (_reduced_compound(tree, ranges, kept), tree), _TREES_LIMIT)
    return found[0]


#: _reduced's answers of compound trees (see there), with the tree
_REDUCED: dict[tuple[Any, ...], tuple[IntervalTree, Any]] = kernel_table()


def _reduced_compound(
    tree: tuple[Any, ...], ranges: Mapping[int, Bounds], kept: frozenset[int]
) -> IntervalTree:
    children = [_reduced(child, ranges, kept) for child in tree[1:]]
    if any(child is None for child in children):
        return None
    reduced = (tree[0], *children)
    if all(child[0] in ("c", "k") for child in children if child is not None):
        bounds = interval_of(reduced, ranges)
        return None if bounds is None else ("k", *bounds)
    return _merge_known_terms(reduced)


def _ordered(handles: frozenset[int]) -> tuple[int, ...]:
    """``handles`` sorted, remembered per set (the sets come from :func:`_handles`)."""
    found = _ORDERED.get(id(handles))
    if found is None or found[1] is not handles:
        found = remember(_ORDERED, id(handles), (tuple(sorted(handles)), handles), _TREES_LIMIT)
    return found[0]


#: _ordered's answers by set id, with the set
_ORDERED: dict[int, tuple[tuple[int, ...], frozenset[int]]] = kernel_table()


def _merge_known_terms(tree: tuple[Any, ...]) -> tuple[Any, ...]:
    """``(x + k1) + k2`` as ``x + (k1 + k2)`` for bounded ``k1``, ``k2`` (sums of interval
    bounds are exact, so the bounds do not change; a long sum keeps one node)."""
    if tree[0] != "add":
        return tree
    left, right = tree[1], tree[2]
    if left[0] in ("c", "k"):
        left, right = right, left
    if right[0] in ("c", "k") and left[0] == "add":
        for inner, known in ((left[1], left[2]), (left[2], left[1])):
            if known[0] in ("c", "k"):
                total = interval_of(("add", known, right), {})
                if total is not None:
                    return ("add", inner, ("k", *total))
    return tree


def _product(a: Bounds, b: Bounds) -> Bounds:
    products = [x * y for x in a for y in b]
    return min(products), max(products)


def _floordiv(a: Bounds, b: Bounds) -> Bounds | None:
    if b[0] != b[1] or b[0] <= 0:
        return None
    return a[0] // b[0], a[1] // b[0]


def _floormod(a: Bounds, b: Bounds) -> Bounds | None:
    if b[0] != b[1] or b[0] <= 0:
        return None
    if a[0] // b[0] == a[1] // b[0]:  # one period: no wrap-around
        return a[0] % b[0], a[1] % b[0]
    return 0, b[0] - 1


def _shift(left: bool) -> Callable[[Bounds, Bounds], Bounds | None]:
    # a shift by a constant is floor division / multiplication by a power of two: monotone
    # in the shifted value, whatever its sign (`row >> 1 & 3` in swizzles)
    def combine(a: Bounds, b: Bounds) -> Bounds | None:
        if b[0] != b[1] or not 0 <= b[0] < 32:
            return None
        if left:
            return a[0] << b[0], a[1] << b[0]
        return a[0] >> b[0], a[1] >> b[0]

    return combine


def _bitwise(is_and: bool) -> Callable[[Bounds, Bounds], Bounds | None]:
    # non-negative operands: `&` stays below both, `|` and `^` below the next power of 2
    # (XOR-swizzled tile indices, `(c ^ row % 8) * 4`)
    def combine(a: Bounds, b: Bounds) -> Bounds | None:
        if min(a[0], b[0]) < 0:
            return None
        if is_and:
            return 0, min(a[1], b[1])
        return 0, (1 << max(a[1], b[1]).bit_length()) - 1

    return combine


_COMBINE: dict[str, Callable[[Bounds, Bounds], Bounds | None]] = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": _product,
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "floordiv": _floordiv,
    "floormod": _floormod,
    "shl": _shift(left=True),
    "shr": _shift(left=False),
    "bitand": _bitwise(is_and=True),
    "bitor": _bitwise(is_and=False),
    "bitxor": _bitwise(is_and=False),
}


def variable_ranges(access: SharedAccess, thread_extents: Mapping[Any, int]) -> dict[int, Bounds]:
    """Bounds of the variables ``access``'s indices may use, by handle: thread indices of
    known extent and the enclosing loops with constant bounds."""
    ranges: dict[int, Bounds] = {}
    for var, ext in thread_extents.items():
        if ext > 0:
            ranges[hash(var)] = (0, ext - 1)
    for loop in access.loops:
        if loop.min is not None and loop.extent is not None and loop.extent > 0:
            ranges[hash(loop.var)] = (loop.min, loop.min + loop.extent - 1)
    return ranges


#: at most this many combinations of fixed loop values are tried per question
MAX_COMBINATIONS = 64
#: a loop whose index period is unknown is fixed only when it has this few iterations
_MAX_UNPERIODIC_VALUES = 8

#: one way to fix the loops: ranges for some of ``a``'s variables and of ``b``'s (by handle)
_Fix = tuple[tuple[tuple[int, Bounds], ...], tuple[tuple[int, Bounds], ...]]


class _Shape:
    """What the screen remembers of one footprint (equal footprints are one object, and
    accesses of many statements share one): its index trees, the variables they read, its
    periods per loop variable, and its bounds under fixed loop values."""

    def __init__(self, access: SharedAccess) -> None:
        self.trees = tuple(interval_tree(x) for x in access.resolved_indices or ())
        self.reads = frozenset().union(*map(_handles, self.trees))
        self.periods: dict[int, int | None] = {}
        #: reduced trees by (thread extents, kept variables); bounds by (extents, fixes)
        self.memo: dict[Any, tuple[Any, ...]] = {}


def _shape(access: SharedAccess) -> _Shape:
    footprint = access.footprint
    memo = footprint.memo if footprint is not None else access.memo  # (through a pointer)
    shape = memo.get("interval_shape")
    if shape is None:
        shape = memo["interval_shape"] = _Shape(access)
    return shape


def _handles(tree: IntervalTree) -> frozenset[int]:
    """Handles of the variables ``tree`` shows (none under an unknown part); remembered
    per compound tree (the trees of a kernel's indices share their Bind values' subtrees)."""
    if tree is None or tree[0] in ("c", "k"):
        return frozenset()
    if tree[0] == "v":
        return frozenset((tree[1],))
    key = id(tree)
    found = _READS.get(key)
    if found is None:
        reads = frozenset().union(*map(_handles, tree[1:]))
        # (the tree kept alive with its answer: its id cannot come to name another)
        found = remember(_READS, key, (reads, tree), _TREES_LIMIT)
    return found[0]


#: _handles' answers of compound trees by tree id, with the tree
_READS: dict[int, tuple[frozenset[int], Any]] = kernel_table()


def _bounds_with(
    access: SharedAccess,
    extents_key: tuple[tuple[int, int], ...],
    thread_extents: Mapping[Any, int],
    fixed: tuple[tuple[int, Bounds], ...],
) -> tuple[Bounds | None, ...]:
    """Bounds of each index of ``access`` with the variables ``fixed`` set to their ranges.

    Remembered per footprint: one access meets many others at the same few loop values.
    The index trees are first reduced to what reads the fixed variables (the rest bounded
    once).
    """
    shape = _shape(access)
    memo = shape.memo
    found = memo.get((extents_key, fixed))
    if found is None and not fixed:
        # nothing kept: reducing would bound every part, which evaluating does directly
        ranges = variable_ranges(access, thread_extents)
        found = memo[(extents_key, fixed)] = tuple(interval_of(t, ranges) for t in shape.trees)
    if found is None:
        kept = frozenset(handle for handle, _ in fixed)
        reduced_key = (extents_key, kept)
        trees = memo.get(reduced_key)
        if trees is None:
            ranges = variable_ranges(access, thread_extents)
            trees = memo[reduced_key] = tuple(_reduced(t, ranges, kept) for t in shape.trees)
        values = dict(fixed)
        found = memo[(extents_key, fixed)] = tuple(interval_of(t, values) for t in trees)
    return found


def index_bounds(
    access: SharedAccess, thread_extents: Mapping[Any, int]
) -> tuple[Bounds | None, ...]:
    """Bounds of each index of ``access`` with every thread and loop variable over its
    whole range (``None`` for a dimension with an unbounded or unknown part); remembered
    per footprint, with the trees the loop-fixed screen uses."""
    return _bounds_with(access, _extents_key(thread_extents), thread_extents, ())


def _extents_key(thread_extents: Mapping[Any, int]) -> tuple[tuple[int, int], ...]:
    return tuple((hash(v), e) for v, e in thread_extents.items())


def _access_period(access: SharedAccess, var: Any) -> int | None:
    """A period in ``var`` of every index of ``access`` (None: not periodic); read from
    the index trees where they are complete (:func:`tree_period`), else from the TIR."""
    shape = _shape(access)
    periods = shape.periods
    key = hash(var)
    if key not in periods:
        period: int | None = 1
        for index, tree in zip(access.resolved_indices or (), shape.trees, strict=True):
            found = tree_period(tree, key)
            part = index_period(index, var) if found is None else found[0]
            if part is None:
                period = None
                break
            period = math.lcm(period, part)
        periods[key] = period
    return periods[key]


def _has_constant_bounds(loop: LoopRange) -> bool:
    return loop.min is not None and loop.extent is not None and loop.step is not None


def _tied_fixes(
    a: SharedAccess, b: SharedAccess, la: LoopRange, lb: LoopRange, distances: Iterable[int]
) -> Sequence[_Fix] | None:
    """Value pairs of a loop both accesses run in, ``b`` exactly ``d`` iterations after
    ``a`` for each ``d`` in ``distances``: every iteration, or one per residue of the
    indices' period. None when the loop cannot be fixed (the caller leaves it free)."""
    if not _has_constant_bounds(la) or la.step == 0:
        return None
    pa, pb = _access_period(a, la.var), _access_period(b, lb.var)
    period = None if pa is None or pb is None else math.lcm(pa, pb)
    return _tied_value_fixes(
        hash(la.var), hash(lb.var), int(la.min), int(la.extent), int(la.step), period,
        tuple(distances),
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _tied_value_fixes(
    ha: int,
    hb: int,
    start: int,
    extent: int,
    step: int,
    period: int | None,
    distances: tuple[int, ...],
) -> tuple[_Fix, ...] | None:
    """:func:`_tied_fixes` from plain values (remembered: the accesses of one loop body
    meet each other at the same few distances, with the same periods)."""
    pairs: list[tuple[int, int]] = []
    for d in distances:
        count = extent - d  # iterations i of a with an iteration i + d of b
        if period is not None:
            count = min(count, period // math.gcd(period, abs(step)))
        elif count > _MAX_UNPERIODIC_VALUES:
            return None
        pairs += [(start + i * step, start + (i + d) * step) for i in range(max(count, 0))]
    return tuple((((ha, (va, va)),), ((hb, (vb, vb)),)) for va, vb in pairs)


def _one_side_fix(loop: LoopRange, iteration: int, *, of_b: bool) -> list[_Fix] | None:
    """Fixes for a loop only one access runs in: iteration ``iteration`` (counted from the
    start for ``b``'s loops, from the end for ``a``'s), or ``FAR`` and beyond."""
    if not _has_constant_bounds(loop) or iteration > FAR or iteration >= int(loop.extent):
        return None
    first, step = int(loop.min), int(loop.step)
    last = first + (int(loop.extent) - 1) * step
    if iteration < FAR:
        value = first + iteration * step if of_b else last - iteration * step
        bounds: Bounds = (value, value)
    elif step > 0:  # FAR or more iterations in
        bounds = (first + FAR * step, last) if of_b else (first, last - FAR * step)
    else:
        return None
    update = ((hash(loop.var), bounds),)
    return [((), update)] if of_b else [(update, ())]


def _loop_fixes(
    a: SharedAccess,
    b: SharedAccess,
    common: Sequence[tuple[LoopRange, LoopRange]],
    iterations: Mapping[Any, frozenset[int]],
    positions: Mapping[Any, int],
    finished: Mapping[Any, int],
) -> list[Sequence[_Fix]]:
    """Per relating loop whose variable an index reads, the alternative fixes that
    together cover every pair the question allows (a loop no index reads changes no
    bound, so it is left free)."""
    reads_a, reads_b = _shape(a).reads, _shape(b).reads
    per_loop: list[Sequence[_Fix]] = []
    for la, lb in common:
        if hash(la.var) not in reads_a and hash(lb.var) not in reads_b:
            continue
        distances = iterations.get(la.loop, frozenset({ANY}))
        if distances and all(0 <= d < FAR for d in distances):
            fixes = _tied_fixes(a, b, la, lb, sorted(distances))
            if fixes is not None:
                per_loop.append(fixes)

    def only_in(loops: Sequence[LoopRange], reads: frozenset[int], other: Any) -> Iterator[Any]:
        for lp in loops:
            if hash(lp.var) in reads and lp.loop is not None:
                if not any(o.loop is not None and o.loop.same_as(lp.loop) for o in other):
                    yield lp

    for lb in only_in(b.loops, reads_b, a.loops):
        fix = _one_side_fix(lb, positions.get(lb.loop, ANY), of_b=True)
        if fix is not None:
            per_loop.append(fix)
    for la in only_in(a.loops, reads_a, b.loops):
        fix = _one_side_fix(la, finished.get(la.loop, ANY), of_b=False)
        if fix is not None:
            per_loop.append(fix)
    return per_loop


def apart_with_loops_fixed(
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    common: Sequence[tuple[LoopRange, LoopRange]],
    iterations: Mapping[Any, frozenset[int]],
    positions: Mapping[Any, int],
    finished: Mapping[Any, int],
) -> bool:
    """True when, for every way the question lets the relating loops run, some index
    dimension of ``a`` and ``b`` has value ranges that do not meet (so no thread of one
    touches an element of the other). False: not shown (no loop is fixed, a dimension is
    unbounded, too many combinations, or the ranges meet).

    ``common``: the aligned loops around both
    (:func:`~tilewave.analysis.region_proof.common_loops`); ``iterations``: their possible
    distances, keyed by ``For``; ``positions`` /
    ``finished``: as for :func:`~tilewave.analysis.region_proof.prove_no_overlap`. Path
    conditions are ignored (a superset of the pairs), which keeps the answer sound.
    """
    return apart_with_loops_fixed_each(
        [a], b, thread_extents, common, iterations, positions, finished
    )[0]


def fix_signature(access: SharedAccess) -> tuple[Any, ...]:
    """What the loop fixes of :func:`apart_with_loops_fixed` read of ``access`` as its
    earlier access, for one later access and question: per loop around it, that loop's
    range object, whether an index reads its variable, and the indices' period in it
    (``None`` for a loop with no ``For``: the fixes skip those, wherever they sit). Earlier
    accesses with equal signatures get the same fixes (the loop ranges are compared by
    identity: callers compare signatures of live accesses only). Remembered per access."""
    found = access.memo.get("fix_signature")
    if found is None:
        shape = _shape(access)
        found = access.memo["fix_signature"] = tuple(
            None
            if lp.loop is None
            else (id(lp), hash(lp.var) in shape.reads, _access_period(access, lp.var))
            for lp in access.loops
        )
    return found


def apart_with_loops_fixed_each(
    group: Sequence[SharedAccess],
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    common: Sequence[tuple[LoopRange, LoopRange]],
    iterations: Mapping[Any, frozenset[int]],
    positions: Mapping[Any, int],
    finished: Mapping[Any, int],
) -> list[bool]:
    """:func:`apart_with_loops_fixed` of each access of ``group`` with ``b``, for earlier
    accesses with one :func:`fix_signature` (``common`` and the question are those of
    ``group[0]``, and so of each): the loops are fixed once for all of them, and each
    combination of fixed values bounds ``b`` once."""
    out = [False] * len(group)
    if b.resolved_indices is None:
        return out
    live = [i for i, a in enumerate(group) if a.resolved_indices is not None]
    if not live:
        return out
    per_loop = _loop_fixes(group[live[0]], b, common, iterations, positions, finished)
    if not per_loop or math.prod(len(fixes) for fixes in per_loop) > MAX_COMBINATIONS:
        return out
    if not all(per_loop):  # a loop leaves no iteration pair: the accesses never meet
        for i in live:
            out[i] = True
        return out
    extents_key = _extents_key(thread_extents)
    # (the loop below runs for every combination of every question: `_bounds_with`'s
    # remembered bounds are looked up here directly, and the dimensions compared inline)
    memo_b = _shape(b).memo
    memos = [_shape(group[i]).memo for i in live]
    for combo in itertools.product(*per_loop):
        if len(combo) == 1:  # one loop fixed (the usual case): its fixes are one item each
            fixed_a, fixed_b = combo[0]
        else:
            fixed_a = tuple(sorted(item for fix_a, _ in combo for item in fix_a))
            fixed_b = tuple(sorted(item for _, fix_b in combo for item in fix_b))
        bounds_b = memo_b.get((extents_key, fixed_b))
        if bounds_b is None:
            bounds_b = _bounds_with(b, extents_key, thread_extents, fixed_b)
        still: list[int] = []  # (the accesses this combination keeps apart too)
        still_memos: list[dict[Any, tuple[Any, ...]]] = []
        for i, memo_a in zip(live, memos, strict=True):
            bounds_a = memo_a.get((extents_key, fixed_a))
            if bounds_a is None:
                bounds_a = _bounds_with(group[i], extents_key, thread_extents, fixed_a)
            for x, y in zip(bounds_a, bounds_b, strict=True):
                if x is not None and y is not None and (x[1] < y[0] or y[1] < x[0]):
                    still.append(i)  # this dimension keeps them apart
                    still_memos.append(memo_a)
                    break
        if not still:
            return out
        live, memos = still, still_memos
    for i in live:
        out[i] = True
    return out
