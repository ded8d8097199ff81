"""CUDA lowering of tilewave's ops: one builder per op, looked up by op name.

Each builder receives the op's call and the target and returns the TIR call TVM's CUDA
codegen prints as the instruction (``__syncthreads()``, ``cp.async.wait_group n``,
``fence.proxy.async.shared::cta``). The split barrier has no single-instruction form on
NVIDIA: it needs an mbarrier in shared memory with phase tracking, a whole-function rewrite
that :data:`cuda_split_barrier_lowering` performs once it is installed (see
:func:`install_split_barrier_lowering`).
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import ir, tirx
from tvm.script import tirx as T

from tilewave.codegen.common import OpLowering, immediate_operand
from tilewave.errors import TargetFeatureError, where
from tilewave.targets import TargetInfo

__all__ = [
    "CUDA_LOWERINGS",
    "SplitBarrierLowering",
    "cuda_split_barrier_lowering",
    "install_split_barrier_lowering",
]

#: ``PrimFunc -> PrimFunc`` rewrite of ``barrier_signal``/``barrier_wait`` into mbarrier code.
SplitBarrierLowering = Callable[[tirx.PrimFunc, TargetInfo], tirx.PrimFunc]

_split_barrier_lowering: SplitBarrierLowering | None = None


def install_split_barrier_lowering(lowering: SplitBarrierLowering | None) -> None:
    """Install (or, with ``None``, remove) the CUDA split-barrier rewrite.

    The shared-barrier pass owns the mbarrier form of a split barrier (allocation, init,
    ``mbarrier.arrive``, ``mbarrier.try_wait.parity`` with phase tracking); it installs its
    rewrite here so that :class:`tilewave.codegen.lower_ops.LowerTilewaveOps` runs it on CUDA
    functions before the per-op table below.
    """
    global _split_barrier_lowering
    _split_barrier_lowering = lowering


def cuda_split_barrier_lowering() -> SplitBarrierLowering | None:
    """The installed CUDA split-barrier rewrite, or ``None`` when none is installed yet."""
    return _split_barrier_lowering


def _lds_barrier(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    # tvm_storage_sync("shared") is TVM's own barrier call: CUDA codegen prints it as
    # __syncthreads(), and TVM passes that run later recognise it as a barrier.
    return T.tvm_storage_sync("shared")


def _wait_async_ops(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    count = immediate_operand(call, func_name, "the number of copies left outstanding")
    return T.ptx["cp.async.wait_group"](count)


def _commit_async_ops(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    return T.ptx["cp.async.commit_group"]()


def _fence_proxy_async(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    if not target.has_async_proxy:
        raise TargetFeatureError(
            f"LowerTilewaveOps: fence_proxy_async {where(func_name, call)} needs the async "
            f"memory proxy, which {target.name} does not have (sm_90 and later). Do not run "
            "InjectFenceProxy for this target, or compile for sm_90a."
        )
    return T.ptx["fence.proxy.async.shared::cta"]()


def _split_barrier_untransformed(
    call: ir.expr.Call, target: TargetInfo, func_name: str
) -> ir.expr.Expr:
    raise TargetFeatureError(
        f"LowerTilewaveOps: {call.op.name} {where(func_name, call)} reached CUDA lowering "
        "untransformed: on NVIDIA a split barrier is an mbarrier in shared memory, and no "
        "mbarrier rewrite is installed (tilewave.codegen.cuda.install_split_barrier_lowering). "
        f"Use barrier_style='basic' for {target.name}, or run the shared-barrier pass that "
        "installs the mbarrier rewrite."
    )


#: op name -> builder of its CUDA form.
CUDA_LOWERINGS: dict[str, OpLowering] = {
    "tilewave.lds_barrier": _lds_barrier,
    "tilewave.wait_async_ops": _wait_async_ops,
    "tilewave.commit_async_ops": _commit_async_ops,
    "tilewave.fence_proxy_async": _fence_proxy_async,
    "tilewave.barrier_signal": _split_barrier_untransformed,
    "tilewave.barrier_wait": _split_barrier_untransformed,
}
