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
``tilewave.commit_async_ops()`` close the open group of cp.async copies:
                                ``cp.async.commit_group`` (CUDA only)
``tilewave.fence_proxy_async()`` generic->async proxy fence: ``fence.proxy.async.shared::cta``
==============================  ==========================================================

TVMScript prints them as ``T.tilewave.lds_barrier()`` and, once ``tilewave`` is imported,
parses that text back (tilewave installs a ``T.tilewave`` namespace), so before/after tests
can be written with them directly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx

__all__ = ["TILEWAVE_OPS", "TilewaveOp", "call_op", "make_call"]

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
        "tilewave.commit_async_ops",
        0,
        "Close this thread's open group of async global->shared copies (cp.async.commit_group).",
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
        if op.get_attr("TCallEffectKind") is None:
            ir.register_op_attr(spec.name, "TCallEffectKind", _OPAQUE)
            ir.register_op_attr(spec.name, "TScriptPrinterName", spec.name)
            op.set_num_inputs(spec.num_inputs)


def make_call(name: str, *args: int | tvm.ir.expr.Expr) -> ir.expr.Call:
    """Build the call expression ``T.<name>(*args)`` for one of tilewave's ops."""
    converted = [tirx.IntImm("int32", a) if isinstance(a, int) else a for a in args]
    return ir.expr.Call(ir.Op.get(name), converted, ret_ty="void")


def call_op(name: str, *args: int | tvm.ir.expr.Expr) -> tirx.Evaluate:
    """Build the statement ``T.<name>(*args)`` for one of tilewave's ops (a new statement
    each time; the call expression is shared when every argument is an ``int``:
    expressions are immutable, and a pass inserting hundreds of barriers then builds the
    call once)."""
    if all(type(a) is int for a in args):
        key = (name, *args)
        call = _CONSTANT_CALLS.get(key)
        if call is None:
            call = _CONSTANT_CALLS[key] = make_call(name, *args)
        return tirx.Evaluate(call)
    return tirx.Evaluate(make_call(name, *args))


#: call expressions of :func:`call_op` with constant arguments, by (op name, arguments)
_CONSTANT_CALLS: dict[tuple[Any, ...], ir.expr.Call] = {}


class _ScriptNamespace:
    """``T.tilewave``: lets TVMScript parse ``T.tilewave.lds_barrier()`` and friends.

    TVMScript resolves ``T.<a>.<b>`` as Python attribute access on ``tvm.tirx.script``; an op
    registered from Python is not reachable that way, so tilewave installs this namespace
    (the same mechanism TVM uses for ``T.ptx``).
    """

    def __init__(self) -> None:
        for spec in TILEWAVE_OPS:
            short = spec.name.split(".", 1)[1]
            setattr(self, short, functools.partial(make_call, spec.name))


def _install_script_namespace() -> None:
    import tvm.tirx.script as script_module  # the module TVMScript's `T` refers to

    if not isinstance(getattr(script_module, "tilewave", None), _ScriptNamespace):
        script_module.tilewave = _ScriptNamespace()


_register_all()
_install_script_namespace()
