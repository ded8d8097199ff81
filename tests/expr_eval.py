"""A Python evaluator of the integer expressions the analysis tests generate: the oracle
their brute-force checks use (it shares nothing with TVM's analyzer or with NumPy)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from tvm import ir, tirx

_BINARY: dict[type, Callable[[int, int], Any]] = {
    tirx.Add: operator.add,
    tirx.Sub: operator.sub,
    tirx.Mul: operator.mul,
    tirx.FloorDiv: operator.floordiv,
    tirx.FloorMod: operator.mod,
    tirx.BitwiseAnd: operator.and_,
    tirx.RShift: operator.rshift,
    tirx.LT: operator.lt,
    tirx.GE: operator.ge,
    tirx.EQ: operator.eq,
    tirx.And: lambda a, b: a and b,
}


def evaluate(expr: Any, env: dict[str, int]) -> int:
    """The value of ``expr`` with each variable named in ``env`` set to its value
    (comparisons give 0 or 1; a cast to ``bool`` gives whether its operand is nonzero)."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, ir.expr.Var):
        return env[str(expr.name)]
    if isinstance(expr, tirx.Cast):
        value = evaluate(expr.value, env)
        return int(value != 0) if str(expr.ty.dtype) == "bool" else value
    if isinstance(expr, tirx.Not):
        return int(not evaluate(expr.a, env))
    return int(_BINARY[type(expr)](evaluate(expr.a, env), evaluate(expr.b, env)))
