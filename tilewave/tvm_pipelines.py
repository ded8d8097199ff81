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
from tvm.s_tir import pipeline as s_tir_pipeline
from tvm.tirx import compilation_pipeline

from tilewave.errors import UnknownTargetError, where
from tilewave.pipeline import device_finalize_passes, lower
from tilewave.targets import TargetInfo, get_target, target_names

__all__ = [
    "TILEWAVE_PIPELINE",
    "bound_target",
    "register_pipelines",
    "tilewave_pipeline",
]

#: The name ``tvm.compile(..., tir_pipeline=...)`` takes for tilewave's pass list.
TILEWAVE_PIPELINE = "tilewave"

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
        return lower(mod, bound_target(mod, TILEWAVE_PIPELINE))

    return _lower, _finalize_host, _finalize_device


def register_pipelines() -> None:
    """Register tilewave's named pipelines with TVM (idempotent; ``import tilewave`` calls it)."""
    compilation_pipeline.register_tir_pipeline(TILEWAVE_PIPELINE, tilewave_pipeline)
