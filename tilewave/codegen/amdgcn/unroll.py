"""Full unrolling of short serial loops before instruction selection.

Which loops are unrolled:

* a loop the user marked ``T.unroll`` (``ForKind.UNROLLED``) with a constant trip count of at
  most :data:`MAX_UNROLL_TRIPS`;
* a plain serial loop with a constant trip count of at most :data:`AUTO_UNROLL_TRIPS` whose
  unrolled body stays small (trips x statements <= :data:`AUTO_UNROLL_STATEMENTS`) and that
  holds no nested loop; a loop with a barrier or an MFMA only when it has at most
  :data:`SHORT_SYNC_TRIPS` steps (the counter, compare and branch of every step are SALU
  work LLVM's fully unrolled code does not execute; the selector loads each MFMA fragment
  where it is used, so unrolling does not keep every step's fragments live at once).

A longer serial loop (no nested loop, barrier or MFMA) whose trip count is a
multiple of :data:`PARTIAL_FACTOR` and whose body, repeated that many times, stays within
:data:`PARTIAL_UNROLL_STATEMENTS` is unrolled by that factor (:func:`partially_unrolled`): a
loop of ``trips / 4`` steps over four copies, so the loop overhead is paid once per four
steps and neighbouring elements (``A[i, 4m + u]``, u = 0..3) load as one ``dwordx4``.

An unrolled copy gets the loop variable replaced by its value, constant sub-expressions
folded (so ``k * 16`` becomes an offset the memory instructions can hold in their offset
fields) and fresh variables for its lets (each copy defines its own; the selector's value
table keys expressions by variable identity).
"""

from __future__ import annotations

from typing import Any

from tvm import ir, tirx

from tilewave.ir.intrinsics import OpEffect, callee_name, classify_call
from tilewave.ir.walker import TIRMutator, post_order_visit, substitute

__all__ = [
    "AUTO_UNROLL_STATEMENTS",
    "AUTO_UNROLL_TRIPS",
    "MAX_UNROLL_TRIPS",
    "PARTIAL_FACTOR",
    "PARTIAL_UNROLL_STATEMENTS",
    "partially_unrolled",
    "should_unroll",
    "unrolled_copies",
]

AUTO_UNROLL_TRIPS = 32
AUTO_UNROLL_STATEMENTS = 64
PARTIAL_FACTOR = 4
SHORT_SYNC_TRIPS = 8
PARTIAL_UNROLL_STATEMENTS = 128
MAX_UNROLL_TRIPS = 256

_FOLD = {
    tirx.Add: lambda a, b: a + b,
    tirx.Sub: lambda a, b: a - b,
    tirx.Mul: lambda a, b: a * b,
    tirx.FloorDiv: lambda a, b: a // b if b else None,
    tirx.FloorMod: lambda a, b: a % b if b else None,
    tirx.LShift: lambda a, b: a << b if 0 <= b < 32 else None,
    tirx.RShift: lambda a, b: a >> b if 0 <= b < 32 else None,
}
# shifts written as calls (T.shift_right(128, i)): folded like the nodes above
_FOLD_CALLS = {"tirx.shift_left": _FOLD[tirx.LShift], "tirx.shift_right": _FOLD[tirx.RShift]}


def _trip_count(loop: tirx.For) -> int | None:
    if not isinstance(loop.min, tirx.IntImm) or not isinstance(loop.extent, tirx.IntImm):
        return None
    if loop.step is not None and not (isinstance(loop.step, tirx.IntImm) and loop.step.value == 1):
        return None
    return int(loop.extent.value)


def _shape(body: Any) -> tuple[int, bool, bool]:
    """(statements in ``body``, whether it holds a loop, whether it holds a barrier or an
    MFMA)."""
    statements = 0
    nested = synchronising = False

    def visit(node: Any) -> None:
        nonlocal statements, nested, synchronising
        if isinstance(node, tirx.Stmt) and not isinstance(node, tirx.SeqStmt):
            statements += 1
        if isinstance(node, (tirx.For, tirx.While)):
            nested = True
        if isinstance(node, ir.expr.Call) and isinstance(node.op, ir.Op):
            effect = classify_call(node)
            name = callee_name(node)
            if (effect is not None and OpEffect.BARRIER in effect) or any(
                word in name for word in ("barrier", ".mfma.")
            ):
                synchronising = True

    post_order_visit(body, visit)
    return statements, nested, synchronising


def should_unroll(loop: tirx.For) -> bool:
    """Whether the selector unrolls ``loop`` (see the module docstring for the rules)."""
    trips = _trip_count(loop)
    if trips is None or trips <= 0:
        return False
    if int(loop.kind) == int(tirx.ForKind.UNROLLED):
        return trips <= MAX_UNROLL_TRIPS
    if int(loop.kind) != int(tirx.ForKind.SERIAL) or trips > AUTO_UNROLL_TRIPS:
        return False
    statements, nested, synchronising = _shape(loop.body)
    if nested or (synchronising and trips > SHORT_SYNC_TRIPS):
        return False
    return trips * statements <= AUTO_UNROLL_STATEMENTS


class _FoldConstants(TIRMutator):
    def generic_visit(self, node: Any) -> Any:
        node = super().generic_visit(node)
        if isinstance(node, ir.expr.Call) and isinstance(node.op, ir.Op):
            call_fold = _FOLD_CALLS.get(str(node.op.name))
            args = list(node.args)
            if call_fold is not None and all(isinstance(a, tirx.IntImm) for a in args):
                value = call_fold(args[0].value, args[1].value)
                if value is not None:
                    return tirx.IntImm(str(args[0].ty), value)
            return node
        fold = _FOLD.get(type(node))
        if fold is not None and isinstance(node.a, tirx.IntImm) and isinstance(node.b, tirx.IntImm):
            value = fold(node.a.value, node.b.value)
            if value is not None:
                return tirx.IntImm(str(node.a.ty), value)
        return node


def unrolled_copies(loop: tirx.For) -> list[Any]:
    """The body of ``loop`` once per iteration, in order (``should_unroll`` must hold)."""
    trips = _trip_count(loop)
    if trips is None:
        raise ValueError("unrolled_copies needs a loop with a constant trip count")
    lets: list[Any] = []
    post_order_visit(
        loop.body, lambda n: lets.append(n.var) if type(n).__name__ == "Bind" else None
    )
    copies = []
    for i in range(trips):
        mapping: dict[Any, Any] = {v: tirx.Var(v.name, v.ty) for v in lets}
        mapping[loop.loop_var] = tirx.IntImm(str(loop.loop_var.ty), int(loop.min.value) + i)
        copies.append(_FoldConstants().visit(substitute(loop.body, mapping)))
    return copies


def partially_unrolled(loop: tirx.For) -> tirx.For | None:
    """``loop`` as a loop of ``trips / PARTIAL_FACTOR`` steps whose body is
    :data:`PARTIAL_FACTOR` copies of the original body (loop variable ``m * F + u``), or
    None when the rules in the module docstring do not allow it."""
    trips = _trip_count(loop)
    if (trips is None or trips % PARTIAL_FACTOR or trips <= PARTIAL_FACTOR
            or int(loop.kind) != int(tirx.ForKind.SERIAL)):
        return None
    statements, nested, synchronising = _shape(loop.body)
    if nested or synchronising or statements * PARTIAL_FACTOR > PARTIAL_UNROLL_STATEMENTS:
        return None
    lets: list[Any] = []
    post_order_visit(
        loop.body, lambda n: lets.append(n.var) if type(n).__name__ == "Bind" else None
    )
    outer = tirx.Var(f"{loop.loop_var.name}_outer", loop.loop_var.ty)
    dtype = str(loop.loop_var.ty)
    copies = []
    for u in range(PARTIAL_FACTOR):
        mapping: dict[Any, Any] = {v: tirx.Var(v.name, v.ty) for v in lets}
        mapping[loop.loop_var] = (loop.min + outer * tirx.IntImm(dtype, PARTIAL_FACTOR)
                                  + tirx.IntImm(dtype, u))
        copies.append(substitute(loop.body, mapping))
    return tirx.For(outer, tirx.IntImm(dtype, 0), tirx.IntImm(dtype, trips // PARTIAL_FACTOR),
                    tirx.ForKind.SERIAL, tirx.SeqStmt(copies))
