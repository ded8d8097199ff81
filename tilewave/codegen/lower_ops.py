"""``LowerTilewaveOps``: rewrite tilewave's own ops into target instructions before codegen.

tilewave's passes speak in target-neutral ops (``T.tilewave.lds_barrier()``...). This pass,
run last among tilewave's stages, replaces each with the call the target's codegen turns into
the instruction, using the per-target tables in :mod:`tilewave.codegen.cuda` and
:mod:`tilewave.codegen.rocm`. On AMD targets it first puts the LDS / LDS-DMA counter wait
before every barrier that needs one, tilewave's and hand-placed ones alike
(:mod:`tilewave.codegen.amd_barrier_waits`): an AMD barrier does not wait for them. On CUDA
it first runs the installed split-barrier rewrite (see
:func:`tilewave.codegen.cuda.install_split_barrier_lowering`), since an mbarrier needs
allocation and phase state that a per-op table cannot provide.

Example::

    seq = tvm.transform.Sequential([..., LowerTilewaveOps("gfx942")])
    # S[tx] = ...; T.tilewave.lds_barrier()  ->  S[tx] = ...;
    #   T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", 49279)   # lgkmcnt(0)
    #   T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import ir, tirx

from tilewave.codegen import cuda, rocm
from tilewave.codegen.amd_barrier_waits import insert_amd_barrier_waits
from tilewave.codegen.common import OpLowering
from tilewave.codegen.cuda_split_barrier import lower_cuda_split_barriers
from tilewave.ir.walker import rewrite_calls
from tilewave.targets import TargetInfo, get_target

__all__ = ["LowerTilewaveOps", "lower_tilewave_ops", "lowering_table"]

_PREFIX = "tilewave."

# On NVIDIA a split barrier is an mbarrier with phase tracking (a whole-function rewrite).
cuda.install_split_barrier_lowering(lower_cuda_split_barriers)


def lowering_table(target: TargetInfo) -> dict[str, OpLowering]:
    """The op-name -> builder table for ``target``'s codegen."""
    return cuda.CUDA_LOWERINGS if target.is_cuda else rocm.ROCM_LOWERINGS


def _op_lowering(
    table: dict[str, OpLowering], target: TargetInfo, func_name: str
) -> Callable[[ir.expr.Call], Any]:
    """The call rewrite that replaces each tilewave op by ``target``'s form (others kept)."""

    def lower(call: ir.expr.Call) -> Any:
        if isinstance(call.op, ir.Op) and call.op.name.startswith(_PREFIX):
            build = table.get(call.op.name)
            if build is not None:
                return build(call, target, func_name)
        return None

    return lower


def _func_name(func: tirx.PrimFunc, fallback: str) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else fallback


def lower_tilewave_ops(
    func: tirx.PrimFunc, target: Any, func_name: str | None = None
) -> tirx.PrimFunc:
    """Return ``func`` with every tilewave op replaced by ``target``'s instruction.

    Args:
        func: the PrimFunc to rewrite; returned unchanged (the same object) if it has no
            tilewave ops.
        target: anything :func:`tilewave.get_target` accepts.
        func_name: the name used in error messages (default: the ``global_symbol``).

    Raises:
        TargetFeatureError: an op the target has no instruction for (a split barrier on
            gfx942, on CUDA without the mbarrier rewrite; ``fence_proxy_async`` without the
            async proxy).
        MalformedKernelError: a wait count or barrier id that is not an integer constant.
        TargetFeatureError: (AMD) a hand-placed barrier whose ordering tilewave cannot tell
            (``tvm_storage_sync("global")``, ``llvm.amdgcn.s.barrier.init``...).
    """
    info = get_target(target)
    name = func_name or _func_name(func, "<anonymous>")
    if info.is_cuda:
        split_lowering = cuda.cuda_split_barrier_lowering()
        if split_lowering is not None:
            func = split_lowering(func, info)
    else:
        # an AMD barrier orders only completed LDS traffic: wait for the counters first
        func = insert_amd_barrier_waits(func, info, name)
    body = rewrite_calls(func.body, _op_lowering(lowering_table(info), info, name))
    if body.same_as(func.body):
        return func
    return func.with_body(body)


def LowerTilewaveOps(target: Any) -> tvm.transform.Pass:
    """A ``tvm.transform.Pass`` running :func:`lower_tilewave_ops` on every PrimFunc.

    Args:
        target: anything :func:`tilewave.get_target` accepts (checked when the pass is built).

    Raises:
        UnknownTargetError: at construction, for a target tilewave does not know.
    """
    info = get_target(target)

    def _run(func: tirx.PrimFunc, mod: ir.IRModule, ctx: tvm.transform.PassContext) -> Any:
        return lower_tilewave_ops(func, info)

    return tirx.transform.prim_func_pass(_run, opt_level=0, name="tilewave.LowerTilewaveOps")
