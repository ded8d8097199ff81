"""Walking and rebuilding TIR, tilewave's own ops, and the op table."""

from tilewave.ir import ops
from tilewave.ir.intrinsics import (
    OpEffect,
    classify,
    classify_call,
    intrinsic_table,
    register_intrinsic,
    unregister_intrinsic,
)
from tilewave.ir.walker import TIRMutator, TIRVisitor, post_order_visit, rebuild, substitute

__all__ = [
    "OpEffect",
    "TIRMutator",
    "TIRVisitor",
    "classify",
    "classify_call",
    "intrinsic_table",
    "ops",
    "post_order_visit",
    "rebuild",
    "register_intrinsic",
    "substitute",
    "unregister_intrinsic",
]
