"""Exact disjointness of two shared accesses by enumerating their index spaces.

The arithmetic analyzer behind :mod:`tilewave.analysis.region_proof` cannot reason about
XOR swizzles (``chunk ^ ((row >> 1) & 3)``), masks of loop counters and similar bit
arithmetic that every fast tensor-core kernel uses. When every variable of both accesses
ranges over a known finite set — thread indices, loops with constant bounds, the bytes of
a copy — the question "may two different threads touch one element?" is decided exactly
by evaluating both index expressions over those sets with NumPy and intersecting the
resulting addresses.

The two accesses' loops are related as the caller says (``d`` iterations later for ``d``
below FAR, FAR or more later, unrelated; a loop entered after ``a`` at a known iteration; a loop
``a`` ran in that has since exited). For each assignment of the shared loop variables
("context") the addresses of ``a`` and of ``b`` are computed with the thread that makes
them; a conflict is an address both touch from two different threads (from any threads
when their own order does not count, as for async copies).

Anything not enumerable (a symbolic bound, a parameter or block index in an index, a
load, an unknown call, too many points) gives ``None``: no answer, the caller stays
conservative.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import tvm_ffi
from tvm import ir, tirx

from tilewave.analysis.footprint import FootprintCache
from tilewave.analysis.index_program import (
    BINARY_OPERATIONS,
    Unsupported,
    bitwise_parts,
    compile_program,
)
from tilewave.arrays import distinct
from tilewave.cached_attribute import cached_attribute
from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import ffi_list, kind_by_class, node_is
from tilewave.native.points import PointsCore, core, pack_programs

if TYPE_CHECKING:
    from tilewave.analysis.access_model import LoopRange, SharedAccess

__all__ = [
    "ANY",
    "FAR",
    "MergedPoints",
    "enumerate_no_overlap",
    "index_period",
    "node_period",
    "small_spaces_overlap",
    "whole_space_points",
]

#: an operand of a modulus, however the expression is read
_X = TypeVar("_X")

#: the most index points (both accesses, all contexts) one question may evaluate
MAX_POINTS = 1 << 21
#: points per side when the full spaces are too large and a witness of overlap is sought
#: in their first values (a common element there is a common element of the whole). Spaces
#: larger than SAMPLE_POINTS are first cut to SMALL_SAMPLE_POINTS (two tiles of one stage
#: usually meet at its first element), then to SAMPLE_POINTS; smaller ones are taken whole
SAMPLE_POINTS = 1 << 14
SMALL_SAMPLE_POINTS = 1 << 9
#: the sizes asked in turn (None: the whole spaces)
_SAMPLE_LEVELS = (SMALL_SAMPLE_POINTS, SAMPLE_POINTS, None)
#: shared loops related by "FAR or more iterations apart" are enumerated as pairs up to
#: this trip count; longer ones are treated as unrelated (sound, less precise)
MAX_PAIR_TRIPS = 16
#: addresses are below this (element offsets into one buffer)
_ADDRESS_SPAN = 1 << 24
#: iteration distances: ``0 <= d < FAR`` exactly ``d`` iterations apart; :data:`FAR`: that
#: many or more; :data:`ANY`: unknown (a new instance of the loop: independent variables).
#: FAR bounds the stages of a pipeline whose waits are counted exactly: a copy read
#: ``stages - 1`` iterations after its issue is told apart from the younger ones
FAR = 4
ANY = FAR + 1


class _NotEnumerable(Exception):
    pass


#: NumPy's function for each operation of :mod:`tilewave.analysis.index_program`'s tables
#: (truncated division and modulus are computed from ``_truncdiv``)
_NUMPY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    "min": np.minimum,
    "max": np.maximum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "bitand": np.bitwise_and,
    "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor,
    "shl": np.left_shift,
    "shr": np.right_shift,
}
_DIVISIONS = frozenset({"floordiv", "floormod", "truncdiv", "truncmod"})


def _truncdiv(x: Any, y: Any) -> Any:
    return np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))


def _evaluate(expr: Any, env: Mapping[Any, Any]) -> Any:
    """``expr`` over NumPy arrays of variable values (broadcasting)."""
    if isinstance(expr, tirx.IntImm):
        return np.int64(expr.value)
    if isinstance(expr, ir.expr.Var):
        for var, value in env.items():
            if var.same_as(expr):
                return value
        raise _NotEnumerable(str(expr))
    if isinstance(expr, tirx.Cast):
        return _evaluate(expr.value, env)
    bitwise = bitwise_parts(expr)
    if bitwise is not None:
        operation, a_expr, b_expr = bitwise
        return _NUMPY[operation](_evaluate(a_expr, env), _evaluate(b_expr, env))
    name = BINARY_OPERATIONS.get(type(expr))
    if name is not None:
        a, b = _evaluate(expr.a, env), _evaluate(expr.b, env)
        if name in _DIVISIONS and np.any(np.asarray(b) == 0):
            raise _NotEnumerable("division by zero")
        if name in ("truncdiv", "truncmod"):
            q = _truncdiv(a, b)
            return q if name == "truncdiv" else a - q * b
        return _NUMPY[name](a, b)
    if isinstance(expr, tirx.Not):
        return np.logical_not(_evaluate(expr.a, env))
    if isinstance(expr, tirx.Select):
        cond = _evaluate(expr.condition, env)
        return np.where(cond, _evaluate(expr.true_value, env), _evaluate(expr.false_value, env))
    if isinstance(expr, ir.expr.Call) and isinstance(expr.op, ir.Op):
        name = op_name(expr.op)
        if name == "tirx.if_then_else" and len(expr.args) == 3:
            cond = _evaluate(expr.args[0], env)
            return np.where(cond, _evaluate(expr.args[1], env), _evaluate(expr.args[2], env))
    raise _NotEnumerable(type(expr).__name__)


def _values(loop: LoopRange) -> np.ndarray:
    """The loop variable's values (read-only: shared between callers)."""
    if loop.min is None or loop.extent is None or loop.step is None or loop.extent <= 0:
        raise _NotEnumerable(f"loop {loop.var} without constant bounds")
    return _range_values(loop.min, loop.extent, loop.step)


@functools.lru_cache(maxsize=4096)
def _range_values(start: int, count: int, step: int) -> np.ndarray:
    values = start + np.arange(count, dtype=np.int64) * step
    values.flags.writeable = False
    return values


def _flat(access: SharedAccess) -> Any:
    return _flattened(access.resolved_indices, _constant_shape(access))


def _flattened(indices: Any, shape: list[int]) -> Any:
    """One index over a buffer of ``shape`` (row-major) standing for ``indices``."""
    flat: Any = None
    for idx, ext in zip(indices, shape, strict=True):
        flat = idx if flat is None else flat * ext + idx
    return flat


def _constant_shape(access: SharedAccess) -> list[int]:
    shape = ffi_list(access.buffer.ty.shape)
    if any(type(e) is not tirx.IntImm for e in shape):  # (TIR classes have no subclasses)
        raise _NotEnumerable("symbolic buffer shape")
    return [int(e.value) for e in shape]


def _peeled_flat(access: SharedAccess) -> tuple[Any, int]:
    """The flattened index of ``access`` as ``base + offset``: constant terms added or
    subtracted at the top of an index (``... + 256``, ``... - 2048`` of an unrolled store)
    are summed into ``offset``, times the index's stride; ``base`` flattens what is left."""
    shape = _constant_shape(access)
    bases: list[Any] = []
    offset = 0
    for idx, ext in zip(access.resolved_indices, shape, strict=True):
        base, term = _peeled(idx)
        bases.append(base)
        offset = offset * ext + term
    return _flattened(bases, shape), offset


def _peeled(idx: Any) -> tuple[Any, int]:
    """``idx`` as ``rest + term``, the constants added or subtracted at its top summed."""
    term = 0
    while True:
        kind = type(idx)
        if kind is tirx.Add and type(idx.b) is tirx.IntImm:
            term += int(idx.b.value)
            idx = idx.a
        elif kind is tirx.Add and type(idx.a) is tirx.IntImm:
            term += int(idx.a.value)
            idx = idx.b
        elif kind is tirx.Sub and type(idx.b) is tirx.IntImm:
            term -= int(idx.b.value)
            idx = idx.a
        else:
            return idx, term


def _free_vars(exprs: list[Any]) -> list[Any]:
    found: list[Any] = []
    for expr in exprs:
        for var in tirx.analysis.undefined_vars(expr, []):
            if not any(var.same_as(v) for v in found):
                found.append(var)
    return found


def _affine_coefficient(expr: Any, var: Any) -> int | None:
    """``c`` when ``expr`` is ``c * var + (terms without var)``; ``None`` otherwise."""
    if isinstance(expr, ir.expr.Var):
        return 1 if expr.same_as(var) else 0
    if isinstance(expr, tirx.IntImm):
        return 0
    if isinstance(expr, tirx.Cast):
        return _affine_coefficient(expr.value, var)
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        a, b = _affine_coefficient(expr.a, var), _affine_coefficient(expr.b, var)
        if a is None or b is None:
            return None
        return a + b if isinstance(expr, tirx.Add) else a - b
    if isinstance(expr, tirx.Mul):
        for x, y in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(y, tirx.IntImm):
                c = _affine_coefficient(x, var)
                return None if c is None else c * int(y.value)
    return 0 if not _mentions(expr, var) else None


def _mentions(expr: Any, var: Any) -> bool:
    return any(v.same_as(var) for v in _free_vars([expr]))


def _modulus(expr: Any) -> tuple[Any, int] | None:
    """``(x, m)`` for ``x % m`` or ``x & (m - 1)`` with a constant power-of-two mask."""
    if isinstance(expr, tirx.FloorMod) and isinstance(expr.b, tirx.IntImm) and expr.b.value > 0:
        return expr.a, int(expr.b.value)
    mask = None
    if type(expr).__name__ == "BitwiseAnd":
        x, mask = expr.a, expr.b
    elif isinstance(expr, ir.expr.Call) and getattr(expr.op, "name", "") == "tirx.bitwise_and":
        x, mask = expr.args
    if isinstance(mask, tirx.IntImm) and mask.value >= 0 and (mask.value + 1) & mask.value == 0:
        return x, int(mask.value) + 1
    return None


def index_period(expr: Any, var: Any) -> int | None:
    """A period ``P`` in ``var`` of ``expr`` (``expr(var + P * step) == expr(var)`` for the
    unit step), when ``var`` occurs only inside ``(c * var + ...) % m`` or a power-of-two
    mask; 1 when it does not occur; ``None`` when not periodic."""
    return _period_and_mention(expr, var)[0]


def _period_and_mention(expr: Any, var: Any) -> tuple[int | None, bool]:
    """:func:`index_period` of ``expr`` and whether ``expr`` mentions ``var``, bottom up (an
    expression with operands mentions ``var`` exactly when one of its operands does, so
    only the leaves are asked; asking every subtree walked it once per level)."""
    children = _operands(expr)
    if children is None:
        if isinstance(expr, ir.expr.Var):
            mentions = expr.same_as(var)
        elif isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
            mentions = False
        else:  # (a load or other leaf: whatever it reads)
            mentions = _mentions(expr, var)
        return (None if mentions else 1), mentions  # (a leaf is no modulus)
    parts = [_period_and_mention(child, var) for child in children]
    return node_period(parts, lambda: _modulus(expr), lambda x: _affine_coefficient(x, var))


def node_period(
    parts: list[tuple[int | None, bool]],
    modulus: Callable[[], tuple[_X, int] | None],
    coefficient: Callable[[_X], int | None],
) -> tuple[int | None, bool]:
    """The period rule of :func:`index_period` at a node with operands, whatever the node
    is read from (TIR here, interval trees in :mod:`tilewave.analysis.tree_period`):
    ``parts`` are the operands' ``(period, mentions)``; ``modulus()`` gives ``(x, m)``
    when the node is ``x % m`` or a power-of-two mask (asked only when an operand
    mentions the variable); ``coefficient(x)`` the variable's coefficient in an affine
    ``x`` (None: not affine)."""
    if not any(mentions for _, mentions in parts):
        return 1, False
    mod = modulus()
    if mod is not None:
        x, m = mod
        c = coefficient(x)
        if c is not None:
            return (m // math.gcd(abs(c), m) if c else 1), True
    period = 1
    for part, _ in parts:
        if part is None:
            return None, True
        period = math.lcm(period, part)
    return period, True


def _fold_operands(
    expr: Any, part: Callable[[Any], int | None], combine: Callable[[int, int], int], start: int
) -> int | None:
    """``combine`` of ``part`` over ``expr``'s operands, from ``start``; None when
    ``expr`` has no known operands or ``part`` of one is None."""
    children = _operands(expr)
    if children is None:
        return None
    acc = start
    for child in children:
        value = part(child)
        if value is None:
            return None
        acc = combine(acc, value)
    return acc


def _holds(cond: Any, env: Mapping[Any, Any], shape: tuple[int, ...]) -> np.ndarray:
    """Where ``cond`` holds, as a boolean mask of ``shape`` (a condition may be an integer
    cast to bool: nonzero holds)."""
    return np.broadcast_to(np.asarray(_evaluate(cond, env)) != 0, shape)


def _thread_values_where(
    cond: Any, var: Any, values: np.ndarray, run: Mapping[Any, int]
) -> np.ndarray:
    """The ``values`` of thread variable ``var`` where ``cond`` (on ``var`` alone) holds.
    Remembered for the analysis run: the accesses under one warp-role ``if`` (a whole
    epilogue of fragment stores) ask it of the same condition, one side each."""
    key = (tvm_ffi.StructuralKey(cond), values.tobytes())  # (the key holds ``var``)
    found, kept = _THREAD_VALUES.lookup(key, run)
    if found:
        return kept  # type: ignore[no-any-return]
    kept = values[_holds(cond, {var: values}, values.shape)]
    kept.flags.writeable = False  # (returned to every caller)
    return _THREAD_VALUES.put(key, run, kept)  # type: ignore[no-any-return]


#: ``_thread_values_where`` results by (condition, structurally; values)
_THREAD_VALUES = FootprintCache()


def _conjuncts(cond: Any) -> list[Any]:
    """The parts of a conjunction (``a and b and c``), each on its own."""
    if isinstance(cond, tirx.And):
        return [*_conjuncts(cond.a), *_conjuncts(cond.b)]
    return [cond]


def _divisor_of(expr: Any, var: Any) -> int | None:
    """``g > 0`` when ``expr`` reads ``var`` only through ``var // c`` with constant
    ``c > 0`` (``g`` the gcd of those ``c``: ``var // g`` determines ``expr``); 0 when it
    does not read ``var``; None otherwise."""
    if node_is(expr, tirx.FloorDiv) and node_is(expr.a, ir.expr.Var):
        if expr.a.same_as(var):
            b = expr.b
            return b.value if isinstance(b, tirx.IntImm) and b.value > 0 else None
    if node_is(expr, ir.expr.Var):
        return None if expr.same_as(var) else 0
    if node_is(expr, _CONSTANTS):
        return 0
    return _fold_operands(expr, lambda child: _divisor_of(child, var), math.gcd, 0)


_CONSTANTS = (tirx.IntImm, tirx.FloatImm)


def _operands(expr: Any) -> list[Any] | None:
    """The operands of ``expr`` (None: a leaf, or a node whose operands are not known)."""
    kind = kind_by_class(_OPERAND_KINDS, expr, _operand_kind)
    if kind is _Operands.BINARY:
        return [expr.a, expr.b]
    if kind is _Operands.NONE:
        return None
    if kind is _Operands.CAST:
        return [expr.value]
    if kind is _Operands.UNARY:
        return [expr.a]
    if kind is _Operands.SELECT:
        return [expr.condition, expr.true_value, expr.false_value]
    return ffi_list(expr.args)


class _Operands(enum.Enum):
    NONE = "none"
    CAST = "cast"
    BINARY = "binary"
    UNARY = "unary"
    SELECT = "select"
    CALL = "call"


#: how to read a node class's operands (:func:`~tilewave.ir.walker.kind_by_class`)
_OPERAND_KINDS: dict[type, _Operands] = {}


def _operand_kind(expr: Any) -> _Operands:
    """How to read the operands of ``expr``'s class (the first of its class met: a
    Python-side comparison wrapper such as ``EqualOp`` sets ``a``/``b`` per object)."""
    cls = type(expr)
    if issubclass(cls, ir.expr.Var):
        return _Operands.NONE  # the variable itself, outside any modulus
    if issubclass(cls, tirx.Cast):
        return _Operands.CAST
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return _Operands.BINARY
    if issubclass(cls, tirx.Not):
        return _Operands.UNARY
    if issubclass(cls, tirx.Select):
        return _Operands.SELECT
    if issubclass(cls, ir.expr.Call):
        return _Operands.CALL
    return _Operands.NONE


def _one_per_residue(
    candidates: np.ndarray, base: np.ndarray, period: int, loop: LoopRange
) -> np.ndarray:
    """The first of ``candidates`` in each residue class of the iteration number modulo
    ``period`` (iteration numbers counted from ``loop``'s start)."""
    if len(candidates) == 0:
        return candidates
    iteration = (candidates - int(_values(loop)[0])) // loop.step
    _, first = np.unique(iteration % period, return_index=True)
    return candidates[np.sort(first)]


class _Side:
    """One access's addresses and threads for a given assignment of some loop variables."""

    def __init__(
        self, access: SharedAccess, thread_extents: Mapping[Any, int], flat: Any = None
    ) -> None:
        #: the flattened index (``flat``: another flattening of the access's indices, such
        #: as :func:`_peeled_flat`'s base)
        self.flat = _flat(access) if flat is None else flat
        self.conditions = [c for cond in access.path_conditions for c in _conjuncts(cond)]
        #: the variables each condition reads (asked per thread variable and per loop)
        self._condition_vars = [_free_vars([cond]) for cond in self.conditions]
        self._run = thread_extents  # (the analysis run, for its caches)
        self.threads = [(v, e) for v, e in thread_extents.items() if e != 1]
        for var, ext in self.threads:
            if ext <= 0:
                raise _NotEnumerable(f"thread extent of {var} unknown")
        used = _free_vars([self.flat, *self.conditions])
        self.loops = [lp for lp in access.loops if any(lp.var.same_as(u) for u in used)]
        known = [v for v, _ in thread_extents.items()] + [lp.var for lp in self.loops]
        self.thread_values = [self._thread_axis(v, e) for v, e in self.threads]
        for var in used:
            if not any(var.same_as(k) for k in known):
                raise _NotEnumerable(f"variable {var} with no known range")
        #: per loop, by its variable's handle (loops without a ``For`` statement, such as a
        #: copy's element range, are told apart by variable only)
        self._valid: dict[int, np.ndarray | None] = {}
        self._periods: dict[int, int | None] = {}
        self._free: dict[int, np.ndarray] = {}
        self._points: dict[Any, _Points] = {}
        #: axis position of each variable (threads, then loops), by handle
        axis_vars = [*(v for v, _ in self.threads), *(lp.var for lp in self.loops)]
        self._slots = {hash(v): i for i, v in enumerate(axis_vars)}
        self._native: _NativeSide | bool | None = False  # False: not compiled yet

    def _thread_axis(self, var: Any, extent: int) -> np.ndarray:
        """The values of thread variable ``var`` to enumerate. All that `_overlap` reads of
        the threads at an address is the lowest and highest thread id, so where the index
        and the other conditions see ``var`` only through ``var // g`` (or not at all), the
        first and last allowed value of each class give the same answer as all of them; a
        condition on ``var`` alone (``tx == 0``) removes the values it excludes."""
        values = np.arange(extent, dtype=np.int64)
        others = [self.flat]
        for cond, free in zip(self.conditions, self._condition_vars, strict=True):
            if len(free) == 1 and free[0].same_as(var):
                values = _thread_values_where(cond, var, values, self._run)
            else:
                others.append(cond)
        divisor = 0
        for expr in others:
            seen = _divisor_of(expr, var)
            if seen is None:
                return values
            divisor = math.gcd(divisor, seen)
        if len(values) == 0:
            return values
        classes = values // divisor if divisor else np.zeros_like(values)
        starts = np.flatnonzero(np.r_[True, classes[1:] != classes[:-1]])
        ends = np.r_[starts[1:], len(values)] - 1
        return distinct(np.concatenate([values[starts], values[ends]]))

    def valid(self, loop: LoopRange) -> np.ndarray | None:
        """The iterations of ``loop`` in which the access can run, judged by the path
        conditions on ``loop``'s variable alone; ``None`` when a condition mixes it with
        other variables (then every iteration counts and no period is used)."""
        key = hash(loop.var)
        if key not in self._valid:
            values = _values(loop)
            keep = np.ones(len(values), bool)
            for cond, free in zip(self.conditions, self._condition_vars, strict=True):
                if not any(v.same_as(loop.var) for v in free):
                    continue
                if len(free) > 1:
                    self._valid[key] = None
                    return None
                keep &= _holds(cond, {loop.var: values}, values.shape)
            self._valid[key] = values[keep]
        return self._valid[key]

    def free_values(self, loop: LoopRange) -> np.ndarray:
        """The iterations of a loop this side alone ranges over: one per residue of the
        index's period among the iterations the conditions allow (they give the same
        addresses)."""
        key = hash(loop.var)
        if key not in self._free:
            valid = self.valid(loop)
            period = self.period(loop)
            if valid is None or period is None:
                self._free[key] = _values(loop)
            else:
                free = _one_per_residue(valid, valid, period, loop)
                free.flags.writeable = False  # (returned to every caller)
                self._free[key] = free
        return self._free[key]

    def period(self, loop: LoopRange) -> int | None:
        """A period of this access's index in ``loop``'s iterations (None: none known)."""
        key = hash(loop.var)
        if key not in self._periods:
            self._periods[key] = index_period(self.flat, loop.var)
        return self._periods[key]

    def points(
        self,
        fixed: Mapping[Any, np.ndarray],
        ties: list[tuple[Any, int, int]],
        sample: int | None = None,
    ) -> _Points:
        """The points over the free variables, with ``fixed`` loop values (an array of
        allowed values each). ``ties``: ``(var, offset, count)`` of loops shared with the
        other side; the key holds the iteration ``var - offset`` (in ``[0, count)``) next to
        the address, so only equal iterations meet. Cached: one access meets many others in
        the same loop context. ``sample``: only the first values of each variable, at most
        that many points (None: all)."""
        memo = (
            tuple((hash(var), values.tobytes()) for var, values in fixed.items()),
            tuple((hash(var), offset, count) for var, offset, count in ties),
            sample,
        )
        if memo not in self._points:
            found = self._enumerate(fixed, ties, sample)
            if found.cut:
                self._points[memo] = found
            else:  # the whole space: the points at every sample size
                for size in _SAMPLE_LEVELS:
                    self._points[(*memo[:2], size)] = found
        return self._points[memo]

    def whole_points(self) -> _Points | None:
        """The points of the whole space, every loop free (no loop fixed or tied); None
        when it has more than :data:`SAMPLE_POINTS` points or cannot be enumerated."""
        found = self._points.get(_WHOLE, False)
        if found is False:
            size = math.prod(len(values) for values in self.thread_values)
            for lp in self.loops:
                size *= len(self.free_values(lp))
            found = None
            if size <= SAMPLE_POINTS:
                try:
                    found = self.points({}, [], None)
                except _NotEnumerable:
                    found = None
            self._points[_WHOLE] = found
        return found

    def _enumerate(
        self,
        fixed: Mapping[Any, np.ndarray],
        ties: list[tuple[Any, int, int]],
        sample: int | None,
    ) -> _Points:
        axes: list[tuple[Any, np.ndarray]] = [
            (v, values) for (v, _), values in zip(self.threads, self.thread_values, strict=True)
        ]
        for lp in self.loops:
            values = next((x for k, x in fixed.items() if k.same_as(lp.var)), None)
            axes.append((lp.var, self.free_values(lp) if values is None else values))
        size = math.prod(len(x) for _, x in axes)  # (exact; numpy's prod is 5 us a call)
        full_size = size
        # a space within SAMPLE_POINTS is taken whole at every level: its answer is final
        while sample is not None and size > sample and full_size > SAMPLE_POINTS:
            longest = max(range(len(axes)), key=lambda i: len(axes[i][1]))
            var, values = axes[longest]
            axes[longest] = (var, values[: (len(values) + 1) // 2])
            size = math.prod(len(x) for _, x in axes)
        if size > MAX_POINTS:
            raise _NotEnumerable("too many points")
        found = None
        native = self.native()
        if native is not None:
            found = native.points([x for _, x in axes], ties)
        if found is None:
            found = _Points.of(*self._numpy_points(axes, ties))
        return dataclasses.replace(found, cut=True) if size < full_size else found

    def native(self) -> _NativeSide | None:
        """This side's programs for the compiled core (None: no core, or an expression
        it does not take)."""
        if self._native is False:
            self._native = _NativeSide.of(self)
        return self._native  # type: ignore[return-value]

    def _numpy_points(
        self, axes: list[tuple[Any, np.ndarray]], ties: list[tuple[Any, int, int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The reference evaluation: every point's key and thread, where the conditions
        hold (NumPy over the grid of ``axes``)."""
        grids = np.meshgrid(*[x for _, x in axes], indexing="ij", sparse=True) if axes else []
        env = {var: grid for (var, _), grid in zip(axes, grids, strict=True)}
        shape = tuple(len(x) for _, x in axes)
        key = np.broadcast_to(np.asarray(_evaluate(self.flat, env), np.int64), shape)
        span = np.int64(_ADDRESS_SPAN)
        for var, offset, count in ties:
            iteration = np.asarray(_evaluate(var, env), np.int64) - offset
            key = key + np.broadcast_to(iteration, shape) * span
            span = span * np.int64(count + 2)
        thread = np.zeros(shape, np.int64)
        stride = 1
        for (_, ext), grid in zip(self.threads, grids, strict=False):
            thread = thread + np.broadcast_to(grid, shape) * stride
            stride *= ext
        keep = np.ones(shape, bool)
        for cond in self.conditions:
            keep &= _holds(cond, env, shape)
        return key[keep].ravel(), thread[keep].ravel()


class _NativeSide:
    """One side's address and condition programs for the compiled core."""

    def __init__(self, points_core: PointsCore, side: _Side) -> None:
        programs = [
            compile_program(expr, side._slots, points_core.opcodes)
            for expr in (side.flat, *side.conditions)
        ]
        extents = [ext for _, ext in side.threads]
        self.core = points_core
        self.program = pack_programs(programs, extents)
        self.counts = (len(programs), len(extents))
        self.slots = side._slots

    @classmethod
    def of(cls, side: _Side) -> _NativeSide | None:
        """The compiled form of ``side``; None without a core or for an expression the
        core does not take."""
        points_core = core()
        if points_core is None:
            return None
        try:
            return cls(points_core, side)
        except Unsupported:
            return None

    def points(self, axes: list[np.ndarray], ties: list[tuple[Any, int, int]]) -> _Points | None:
        """The grouped points over ``axes`` (one array per thread and loop, in slot
        order); None where the NumPy path must decide (a zero divisor, a shift out of
        range: it raises or computes what it computes; an empty axis: it checks divisors
        over the other axes' values all the same)."""
        if any(len(values) == 0 for values in axes):
            return None
        tied = []
        for var, offset, count in ties:
            slot = self.slots.get(hash(var))
            if slot is None:
                return None
            tied.append((slot, offset, count))
        found = self.core.points(self.program, self.counts, axes, tied)
        if isinstance(found, int):
            return None
        return _Points.packed(found)


_Context = tuple[dict[Any, np.ndarray], dict[Any, np.ndarray]]
_Ties = tuple[list[tuple[Any, int, int]], list[tuple[Any, int, int]]]


#: sides by footprint: accesses of other statements with the same indices, conditions and
#: loops enumerate the same points (their point sets are cached on the side)
_SHARED_SIDES = FootprintCache()


def _side(access: SharedAccess, thread_extents: Mapping[Any, int]) -> _Side:
    """The (cached) enumerable form of ``access``; raises when it has none."""
    cached = access.memo.get("enumeration_side")
    if cached is None or cached[0] != id(thread_extents):
        shared = access.footprint
        found, side = (False, None) if shared is None else _SHARED_SIDES.lookup(
            shared, thread_extents
        )
        if not found:
            try:
                side = _Side(access, thread_extents)
            except _NotEnumerable:
                side = None
            if shared is not None:
                _SHARED_SIDES.put(shared, thread_extents, side)
        cached = (id(thread_extents), side)
        access.memo["enumeration_side"] = cached
    if cached[1] is None:
        raise _NotEnumerable("access not enumerable")
    return cached[1]


def _contexts(
    a: _Side,
    b: _Side,
    iterations: Mapping[Any, int],
    positions: Mapping[Any, int],
    finished: Mapping[Any, int],
) -> tuple[list[_Context], _Ties]:
    """Assignments of loop variables for ``a`` and ``b`` that cover every related pair, and
    the loops tied iteration by iteration (a fixed distance below FAR) through the key."""
    per_loop: list[list[_Context]] = []
    ties: _Ties = ([], [])
    b_vars = {id(lp.loop): lp for lp in b.loops if lp.loop is not None}
    for la in a.loops:
        lb = b_vars.pop(id(la.loop), None) if la.loop is not None else None
        values = _values(la)
        if lb is None:
            back = finished.get(la.loop, ANY) if la.loop is not None else ANY
            last = values[-1]
            if back < FAR:
                per_loop.append([({la.var: np.array([last - back * la.step])}, {})])
            elif back == FAR:
                per_loop.append([({la.var: values[values <= last - FAR * la.step]}, {})])
            continue
        dist = iterations.get(la.loop, ANY)
        count = len(values)
        if 0 <= dist < FAR:
            offset = int(values[0])
            # iteration i of a meets iteration i + dist of b: key both by a's iteration
            ties[0].append((la.var, offset, count))
            ties[1].append((lb.var, offset + dist * la.step, count))
            per_loop.append([_tied_values(a, b, la, lb, dist)])
        elif dist == FAR and len(values) <= MAX_PAIR_TRIPS:
            per_loop.append(
                [
                    ({la.var: np.array([v])}, {lb.var: values[values >= v + FAR * la.step]})
                    for v in values
                ]
            )
    for lb in b_vars.values():
        pos = positions.get(lb.loop, ANY)
        values = _values(lb)
        if pos < FAR:
            per_loop.append([({}, {lb.var: values[pos : pos + 1]})])
        elif pos == FAR:
            per_loop.append([({}, {lb.var: values[FAR:]})])
    out = []
    for combo in itertools.product(*per_loop):
        fa: dict[Any, np.ndarray] = {}
        fb: dict[Any, np.ndarray] = {}
        for part_a, part_b in combo:
            fa.update(part_a)
            fb.update(part_b)
        if all(len(v) for v in fa.values()) and all(len(v) for v in fb.values()):
            out.append((fa, fb))
    return out, ties


def _tied_values(a: _Side, b: _Side, la: LoopRange, lb: LoopRange, dist: int) -> _Context:
    """Values of a loop both sides run in, ``b`` ``dist`` iterations after ``a``: the pairs
    both sides' conditions allow, one per residue of the joint period."""
    values = _values(la)
    shift = dist * la.step
    valid_a, valid_b = a.valid(la), b.valid(lb)
    pa, pb = a.period(la), b.period(lb)
    # the pairs depend on these values only: many accesses of one loop share them
    if valid_a is None or valid_b is None or pa is None or pb is None:
        key: tuple[Any, ...] = (la.min, la.extent, la.step, shift)
    else:
        period = pa * pb // math.gcd(pa, pb)
        key = (la.min, la.extent, la.step, shift, period, valid_a.tobytes(), valid_b.tobytes())
    found = _TIED.get(key)
    if found is None:
        if valid_a is None or valid_b is None or pa is None or pb is None:
            pairs = values[np.isin(values + shift, values)]
        else:
            joint = valid_a[np.isin(valid_a + shift, valid_b)]
            pairs = _one_per_residue(joint, joint, period, la)
        found = (pairs, pairs + shift)
        for array in found:
            array.flags.writeable = False  # shared between questions
        if len(_TIED) >= _TIED_LIMIT:
            _TIED.clear()
        _TIED[key] = found
    return {la.var: found[0]}, {lb.var: found[1]}


#: ``_tied_values`` pairs by (loop bounds, shift, period, both sides' valid iterations)
_TIED: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
_TIED_LIMIT = 4096


@dataclass(frozen=True, eq=False)
class _Points:
    """One side's points in one loop context: its distinct keys, sorted, and for each the
    lowest and highest thread id touching it."""

    keys: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    #: the three as one array, where they were made as one
    joined: np.ndarray | None = None
    #: only the first values of the space (a sample): finding no overlap proves nothing
    cut: bool = False

    @classmethod
    def of(cls, keys: np.ndarray, threads: np.ndarray) -> _Points:
        """Group ``(key, thread)`` pairs by key."""
        order = np.lexsort((threads, keys))
        k, t = keys[order], threads[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if k.size else np.zeros(0, int)
        ends = np.r_[starts[1:], len(k)] - 1 if k.size else starts
        return cls(k[starts], t[starts], t[ends])

    @classmethod
    def packed(cls, words: np.ndarray) -> _Points:
        """From one array of keys, lowest threads, highest threads (the compiled core's)."""
        n = len(words) // 3
        return cls(words[:n], words[n : 2 * n], words[2 * n :], words)

    @property
    def size(self) -> int:
        """Number of distinct keys."""
        return int(self.keys.size)

    @cached_attribute
    def words(self) -> tuple[np.ndarray, int]:
        """Keys, lowest and highest threads as one array, and its address (for the
        compiled core)."""
        words = self.joined
        if words is None:
            words = np.concatenate((self.keys, self.lo, self.hi))
        return words, words.ctypes.data


def _overlap(a: _Points, b: _Points, same_thread_ordered: bool) -> bool:
    """Whether ``a`` and ``b`` (one loop context) share a key touched by two different
    threads (by any threads when not ``same_thread_ordered``)."""
    if a.size == 0 or b.size == 0:
        return False
    if a.keys[-1] < b.keys[0] or b.keys[-1] < a.keys[0]:
        return False
    points_core = core()
    if points_core is not None:
        return points_core.overlap(*a.words, *b.words, same_thread_ordered)
    at = np.minimum(np.searchsorted(b.keys, a.keys), b.size - 1)
    shared = b.keys[at] == a.keys  # both sorted and distinct
    if not shared.any():
        return False
    if not same_thread_ordered:
        return True
    lo_a, hi_a = a.lo[shared], a.hi[shared]
    lo_b, hi_b = b.lo[at[shared]], b.hi[at[shared]]
    # one thread on both sides at every shared address: program order, no race
    return bool(np.any((lo_a != hi_a) | (lo_b != hi_b) | (lo_a != lo_b)))


#: :meth:`_Side.whole_points`' entry in a side's point cache
_WHOLE = ("whole",)


def whole_space_points(access: SharedAccess, thread_extents: Mapping[Any, int]) -> _Points | None:
    """The points of ``access`` over its whole index space, every loop variable free,
    where that space has at most :data:`SAMPLE_POINTS` points and the proofs analyse its
    indices; None otherwise."""
    if access.resolved_indices is None or not access.indices_analysable:
        return None
    # (remembered per footprint: accesses of many statements share one, and equal
    # footprints flatten to the same base and offset)
    footprint = access.footprint
    memo = footprint.memo if footprint is not None else access.memo
    cached = memo.get("whole_space_points")
    if cached is not None and cached[0] == id(thread_extents):
        return cached[1]  # type: ignore[no-any-return]
    points = _shifted_whole_points(access, thread_extents)
    memo["whole_space_points"] = (id(thread_extents), points)
    return points


def _shifted_whole_points(
    access: SharedAccess, thread_extents: Mapping[Any, int]
) -> _Points | None:
    """:func:`whole_space_points` as the points of the access's base index
    (:func:`_peeled_flat`) moved by its constant offset. The base's points are remembered
    for the analysis run by the base (structurally), the path conditions and the loops:
    the stores of an unrolled epilogue differ by constants, and their spaces are
    enumerated once per base instead of once per store. (The offset reads no variable, so
    the thread values and loop periods the enumeration picks are the base's too.)"""
    try:
        base, offset = _peeled_flat(access)
    except _NotEnumerable:
        return None
    loops = tuple(
        (hash(lp.var), lp.min, lp.extent, lp.step, None if lp.loop is None else hash(lp.loop))
        for lp in access.loops
    )
    key = (tvm_ffi.StructuralKey([base, list(access.path_conditions)]), loops)
    found, entry = _BASE_POINTS.lookup(key, thread_extents)
    if found:
        points = entry[0]
    else:
        try:
            # (no offset: the access's own side, which its proofs share)
            side = _side(access, thread_extents) if offset == 0 else None
            points = (side or _Side(access, thread_extents, flat=base)).whole_points()
        except _NotEnumerable:
            points = None
        # (the key names loops by handle: the entry keeps them alive, so no handle comes
        # to stand for another node while it exists)
        _BASE_POINTS.put(key, thread_extents, (points, access.loops))
    if points is None or offset == 0:
        return points
    return _Points(points.keys + offset, points.lo, points.hi)


#: whole-space points of base indices (:func:`_shifted_whole_points`)
_BASE_POINTS = FootprintCache()


def small_spaces_overlap(
    a: SharedAccess, b: SharedAccess, thread_extents: Mapping[Any, int], same_thread_ordered: bool
) -> bool | None:
    """Whether two different threads (any two, when ``same_thread_ordered`` is False) touch
    a common element through ``a`` and ``b`` with every loop variable independent, decided
    over both whole index spaces where each has at most :data:`SAMPLE_POINTS` points (the
    answer :func:`enumerate_no_overlap` gives such spaces without loop relations, at less
    cost: no sample levels, no loop contexts). None: not decided here (an index the
    proofs do not analyse, an unknown range, a larger space)."""
    points_a = whole_space_points(a, thread_extents)
    points_b = whole_space_points(b, thread_extents) if points_a is not None else None
    if points_a is None or points_b is None:
        return None
    return _overlap(points_a, points_b, same_thread_ordered)


class MergedPoints:
    """Answers whether some points overlap those of any member of a group, over the
    members' points merged (each address with the lowest and highest thread of any member
    there: the answer :func:`_overlap` gives some pair). A group is kept as a few merged
    runs whose member counts are distinct powers of two, largest first (a binary counter:
    a member added merges only runs of equal size, so each member is copied O(log n) times
    as a group grows, where one merged set would copy the whole group at every member),
    and some points overlap a member of the group exactly when they overlap a member of
    some run. Groups are remembered, and a group that extends a remembered one by a member
    adds just that one (a run of statements between barriers grows its group one access
    at a time). One per analysis run."""

    def __init__(self) -> None:
        self._runs: dict[tuple[_Points, ...], tuple[tuple[_Points, int], ...]] = {}

    def overlaps_any(
        self, group: tuple[_Points, ...], points: _Points, same_thread_ordered: bool
    ) -> bool:
        """Whether ``points`` overlap those of a member of ``group`` (see the class)."""
        if not group or points.size == 0:
            return False
        return any(_overlap(run, points, same_thread_ordered) for run, _ in self._runs_of(group))

    def _runs_of(self, group: tuple[_Points, ...]) -> tuple[tuple[_Points, int], ...]:
        found = self._runs.get(group)
        if found is not None:
            return found
        # from the remembered group one member shorter, else from the first member with
        # each prefix on the way remembered (the next group extends this one)
        found = self._runs.get(group[:-1])
        start = len(group) - 1 if found is not None else 1
        if found is None:
            found = ((group[0], 1),)
        if len(self._runs) + len(group) - start >= _MERGED_LIMIT:
            self._runs.clear()
        for end in range(start + 1, len(group) + 1):
            found = self._runs[group[:end]] = _with_member(found, group[end - 1])
        return found


def _with_member(
    runs: tuple[tuple[_Points, int], ...], member: _Points
) -> tuple[tuple[_Points, int], ...]:
    """``runs`` (merged points with their member counts, largest first) with one member
    more: equal-sized last runs are merged, as a binary counter carries."""
    out = [*runs, (member, 1)]
    while len(out) > 1 and out[-1][1] == out[-2][1]:
        (p, count), (q, _) = out[-2], out[-1]
        out[-2:] = [(_merged_pair(p, q), 2 * count)]
    return tuple(out)


#: merged groups one :class:`MergedPoints` keeps (then it starts again)
_MERGED_LIMIT = 4096


def _merged_pair(p: _Points, q: _Points) -> _Points:
    """``p`` and ``q`` as one: their keys, each with the lowest and highest thread of
    either."""
    points_core = core()
    if points_core is not None:
        return _Points.packed(points_core.merge(*p.words, *q.words))
    lo, hi = p.lo, p.hi
    insert = np.searchsorted(p.keys, q.keys)
    q_keys, q_lo, q_hi = q.keys, q.lo, q.hi  # (q's keys not in p, after the next step)
    if p.size:
        at = np.minimum(insert, p.size - 1)
        hit = p.keys[at] == q.keys  # (keys are distinct and sorted on both sides)
        if hit.any():
            lo, hi = lo.copy(), hi.copy()
            where = at[hit]
            lo[where] = np.minimum(lo[where], q.lo[hit])
            hi[where] = np.maximum(hi[where], q.hi[hit])
            new = ~hit
            insert, q_keys, q_lo, q_hi = insert[new], q.keys[new], q.lo[new], q.hi[new]
    joined = np.concatenate(
        (
            np.insert(p.keys, insert, q_keys),
            np.insert(lo, insert, q_lo),
            np.insert(hi, insert, q_hi),
        )
    )
    return _Points.packed(joined)


def enumerate_no_overlap(
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    iterations: Mapping[Any, frozenset[int]] | None,
    same_thread_ordered: bool,
    positions: Mapping[Any, int] | None = None,
    finished: Mapping[Any, int] | None = None,
) -> bool | None:
    """True: no two different threads (any two, when ``same_thread_ordered`` is False)
    touch a common element through ``a`` and ``b`` under the given loop relations; False:
    some do; None: the index spaces are not finite and known (no answer).

    Large spaces are first searched in their first values for a witness (two threads at
    one element): one found is an overlap of the whole spaces; otherwise the whole spaces
    are enumerated where they are not too large."""
    if a.resolved_indices is None or b.resolved_indices is None:
        return None
    relations = (thread_extents, iterations, same_thread_ordered, positions, finished)
    # the first values first: an overlap among them is an overlap of the whole spaces, and
    # spaces small enough to be taken whole give the final answer (large overlapping tiles,
    # a TMA write against a wgmma read of the same stage, then cost a sample, not the whole)
    *samples, whole = _SAMPLE_LEVELS
    for sample in samples:
        verdict = _enumerated(a, b, *relations, sample=sample)
        if verdict is not None:
            return verdict
    return _enumerated(a, b, *relations, sample=whole)


def _enumerated(
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    iterations: Mapping[Any, frozenset[int]] | None,
    same_thread_ordered: bool,
    positions: Mapping[Any, int] | None,
    finished: Mapping[Any, int] | None,
    sample: int | None,
) -> bool | None:
    try:
        side_a, side_b = _side(a, thread_extents), _side(b, thread_extents)
        options = [
            (lp.loop, sorted(v))
            for lp in side_a.loops
            if lp.loop is not None
            for k, v in (iterations or {}).items()
            if k.same_as(lp.loop)
        ]
        total = 0
        cut = False
        for combo in itertools.product(*[opts for _, opts in options]):
            chosen = {loop: d for (loop, _), d in zip(options, combo, strict=True)}
            contexts, (ties_a, ties_b) = _contexts(
                side_a, side_b, chosen, positions or {}, finished or {}
            )
            sides_a, sides_b = [], []
            for fa, fb in contexts:
                points_a = side_a.points(fa, ties_a, sample)
                points_b = side_b.points(fb, ties_b, sample)
                total += points_a.size + points_b.size
                if total > MAX_POINTS:
                    return None
                cut = cut or points_a.cut or points_b.cut
                sides_a.append(points_a)
                sides_b.append(points_b)
            if any(
                _overlap(pa, pb, same_thread_ordered)
                for pa, pb in zip(sides_a, sides_b, strict=True)
            ):
                return False
        return None if cut else True
    except _NotEnumerable:
        return None
