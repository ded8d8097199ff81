"""Integer and boolean arithmetic the disjointness proofs can read.

An index or condition built only from variables, integer constants and arithmetic,
comparison and bitwise operators is *analysable*: the analyzer and the enumeration
(:mod:`tilewave.analysis.region_proof`, :mod:`tilewave.analysis.index_enumeration`) can
reason about its value. Loads, calls and ``Let`` are not: their values are unknown there.
"""

from __future__ import annotations

from typing import Any

from tvm import ir, tirx

from tilewave.kernel_memory import kernel_table, node_fact

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
    per compound node, children first: the indices of one kernel share the nodes of its
    ``Bind`` values, so each such node is read once however many indices hold it."""
    kind = type(expr)
    if kind is tirx.IntImm or kind is ir.expr.Var:
        return True
    return node_fact(_ANALYSABLE, expr, _analysable, _ANALYSABLE_LIMIT)


#: analysable's answers by node handle, with the node
_ANALYSABLE: dict[int, tuple[bool, Any]] = kernel_table()
_ANALYSABLE_LIMIT = 100_000


def _analysable(node: Any) -> bool:
    kind = type(node)
    operands = _operands.get(kind, _UNSEEN)
    if operands is _UNSEEN:
        operands = _operands[kind] = _operand_fields(kind)
    if operands is None:
        return False
    if operands is _CAST:
        return str(node.ty).startswith(("int", "uint", "bool")) and analysable(node.value)
    return all(analysable(getattr(node, name)) for name in operands)


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
