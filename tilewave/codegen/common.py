"""What the per-target op tables share: the builder signature and operand checks."""

from __future__ import annotations

from collections.abc import Callable

from tvm import ir, tirx

from tilewave.errors import MalformedKernelError, where
from tilewave.targets import TargetInfo

__all__ = ["OpLowering", "immediate_operand"]

#: Builds the target form of one tilewave op call: ``(call, target, func_name) -> expr``.
OpLowering = Callable[[ir.expr.Call, TargetInfo, str], ir.expr.Expr]


def immediate_operand(
    call: ir.expr.Call, func_name: str, meaning: str, *, allow_negative: bool = False
) -> int:
    """The call's single operand as a Python int, or raise if it is not a constant.

    Wait counts and barrier ids are instruction immediates on every target, so they must be
    known when the kernel is compiled.

    Args:
        allow_negative: accept a negative constant (barrier ids: -1 is gfx12's workgroup
            barrier); wait counts must be 0 or more.

    Raises:
        MalformedKernelError: the operand is missing, not an integer constant, or negative
            when that is not allowed.
    """
    name = call.op.name
    if len(call.args) != 1 or not isinstance(call.args[0], tirx.IntImm):
        raise MalformedKernelError(
            f"LowerTilewaveOps: {name} {where(func_name, call)} needs one integer constant "
            f"operand ({meaning}); it is an instruction immediate. Pass a literal such as 0."
        )
    value = int(call.args[0].value)
    if value < 0 and not allow_negative:
        raise MalformedKernelError(
            f"LowerTilewaveOps: {name} {where(func_name, call)} has a negative operand {value}; "
            f"{meaning} must be 0 or more."
        )
    return value
