"""Checks on kernels before and after tilewave's pass list that turn TVM crashes and silent
miscompiles into clear errors: symbolic shared sizes, shared memory over the target's limit,
ROCm blocks larger than TVM's ROCm codegen declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx

from tilewave.analysis.shared_buffers import is_shared_buffer
from tilewave.errors import MalformedKernelError, SharedMemoryLimitError, TargetFeatureError, where
from tilewave.ir.walker import post_order_visit
from tilewave.targets import TargetInfo

__all__ = [
    "ROCM_CODEGEN_MAX_THREADS",
    "SharedAllocation",
    "block_threads",
    "check_rocm_block_size",
    "check_shared_memory_limit",
    "check_shared_sizes_constant",
    "shared_allocations",
]

#: TVM's ROCm (LLVM AMDGPU) codegen asks a ROCm device for the block-size limit and, with
#: none present, declares ``amdgpu-flat-work-group-size`` "1,256" on every kernel. A larger
#: block would be refused at launch (or run with the wrong register budget).
ROCM_CODEGEN_MAX_THREADS = 256


@dataclass(frozen=True)
class SharedAllocation:
    """One shared-memory allocation of a kernel.

    Attributes:
        stmt: the ``AllocBuffer`` statement.
        name: the buffer's name.
        nbytes: its size in bytes, or ``None`` when a dimension is symbolic.
    """

    stmt: Any
    name: str
    nbytes: int | None


def _allocation(stmt: Any) -> SharedAllocation:
    buffer = stmt.buffer
    dtype = tvm.DataType(str(buffer.ty.dtype))
    size: int | None = (dtype.bits * dtype.lanes + 7) // 8
    for dim in buffer.ty.shape:
        size = size * int(dim) if isinstance(dim, tirx.IntImm) and size is not None else None
    return SharedAllocation(stmt, str(buffer.name), size)


def shared_allocations(func: tirx.PrimFunc) -> list[SharedAllocation]:
    """Every shared (``shared``/``shared.dyn``) ``AllocBuffer`` of ``func``, in order."""
    found: list[SharedAllocation] = []

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AllocBuffer) and is_shared_buffer(node.buffer):
            found.append(_allocation(node))

    post_order_visit(func.body, visit, (tirx.AllocBuffer,))
    return found


def _prim_funcs(mod: tvm.IRModule) -> list[tuple[str, tirx.PrimFunc]]:
    return [(g.name_hint, f) for g, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]


def check_shared_sizes_constant(mod: tvm.IRModule) -> None:
    """Refuse shared buffers with a symbolic size (TVM's GPU codegens need constant ones).

    Raises:
        MalformedKernelError: naming the function and the allocation.
    """
    for name, func in _prim_funcs(mod):
        for alloc in shared_allocations(func):
            if alloc.nbytes is None:
                raise MalformedKernelError(
                    f"lower: shared buffer '{alloc.name}' {where(name, alloc.stmt)} has a "
                    "symbolic size; GPU code generators allocate shared memory of constant "
                    "size only. Give it a constant shape (the largest tile) and index a part "
                    "of it."
                )


def check_shared_memory_limit(mod: tvm.IRModule, target: TargetInfo) -> None:
    """Refuse a kernel whose shared allocations (as lowered) are empty or exceed the
    target's limit.

    TVM's ``CompactBufferAllocation`` sizes a buffer from the accesses it can reach; a buffer
    touched only in code that can never run (``if tx >= 16`` inside ``if tx < 8``) comes out
    with a size of zero or less, which TVM's code generators then crash on.

    Raises:
        MalformedKernelError: an allocation of zero or negative size.
        SharedMemoryLimitError: naming the function, the total, the limit and the largest
            allocation.
    """
    for name, func in _prim_funcs(mod):
        allocations = [a for a in shared_allocations(func) if a.nbytes is not None]
        for empty in (a for a in allocations if (a.nbytes or 0) <= 0):
            raise MalformedKernelError(
                f"lower: shared buffer '{empty.name}' {where(name, empty.stmt)} has "
                f"{empty.nbytes} bytes after TVM's CompactBufferAllocation: every access to it "
                "sits in code that can never run (e.g. an `if` whose condition contradicts an "
                "enclosing one). Remove that dead code or the buffer."
            )
        total = sum(a.nbytes or 0 for a in allocations)
        if total <= target.shared_memory_bytes:
            continue
        largest = max(allocations, key=lambda a: a.nbytes or 0)
        raise SharedMemoryLimitError(
            f"lower: {where(name)}: the kernel allocates {total} bytes of shared memory after "
            "lowering, "
            f"over the {target.shared_memory_bytes}-byte per-block limit of {target.name}; "
            f"the largest is '{largest.name}' ({largest.nbytes} bytes) "
            f"{where(None, largest.stmt)}. Use smaller tiles or fewer shared buffers."
        )


def block_threads(func: tirx.PrimFunc) -> int:
    """Threads per block of a lowered device kernel (product of its threadIdx extents)."""
    extents: dict[str, int] = {}

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
            tag = str(node.node.thread_tag)
            if tag.startswith("threadIdx") and isinstance(node.value, tirx.IntImm):
                extents[tag] = max(extents.get(tag, 1), int(node.value))

    post_order_visit(func.body, visit, (tirx.AttrStmt,))
    total = 1
    for extent in extents.values():
        total *= extent
    return total


def _rocm_device_present() -> bool:
    # With a ROCm device TVM asks it and declares the device's real limit.
    return bool(tvm.runtime.enabled("rocm") and tvm.rocm(0).exist)


def check_rocm_block_size(device_mod: tvm.IRModule, target: TargetInfo) -> None:
    """Refuse ROCm kernels larger than the block size TVM's ROCm codegen declares.

    Raises:
        TargetFeatureError: naming the kernel, its block size and the fixes.
    """
    if not target.is_rocm or _rocm_device_present():
        return
    for name, func in _prim_funcs(device_mod):
        threads = block_threads(func)
        if threads > ROCM_CODEGEN_MAX_THREADS:
            raise TargetFeatureError(
                f"build: {where(name)} runs {threads} threads per block, but TVM's ROCm "
                f"codegen declares at most {ROCM_CODEGEN_MAX_THREADS} "
                f"(amdgpu-flat-work-group-size 1,{ROCM_CODEGEN_MAX_THREADS}) when no ROCm "
                f"device answers its query, so the code object would not launch. Use at most "
                f"{ROCM_CODEGEN_MAX_THREADS} threads per block for {target.name}."
            )
