"""Vectorised evaluation of TIR expressions for a set of threads at once.

A value is a NumPy array with one entry per executing thread (``(n,)``), or ``(n, lanes)``
for vector expressions (``Ramp``/``Broadcast``). Integers are ``int64``, floats ``float64``,
booleans ``bool``; a ``Cast`` rounds through the target dtype (``uint32`` wraps, ``float16``
rounds). Pointers are integers (see :mod:`tilewave.racecheck.memory`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import ir, tirx

from tilewave.errors import MalformedKernelError, where
from tilewave.racecheck.memory import np_dtype

__all__ = ["BINARY", "canonical", "cast_to", "pair", "trunc_div"]


def canonical(values: Any, dtype: str) -> np.ndarray:
    """``values`` in the evaluator's representation for TVM dtype ``dtype``."""
    text = str(dtype)
    if text.startswith("bool"):
        return np.asarray(values, dtype=bool)
    if text.startswith(("float", "bfloat")):
        return np.asarray(values, dtype=np.float64)
    return np.asarray(values).astype(np.int64, copy=False)


def cast_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """Convert ``values`` to TVM dtype ``dtype`` (with its rounding / wrap-around)."""
    text = str(dtype).split("x")[0] if "x" in str(dtype) and not str(dtype).startswith(
        "float8") else str(dtype)
    if text in ("handle", "void"):
        return np.asarray(values).astype(np.int64)
    if text.startswith("bool"):
        return np.asarray(values) != 0
    target = np_dtype(text)
    values = np.asarray(values)
    if target.kind in "iu" and values.dtype.kind == "f":
        values = np.trunc(np.nan_to_num(values))
    if target.kind in "iu":
        # integer conversions wrap like the hardware's (uint32 ^ 1, int8 overflow...)
        wrapped = values.astype(np.int64).astype(target) if values.dtype.kind != "u" \
            else values.astype(target)
        return canonical(wrapped.astype(np.int64) if target != np.uint64
                         else wrapped.view(np.int64), text)
    return canonical(values.astype(target), text)


def pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Make a scalar-per-thread and a vector-per-thread operand broadcast together."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 1 and b.ndim == 2:
        a = a[:, None]
    elif a.ndim == 2 and b.ndim == 1:
        b = b[:, None]
    return a, b


def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division (rounds toward zero)."""
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where((a < 0) != (b < 0), -q, q)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        with np.errstate(divide="ignore", invalid="ignore"):
            return a / b
    return trunc_div(a, b)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return np.fmod(a, b)
    return a - b * trunc_div(a, b)


def _floordiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return np.floor(a / b)
    return a // np.where(b == 0, 1, b)


def _floormod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a - np.floor(a / b) * b
    return a % np.where(b == 0, 1, b)


#: expression class name -> NumPy implementation
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _div,
    "Mod": _mod,
    "FloorDiv": _floordiv,
    "FloorMod": _floormod,
    "Min": np.minimum,
    "Max": np.maximum,
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
    "LShift": np.left_shift,
    "RShift": np.right_shift,
}

#: pure intrinsic calls that are one of the binary operations above
CALL_BINARY = {
    "tirx.bitwise_and": "BitwiseAnd",
    "tirx.bitwise_or": "BitwiseOr",
    "tirx.bitwise_xor": "BitwiseXor",
    "tirx.shift_left": "LShift",
    "tirx.shift_right": "RShift",
}

#: pure math calls evaluated elementwise
CALL_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tirx.exp": np.exp,
    "tirx.exp2": np.exp2,
    "tirx.log": np.log,
    "tirx.sqrt": np.sqrt,
    "tirx.rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tirx.fabs": np.abs,
    "tirx.abs": np.abs,
    "tirx.floor": np.floor,
    "tirx.ceil": np.ceil,
    "tirx.tanh": np.tanh,
    "tirx.sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tirx.bitwise_not": np.invert,
}


def unsupported(func_name: str, node: Any, what: str) -> MalformedKernelError:
    """The error for an expression racecheck cannot evaluate."""
    return MalformedKernelError(
        f"racecheck: cannot evaluate {what} {where(func_name, node)}. Register its effect "
        "with tilewave.register_intrinsic if it touches shared memory, or lower it first."
    )


def is_string(node: Any) -> bool:
    """Whether ``node`` is a string immediate (a PTX modifier token)."""
    return isinstance(node, ir.expr.StringImm)


def int_value(node: Any) -> int | None:
    """The value of an integer immediate, or ``None``."""
    return int(node.value) if isinstance(node, tirx.IntImm) else None
