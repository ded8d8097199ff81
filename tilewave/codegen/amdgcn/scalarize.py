"""One lane of a vector TIR expression, as a scalar expression over a lane variable.

TVM's ``VectorizeLoop`` leaves ``B[Ramp(base, 1, w)] = <vector value>``; the selector turns
it back into a ``T.vectorized`` loop whose body is :func:`lane_of` the value. Every node is
rebuilt through its constructor, so the result carries scalar types (a generic rebuild
would keep the ``float32x4`` type of the vector node and TVM would reject the store).
"""

from __future__ import annotations

import re

from tvm import ir, tirx

__all__ = ["NotScalarizable", "lane_of"]

_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
           tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And,
           tirx.Or)


class NotScalarizable(Exception):  # an internal signal, turned into a user error
    """A vector node :func:`lane_of` cannot split into lanes; ``kind`` names it."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def element_type(dtype: str) -> str:
    """``float32x4`` -> ``float32`` (a scalar dtype is returned unchanged)."""
    return re.sub(r"x\d+$", "", dtype)


def lane_of(expr: object, lane: object) -> object:
    """Lane ``lane`` of ``expr``: ramps become ``base + lane * stride``, broadcasts their
    value, vector loads scalar loads; arithmetic, comparisons, casts, selects and op calls
    are rebuilt on their lanes.

    Raises:
        NotScalarizable: a node kind with no lane-wise meaning here (``kind`` names it).
    """
    if isinstance(expr, tirx.Ramp):
        return lane_of(expr.base, lane) + lane * lane_of(expr.stride, lane)
    if isinstance(expr, tirx.Broadcast):
        return lane_of(expr.value, lane)
    if isinstance(expr, ir.expr.TensorLoad):
        return tirx.BufferLoad(expr.source, [lane_of(i, lane) for i in expr.indices])
    if isinstance(expr, (ir.expr.Var, tirx.IntImm, tirx.FloatImm)):
        return expr
    if isinstance(expr, _BINARY):
        return type(expr)(lane_of(expr.a, lane), lane_of(expr.b, lane))
    if isinstance(expr, tirx.Not):
        return tirx.Not(lane_of(expr.a, lane))
    if isinstance(expr, tirx.Cast):
        return tirx.Cast(element_type(str(expr.ty)), lane_of(expr.value, lane))
    if isinstance(expr, tirx.Select):
        return tirx.Select(lane_of(expr.condition, lane), lane_of(expr.true_value, lane),
                           lane_of(expr.false_value, lane))
    if isinstance(expr, ir.expr.Call) and isinstance(expr.op, ir.Op):
        name = str(expr.op.name)
        if name in ("tirx.call_llvm_pure_intrin", "tirx.call_llvm_intrin", "tirx.reinterpret"):
            raise NotScalarizable(f"a vector {name} call")
        return ir.expr.Call(expr.op, [lane_of(a, lane) for a in expr.args],
                            ret_ty=element_type(str(expr.ty)))
    raise NotScalarizable(type(expr).__name__)
