"""Physical-register substitution and assembly text for instructions.

:func:`assign` rewrites a program's virtual operands to the physical ranges the allocator
chose; :func:`format_instr` prints one instruction (``opcode defs, uses mods``), the single
place that knows the assembler's operand syntax.
"""

from __future__ import annotations

from dataclasses import replace

from tilewave.codegen.amdgcn.kir import Instr, Label, Operand, PReg, Program, Sub, VReg
from tilewave.codegen.amdgcn.regalloc import Allocation

__all__ = ["assign", "format_body", "format_instr"]

# kernel-IR pseudo names whose assembly spelling differs (the modifier carries the meaning)
_SPELLING = {
    "buffer_load_dword_lds": ("buffer_load_dword", "lds"),
    "buffer_load_dwordx4_lds": ("buffer_load_dwordx4", "lds"),
}


def _phys(op: Operand, alloc: Allocation) -> Operand:
    if isinstance(op, VReg):
        return alloc.phys(op)
    if isinstance(op, Sub):
        base = alloc.phys(op.reg)
        return PReg(base.cls, base.index + op.index, op.width)
    return op


def assign(program: Program, alloc: Allocation) -> Program:
    """``program`` with every virtual register replaced by its physical range."""
    body: list[Instr | Label] = []
    for ins in program.body:
        if isinstance(ins, Instr):
            ins = replace(
                ins,
                defs=[_phys(o, alloc) for o in ins.defs],
                uses=[_phys(o, alloc) for o in ins.uses],
            )
        body.append(ins)
    return replace(program, body=body)


# kernel-IR names of VOP3 instructions with one negated source: (opcode, source index)
_NEGATED_SOURCE = {"v_fma_f32_nega": ("v_fma_f32", 0), "v_fma_f32_negc": ("v_fma_f32", 2)}


def format_instr(ins: Instr) -> str:
    """One instruction as assembly text (without indentation)."""
    opcode, extra = _SPELLING.get(ins.opcode, (ins.opcode, ""))
    uses = [str(o) for o in ins.uses]
    if ins.opcode in _NEGATED_SOURCE:
        opcode, negated = _NEGATED_SOURCE[ins.opcode]
        uses[negated] = f"-{uses[negated]}"
    operands = ", ".join([*(str(o) for o in ins.defs), *uses])
    parts = [opcode]
    if ins.target is not None:
        parts.append(ins.target)
    if operands:
        parts.append(operands)
    mods = " ".join(m for m in (ins.mods, extra) if m)
    if mods:
        parts.append(mods)
    text = " ".join(parts)
    if ins.comment:
        text = f"{text:<48} ; {ins.comment}"
    return text


def format_body(program: Program) -> str:
    """The program's instructions and labels, one per line."""
    lines = []
    for ins in program.body:
        if isinstance(ins, Label):
            lines.append(f"{ins.name}:")
        else:
            lines.append(f"    {format_instr(ins)}")
    return "\n".join(lines)
