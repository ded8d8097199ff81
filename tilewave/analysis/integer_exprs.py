"""Integer and boolean arithmetic the disjointness proofs can read.

An index or condition built only from variables, integer constants and arithmetic,
comparison and bitwise operators is *analysable*: the analyzer and the enumeration
(:mod:`tilewave.analysis.region_proof`, :mod:`tilewave.analysis.index_enumeration`) can
reason about its value. Loads, calls and ``Let`` are not: their values are unknown there.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import ir, tirx

from tilewave.kernel_memory import kernel_table, remember

__all__ = ["analysable"]

_ARITH_TYPES = (
    ir.expr.Var,
    tirx.IntImm,
    tirx.Add,
    tirx.Sub,
    tirx.Mul,
    tirx.Div,
    tirx.Mod,
    tirx.FloorDiv,
    tirx.FloorMod,
    tirx.Min,
    tirx.Max,
    tirx.EQ,
    tirx.NE,
    tirx.LT,
    tirx.LE,
    tirx.GT,
    tirx.GE,
    tirx.And,
    tirx.Or,
    tirx.Not,
    tirx.Select,
    tirx.BitwiseAnd,
    tirx.BitwiseOr,
    tirx.BitwiseXor,
    tirx.RShift,
    tirx.LShift,
)


def analysable(expr: Any) -> bool:
    """True when ``expr`` is integer/boolean arithmetic over variables and constants only
    (no loads, calls or lets, whose values the analyzer would treat as fixed). Remembered
    per expression structure (index expressions recur in many statements)."""
    key = tvm_ffi.StructuralKey(expr)
    found = _ANALYSABLE.get(key)
    if found is None:
        found = remember(_ANALYSABLE, key, _analysable(expr), _ANALYSABLE_LIMIT)
    return found


_ANALYSABLE: dict[Any, bool] = kernel_table()
_ANALYSABLE_LIMIT = 16_384


def _analysable(expr: Any) -> bool:
    # (a Python walk over the node classes allowed, giving up at the first other one:
    # about four times cheaper than a C++ walk that calls back into Python at every node)
    stack = [expr]
    while stack:
        node = stack.pop()
        operands = _operands.get(type(node), _UNSEEN)
        if operands is _UNSEEN:
            operands = _operands[type(node)] = _operand_fields(type(node))
        if operands is None:
            return False
        if operands is _CAST:
            if not str(node.ty).startswith(("int", "uint", "bool")):
                return False
            stack.append(node.value)
            continue
        for name in operands:
            stack.append(getattr(node, name))
    return True


_UNSEEN = ("unseen",)
_CAST = ("cast",)
#: node class -> its operand fields (``()`` for a variable or constant), :data:`_CAST`, or
#: None (not analysable)
_operands: dict[type, tuple[str, ...] | None] = {}


def _operand_fields(cls: type) -> tuple[str, ...] | None:
    if issubclass(cls, tirx.Cast):
        return _CAST
    if issubclass(cls, (ir.expr.Var, tirx.IntImm)):
        return ()
    if issubclass(cls, tirx.Not):
        return ("a",)
    if issubclass(cls, tirx.Select):
        return ("condition", "true_value", "false_value")
    if issubclass(cls, _ARITH_TYPES):
        return ("a", "b")
    return None
