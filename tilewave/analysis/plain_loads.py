"""The loads of a call-free expression, in evaluation order, found in Python.

Most statements of a kernel store arithmetic on loads, variables and constants
(``S[tx] = S[tx] + 1``, ``B[r, tx] = S[(tx + 3) % 128]``, swizzled indices with ``^``,
``&`` and shifts). For those, what the access collector
(:class:`tilewave.analysis.shared_access._AccessCollector`, a C++ walk calling back into
Python at every load and call) reports is just every load of a shared buffer, its indices'
loads first. A walk in Python over exactly those node classes finds them at a
fraction of the cost; any other node (a call above all: address-taking ops, async copies,
intrinsics) makes it give up, and the collector decides.
"""

from __future__ import annotations

from typing import Any

from tvm import ir, tirx

from tilewave.ir.walker import ffi_list

__all__ = ["plain_loads"]

#: operand-free nodes
_LEAVES = frozenset({ir.expr.Var, tirx.IntImm, tirx.FloatImm})
#: nodes whose operands are exactly ``a`` and ``b``, evaluated in that order
_BINARY = frozenset(
    {
        tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
        tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE,
        tirx.And, tirx.Or, tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor, tirx.LShift,
        tirx.RShift,
    }
)  # fmt: skip
_LOAD = ir.expr.TensorLoad


def plain_loads(expr: Any, found: list[tuple[Any, list[Any]]]) -> bool:
    """Append ``(buffer, indices)`` of every load in ``expr`` to ``found``, each after the
    loads in its indices (the order the collector reports them in). Returns False, having
    appended some or none, when ``expr`` holds another kind of node."""
    kind = type(expr)  # (TIR node classes have no subclasses: exact class tests)
    if kind in _LEAVES:
        return True
    if kind in _BINARY:
        return plain_loads(expr.a, found) and plain_loads(expr.b, found)
    if kind is _LOAD:
        indices = ffi_list(expr.indices)
        for index in indices:
            if not plain_loads(index, found):
                return False
        found.append((expr.source, indices))
        return True
    if kind is tirx.Cast:
        return plain_loads(expr.value, found)
    if kind is tirx.Not or kind is tirx.BitwiseNot:
        return plain_loads(expr.a, found)
    return False
