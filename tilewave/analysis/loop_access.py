"""Where each shared buffer is read, written and addressed, and inside which loops.

Read-only facts for loop transforms such as multibuffering: for every buffer a PrimFunc
allocates (``AllocBuffer``), the ordered list of its accesses (each with the chain of
enclosing ``For`` loops), and the places where its address *escapes* — flows somewhere a
pass cannot follow and rewrite.

An address is *followed* when it is formed by ``S.data``, ``T.address_of(S[i])`` or
``T.tvm_access_ptr(..., S.data, offset, extent, rw)``, possibly wrapped in further address
arithmetic (``cvta_generic_to_shared``, ``reinterpret``, ``T.ptx.addr``), and consumed by an
op the op table (:mod:`tilewave.ir.intrinsics`) classifies, in a call statement. Anything
else — an unknown extern call, a store or a let binding of the address, a ``DeclBuffer``
aliasing ``S.data`` — is an escape.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import tvm_ffi
from tvm import ir, tirx

from tilewave.analysis.shared_buffers import is_buffer
from tilewave.ir.intrinsics import OpEffect, callee_name, classify_call
from tilewave.ir.walker import TIRVisitor

__all__ = [
    "ADDRESS_FORMING_OPS",
    "AccessKind",
    "AddressEscape",
    "BufferAccess",
    "BufferUse",
    "buffer_uses",
]

#: Ops that compute an address from an address (or form one from a buffer); an address
#: passing through them is still followed.
ADDRESS_FORMING_OPS = frozenset(
    {
        "tirx.buffer_data",
        "tirx.address_of",
        "tirx.tvm_access_ptr",
        "tirx.cuda.cvta_generic_to_shared",
        "tirx.ptx.addr",
        "tirx.reinterpret",
    }
)


class AccessKind(enum.Flag):
    """How an access touches the buffer."""

    READ = enum.auto()
    WRITE = enum.auto()


@dataclass(frozen=True)
class BufferAccess:
    """One access to a buffer.

    Attributes:
        kind: READ, WRITE, or both (an op taking the address whose direction is unknown).
        loops: the enclosing ``For`` nodes, outermost first.
        stmt: the statement containing the access (for error messages).
        via_address: True when the access goes through an address (an op operand) rather
            than a plain load or store.
    """

    kind: AccessKind
    loops: tuple[tirx.For, ...]
    stmt: tirx.Stmt
    via_address: bool = False

    def inside(self, loop: tirx.For) -> bool:
        """True when this access lies in the body of ``loop``."""
        return any(lp.same_as(loop) for lp in self.loops)


@dataclass(frozen=True)
class AddressEscape:
    """A place where a buffer's address flows somewhere it cannot be followed."""

    stmt: tirx.Stmt
    reason: str


@dataclass
class BufferUse:
    """Everything a function does with one allocated buffer.

    Attributes:
        buffer: the buffer variable.
        alloc: its ``AllocBuffer`` statement.
        accesses: in execution (program) order.
        escapes: where its address escapes.
    """

    buffer: ir.expr.Var
    alloc: tirx.AllocBuffer
    accesses: list[BufferAccess] = field(default_factory=list)
    escapes: list[AddressEscape] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The buffer's name."""
        return str(self.buffer.name)


def _op_name(call: Any) -> str | None:
    return call.op.name if isinstance(call, ir.expr.Call) and isinstance(call.op, ir.Op) else None


class _UseCollector(TIRVisitor):
    def __init__(self) -> None:
        self.uses: dict[ir.expr.Var, BufferUse] = {}
        self._loops: list[tirx.For] = []
        self._path: list[Any] = []  # statements and expressions from the root to here

    # --- plumbing -------------------------------------------------------------------
    def visit(self, node: Any) -> None:
        if node is None or isinstance(node, (list, tuple, tvm_ffi.Array)):
            super().visit(node)
            return
        self._path.append(node)
        try:
            super().visit(node)
        finally:
            self._path.pop()

    def _stmt(self) -> tirx.Stmt:
        return next(n for n in reversed(self._path) if isinstance(n, tirx.Stmt))

    def _use(self, var: Any) -> BufferUse | None:
        return self.uses.get(var) if is_buffer(var) else None

    def _record(self, var: Any, kind: AccessKind, via_address: bool = False) -> None:
        use = self._use(var)
        if use is not None:
            use.accesses.append(BufferAccess(kind, tuple(self._loops), self._stmt(), via_address))

    # --- statements -----------------------------------------------------------------
    def visit_AllocBuffer(self, node: tirx.AllocBuffer) -> None:
        self.uses[node.buffer] = BufferUse(node.buffer, node)
        self.visit(node.annotations)

    def visit_For(self, node: tirx.For) -> None:
        self.visit(node.min)
        self.visit(node.extent)
        self._loops.append(node)
        self.visit(node.body)
        self._loops.pop()

    def visit_BufferStore(self, node: tirx.BufferStore) -> None:
        self.visit(node.value)
        self.visit(node.indices)
        self._record(node.buffer, AccessKind.WRITE)

    # --- expressions ----------------------------------------------------------------
    def visit_TensorLoad(self, node: Any) -> None:
        self.visit(node.indices)
        parent = self._path[-2] if len(self._path) > 1 else None
        if _op_name(parent) == "tirx.address_of":
            self._address_root(node.source)
        else:
            self._record(node.source, AccessKind.READ)

    def visit_Call(self, node: ir.expr.Call) -> None:
        if _op_name(node) == "tirx.buffer_data":
            self._address_root(node.args[0])
            return
        self.generic_visit(node)

    def visit_Var(self, node: ir.expr.Var) -> None:
        use = self._use(node)
        if use is not None:
            parent = self._path[-2] if len(self._path) > 1 else None
            use.escapes.append(
                AddressEscape(self._stmt(), f"the buffer is used by a {type(parent).__name__}")
            )

    def _address_root(self, var: Any) -> None:
        """Follow an address of ``var`` up to the statement that consumes it."""
        use = self._use(var)
        if use is None:
            return
        consumer: OpEffect | None = None
        # _path[-1] is the root itself; walk its ancestors, nearest first.
        for node in reversed(self._path[:-1]):
            if isinstance(node, tirx.Stmt):
                if isinstance(node, tirx.Evaluate) and consumer is not None:
                    break
                use.escapes.append(AddressEscape(node, _escape_reason(node, consumer)))
                return
            if not isinstance(node, ir.expr.Call):
                use.escapes.append(
                    AddressEscape(self._stmt(), f"its address is used in a {type(node).__name__}")
                )
                return
            name = _op_name(node)
            if name in ADDRESS_FORMING_OPS:
                continue
            effect = classify_call(node)
            if effect is None:
                use.escapes.append(
                    AddressEscape(
                        self._stmt(),
                        f"its address is passed to '{callee_name(node)}', an op tilewave "
                        "does not know (register it with tilewave.register_intrinsic)",
                    )
                )
                return
            if consumer is None or effect & (OpEffect.READS_SHARED | OpEffect.WRITES_SHARED):
                consumer = effect
        if consumer is None:  # unreachable: every expression sits under a statement
            return
        kind = AccessKind(0)
        if consumer & OpEffect.READS_SHARED:
            kind |= AccessKind.READ
        if consumer & OpEffect.WRITES_SHARED:
            kind |= AccessKind.WRITE
        self._record(var, kind or (AccessKind.READ | AccessKind.WRITE), via_address=True)


def _escape_reason(stmt: tirx.Stmt, consumer: OpEffect | None) -> str:
    if isinstance(stmt, tirx.BufferStore):
        return "its address is stored into a buffer"
    if isinstance(stmt, tirx.Bind):
        return "its address is bound to a variable"
    if isinstance(stmt, tirx.DeclBuffer):
        return "a DeclBuffer aliases its data"
    if isinstance(stmt, tirx.Evaluate) and consumer is None:
        return "its address is evaluated without being passed to an op"
    return f"its address is used by a {type(stmt).__name__} statement"


def buffer_uses(func: tirx.PrimFunc) -> list[BufferUse]:
    """Every buffer ``func`` allocates, with its accesses and address escapes.

    Returns the uses in allocation order. Accesses are in program order; within one
    statement, the reads of a store's value come before the store's write.
    """
    collector = _UseCollector()
    collector.visit(func.body)
    return list(collector.uses.values())
