"""tilewave's own TIR ops, registered once with TVM's op registry at import.

They carry what the synchronisation passes decide, independently of the target, and are
rewritten into target instructions by :mod:`tilewave.codegen` (``LowerTilewaveOps``):

==============================  ==========================================================
``tilewave.lds_barrier()``      workgroup barrier: ``__syncthreads()`` / ``s_barrier``
``tilewave.barrier_signal(id)`` split barrier, signal half: mbarrier arrive (CUDA) /
                                ``s_barrier_signal`` (gfx12)
``tilewave.barrier_wait(id)``   split barrier, wait half: mbarrier phase wait (CUDA) /
                                ``s_barrier_wait`` (gfx12)
``tilewave.wait_async_ops(n)``  wait until at most ``n`` async global->shared copies are
                                outstanding: ``cp.async.wait_group n`` / ``s_waitcnt vmcnt(n)``
``tilewave.fence_proxy_async()`` generic->async proxy fence: ``fence.proxy.async.shared::cta``
==============================  ==========================================================

TVMScript prints them as ``T.tilewave.lds_barrier()`` and parses that text back (the parser
resolves ``T.<op name>`` through the op registry), so before/after tests can be written
with them directly once ``tilewave`` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import ir, tirx

__all__ = ["TILEWAVE_OPS", "TilewaveOp", "call_op"]

_OPAQUE = 4  # CallEffectKind::kOpaque: never reordered, never removed


@dataclass(frozen=True)
class TilewaveOp:
    """Description of one op tilewave registers: its name, arity and documentation."""

    name: str
    num_inputs: int
    doc: str


TILEWAVE_OPS: tuple[TilewaveOp, ...] = (
    TilewaveOp("tilewave.lds_barrier", 0, "Workgroup-wide barrier on shared memory (LDS)."),
    TilewaveOp("tilewave.barrier_signal", 1, "Split barrier: signal arrival on barrier `id`."),
    TilewaveOp("tilewave.barrier_wait", 1, "Split barrier: wait for all arrivals on barrier `id`."),
    TilewaveOp(
        "tilewave.wait_async_ops",
        1,
        "Wait until at most `n` async global->shared copies issued by this thread are pending.",
    ),
    TilewaveOp(
        "tilewave.fence_proxy_async", 0, "Order generic-proxy shared accesses before async ones."
    ),
)


def _register_all() -> None:
    register = tvm_ffi.get_global_func("ir.RegisterOp")
    known = set(ir.Op.list_op_names())
    for spec in TILEWAVE_OPS:
        if spec.name not in known:
            register(spec.name, spec.doc)
        op = ir.Op.get(spec.name)
        if not op.has_attr("TCallEffectKind"):
            op.set_attr("TCallEffectKind", _OPAQUE)
            op.set_attr("TScriptPrinterName", spec.name)
            op.set_num_inputs(spec.num_inputs)


def call_op(name: str, *args: int | tvm.ir.expr.Expr) -> tirx.Evaluate:
    """Build the statement ``T.<name>(*args)`` for one of tilewave's ops."""
    converted = [tirx.IntImm("int32", a) if isinstance(a, int) else a for a in args]
    return tirx.Evaluate(ir.expr.Call(ir.Op.get(name), converted, ret_ty="void"))


_register_all()
