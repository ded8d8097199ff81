"""``s_waitcnt`` insertion from a model of the outstanding memory operations.

gfx9 keeps two counters a wave can wait on: ``vmcnt`` (vector memory: buffer loads and
stores; they complete in issue order) and ``lgkmcnt`` (LDS, scalar memory; LDS ops
complete in order, scalar loads may return out of order). Per counter the model keeps how
many operations may still be pending and, for every register an outstanding load writes,
how many operations of that counter were issued after it (its *distance*). An instruction
that reads or overwrites such a register needs ``cnt(distance)``: everything older than
that load is done once at most ``distance`` newer operations remain. A pending scalar load
forces ``lgkmcnt(0)`` (it may complete last). LDS written by gfx950's ``buffer_load ...
lds`` is modelled as a register (``lds``) every ``ds_*`` reads, and ``s_barrier`` waits for
this wave's LDS operations so the other waves see them.

At a join (a label) the states of the predecessors are merged conservatively (more pending
operations, smaller distances) and loops are iterated until the states stop changing, so a
load issued at the end of a loop body is waited for at the top of the next iteration.
Explicit ``s_waitcnt`` instructions (``wait_async_ops``, the barrier waits of
:mod:`tilewave.codegen.amd_barrier_waits`) update the model; one that waits for nothing on
any path (the model already has its counters at or below its counts) is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from tilewave.codegen.amdgcn.isa import op_info
from tilewave.codegen.amdgcn.kir import Instr, Label, PReg, Program

__all__ = ["CounterState", "WaitState", "insert_waitcnt"]

COUNTERS = ("vm", "lgkm")
MAX_COUNT = {"vm": 63, "lgkm": 15}  # the largest count each s_waitcnt field can encode
LDS = ("lds", 0)


@dataclass
class CounterState:
    """One counter: operations possibly pending, distance per written register."""

    pending: int = 0
    dist: dict[tuple[str, int], int] = field(default_factory=dict)
    smem: bool = False  # an out-of-order scalar load may be among the pending ones

    def copy(self) -> CounterState:
        """An independent copy."""
        return CounterState(self.pending, dict(self.dist), self.smem)


@dataclass
class WaitState:
    """The model at one program point: one :class:`CounterState` per counter."""

    counters: dict[str, CounterState] = field(
        default_factory=lambda: {c: CounterState() for c in COUNTERS}
    )

    def copy(self) -> WaitState:
        """An independent copy."""
        return WaitState({c: s.copy() for c, s in self.counters.items()})

    def merge(self, other: WaitState) -> WaitState:
        """The conservative union of two predecessor states."""
        out = WaitState()
        for c in COUNTERS:
            a, b = self.counters[c], other.counters[c]
            dist = dict(a.dist)
            for reg, d in b.dist.items():
                dist[reg] = min(d, dist.get(reg, d))
            out.counters[c] = CounterState(max(a.pending, b.pending), dist, a.smem or b.smem)
        return out

    def key(self) -> tuple:
        """A hashable summary, to detect the fixed point."""
        return tuple(
            (s.pending, tuple(sorted(s.dist.items())), s.smem) for s in self.counters.values()
        )

    def needed(self, regs: set[tuple[str, int]]) -> dict[str, int]:
        """The wait count per counter before an instruction touching ``regs``."""
        need: dict[str, int] = {}
        for c, s in self.counters.items():
            for reg in regs:
                d = s.dist.get(reg)
                if d is not None and d < s.pending:
                    n = 0 if (c == "lgkm" and s.smem) else d
                    need[c] = min(n, need.get(c, n))
        return need

    def wait(self, counts: dict[str, int]) -> None:
        """Apply ``s_waitcnt`` with ``counts``."""
        for c, n in counts.items():
            s = self.counters[c]
            s.pending = min(s.pending, n)
            s.dist = {r: d for r, d in s.dist.items() if d < s.pending}
            if s.pending == 0:
                s.smem = False

    def waits_for(self, counts: dict[str, int]) -> bool:
        """Whether ``s_waitcnt`` with ``counts`` can wait for anything here."""
        return any(self.counters[c].pending > n for c, n in counts.items())

    def issue(self, counter: str, writes: set[tuple[str, int]], smem: bool) -> None:
        """Record one new operation of ``counter`` writing ``writes``."""
        s = self.counters[counter]
        top = MAX_COUNT[counter]
        s.pending = min(s.pending + 1, top + 1)
        # pending == top + 1 means "more than the field can count": a register is then known
        # complete only through a wait, and its distance saturates at the largest count
        # (cnt(top) leaves at most ``top`` newer operations outstanding, in issue order)
        saturated = s.pending > top
        s.dist = {r: min(d + 1, top) for r, d in s.dist.items()
                  if saturated or d + 1 < s.pending}
        for reg in writes:
            s.dist[reg] = 0
        s.smem = s.smem or smem


def _units(ops: list) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for op in ops:
        if isinstance(op, PReg):
            out.update(op.units())
    return out


def _parse_wait(mods: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"(vm|lgkm)cnt\((\d+)\)", mods)}


def _format_wait(counts: dict[str, int]) -> str:
    return " ".join(f"{c}cnt({counts[c]})" for c in COUNTERS if c in counts)


def _touches(ins: Instr) -> set[tuple[str, int]]:
    regs = _units(ins.defs) | _units(ins.uses)
    info = op_info(ins.opcode)
    if info.unit == "ds" or info.unit == "barrier":
        regs.add(LDS)
    if info.unit == "barrier":
        regs.add(("lds_ops", 0))
    return regs


def _step(state: WaitState, ins: Instr) -> dict[str, int]:
    """Advance ``state`` over ``ins``; returns the wait it needs first (maybe empty)."""
    info = op_info(ins.opcode)
    if info.unit == "wait":
        state.wait(_parse_wait(ins.mods))
        return {}
    need = state.needed(_touches(ins))
    if need:
        state.wait(need)
    if info.counter is not None:
        writes = _units(ins.defs)
        if ins.opcode.endswith("_lds"):
            writes.add(LDS)
        if info.unit == "ds":
            writes.add(("lds_ops", 0))  # the barrier waits for this wave's LDS traffic
        state.issue(info.counter, writes, smem=info.unit == "smem")
    return need


def _state_at_label(
    fallthrough: WaitState | None, from_branches: WaitState | None
) -> WaitState:
    """The counter state on entry to a label: fall-through state joined with branch states."""
    if fallthrough is None:
        merged = from_branches
    elif from_branches is None:
        merged = fallthrough
    else:
        merged = fallthrough.merge(from_branches)
    return (merged or WaitState()).copy()


def insert_waitcnt(program: Program) -> Program:
    """Return ``program`` (physical registers) with the ``s_waitcnt`` it needs inserted."""
    body = program.body
    at_label: dict[str, WaitState] = {}
    for _ in range(64):  # converges in a few rounds: counts and distances are bounded
        changed = False
        state: WaitState | None = WaitState()
        for ins in body:
            if isinstance(ins, Label):
                state = _state_at_label(state, at_label.get(ins.name))
                continue
            if state is None:
                continue  # unreachable code after an unconditional branch
            _step(state, ins)
            if ins.target is not None:
                old = at_label.get(ins.target)
                new = state.copy() if old is None else old.merge(state)
                if old is None or new.key() != old.key():
                    at_label[ins.target] = new
                    changed = True
            if ins.is_unconditional:
                state = None
        if not changed:
            break
    out: list[Instr | Label] = []
    state = WaitState()
    for ins in body:
        if isinstance(ins, Label):
            state = _state_at_label(state, at_label.get(ins.name))
            out.append(ins)
            continue
        if state is None:
            out.append(ins)
            continue
        if op_info(ins.opcode).unit == "wait" and not state.waits_for(_parse_wait(ins.mods)):
            continue  # an explicit wait (from the TIR) the model already satisfies
        need = _step(state, ins)
        if need:
            out.append(Instr("s_waitcnt", mods=_format_wait(need)))
        out.append(ins)
        if ins.is_unconditional:
            state = None
    return replace(program, body=out)
