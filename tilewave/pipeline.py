"""tilewave's lowering pipeline: the per-target pass list, ``lower()`` and ``build()``.

TVM's default TIR pipeline (``tvm.s_tir.pipeline``) inserts its own shared-memory barriers
(``ThreadSync("shared")``). tilewave decides barriers itself, so it builds its own list: TVM's
passes in TVM's order, tilewave's stages where ``ThreadSync("shared")`` used to run, TVM's
shared ``ThreadSync`` left out. The whole list is the table :data:`STAGES`; one entry per
pass, each with a predicate on the target and the options, so a new pass is one line::

    Stage("tilewave.MyPass", lambda t, o: MyPass(t), origin="tilewave", when=lambda t, o: ...)

:func:`default_passes` turns the table into ``tvm.transform.Pass`` objects;
``tilewave lower --list-passes`` prints it. Every tilewave pass is also an ordinary
``tvm.transform.Pass`` a user can put in their own ``tvm.transform.Sequential``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import tvm
from tvm import s_tir, tirx
from tvm.tirx.build import codegen_build

from tilewave.codegen.lower_ops import LowerTilewaveOps
from tilewave.codegen.rocm import offline_rocm_link
from tilewave.cyclic_gc import without_cyclic_gc
from tilewave.errors import (
    KernelSourceError,
    MalformedKernelError,
    PassOptionError,
    TilewaveError,
    where,
)
from tilewave.failures import codegen_failure, stage_failure
from tilewave.input_checks import (
    check_rocm_block_size,
    check_shared_memory_limit,
    check_shared_sizes_constant,
)
from tilewave.instruments import instruments_from_env, verify_barriers_from_env
from tilewave.ir.walker import TIRVisitor
from tilewave.targets import TargetInfo, get_target
from tilewave.transforms import shared_layout
from tilewave.transforms.async_prefetch import PrefetchAsyncCopies
from tilewave.transforms.hazard_invariant import (
    checked_barrier_pass,
    refuse_unfixable_in_module,
)
from tilewave.transforms.inject_fence_proxy import InjectFenceProxy
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers

__all__ = [
    "STAGES",
    "BuildResult",
    "LowerOptions",
    "Stage",
    "build",
    "default_passes",
    "device_finalize_passes",
    "lower",
    "run_stages",
    "stages_for",
]


@dataclass(frozen=True)
class LowerOptions:
    """User options of :func:`lower` / :func:`build` that stages may read.

    Attributes:
        multi_buffer_count: scale shared buffers by this many copies (multibuffer stage);
            ``None`` leaves buffers alone.
        config: the ``PassContext`` config the list is built under (TVM's own switches such
            as ``tirx.disable_storage_rewrite`` and ``tirx.use_async_copy``).
        verify_barriers: check the barrier stage's output with the verifier
            (default: the ``TILEWAVE_VERIFY_BARRIERS`` environment switch, off when unset).
    """

    multi_buffer_count: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    verify_barriers: bool = field(default_factory=verify_barriers_from_env)

    def flag(self, key: str) -> bool:
        """A boolean ``PassContext`` config switch (absent means False)."""
        return bool(self.config.get(key, False))


PassFactory = Callable[[TargetInfo, LowerOptions], tvm.transform.Pass]
StagePredicate = Callable[[TargetInfo, LowerOptions], bool]


def _always(target: TargetInfo, options: LowerOptions) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One entry of the pass list.

    Attributes:
        name: the pass's own name (``pass.info.name``): what ``--list-passes``, instruments
            and dumps show and what ``PassContext(disabled_pass=[...])`` takes. TVM names
            both ``InjectPTXLDG32`` runs alike, so that name disables both.
        make: builds the pass for a target and options.
        when: whether the stage runs for this target and these options.
        origin: ``"tvm"`` for TVM's own passes, ``"tilewave"`` for tilewave's.
    """

    name: str
    make: PassFactory
    when: StagePredicate = _always
    origin: Literal["tvm", "tilewave"] = "tvm"


def _tvm(name: str, factory: Callable[[], tvm.transform.Pass], when: StagePredicate = _always):
    return Stage(name, lambda t, o: factory(), when)


def _config(key: str, enabled: bool = True) -> StagePredicate:
    return lambda t, o: o.flag(key) == enabled


def _host_bound_target(target: TargetInfo) -> tvm.target.Target:
    host = "llvm" if tvm.runtime.enabled("llvm") else "c"
    return target.tvm_target().with_host(tvm.target.Target(host))


def _multibuffer(target: TargetInfo, options: LowerOptions) -> tvm.transform.Pass:
    module_name = "tilewave.transforms.multibuffer"
    if importlib.util.find_spec(module_name) is None:
        raise PassOptionError(
            f"multi_buffer_count={options.multi_buffer_count} asks for the multibuffer stage, "
            f"but this tilewave has no multibuffer pass yet ({module_name} is missing). "
            "Drop the option, or install a tilewave that ships the pass."
        )
    module = importlib.import_module(module_name)
    return module.MultiBuffer(options.multi_buffer_count, target=target)


def _wants_multibuffer(target: TargetInfo, options: LowerOptions) -> bool:
    return options.multi_buffer_count is not None


#: The name of the barrier stage (InsertSharedBarriers with its invariant checks).
BARRIER_STAGE = "tilewave.InsertSharedBarriers"

#: The pass list, in order. TVM's entries mirror ``tvm.s_tir.pipeline.default_s_tir_pipeline``
#: (TVM 0.27) with ``ThreadSync("shared")`` / ``ThreadSync("shared.dyn")`` replaced by
#: tilewave's synchronisation stages.
STAGES: tuple[Stage, ...] = (
    Stage("tirx.BindTarget", lambda t, o: tirx.transform.BindTarget(_host_bound_target(t))),
    _tvm("s_tir.CanonicalizeLoop", s_tir.transform.CanonicalizeLoop),
    _tvm("s_tir.LowerCrossThreadReduction", s_tir.transform.LowerCrossThreadReduction),
    _tvm("s_tir.LowerInitBlock", s_tir.transform.LowerInitBlock),
    _tvm(
        "s_tir.PlanAndUpdateBufferAllocationLocation",
        s_tir.transform.PlanAndUpdateBufferAllocationLocation,
    ),
    _tvm("s_tir.ConvertBlocksToOpaque", s_tir.transform.ConvertBlocksToOpaque),
    _tvm("s_tir.LiftThreadBinding", s_tir.transform.LiftThreadBinding),
    _tvm("s_tir.ManifestSharedMemoryLocalStage", s_tir.transform.ManifestSharedMemoryLocalStage),
    # TVM's CompactBufferAllocation / StorageRewrite (same names, so disabled_pass still
    # works) and tilewave's PlanSharedLayout instead of MergeSharedMemoryAllocations: safe
    # for shared tiles reached through their address (TMA, wgmma descriptors, mbarriers)
    Stage(
        "s_tir.CompactBufferAllocation",
        lambda t, o: shared_layout.CompactBufferAllocation(),
        origin="tilewave",
    ),
    _tvm("s_tir.LowerAutoCopy", s_tir.transform.LowerAutoCopy),
    _tvm("s_tir.UnifyThreadBinding", s_tir.transform.UnifyThreadBinding),
    _tvm("s_tir.LowerMatchBuffer", s_tir.transform.LowerMatchBuffer),
    _tvm("s_tir.StmtSimplify", s_tir.transform.StmtSimplify),
    _tvm("s_tir.InjectPermutedLayout", s_tir.transform.InjectPermutedLayout),
    _tvm("s_tir.AnnotateIrregularLoop", s_tir.transform.AnnotateIrregularLoop),
    _tvm("s_tir.InjectSoftwarePipeline", s_tir.transform.InjectSoftwarePipeline),
    _tvm("s_tir.TransformMmaBufferLayout", s_tir.transform.TransformMmaBufferLayout),
    _tvm("s_tir.LowerOpaqueBlock", s_tir.transform.LowerOpaqueBlock),
    # Multibuffering rewrites multi-dimensional shared indices, so it runs before flattening.
    Stage("tilewave.MultiBuffer", _multibuffer, _wants_multibuffer, origin="tilewave"),
    # cp.async copies of a multibuffered loop issued N - 1 iterations ahead (pipelining)
    Stage(
        "tilewave.PrefetchAsyncCopies",
        lambda t, o: PrefetchAsyncCopies(),
        _wants_multibuffer,
        origin="tilewave",
    ),
    _tvm("tirx.FlattenBuffer", tirx.transform.FlattenBuffer),
    _tvm("tirx.BF16ComputeLegalize", tirx.transform.BF16ComputeLegalize),
    _tvm("tirx.NarrowDataType", lambda: tirx.transform.NarrowDataType(32)),
    _tvm("s_tir.LoopPartition", s_tir.transform.LoopPartition),
    Stage(
        "tirx.VectorizeLoop",
        lambda t, o: tirx.transform.VectorizeLoop(not o.flag("tirx.disable_vectorize")),
    ),
    _tvm("s_tir.InjectVirtualThread", s_tir.transform.InjectVirtualThread),
    _tvm("s_tir.InjectDoubleBuffer", s_tir.transform.InjectDoubleBuffer),
    Stage(
        "tirx.StorageRewrite",
        lambda t, o: shared_layout.StorageRewrite(),
        _config("tirx.disable_storage_rewrite", False),
        origin="tilewave",
    ),
    _tvm("s_tir.LowerAsyncDMA", s_tir.transform.LowerAsyncDMA, _config("tirx.use_async_copy")),
    _tvm("s_tir.HoistIfThenElse", s_tir.transform.HoistIfThenElse),
    _tvm("tirx.UnrollLoop", tirx.transform.UnrollLoop),
    _tvm("s_tir.RenormalizeSplitPattern", s_tir.transform.RenormalizeSplitPattern),
    _tvm("tirx.StmtSimplify", tirx.transform.StmtSimplify),
    _tvm("tirx.RemoveNoOp", tirx.transform.RemoveNoOp),
    _tvm("s_tir.RewriteUnsafeSelect", s_tir.transform.RewriteUnsafeSelect),
    _tvm(
        "s_tir.InstrumentBoundCheckers",
        s_tir.transform.InstrumentBoundCheckers,
        _config("tirx.instrument_bound_checkers"),
    ),
    _tvm(
        "s_tir.InjectPTXLDG32",
        lambda: s_tir.transform.InjectPTXLDG32(True),
        _config("tirx.s_tir.ldg32"),
    ),
    _tvm(
        "tirx.CommonSubexprElim",
        tirx.transform.CommonSubexprElim,
        _config("tirx.disable_cse_tir", False),
    ),
    _tvm(
        "s_tir.InstrumentProfileIntrinsics",
        s_tir.transform.InstrumentProfileIntrinsics,
        _config("tirx.instrument_lwp"),
    ),
    _tvm("tirx.FP8ComputeLegalize", tirx.transform.FP8ComputeLegalize),
    _tvm("s_tir.VerifyVTCMLimit", s_tir.transform.VerifyVTCMLimit),
    _tvm("s_tir.LowerVtcmAlloc", s_tir.transform.LowerVtcmAlloc),
    _tvm("tirx.VerifyMemory", tirx.transform.VerifyMemory),
    _tvm("tirx.AnnotateEntryFunc", tirx.transform.AnnotateEntryFunc),
    # ---- tilewave's synchronisation stages (TVM runs ThreadSync("shared") here) ----
    # InsertSharedBarriers and InjectFenceProxy go here, before LowerTilewaveOps.
    # Storage: StorageRewrite's reuse (above) is visible as decl_buffer views; the dynamic
    # shared layout (PlanSharedLayout, below) may overlay distinct shared.dyn buffers, which
    # the barrier decision already assumes (docs/passes/insert_shared_barriers.md).
    # Checked: unfixable hazards are refused before; with verify_barriers, none may remain
    # after (the invariant).
    Stage(
        BARRIER_STAGE,
        lambda t, o: checked_barrier_pass(InsertSharedBarriers(t), t, o.verify_barriers),
        origin="tilewave",
    ),
    # Fences go after barrier insertion: a fence sits right before the async op it guards.
    Stage(
        "tilewave.InjectFenceProxy",
        lambda t, o: InjectFenceProxy(target=t),
        lambda t, o: t.has_async_proxy,
        origin="tilewave",
    ),
    Stage("tilewave.LowerTilewaveOps", lambda t, o: LowerTilewaveOps(t), origin="tilewave"),
    # ----
    _tvm("s_tir.ThreadSync", lambda: s_tir.transform.ThreadSync("warp")),
    _tvm("s_tir.InferFragment", s_tir.transform.InferFragment),
    _tvm("s_tir.LowerThreadAllreduce", s_tir.transform.LowerThreadAllreduce),
    _tvm(
        "s_tir.InjectPTXAsyncCopy",
        s_tir.transform.InjectPTXAsyncCopy,
        _config("tirx.use_async_copy"),
    ),
    _tvm("s_tir.InjectPTXLDG32", s_tir.transform.InjectPTXLDG32, _config("tirx.s_tir.ldg32")),
    Stage(
        "tilewave.PlanSharedLayout",
        lambda t, o: shared_layout.PlanSharedLayout(),
        origin="tilewave",
    ),
    _tvm("tirx.SplitHostDevice", tirx.transform.SplitHostDevice),
    _tvm("tirx.MakePackedAPI", tirx.transform.MakePackedAPI),
    _tvm("tirx.FP8StorageLegalize", tirx.transform.FP8StorageLegalize),
    _tvm("tirx.BF16StorageLegalize", tirx.transform.BF16StorageLegalize),
)


def _options(multi_buffer_count: int | None, verify_barriers: bool | None = None) -> LowerOptions:
    if verify_barriers is not None and not isinstance(verify_barriers, bool):
        raise PassOptionError(
            f"verify_barriers must be True or False, got {verify_barriers!r}. Pass "
            "verify_barriers=True to check the barrier stage's output, or leave it unset "
            "(then TILEWAVE_VERIFY_BARRIERS decides; off when unset)."
        )
    if multi_buffer_count is not None and (
        isinstance(multi_buffer_count, bool)
        or not isinstance(multi_buffer_count, int)
        or multi_buffer_count < 1
    ):
        raise PassOptionError(
            f"multi_buffer_count must be a positive integer (copies of each shared buffer), "
            f"got {multi_buffer_count!r}. Pass e.g. multi_buffer_count=2, or leave it unset."
        )
    config = dict(tvm.transform.PassContext.current().config)
    if verify_barriers is None:
        verify_barriers = verify_barriers_from_env()
    return LowerOptions(
        multi_buffer_count=multi_buffer_count, config=config, verify_barriers=verify_barriers
    )


def stages_for(target: Any, *, multi_buffer_count: int | None = None) -> list[Stage]:
    """The stages of :data:`STAGES` that run for ``target`` and these options, in order."""
    info = get_target(target)
    options = _options(multi_buffer_count)
    return [stage for stage in STAGES if stage.when(info, options)]


def default_passes(
    target: Any, *, multi_buffer_count: int | None = None, verify_barriers: bool | None = None
) -> list[Any]:
    """The passes :func:`lower` runs for ``target``, in order.

    Args:
        target: anything :func:`tilewave.get_target` accepts.
        multi_buffer_count: see :func:`lower`.
        verify_barriers: see :func:`lower`.

    Raises:
        UnknownTargetError: the target is not one tilewave knows.
        PassOptionError: a bad option, or an option whose pass is not available.
        DebugOptionError: ``TILEWAVE_VERIFY_BARRIERS`` is not a switch.
    """
    info = get_target(target)
    options = _options(multi_buffer_count, verify_barriers)
    return [stage.make(info, options) for stage in STAGES if stage.when(info, options)]


def device_finalize_passes() -> list[Any]:
    """TVM's passes for the device module after host/device splitting (run by :func:`build`)."""
    return [
        tirx.transform.LowerWarpMemory(),
        tirx.transform.StmtSimplify(),
        tirx.transform.LowerIntrin(),
    ]


class _FindThreadBinding(TIRVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_For(self, node: Any) -> None:
        if node.thread_binding is not None and str(node.thread_binding.thread_tag).startswith(
            "threadIdx"
        ):
            self.found = True
            return
        self.generic_visit(node)

    def visit_AttrStmt(self, node: Any) -> None:
        if node.attr_key == "thread_extent" and str(node.node.thread_tag).startswith("threadIdx"):
            self.found = True
            return
        self.generic_visit(node)


def _as_module(mod_or_func: Any) -> tvm.IRModule:
    if isinstance(mod_or_func, tirx.PrimFunc):
        symbol = mod_or_func.attrs.get("global_symbol") if mod_or_func.attrs else None
        return tvm.IRModule({str(symbol) if symbol else "main": mod_or_func})
    if isinstance(mod_or_func, tvm.IRModule):
        if not any(isinstance(f, tirx.PrimFunc) for f in mod_or_func.functions.values()):
            raise KernelSourceError(
                "lower: the IRModule holds no PrimFunc; give it a @T.prim_func kernel."
            )
        return mod_or_func
    raise KernelSourceError(
        f"lower: expected a tvm.tirx.PrimFunc or tvm.IRModule, got {type(mod_or_func).__name__}. "
        "Pass a @T.prim_func kernel or an IRModule of them."
    )


def _check_gpu_kernels(mod: tvm.IRModule) -> None:
    for gvar, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        finder = _FindThreadBinding()
        finder.visit(func.body)
        if not finder.found:
            raise MalformedKernelError(
                f"lower: {where(gvar.name_hint)} is not a GPU kernel: it binds no loop to "
                "threadIdx. Bind the thread loop, e.g. "
                '`for tx in T.thread_binding(128, thread="threadIdx.x"):`.'
            )


@contextlib.contextmanager
def _pass_context(instruments: Sequence[Any] | None) -> Iterator[None]:
    current = tvm.transform.PassContext.current()
    chosen = list(instruments) if instruments is not None else instruments_from_env()
    if not chosen:
        yield
        return
    with tvm.transform.PassContext(
        opt_level=current.opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=[*current.instruments, *chosen],
        config=dict(current.config),
    ):
        yield


@without_cyclic_gc
def run_stages(
    passes: Sequence[Any], mod: tvm.IRModule, info: TargetInfo, sequence_name: str
) -> tvm.IRModule:
    """Run ``passes`` in order, each in its own ``Sequential`` named ``sequence_name``.

    Instruments number the stages as in one ``Sequential``, ``disabled_pass`` still applies,
    and a stage that raises is known: a non-tilewave exception becomes a
    :class:`~tilewave.errors.StageFailedError` naming the stage, the kernel and the target.
    """
    for stage_pass in passes:
        try:
            mod = tvm.transform.Sequential([stage_pass], name=sequence_name)(mod)
        except TilewaveError:
            raise
        except Exception as err:
            raise stage_failure(err, stage_pass.info.name, mod, info) from err
    return mod


def _lower_in_context(
    mod_or_func: Any,
    info: TargetInfo,
    multi_buffer_count: int | None,
    verify_barriers: bool | None,
):
    mod = _as_module(mod_or_func)
    _check_gpu_kernels(mod)
    check_shared_sizes_constant(mod)
    passes = default_passes(
        info, multi_buffer_count=multi_buffer_count, verify_barriers=verify_barriers
    )
    # Also checked inside the barrier stage; here the message shows the kernel as written.
    refuse_unfixable_in_module(mod, BARRIER_STAGE)
    lowered = run_stages(passes, mod, info, "tilewave.lower")
    check_shared_memory_limit(lowered, info)
    return lowered


def lower(
    mod_or_func: Any,
    target: Any,
    *,
    multi_buffer_count: int | None = None,
    instruments: Sequence[Any] | None = None,
    verify_barriers: bool | None = None,
) -> tvm.IRModule:
    """Run tilewave's pass list for ``target`` and return the lowered IRModule.

    The result holds the host entry function and the device kernel(s), as after TVM's
    ``SplitHostDevice`` and ``MakePackedAPI``; :func:`build` turns it into device source.

    Args:
        mod_or_func: a ``@T.prim_func`` GPU kernel or an IRModule of them.
        target: anything :func:`tilewave.get_target` accepts (``"sm_90a"``, ``"gfx942"``...).
        multi_buffer_count: copies of each shared buffer for the multibuffer stage.
        instruments: ``tvm.instrument`` pass instruments to run with; by default those the
            ``TILEWAVE_*`` environment variables ask for (see docs/debugging.md).
        verify_barriers: run the verifier on the barrier stage's output and raise
            :class:`~tilewave.errors.UnfixableHazardError` for a hazard it left (a tilewave
            bug); costs about as much as the barrier pass. ``None``: the
            ``TILEWAVE_VERIFY_BARRIERS`` environment switch decides (off when unset).

    Raises:
        UnknownTargetError, KernelSourceError, MalformedKernelError, PassOptionError,
        TargetFeatureError, DebugOptionError.

    Example::

        mod = tilewave.lower(my_kernel, "gfx942")
    """
    info = get_target(target)
    with _pass_context(instruments):
        return _lower_in_context(mod_or_func, info, multi_buffer_count, verify_barriers)


_HOST_KINDS = frozenset({"llvm", "c", "cuda_host"})


def _device_part(lowered: tvm.IRModule) -> tvm.IRModule:
    # TVM's split_host_device_mods does this with two Filter passes; doing it by hand keeps
    # them out of the instrumented stage list.
    device = {
        gvar: func
        for gvar, func in lowered.functions.items()
        if func.attrs is not None
        and "target" in func.attrs
        and func.attrs["target"].kind.name not in _HOST_KINDS
    }
    if not device:
        raise MalformedKernelError(
            "build: lowering produced no device function; the kernel must bind threadIdx "
            "loops so TVM can split it into host and device parts."
        )
    return tvm.IRModule(device, attrs=lowered.attrs)


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build` produces.

    Attributes:
        target: the target's facts.
        lowered: the IRModule after tilewave's pass list (host and device functions).
        device: the device IRModule after TVM's device finalisation, as codegen saw it.
        source: CUDA C (CUDA targets) or AMDGCN assembly (ROCm targets).
        llvm_ir: the LLVM IR of the device module (ROCm targets; ``None`` for CUDA).
    """

    target: TargetInfo
    lowered: tvm.IRModule
    device: tvm.IRModule
    source: str
    llvm_ir: str | None = None

    @property
    def source_language(self) -> str:
        """``"cuda"`` or ``"amdgcn"``."""
        return "cuda" if self.target.is_cuda else "amdgcn"


def _codegen(device_mod: tvm.IRModule, device_target: Any, info: TargetInfo) -> Any:
    try:
        return codegen_build(device_mod, device_target)
    except TilewaveError:
        raise
    except Exception as err:
        raise codegen_failure(err, device_mod, info) from err


def build(
    mod_or_func: Any,
    target: Any,
    *,
    multi_buffer_count: int | None = None,
    instruments: Sequence[Any] | None = None,
    verify_barriers: bool | None = None,
) -> BuildResult:
    """Lower ``mod_or_func`` with :func:`lower` and generate device source with TVM's codegen.

    Needs no GPU: CUDA C comes from TVM's CUDA codegen; AMDGCN assembly from its LLVM AMDGPU
    backend, with ROCm's device-library and link callbacks replaced for the call (see
    :func:`tilewave.codegen.rocm.offline_rocm_link`). Arguments as for :func:`lower`.

    Example::

        print(tilewave.build(my_kernel, "sm_90a").source)
    """
    info = get_target(target)
    with _pass_context(instruments):
        lowered = _lower_in_context(mod_or_func, info, multi_buffer_count, verify_barriers)
        device_mod = _device_part(lowered)
        device_mod = run_stages(device_finalize_passes(), device_mod, info, "tilewave.device")
    check_rocm_block_size(device_mod, info)
    device_target = _host_bound_target(info)
    if info.is_cuda:
        runtime_mod = _codegen(device_mod, device_target, info)
        return BuildResult(info, lowered, device_mod, runtime_mod.inspect_source())
    with offline_rocm_link():
        runtime_mod = _codegen(device_mod, device_target, info)
    return BuildResult(
        info,
        lowered,
        device_mod,
        runtime_mod.inspect_source("asm"),
        llvm_ir=runtime_mod.inspect_source("llvm"),
    )
