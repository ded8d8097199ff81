"""tilewave's pass lists as named TVM TIR pipelines, so users stay on TVM's own API.

Importing :mod:`tilewave` registers them with
``tvm.tirx.compilation_pipeline.register_tir_pipeline``::

    import tilewave  # registers "tilewave" (and "tilewave-tirx")
    ex = tvm.compile(kernel, target={"kind": "cuda", "arch": "sm_90a"}, tir_pipeline="tilewave")
    cuda_source = ex.mod.imports[0].inspect_source()  # the source tilewave.build gives

A TVM pipeline factory returns three things: the lowering pass, the host finalisation and the
device finalisation (``tvm.tirx.build`` runs them, then TVM's codegen). The ``"tilewave"``
lowering pass is :func:`tilewave.lower` for the target ``tvm.compile`` bound to the kernels;
the device finalisation is :func:`tilewave.pipeline.device_finalize_passes`, the one
:func:`tilewave.build` runs, so both give the same device code.

For ROCm targets on a machine without ROCm, wrap the call in
:func:`tilewave.codegen.rocm.offline_rocm_link` (as :func:`tilewave.build` does), or TVM's
link step fails with "Cannot find ROCm path".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.backend.cuda import transforms as cuda_transforms
from tvm.s_tir import pipeline as s_tir_pipeline
from tvm.tirx import compilation_pipeline

from tilewave.analysis.shared_buffers import buffer_scope
from tilewave.errors import SharedMemoryLimitError, UnknownTargetError, where
from tilewave.input_checks import (
    check_rocm_block_size,
    check_shared_memory_limit,
    shared_allocations,
)
from tilewave.ir.walker import post_order_visit
from tilewave.pipeline import (
    LowerOptions,
    Stage,
    device_finalize_passes,
    lower,
    run_stages,
    stages_for,
)
from tilewave.targets import TargetInfo, get_target, target_names

__all__ = [
    "TILEWAVE_PIPELINE",
    "TILEWAVE_TIRX_PIPELINE",
    "bound_target",
    "check_tirx_shared_memory",
    "launched_dynamic_bytes",
    "register_pipelines",
    "sync_stages",
    "tilewave_pipeline",
    "tilewave_tirx_pipeline",
    "tirx_passes",
]

#: The name ``tvm.compile(..., tir_pipeline=...)`` takes for tilewave's pass list.
TILEWAVE_PIPELINE = "tilewave"
#: TVM's TIRx pipeline with tilewave's synchronisation stages, for TIRx kernels.
TILEWAVE_TIRX_PIPELINE = "tilewave-tirx"
#: The attribute TIRx's ``SMEMPool.commit()`` sizes its (0-byte) ``shared.dyn`` pool with.
DYN_SMEM_ATTR = "tirx.dyn_smem_bytes"
_DYN_LAUNCH_PARAM = "tirx.use_dyn_shared_memory"
#: tilewave's synchronisation block in :data:`tilewave.pipeline.STAGES` lies between these.
_SYNC_BLOCK = ("tirx.AnnotateEntryFunc", "s_tir.ThreadSync")

PipelineTriple = tuple[tvm.transform.Pass, Callable[[], Any], Callable[[], Any]]


def bound_target(mod: tvm.IRModule, pipeline: str) -> TargetInfo:
    """The tilewave target of the kernels in ``mod``, from the ``target`` TVM bound to them.

    Args:
        mod: the module ``tvm.tirx.build`` hands to the pipeline (targets already bound).
        pipeline: the pipeline's name, for the message.

    Raises:
        UnknownTargetError: no kernel has a target, kernels have different targets, or the
            target is not a GPU target tilewave knows (``tvm.compile`` without ``target=``
            binds ``llvm``).
    """
    targets: dict[str, tuple[str, tvm.target.Target]] = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs and "target" in func.attrs:
            target = func.attrs["target"]
            targets.setdefault(str(target), (gvar.name_hint, target))
    if not targets:
        raise UnknownTargetError(
            f"tir_pipeline={pipeline!r}: no kernel in the module has a target. Call "
            f'tvm.compile(mod, target={{"kind": "cuda", "arch": "sm_90a"}}, '
            f"tir_pipeline={pipeline!r}) so TVM binds one."
        )
    if len(targets) > 1:
        listing = ", ".join(f"{where(name)} -> {t.kind.name}" for name, t in targets.values())
        raise UnknownTargetError(
            f"tir_pipeline={pipeline!r}: the kernels have {len(targets)} different targets "
            f"({listing}); tilewave lowers one GPU target per call. Compile them separately."
        )
    func_name, target = next(iter(targets.values()))
    if target.kind.name not in ("cuda", "rocm"):
        raise UnknownTargetError(
            f"tir_pipeline={pipeline!r} {where(func_name)}: the kernel's target is "
            f"{target.kind.name!r}, not a GPU (tvm.compile binds 'llvm' when no target= is "
            f"given). tilewave lowers for {', '.join(target_names())}: pass the GPU target, "
            'e.g. target={"kind": "cuda", "arch": "sm_90a"}.'
        )
    try:
        return get_target(target)
    except UnknownTargetError as err:
        raise UnknownTargetError(f"tir_pipeline={pipeline!r} {where(func_name)}: {err}") from None


def _finalize_host() -> tvm.transform.Pass:
    return s_tir_pipeline.finalize_host_passes()


def _finalize_device() -> tvm.transform.Pass:
    return tvm.transform.Sequential(device_finalize_passes(), name="tilewave.device")


def tilewave_pipeline() -> PipelineTriple:
    """TVM pipeline factory for ``tir_pipeline="tilewave"``: :func:`tilewave.lower` as a pass.

    Returns:
        ``(lowering pass, host finalisation factory, device finalisation factory)``, the
        triple ``tvm.tirx.build`` expects from a registered pipeline.
    """

    @tvm.transform.module_pass(opt_level=0, name="tilewave.pipeline")
    def _lower(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        info = bound_target(mod, TILEWAVE_PIPELINE)
        lowered = lower(mod, info)
        check_rocm_block_size(lowered, info)  # as tilewave.build does before codegen
        return lowered

    return _lower, _finalize_host, _finalize_device


def sync_stages(target: TargetInfo) -> list[Stage]:
    """tilewave's synchronisation stages for ``target``: the block of
    :data:`tilewave.pipeline.STAGES` where TVM's default pipeline runs ``ThreadSync("shared")``
    (barriers, fences, then the lowering of tilewave's ops)."""
    stages = stages_for(target)
    names = [stage.name for stage in stages]
    start, end = (names.index(name) for name in _SYNC_BLOCK)
    return stages[start + 1 : end]


def tirx_passes(target: TargetInfo, config: dict[str, Any]) -> list[tvm.transform.Pass]:
    """TVM 0.27's ``tirx`` lowering list (``tvm.tirx.compilation_pipeline.tirx_pipeline``)
    with tilewave's synchronisation stages after ``AnnotateEntryFunc``, where the ``s_tir``
    pipeline synchronises shared memory: after TIRx's scopes became ``threadIdx`` launches
    and buffers were flattened, before host/device splitting.

    TVM's ``tirx`` list itself inserts no synchronisation; everything it contains is kept, in
    its order.
    """
    options = LowerOptions(config=config)
    passes: list[tvm.transform.Pass] = [
        tirx.transform.LowerTIRx(),
        s_tir.transform.UnifyThreadBinding(),
        tirx.transform.StmtSimplify(),
        tirx.transform.LowerTIRxOpaque(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(not bool(config.get("tir.disable_vectorize", False))),
        tirx.transform.UnrollLoop(),
        tirx.transform.StmtSimplify(),
    ]
    if not bool(config.get("tir.disable_cse_tir", False)):
        passes.append(tirx.transform.CommonSubexprElim())
    passes += [
        tirx.transform.FP8ComputeLegalize(),
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        *(stage.make(target, options) for stage in sync_stages(target)),
        tirx.transform.SplitHostDevice(),
        cuda_transforms.LowerIket(),
        tirx.transform.MakePackedAPI(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ]
    return passes


def launched_dynamic_bytes(mod: tvm.IRModule) -> dict[str, int]:
    """Kernel name -> the dynamic shared memory its host launch (``call_ffi_kernel``) gives
    it, where that is a constant."""
    found: dict[str, int] = {}

    def visit(node: Any) -> None:
        if not isinstance(node, tvm.ir.expr.Call) or not isinstance(node.op, tvm.ir.Op):
            return
        if node.op.name != "tirx.call_ffi_kernel" or node.attrs is None:
            return
        params = [str(p) for p in node.attrs.launch_params]
        if _DYN_LAUNCH_PARAM not in params:
            return
        size = node.args[len(node.args) - len(params) + params.index(_DYN_LAUNCH_PARAM)]
        if isinstance(size, tirx.IntImm) and isinstance(node.args[0], tvm.ir.expr.StringImm):
            found[str(node.args[0].value)] = int(size.value)

    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            post_order_visit(func.body, visit, (tvm.ir.expr.Call,))
    return found


def check_tirx_shared_memory(mod: tvm.IRModule, target: TargetInfo) -> None:
    """:func:`tilewave.input_checks.check_shared_memory_limit` for TIRx kernels.

    TVM's ``tvm.backend.cuda.lang.SMEMPool`` allocates its ``shared.dyn`` pool with 0 bytes
    and states the size in a ``tirx.dyn_smem_bytes`` attribute, which TVM's lowering turns
    into the dynamic shared memory of the kernel's launch. A kernel launched with such a
    size is checked with it in place of its ``shared.dyn`` allocations; the others as
    :func:`tilewave.pipeline.lower` checks them.

    Raises:
        SharedMemoryLimitError: the static shared buffers plus the launch's dynamic shared
            memory exceed the target's limit.
        MalformedKernelError: (kernels without a launch size) see
            ``check_shared_memory_limit``.
    """
    launched = launched_dynamic_bytes(mod)
    plain = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        declared = launched.get(gvar.name_hint)
        if declared is None:
            plain[gvar] = func
            continue
        static = [
            a for a in shared_allocations(func) if buffer_scope(a.stmt.buffer) != "shared.dyn"
        ]
        total = declared + sum(a.nbytes or 0 for a in static)
        if total > target.shared_memory_bytes:
            raise SharedMemoryLimitError(
                f"lower: {where(gvar.name_hint)}: the kernel is launched with {declared} bytes "
                f"of dynamic shared memory (its SMEMPool's {DYN_SMEM_ATTR}), {total} bytes with "
                f"its static shared buffers, over the {target.shared_memory_bytes}-byte "
                f"per-block limit of {target.name}. Use smaller tiles or fewer stages."
            )
    if plain:
        check_shared_memory_limit(tvm.IRModule(plain), target)


def tilewave_tirx_pipeline() -> PipelineTriple:
    """TVM pipeline factory for ``tir_pipeline="tilewave-tirx"``: :func:`tirx_passes` for the
    target ``tvm.compile`` bound, with TVM's own host and device finalisation for TIRx.

    Returns:
        ``(lowering pass, host finalisation factory, device finalisation factory)``.
    """

    @tvm.transform.module_pass(opt_level=0, name="tilewave.tirx_pipeline")
    def _lower(mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        info = bound_target(mod, TILEWAVE_TIRX_PIPELINE)
        passes = tirx_passes(info, dict(ctx.config))
        lowered = run_stages(passes, mod, info, "tilewave.lower")
        check_tirx_shared_memory(lowered, info)
        check_rocm_block_size(lowered, info)
        return lowered

    return (
        _lower,
        compilation_pipeline.finalize_host_passes,
        compilation_pipeline.finalize_device_passes,
    )


def register_pipelines() -> None:
    """Register tilewave's named pipelines with TVM (idempotent; ``import tilewave`` calls it)."""
    compilation_pipeline.register_tir_pipeline(TILEWAVE_PIPELINE, tilewave_pipeline)
    compilation_pipeline.register_tir_pipeline(TILEWAVE_TIRX_PIPELINE, tilewave_tirx_pipeline)
