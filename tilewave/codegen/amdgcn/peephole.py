"""Peephole fusion on the kernel IR (virtual registers, before allocation).

Two dependent VALU integer ops become one three-operand VOP3 op when the intermediate
register has a single definition and a single use, both in one basic block, nothing in
between rewrites the sources, and the fused operands are encodable (no literal, at most one
SGPR — checked with :func:`~tilewave.codegen.amdgcn.isa.valu_operands_ok`):

=============================================  =====================================
``v_lshlrev_b32 t, k, a`` ; ``v_add_u32 d, t, b``  ``v_lshl_add_u32 d, a, k, b``
``v_lshlrev_b32 t, k, a`` ; ``v_or_b32 d, t, b``   ``v_lshl_or_b32 d, a, k, b``
``v_add_u32 t, a, b`` ; ``v_add_u32 d, t, c``      ``v_add3_u32 d, a, b, c``
``v_or_b32 t, a, b`` ; ``v_or_b32 d, t, c``        ``v_or3_b32 d, a, b, c``
``s_lshl_b32 t, s, k`` ; ``v_add_u32 d, t, b``     ``v_lshl_add_u32 d, s, k, b`` (and ``or``)
=============================================  =====================================

(Add→or for disjoint bit ranges and power-of-two strength reduction happen during
instruction selection, where the value ranges are known.)

:func:`pair_zero_moves` turns ``v_mov_b32 R[2i], 0`` ; ``v_mov_b32 R[2i+1], 0`` (adjacent,
``R`` an even-aligned range, as MFMA accumulators are) into one ``v_mov_b64 R[2i:2i+1], 0``
(gfx940+; the 64-bit inline constant 0 is zero in both halves — other constants differ
between 32 and 64 bits, so only zero pairs).

:func:`drop_final_exec_restore` removes ``s_or_b64 exec, exec, saved`` (the end of a
divergent ``if``) when ``s_endpgm`` follows it directly: the wave ends whatever EXEC is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tilewave.codegen.amdgcn.isa import valu_operands_ok
from tilewave.codegen.amdgcn.kir import Imm, Instr, Label, Program, Sub, VReg, base_reg

__all__ = ["FUSIONS", "drop_final_exec_restore", "fuse", "pair_zero_moves"]

#: (first opcode, second opcode) -> fused opcode
FUSIONS: dict[tuple[str, str], str] = {
    ("v_lshlrev_b32", "v_add_u32"): "v_lshl_add_u32",
    ("v_lshlrev_b32", "v_or_b32"): "v_lshl_or_b32",
    ("v_add_u32", "v_add_u32"): "v_add3_u32",
    ("v_or_b32", "v_or_b32"): "v_or3_b32",
    # a uniform shift read once, by a VALU add/or: shifted inside the VALU op (one SALU op less)
    ("s_lshl_b32", "v_add_u32"): "v_lshl_add_u32",
    ("s_lshl_b32", "v_or_b32"): "v_lshl_or_b32",
}


def _fused_sources(first: Instr, second: Instr, tmp: VReg) -> list[object]:
    other = [op for op in second.uses if op is not tmp]
    if first.opcode == "v_lshlrev_b32":
        shift, value = first.uses
        return [value, shift, *other]
    if first.opcode == "s_lshl_b32":
        value, shift = first.uses
        return [value, shift, *other]
    return [*first.uses, *other]


def fuse(program: Program) -> Program:
    """Return ``program`` with the fusions of :data:`FUSIONS` applied where legal."""
    body = list(program.body)
    defs: Counter[VReg] = Counter()
    uses: Counter[VReg] = Counter()
    for ins in body:
        if isinstance(ins, Instr):
            for op in ins.defs:
                if (reg := base_reg(op)) is not None:
                    defs[reg] += 1
            for op in ins.uses:
                if (reg := base_reg(op)) is not None:
                    uses[reg] += 1
    removed: set[int] = set()
    for i, first in enumerate(body):
        if not isinstance(first, Instr) or len(first.defs) != 1:
            continue
        tmp = first.defs[0]
        if not isinstance(tmp, VReg) or defs[tmp] != 1 or uses[tmp] != 1:
            continue
        sources = {base_reg(op) for op in first.uses} - {None}
        for j in range(i + 1, len(body)):
            second = body[j]
            if isinstance(second, Label) or (isinstance(second, Instr) and second.is_branch):
                break
            if any(op is tmp for op in second.uses):
                fused = FUSIONS.get((first.opcode, second.opcode))
                if fused is None or len(second.uses) != 2 or second.uses[0] is second.uses[1]:
                    break
                srcs = _fused_sources(first, second, tmp)
                if valu_operands_ok(fused, srcs):
                    body[j] = Instr(
                        fused, list(second.defs), srcs, second.mods, comment=second.comment
                    )
                    removed.add(i)
                break
            if any(base_reg(op) in sources for op in second.defs):
                break
    return replace(program, body=[ins for k, ins in enumerate(body) if k not in removed])


def _zero_move_into(ins: object) -> Sub | None:
    """The one-register slice ``ins`` sets to the constant 0, if it is such a move."""
    if not (isinstance(ins, Instr) and ins.opcode == "v_mov_b32" and len(ins.defs) == 1):
        return None
    dst, src = ins.defs[0], ins.uses[0]
    if isinstance(dst, Sub) and dst.width == 1 and isinstance(src, Imm) and src.bits == 0:
        return dst
    return None


def pair_zero_moves(program: Program) -> Program:
    """Return ``program`` with adjacent zero moves into an aligned pair as one ``v_mov_b64``."""
    body: list[Instr | Label] = []
    for ins in program.body:
        this = _zero_move_into(ins)
        prev = _zero_move_into(body[-1]) if body else None
        if (
            this is not None
            and prev is not None
            and prev.reg is this.reg
            and prev.index % 2 == 0
            and this.index == prev.index + 1
            and this.reg.align % 2 == 0
        ):
            body[-1] = Instr("v_mov_b64", [Sub(this.reg, prev.index, 2)], [Imm.of_int(0)],
                             comment=ins.comment)
            continue
        body.append(ins)
    return replace(program, body=body)


def drop_final_exec_restore(program: Program) -> Program:
    """``program`` without EXEC restores that only ``s_endpgm`` follows."""
    body = list(program.body)
    keep = []
    for i, ins in enumerate(body):
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (isinstance(ins, Instr) and ins.opcode == "s_or_b64"
                and [str(d) for d in ins.defs] == ["exec"]
                and isinstance(nxt, Instr) and nxt.opcode == "s_endpgm"):
            continue
        keep.append(ins)
    return replace(program, body=keep)
