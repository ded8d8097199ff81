"""Uniformity: whether an expression has the same value in every thread of a block or warp.

A barrier may sit inside a branch when every thread of the block takes the branch or none
does. :class:`UniformityAnalysis` classifies an expression evaluated by the threads of one
block as

* :attr:`Uniformity.BLOCK` — one value in every thread of the block;
* :attr:`Uniformity.WARP` — one value in the 32 threads of each warp (it depends on the
  thread index only through the warp index, ``tx // 32``);
* :attr:`Uniformity.THREAD` — may differ between threads of a warp.

What is block-uniform, and why:

* constants, kernel scalars (parameters), ``blockIdx``, and a ``threadIdx`` of extent 1;
* the loop variable of a serial loop whose start is block-uniform (a loop reached in
  uniform control flow runs iteration ``i`` with the same value in every thread);
* a load of a ``local`` buffer that :func:`~tilewave.analysis.uniform_locals.
  uniform_local_buffers` (run with this classification) finds equal in every thread;
* a load at a block-uniform index of a *global* buffer the kernel never writes: a kernel
  parameter that no store, atomic or address-taking call reaches (TVM emits parameters
  ``__restrict__``, so two parameters are distinct memory). A store through a view of
  unknown storage (``decl_buffer(data=...)``) makes no global buffer read-only;
* a load at a block-uniform index of a *shared* buffer. Every thread reads the same word,
  and the barrier pass orders that read after every write to the word (the verifier reports
  it as a hazard otherwise): in uniform control flow all threads read it in the same
  interval between two barriers, with no write in that interval, so they read one value.
  This is what makes ``while flag[0] == 0:`` polling a shared flag that thread 0 updates
  uniform. (Global memory has no such argument: another block may write it at any time.)
* an expression mixing a thread index with uniform values when the thread part cannot
  change the result: ``bx * 64 + tx < n`` with 64 threads under the premise
  ``n % 64 == 0``. The expression is split into a uniform part ``U`` and a part ``t`` of
  the thread indices only; ``t`` is evaluated for every thread of the block, and ``U``'s
  residue (``tvm.sym.Analyzer.modular_set``) and bounds under the premises prove that no
  thread's ``U + t`` crosses the comparison's boundary (``floordiv``/``floormod`` by a
  constant likewise).

Premises are ``assert`` statements and ``T.assume`` calls earlier in an enclosing statement
list (so they hold wherever the branch runs) and the conditions of the enclosing ``if``s,
when they do not mention a thread index.

Example::

    uniformity = UniformityAnalysis(func)
    if uniformity.is_block_uniform(stmt.condition, scope):
        ...  # a barrier inside the branch is reached by all threads or none
"""

from __future__ import annotations

import contextlib
import enum
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tvm import ir, tirx
from tvm.sym.analyzer import Analyzer

from tilewave.analysis.named_barrier_order import (
    WARP_SIZE,
    _evaluate,
    _tag_extents,
    _Unknown,
    thread_tags,
)
from tilewave.analysis.shared_access import AccessScope, collect_thread_extents, is_leaf_statement
from tilewave.analysis.shared_buffers import (
    SHARED_SCOPES,
    buffer_scope,
    is_buffer,
    loads_local_buffer,
    takes_address_call,
)
from tilewave.analysis.storage_identity import _data_source
from tilewave.analysis.uniform_locals import uniform_local_buffers
from tilewave.arrays import distinct
from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import ffi_list, post_order_visit, statements_of

__all__ = ["Uniformity", "UniformityAnalysis", "thread_conditions", "unwritten_global_buffers"]

#: TCallEffectKind values of calls with no side effect and no hidden input
#: (kExprAnnotation, kPure): their value depends on their arguments only
_PURE_EFFECTS = (0, 1)
#: the largest divisor for which floordiv/floormod residues are enumerated
_MAX_DIVISOR = 4096
_COMPARISONS = (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE)
#: what a call passed a pointer variable may write (no buffer's memory is known)
_UNKNOWN_MEMORY = tirx.Var("unknown_memory", "handle")


class Uniformity(enum.IntEnum):
    """How widely an expression's value agrees between threads (larger: less)."""

    BLOCK = 0
    WARP = 1
    THREAD = 2


@dataclass
class _Query:
    """One classification: the premises, the uniform locals, and results so far."""

    premises: list[Any]
    local_uniform: dict[int, Any]
    stack: contextlib.ExitStack
    memo: dict[int, tuple[Any, Uniformity]] = field(default_factory=dict)
    _analyzer: Analyzer | None = None

    @property
    def analyzer(self) -> Analyzer:
        """An analyzer holding the premises (made when a proof first needs it)."""
        if self._analyzer is None:
            self._analyzer = Analyzer()
            for premise in self.premises:
                if str(premise.ty) == "bool":
                    self.stack.enter_context(self._analyzer.constraint_scope(premise))
        return self._analyzer


def _key(node: Any) -> int:
    # TIR nodes hash by handle (``==`` on expressions would build an EQ node)
    return hash(node)


def _premise_of(stmt: Any) -> Any | None:
    """The condition an ``assert`` or ``T.assume(...)`` statement states, else None."""
    kind = type(stmt)  # (TIR statement classes have no subclasses: exact type tests)
    if kind is tirx.AssertStmt:
        return stmt.condition
    if kind is tirx.Evaluate and isinstance(stmt.value, ir.expr.Call):
        op = stmt.value.op
        if isinstance(op, ir.Op) and op_name(op) == "tirx.assume":
            return stmt.value.args[0]
    return None


def _block_threads(func: tirx.PrimFunc) -> tuple[int, dict[Any, np.ndarray]] | None:
    """Every thread's ``threadIdx`` values, indexed by linear thread id (None: unknown)."""
    tags = thread_tags(func)
    per_tag = _tag_extents(tags, collect_thread_extents(func))
    if per_tag is None:
        return None
    ex, ey, ez = (per_tag.get(f"threadIdx.{axis}", 1) for axis in "xyz")
    linear = np.arange(ex * ey * ez, dtype=np.int64)
    by_tag = {
        "threadIdx.x": linear % ex,
        "threadIdx.y": (linear // ex) % ey,
        "threadIdx.z": linear // (ex * ey),
    }
    return int(linear.size), {var: by_tag[tag] for var, tag in tags.items()}


def _admits(coeff: int, base: int, bounds: tuple[int, int], lo: int, hi: int) -> bool:
    """Whether some integer ``x = base (mod coeff)`` (``coeff`` 0: ``x = base``) within
    ``bounds`` lies in ``[lo, hi]``."""
    lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    if lo > hi:
        return False
    if coeff == 0:
        return lo <= base <= hi
    return lo + (base - lo) % coeff <= hi


class UniformityAnalysis:
    """Block- and warp-uniformity of expressions in one kernel (see the module docstring).

    Args:
        func: the kernel; threads bound by ``T.thread_binding`` or ``T.launch_thread``.
    """

    def __init__(self, func: tirx.PrimFunc) -> None:
        self._threads = _block_threads(func)
        self._thread_vars = {_key(v): v for v in collect_thread_extents(func)}
        self._definitions: dict[int, tuple[Any, Any]] = {}
        self._premises: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self._record(func.body, ())
        self._cache: dict[tuple[int, Any], tuple[Any, bool]] = {}
        self._func = func

    @functools.cached_property
    def _read_only(self) -> dict[int, Any]:
        """The global buffers nothing in the kernel writes (found on first need)."""
        return unwritten_global_buffers(self._func)

    @functools.cached_property
    def uniform_locals(self) -> frozenset[Any]:
        """The ``local`` buffers equal in every thread (found on first need)."""
        return uniform_local_buffers(self._func, self._dependent_in_fixpoint)

    @functools.cached_property
    def _locals(self) -> dict[int, Any]:
        return {_key(b): b for b in self.uniform_locals}

    # -- facts gathered once ---------------------------------------------------------------
    def _record(self, stmt: Any, premises: tuple[Any, ...]) -> None:
        """Remember the premises in force at every control statement, and what each
        ``Bind`` and loop variable is defined as."""
        kind = type(stmt)  # (TIR statement classes have no subclasses: exact type tests)
        if kind is tirx.SeqStmt:
            for child in statements_of(stmt):
                if type(child) is not tirx.BufferStore:  # (a store records nothing)
                    self._record(child, premises)
                premise = _premise_of(child)
                if premise is not None and self._usable_premise(premise):
                    premises = (*premises, premise)
            return
        if kind is tirx.Bind:
            self._definitions[_key(stmt.var)] = (stmt.var, stmt.value)
            return
        if kind is tirx.IfThenElse:
            self._remember(stmt.condition, premises)
            self._record(stmt.then_case, premises)
            if stmt.else_case is not None:
                self._record(stmt.else_case, premises)
            return
        if kind is tirx.While:
            self._remember(stmt.condition, premises)
            self._record(stmt.body, premises)
            return
        if kind is tirx.For:
            if stmt.kind != tirx.ForKind.THREAD_BINDING:
                # iteration i's value: min + i * step, the same in every thread when both are
                start = stmt.min if stmt.step is None else tirx.Add(stmt.min, stmt.step)
                self._definitions[_key(stmt.loop_var)] = (stmt.loop_var, start)
                self._remember((stmt.min, stmt.extent), premises)
            self._record(stmt.body, premises)
            return
        if is_leaf_statement(stmt) or not isinstance(getattr(stmt, "body", None), tirx.Stmt):
            return
        self._record(stmt.body, premises)

    def _remember(self, where: Any, premises: tuple[Any, ...]) -> None:
        key = _where_key(where)
        if key in self._premises:  # one node at two places: what holds at both
            _, before = self._premises[key]
            premises = tuple(p for p in premises if any(p.same_as(q) for q in before))
        self._premises[key] = (where, premises)

    def _usable_premise(self, expr: Any) -> bool:
        """A fact that stays true where it holds: no thread index (it would narrow the
        threads enumerated), no memory read or call (memory may change after the check)."""
        usable = True

        def check(node: Any) -> None:
            nonlocal usable
            if isinstance(node, ir.expr.Var):
                usable = usable and _key(node) not in self._thread_vars
            elif type(node).__name__ == "TensorLoad" or isinstance(node, ir.expr.Call):
                usable = False

        post_order_visit(expr, check, (ir.expr.Var, ir.expr.TensorLoad, ir.expr.Call))
        return usable

    # -- queries ---------------------------------------------------------------------------
    def is_block_uniform(self, expr: Any, scope: AccessScope | None = None) -> bool:
        """Whether control flow on ``expr`` (an ``if``/``while`` condition, or
        ``min + extent`` of a loop, as written at a statement in ``scope``) goes the same
        way in every thread of the block."""
        key = (_key(expr), scope)
        hit = self._cache.get(key)
        if hit is None or not hit[0].same_as(expr):
            hit = (expr, self.level(expr, scope) is Uniformity.BLOCK)
            self._cache[key] = hit
        return hit[1]

    def level(self, expr: Any, scope: AccessScope | None = None) -> Uniformity:
        """The uniformity of ``expr`` written at a statement in ``scope`` (``Bind`` values
        and enclosing ``if`` conditions from it; ``None``: no enclosing facts)."""
        premises = list(self._premises_at(expr))
        if scope is not None:
            for cond, holds in scope.conditions:
                if self._usable_premise(cond):
                    premises.append(cond if holds else tirx.Not(cond))
            premises = [scope.resolve(p) for p in premises]
            expr = scope.resolve(expr)
        # the uniform locals (a fixed point over every local store) only matter to loads
        uniform = self._locals if loads_local_buffer([expr, *premises]) else {}
        return self._classify(expr, premises, uniform)

    def _premises_at(self, expr: Any) -> tuple[Any, ...]:
        for where in (expr, (expr.a, expr.b) if isinstance(expr, tirx.Add) else None):
            if where is None:
                continue
            found = self._premises.get(_where_key(where))
            if found is not None and _same_where(found[0], where):
                return found[1]
        return ()

    def _dependent_in_fixpoint(self, expr: Any, uniform: frozenset[Any]) -> bool:
        return self._classify(expr, [], {_key(b): b for b in uniform}) is not Uniformity.BLOCK

    def _classify(self, expr: Any, premises: list[Any], locals_: dict[int, Any]) -> Uniformity:
        with contextlib.ExitStack() as stack:
            return self._level(expr, _Query(premises, locals_, stack))

    # -- the classification ----------------------------------------------------------------
    def _level(self, expr: Any, query: _Query) -> Uniformity:
        key = _key(expr)
        hit = query.memo.get(key)
        if hit is not None and hit[0].same_as(expr):
            return hit[1]
        result = self._level_uncached(expr, query)
        query.memo[key] = (expr, result)
        return result

    def _level_uncached(self, expr: Any, query: _Query) -> Uniformity:
        if isinstance(expr, (tirx.IntImm, tirx.FloatImm, ir.expr.StringImm)):
            return Uniformity.BLOCK
        thread_only = self._thread_values(expr)
        if thread_only is not None:
            return self._spread(thread_only)
        if isinstance(expr, ir.expr.Var):
            if _key(expr) in self._thread_vars:
                return Uniformity.THREAD  # its extent is unknown
            definition = self._definitions.get(_key(expr))
            if definition is not None and definition[0].same_as(expr):
                return self._level(definition[1], query)
            return Uniformity.BLOCK  # a parameter, blockIdx, a vthread
        if type(expr).__name__ == "TensorLoad":
            return self._load_level(expr, query)
        if isinstance(expr, _COMPARISONS):
            proved = self._comparison_level(expr, query)
            if proved is not None:
                return proved
        if isinstance(expr, (tirx.FloorDiv, tirx.FloorMod)):
            proved = self._division_level(expr, query)
            if proved is not None:
                return proved
        if isinstance(expr, ir.expr.Call):
            op = expr.op
            effect = op.get_attr("TCallEffectKind") if isinstance(op, ir.Op) else None
            if effect is None or int(effect) not in _PURE_EFFECTS:
                return Uniformity.THREAD  # a side effect or a hidden input (shuffles...)
            levels = (self._level(a, query) for a in ffi_list(expr.args))
            return max(levels, default=Uniformity.BLOCK)
        if isinstance(expr, tirx.Let):
            self._definitions[_key(expr.var)] = (expr.var, expr.value)
            return self._level(expr.body, query)
        children = _children(expr)
        if children is None:
            return Uniformity.THREAD  # a node kind this analysis does not model
        return max((self._level(c, query) for c in children), default=Uniformity.BLOCK)

    def _load_level(self, load: Any, query: _Query) -> Uniformity:
        index = max((self._level(i, query) for i in load.indices), default=Uniformity.BLOCK)
        buffer = load.source
        scope = buffer_scope(buffer) or ""
        if scope in SHARED_SCOPES:
            return index  # ordered against every write: see the module docstring
        if scope.startswith("local"):
            held = query.local_uniform.get(_key(buffer))
            return index if held is not None and held.same_as(buffer) else Uniformity.THREAD
        held = self._read_only.get(_key(buffer))
        return index if held is not None and held.same_as(buffer) else Uniformity.THREAD

    def _thread_values(self, expr: Any) -> np.ndarray | None:
        """``expr``'s value in every thread when it reads only thread indices and
        constants (None otherwise, or when the block's extents are unknown)."""
        if self._threads is None:
            return None
        total, env = self._threads
        try:
            value = _evaluate(expr, env)
        except _Unknown:
            return None
        return np.broadcast_to(np.asarray(value), (total,))

    @staticmethod
    def _spread(values: np.ndarray) -> Uniformity:
        if np.all(values == values[0]):
            return Uniformity.BLOCK
        if values.size % WARP_SIZE == 0:
            warps = values.reshape(-1, WARP_SIZE)
            if np.all(warps == warps[:, :1]):
                return Uniformity.WARP
        return Uniformity.THREAD

    def _split(self, expr: Any, query: _Query) -> tuple[Any, np.ndarray] | None:
        """``expr`` as ``U + t``: ``U`` block-uniform, ``t`` per thread (its values); None
        when it is not a sum of such parts (integers only)."""
        if not str(expr.ty).startswith(("int", "uint")) or self._threads is None:
            return None
        total = self._threads[0]
        values = self._thread_values(expr)
        if values is not None:
            return tirx.IntImm(str(expr.ty), 0), values.astype(np.int64)
        if self._level(expr, query) is Uniformity.BLOCK:
            return expr, np.zeros(total, np.int64)
        if isinstance(expr, (tirx.Add, tirx.Sub)):
            a, b = self._split(expr.a, query), self._split(expr.b, query)
            if a is None or b is None:
                return None
            if isinstance(expr, tirx.Add):
                return tirx.Add(a[0], b[0]), a[1] + b[1]
            return tirx.Sub(a[0], b[0]), a[1] - b[1]
        if isinstance(expr, tirx.Mul):
            for part, factor in ((expr.a, expr.b), (expr.b, expr.a)):
                if isinstance(factor, tirx.IntImm):
                    inner = self._split(part, query)
                    if inner is None:
                        return None
                    return tirx.Mul(inner[0], factor), inner[1] * int(factor.value)
        return None

    def _groups(self, values: np.ndarray) -> list[tuple[Uniformity, list[np.ndarray]]]:
        """Thread groups to check, widest first: the block, then each warp."""
        out = [(Uniformity.BLOCK, [values])]
        if values.size % WARP_SIZE == 0:
            out.append((Uniformity.WARP, list(values.reshape(-1, WARP_SIZE))))
        return out

    def _residue(self, uniform: Any, query: _Query) -> tuple[int, int, tuple[int, int]]:
        """``(coeff, base, (min, max))`` of the values ``uniform`` can take."""
        mod = query.analyzer.modular_set(uniform)
        bound = query.analyzer.const_int_bound(uniform)
        return int(mod.coeff), int(mod.base), (int(bound.min_value), int(bound.max_value))

    def _comparison_level(self, expr: Any, query: _Query) -> Uniformity | None:
        """A comparison whose thread part cannot move any thread across its boundary."""
        # every comparison as `U + t < 0` (LT/LE/GT/GE) or `U + t == 0` (EQ/NE)
        if isinstance(expr, (tirx.GT, tirx.GE)):
            lhs, rhs = expr.b, expr.a
        else:
            lhs, rhs = expr.a, expr.b
        if str(lhs.ty) != str(rhs.ty):
            return None
        split = self._split(tirx.Sub(lhs, rhs), query)
        if split is None:
            return None
        uniform, thread = split
        coeff, base, bounds = self._residue(uniform, query)
        if isinstance(expr, (tirx.LE, tirx.GE)):  # a <= b: a - b - 1 < 0
            base, bounds = base - 1, (bounds[0] - 1, bounds[1] - 1)
        ordered = not isinstance(expr, (tirx.EQ, tirx.NE))
        for level, groups in self._groups(thread):
            if all(
                not self._crosses(g, coeff, base, bounds, ordered) for g in groups
            ):
                return level
        return None

    @staticmethod
    def _crosses(
        values: np.ndarray, coeff: int, base: int, bounds: tuple[int, int], ordered: bool
    ) -> bool:
        """Whether ``U + t`` compares differently for two of these thread values ``t``."""
        seen = distinct(values)
        if seen.size == 1:
            return False
        if ordered:  # U + t_lo < 0 <= U + t_hi exactly when -max <= U < -min
            return _admits(coeff, base, bounds, -int(seen[-1]), -int(seen[0]) - 1)
        return any(_admits(coeff, base, bounds, -int(t), -int(t)) for t in seen)

    def _division_level(self, expr: Any, query: _Query) -> Uniformity | None:
        """``(U + t) // c`` or ``(U + t) % c`` whose thread part stays within one block of
        ``c`` for every residue ``U`` can have."""
        if not isinstance(expr.b, tirx.IntImm) or not 0 < int(expr.b.value) <= _MAX_DIVISOR:
            return None
        split = self._split(expr.a, query)
        if split is None:
            return None
        uniform, thread = split
        c = int(expr.b.value)
        coeff, base, _ = self._residue(uniform, query)
        step = c if coeff == 0 else math.gcd(coeff, c)
        residues = np.arange(base % step, c, step, dtype=np.int64)[:, None]
        apply: Callable[[np.ndarray], np.ndarray]
        if isinstance(expr, tirx.FloorDiv):
            apply = lambda t: (residues + t[None, :]) // c  # noqa: E731
        else:
            apply = lambda t: (residues + t[None, :]) % c  # noqa: E731
        for level, groups in self._groups(thread):
            if all(np.all(v == v[:, :1]) for v in (apply(g) for g in groups)):
                return level
        return None


def thread_conditions(
    scope: AccessScope, is_block_uniform: Callable[[Any, AccessScope], bool]
) -> tuple[tuple[Any, bool], ...]:
    """The enclosing ``if`` conditions of ``scope`` (``(condition, holds)``, as in
    ``AccessScope.conditions``) that ``is_block_uniform(condition, scope at it)`` does not
    find block-uniform: the ones that select which threads run there (a block-uniform one
    holds for every thread that gets there)."""
    kept = []
    for at, (cond, holds) in enumerate(scope.conditions):
        outer = scope.with_conditions(scope.conditions[:at])
        if not is_block_uniform(cond, outer):
            kept.append((cond, holds))
    return tuple(kept)


def unwritten_global_buffers(func: tirx.PrimFunc) -> dict[int, Any]:
    """The buffers of ``func`` over a kernel parameter's memory that nothing in the kernel
    writes, by node hash: the parameters themselves and their views (``decl_buffer(data=
    P.data)``, which TVM's ``FlattenBuffer`` makes of every parameter). A store, or a call
    that may write (an address-taking op, a buffer as a call argument), through any buffer
    over a parameter's memory makes that parameter and its views written; one through a
    view whose memory is not known makes every parameter written."""
    root: dict[int, int | None] = {_key(p): _key(p) for p in func.params if is_buffer(p)}
    buffers = {_key(p): p for p in func.params if is_buffer(p)}
    allocated: set[int] = set()
    written: list[Any] = []

    def check(node: Any) -> None:
        if isinstance(node, tirx.BufferStore):
            written.append(node.buffer)
        elif isinstance(node, (tirx.AllocBuffer, tirx.DeclBuffer)):
            data = getattr(node, "data", None)
            if data is None:
                allocated.add(_key(node.buffer))
                return
            source = _data_source(data)
            buffers[_key(node.buffer)] = node.buffer
            root[_key(node.buffer)] = root.get(_key(source[0])) if source else None
        elif isinstance(node, ir.expr.Call):
            written.extend(_reached_by_call(node))

    # statements in program order: a view is declared before it is used
    post_order_visit(
        func.body, check, (tirx.BufferStore, tirx.AllocBuffer, tirx.DeclBuffer, ir.expr.Call)
    )
    dirty: set[int | None] = set()
    for buffer in written:
        if _key(buffer) in allocated:
            continue
        dirty.add(root.get(_key(buffer)))
    if None in dirty:
        return {}  # a write through a view of unknown memory may reach any parameter
    return {k: buffers[k] for k, r in root.items() if r is not None and r not in dirty}


def _reached_by_call(call: ir.expr.Call) -> list[Any]:
    """Buffers a call may write: any buffer named in it except through a plain load
    (an address-taking op, or the buffer itself as an argument)."""
    found: list[Any] = []
    op = call.op
    effect = op.get_attr("TCallEffectKind") if isinstance(op, ir.Op) else None
    if takes_address_call(call):
        return found  # an address alone writes nothing: the call it is passed to decides
    if effect is not None and int(effect) in _PURE_EFFECTS:
        return found
    for arg in ffi_list(call.args):
        if is_buffer(arg):
            found.append(arg)
        elif isinstance(arg, ir.expr.Call) and takes_address_call(arg):
            post_order_visit(arg, lambda n: found.append(n) if is_buffer(n) else None)
        elif isinstance(arg, ir.expr.Var) and "handle" in str(arg.ty):
            found.append(_UNKNOWN_MEMORY)  # a pointer held in a variable: any memory
    return found


def _where_key(where: Any) -> Any:
    if isinstance(where, tuple):
        return tuple(_key(w) for w in where)
    return _key(where)


def _same_where(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return all(x.same_as(y) for x, y in zip(a, b, strict=True))
    return not isinstance(a, tuple) and not isinstance(b, tuple) and a.same_as(b)


def _children(expr: Any) -> list[Any] | None:
    """Operand expressions of arithmetic, logic, casts and selects (None: other nodes)."""
    if isinstance(expr, (tirx.Not, tirx.Cast)):
        return [expr.a if isinstance(expr, tirx.Not) else expr.value]
    if isinstance(expr, tirx.Select):
        return [expr.condition, expr.true_value, expr.false_value]
    if isinstance(expr, (tirx.Ramp, tirx.Broadcast)):
        return [getattr(expr, f) for f in ("base", "stride", "value") if hasattr(expr, f)]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return [expr.a, expr.b]
    return None
