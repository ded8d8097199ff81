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

from tilewave.ir.walker import kind_by_class, post_order_visit
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
    ok = True

    def check(node: Any) -> None:
        nonlocal ok
        kind = kind_by_class(_node_kinds, node, _arith_kind)
        if kind == "cast":
            ok = ok and str(node.ty).startswith(("int", "uint", "bool"))
        elif kind == "other":
            ok = False

    post_order_visit(expr, check)
    return ok


#: node class -> "cast", "arith" (allowed) or "other"
_node_kinds: dict[type, str] = {}


def _arith_kind(node: Any) -> str:
    cls = type(node)
    if issubclass(cls, tirx.Cast):
        return "cast"
    return "arith" if issubclass(cls, _ARITH_TYPES) else "other"
