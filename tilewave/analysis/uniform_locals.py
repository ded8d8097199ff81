"""Local (per-thread) buffers that hold the same value in every thread.

A ``while`` loop counts with a local scalar (``i: T.int32 = 0 ... while i < n: ... i = i + 1``);
whether such a loop is thread-divergent depends on whether ``i`` is the same in every
thread. :func:`uniform_local_buffers` answers that for every ``local``-scope buffer of a
function: a buffer is uniform when every store to it writes a uniform value at a uniform
index under uniform control flow (no enclosing ``if``/``while``/loop bound that depends on
the thread index, on shared or global memory, or on a non-uniform local). Starting from
"every local is uniform", buffers are removed until nothing changes (the greatest fixed
point: if all threads run the same stores with the same values, they keep agreeing).

A local whose storage a call can reach (it appears inside an ``Evaluate``'s call, e.g. the
``tw_ready[0]`` operand that ``mbarrier.try_wait`` writes, or through ``.data``) is never
uniform.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tvm import ir, tirx

from tilewave.analysis.shared_access import (
    AccessScope,
    collect_thread_extents,
    is_leaf_statement,
    is_thread_dependent,
)
from tilewave.analysis.shared_buffers import buffer_scope, is_buffer
from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import ffi_list, post_order_visit, statements_of

__all__ = ["uniform_local_buffers"]


#: a control condition around a store: ``[if/while condition or For, the scope that
#: resolves it, the resolved condition once a store to a local buffer under it needed it]``
#: (most stores of a kernel are to shared or global memory: their conditions are never
#: resolved)
_Guard = list[Any]


@dataclass(frozen=True)
class _Store:
    """A store to a ``local`` buffer, where it sits."""

    buffer: Any
    stmt: Any
    scope: AccessScope
    guards: tuple[_Guard, ...]

    def exprs(self) -> tuple[Any, ...]:
        """The value, the indices and the enclosing control conditions, resolved through
        the ``Bind`` values (worked out only for the stores whose buffer is a candidate:
        most local stores of a kernel fill buffers a call reaches)."""
        stmt, scope = self.stmt, self.scope
        exprs = (scope.resolve(stmt.value), *(scope.resolve(i) for i in stmt.indices))
        return exprs + tuple(map(_resolved_guard, self.guards))


def _collect(stmt: Any, scope: AccessScope, guards: tuple[_Guard, ...], out: list[_Store]) -> None:
    """The stores to ``local`` buffers under ``stmt`` (the only candidates), each with the
    scope and the enclosing conditions that resolve it (:meth:`_Store.exprs`)."""
    if isinstance(stmt, tirx.SeqStmt):
        for item in statements_of(stmt):
            _collect(item, scope, guards, out)
            if isinstance(item, tirx.Bind):
                scope = scope.binding(item.var, item.value)
        return
    if isinstance(stmt, tirx.IfThenElse):
        inner = (*guards, [stmt.condition, scope, None])
        _collect(stmt.then_case, scope, inner, out)
        if stmt.else_case is not None:
            _collect(stmt.else_case, scope, inner, out)
        return
    if isinstance(stmt, tirx.While):
        _collect(stmt.body, scope, (*guards, [stmt.condition, scope, None]), out)
        return
    if isinstance(stmt, tirx.For):
        if stmt.kind == tirx.ForKind.THREAD_BINDING:
            _collect(stmt.body, scope, guards, out)
        else:
            _collect(stmt.body, scope, (*guards, [stmt, scope, None]), out)
        return
    if isinstance(stmt, tirx.BufferStore):
        if buffer_scope(stmt.buffer) == "local":
            out.append(_Store(stmt.buffer, stmt, scope, guards))
        return
    if is_leaf_statement(stmt):
        return
    _collect(stmt.body, scope, guards, out)


def _resolved_guard(guard: _Guard) -> Any:
    """The condition of ``guard`` resolved (a loop's: its end bound, ``min + extent``),
    remembered in the guard."""
    node, scope, resolved = guard
    if resolved is None:
        if isinstance(node, tirx.For):
            node = tirx.Add(node.min, node.extent)
        resolved = guard[2] = scope.resolve(node)
    return resolved


def _locals_reached_by_calls(body: Any) -> set[int]:
    """Handles of the local buffers named inside an ``Evaluate``'s call or through
    ``buffer.data``."""
    found: set[int] = set()

    def add(var: Any) -> None:
        if type(var) is ir.expr.Var and is_buffer(var) and buffer_scope(var) == "local":
            found.add(hash(var))

    def check(node: Any) -> None:
        if type(node) is tirx.Evaluate:
            # (its free variables, in one C++ walk: a buffer is never bound inside an
            # expression, so every buffer named there is among them)
            for var in ffi_list(tirx.analysis.undefined_vars(node.value, [])):
                add(var)
        elif isinstance(node.op, ir.Op) and op_name(node.op) == "tirx.buffer_data":
            for arg in ffi_list(node.args):  # (`S.data`: the buffer is its operand)
                add(arg)

    post_order_visit(body, check, (tirx.Evaluate, ir.expr.Call))
    return found


def uniform_local_buffers(
    func: tirx.PrimFunc, dependent: Callable[[Any, frozenset[Any]], bool] | None = None
) -> frozenset[Any]:
    """The ``local`` buffers of ``func`` whose value is the same in every thread.

    Args:
        func: a kernel; threads bound by ``T.thread_binding`` or ``T.launch_thread``.
        dependent: ``dependent(expr, uniform)``: whether ``expr`` may differ between
            threads when the local buffers in ``uniform`` are the same in every thread
            (default: :func:`~tilewave.analysis.shared_access.is_thread_dependent`, which
            takes every other load as different; the uniformity analysis passes its own).

    Returns:
        the buffer variables (``Var`` typed ``BufferType``), usable as the ``uniform``
        argument of :func:`tilewave.analysis.shared_access.is_thread_dependent`.
    """
    stores: list[_Store] = []
    _collect(func.body, AccessScope(), (), stores)
    if not stores:
        return frozenset()
    thread_vars = list(collect_thread_extents(func))
    if dependent is None:
        def dependent(expr: Any, uniform: frozenset[Any]) -> bool:
            return is_thread_dependent(expr, thread_vars, uniform)
    reached = _locals_reached_by_calls(func.body)
    candidates = {hash(s.buffer): s.buffer for s in stores if hash(s.buffer) not in reached}
    # `dependent` only grows as locals leave the uniform set, and a local's leaving matters
    # only to the stores that load it: judge each store once with every candidate uniform,
    # then propagate along the loads (the fixed point of re-judging every store per round)
    everything = frozenset(candidates.values())
    loads: dict[int, set[int]] = {}
    pending: list[int] = []
    for store in stores:
        key = hash(store.buffer)
        if key not in candidates:
            continue
        exprs = store.exprs()
        if any(dependent(e, everything) for e in exprs):
            pending.append(key)
            continue
        for source in _locals_loaded(exprs):
            if source in candidates:
                loads.setdefault(source, set()).add(key)
    uniform = dict(candidates)
    while pending:
        key = pending.pop()
        if uniform.pop(key, None) is not None:
            pending.extend(loads.get(key, ()))
    return frozenset(uniform.values())


def _locals_loaded(exprs: tuple[Any, ...]) -> set[int]:
    """Handles of the buffers loaded anywhere in ``exprs``."""
    found: set[int] = set()
    for expr in exprs:
        post_order_visit(
            expr, lambda load: found.add(hash(load.source)), (ir.expr.TensorLoad,)
        )
    return found
