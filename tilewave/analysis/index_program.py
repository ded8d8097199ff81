"""Index expressions as postfix programs for the compiled enumeration core.

:func:`compile_program` turns a TIR integer expression over known variables into the
int64 words ``tilewave/native/points.c`` runs at every grid point. It accepts exactly the
expressions :func:`tilewave.analysis.index_enumeration._evaluate` evaluates and means the
same by them; where the NumPy evaluation would not be plain int64 arithmetic (arithmetic
on two booleans, which NumPy treats as logic) it raises :class:`Unsupported` and the
caller keeps the NumPy path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import ir, tirx

from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import node_is

__all__ = [
    "BINARY_OPERATIONS",
    "BITWISE_CALL_OPERATIONS",
    "BITWISE_TYPE_OPERATIONS",
    "Unsupported",
    "bitwise_parts",
    "compile_program",
]


class Unsupported(Exception):
    """The expression has no program (the NumPy path evaluates it)."""


#: the operations both enumeration paths evaluate, by name (the NumPy path maps each name
#: to a NumPy function, this module to an opcode of the compiled core)
BINARY_OPERATIONS = {
    tirx.Add: "add",
    tirx.Sub: "sub",
    tirx.Mul: "mul",
    tirx.FloorDiv: "floordiv",
    tirx.FloorMod: "floormod",
    tirx.Div: "truncdiv",
    tirx.Mod: "truncmod",
    tirx.Min: "min",
    tirx.Max: "max",
    tirx.EQ: "eq",
    tirx.NE: "ne",
    tirx.LT: "lt",
    tirx.LE: "le",
    tirx.GT: "gt",
    tirx.GE: "ge",
    tirx.And: "and",
    tirx.Or: "or",
}
BITWISE_TYPE_OPERATIONS = {
    "BitwiseAnd": "bitand",
    "BitwiseOr": "bitor",
    "BitwiseXor": "bitxor",
    "LShift": "shl",
    "RShift": "shr",
}
BITWISE_CALL_OPERATIONS = {
    "tirx.bitwise_and": "bitand",
    "tirx.bitwise_or": "bitor",
    "tirx.bitwise_xor": "bitxor",
    "tirx.shift_left": "shl",
    "tirx.shift_right": "shr",
}
#: operations NumPy evaluates to booleans; the others on two booleans are not int64 math
_LOGICAL = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not"})
_KEEPS_BOOL = frozenset({"min", "max", "bitand", "bitor", "bitxor"})


def bitwise_parts(expr: Any) -> tuple[str, Any, Any] | None:
    """``(operation, a, b)`` when ``expr`` is a bitwise operation or shift, written as a
    node (``a ^ b``) or as a call (``T.shift_right(a, b)``); else None."""
    kind = type(expr)
    name = BITWISE_TYPE_OPERATIONS.get(kind.__name__)
    if name is not None:
        return name, expr.a, expr.b
    if kind is ir.expr.Call and isinstance(expr.op, ir.Op):
        args = expr.args
        name = BITWISE_CALL_OPERATIONS.get(op_name(expr.op))
        if name is not None and len(args) == 2:
            return name, args[0], args[1]
    return None


def compile_program(expr: Any, slots: Mapping[int, int], opcodes: Mapping[str, int]) -> list[int]:
    """The postfix program of ``expr``. ``slots`` maps ``hash(var)`` (a TIR variable's
    handle) to its axis position; ``opcodes`` is the core's numbering."""
    code: list[int] = []
    _emit(expr, slots, opcodes, code)
    return code


def _emit(expr: Any, slots: Mapping[int, int], ops: Mapping[str, int], code: list[int]) -> bool:
    """Appends ``expr``'s program to ``code``; returns whether NumPy would make it a
    boolean."""
    kind = type(expr)
    if kind is tirx.IntImm:
        code += [ops["const"], int(expr.value)]
        return False
    if node_is(expr, ir.expr.Var):
        slot = slots.get(hash(expr))
        if slot is None:
            raise Unsupported(f"variable {expr} is not an axis")
        code += [ops["var"], slot]
        return False
    if kind is tirx.Cast:
        return _emit(expr.value, slots, ops, code)
    name = BINARY_OPERATIONS.get(kind)
    if name is not None:
        return _binary(name, expr.a, expr.b, slots, ops, code)
    bitwise = bitwise_parts(expr)
    if bitwise is not None:
        return _binary(*bitwise, slots, ops, code)
    if kind is tirx.Not:
        _emit(expr.a, slots, ops, code)
        code.append(ops["not"])
        return True
    if kind is tirx.Select:
        _emit(expr.condition, slots, ops, code)
        both = _emit(expr.true_value, slots, ops, code) & _emit(expr.false_value, slots, ops, code)
        code.append(ops["select"])
        return both
    if kind is ir.expr.Call and isinstance(expr.op, ir.Op):
        call = op_name(expr.op)
        args = expr.args
        if call == "tirx.if_then_else" and len(args) == 3:
            _emit(args[0], slots, ops, code)
            both = _emit(args[1], slots, ops, code) & _emit(args[2], slots, ops, code)
            code.append(ops["select"])
            return both
    raise Unsupported(kind.__name__)


def _binary(
    name: str, a: Any, b: Any, slots: Mapping[int, int], ops: Mapping[str, int], code: list[int]
) -> bool:
    both = _emit(a, slots, ops, code) & _emit(b, slots, ops, code)
    if both and name not in _LOGICAL and name not in _KEEPS_BOOL:
        raise Unsupported(f"{name} of two booleans")
    code.append(ops[name])
    return name in _LOGICAL or (both and name in _KEEPS_BOOL)
