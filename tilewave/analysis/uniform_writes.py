"""Stores that every thread of a block makes identically: same element, same value.

A cooperative copy of one row that every thread performs (``for i in range(n): S[i] =
A[row, i]``) or a block-wide value written by all threads (``v = T.bind(A[k] * 2.0);
S[0] = v``) writes each element with the same value from every thread. Two such stores
never need a barrier between them: every thread performs the same sequence of them, so
the last write to any byte, whichever thread makes it, is the last store of that
sequence that covers the byte; intermediate states are only visible to reads, and every
read still pairs with the stores on its own (RAW and WAR are unchanged).

:func:`writes_same_everywhere` recognises such a store: a plain ``BufferStore`` whose
indices and value (``Bind`` values and single-assignment scalars seen through) read no
thread index, no shared or local memory and call nothing, under path conditions and loop
bounds that read no thread index either, not in a ``While`` body nor in a loop with a
``break``/``continue`` (every thread runs the same iterations). Global
memory read at a block-uniform index has one value for every thread of the block unless
someone writes it meanwhile, which is a global-memory race of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tvm import ir, tirx

from tilewave.analysis.access_model import AccessKind, SharedAccess
from tilewave.analysis.shared_buffers import buffer_scope
from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import ffi_list, post_order_visit
from tilewave.kernel_memory import kernel_table

__all__ = ["stores_alike", "writes_same_everywhere"]

_PER_THREAD_SCOPES = frozenset({"shared", "shared.dyn", "local", "warp", "wmma.accumulator"})


def _uniform(expr: Any, thread_vars: Iterable[Any]) -> bool:
    """True when ``expr`` has one value in every thread of the block (see the module doc)."""
    # a thread index is a free variable of the expression: one C++ walk finds it
    handles = {hash(t) for t in thread_vars}
    kind = type(expr)
    if kind is ir.expr.Var:  # (the common index: no walk)
        return hash(expr) not in handles
    if kind is tirx.IntImm:
        return True
    if any(hash(v) in handles for v in ffi_list(tirx.analysis.undefined_vars(expr, []))):
        return False
    ok = True

    def check(node: Any) -> None:
        nonlocal ok
        if not ok:
            return
        if type(node).__name__ == "TensorLoad":
            scope = buffer_scope(node.source)
            ok = scope is not None and scope not in _PER_THREAD_SCOPES
        elif isinstance(node, (ir.expr.Call, tirx.Let)):
            ok = False

    post_order_visit(expr, check, (ir.expr.TensorLoad, ir.expr.Call, tirx.Let))
    return ok


_LOOP_EXITS = frozenset({"tirx.break_loop", "tirx.continue_loop"})
#: ``For`` statement -> whether a ``break``/``continue`` sits in its body (the statement is
#: kept as the key, so a freed node's handle cannot be mistaken for it)
_EXITING: dict[Any, bool] = kernel_table()


def _exits_early(loop: Any) -> bool:
    """Whether ``loop``'s body can leave an iteration early (``break`` / ``continue``: a
    thread may then skip stores the others make); ``None`` (no identified loop): True."""
    if loop is None:
        return True
    if loop not in _EXITING:
        found = False

        def check(node: Any) -> None:
            nonlocal found
            op = getattr(node, "op", None) if isinstance(node, ir.expr.Call) else None
            found = found or (isinstance(op, ir.Op) and op_name(op) in _LOOP_EXITS)

        post_order_visit(loop.body, check, (ir.expr.Call,))
        if len(_EXITING) > 4096:
            _EXITING.clear()
        _EXITING[loop] = found
    return _EXITING[loop]


def writes_same_everywhere(access: SharedAccess, thread_extents: Mapping[Any, int]) -> bool:
    """True when every thread that runs ``access`` (a plain store) runs it in the same
    iterations and writes the same value to the same element (cached per access)."""
    cached = access.memo.get("writes_same_everywhere")
    if cached is not None and cached[0] == id(thread_extents):
        return cached[1]
    verdict = _same_everywhere(access, list(thread_extents))
    access.memo["writes_same_everywhere"] = (id(thread_extents), verdict)
    return verdict


def _same_everywhere(access: SharedAccess, thread_vars: list[Any]) -> bool:
    stmt = access.stmt
    if (
        not isinstance(stmt, tirx.BufferStore)
        or access.is_async
        or access.collective
        or access.indices is None
        or not stmt.buffer.same_as(access.buffer)
        or not access.kind.writes
        or access.kind.reads
    ):
        return False
    scope = access.scope
    if scope.in_while:  # threads may run the body different numbers of times
        return False
    for loop in access.loops:
        if loop.bounds is None or not loop.aligned or _exits_early(loop.loop):
            return False
    # cheapest first: an index on the thread index (the common case) settles it
    if not all(_uniform(expr, thread_vars) for expr in access.resolved_indices or ()):
        return False
    exprs = [access._forward(scope.resolve(stmt.value))]
    exprs += [scope.resolve(cond) for cond, _ in scope.conditions]
    for loop in access.loops:
        exprs += list(loop.bounds)
    return all(_uniform(expr, thread_vars) for expr in exprs)


def stores_alike(a: SharedAccess, b: SharedAccess, thread_extents: Mapping[Any, int]) -> bool:
    """True when ``a`` and ``b`` are both plain stores that every thread makes alike (see
    the module doc): no order is needed between them."""
    return (
        a.kind is AccessKind.WRITE
        and b.kind is AccessKind.WRITE
        and writes_same_everywhere(a, thread_extents)
        and writes_same_everywhere(b, thread_extents)
    )
