"""ROCm (AMDGCN) lowering of tilewave's ops: one builder per op, looked up by op name.

Every op becomes an LLVM AMDGPU intrinsic call that TVM's LLVM codegen emits as the
instruction: ``s_barrier``, ``s_barrier_signal -1`` / ``s_barrier_wait -1`` (gfx12),
``s_waitcnt vmcnt(n)`` (gfx9) or ``s_wait_loadcnt n`` (gfx12).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tvm_ffi
from tvm import ir
from tvm.script import tirx as T

from tilewave.codegen.common import OpLowering, immediate_operand
from tilewave.errors import TargetFeatureError, where
from tilewave.targets import TargetInfo

__all__ = ["ROCM_LOWERINGS", "gfx9_vmcnt_waitcnt", "offline_rocm_link"]

# -1 names the workgroup barrier in gfx12's named-barrier encoding (ISA "S_BARRIER_SIGNAL").
_WORKGROUP_BARRIER = -1

# gfx9 s_waitcnt simm16 fields (CDNA3 ISA, "S_WAITCNT"): vmcnt is split into bits [3:0] and
# [15:14]; expcnt is bits [6:4], lgkmcnt bits [11:8]. A field at its maximum does not wait.
_GFX9_EXPCNT_MAX = 0x7 << 4
_GFX9_LGKMCNT_MAX = 0xF << 8
_GFX9_VMCNT_MAX = 63


def gfx9_vmcnt_waitcnt(count: int) -> int:
    """The ``s_waitcnt`` immediate that waits for ``vmcnt <= count`` and nothing else (gfx9).

    Raises:
        ValueError: ``count`` is outside 0..63, the range of gfx9's 6-bit vmcnt.
    """
    if not 0 <= count <= _GFX9_VMCNT_MAX:
        raise ValueError(f"vmcnt {count} is outside 0..{_GFX9_VMCNT_MAX}")
    low, high = count & 0xF, count >> 4
    return _GFX9_LGKMCNT_MAX | _GFX9_EXPCNT_MAX | low | (high << 14)


def _lds_barrier(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    return T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")


def _require_split_barrier(call: ir.expr.Call, target: TargetInfo, func_name: str) -> None:
    if not target.has_split_barrier:
        raise TargetFeatureError(
            f"LowerTilewaveOps: {call.op.name} {where(func_name, call)} is half of a split "
            f"barrier, which {target.name} does not have (s_barrier_signal/s_barrier_wait are "
            "gfx12 instructions). Use barrier_style='basic' (tilewave.lds_barrier) for "
            f"{target.name}."
        )


def _barrier_signal(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    _require_split_barrier(call, target, func_name)
    # Every id maps to the one workgroup barrier; ids only tell CUDA's mbarriers apart.
    immediate_operand(call, func_name, "the barrier id", allow_negative=True)
    return T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.signal", T.int32(_WORKGROUP_BARRIER))


def _barrier_wait(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    _require_split_barrier(call, target, func_name)
    immediate_operand(call, func_name, "the barrier id", allow_negative=True)
    # The intrinsic's operand is an i16 immediate.
    return T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.wait", T.int16(_WORKGROUP_BARRIER))


def _wait_async_ops(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    count = immediate_operand(call, func_name, "the number of loads left outstanding")
    if target.vmem_wait_counter == "loadcnt":
        # gfx12 split vmcnt into loadcnt/storecnt; the async copies are loads. Its operand is
        # an i16 immediate. (LLVM aborts on this intrinsic for gfx9, hence the table field.)
        return T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.loadcnt", T.int16(count))
    if target.vmem_wait_counter == "vmcnt":
        if count > _GFX9_VMCNT_MAX:
            raise TargetFeatureError(
                f"LowerTilewaveOps: wait_async_ops({count}) {where(func_name, call)} exceeds "
                f"{target.name}'s vmcnt range 0..{_GFX9_VMCNT_MAX}. Wait for fewer copies."
            )
        return T.call_llvm_intrin(
            "void", "llvm.amdgcn.s.waitcnt", T.int32(gfx9_vmcnt_waitcnt(count))
        )
    raise TargetFeatureError(
        f"LowerTilewaveOps: wait_async_ops {where(func_name, call)}: the target table gives "
        f"{target.name} no vector-memory wait counter (TargetInfo.vmem_wait_counter). Add one "
        "in tilewave/targets.py."
    )


def _fence_proxy_async(call: ir.expr.Call, target: TargetInfo, func_name: str) -> ir.expr.Expr:
    raise TargetFeatureError(
        f"LowerTilewaveOps: fence_proxy_async {where(func_name, call)} is an NVIDIA async-proxy "
        f"fence; {target.name} has no async proxy. Do not run InjectFenceProxy for AMD targets."
    )


#: op name -> builder of its AMDGCN form.
ROCM_LOWERINGS: dict[str, OpLowering] = {
    "tilewave.lds_barrier": _lds_barrier,
    "tilewave.barrier_signal": _barrier_signal,
    "tilewave.barrier_wait": _barrier_wait,
    "tilewave.wait_async_ops": _wait_async_ops,
    "tilewave.fence_proxy_async": _fence_proxy_async,
}


_ROCM_CALLBACKS = ("tvm_callback_rocm_bitcode_path", "tvm_callback_rocm_link")


def _no_device_libraries(*_args: object) -> list[str]:
    return []


def _object_as_code(obj: bytes) -> bytes:
    return obj


@contextlib.contextmanager
def offline_rocm_link() -> Iterator[None]:
    """Let TVM's ROCm codegen run on a machine without ROCm, for the duration of the block.

    TVM's default callbacks look up ROCm's device bitcode libraries and link with ROCm's
    ``ld.lld``; without ROCm both fail ("Cannot find ROCm path"). Inside this block no
    device library is linked in and the "code object" is the unlinked ELF object, which is
    all ``inspect_source("asm")`` / ``("llvm")`` need. The previous callbacks come back on
    exit. Kernels calling ROCm's math library (``__ocml_*``) keep those calls unresolved.
    """
    saved = {name: tvm_ffi.get_global_func(name, allow_missing=True) for name in _ROCM_CALLBACKS}
    tvm_ffi.register_global_func(_ROCM_CALLBACKS[0], _no_device_libraries, override=True)
    tvm_ffi.register_global_func(_ROCM_CALLBACKS[1], _object_as_code, override=True)
    try:
        yield
    finally:
        for name, func in saved.items():
            if func is None:
                tvm_ffi.remove_global_func(name)
            else:
                tvm_ffi.register_global_func(name, func, override=True)
