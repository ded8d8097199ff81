"""Shared-memory accesses of TIR statements, their regions, and the synchronisation ops.

This module answers three local questions that both the barrier pass and the hazard
verifier ask (neither of them reasons about control-flow paths here):

* which shared accesses one *leaf* statement makes (:func:`statement_accesses`), each a
  :class:`SharedAccess` — READ, WRITE, ATOMIC (read-modify-write) or ASYNC_WRITE
  (a global->shared copy that completes later);
* whether two accesses made by *different threads* may touch the same element
  (:func:`may_conflict`);
* what a statement does as synchronisation (:func:`sync_action`): a full barrier, one
  half of a split barrier, or a wait for outstanding async copies.

Regions are proven disjoint by cheap rules first (the index intervals of some dimension
do not overlap; every thread index of extent > 1 maps injectively onto some dimension,
``S[tx]``, ``S[31 - tx]``, ``S[ty*32 + tx*4 + k]``), then by
:func:`tilewave.analysis.region_proof.prove_no_overlap`, which uses the accesses' path
conditions, ``Bind`` values and iteration distances (:class:`AccessScope`): index bounds
with the related loops at their values first
(:mod:`tilewave.analysis.interval_bounds`), then enumeration, then the analyzer. Anything
unproven (pointer operands, loads in indices, unknown bounds) may conflict.

The access model itself (:class:`SharedAccess`, :class:`AccessKind`, :class:`AccessScope`,
:class:`LoopRange`) lives in :mod:`tilewave.analysis.access_model`, below the proofs that
read it; it is re-exported here.
"""

from __future__ import annotations

import enum
import functools
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tvm import ir, tirx

from tilewave.analysis.access_model import (
    ANY_MEMORY,
    AccessKind,
    AccessScope,
    LoopRange,
    SharedAccess,
    is_thread_dependent,
)
from tilewave.analysis.copy_regions import MATRIX_ROW_OPS, copy_region
from tilewave.analysis.footprint import FootprintCache, loops_read
from tilewave.analysis.hopper_ops import (
    DescriptorSource,
    descriptor_region,
    mbarrier_element,
    mbarrier_operand,
    mbarrier_role,
    tma_load_destination,
    wgmma_descriptor_operands,
)
from tilewave.analysis.index_enumeration import small_spaces_overlap, whole_space_points
from tilewave.analysis.interval_bounds import (
    apart_with_loops_fixed_each,
    fix_signature,
    index_bounds,
    variable_ranges,
)
from tilewave.analysis.plain_loads import plain_loads
from tilewave.analysis.region_proof import ANY, FAR, common_loops, prove_no_overlap
from tilewave.analysis.shared_buffers import (
    is_shared_buffer,
    shared_buffers_addressed,
    takes_address_call,
)
from tilewave.analysis.storage_identity import (
    StorageMap,
    StorageRelation,
    address_start,
    common_unit,
    storage_relation,
    unit_index,
)
from tilewave.analysis.uniform_writes import stores_alike, writes_same_everywhere
from tilewave.errors import MalformedKernelError, where
from tilewave.ir.intrinsics import (
    OpEffect,
    callee_name,
    classify_call,
    op_name,
    require_classification,
)
from tilewave.ir.walker import (
    TIRVisitor,
    ffi_list,
    node_is,
    post_order_visit,
    statements_of,
    substitute,
)
from tilewave.kernel_memory import kernel_table, node_fact

__all__ = [
    "ANY",
    "ANY_MEMORY",
    "FAR",
    "AccessKind",
    "AccessScope",
    "EarlierAccess",
    "LoopRange",
    "SharedAccess",
    "SyncAction",
    "SyncKind",
    "collect_thread_extents",
    "is_leaf_statement",
    "is_thread_dependent",
    "may_conflict",
    "nested_statements",
    "proven_apart_together",
    "repeated_loops",
    "same_iteration",
    "statement_accesses",
    "sync_action",
    "touches_shared_or_sync",
]


# ---------------------------------------------------------------------------------------
# Synchronisation ops


class SyncKind(enum.Enum):
    """The synchronisation effect of one statement."""

    BARRIER = "barrier"  # every thread arrives and waits (bar.sync, s_barrier)
    SIGNAL = "signal"  # split barrier: arrive
    WAIT = "wait"  # split barrier: wait for all arrivals
    ASYNC_WAIT = "async_wait"  # wait for this thread's outstanding async copies
    ASYNC_WAIT_BARRIER = "async_wait_barrier"  # both (an mbarrier phase wait on a TMA)
    ASYNC_COMMIT = "async_commit"  # close the thread's open group of async copies
    MBAR_ARRIVE = "mbarrier_arrive"  # arrive on an mbarrier (point to point, any threads)
    MBAR_WAIT = "mbarrier_wait"  # wait for an mbarrier phase (point to point, any threads)


@dataclass(frozen=True)
class SyncAction:
    """What a synchronisation statement does; ``arg`` is the barrier id or the wait count."""

    kind: SyncKind
    arg: int = 0
    #: for ASYNC_WAIT: the wait is a cp.async group wait (``wait_group arg`` retires all but
    #: the newest ``arg`` committed groups; copies not yet committed are not retired)
    groups: bool = False
    #: for ASYNC_WAIT: the open group is committed first (``cp.async.wait_all``)
    commits: bool = False
    #: for ASYNC_COMMIT / group waits: the unit whose groups it counts
    domain: str = "cp.async"
    #: for MBAR_ARRIVE / MBAR_WAIT: the mbarrier buffer
    barrier: Any = None

    @property
    def completes_async(self) -> bool:
        """True when every outstanding async copy of the thread has landed afterwards
        (for group copies: every *committed* one, see :meth:`retires_group`)."""
        return (self.kind is SyncKind.ASYNC_WAIT and self.arg == 0) or (
            self.kind is SyncKind.ASYNC_WAIT_BARRIER
        )

    def retires_group(self, newer: int) -> bool:
        """Whether this action retires a committed cp.async group that has ``newer``
        committed groups after it (``wait_group N`` retires those with ``newer >= N``)."""
        if self.kind is SyncKind.ASYNC_WAIT_BARRIER:
            return False  # an mbarrier phase says nothing about cp.async groups
        return self.kind is SyncKind.ASYNC_WAIT and newer >= self.arg

    @property
    def is_full_barrier(self) -> bool:
        """True for a barrier that both signals and waits."""
        return self.kind in (SyncKind.BARRIER, SyncKind.ASYNC_WAIT_BARRIER)


_ARRIVE_ONLY_PREFIXES = (
    "tirx.ptx.bar_arrive",
    "tirx.ptx.barrier_arrive",
    "tirx.ptx.mbarrier_arrive",
)
_NO_WAIT_COUNT = 1 << 30  # a wait whose count we cannot read: never "all copies done"
_COMMIT_OPS = frozenset({"tilewave.commit_async_ops", "tirx.ptx.cp_async_commit_group"})
#: async units with their own commit/wait groups: domain -> (commit op, wait op)
_GROUP_OPS = {
    "wgmma": ("tirx.ptx.wgmma_commit_group", "tirx.ptx.wgmma_wait_group"),
    "bulk": ("tirx.ptx.cp_async_bulk_commit_group", "tirx.ptx.cp_async_bulk_wait_group"),
}
#: async copies that complete through cp.async commit/wait groups
#: ops whose copies join cp.async commit groups (async domain ``"cp.async"``)
GROUP_COPY_PREFIXES = ("tirx.ptx.cp_async_ca", "tirx.ptx.cp_async_cg", "tirx.s_tir.cp_async_raw")


def _int_arg(call: ir.expr.Call, index: int, default: int) -> int:
    if len(call.args) > index and isinstance(call.args[index], tirx.IntImm):
        return int(call.args[index].value)
    return default


def sync_action(stmt: Any) -> SyncAction | None:
    """The synchronisation a leaf statement performs, or ``None`` if it is not one.

    tilewave's own ops map directly; foreign ops are read from the op table: a BARRIER op
    that only arrives (``bar.arrive``, ``mbarrier.arrive``) synchronises nothing by itself
    and is ignored; other BARRIER ops count as full barriers.
    """
    if type(stmt) is not tirx.Evaluate:  # (exact: no subclasses, and no ABC check)
        return None
    # (remembered per statement: the commit, wait and role analyses and the placer each
    # ask about every Evaluate of a kernel; the op table's changes forget kernels)
    return node_fact(_ACTIONS, stmt, _sync_action_of, _ACTIONS_LIMIT)


#: sync_action's answers by statement handle, with the statement
_ACTIONS: dict[int, tuple[SyncAction | None, Any]] = kernel_table()
_ACTIONS_LIMIT = 100_000


def _sync_action_of(stmt: Any) -> SyncAction | None:
    call = stmt.value
    if type(call) is not ir.expr.Call:
        return None
    name = callee_name(call)
    if name == "tilewave.barrier_signal":
        return SyncAction(SyncKind.SIGNAL, _int_arg(call, 0, -1))
    if name == "tilewave.barrier_wait":
        return SyncAction(SyncKind.WAIT, _int_arg(call, 0, -1))
    if name in ("tilewave.wait_async_ops", "tirx.ptx.cp_async_wait_group"):
        return SyncAction(SyncKind.ASYNC_WAIT, _int_arg(call, 0, _NO_WAIT_COUNT), groups=True)
    if name == "tirx.ptx.cp_async_wait_all":
        return SyncAction(SyncKind.ASYNC_WAIT, 0, groups=True, commits=True)
    if name in _COMMIT_OPS:
        return SyncAction(SyncKind.ASYNC_COMMIT)
    for domain, (commit, wait) in _GROUP_OPS.items():
        if name == commit:
            return SyncAction(SyncKind.ASYNC_COMMIT, domain=domain)
        if name == wait:
            count = _int_arg(call, 0, _NO_WAIT_COUNT)
            return SyncAction(SyncKind.ASYNC_WAIT, count, groups=True, domain=domain)
    role = mbarrier_role(call)
    if role is not None:
        barrier = mbarrier_operand(call)
        if barrier is None:
            return None
        kind = SyncKind.MBAR_WAIT if role == "wait" else SyncKind.MBAR_ARRIVE
        return SyncAction(kind, barrier=barrier)
    effect = classify_call(call)
    if effect is None:
        return None
    if OpEffect.BARRIER in effect:
        if name.startswith(_ARRIVE_ONLY_PREFIXES):
            return None
        if OpEffect.ASYNC_WAIT in effect:
            return SyncAction(SyncKind.ASYNC_WAIT_BARRIER)
        return SyncAction(SyncKind.BARRIER)
    if OpEffect.ASYNC_WAIT in effect:
        return SyncAction(SyncKind.ASYNC_WAIT, _NO_WAIT_COUNT)
    return None


# ---------------------------------------------------------------------------------------
# Access collection


_LEAF_TYPES = (tirx.BufferStore, tirx.Evaluate)


def is_leaf_statement(stmt: Any) -> bool:
    """True for statements with no nested statements (stores, evaluates, bindings...)."""
    kind = type(stmt)
    found = _LEAF_BY_TYPE.get(kind)
    if found is None:
        found = isinstance(stmt, _LEAF_TYPES) or (
            not any(
                isinstance(getattr(stmt, name, None), tirx.Stmt)
                for name in ("body", "then_case", "else_case", "seq")
            )
            and not isinstance(stmt, tirx.SeqStmt)
        )
        if isinstance(stmt, tirx.Stmt):
            # a statement class's nested fields are statements in every instance (an
            # ``if``'s then_case always is): one answer per class
            _LEAF_BY_TYPE[kind] = found
    return found


def nested_statements(stmt: Any) -> list[Any]:
    """The statements directly inside ``stmt``, in program order: a list's items, an
    ``if``'s branches, the body of any other compound statement; none for a leaf."""
    kind = type(stmt)  # (TIR node classes have no subclasses: exact type tests)
    if kind is tirx.SeqStmt:
        return list(statements_of(stmt))
    if kind is tirx.IfThenElse:
        return [stmt.then_case] if stmt.else_case is None else [stmt.then_case, stmt.else_case]
    if is_leaf_statement(stmt):
        return []
    body = getattr(stmt, "body", None)
    return [body] if node_is(body, tirx.Stmt) else []


_LEAF_BY_TYPE: dict[type, bool] = {}


class _AccessCollector(TIRVisitor):
    """Collects accesses of one expression tree in evaluation order (operands first)."""

    def __init__(self) -> None:
        self.reset(None, _NO_SCOPE, None)

    def reset(
        self,
        stmt: Any,
        scope: AccessScope,
        func_name: str | None,
        descriptors: Mapping[Any, list[DescriptorSource]] | None = None,
        scalars: Mapping[Any, Any] | None = None,
        storage: StorageMap | None = None,
    ) -> None:
        """Start collecting the accesses of another statement (a collector is reused:
        building its C++ dispatch entries costs more than walking a statement's value)."""
        self.accesses: list[SharedAccess] = []
        self._storage = storage
        self._descriptors = descriptors
        self._scalars = scalars
        self._stmt = stmt
        self._scope = scope
        self._func_name = func_name
        self._depth = 0
        self._in_address = 0

    def add(
        self,
        buffer: Any,
        kind: AccessKind,
        indices: Iterable[Any] | None,
        extra_loop: LoopRange | None = None,
        async_domain: str | None = None,
        collective: bool = False,
        completes_on: Any = None,
    ) -> None:
        idx = None if indices is None else tuple(ffi_list(indices))
        loops = self._scope.loops + ((extra_loop,) if extra_loop is not None else ())
        access = SharedAccess(buffer, kind, idx, self._stmt, loops, self._scope)
        access.async_domain = async_domain
        access.completes_on = completes_on
        access.collective = collective
        access.scalars = self._scalars
        if self._storage is not None:
            access.storage = self._storage.of(buffer)
        self.accesses.append(access)

    def visit_TensorLoad(self, node: Any) -> None:
        self.generic_visit(node)
        if is_shared_buffer(node.source) and not self._in_address:
            self.add(node.source, AccessKind.READ, node.indices)

    def visit_Call(self, node: ir.expr.Call) -> None:
        # A call nested in another (an address conversion inside cp.async) is the outer
        # call's operand: only the outer call says what happens to the memory.
        takes_address = takes_address_call(node)
        self._depth += 1
        self._in_address += takes_address  # `address_of(S[i])` names S[i], does not load it
        self.generic_visit(node)
        self._in_address -= takes_address
        self._depth -= 1
        if not isinstance(node.op, ir.Op) or takes_address:
            return
        node = self._through_pointers(node)
        name = op_name(node.op)
        if name.startswith(_WGMMA_MMA) and not name.startswith(_WGMMA_CONTROL):
            self._wgmma_reads(node)
            return
        if name.startswith(_MBARRIER_OPS) or name.startswith(_TMA_LOAD):
            self._mbarrier_object(node, name)
        # (an unclassified call nested in another is its operand: not looked into)
        if self._depth > 0 and not classify_call(node):
            return
        buffers = shared_buffers_addressed(node)
        if buffers:
            self.call_accesses(node, name, buffers)

    def call_accesses(self, node: ir.expr.Call, name: str, buffers: list[Any]) -> None:
        """Add the accesses of the op call ``node`` (named ``name``, not a wgmma) to the
        shared ``buffers`` whose addresses it takes, as its op's classification says."""
        effect = require_classification(node, self._func_name, "InsertSharedBarriers")
        domain = _domain_of(name)
        collective = name.startswith(MATRIX_ROW_OPS)
        barrier = mbarrier_operand(node) if name.startswith(_TMA_LOAD) else None
        destination = tma_load_destination(node)
        if destination is not None:
            buffers = [b for b in buffers if b.same_as(destination)]  # not the mbarrier
        for kind in _kinds_of(effect):
            for buffer in buffers:
                region = copy_region(node, buffer)
                if region is None:
                    self.add(buffer, kind, None, None, domain, collective, barrier)
                    self.accesses[-1].start = address_start(node, buffer)
                    continue
                indices, var, count = region
                span = _element_span(var, count)
                self.add(buffer, kind, indices, span, domain, collective, barrier)

    def _through_pointers(self, node: ir.expr.Call) -> ir.expr.Call:
        """``node`` with each pointer variable bound in scope to a shared address
        (``p = T.address_of(S[i])``, then ``cp.async(p, ...)``) replaced by that address:
        the call reaches ``S`` through ``p`` as if it took the address itself."""
        if not self._scope.binds_pointers:
            return node
        pointers: dict[Any, Any] = {}

        def check(var: Any) -> None:
            if var not in pointers and isinstance(var.ty, ir.PointerType):
                value = self._scope.resolve(var)
                if not value.same_as(var) and shared_buffers_addressed(value):
                    pointers[var] = value

        post_order_visit(node, check, (ir.expr.Var,))
        return substitute(node, pointers) if pointers else node

    def _mbarrier_object(self, node: ir.expr.Call, name: str) -> None:
        """The mbarrier an op initialises (a write) or uses (arrive, wait, complete_tx)."""
        found = mbarrier_element(node)
        if found is None:
            return
        buffer, indices = found
        init = name.startswith("tirx.ptx.mbarrier_init")
        # a TMA's complete_tx comes from the async proxy: not ordered after the issuing
        # thread's own mbarrier.init by program order (fence.mbarrier_init + a barrier is)
        by_unit = name.startswith(_TMA_LOAD)
        self.add(
            buffer, AccessKind.WRITE if init else AccessKind.ATOMIC, indices, collective=by_unit
        )
        self.accesses[-1].mbarrier_access = "init" if init else "use"

    def _wgmma_reads(self, node: ir.expr.Call) -> None:
        """A wgmma reads its shared operands through matrix descriptors."""
        if not self._descriptors:
            return
        for source, rows in wgmma_descriptor_operands(node, self._descriptors):
            region = descriptor_region(source, rows)
            if region is None:
                self.add(source.buffer, AccessKind.READ, None, async_domain="wgmma")
                continue
            indices, var, count = region
            self.add(source.buffer, AccessKind.READ, indices, _element_span(var, count), "wgmma")


def _element_span(var: Any, count: int) -> LoopRange:
    """The loop-like range ``var`` in ``[0, count)`` over the elements of a copy or operand
    region (no ``For``)."""
    return LoopRange(var, 0, count, bounds=_span_bounds(count))


@functools.cache  # (constants: one pair per count serves every region; each costs an FFI call)
def _span_bounds(count: int) -> tuple[Any, Any]:
    return tirx.IntImm("int32", 0), tirx.IntImm("int32", count)


_WGMMA_MMA = "tirx.ptx.wgmma_"
_MBARRIER_OPS = ("tirx.ptx.mbarrier_", "tirx.cuda.mbarrier_wait")
#: loads that complete on an mbarrier (TMA tensor loads and plain bulk copies)
_TMA_LOAD = ("tirx.ptx.cp_async_bulk_tensor_g2s", "tirx.ptx.cp_async_bulk_g2s")
_WGMMA_CONTROL = ("tirx.ptx.wgmma_fence", "tirx.ptx.wgmma_commit", "tirx.ptx.wgmma_wait")
#: ops with accesses of their own in :meth:`_AccessCollector.visit_Call` (descriptor reads,
#: mbarrier objects, a copy's completion mbarrier): only the collector reads them
_COLLECTOR_CALLS = (_WGMMA_MMA, *_MBARRIER_OPS, *_TMA_LOAD)


def _domain_of(name: str) -> str | None:
    if name.startswith(GROUP_COPY_PREFIXES):
        return "cp.async"
    if name.startswith(_TMA_LOAD):
        return "mbarrier"
    if name.startswith(("tirx.ptx.cp_async_bulk_tensor_s2g", "tirx.ptx.cp_async_bulk_s2g")):
        return "bulk"
    return None


def _kinds_of(effect: OpEffect) -> list[AccessKind]:
    if OpEffect.ATOMIC in effect:
        return [AccessKind.ATOMIC]
    if OpEffect.ASYNC_COPY in effect and OpEffect.WRITES_SHARED in effect:
        return [AccessKind.ASYNC_WRITE]
    kinds = []
    if OpEffect.READS_SHARED in effect:
        kinds.append(AccessKind.READ)
    if OpEffect.WRITES_SHARED in effect:
        kinds.append(AccessKind.WRITE)
    if not kinds and (OpEffect.GENERIC_SHARED | OpEffect.ASYNC_PROXY) & effect:
        kinds.append(AccessKind.ATOMIC)  # touches shared in an unknown direction: both
    return kinds


def statement_accesses(
    stmt: Any,
    loops: tuple[LoopRange, ...] | AccessScope = (),
    func_name: str | None = None,
    descriptors: Mapping[Any, list[DescriptorSource]] | None = None,
    scalars: Mapping[Any, Any] | None = None,
    storage: StorageMap | None = None,
) -> list[SharedAccess]:
    """Shared accesses of one leaf statement (or of an ``if``/``while`` condition), in order.

    ``loops`` is the statement's :class:`AccessScope` (or just its loops); ``descriptors``
    (:func:`tilewave.analysis.hopper_ops.descriptor_sources` of the function) lets a
    ``wgmma`` report the shared tiles it reads through its matrix descriptors; ``scalars``
    (single-assignment local scalars with their values) are seen through in indices;
    ``storage`` (:func:`tilewave.analysis.storage_identity.storage_map` of the function)
    gives each access its buffer's storage, so views of one allocation conflict.

    For a ``BufferStore`` the loads of the value and indices come first, then the write.
    A call that takes a shared buffer's address is classified through the op table and
    accesses the whole buffer, except the destination of an async copy whose written
    elements :func:`tilewave.analysis.copy_regions.copy_region` can read.

    Raises:
        UnclassifiedOpError: a call addresses a shared buffer but its op is unknown.
    """
    scope = loops if isinstance(loops, AccessScope) else AccessScope(tuple(loops))
    # (exact class tests: TIR node classes have no subclasses, and `isinstance` on them
    # goes through an ABC check)
    is_store = type(stmt) is tirx.BufferStore
    if not is_store and node_is(stmt, tirx.Stmt) and not is_leaf_statement(stmt):
        raise MalformedKernelError(
            f"statement_accesses expects a leaf statement {where(func_name, stmt)}; "
            "walk compound statements and pass their leaves"
        )
    stores_shared = is_store and is_shared_buffer(stmt.buffer)
    # (the Python readings below take no wgmma call, the only reader of ``descriptors``)
    if is_store and not scope.binds_pointers:
        found = _plain_store_accesses(stmt, stores_shared, scope, func_name, scalars, storage)
        if found is not None:
            return found
    if not stores_shared and not descriptors and not _names_shared_memory(stmt, scope):
        return []
    if not is_store and not scope.binds_pointers:
        found = _plain_call_accesses(stmt, scope, func_name, scalars, storage)
        if found is not None:
            return found
    return collected_accesses(stmt, scope, func_name, descriptors, scalars, storage)


def collected_accesses(
    stmt: Any,
    scope: AccessScope,
    func_name: str | None = None,
    descriptors: Mapping[Any, list[DescriptorSource]] | None = None,
    scalars: Mapping[Any, Any] | None = None,
    storage: StorageMap | None = None,
) -> list[SharedAccess]:
    """:func:`statement_accesses` of a leaf statement as the collector's walk finds them
    (the reference the Python readings of plain stores and op calls are tested against)."""
    is_store = type(stmt) is tirx.BufferStore
    stores_shared = is_store and is_shared_buffer(stmt.buffer)
    collector = _borrowed_collector(stmt, scope, func_name, descriptors, scalars, storage)
    if is_store:
        # (a variable or constant holds no load or call: most indices and many values; a
        # store to shared memory of a value that names none, `S[tx] = A[i, tx] * 2`, reads
        # none: one C++ walk for the names instead of a Python call per load)
        value = stmt.value
        if type(value) not in _PLAIN_OPERANDS and (
            not stores_shared or descriptors or _names_shared_memory(value, scope)
        ):
            collector.visit(value)
        indices = ffi_list(stmt.indices)
        for index in indices:
            if type(index) not in _PLAIN_OPERANDS:
                collector.visit(index)
        if stores_shared:
            collector.add(stmt.buffer, AccessKind.WRITE, indices)
    else:
        collector.visit(stmt)
    return _returned(collector)


def _plain_store_accesses(
    stmt: Any,
    stores_shared: bool,
    scope: AccessScope,
    func_name: str | None,
    scalars: Mapping[Any, Any] | None,
    storage: StorageMap | None,
) -> list[SharedAccess] | None:
    """The accesses of a store whose value and indices hold no call (arithmetic on loads,
    variables and constants: :func:`~tilewave.analysis.plain_loads.plain_loads`), as the
    collector reports them, without its C++ walk; None for any other store. (Only where no
    pointer is bound: a bound pointer may stand for shared memory, which the collector
    sees through.)"""
    loads: list[tuple[Any, list[Any]]] = []
    indices = ffi_list(stmt.indices)
    if not plain_loads(stmt.value, loads):
        return None
    for index in indices:
        if not plain_loads(index, loads):
            return None
    reads = [(buffer, idx) for buffer, idx in loads if is_shared_buffer(buffer)]
    if not reads and not stores_shared:
        return []
    collector = _borrowed_collector(stmt, scope, func_name, None, scalars, storage)
    for buffer, idx in reads:
        collector.add(buffer, AccessKind.READ, idx)
    if stores_shared:
        collector.add(stmt.buffer, AccessKind.WRITE, indices)
    return _returned(collector)


def _plain_call_accesses(
    stmt: Any,
    scope: AccessScope,
    func_name: str | None,
    scalars: Mapping[Any, Any] | None,
    storage: StorageMap | None,
) -> list[SharedAccess] | None:
    """The accesses of ``T.evaluate(op(...))`` whose operands are constants, variables,
    arithmetic, loads of other memory than shared, and addresses of buffer elements at
    load-free indices (``T.address_of(S[i])``, possibly converted by
    ``cvta_generic_to_shared``): an ``ldmatrix``, a ``cp.async``, as the collector
    reports them, without its C++ walk (the ops that read descriptors or mbarriers, and a
    scope binding pointers, are left to it). None for any other statement: the collector
    decides."""
    if type(stmt) is not tirx.Evaluate:
        return None
    reading = node_fact(_CALL_READINGS, stmt, _plain_call, _CALL_READINGS_LIMIT)
    if reading is None:
        return None
    call, name, buffers = reading
    if not buffers:
        return []
    collector = _borrowed_collector(stmt, scope, func_name, None, scalars, storage)
    collector.call_accesses(call, name, buffers)
    return _returned(collector)


def _plain_call(stmt: Any) -> tuple[Any, str, list[Any]] | None:
    """``(call, op name, shared buffers addressed)`` of an ``Evaluate`` that
    :func:`_plain_call_accesses` reads itself, None for any other (what does not depend on
    the scope: the commit and barrier passes read each copy in scopes of their own)."""
    call = stmt.value
    if type(call) is not ir.expr.Call:
        return None
    op = call.op
    if type(op) is not ir.Op:
        return None
    name = op_name(op)
    if takes_address_call(call) or name.startswith(_COLLECTOR_CALLS):
        return None
    buffers: list[Any] = []
    for arg in ffi_list(call.args):
        if not _plain_operand(arg, buffers):
            return None
    return call, name, buffers


#: _plain_call's readings by statement handle, with the statement
_CALL_READINGS: dict[int, tuple[tuple[Any, str, list[Any]] | None, Any]] = kernel_table()
_CALL_READINGS_LIMIT = 100_000


_ADDRESS_OF = "tirx.address_of"
_TO_SHARED = "tirx.cuda.cvta_generic_to_shared"


def _plain_operand(arg: Any, buffers: list[Any]) -> bool:
    """Whether the call operand ``arg`` makes no shared access of its own (the collector
    would report none for it), appending the shared buffers whose element address it
    takes to ``buffers`` (once each, in order, as ``shared_buffers_addressed`` finds
    them). False for anything else."""
    if type(arg) in _CONSTANT_OPERANDS:
        return True
    if type(arg) is ir.expr.Call:
        name = callee_name(arg)
        if name == _TO_SHARED and len(arg.args) == 1 and not classify_call(arg):
            arg = arg.args[0]  # (an unclassified nested op: the collector skips it too)
            name = callee_name(arg) if type(arg) is ir.expr.Call else None
        if name != _ADDRESS_OF or len(arg.args) != 1:
            return False
        load = arg.args[0]
        if type(load) is not ir.expr.TensorLoad:
            return False
        inner: list[tuple[Any, list[Any]]] = []
        if not all(plain_loads(index, inner) for index in ffi_list(load.indices)) or inner:
            return False
        buffer = load.source
        if is_shared_buffer(buffer) and not any(buffer.same_as(b) for b in buffers):
            buffers.append(buffer)
        return True
    loads: list[tuple[Any, list[Any]]] = []
    return plain_loads(arg, loads) and not any(is_shared_buffer(b) for b, _ in loads)


#: operand classes with nothing to find in (string operands of ptx ops included)
_CONSTANT_OPERANDS = frozenset({ir.expr.Var, tirx.IntImm, tirx.FloatImm, ir.expr.StringImm})


#: collectors free for the next statement (one per concurrent caller; one that raised is
#: not put back)
_SPARE_COLLECTORS: list[_AccessCollector] = []


def _borrowed_collector(
    stmt: Any,
    scope: AccessScope,
    func_name: str | None,
    descriptors: Mapping[Any, list[DescriptorSource]] | None,
    scalars: Mapping[Any, Any] | None,
    storage: StorageMap | None,
) -> _AccessCollector:
    """A spare collector (or a new one) set to collect the accesses of ``stmt``; give it
    back with :func:`_returned` (a collector that raised is not given back)."""
    collector = _SPARE_COLLECTORS.pop() if _SPARE_COLLECTORS else _AccessCollector()
    collector.reset(stmt, scope, func_name, descriptors, scalars, storage)
    return collector


def _returned(collector: _AccessCollector) -> list[SharedAccess]:
    """The accesses ``collector`` found; it goes back to the spares, holding nothing of
    this kernel."""
    found = collector.accesses
    collector.reset(None, _NO_SCOPE, None)
    _SPARE_COLLECTORS.append(collector)
    return found


_NO_SCOPE = AccessScope()


#: operand classes the collector has nothing to find in
_PLAIN_OPERANDS = frozenset({ir.expr.Var, tirx.IntImm, tirx.FloatImm})


def _names_shared_memory(node: Any, scope: AccessScope) -> bool:
    """Whether ``node`` names a shared buffer or, in a scope that binds pointers, a
    variable bound in it (a pointer to shared memory may hide behind one: the collector
    sees through bound pointers only, :meth:`_AccessCollector._through_pointers`). Every
    access the collector reports reaches a shared buffer one of these ways (wgmma
    descriptors aside: the caller checks those), so a node naming neither has none; one
    C++ walk answers, where collecting costs a Python call at every call and load."""
    if scope.binds_pointers:
        bound = scope.bound_handles
        return any(
            hash(var) in bound or is_shared_buffer(var)
            for var in ffi_list(tirx.analysis.undefined_vars(node, []))
        )
    # without bound pointers the answer is the node's own: remembered (the commit and
    # barrier passes both ask about every leaf near a copy)
    return node_fact(_NAMES_SHARED, node, _names_a_shared_buffer, _CALL_READINGS_LIMIT)


def _names_a_shared_buffer(node: Any) -> bool:
    return any(map(is_shared_buffer, ffi_list(tirx.analysis.undefined_vars(node, []))))


#: _names_shared_memory's answers (where no pointer is bound) by node handle, with the node
_NAMES_SHARED: dict[int, tuple[bool, Any]] = kernel_table()


def touches_shared_or_sync(stmt: Any) -> bool:
    """True when ``stmt`` (any statement tree) accesses shared memory or synchronises."""
    found = False

    def check(node: Any) -> None:
        nonlocal found
        if found:
            return
        if isinstance(node, tirx.BufferStore) and is_shared_buffer(node.buffer):
            found = True
        elif isinstance(node, tirx.Evaluate) and sync_action(node) is not None:
            found = True
        elif type(node).__name__ == "TensorLoad" and is_shared_buffer(node.source):
            found = True
        elif isinstance(node, ir.expr.Call) and shared_buffers_addressed(node):
            found = True

    post_order_visit(
        stmt, check, (tirx.BufferStore, tirx.Evaluate, ir.expr.TensorLoad, ir.expr.Call)
    )
    return found


# ---------------------------------------------------------------------------------------
# Thread structure


def collect_thread_extents(func: Any) -> dict[ir.expr.Var, int]:
    """Thread-index variables (``threadIdx.*`` bound loops) of ``func`` with their extents.

    An extent that is not a constant is recorded as 0 (unknown, assumed > 1).
    """
    extents: dict[ir.expr.Var, int] = {}

    def check(node: Any) -> None:
        if node_is(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else ""
            if tag.startswith("threadIdx"):
                ext = node.extent
                extents[node.loop_var] = int(ext.value) if isinstance(ext, tirx.IntImm) else 0
        elif node_is(node, tirx.AttrStmt) and str(node.attr_key) == "thread_extent":
            iv = node.node
            if isinstance(iv, tirx.IterVar) and str(iv.thread_tag).startswith("threadIdx"):
                value = node.value
                extents[iv.var] = int(value.value) if isinstance(value, tirx.IntImm) else 0

    post_order_visit(func.body, check, (tirx.For, tirx.AttrStmt))
    return extents


def repeated_loops(body: Any) -> set[Any]:
    """``For`` statements that occur at more than one place in ``body`` (shared subtrees):
    their ``LoopRange.loop`` must not identify one loop instance."""
    seen: set[Any] = set()
    repeated: set[Any] = set()

    def check(node: Any) -> None:
        if isinstance(node, tirx.For):
            (repeated if node in seen else seen).add(node)

    post_order_visit(body, check, (tirx.For,))
    return repeated


# ---------------------------------------------------------------------------------------
# Regions


_ADD_SUB = (tirx.Add, tirx.Sub)


def _linear(expr: Any) -> tuple[dict[Any, int], Any] | None:
    """Split ``expr`` as ``sum(c_i * v_i) + rest`` over variables; ``rest`` is a constant.

    Returns ``({var: coeff}, const)`` or ``None`` when ``expr`` is not affine.
    """
    if node_is(expr, tirx.IntImm):
        return {}, int(expr.value)
    if node_is(expr, ir.expr.Var):
        return {expr: 1}, 0
    if node_is(expr, tirx.Cast):
        return _linear(expr.value)
    if node_is(expr, _ADD_SUB):
        a, b = _linear(expr.a), _linear(expr.b)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(expr, tirx.Add) else -1
        coeffs = dict(a[0])
        for var, c in b[0].items():
            key = next((k for k in coeffs if k.same_as(var)), var)
            coeffs[key] = coeffs.get(key, 0) + sign * c
        return {k: c for k, c in coeffs.items() if c != 0}, a[1] + sign * b[1]
    if node_is(expr, tirx.Mul):
        a, b = _linear(expr.a), _linear(expr.b)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if b[0]:
            return None
        return {k: c * b[1] for k, c in a[0].items() if c * b[1] != 0}, a[1] * b[1]
    return None


def _thread_part(
    index: Any, thread_extents: Mapping[Any, int], ranges: Mapping[int, tuple[int, int]]
) -> tuple[dict[Any, int], tuple[int, int]] | None:
    """The thread-index terms of ``index`` if they map thread tuples injectively.

    ``index = sum(c_i * t_i) + r`` where, sorted by ``|c_i|``, each coefficient is at least
    the span of the smaller terms (mixed radix; signs do not matter: ``31 - tx`` is one
    element per thread). Then distinct thread tuples differ by at least ``min |c_i|``.
    Returns ``({thread_var: c}, (r_lo, r_hi))`` or ``None``.
    """
    lin = _linear(index)
    if lin is None:
        return None
    coeffs, const = lin
    threads = {hash(t) for t in thread_extents}
    thread_terms = {v: c for v, c in coeffs.items() if hash(v) in threads}
    if not thread_terms:
        return None
    rest_lo = rest_hi = const
    for var, c in coeffs.items():
        if hash(var) in threads:
            continue
        rng = ranges.get(hash(var))
        if rng is None:
            return None
        lo, hi = sorted((c * rng[0], c * rng[1]))
        rest_lo, rest_hi = rest_lo + lo, rest_hi + hi
    ordered = sorted(thread_terms.items(), key=lambda item: abs(item[1]))
    span = abs(ordered[0][1])
    for var, c in ordered:
        if abs(c) < span:
            return None
        ext = _extent_of(var, thread_extents)
        if ext <= 0:
            return None
        span = abs(c) * ext
    return thread_terms, (rest_lo, rest_hi)


def _extent_of(var: Any, thread_extents: Mapping[Any, int]) -> int:
    for key, ext in thread_extents.items():
        if key.same_as(var):
            return ext
    return 0


def _same_terms(a: dict[Any, int], b: dict[Any, int]) -> bool:
    # TIR variables hash by node handle; `==` on them would build an `EQ` expression
    return len(a) == len(b) and {hash(k): c for k, c in a.items()} == {
        hash(k): c for k, c in b.items()
    }


#: proof verdicts by the two accesses' footprints: statements with the same indices,
#: conditions and loops get the same answer (:mod:`tilewave.analysis.footprint`)
_SHARED_PROOFS = FootprintCache()


def same_iteration(a: SharedAccess, b: SharedAccess) -> dict[Any, frozenset[int]]:
    """``iterations`` for :func:`may_conflict` saying both accesses run in the same iteration
    of every loop enclosing both (two accesses of one statement, two branches of an ``if``)."""
    return {la.loop: frozenset({0}) for la, _ in common_loops(a, b)}


def may_conflict(
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    iterations: Mapping[Any, frozenset[int]] | None = None,
    positions: Mapping[Any, int] | None = None,
    finished: Mapping[Any, int] | None = None,
) -> bool:
    """True unless it is proven that ``a`` and ``b``, made by two *different* threads, never
    touch a common element with at least one of them writing.

    ``positions`` maps loops enclosing ``b`` but not ``a`` (entered after ``a`` ran) to
    how many of their iterations completed before ``b``'s: ``b`` runs in iteration
    ``min + position * step`` (:data:`FAR`: any). ``finished`` maps loops around ``a``
    that exited before ``b`` to ``a``'s distance from their last iteration.

    ``b`` is the later access on a barrier-free path from ``a``. ``iterations`` maps the
    ``For`` statements of loops enclosing both to the possible iteration distances from
    ``a`` to ``b`` (``{d}`` exactly ``d`` iterations for ``d <`` :data:`FAR`, FAR that many or more,
    :data:`ANY` unknown); by default
    every loop variable is independent. Two atomics never conflict with each other (the
    hardware orders them). An async write is also unordered with respect to its own
    thread, so per-thread ownership is not used for it. Two stores that every thread makes
    with the same element and value
    (:func:`tilewave.analysis.uniform_writes.stores_alike`) need no order.

    Accesses of two buffers conflict when their bytes may overlap in one storage (views
    of one allocation, ``shared.dyn`` buffers TVM merges later; see
    :mod:`tilewave.analysis.storage_identity`, used when the accesses carry a storage):
    they are compared as accesses of the allocation in units common to both.
    """
    if not (a.kind.writes or b.kind.writes):
        return False
    if a.kind is AccessKind.ATOMIC and b.kind is AccessKind.ATOMIC:
        return False
    if stores_alike(a, b, thread_extents):
        return False
    if not a.buffer.same_as(b.buffer):
        pair = _on_one_storage(a, b)
        if isinstance(pair, bool):
            return pair
        a, b = pair
    if a.indices is None or b.indices is None or len(a.indices) != len(b.indices):
        return True
    ordered = AccessKind.ASYNC_WRITE not in (a.kind, b.kind) and not (a.collective or b.collective)
    if not _needs_proof(a, b, thread_extents, ordered):
        return False
    if iterations or positions or finished:
        # a loop neither access reads changes no proof: without it, the questions about
        # every iteration distance of such a loop are one question (a loop-invariant
        # access carried around its loop is asked at distance 1, 2, ... FAR)
        read = loops_read(a) | loops_read(b)
        iterations, positions, finished = (
            None if relation is None else {k: v for k, v in relation.items() if hash(k) in read}
            for relation in (iterations, positions, finished)
        )
    # (both have indices here, so both have footprints: the verdict is kept by those)
    shared = (
        a.footprint,
        b.footprint,
        ordered,
        tuple((k, tuple(sorted(v))) for k, v in (iterations or {}).items()),
        tuple((positions or {}).items()),
        tuple((finished or {}).items()),
    )
    found, verdict = _SHARED_PROOFS.lookup(shared, thread_extents)
    if not found:
        # no loop relating the two: small index spaces are compared whole (the answer the
        # proof reaches through enumeration, at more cost)
        verdict = (
            None
            if iterations or positions or finished
            else small_spaces_overlap(a, b, thread_extents, ordered)
        )
        if verdict is None:
            verdict = not prove_no_overlap(
                a, b, thread_extents, iterations, ordered, positions or {}, finished or {}
            )
        _SHARED_PROOFS.put(shared, thread_extents, verdict)
    return verdict


class EarlierAccess(NamedTuple):
    """An earlier access and how it relates to a later one, as :func:`may_conflict` takes
    them (``question``: a hashable key of the three relations, equal for equal relations)."""

    access: SharedAccess
    question: Any
    iterations: Mapping[Any, frozenset[int]]
    positions: Mapping[Any, int]
    finished: Mapping[Any, int]


def proven_apart_together(
    b: SharedAccess,
    earlier: Sequence[EarlierAccess],
    thread_extents: Mapping[Any, int],
) -> list[bool]:
    """For each earlier access of ``earlier`` (with its question: see
    :class:`EarlierAccess`), True when :func:`may_conflict` of it and ``b`` is certainly
    False because the first screen of :func:`prove_no_overlap` keeps them apart: an index
    dimension whose ranges do not meet with the related loops fixed
    (:func:`~tilewave.analysis.interval_bounds.apart_with_loops_fixed`). False: not shown
    here (ask :func:`may_conflict`).

    Accesses of ``b``'s buffer that ask the same question and that the screen reads alike
    (:func:`~tilewave.analysis.interval_bounds.fix_signature`) are screened together, when
    at least two do: the loops are fixed once and ``b`` bounded once per fixed value for
    all of them. A run of in-flight copies meets every new access this way; asked pair by
    pair, each question pays for the same fixing. (A single access is left to
    :func:`may_conflict`, which remembers its answer for equal footprints.)
    """
    out = [False] * len(earlier)
    if b.indices is None or not b.indices_analysable:
        return out
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, item in enumerate(earlier):
        a = item.access
        if (
            a.indices is None
            or len(a.indices) != len(b.indices)
            or not a.buffer.same_as(b.buffer)
            or not a.indices_analysable
        ):
            continue
        groups.setdefault((item.question, fix_signature(a)), []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        first = earlier[members[0]]
        common = common_loops(first.access, b)
        related = {
            la.loop: v
            for la, _ in common
            for k, v in first.iterations.items()
            if k.same_as(la.loop)
        }
        apart = apart_with_loops_fixed_each(
            [earlier[i].access for i in members],
            b,
            thread_extents,
            common,
            related,
            first.positions,
            first.finished,
        )
        for i, proven in zip(members, apart, strict=True):
            out[i] = proven
    return out


def unrelated_points(access: SharedAccess, thread_extents: Mapping[Any, int]) -> Any | None:
    """The whole index points (:func:`~tilewave.analysis.index_enumeration.whole_space_points`)
    of a plain read or write whose indices and conditions read no loop, that is not a store
    every thread makes alike; None for any other access. For two such accesses of one
    buffer, :func:`may_conflict` answers whether these points overlap between two threads,
    whatever the loop relations (cached per access)."""
    cached = access.memo.get("unrelated_points")
    if cached is not None and cached[0] == id(thread_extents):
        return cached[1]
    points = None
    kind = access.kind
    if (
        (kind is AccessKind.READ or kind is AccessKind.WRITE)
        and not access.collective
        and access.indices is not None
        and not loops_read(access)
        and not (kind is AccessKind.WRITE and writes_same_everywhere(access, thread_extents))
    ):
        points = whole_space_points(access, thread_extents)
    access.memo["unrelated_points"] = (id(thread_extents), points)
    return points


def _on_one_storage(a: SharedAccess, b: SharedAccess) -> bool | tuple[SharedAccess, SharedAccess]:
    """Accesses of two buffers: False when their memories are apart, True when they may
    overlap where nothing more is known, else both as accesses of their common allocation
    in common units."""
    if a.storage is None or b.storage is None:
        return False
    relation = storage_relation(a.storage, b.storage)
    if relation is StorageRelation.DISTINCT:
        return False
    if relation is StorageRelation.UNKNOWN:
        return True
    unit = common_unit(a.storage, b.storage)
    view_a, view_b = _unit_view(a, unit), _unit_view(b, unit)
    if view_a is None or view_b is None:
        return True
    return view_a, view_b


_UNIT_VIEWS: weakref.WeakKeyDictionary[SharedAccess, dict[int, SharedAccess | None]] = (
    weakref.WeakKeyDictionary()
)


def _unit_view(access: SharedAccess, unit: int) -> SharedAccess | None:
    """``access`` as an access of its allocation's ``unit``-byte slots: one index, plus a
    loop over the slots one element covers (cached, so proofs about it are cached too)."""
    views = _UNIT_VIEWS.setdefault(access, {})
    if unit in views:
        return views[unit]
    storage = access.storage
    index, count = None, 0
    if storage is not None and storage.root is not None and access.indices is not None:
        index, count = unit_index(storage, access.indices, unit), storage.itemsize // unit
    elif storage is not None and access.start is not None and storage.root_bytes is not None:
        # through a pointer: from its address to (at most) the allocation's end
        index, count = storage.start_unit(access.start, unit), storage.root_bytes // unit
    view = None
    if index is not None and storage is not None and storage.root is not None:
        view = access.spread_over(storage.root, index, count)
    views[unit] = view
    return view


@dataclass(frozen=True)
class _IndexFacts:
    """Per-access facts the cheap disjointness rules use (computed once per access)."""

    bounds: tuple[tuple[int, int] | None, ...]
    thread_parts: tuple[tuple[dict[Any, int], tuple[int, int]] | None, ...]


#: facts by footprint (accesses of other statements with the same indices and loops)
_SHARED_FACTS = FootprintCache()


def _index_facts(access: SharedAccess, thread_extents: Mapping[Any, int]) -> _IndexFacts:
    cached = access.memo.get("index_facts")
    if cached is not None and cached[0] == id(thread_extents):
        return cached[1]
    shared = access.footprint
    found, facts = (False, None) if shared is None else _SHARED_FACTS.lookup(
        shared, thread_extents
    )
    if not found:
        ranges = variable_ranges(access, thread_extents)
        indices = access.resolved_indices or ()
        facts = _IndexFacts(
            index_bounds(access, thread_extents),
            tuple(_thread_part(x, thread_extents, ranges) for x in indices),
        )
        if shared is not None:
            _SHARED_FACTS.put(shared, thread_extents, facts)
    access.memo["index_facts"] = (id(thread_extents), facts)
    return facts


def _needs_proof(
    a: SharedAccess, b: SharedAccess, thread_extents: Mapping[Any, int], ordered: bool
) -> bool:
    """False when interval bounds or per-thread ownership prove the accesses apart (every
    loop variable independent, path conditions ignored); True: ask the analyzer.
    Remembered per pair of footprints (the facts are the footprints')."""
    shared = None
    if a.footprint is not None and b.footprint is not None:
        shared = (a.footprint, b.footprint, ordered)
        found, verdict = _SHARED_NEEDS.lookup(shared, thread_extents)
        if found:
            return verdict
    verdict = _needs_proof_of(a, b, thread_extents, ordered)
    if shared is not None:
        _SHARED_NEEDS.put(shared, thread_extents, verdict)
    return verdict


_SHARED_NEEDS = FootprintCache()


def _needs_proof_of(
    a: SharedAccess, b: SharedAccess, thread_extents: Mapping[Any, int], ordered: bool
) -> bool:
    info_a, info_b = _index_facts(a, thread_extents), _index_facts(b, thread_extents)
    for ba, bb in zip(info_a.bounds, info_b.bounds, strict=True):
        if ba is not None and bb is not None and (ba[1] < bb[0] or bb[1] < ba[0]):
            return False
    if not ordered:
        return True
    wide_threads = [v for v, ext in thread_extents.items() if ext != 1]
    if not wide_threads:
        return False  # a single thread: nobody else to race with
    covered: set[int] = set()
    for ta, tb in zip(info_a.thread_parts, info_b.thread_parts, strict=True):
        if ta is not None and tb is not None and _same_terms(ta[0], tb[0]):
            lo, hi = min(ta[1][0], tb[1][0]), max(ta[1][1], tb[1][1])
            if hi - lo < min(abs(c) for c in ta[0].values()):
                covered.update(hash(v) for v in ta[0])
    return not all(hash(v) in covered for v in wide_threads)
