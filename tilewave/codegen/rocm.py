"""ROCm (AMDGCN) lowering of tilewave's ops: one builder per op, looked up by op name.

Every op becomes an LLVM AMDGPU intrinsic call that TVM's LLVM codegen emits as the
instruction: ``s_barrier``, ``s_barrier_signal -1`` / ``s_barrier_wait -1`` (gfx12),
``s_waitcnt vmcnt(n)`` (gfx9) or ``s_wait_loadcnt n`` (gfx12). The counter waits a barrier
needs first (``s_waitcnt lgkmcnt(0)`` / ``s_wait_dscnt 0``) are built here too and placed by
:mod:`tilewave.codegen.amd_barrier_waits`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tvm_ffi
from tvm import ir, tirx
from tvm.script import tirx as T

from tilewave.codegen.common import OpLowering, immediate_operand
from tilewave.errors import TargetFeatureError, where
from tilewave.ir.intrinsics import callee_name
from tilewave.targets import TargetInfo

__all__ = [
    "ROCM_LOWERINGS",
    "gfx9_vmcnt_waitcnt",
    "gfx9_waitcnt",
    "gfx9_waitcnt_fields",
    "lds_counter_wait",
    "offline_rocm_link",
    "vmem_counter_wait",
    "wait_drains",
]

# -1 names the workgroup barrier in gfx12's named-barrier encoding (ISA "S_BARRIER_SIGNAL").
_WORKGROUP_BARRIER = -1

# gfx9 s_waitcnt simm16 fields (CDNA3 ISA, "S_WAITCNT"): vmcnt is split into bits [3:0] and
# [15:14]; expcnt is bits [6:4], lgkmcnt bits [11:8]. A field at its maximum does not wait.
_GFX9_EXPCNT_MAX = 0x7 << 4
_GFX9_LGKMCNT_MAX = 0xF << 8
_GFX9_VMCNT_MAX = 63


def gfx9_waitcnt(*, vmcnt: int | None = None, lgkmcnt: int | None = None) -> int:
    """The ``s_waitcnt`` immediate (gfx9) that waits for ``vmcnt <= vmcnt`` and
    ``lgkmcnt <= lgkmcnt``; a counter left as ``None`` is not waited for.

    Raises:
        ValueError: a count outside its field (vmcnt 0..63, lgkmcnt 0..15).
    """
    imm = _GFX9_EXPCNT_MAX
    if vmcnt is None:
        vmcnt = _GFX9_VMCNT_MAX
    if not 0 <= vmcnt <= _GFX9_VMCNT_MAX:
        raise ValueError(f"vmcnt {vmcnt} is outside 0..{_GFX9_VMCNT_MAX}")
    imm |= (vmcnt & 0xF) | ((vmcnt >> 4) << 14)
    if lgkmcnt is None:
        lgkmcnt = _GFX9_LGKMCNT_MAX >> 8
    if not 0 <= lgkmcnt <= _GFX9_LGKMCNT_MAX >> 8:
        raise ValueError(f"lgkmcnt {lgkmcnt} is outside 0..{_GFX9_LGKMCNT_MAX >> 8}")
    return imm | (lgkmcnt << 8)


def gfx9_waitcnt_fields(imm: int) -> tuple[int, int]:
    """``(vmcnt, lgkmcnt)`` an ``s_waitcnt`` immediate (gfx9) waits for."""
    return (imm & 0xF) | (((imm >> 14) & 0x3) << 4), (imm >> 8) & 0xF


def gfx9_vmcnt_waitcnt(count: int) -> int:
    """The ``s_waitcnt`` immediate that waits for ``vmcnt <= count`` and nothing else (gfx9).

    Raises:
        ValueError: ``count`` is outside 0..63, the range of gfx9's 6-bit vmcnt.
    """
    return gfx9_waitcnt(vmcnt=count)


def lds_counter_wait(target: TargetInfo) -> ir.expr.Expr:
    """The call that waits until none of the wave's LDS operations is outstanding:
    ``s_waitcnt lgkmcnt(0)`` (gfx9) or ``s_wait_dscnt 0`` (gfx12).

    Raises:
        TargetFeatureError: the target table gives ``target`` no LDS wait counter.
    """
    if target.lds_wait_counter == "lgkmcnt":
        return T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(gfx9_waitcnt(lgkmcnt=0)))
    if target.lds_wait_counter == "dscnt":
        return T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.dscnt", T.int16(0))
    raise TargetFeatureError(
        f"LowerTilewaveOps: the target table gives {target.name} no LDS wait counter "
        "(TargetInfo.lds_wait_counter). Add one in tilewave/targets.py."
    )


def vmem_counter_wait(target: TargetInfo, count: int = 0) -> ir.expr.Expr:
    """The call that waits until at most ``count`` vector-memory loads (LDS DMA included)
    of the wave are outstanding: ``s_waitcnt vmcnt(n)`` (gfx9) or ``s_wait_loadcnt n``.

    Raises:
        TargetFeatureError: no vector-memory wait counter in the table, or ``count`` beyond
            gfx9's vmcnt range.
    """
    if target.vmem_wait_counter == "loadcnt":
        # gfx12 split vmcnt into loadcnt/storecnt; the async copies are loads. Its operand is
        # an i16 immediate. (LLVM aborts on this intrinsic for gfx9, hence the table field.)
        return T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.loadcnt", T.int16(count))
    if target.vmem_wait_counter == "vmcnt":
        if count > _GFX9_VMCNT_MAX:
            raise TargetFeatureError(
                f"LowerTilewaveOps: a wait for {count} outstanding loads exceeds "
                f"{target.name}'s vmcnt range 0..{_GFX9_VMCNT_MAX}. Wait for fewer copies."
            )
        imm = gfx9_waitcnt(vmcnt=count)
        return T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(imm))
    raise TargetFeatureError(
        f"LowerTilewaveOps: the target table gives {target.name} no vector-memory wait counter "
        "(TargetInfo.vmem_wait_counter). Add one in tilewave/targets.py."
    )


def wait_drains(stmt: object, target: TargetInfo) -> tuple[bool, bool] | None:
    """For an explicit counter-wait statement, ``(LDS drained, vector memory drained)``;
    ``None`` for any other statement.

    Reads the intrinsics :func:`lds_counter_wait` / :func:`vmem_counter_wait` produce and
    the same intrinsics written by hand, when they are ``target``'s generation (gfx9's
    ``s.waitcnt`` on gfx12 is not trusted to drain anything).
    """
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return None
    call = stmt.value
    name = callee_name(call)
    if name not in _WAIT_INTRINSICS or not isinstance(call.args[-1], tirx.IntImm):
        return None
    count = int(call.args[-1].value)
    gfx9_form = name == "llvm.amdgcn.s.waitcnt"
    if gfx9_form != (target.lds_wait_counter == "lgkmcnt"):
        return None  # another generation's wait: it does not drain this target's counters
    if gfx9_form:
        vm, lgkm = gfx9_waitcnt_fields(count)
        return lgkm == 0, vm == 0
    if name == "llvm.amdgcn.s.wait.dscnt":
        return count == 0, False
    return False, count == 0  # s.wait.loadcnt


_WAIT_INTRINSICS = frozenset(
    {"llvm.amdgcn.s.waitcnt", "llvm.amdgcn.s.wait.dscnt", "llvm.amdgcn.s.wait.loadcnt"}
)


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
    if target.vmem_wait_counter == "vmcnt" and count > _GFX9_VMCNT_MAX:
        raise TargetFeatureError(
            f"LowerTilewaveOps: wait_async_ops({count}) {where(func_name, call)} exceeds "
            f"{target.name}'s vmcnt range 0..{_GFX9_VMCNT_MAX}. Wait for fewer copies."
        )
    return vmem_counter_wait(target, count)


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
