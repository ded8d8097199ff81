"""Per-architecture facts tilewave's passes depend on, in one table.

Passes never test architecture names themselves; they ask a :class:`TargetInfo`
(``info.barrier_style == "split"``, ``info.has_async_proxy``...). Build one with
:func:`get_target` from a short name (``"sm_90a"``, ``"gfx942"``), a
``tvm.target.Target``, or its JSON-dict form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

import tvm

from tilewave.errors import UnknownTargetError

__all__ = ["TARGETS", "TargetInfo", "get_target", "target_names"]

BarrierStyle = Literal["basic", "split"]


@dataclass(frozen=True)
class TargetInfo:
    """Architecture facts for one GPU target.

    Attributes:
        name: short name (``sm_90a``, ``gfx942``...).
        kind: TVM target kind, ``"cuda"`` or ``"rocm"``.
        vendor: ``"nvidia"`` or ``"amd"``.
        wave_size: threads per warp (NVIDIA) or wavefront (AMD).
        shared_memory_bytes: shared memory (LDS) one block may allocate.
        max_threads_per_block: largest block (workgroup) size.
        barrier_style: the barrier the shared-barrier pass emits by default: ``"basic"`` (one
            instruction that both signals and waits) or ``"split"`` (signal / wait halves).
        has_split_barrier: whether a split barrier can be requested at all (gfx12
            ``s_barrier_signal``/``s_barrier_wait``; sm_90 mbarrier arrive / try_wait.parity).
        has_async_proxy: Hopper's generic/async memory proxies (needs ``fence.proxy.async``).
        async_lds_copy: an async global->shared copy the hardware offers: ``"cp.async"``
            (sm_80+), ``"buffer_load_lds"`` (gfx950 gather-to-LDS) or ``None``.
        vgprs, sgprs: architectural register budget per wave (AMD; 0 for NVIDIA).
        vgpr_granule, sgpr_granule: allocation granularity of those registers (AMD).
        asm_isa: the ISA dialect tilewave's direct assembly backend emits for this target
            (``"cdna3"``: gfx9 encodings, vmcnt/lgkmcnt, MFMA, packed workitem ids) or None.
        sgpr_reserved: SGPRs the hardware allocates beyond the kernel's own (VCC, flat
            scratch, XNACK mask).
        vmem_wait_counter: how a wave waits for its outstanding vector-memory loads (AMD):
            ``"vmcnt"`` (gfx9 ``s_waitcnt vmcnt(n)``) or ``"loadcnt"`` (gfx12
            ``s_wait_loadcnt n``); ``None`` for NVIDIA.
        lds_wait_counter: how a wave waits for its outstanding LDS operations (AMD):
            ``"lgkmcnt"`` (gfx9 ``s_waitcnt lgkmcnt(n)``, shared with scalar loads) or
            ``"dscnt"`` (gfx12 ``s_wait_dscnt n``); ``None`` for NVIDIA. A barrier on
            gfx90a+ and gfx12 does not wait for it (see docs/amd_barriers.md).
        lds_dma_max_bytes: widest per-lane ``buffer_load ... lds`` (global -> LDS without
            VGPRs) the ISA has: 4 on gfx942 (dword), 16 on gfx950 (dwordx4); 0 if none.
    """

    name: str
    kind: Literal["cuda", "rocm"]
    vendor: Literal["nvidia", "amd"]
    wave_size: int
    shared_memory_bytes: int
    max_threads_per_block: int
    barrier_style: BarrierStyle
    has_split_barrier: bool
    has_async_proxy: bool
    async_lds_copy: str | None
    vgprs: int = 0
    sgprs: int = 0
    vgpr_granule: int = 0
    sgpr_granule: int = 0
    vmem_wait_counter: Literal["vmcnt", "loadcnt"] | None = None
    lds_wait_counter: Literal["lgkmcnt", "dscnt"] | None = None
    asm_isa: Literal["cdna3"] | None = None
    sgpr_reserved: int = 0
    lds_dma_max_bytes: int = 0

    @property
    def is_cuda(self) -> bool:
        """True for NVIDIA targets (CUDA codegen)."""
        return self.kind == "cuda"

    @property
    def is_rocm(self) -> bool:
        """True for AMD targets (ROCm / LLVM AMDGPU codegen)."""
        return self.kind == "rocm"

    def tvm_target(self) -> tvm.target.Target:
        """The ``tvm.target.Target`` TVM's codegen needs for this architecture."""
        if self.is_cuda:
            return tvm.target.Target({"kind": "cuda", "arch": self.name})
        return tvm.target.Target({"kind": "rocm", "mcpu": self.name})


_SM90A = TargetInfo(
    name="sm_90a",
    kind="cuda",
    vendor="nvidia",
    wave_size=32,
    shared_memory_bytes=232448,  # 227 KiB opt-in dynamic shared memory per block (H100)
    max_threads_per_block=1024,
    barrier_style="basic",
    has_split_barrier=True,  # mbarrier.arrive / mbarrier.try_wait.parity (sm_90+)
    has_async_proxy=True,
    async_lds_copy="cp.async",
)
_SM80 = replace(
    _SM90A,
    name="sm_80",
    shared_memory_bytes=166912,  # 163 KiB opt-in (A100)
    has_split_barrier=False,  # mbarrier.try_wait needs sm_90
    has_async_proxy=False,
)
_GFX942 = TargetInfo(
    name="gfx942",
    kind="rocm",
    vendor="amd",
    wave_size=64,
    shared_memory_bytes=65536,
    max_threads_per_block=1024,
    barrier_style="basic",
    has_split_barrier=False,
    has_async_proxy=False,
    async_lds_copy=None,
    vgprs=512,  # 256 arch VGPRs + 256 AGPRs, unified file
    sgprs=102,
    vgpr_granule=8,
    sgpr_granule=8,
    vmem_wait_counter="vmcnt",
    lds_wait_counter="lgkmcnt",
    asm_isa="cdna3",
    sgpr_reserved=6,  # VCC, FLAT_SCRATCH, XNACK_MASK: the assembler counts them on top
    lds_dma_max_bytes=4,
)
_GFX950 = replace(
    _GFX942,
    name="gfx950",
    shared_memory_bytes=163840,  # 160 KiB LDS on MI350
    async_lds_copy="buffer_load_lds",
    lds_dma_max_bytes=16,
)
_GFX1200 = TargetInfo(
    name="gfx1200",
    kind="rocm",
    vendor="amd",
    wave_size=32,
    shared_memory_bytes=65536,
    max_threads_per_block=1024,
    barrier_style="split",
    has_split_barrier=True,
    has_async_proxy=False,
    async_lds_copy=None,
    vgprs=256,
    sgprs=106,
    vgpr_granule=8,
    sgpr_granule=8,
    vmem_wait_counter="loadcnt",
    lds_wait_counter="dscnt",
)
_GFX1201 = replace(_GFX1200, name="gfx1201")

#: Every architecture tilewave knows, by short name.
TARGETS: dict[str, TargetInfo] = {
    t.name: t for t in (_SM90A, _SM80, _GFX942, _GFX950, _GFX1200, _GFX1201)
}

_ALIASES = {"sm_90": "sm_90a", "sm90a": "sm_90a", "sm90": "sm_90a", "sm80": "sm_80"}


def target_names() -> list[str]:
    """Short names of every supported target, in table order."""
    return list(TARGETS)


def _unknown(what: str) -> UnknownTargetError:
    return UnknownTargetError(
        f"unknown target {what}: tilewave knows {', '.join(TARGETS)}. "
        "Pass one of those short names or a tvm.target.Target such as "
        '{"kind": "cuda", "arch": "sm_90a"} / {"kind": "rocm", "mcpu": "gfx942"}.'
    )


def _from_tvm_target(target: tvm.target.Target) -> TargetInfo:
    kind = target.kind.name
    attrs = dict(target.attrs)
    if kind == "cuda":
        arch = str(attrs.get("arch", ""))
        if not arch:
            raise _unknown(f"{target} (a CUDA target needs an 'arch', e.g. sm_90a)")
        return _by_name(arch, original=str(target))
    if kind == "rocm":
        mcpu = str(attrs.get("mcpu", ""))
        if not mcpu:
            raise _unknown(f"{target} (a ROCm target needs an 'mcpu', e.g. gfx942)")
        return _by_name(mcpu, original=str(target))
    raise _unknown(f"{target} (kind {kind!r}; tilewave handles 'cuda' and 'rocm')")


def _by_name(name: str, original: str | None = None) -> TargetInfo:
    key = _ALIASES.get(name, name)
    if key not in TARGETS:
        raise _unknown(repr(original or name))
    return TARGETS[key]


def get_target(target: Any) -> TargetInfo:
    """Architecture facts for ``target``.

    Args:
        target: a :class:`TargetInfo`, a short name (``"sm_90a"``, ``"gfx942"``), a
            ``tvm.target.Target``, a dict in TVM's JSON form, or that dict as a JSON string.

    Raises:
        UnknownTargetError: the target is not one tilewave has facts for.
    """
    if isinstance(target, TargetInfo):
        return target
    if isinstance(target, tvm.target.Target):
        return _from_tvm_target(target)
    if isinstance(target, dict):
        try:
            return _from_tvm_target(tvm.target.Target(target))
        except UnknownTargetError:
            raise
        except Exception as err:
            raise _unknown(f"{target!r} (TVM rejected it: {err})") from None
    if isinstance(target, str):
        text = target.strip()
        if text.startswith("{"):
            try:
                return get_target(json.loads(text))
            except json.JSONDecodeError as err:
                raise _unknown(f"{text!r} (not valid JSON: {err})") from None
        return _by_name(text)
    raise _unknown(f"of type {type(target).__name__}: {target!r}")
