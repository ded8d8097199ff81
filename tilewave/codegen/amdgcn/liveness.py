"""Control-flow graph and backward liveness over the kernel IR's virtual registers.

Blocks are split at labels and after branches. Liveness is the classic backward dataflow
``live_in(B) = use(B) ∪ (live_out(B) − def(B))``, ``live_out(B) = ∪ live_in(succ)``,
iterated to a fixed point, so a value read in a loop body and written later in it (a
loop-carried accumulator) is live across the back edge. The dataflow runs over single
registers of ranges (*units*): a write to part of a range
(:class:`~tilewave.codegen.amdgcn.kir.Sub`) kills the units it writes and no others, so a
range whose halves are written one after the other (a packed pair, see :mod:`.pack_f32`)
is not live before its first write. A range is live where any of its units is.

:func:`live_intervals` turns the per-instruction live sets into one interval per register
over the layout order — the input of the linear-scan allocator. Because loops are laid out
contiguously, a value live at the back edge is live at every position of the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilewave.codegen.amdgcn.kir import Instr, Label, Program, Sub, VReg

__all__ = ["Block", "allocation_spans", "build_cfg", "instr_defs_uses", "live_intervals",
           "liveness"]


@dataclass
class Block:
    """A basic block: positions ``start..end-1`` of the instruction list."""

    index: int
    start: int
    end: int
    succs: list[int] = field(default_factory=list)
    live_in: set[VReg] = field(default_factory=set)
    live_out: set[VReg] = field(default_factory=set)


def instr_defs_uses(ins: Instr) -> tuple[set[VReg], set[VReg]]:
    """Registers ``ins`` kills (fully writes) and registers it reads.

    A partial write (a :class:`Sub` of a range) counts as a read too: the rest of the range
    stays live through it.
    """
    defs: set[VReg] = set()
    uses: set[VReg] = set()
    for op in ins.uses:
        if isinstance(op, VReg):
            uses.add(op)
        elif isinstance(op, Sub):
            uses.add(op.reg)
    for op in ins.defs:
        if isinstance(op, VReg):
            defs.add(op)
        elif isinstance(op, Sub):
            if op.index == 0 and op.width == op.reg.width:
                defs.add(op.reg)
            else:
                uses.add(op.reg)
    return defs, uses


def build_cfg(instrs: list[Instr | Label]) -> list[Block]:
    """Split ``instrs`` (layout order, labels included) into basic blocks with successors."""
    leaders = {0}
    for pos, ins in enumerate(instrs):
        if isinstance(ins, Label):
            leaders.add(pos)
        elif ins.is_branch or ins.is_unconditional:
            leaders.add(pos + 1)
    starts = sorted(p for p in leaders if p < len(instrs)) or [0]
    blocks = [
        Block(i, s, (starts[i + 1] if i + 1 < len(starts) else len(instrs)))
        for i, s in enumerate(starts)
    ]
    label_block = {}
    for blk in blocks:
        for pos in range(blk.start, blk.end):
            if isinstance(instrs[pos], Label):
                label_block[instrs[pos].name] = blk.index
    for blk in blocks:
        last = instrs[blk.end - 1] if blk.end > blk.start else None
        if isinstance(last, Instr) and last.target is not None:
            blk.succs.append(label_block[last.target])
        if not (isinstance(last, Instr) and last.is_unconditional) and blk.index + 1 < len(blocks):
            blk.succs.append(blk.index + 1)
    return blocks


Unit = tuple[VReg, int]


def _units(op: object) -> list[Unit]:
    if isinstance(op, VReg):
        return [(op, i) for i in range(op.width)]
    if isinstance(op, Sub):
        return [(op.reg, op.index + i) for i in range(op.width)]
    return []


def instr_unit_defs_uses(ins: Instr) -> tuple[set[Unit], set[Unit]]:
    """The units (``(range, index)``) ``ins`` writes and the units it reads."""
    defs = {u for op in ins.defs for u in _units(op)}
    uses = {u for op in ins.uses for u in _units(op)}
    return defs, uses


def liveness(program: Program) -> tuple[list[Block], list[set[VReg]]]:
    """Blocks with live-in/live-out sets and, per position, the registers live after it."""
    body = program.body
    blocks = build_cfg(body)
    summaries = []
    for blk in blocks:
        gen: set[Unit] = set()
        kill: set[Unit] = set()
        for pos in range(blk.start, blk.end):
            ins = body[pos]
            if isinstance(ins, Instr):
                defs, uses = instr_unit_defs_uses(ins)
                gen |= uses - kill
                kill |= defs
        summaries.append((gen, kill))
    unit_in: list[set[Unit]] = [set() for _ in blocks]
    unit_out: list[set[Unit]] = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for blk in reversed(blocks):
            out = set().union(*(unit_in[s] for s in blk.succs)) if blk.succs else set()
            gen, kill = summaries[blk.index]
            new_in = gen | (out - kill)
            if out != unit_out[blk.index] or new_in != unit_in[blk.index]:
                unit_out[blk.index], unit_in[blk.index], changed = out, new_in, True
    live_after: list[set[VReg]] = [set() for _ in body]
    for blk in blocks:
        blk.live_in = {reg for reg, _ in unit_in[blk.index]}
        blk.live_out = {reg for reg, _ in unit_out[blk.index]}
        live = set(unit_out[blk.index])
        for pos in range(blk.end - 1, blk.start - 1, -1):
            live_after[pos] = {reg for reg, _ in live}
            ins = body[pos]
            if isinstance(ins, Instr):
                defs, uses = instr_unit_defs_uses(ins)
                live = (live - defs) | uses
    return blocks, live_after


def live_intervals(program: Program) -> dict[VReg, tuple[int, int]]:
    """One ``[first, last]`` position interval per register (inclusive).

    A register is in its interval from its first definition (or position 0 if it is live on
    entry, like the ABI registers) to its last use; a def that is never read still occupies
    its own position, so two dead writes never share a register at one instruction.
    """
    return _intervals(program, half_slots=False)


def allocation_spans(program: Program) -> dict[VReg, tuple[int, int]]:
    """Live intervals in half-instruction slots, for the register allocator.

    Slot ``2p`` is instruction ``p`` reading its sources, ``2p + 1`` the registers after it
    writes. A source read for the last time at ``p`` and a result defined at ``p`` do not
    overlap, so the result may take the source's register (``v_add_f32 v3, v3, v4``, or a
    load into its own address register), as LLVM allocates. MFMA results are early-clobber
    (the hardware reads A/B while writing D), and so are ``s_*_saveexec`` results (the saved
    EXEC is written before the mask operand is read), so they occupy slot ``2p`` too.
    """
    return _intervals(program, half_slots=True)


def _intervals(program: Program, half_slots: bool) -> dict[VReg, tuple[int, int]]:
    blocks, live_after = liveness(program)
    spans: dict[VReg, list[int]] = {}

    def touch(reg: VReg, slot: int) -> None:
        span = spans.setdefault(reg, [slot, slot])
        span[0] = min(span[0], slot)
        span[1] = max(span[1], slot)

    for reg in blocks[0].live_in if blocks else ():
        touch(reg, 0)
    for pos, ins in enumerate(program.body):
        read, written = (2 * pos, 2 * pos + 1) if half_slots else (pos, pos)
        for reg in live_after[pos]:
            touch(reg, written)
        if isinstance(ins, Instr):
            defs, uses = instr_defs_uses(ins)
            for reg in uses:
                touch(reg, read)
            early_clobber = ins.opcode.startswith("v_mfma") or "saveexec" in ins.opcode
            for reg in defs:
                touch(reg, written)
                if early_clobber:
                    touch(reg, read)
    return {reg: (a, b) for reg, (a, b) in spans.items()}
