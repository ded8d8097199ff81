"""The backend's stage list: lower → select → fuse → allocate → waitcnt → hazards → text.

:func:`compile_device_func` runs the stages on a lowered device PrimFunc and returns a
:class:`CompiledKernel` (the assembly plus what each stage produced, for tests and dumps);
:func:`emit` starts from the user's PrimFunc and runs ``tilewave.lower`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm
from tvm import tirx

from tilewave.codegen.amdgcn import toolchain
from tilewave.codegen.amdgcn.hazards import mitigate_hazards
from tilewave.codegen.amdgcn.isel import select
from tilewave.codegen.amdgcn.kir import Program
from tilewave.codegen.amdgcn.merge_access import (
    merge_lds_reads,
    merge_loads,
    merge_short_loads,
    merge_stores,
)
from tilewave.codegen.amdgcn.metadata import (
    KernelResources,
    descriptor_text,
    metadata_yaml,
    resources,
)
from tilewave.codegen.amdgcn.pack_f32 import pack_f32_pairs
from tilewave.codegen.amdgcn.peephole import drop_final_exec_restore, fuse, pair_zero_moves
from tilewave.codegen.amdgcn.regalloc import allocate
from tilewave.codegen.amdgcn.render import assign, format_body
from tilewave.codegen.amdgcn.schedule import hoist_loads, wait_before_loops
from tilewave.codegen.amdgcn.waitcnt import insert_waitcnt
from tilewave.errors import MalformedKernelError, RegisterAllocationError, TargetFeatureError
from tilewave.targets import TargetInfo, get_target

__all__ = [
    "CompiledKernel",
    "build_asm",
    "compile_device_func",
    "device_function",
    "emit",
    "in_user_order",
]

ARCH_VGPRS = 256  # a VALU operand field addresses v0..v255 (AGPRs are a separate file)


@dataclass(frozen=True)
class CompiledKernel:
    """The assembly of one kernel and the intermediate programs."""

    asm: str
    selected: Program
    allocated: Program
    final: Program
    resources: KernelResources
    target: TargetInfo

    @property
    def arguments(self) -> list[str]:
        """The code object's kernel arguments in kernarg order (the PrimFunc's order, see
        :func:`in_user_order`): buffer pointers by their device name (``A_ptr``), scalars
        by name."""
        return [arg.name for arg in self.selected.args]


def _require_asm_target(target: Any) -> TargetInfo:
    info = get_target(target)
    if info.asm_isa is None:
        raise TargetFeatureError(
            f"the AMDGCN assembly backend emits CDNA3 code; {info.name} is not a CDNA3 target. "
            "Use target 'gfx942' or 'gfx950', or tilewave.build() for other targets."
        )
    return info


def device_function(func: tirx.PrimFunc | tvm.IRModule, target: Any) -> tirx.PrimFunc:
    """Lower ``func`` with ``tilewave.lower`` and return its single device kernel."""
    from tilewave.pipeline import lower

    info = _require_asm_target(target)
    lowered = lower(func, info)
    kernels = [
        f for f in lowered.functions.values()
        if f.attrs is not None and "target" in f.attrs and f.attrs["target"].kind.name == "rocm"
    ]
    if not kernels:
        raise MalformedKernelError(
            "AMDGCN backend: lowering left no device kernel: the kernel does no work (an "
            "extent of 0, or a guard the simplifier proved never true), so there is nothing to "
            "launch. Skip the launch for this size, or pass the size as a kernel argument."
        )
    if len(kernels) != 1:
        raise MalformedKernelError(
            f"AMDGCN backend: lowering produced {len(kernels)} device kernels; emit() handles "
            "one kernel per PrimFunc. Split the work into separate PrimFuncs."
        )
    return in_user_order(kernels[0], func)


def in_user_order(device: tirx.PrimFunc, user: tirx.PrimFunc | tvm.IRModule) -> tirx.PrimFunc:
    """``device`` with its parameters in the order of ``user``'s.

    TVM's host/device split orders a device kernel's parameters as pointers first, then
    by name; the code object is called directly, so its arguments follow the PrimFunc
    the user wrote instead: buffer ``X`` is the device pointer ``X_ptr``, a scalar keeps
    its name. Device parameters with no user counterpart (symbolic shape variables) come
    last, in TVM's order. :attr:`CompiledKernel.arguments` lists the final order.
    """
    if isinstance(user, tvm.IRModule):
        funcs = [f for f in user.functions.values() if isinstance(f, tirx.PrimFunc)]
        if len(funcs) != 1:
            return device
        user = funcs[0]
    by_name = {p.name: p for p in device.params}
    ordered = []
    for param in user.params:
        is_buffer = isinstance(param.ty, tirx.buffer.BufferType)
        match = by_name.get(f"{param.name}_ptr" if is_buffer else param.name)
        if match is not None and match not in ordered:
            ordered.append(match)
    ordered += [p for p in device.params if p not in ordered]
    if all(a.same_as(b) for a, b in zip(ordered, device.params, strict=True)):
        return device
    return tirx.PrimFunc(ordered, device.body, device.ret_type, device.attrs, device.span)


def compile_device_func(func: tirx.PrimFunc, target: Any) -> CompiledKernel:
    """Run the backend stages on a device PrimFunc (lowered, or written with bindings)."""
    info = _require_asm_target(target)
    selected = select(func, info)
    merged = merge_lds_reads(merge_short_loads(merge_loads(merge_stores(fuse(selected)))))
    fused = drop_final_exec_restore(pair_zero_moves(pack_f32_pairs(merged)))
    limits = {"v": min(ARCH_VGPRS, info.vgprs), "s": info.sgprs}
    scheduled = wait_before_loops(hoist_loads(fused))
    try:
        alloc = allocate(scheduled, limits)
        fused = scheduled
    except RegisterAllocationError:  # hoisted loads live longer: keep the selector's order
        fused = wait_before_loops(fused)
        alloc = allocate(fused, limits)
    allocated = assign(fused, alloc)
    final = mitigate_hazards(insert_waitcnt(allocated))
    res = resources(final, alloc.next_free, info)
    return CompiledKernel(_assembly(final, res, info), selected, allocated, final, res, info)


def _assembly(program: Program, res: KernelResources, info: TargetInfo) -> str:
    name = program.name
    return "\n".join([
        f'.amdgcn_target "amdgcn-amd-amdhsa--{info.name}"',
        ".text",
        f".globl {name}",
        ".p2align 8",
        f".type {name},@function",
        f"{name}:",
        format_body(program),
        f".size {name}, .-{name}",
        "",
        ".rodata",
        ".p2align 6",
        descriptor_text(program, res),
        "",
        metadata_yaml(program, res),
        "",
    ])


def emit(prim_func: tirx.PrimFunc | tvm.IRModule, target: Any = "gfx942") -> str:
    """AMDGCN assembly for a user's kernel (thread bindings, shared buffers as written).

    Runs ``tilewave.lower`` for ``target`` and then the backend stages.

    Raises:
        TargetFeatureError: ``target`` is not a CDNA3 target.
        MalformedKernelError, RegisterAllocationError, SharedMemoryLimitError: the kernel
            uses something the backend cannot compile (the message says what and where).
    """
    return compile_device_func(device_function(prim_func, target), target).asm


def assemble(asm: str, target: Any = "gfx942") -> bytes:
    """Assemble ``asm`` into an ELF object (see :mod:`.toolchain`)."""
    return toolchain.assemble(asm, _require_asm_target(target).name)


def link(obj: bytes, target: Any = "gfx942") -> bytes:
    """Link an object from :func:`assemble` into a code object (``.hsaco`` bytes)."""
    return toolchain.link(obj, _require_asm_target(target).name)


def build_asm(func: tirx.PrimFunc | tvm.IRModule, target: Any, out_dir: str | Path
              ) -> tuple[Path, Path]:
    """Write ``<kernel>.s`` and ``<kernel>.hsaco`` for ``func`` into ``out_dir``.

    Returns:
        the paths of the assembly and of the code object.
    """
    device = device_function(func, target)
    compiled = compile_device_func(device, target)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    asm_path = out / f"{compiled.final.name}.s"
    hsaco_path = out / f"{compiled.final.name}.hsaco"
    asm_path.write_text(compiled.asm)
    hsaco_path.write_bytes(link(assemble(compiled.asm, target), target))
    return asm_path, hsaco_path
