"""The access model: one shared-memory access of one leaf statement, and where it sits.

:class:`SharedAccess` is what the barrier pass, the verifier and the disjointness proofs
talk about: a buffer, how it is used (:class:`AccessKind`), its indices and the scope of its
statement (:class:`AccessScope`: serial loops as :class:`LoopRange`, path conditions,
``Bind`` values). :mod:`tilewave.analysis.shared_access` finds the accesses of statements
and decides whether two of them may conflict; the proofs
(:mod:`tilewave.analysis.region_proof`, :mod:`tilewave.analysis.index_enumeration`) read
them.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tvm import ir, tirx

from tilewave.analysis.footprint import Footprint, footprint_of
from tilewave.analysis.integer_exprs import analysable
from tilewave.analysis.local_scalars import ScalarForwarder
from tilewave.analysis.storage_identity import BufferStorage
from tilewave.cached_attribute import cached_attribute
from tilewave.ir.walker import Deferred, post_order_visit, substitute

__all__ = [
    "ANY_MEMORY",
    "AccessKind",
    "AccessScope",
    "LoopRange",
    "SharedAccess",
    "is_thread_dependent",
]


class AccessKind(enum.Enum):
    """How an access uses shared memory."""

    READ = "read"
    WRITE = "write"
    #: an atomic read-modify-write: both a read and a write
    ATOMIC = "atomic"
    #: a global->shared copy (cp.async, TMA, gfx950 buffer_load ... lds): completes later
    ASYNC_WRITE = "async_write"

    def __init__(self, value: str) -> None:
        # plain attributes, not properties: the barrier pass asks them for every pending
        # access at every statement
        #: True when the access writes shared memory
        self.writes: bool = value != "read"
        #: True when the access reads shared memory
        self.reads: bool = value in ("read", "atomic")


@dataclass(frozen=True)
class LoopRange:
    """A serial loop around an access: its variable and integer bounds when constant.

    Attributes:
        loop: the ``For`` statement (identifies the loop; ``None``: unknown or repeated).
        aligned: the loop's start and step are the same for every thread, so iteration i
            has the same variable value in every thread (a thread-dependent trip count is
            fine). Only aligned loops relate two accesses' iterations.
        bounds: ``(min, extent)`` as expressions, ``Bind`` values substituted.
        step: the constant step (``None`` when not constant).
    """

    var: ir.expr.Var
    min: int | None
    extent: int | None
    loop: Any = field(default=None, repr=False)
    aligned: bool = field(default=False, compare=False)
    bounds: tuple[Any, Any] | None = field(default=None, compare=False, repr=False)
    step: int | None = field(default=1, compare=False)

    @classmethod
    def of(cls, loop: Any, scope: AccessScope, thread_vars: Iterable[Any]) -> LoopRange:
        """The range of the serial ``For`` ``loop`` entered in ``scope``."""
        lo = int(loop.min.value) if isinstance(loop.min, tirx.IntImm) else None
        ext = int(loop.extent.value) if isinstance(loop.extent, tirx.IntImm) else None
        step_node = loop.step
        if step_node is None:
            step: int | None = 1
        else:
            step = int(step_node.value) if isinstance(step_node, tirx.IntImm) else None
        if lo is not None and step is not None:
            aligned = True  # constant first values: the same in every thread
        else:
            step_expr = step_node if step_node is not None else tirx.IntImm("int32", 1)
            start = scope.resolve(tirx.Add(loop.min, step_expr))
            aligned = not is_thread_dependent(start, thread_vars)
        bounds = (scope.resolve(loop.min), scope.resolve(loop.extent))
        return cls(loop.loop_var, lo, ext, loop, aligned, bounds, step)


@dataclass(frozen=True, eq=False)
class AccessScope:
    """Where a statement sits: its serial loops, the ``if`` conditions on its path and the
    ``Bind`` variables in scope, all as written (so equal scopes compare equal).

    Attributes:
        loops: enclosing serial loops, outermost first.
        conditions: ``(condition, holds)`` of enclosing ``if``s (``holds`` False: else).
        bindings: ``(var, value)`` of the ``Bind`` statements in scope, in order.
        in_while: inside the body of a ``While`` (threads may run it different numbers of
            times; its condition is not among ``conditions``).
    """

    loops: tuple[LoopRange, ...] = ()
    conditions: tuple[tuple[Any, bool], ...] = ()
    bindings: tuple[tuple[Any, Any], ...] = ()
    #: ``(hash(var), hash(value))`` of ``bindings`` (node handles), built incrementally
    binding_keys: tuple[tuple[int, int], ...] = field(default=(), compare=False, repr=False)
    in_while: bool = False

    @cached_attribute
    def _identity(self) -> tuple[Any, ...]:
        # TIR nodes hash by handle: equal keys mean the same loops, conditions and bindings
        # (comparing the expressions with ``==`` would build TIR ``EQ`` nodes instead)
        return (
            tuple(
                (hash(lp.var), lp.min, lp.extent, None if lp.loop is None else hash(lp.loop))
                for lp in self.loops
            ),
            tuple((hash(cond), holds) for cond, holds in self.conditions),
            self._binding_keys(),
            self.in_while,
        )

    def _binding_keys(self) -> tuple[tuple[int, int], ...]:
        if len(self.binding_keys) != len(self.bindings):  # built without binding()
            keys = tuple((hash(var), hash(value)) for var, value in self.bindings)
            object.__setattr__(self, "binding_keys", keys)
        return self.binding_keys

    @cached_attribute
    def bound_handles(self) -> frozenset[int]:
        """Node handles (``hash``) of the variables bound in this scope."""
        return frozenset(self._values_by_handle)

    @cached_attribute
    def binds_pointers(self) -> bool:
        """Whether a pointer variable is bound in this scope (``p = T.address_of(S[i])``)."""
        return any(isinstance(var.ty, ir.PointerType) for var, _ in self.bindings)

    @cached_attribute
    def _hash(self) -> int:
        loops, conditions, _, in_while = self._identity
        # the bindings by their running hash: hashing their whole tuple again for every
        # new scope was quadratic in a kernel's bindings
        return hash((loops, conditions, self._bindings_hash, in_while))

    @cached_attribute
    def _bindings_hash(self) -> int:
        """A hash of the binding keys, folded one binding at a time (:meth:`binding` adds
        one to its scope's; equal bindings fold to equal values however built)."""
        folded = 0
        for key in self._binding_keys():
            folded = _fold(folded, key)
        return folded

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AccessScope)
            and self._hash == other._hash
            and self._identity == other._identity
        )

    def __hash__(self) -> int:
        return self._hash

    def within_loop(self, loop: LoopRange) -> AccessScope:
        """This scope inside one more loop."""
        return self._same_bindings(
            AccessScope(
                (*self.loops, loop), self.conditions, self.bindings, self.binding_keys,
                self.in_while,
            )
        )

    def assuming(self, condition: Any, holds: bool = True) -> AccessScope:
        """This scope inside a branch on ``condition``."""
        return self.with_conditions((*self.conditions, (condition, holds)))

    def with_conditions(self, conditions: tuple[tuple[Any, bool], ...]) -> AccessScope:
        """This scope with the path conditions ``conditions`` instead of its own."""
        return self._same_bindings(
            AccessScope(self.loops, conditions, self.bindings, self.binding_keys, self.in_while)
        )

    def binding(self, var: Any, value: Any) -> AccessScope:
        """This scope after ``Bind(var, value)``."""
        keys = (*self._binding_keys(), (hash(var), hash(value)))
        scope = AccessScope(
            self.loops, self.conditions, (*self.bindings, (var, value)), keys, self.in_while
        )
        # one more binding: the facts about bindings grow from this scope's (recomputing
        # them per scope was quadratic in a kernel's hundreds of bindings)
        by_handle = dict(self._values_by_handle)
        # resolved when an expression that reads ``var`` is resolved (most bindings of a
        # kernel, CSE temporaries of register and global-memory arithmetic, never are)
        by_handle[keys[-1][0]] = Deferred(functools.partial(self.resolve, value))
        facts = scope.__dict__
        facts["_values_by_handle"] = by_handle
        facts["_bindings_hash"] = _fold(self._bindings_hash, keys[-1])
        facts["binds_pointers"] = self.binds_pointers or isinstance(var.ty, ir.PointerType)
        return scope

    def inside_while(self) -> AccessScope:
        """This scope inside the body of a ``While``."""
        if self.in_while:
            return self
        return self._same_bindings(
            AccessScope(self.loops, self.conditions, self.bindings, self.binding_keys, True)
        )

    def _same_bindings(self, scope: AccessScope) -> AccessScope:
        """``scope`` (with this scope's bindings) knowing what this one knows of them."""
        for name in ("bound_handles", "binds_pointers", "_bindings_hash", "_values_by_handle"):
            if name in self.__dict__:
                scope.__dict__[name] = self.__dict__[name]
        return scope

    def resolve(self, expr: Any) -> Any:
        """``expr`` with the bound variables replaced by their values (transitively)."""
        if not self.bindings:
            return expr
        values = self._values_by_handle
        if type(expr) is ir.expr.Var and hash(expr) not in values:
            return expr  # (a free variable: the thread index, a loop variable)
        return substitute(expr, values, values)

    @cached_attribute
    def _values_by_handle(self) -> dict[int, Any]:
        """Each bound variable's value with earlier bindings substituted, by the variable's
        handle (for :func:`substitute`). :meth:`binding` grows it from the scope before
        (resolving is then one substitution, not one per binding) with a
        :class:`~tilewave.ir.walker.Deferred` value, substituted when first needed; a scope
        built with its bindings given is resolved here, binding by binding."""
        values: dict[int, Any] = {}
        for var, value in self.bindings:
            values[hash(var)] = substitute(value, values, values)
        return values


def _fold(folded: int, key: tuple[int, int]) -> int:
    """:attr:`AccessScope._bindings_hash` with one more binding key."""
    return hash((folded, key))


#: :attr:`SharedAccess.memory_key` of an access whose storage is unknown (any shared memory)
ANY_MEMORY = ("any",)


_FORWARDERS: dict[int, tuple[Mapping[Any, Any], ScalarForwarder]] = {}


def _forwarder(scalars: Mapping[Any, Any]) -> ScalarForwarder:
    """One :class:`ScalarForwarder` per scalars map (a map is made once per kernel)."""
    found = _FORWARDERS.get(id(scalars))
    if found is None or found[0] is not scalars:
        if len(_FORWARDERS) > 64:
            _FORWARDERS.clear()
        found = _FORWARDERS[id(scalars)] = (scalars, ScalarForwarder(scalars))
    return found[1]


@dataclass(eq=False)
class SharedAccess:
    """One access to a shared buffer made by one leaf statement.

    Attributes:
        buffer: the shared buffer (a ``Var`` typed ``BufferType``).
        kind: READ, WRITE, ATOMIC or ASYNC_WRITE.
        indices: element indices, or ``None`` when reached through a pointer (whole buffer).
        stmt: the leaf statement that makes the access.
        loops: the serial loops enclosing the statement, outermost first.
    """

    buffer: ir.expr.Var
    kind: AccessKind
    indices: tuple[Any, ...] | None
    stmt: Any
    loops: tuple[LoopRange, ...] = field(default=())
    #: the access's scope: path conditions and ``Bind`` values (``loops`` repeats its loops)
    scope: AccessScope = field(default_factory=lambda: AccessScope(), repr=False)
    #: how an asynchronous access completes: ``"cp.async"``, ``"wgmma"`` or ``"bulk"`` (TMA
    #: store reads) through that unit's commit/wait groups (the access joins the thread's
    #: open group, ``commit_group`` closes it, ``wait_group N`` retires every committed
    #: group but the newest ``N``); ``"mbarrier"`` (TMA load) when a wait on the mbarrier
    #: ``completes_on`` observes its phase; ``None`` for synchronous accesses and other copies
    async_domain: str | None = None
    #: the mbarrier buffer a TMA load completes on
    completes_on: Any = None
    #: single-assignment local scalars (``wg = tx // 128``) whose loads indices may use,
    #: with their values (:func:`tilewave.analysis.local_scalars.single_assignment_scalars`)
    scalars: Mapping[Any, Any] | None = field(default=None, repr=False)
    #: an access to an mbarrier object itself: ``"init"`` (a write: other threads may use
    #: the mbarrier only after a barrier) or ``"use"`` (arrive, wait, TMA ``complete_tx``:
    #: atomic, never in conflict with each other)
    mbarrier_access: str | None = None
    #: not ordered with the issuing thread's own accesses by program order: a
    #: warp-collective access (``ldmatrix``/``stmatrix``: the lane that gives the address
    #: is not the lane whose registers the data moves through) or one the async proxy
    #: makes (a TMA's ``complete_tx`` on its mbarrier)
    collective: bool = False
    #: where the buffer's bytes are (:mod:`tilewave.analysis.storage_identity`); ``None``
    #: when the caller gave no storage map (then two buffers are two memories)
    storage: BufferStorage | None = field(default=None, repr=False)
    #: for an access through a pointer (``indices`` None): the indices the pointer takes
    #: the address of (``()``: the buffer's data pointer); it reaches from there on
    start: tuple[Any, ...] | None = field(default=None, repr=False)
    #: the analyses' per-access results by name, each with the analysis run it belongs to
    #: (an attribute lookup: a weak dictionary keyed by the access costs a Python call
    #: per question, and the proofs ask thousands); values must not refer to the access
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @cached_attribute
    def resolved_indices(self) -> tuple[Any, ...] | None:
        """The indices with ``Bind`` variables replaced by their values."""
        if self.indices is None:
            return None
        return tuple(self._forward(self.scope.resolve(i)) for i in self.indices)

    def _forward(self, expr: Any) -> Any:
        if not self.scalars:
            return expr
        return _forwarder(self.scalars).visit(expr)

    def spread_over(self, buffer: Any, start: Any, count: int) -> SharedAccess:
        """This access moved to ``buffer[start + k]`` for every ``k`` in ``[0, count)`` (one
        of its elements covers ``count`` elements of ``buffer``): same kind, statement,
        loops (plus one over ``k``), scope and completion."""
        loops = self.loops
        if count > 1:
            dtype = str(start.ty)
            slot = tirx.Var(f"{self.buffer.name}_slot", dtype)
            start = start + slot
            bounds = (tirx.IntImm(dtype, 0), tirx.IntImm(dtype, count))
            loops = (*loops, LoopRange(slot, 0, count, bounds=bounds))
        moved = SharedAccess(buffer, self.kind, (start,), self.stmt, loops, self.scope)
        moved.async_domain = self.async_domain
        moved.completes_on = self.completes_on
        moved.scalars = self.scalars
        moved.collective = self.collective
        moved.mbarrier_access = self.mbarrier_access
        return moved

    @property
    def async_group(self) -> bool:
        """True for a ``cp.async`` copy (completes through cp.async commit/wait groups)."""
        return self.async_domain == "cp.async"

    @property
    def is_async(self) -> bool:
        """True when the access completes after it issues (async copies, wgmma operand
        reads, TMA stores)."""
        return self.kind is AccessKind.ASYNC_WRITE or self.async_domain is not None

    @cached_attribute
    def loop_set(self) -> frozenset[Any]:
        """The identified ``For`` statements around the access."""
        return frozenset(lp.loop for lp in self.loops if lp.loop is not None)

    @cached_attribute
    def footprint(self) -> Footprint | None:
        """What the disjointness proofs read of this access, as a key
        (:mod:`tilewave.analysis.footprint`; ``None`` for an access through a pointer)."""
        return footprint_of(self)

    @cached_attribute
    def indices_analysable(self) -> bool:
        """Whether every (resolved) index is plain integer arithmetic."""
        return self.resolved_indices is not None and all(
            analysable(e) for e in self.resolved_indices
        )

    @cached_attribute
    def path_conditions(self) -> tuple[Any, ...]:
        """The analysable conditions that hold when the access runs, values substituted."""
        out = []
        for cond, holds in self.scope.conditions:
            resolved = self._forward(self.scope.resolve(cond))
            if analysable(resolved):
                out.append(resolved if holds else tirx.Not(resolved))
        return tuple(out)

    @cached_attribute
    def memory_key(self) -> tuple[Any, ...]:
        """Which memory the access touches, coarsely: two accesses whose keys differ (and
        neither is :data:`ANY_MEMORY`) never overlap, since their storages are apart
        (:func:`tilewave.analysis.storage_identity.storage_relation` is ``DISTINCT``)."""
        storage = self.storage
        if storage is None:
            return ("buffer", hash(self.buffer))
        if storage.root is None:
            return ANY_MEMORY
        if storage.pool is not None:
            return ("pool", storage.pool)
        return ("root", hash(storage.root))

    @property
    def buffer_name(self) -> str:
        """The buffer's name as written in TVMScript."""
        return str(self.buffer.name)

    def describe(self) -> str:
        """Short text such as ``write S[tx]``."""
        if self.indices is None:
            return f"{self.kind.value} {self.buffer_name}[*]"
        return f"{self.kind.value} {self.buffer_name}[{', '.join(map(str, self.indices))}]"


def is_thread_dependent(
    expr: Any, thread_vars: Iterable[ir.expr.Var], uniform: Iterable[Any] = ()
) -> bool:
    """True when ``expr`` reads a thread index or memory (its value may differ per
    thread, so control flow on it may diverge). Loads of the buffers in ``uniform`` (local
    buffers equal in every thread, see
    :func:`tilewave.analysis.uniform_locals.uniform_local_buffers`) are not."""
    targets = list(thread_vars)
    same = list(uniform)
    found = False

    def check(node: Any) -> None:
        nonlocal found
        if isinstance(node, ir.expr.Var) and any(node.same_as(v) for v in targets):
            found = True
        elif type(node).__name__ == "TensorLoad" and not any(node.source.same_as(b) for b in same):
            found = True  # a loaded value may differ between threads

    post_order_visit(expr, check, (ir.expr.Var, ir.expr.TensorLoad))
    return found
