"""Linear-scan register allocation with precoloring, ranges and alignment; no spilling.

Intervals (from :func:`~tilewave.codegen.amdgcn.liveness.allocation_spans`: a result may
reuse a source register read for the last time by the same instruction) are visited in
order of their start. Precolored registers (``VReg.fixed``: the kernarg pointer ``s[0:1]``,
workgroup ids, the workitem id ``v0``) are placed first; every other register takes the
lowest index that is a multiple of its ``align`` and whose ``width`` registers are free for
its whole interval. When no index fits, allocation stops with a
:class:`~tilewave.errors.RegisterAllocationError` naming the kernel, the class, the demand
and the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewave.codegen.amdgcn.kir import PReg, Program, RegClass, VReg
from tilewave.codegen.amdgcn.liveness import allocation_spans
from tilewave.errors import RegisterAllocationError

__all__ = ["Allocation", "allocate"]


@dataclass
class Allocation:
    """Physical placement of every virtual register, and the registers used per class."""

    assignment: dict[VReg, PReg]
    next_free: dict[str, int]

    def phys(self, reg: VReg) -> PReg:
        """The physical range of ``reg``."""
        return self.assignment[reg]


def _max_pressure(intervals: dict[VReg, tuple[int, int]], cls: RegClass) -> int:
    events: dict[int, int] = {}
    for reg, (a, b) in intervals.items():
        if reg.cls == cls:
            events[a] = events.get(a, 0) + reg.width
            events[b + 1] = events.get(b + 1, 0) - reg.width
    live = peak = 0
    for pos in sorted(events):
        live += events[pos]
        peak = max(peak, live)
    return peak


def allocate(program: Program, limits: dict[str, int]) -> Allocation:
    """Assign physical registers to every virtual register of ``program``.

    Args:
        program: the kernel IR over virtual registers.
        limits: number of allocatable registers per class, e.g. ``{"v": 256, "s": 102}``.

    Raises:
        RegisterAllocationError: a class ran out of registers, or two precolored registers
            overlap while both live.
    """
    intervals = allocation_spans(program)
    busy: dict[str, list[list[tuple[int, int]]]] = {
        cls: [[] for _ in range(limit)] for cls, limit in limits.items()
    }
    assignment: dict[VReg, PReg] = {}

    def free(cls: str, index: int, width: int, span: tuple[int, int]) -> bool:
        if index + width > len(busy[cls]):
            return False
        a, b = span
        return all(
            not (a <= y and x <= b) for r in range(index, index + width) for x, y in busy[cls][r]
        )

    def place(reg: VReg, index: int, span: tuple[int, int]) -> None:
        for r in range(index, index + reg.width):
            busy[reg.cls][r].append(span)
        assignment[reg] = PReg(reg.cls, index, reg.width)

    ordered = sorted(intervals.items(), key=lambda kv: (kv[0].fixed is None, kv[1][0], kv[0].id))
    for reg, span in ordered:
        if reg.fixed is not None:
            if not free(reg.cls, reg.fixed, reg.width, span):
                raise RegisterAllocationError(
                    f"kernel '{program.name}': precolored register {reg!r} at "
                    f"{reg.cls}{reg.fixed} overlaps another precolored register while live; "
                    "this is a backend bug in the ABI register setup."
                )
            place(reg, reg.fixed, span)
            continue
        for index in range(0, len(busy[reg.cls]), max(reg.align, 1)):
            if free(reg.cls, index, reg.width, span):
                place(reg, index, span)
                break
        else:
            kind = "VGPR" if reg.cls == "v" else "SGPR"
            demand = _max_pressure(intervals, reg.cls)
            raise RegisterAllocationError(
                f"kernel '{program.name}': out of {kind}s — {demand} {kind}s live at the "
                f"peak (plus alignment) but the limit is {limits[reg.cls]}; could not place "
                f"{reg!r} (width {reg.width}, align {reg.align}). The backend does not spill: "
                "shrink the per-thread tile, unroll less, or split the kernel."
            )
    next_free = {cls: 0 for cls in limits}
    for preg in assignment.values():
        next_free[preg.cls] = max(next_free[preg.cls], preg.index + preg.width)
    return Allocation(assignment, next_free)
