"""Load scheduling on the kernel IR (virtual registers, before allocation and waitcnt).

The selector emits each load where its value is first used, so every load is followed by
an ``s_waitcnt`` for itself (``vmcnt(0)``) and the memory latency is paid once per load.
Two passes give the waitcnt stage room to wait late:

* :func:`hoist_loads` moves every VMEM / LDS load up within its basic block, past
  instructions it does not depend on, to just after the last instruction that defines a
  register it reads, reads or writes a register it writes, or is not plain ALU work (other
  memory operations, waits, barriers, EXEC/M0/VCC writes, MFMAs). Loads keep their order
  among memory operations, so the in-order counters still count them right, and a later
  use waits only for its own load (``vmcnt(n)`` with ``n`` the loads issued after it).
* :func:`wait_before_loops` puts an ``s_waitcnt lgkmcnt(0)`` before a loop entered with a
  scalar (kernel argument) load possibly pending, so the wait runs once instead of in every
  iteration (the waitcnt pass drops it where nothing is pending).

Hoisting lengthens the live ranges of loaded values; the driver allocates the unscheduled
program instead when the scheduled one does not fit in the register file.
"""

from __future__ import annotations

from dataclasses import replace

from tilewave.codegen.amdgcn.isa import op_info
from tilewave.codegen.amdgcn.kir import Instr, Label, Program, Sym, base_reg

__all__ = ["hoist_loads", "wait_before_loops"]

_SPECIAL = ("exec", "m0", "vcc", "scc")


def _regs(ops: list[object]) -> set[object]:
    out: set[object] = set()
    for op in ops:
        reg = base_reg(op)
        if reg is not None:
            out.add(reg)
    return out


def _is_load(ins: Instr) -> bool:
    info = op_info(ins.opcode)
    return info.unit in ("vmem", "ds") and not info.is_store and bool(ins.defs)


def _is_plain_alu(ins: Instr) -> bool:
    """VALU/SALU work a load may be moved across (no memory, EXEC, M0, VCC or branch)."""
    info = op_info(ins.opcode)
    if info.unit not in ("valu", "salu") or ins.target is not None:
        return False
    if ins.opcode.startswith(("s_and_saveexec", "v_div_fmas", "v_readfirstlane")):
        return False
    return not any(isinstance(op, Sym) and op.name in _SPECIAL for op in [*ins.defs, *ins.uses])


def hoist_loads(program: Program) -> Program:
    """``program`` with each load moved as early in its basic block as its operands allow."""
    body: list[Instr | Label] = []
    block_start = 0  # index in ``body`` where the current basic block begins
    for ins in program.body:
        if isinstance(ins, Label) or ins.target is not None:
            body.append(ins)
            block_start = len(body)
            continue
        if not _is_load(ins):
            body.append(ins)
            continue
        reads, writes = _regs(ins.uses), _regs(ins.defs)
        at = len(body)
        while at > block_start:
            prev = body[at - 1]
            assert isinstance(prev, Instr)
            if not _is_plain_alu(prev):
                break
            if _regs(prev.defs) & (reads | writes) or _regs(prev.uses) & writes:
                break
            at -= 1
        body.insert(at, ins)
    return replace(program, body=body)


def wait_before_loops(program: Program) -> Program:
    """``program`` with ``s_waitcnt lgkmcnt(0)`` before each loop head reached by falling
    through from code that issued a scalar load."""
    heads = {ins.target for i, ins in enumerate(program.body) if isinstance(ins, Instr)
             and ins.target is not None
             and any(isinstance(b, Label) and b.name == ins.target
                     for b in program.body[:i])}
    body: list[Instr | Label] = []
    scalar_load_seen = False
    for ins in program.body:
        if isinstance(ins, Instr) and op_info(ins.opcode).unit == "smem":
            scalar_load_seen = True
        if isinstance(ins, Label) and ins.name in heads and scalar_load_seen:
            body.append(Instr("s_waitcnt", mods="lgkmcnt(0)", comment="kernel arguments"))
        body.append(ins)
    return replace(program, body=body)
