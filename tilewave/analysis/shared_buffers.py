"""Which buffers live in shared memory, and which calls take a shared buffer's address.

In TVM 0.27 TIR a buffer is an ``ir.Var`` whose type is a ``tirx.BufferType``; its
``storage_scope`` says where it lives. Loads are ``TensorLoad(source=buffer, indices)``,
stores ``BufferStore(buffer, value, indices)``. A call reaches a buffer's memory through
``buffer.data`` (``tirx.buffer_data``), ``T.address_of(buf[i])`` or ``T.tvm_access_ptr``.
"""

from __future__ import annotations

from typing import Any

from tvm import ir, tirx

from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import TIRVisitor, post_order_visit
from tilewave.kernel_memory import kernel_table, remember

__all__ = [
    "SHARED_SCOPES",
    "addresses_dynamic_shared",
    "buffer_scope",
    "is_buffer",
    "is_shared_buffer",
    "loads_local_buffer",
    "shared_buffers_addressed",
    "takes_address_call",
]

#: Storage scopes that are shared memory (LDS on AMD).
SHARED_SCOPES = frozenset({"shared", "shared.dyn"})

_ADDRESS_OPS = frozenset({"tirx.buffer_data", "tirx.address_of", "tirx.tvm_access_ptr"})


def is_buffer(var: Any) -> bool:
    """True when ``var`` is a buffer (a Var typed ``tirx.BufferType``)."""
    return isinstance(var, ir.expr.Var) and isinstance(
        getattr(var, "ty", None), tirx.buffer.BufferType
    )


def buffer_scope(var: Any) -> str | None:
    """The storage scope of buffer ``var`` (``"shared"``, ``"global"``...), or None."""
    if not is_buffer(var):
        return None
    return str(var.ty.storage_scope)


def is_shared_buffer(var: Any) -> bool:
    """True when ``var`` is a buffer in shared memory (``shared`` or ``shared.dyn``).

    A variable's answer is remembered by node handle: the analyses ask about the same few
    buffers at every statement, and reading a type through the FFI costs a microsecond."""
    if type(var) is not ir.expr.Var:
        return buffer_scope(var) in SHARED_SCOPES
    key = hash(var)
    known = _SHARED_VARS.get(key)
    if known is None:
        known = remember(
            _SHARED_VARS, key, (var, buffer_scope(var) in SHARED_SCOPES), _SHARED_VARS_LIMIT
        )
    return known[1]


#: :func:`is_shared_buffer` answers of variables by node handle; each entry keeps its
#: variable alive, so the handle cannot come to name another node
_SHARED_VARS: dict[int, tuple[Any, bool]] = kernel_table()
_SHARED_VARS_LIMIT = 8192


def takes_address_call(call: ir.expr.Call) -> bool:
    """Whether ``call`` is an address-taking op (``address_of``, ``buffer_data``,
    ``tvm_access_ptr``...): what its operands name is an address, not a load."""
    op = call.op
    return type(op) is ir.Op and op_name(op) in _ADDRESS_OPS


class _AddressCollector(TIRVisitor):
    def __init__(self) -> None:
        self.buffers: list[ir.expr.Var] = []
        self._inside_address = 0

    def visit_Call(self, node: ir.expr.Call) -> None:
        takes_address = takes_address_call(node)
        self._inside_address += takes_address
        self.generic_visit(node)
        self._inside_address -= takes_address

    def visit_TensorLoad(self, node: Any) -> None:
        if self._inside_address:
            self._add(node.source)
        self.generic_visit(node)

    def visit_Var(self, node: ir.expr.Var) -> None:
        if self._inside_address:
            self._add(node)

    def _add(self, var: ir.expr.Var) -> None:
        if is_shared_buffer(var) and not any(var.same_as(b) for b in self.buffers):
            self.buffers.append(var)


class _AddressCalls(TIRVisitor):
    """The outermost address-taking calls of a tree, in visiting order (only calls are
    dispatched to Python: the rest of the tree is walked in C++)."""

    def __init__(self) -> None:
        self.calls: list[ir.expr.Call] = []

    def visit_Call(self, node: ir.expr.Call) -> None:
        if takes_address_call(node):
            self.calls.append(node)
        else:
            self.generic_visit(node)


def shared_buffers_addressed(expr: Any) -> list[ir.expr.Var]:
    """Shared buffers whose address ``expr`` takes (``S.data``, ``address_of(S[i])``,
    ``tvm_access_ptr(..., S.data, ...)``), in first-seen order, without duplicates.

    Plain loads ``S[i]`` are not address-taking and are not reported.
    """
    # only the insides of address-taking calls name addresses: find those first, then
    # visit every variable and load in them
    finder = _AddressCalls()
    finder.visit(expr)
    collector = _AddressCollector()
    for call in finder.calls:
        collector.visit(call)
    return collector.buffers


def addresses_dynamic_shared(stmt: Any) -> bool:
    """Whether some call in ``stmt`` takes the address of a ``shared.dyn`` buffer (as
    :func:`shared_buffers_addressed` would find, without its order: every address-taking
    call is looked into, from the statement's shared walk)."""
    calls: list[ir.expr.Call] = []

    def check(node: ir.expr.Call) -> None:
        if takes_address_call(node):
            calls.append(node)

    post_order_visit(stmt, check, (ir.expr.Call,))
    collector = _AddressCollector()
    for call in calls:
        collector.visit(call)
    return any(buffer_scope(b) == "shared.dyn" for b in collector.buffers)


def loads_local_buffer(exprs: list[Any]) -> bool:
    """Whether any of ``exprs`` loads a ``local``-scope buffer (register arrays)."""
    found: list[Any] = []

    def check(load: Any) -> None:
        if (buffer_scope(load.source) or "").startswith("local"):
            found.append(load)

    for expr in exprs:
        post_order_visit(expr, check, (ir.expr.TensorLoad,))
    return bool(found)
