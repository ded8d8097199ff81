"""Which memory proxy the last shared-memory traffic may have used, at every async-proxy op.

Hopper (sm_90) reaches shared memory through two *proxies*: the generic proxy (``st.shared``,
``ldmatrix``, ``stmatrix``, ``cp.async``) and the async proxy (``wgmma`` operands, TMA /
``cp.async.bulk``). Accesses through different proxies are unordered unless a
``fence.proxy.async`` sits between them (PTX ISA, "Memory Consistency Model: proxies").

:func:`analyze_proxy_state` runs a forward may-dataflow over a PrimFunc's statements in
execution order. The state is the set of proxies the last shared-memory traffic may have
used, drawn from ``{none, generic, async}``; an empty set means "unreachable". It reports,
for every async-proxy op and every proxy fence, the state on entry. It changes nothing.

Transfer rules (per event, in evaluation order inside a statement):

* generic access (shared ``BufferStore``; an op the table marks ``GENERIC_SHARED``; an atomic
  or an op the table does not know whose operands take a shared buffer's address) -> generic;
* async-proxy op (``ASYNC_PROXY`` in the table) -> async;
* proxy fence (``FENCE_PROXY``) -> none;
* barriers, waits and everything else: unchanged. ``bar.sync`` orders threads, not proxies.
* with ``conservative=True`` every statement-level call the table does not know -> generic.

Plain shared *loads* are not generic events (as in the TileLang pass this follows): the
write-after-read hand-off from generic readers to an async writer is ordered by the
mbarrier / barrier protocol kernels already use.

Control flow: ``if`` joins take the union; ``for`` / ``while`` bodies are iterated to a
fixed point (the state at the end of iteration *i* reaches the start of iteration *i+1*, and
a loop may run zero times unless its extent is a positive constant); a thread-binding loop
runs its body once per thread, so it carries nothing around. ``break`` / ``continue`` /
``return`` route their state to the loop exit, the loop head, or nowhere.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import tvm_ffi
from tvm import ir, tirx

from tilewave.analysis.shared_buffers import is_shared_buffer, shared_buffers_addressed
from tilewave.errors import MalformedKernelError
from tilewave.ir.intrinsics import OpEffect, callee_name, classify_call
from tilewave.ir.walker import TIRVisitor, ffi_list, node_fields

__all__ = [
    "Proxy",
    "ProxyEvent",
    "ProxySite",
    "ProxyStateFacts",
    "StmtPath",
    "analyze_proxy_state",
    "child_statements",
]


class Proxy(enum.Enum):
    """The proxy the last shared-memory traffic used (``NONE``: none since the last fence)."""

    NONE = "none"
    GENERIC = "generic"
    ASYNC = "async"


#: A may-state: the proxies the last shared traffic may have used; empty = unreachable.
ProxyState = frozenset[Proxy]
_UNREACHABLE: ProxyState = frozenset()
_START: ProxyState = frozenset({Proxy.NONE})

#: Where a statement sits: ``(field, index)`` steps from the PrimFunc body; ``index`` is the
#: position inside an array field (``SeqStmt.seq``) and ``-1`` for a single-statement field.
StmtPath = tuple[tuple[str, int], ...]


class ProxyEvent(enum.Enum):
    """What one operation does to the proxy state."""

    GENERIC = "generic"
    ASYNC = "async"
    FENCE = "fence"


@dataclass(frozen=True)
class ProxySite:
    """One async-proxy op or proxy fence and the proxy state on entry to its statement.

    Attributes:
        path: where the statement is (see :data:`StmtPath`).
        stmt: the statement (an ``Evaluate`` of the call, usually).
        op_name: the op (or extern callee) name.
        event: ``ProxyEvent.ASYNC`` or ``ProxyEvent.FENCE``.
        incoming: proxies the last shared traffic may have used when the op is reached
            (union over every path and loop iteration).
    """

    path: StmtPath
    stmt: Any
    op_name: str
    event: ProxyEvent
    incoming: ProxyState

    @property
    def may_follow_generic(self) -> bool:
        """True when a generic access may reach this op with no proxy fence in between."""
        return Proxy.GENERIC in self.incoming


@dataclass(frozen=True)
class ProxyStateFacts:
    """Result of :func:`analyze_proxy_state` for one PrimFunc.

    Attributes:
        func_name: the PrimFunc's ``global_symbol`` (or ``None``).
        async_ops: every async-proxy op, in program order.
        fences: every proxy fence already in the function, in program order.
        exit_state: the state when the function body finishes.
    """

    func_name: str | None
    async_ops: tuple[ProxySite, ...]
    fences: tuple[ProxySite, ...]
    exit_state: ProxyState

    def fence_needed_before(self) -> frozenset[StmtPath]:
        """Paths of the statements holding an async op that a generic access may reach."""
        return frozenset(site.path for site in self.async_ops if site.may_follow_generic)


def child_statements(stmt: Any) -> Iterator[tuple[str, int, Any]]:
    """The statements directly inside ``stmt`` as ``(field, index, child)``, in field order.

    ``index`` is the position inside an array field and ``-1`` for a single statement
    (``For.body``, ``IfThenElse.then_case``...). Absent children (``else_case=None``) are
    skipped.
    """
    for name in node_fields(type(stmt)):
        value = getattr(stmt, name)
        if isinstance(value, tirx.Stmt):
            yield name, -1, value
        elif isinstance(value, (tvm_ffi.Array, list, tuple)):
            for index, item in enumerate(value):
                if isinstance(item, tirx.Stmt):
                    yield name, index, item


# ----------------------------------------------------------------------------------------
# Events inside one statement
# ----------------------------------------------------------------------------------------


class _EventCollector(TIRVisitor):
    """Proxy events of the expressions of one statement, in evaluation order.

    Only calls that are not an argument of another call are judged by address: a
    ``cvta_generic_to_shared(S.data)`` inside a TMA op computes the TMA op's operand and is
    not traffic of its own. Nested calls still count when the op table gives them an effect.
    """

    def __init__(self, conservative: bool) -> None:
        self.conservative = conservative
        self.events: list[tuple[ProxyEvent, str]] = []
        self._call_depth = 0

    def visit_Call(self, node: ir.expr.Call) -> None:
        self._call_depth += 1
        self.generic_visit(node)
        self._call_depth -= 1
        event = self._judge(node, top_level=self._call_depth == 0)
        if event is not None:
            self.events.append((event, callee_name(node)))

    def _judge(self, call: ir.expr.Call, top_level: bool) -> ProxyEvent | None:
        effect = classify_call(call)
        if effect is not None:
            if effect & OpEffect.FENCE_PROXY:
                return ProxyEvent.FENCE
            if effect & OpEffect.ASYNC_PROXY:
                return ProxyEvent.ASYNC
            if effect & OpEffect.GENERIC_SHARED:
                return ProxyEvent.GENERIC
            if effect & OpEffect.ATOMIC and top_level and shared_buffers_addressed(call):
                return ProxyEvent.GENERIC  # atom.shared goes through the generic proxy
            return None
        if not top_level:
            return None
        if self.conservative or shared_buffers_addressed(call):
            return ProxyEvent.GENERIC
        return None


def _expression_fields(stmt: Any) -> Iterator[Any]:
    for name in node_fields(type(stmt)):
        value = getattr(stmt, name)
        if isinstance(value, tirx.Stmt):
            continue
        if isinstance(value, (tvm_ffi.Array, list, tuple)) and any(
            isinstance(item, tirx.Stmt) for item in value
        ):
            continue
        yield value


def _own_events(stmt: Any, conservative: bool) -> list[tuple[ProxyEvent, str]]:
    """Events of ``stmt`` itself (its expressions), not of the statements nested in it."""
    collector = _EventCollector(conservative)
    for value in _expression_fields(stmt):
        collector.visit(value)
    if isinstance(stmt, tirx.BufferStore) and is_shared_buffer(stmt.buffer):
        collector.events.append((ProxyEvent.GENERIC, "BufferStore"))
    return collector.events


def _apply(event: ProxyEvent, state: ProxyState) -> ProxyState:
    if not state:
        return state
    if event is ProxyEvent.GENERIC:
        return frozenset({Proxy.GENERIC})
    if event is ProxyEvent.ASYNC:
        return frozenset({Proxy.ASYNC})
    return _START


# ----------------------------------------------------------------------------------------
# The dataflow
# ----------------------------------------------------------------------------------------


@dataclass
class _Flow:
    """States leaving a statement: by falling through, by ``break``, by ``continue``."""

    normal: ProxyState
    breaks: ProxyState = _UNREACHABLE
    continues: ProxyState = _UNREACHABLE


@dataclass
class _Recorder:
    """Union of the entry states seen at each async op / fence over every visit."""

    func_name: str | None
    conservative: bool
    incoming: dict[StmtPath, ProxyState] = field(default_factory=dict)
    kinds: dict[StmtPath, tuple[Any, str, ProxyEvent]] = field(default_factory=dict)
    order: list[StmtPath] = field(default_factory=list)
    events: dict[StmtPath, list[tuple[ProxyEvent, str]]] = field(default_factory=dict)

    def own_events(self, path: StmtPath, stmt: Any) -> list[tuple[ProxyEvent, str]]:
        cached = self.events.get(path)
        if cached is None:
            cached = _own_events(stmt, self.conservative)
            self.events[path] = cached
        return cached

    def record(
        self, path: StmtPath, stmt: Any, name: str, event: ProxyEvent, state: ProxyState
    ) -> None:
        if path not in self.kinds:
            self.kinds[path] = (stmt, name, event)
            self.order.append(path)
            self.incoming[path] = state
        else:
            self.incoming[path] = self.incoming[path] | state


def _run_events(rec: _Recorder, path: StmtPath, stmt: Any, state: ProxyState) -> ProxyState:
    for event, name in rec.own_events(path, stmt):
        if event is not ProxyEvent.GENERIC:
            rec.record(path, stmt, name, event, state)
        state = _apply(event, state)
    return state


def _is_thread_loop(stmt: tirx.For) -> bool:
    return int(stmt.kind) == int(tirx.ForKind.THREAD_BINDING)


def _constant_extent(stmt: tirx.For) -> int | None:
    extent = stmt.extent
    return int(extent.value) if isinstance(extent, tirx.IntImm) else None


def _flow(rec: _Recorder, path: StmtPath, stmt: Any, state: ProxyState) -> _Flow:
    if isinstance(stmt, tirx.SeqStmt):
        return _flow_seq(rec, path, stmt, state)
    if isinstance(stmt, tirx.For):
        return _flow_for(rec, path, stmt, _run_events(rec, path, stmt, state))
    if isinstance(stmt, tirx.While):
        return _flow_while(rec, path, stmt, state)
    if isinstance(stmt, tirx.IfThenElse):
        state = _run_events(rec, path, stmt, state)
        then = _flow(rec, (*path, ("then_case", -1)), stmt.then_case, state)
        if stmt.else_case is None:
            other = _Flow(state)
        else:
            other = _flow(rec, (*path, ("else_case", -1)), stmt.else_case, state)
        return _Flow(
            then.normal | other.normal, then.breaks | other.breaks, then.continues | other.continues
        )
    if isinstance(stmt, tirx.Break):
        return _Flow(_UNREACHABLE, breaks=state)
    if isinstance(stmt, tirx.Continue):
        return _Flow(_UNREACHABLE, continues=state)
    state = _run_events(rec, path, stmt, state)
    if isinstance(stmt, tirx.Return):
        return _Flow(_UNREACHABLE)
    # Any other statement with nested statements (AttrStmt...): run them in field order.
    flow = _Flow(state)
    for name, index, child in child_statements(stmt):
        inner = _flow(rec, (*path, (name, index)), child, flow.normal)
        flow = _Flow(inner.normal, flow.breaks | inner.breaks, flow.continues | inner.continues)
    return flow


def _flow_seq(rec: _Recorder, path: StmtPath, stmt: tirx.SeqStmt, state: ProxyState) -> _Flow:
    flow = _Flow(state)
    for index, child in enumerate(ffi_list(stmt.seq)):
        inner = _flow(rec, (*path, ("seq", index)), child, flow.normal)
        flow = _Flow(inner.normal, flow.breaks | inner.breaks, flow.continues | inner.continues)
    return flow


def _iterate(
    rec: _Recorder,
    body_path: StmtPath,
    body: Any,
    entry: ProxyState,
    head_events: tuple[StmtPath, Any] | None,
) -> tuple[ProxyState, _Flow]:
    """Least fixed point of ``head = entry | body(head)``; returns (head, last body flow)."""
    head = entry
    while True:
        checked = _run_events(rec, *head_events, head) if head_events else head
        body_flow = _flow(rec, body_path, body, checked)
        new_head = head | body_flow.normal | body_flow.continues
        if new_head == head:
            return head, body_flow
        head = new_head


def _flow_for(rec: _Recorder, path: StmtPath, stmt: tirx.For, state: ProxyState) -> _Flow:
    body_path = (*path, ("body", -1))
    extent = _constant_extent(stmt)
    if extent == 0 or not state:
        return _Flow(state)
    if _is_thread_loop(stmt) or extent == 1:
        body = _flow(rec, body_path, stmt.body, state)
        return _Flow(body.normal | body.continues | body.breaks)
    head, body = _iterate(rec, body_path, stmt.body, state, None)
    # A loop that surely runs (positive constant extent) cannot exit on the entry state.
    exits = body.normal | body.continues if extent is not None else head
    return _Flow(exits | body.breaks)


def _flow_while(rec: _Recorder, path: StmtPath, stmt: tirx.While, state: ProxyState) -> _Flow:
    if not state:
        return _Flow(state)
    # The condition is evaluated before every iteration and once more before leaving.
    head, body = _iterate(rec, (*path, ("body", -1)), stmt.body, state, (path, stmt))
    return _Flow(_run_events(rec, path, stmt, head) | body.breaks)


def analyze_proxy_state(func: tirx.PrimFunc, conservative: bool = False) -> ProxyStateFacts:
    """Compute the proxy state on entry to every async-proxy op and proxy fence of ``func``.

    Args:
        func: the PrimFunc to analyse.
        conservative: treat every statement-level call the op table does not know as a
            generic shared access (default: such calls leave the state unchanged unless they
            take a shared buffer's address).

    Returns:
        A :class:`ProxyStateFacts`; the function is not modified.

    Raises:
        MalformedKernelError: ``func`` is not a ``tvm.tirx.PrimFunc``.

    Example::

        facts = analyze_proxy_state(kernel)
        for site in facts.async_ops:
            print(site.op_name, sorted(p.value for p in site.incoming))
    """
    if not isinstance(func, tirx.PrimFunc):
        raise MalformedKernelError(
            f"analyze_proxy_state: expected a tvm.tirx.PrimFunc, got {type(func).__name__}. "
            "Pass one function of the IRModule (mod['main']) or use the InjectFenceProxy pass."
        )
    attrs = func.attrs
    name = str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else None
    rec = _Recorder(name, conservative)
    exit_flow = _flow(rec, (), func.body, _START)
    # Paths are first recorded in program order: the walk is forward and in field order.
    sites = [ProxySite(path, *rec.kinds[path], rec.incoming[path]) for path in rec.order]
    return ProxyStateFacts(
        func_name=name,
        async_ops=tuple(s for s in sites if s.event is ProxyEvent.ASYNC),
        fences=tuple(s for s in sites if s.event is ProxyEvent.FENCE),
        exit_state=exit_flow.normal,
    )
