"""Local scalars assigned once: their value, so shared indices that load them can be read.

TVMScript's plain assignment in a kernel (``wg = tx // 128``, ``lane = tx % 32``) becomes a
one-element ``local`` buffer stored once and loaded wherever the name is used. Shared
indices such as ``A_s[stage * 8192 + wg * 4096]`` then contain a *load*, which no
disjointness proof can see through. :func:`single_assignment_scalars` finds the local
one-element buffers stored exactly once, at the top level of the kernel body (not in a
loop or branch), with a value made of constants, thread and block indices, parameters and
other such scalars, and returns that value for each: a load of the buffer after its store
equals the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import ir, tirx

from tilewave.analysis.shared_buffers import buffer_scope
from tilewave.ir.walker import ffi_list, node_is, post_order_visit, replace_nodes

__all__ = ["ScalarForwarder", "loads_memory", "single_assignment_scalars"]


def _top_level_stores(body: Any) -> list[Any]:
    """Stores reached without entering a serial loop, a branch or a ``While``."""
    out: list[Any] = []
    stack = [body]
    while stack:
        node = stack.pop()
        kind = type(node)  # (TIR statement classes have no subclasses: exact type tests)
        if kind is tirx.SeqStmt:
            stack.extend(reversed(ffi_list(node.seq)))
        elif kind is tirx.BufferStore:
            out.append(node)
        elif kind is tirx.Evaluate:
            continue
        elif kind is tirx.For and node.kind == tirx.ForKind.THREAD_BINDING:
            stack.append(node.body)
        elif kind not in (tirx.For, tirx.IfThenElse, tirx.While):
            child = getattr(node, "body", None)
            if node_is(child, tirx.Stmt):
                stack.append(child)
    return out


def single_assignment_scalars(func: Any) -> dict[Any, Any]:
    """Local one-element buffer -> the value of its only (top-level) store."""
    scalar_buffers: dict[int, bool] = {}  # by handle: a kernel stores to few buffers
    candidates = []
    for store in _top_level_stores(func.body):
        key = hash(store.buffer)
        known = scalar_buffers.get(key)
        if known is None:
            known = scalar_buffers[key] = _is_local_scalar(store.buffer)
        if known:
            candidates.append(store)
    if not candidates:
        return {}  # (most kernels: no walk over the body needed)
    counts: dict[int, int] = {}  # by node handle (``==`` on expressions builds ``EQ``)

    def count(node: Any) -> None:
        if isinstance(node, tirx.BufferStore):
            key = hash(node.buffer)
            counts[key] = counts.get(key, 0) + 1
        elif isinstance(node, ir.expr.Call) and isinstance(node.op, ir.Op):
            # a buffer whose address is taken may be written through the pointer
            for arg in ffi_list(node.args):
                if type(arg).__name__ == "TensorLoad" or (
                    isinstance(arg, ir.expr.Call)
                    and getattr(arg.op, "name", "") in ("tirx.address_of", "tirx.buffer_data")
                ):
                    inner = arg.args[0] if isinstance(arg, ir.expr.Call) else arg
                    source = getattr(inner, "source", inner)
                    counts[hash(source)] = counts.get(hash(source), 0) + 2

    post_order_visit(func.body, count, (tirx.BufferStore, ir.expr.Call))
    values: dict[Any, Any] = {}
    for store in candidates:
        buffer = store.buffer
        if counts.get(hash(buffer), 0) != 1:
            continue
        value = ScalarForwarder(values).visit(store.value)
        if loads_memory(value):
            continue
        values[buffer] = value
    return values


def _is_local_scalar(buffer: Any) -> bool:
    """A ``local`` buffer of one element."""
    shape = buffer.ty.shape
    return (
        buffer_scope(buffer) == "local"
        and len(shape) == 1
        and isinstance(shape[0], tirx.IntImm)
        and int(shape[0].value) == 1
    )


def loads_memory(expr: Any) -> bool:
    """Whether ``expr`` may read memory: it holds a load or a call (a call is taken to read:
    an intrinsic may load through a pointer)."""
    found = False

    def check(node: Any) -> None:
        nonlocal found
        if type(node).__name__ == "TensorLoad" or isinstance(node, ir.expr.Call):
            found = True

    post_order_visit(expr, check, (ir.expr.TensorLoad, ir.expr.Call))
    return found


class ScalarForwarder:
    """Replaces loads of single-assignment scalars by their values."""

    def __init__(self, values: Mapping[Any, Any]) -> None:
        # by node handle: ``==`` on variables would build an ``EQ`` expression
        self._values = {hash(buffer): value for buffer, value in values.items()}

    def visit(self, expr: Any) -> Any:
        """``expr`` with every load of a scalar replaced by the scalar's value."""
        if not self._values:
            return expr
        return replace_nodes(expr, ir.expr.TensorLoad, self._value_of)

    def _value_of(self, load: Any) -> Any:
        return self._values.get(hash(load.source))
