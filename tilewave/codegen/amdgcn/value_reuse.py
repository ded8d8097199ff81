"""Reuse of computed index arithmetic: scoped value numbering and loop-invariant hoisting.

The selector computes each pure expression (integer/float arithmetic over variables and
constants: no loads, no calls with effects) at most once per dominating scope:

* :class:`ValueTable` remembers which register already holds a structurally equal
  expression. Scopes follow the TIR nesting (a loop body, a branch): a value computed
  inside one is forgotten when it ends, so a reuse is always dominated by its definition
  and never sees a register written under a narrower EXEC mask.
* :class:`LoopNest` knows which variables each enclosing serial loop defines (its counter,
  the lets in its body). An expression that uses none of them is emitted in the loop's
  preheader instead of the body, and recorded in the scope around the loop.

Hoisting moves only pure arithmetic, which is safe to run speculatively (no faults: the
backend's divisions are shifts and masks), and it never moves anything across a
definition of a variable the expression reads.

Loads, and expressions over loaded values, are reused too (never hoisted): each table entry
remembers the buffers it read (:func:`loaded_buffers`), and a store to one of them, a
barrier (for shared buffers) or entering a loop whose body writes one of them
(:func:`written_buffers`) forgets the entry, in every open scope.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tvm_ffi
from tvm import ir, tirx

from tilewave.ir.walker import post_order_visit

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tilewave.codegen.amdgcn.kir import Instr, Label

__all__ = [
    "LoopFrame",
    "LoopNest",
    "ValueTable",
    "element",
    "loaded_buffers",
    "overlaps",
    "pure_free_vars",
    "written_buffers",
]

_PURE_CALLS = frozenset({"tirx.min", "tirx.max", "tirx.fma", "tirx.shift_left",
                         "tirx.shift_right", "tirx.bitwise_and", "tirx.bitwise_or",
                         "tirx.bitwise_xor"})
# calls that compute from their arguments only: reusable, but not hoisted out of loops
# (a transcendental or division is not worth running when the loop does not)
_REUSABLE_CALLS = _PURE_CALLS | frozenset({"tirx.exp", "tirx.exp2", "tirx.log", "prim.log2",
                                           "tirx.sqrt", "tirx.rsqrt", "tirx.fabs",
                                           "tirx.reinterpret", "prim.if_then_else"})


def pure_free_vars(expr: Any) -> set[Any] | None:
    """The variables ``expr`` reads, or None if it loads memory or calls anything impure."""
    found: set[Any] = set()
    pure = True

    def visit(node: Any) -> None:
        nonlocal pure
        if isinstance(node, ir.expr.Var):
            found.add(node)
        elif isinstance(node, ir.expr.TensorLoad):
            pure = False
        elif isinstance(node, ir.expr.Call) and (
            not isinstance(node.op, ir.Op) or str(node.op.name) not in _PURE_CALLS
        ):
            pure = False
        elif isinstance(node, (tirx.Ramp, tirx.Broadcast)):
            pure = False  # vector values are selected lane by lane, not as one register

    post_order_visit(expr, visit)
    return found if pure else None


def element(buffer: Any, indices: Any) -> tuple[Any, tuple[int, ...] | None]:
    """A memory location as the value table tracks it: (buffer, constant indices), the
    indices None when any is not a constant (then it stands for the whole buffer)."""
    if all(isinstance(i, tirx.IntImm) for i in indices):
        return buffer, tuple(int(i.value) for i in indices)
    return buffer, None


def overlaps(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    """Two :func:`element` locations may be the same memory."""
    return a[0].same_as(b[0]) and (a[1] is None or b[1] is None or a[1] == b[1])


def loaded_buffers(expr: Any) -> frozenset[Any] | None:
    """The :func:`element` locations ``expr`` loads, or None if it calls anything impure
    (its only impurity may be loads: then it can be reused until one of them is written)."""
    found: set[Any] = set()
    pure = True

    def visit(node: Any) -> None:
        nonlocal pure
        if isinstance(node, ir.expr.TensorLoad):
            found.add(element(node.source, node.indices))
        elif isinstance(node, ir.expr.Call) and (
            not isinstance(node.op, ir.Op) or str(node.op.name) not in _REUSABLE_CALLS
        ):
            pure = False
        elif isinstance(node, (tirx.Ramp, tirx.Broadcast)):
            pure = False

    post_order_visit(expr, visit)
    return frozenset(found) if pure else None


def written_buffers(stmt: Any) -> tuple[set[Any], bool]:
    """(:func:`element` locations ``stmt`` stores to or passes by address to a call, whether
    it has a barrier): what a statement or a loop body may change."""
    written: set[Any] = set()
    barrier = False

    def visit(node: Any) -> None:
        nonlocal barrier
        if isinstance(node, tirx.BufferStore):
            written.add(element(node.buffer, node.indices))
        elif isinstance(node, ir.expr.Call) and isinstance(node.op, ir.Op):
            name = str(node.op.name)
            if name == "tirx.address_of" and isinstance(node.args[0], ir.expr.TensorLoad):
                written.add((node.args[0].source, None))
            elif name in ("tirx.tvm_storage_sync", "tilewave.lds_barrier",
                          "tirx.call_llvm_intrin"):
                barrier = True

    post_order_visit(stmt, visit)
    return written, barrier


class ValueTable:
    """Scoped map from pure expressions (structurally compared) to selected values."""

    def __init__(self) -> None:
        self._scopes: list[dict[tvm_ffi.StructuralKey, Any]] = [{}]
        self._reads: dict[tvm_ffi.StructuralKey, frozenset[Any]] = {}

    @property
    def depth(self) -> int:
        """The index of the innermost open scope."""
        return len(self._scopes) - 1

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Values recorded inside the ``with`` block are forgotten when it ends."""
        self._scopes.append({})
        try:
            yield
        finally:
            self._scopes.pop()

    def lookup(self, expr: Any) -> Any | None:
        """The value recorded for an expression structurally equal to ``expr``, if any."""
        key = tvm_ffi.StructuralKey(expr)  # free variables compare by identity
        for table in reversed(self._scopes):
            if key in table:
                return table[key]
        return None

    def record(self, expr: Any, value: Any, depth: int | None = None,
               reads: frozenset[Any] = frozenset()) -> None:
        """Remember ``value`` for ``expr`` in scope ``depth`` (default: the innermost);
        ``reads``: the buffers it loaded (see :meth:`forget`)."""
        key = tvm_ffi.StructuralKey(expr)
        self._scopes[self.depth if depth is None else depth][key] = value
        if reads:
            self._reads[key] = reads

    def forget(self, written: Any) -> None:
        """Drop every value that read a location for which ``written(location)`` is true."""
        stale = {key for key, reads in self._reads.items() if any(written(b) for b in reads)}
        for key in stale:
            del self._reads[key]
            for table in self._scopes:
                table.pop(key, None)


@dataclass
class LoopFrame:
    """One serial loop being selected: what it defines and its preheader instructions."""

    defined: set[Any]
    scope_depth: int  # the ValueTable scope around the loop
    preheader: list[Instr | Label] = field(default_factory=list)


class LoopNest:
    """The serial loops enclosing the statement being selected, outermost first."""

    def __init__(self) -> None:
        self.frames: list[LoopFrame] = []

    @contextmanager
    def loop(self, loop_var: Any, scope_depth: int) -> Iterator[LoopFrame]:
        """Enter a loop whose counter is ``loop_var``; yields its frame."""
        frame = LoopFrame({loop_var}, scope_depth)
        self.frames.append(frame)
        try:
            yield frame
        finally:
            self.frames.pop()

    def level(self, free_vars: set[Any]) -> int:
        """Index of the innermost loop defining one of ``free_vars`` (-1: none does)."""
        for index in range(len(self.frames) - 1, -1, -1):
            if self.frames[index].defined & free_vars:
                return index
        return -1

    def define(self, var: Any, level: int) -> None:
        """Record that ``var`` gets its value in loop ``level`` (-1: outside every loop)."""
        if level >= 0:
            self.frames[level].defined.add(var)

    def hoist_target(self, free_vars: set[Any]) -> LoopFrame | None:
        """The outermost loop an expression over ``free_vars`` is invariant in, if any."""
        level = self.level(free_vars)
        if level + 1 < len(self.frames):
            return self.frames[level + 1]
        return None
