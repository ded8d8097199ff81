"""Commit groups for kernels whose cp.async copies carry no ``commit_group``.

``cp.async.wait_group N`` only retires *committed* groups: a copy issued after the last
``commit_group`` is never waited for. A kernel written without any commit (or stripped of
its synchronisation) gets one group per run of copies here, before InsertSharedBarriers
chooses its waits: a ``T.tilewave.commit_async_ops()`` right after the last statement of
each maximal run of copy statements in a statement list. Copies issued together (the A and
B tiles of one pipeline stage, a copy loop) form one group, so a later ``wait_group N`` can
retire an older stage while the newer ones stay in flight.

A statement belongs to a run when every shared access under it is a cp.async copy (global
loads, index arithmetic and ``Bind`` statements between copies do not end a run); a
compound statement that also reads shared memory or synchronises is entered and handled
the same way inside. Kernels that already commit somewhere are left alone: their groups
are the author's.
"""

from __future__ import annotations

from typing import Any

from tvm import ir, tirx

from tilewave.analysis.shared_access import (
    GROUP_COPY_PREFIXES,
    AccessKind,
    AccessScope,
    SyncKind,
    is_leaf_statement,
    statement_accesses,
    sync_action,
)
from tilewave.ir.intrinsics import op_name
from tilewave.ir.ops import call_op
from tilewave.ir.walker import node_is, post_order_visit, rebuild, seq_stmt, statements_of

__all__ = ["commit_copy_runs", "has_commits", "issues_group_copies", "waits_on_groups"]

_COPY, _NEUTRAL, _OTHER, _MIXED = "copy", "neutral", "other", "mixed"


def has_commits(body: Any) -> bool:
    """True when ``body`` commits cp.async groups itself (``commit_group``/``wait_all``)."""
    found = False

    def check(node: Any) -> None:
        nonlocal found
        action = sync_action(node)  # (None for anything but an Evaluate)
        if action is not None and (action.commits or action.kind is SyncKind.ASYNC_COMMIT):
            found = True

    post_order_visit(body, check, (tirx.Evaluate,))
    return found


def issues_group_copies(body: Any) -> bool:
    """True when ``body`` issues a cp.async copy (an op that joins cp.async commit groups):
    without one no statement is a copy run, so there is nothing to commit."""
    found = False

    def check(node: Any) -> None:
        nonlocal found
        op = node.op
        if not found and type(op) is ir.Op:  # (exact: no subclasses, no ABC check)
            found = op_name(op).startswith(GROUP_COPY_PREFIXES)

    post_order_visit(body, check, (ir.expr.Call,))
    return found


def _leaf_role(stmt: Any, func_name: str | None, scope: AccessScope) -> str:
    if sync_action(stmt) is not None:
        return _OTHER
    accesses = statement_accesses(stmt, scope, func_name)
    if not accesses:
        return _NEUTRAL
    if all(a.kind is AccessKind.ASYNC_WRITE and a.async_group for a in accesses):
        return _COPY
    return _OTHER


def _children(stmt: Any) -> list[Any]:
    kind = type(stmt)  # (TIR node classes have no subclasses: exact tests, no ABC check)
    if kind is tirx.SeqStmt:
        return list(statements_of(stmt))
    if kind is tirx.IfThenElse:
        return [stmt.condition, stmt.then_case] + (
            [stmt.else_case] if stmt.else_case is not None else []
        )
    if kind is tirx.While:
        return [stmt.condition, stmt.body]
    return [stmt.body]


def _pointer_bindings(body: Any) -> AccessScope:
    """The pointer ``Bind`` statements of ``body`` in program order, as one scope: a copy
    through a pointer (``p = T.address_of(S[i])`` then ``cp.async(p, ...)``) is a copy of
    ``S``. A TIR variable is bound once, so the whole body's bindings resolve each use."""
    scope = AccessScope()

    def check(node: Any) -> None:
        nonlocal scope
        if isinstance(node.var.ty, ir.PointerType):
            scope = scope.binding(node.var, node.value)

    post_order_visit(body, check, (tirx.Bind,))
    return scope


def _copy_leaves(body: Any) -> set[int]:
    """Handles of the leaf statements of :data:`_WALKED_TYPES` under ``body`` that may
    issue a cp.async copy (leaves of other classes are never ruled out). In post order a
    leaf's calls come right after the leaf before it, so a copy call marks the next leaf
    walked: its own, or (for a call in an ``if`` condition or loop bound) a later one,
    which only costs that leaf an exact look."""
    marked: set[int] = set()
    pending = False

    def check(node: Any) -> None:
        nonlocal pending
        if type(node) is ir.expr.Call:
            op = node.op
            pending = pending or (type(op) is ir.Op and op_name(op).startswith(GROUP_COPY_PREFIXES))
        elif is_leaf_statement(node):
            if pending:
                marked.add(hash(node))
            pending = False

    post_order_visit(body, check, _WALKED_TYPES)
    return marked


#: the calls and leaf statements :func:`_copy_leaves` walks (leaf classes outside it are
#: never ruled out)
_WALKED_TYPES = (ir.expr.Call, tirx.BufferStore, tirx.Evaluate, tirx.Bind)


class _Committer:
    """Roles of statements (whether they copy, touch shared memory otherwise, or both) and
    the rewrite that closes each copy run. A statement that cannot issue a copy is either
    NEUTRAL or OTHER, and that difference only matters next to copies: it is worked out
    only there (most of a kernel's statements are compute that never meets a copy run)."""

    def __init__(self, func_name: str | None, body: Any) -> None:
        self.func_name = func_name
        self._roles: dict[Any, str] = {}
        self._scope = _pointer_bindings(body)
        self._copy_leaves = _copy_leaves(body)
        self._may_copy: dict[Any, bool] = {}

    def may_copy(self, stmt: Any) -> bool:
        """False when no statement under ``stmt`` issues a cp.async copy (its role is then
        NEUTRAL or OTHER)."""
        if not node_is(stmt, tirx.Stmt):
            return True  # a condition: looked at exactly
        found = self._may_copy.get(stmt)
        if found is None:
            if is_leaf_statement(stmt):
                found = hash(stmt) in self._copy_leaves or not node_is(stmt, _WALKED_TYPES)
            else:
                found = any(self.may_copy(child) for child in _children(stmt))
            self._may_copy[stmt] = found
        return found

    def role(self, stmt: Any) -> str:
        """COPY, NEUTRAL, OTHER (shared access or sync, no copy) or MIXED (both)."""
        if not node_is(stmt, tirx.Stmt):
            return _leaf_role(tirx.Evaluate(stmt), self.func_name, self._scope)
        if stmt not in self._roles:
            if is_leaf_statement(stmt):
                role = _leaf_role(stmt, self.func_name, self._scope)
            else:
                role = self._compound_role(_children(stmt))
            self._roles[stmt] = role
        return self._roles[stmt]

    def _compound_role(self, children: list[Any]) -> str:
        roles: set[str] = set()
        for child in children:
            if _OTHER in roles and not self.may_copy(child):
                continue  # NEUTRAL or OTHER: changes nothing once OTHER is known
            roles.add(self.role(child))
            if _MIXED in roles or {_COPY, _OTHER} <= roles:
                return _MIXED
        roles.discard(_NEUTRAL)
        if not roles:
            return _NEUTRAL
        return roles.pop()  # COPY or OTHER

    def rewrite(self, stmt: Any) -> Any:
        """``stmt`` with a commit after every run of copies inside it."""
        if type(stmt) is tirx.SeqStmt:
            return self._sequence(list(statements_of(stmt)), stmt)
        if not self.may_copy(stmt) or self.role(stmt) != _MIXED or is_leaf_statement(stmt):
            return stmt
        if type(stmt) is tirx.IfThenElse:
            changes = {"then_case": self._body(stmt.then_case)}
            if stmt.else_case is not None:
                changes["else_case"] = self._body(stmt.else_case)
            return rebuild(stmt, changes)
        return rebuild(stmt, {"body": self._body(stmt.body)})

    def _body(self, stmt: Any) -> Any:
        if self.role(stmt) == _COPY:
            return seq_stmt([stmt, call_op("tilewave.commit_async_ops")])
        return self.rewrite(stmt)

    def _sequence(self, children: list[Any], original: Any) -> Any:
        out: list[Any] = []
        run_end: int | None = None  # index in `out` after the run's last copy statement

        def close() -> None:
            nonlocal run_end
            if run_end is not None:
                out.insert(run_end, call_op("tilewave.commit_async_ops"))
                run_end = None

        for child in children:
            if run_end is None and not self.may_copy(child):
                out.append(child)  # NEUTRAL or OTHER with no run open: kept as it is
                continue
            role = self.role(child)
            if role == _COPY:
                out.append(child)
                run_end = len(out)
            elif role == _NEUTRAL:
                out.append(child)
            else:
                close()
                out.append(self.rewrite(child) if role == _MIXED else child)
        close()
        unchanged = len(out) == len(children) and all(
            a.same_as(b) for a, b in zip(out, children, strict=True)
        )
        if unchanged:
            return original
        return seq_stmt(out)


def commit_copy_runs(body: Any, func_name: str | None = None) -> Any:
    """``body`` with ``commit_async_ops`` after each run of cp.async copies, unless it
    already commits groups itself (then it is returned unchanged)."""
    if not issues_group_copies(body) or has_commits(body):
        return body  # (without a copy no statement has the COPY role: nothing is MIXED)
    committer = _Committer(func_name, body)
    if committer.role(body) != _MIXED:
        return body  # nothing reads what the copies write: no group needs closing
    return committer.rewrite(body)


def waits_on_groups(body: Any) -> bool:
    """True when a wait under ``body`` retires groups (``wait_group N`` of some unit): the
    only statements that read where :func:`commit_copy_runs` put its commits."""
    found = False

    def check(node: Any) -> None:
        nonlocal found
        action = sync_action(node)  # (None for anything but an Evaluate)
        found = found or (action is not None and action.groups)

    post_order_visit(body, check, (tirx.Evaluate,))
    return found
