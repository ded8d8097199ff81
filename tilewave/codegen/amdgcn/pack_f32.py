"""Packed float32 math: two independent f32 VALU ops as one ``v_pk_*_f32`` (gfx90a+).

CDNA2/CDNA3 (gfx90a, gfx942, gfx950) execute ``v_pk_fma_f32``, ``v_pk_add_f32`` and
``v_pk_mul_f32`` on 64-bit VGPR pairs: the low result from the low halves, the high result
from the high halves, where ``op_sel`` (low result) and ``op_sel_hi`` (high result) pick, per
source, which half of that source's pair is read. One packed instruction replaces two
VALU instructions (a register-tiled SGEMM's inner product: half the FMAs).

:func:`pack_f32_pairs` runs on the kernel IR before allocation. For an instruction ``a``
(``v_fma_f32``, ``v_add_f32`` or ``v_mul_f32``, no modifiers) it looks ahead in the same
basic block for an instruction ``b`` of the same opcode such that

* the two destinations can be one even-aligned pair: two single VGPRs not yet in a pair
  (they become the halves of a new pair: every occurrence of each is renamed), or the two
  halves of one aligned pair of a range;
* each source pair can be read as one aligned pair: the same register for both results
  (a broadcast, ``op_sel`` picks the half), two halves of one aligned pair (in either
  order), or two single VGPRs not yet in a pair (they become a new pair);
* ``b`` can move up to ``a``: nothing between them writes a register ``b`` reads or writes,
  or reads a register ``b`` writes; ``b`` does not read ``a``'s result; nothing between
  them is a branch, a label or an EXEC write (the packed op runs under ``a``'s EXEC).

Renaming two registers into one pair only constrains where the allocator puts them
(liveness works per register of a range, so the pair is live where either half is). Inline
constants and SGPR sources are not packed (their meaning for the high half differs between
encodings), and neither are the negated-source forms (``v_fma_f32_nega``).
"""

from __future__ import annotations

from dataclasses import replace

from tilewave.codegen.amdgcn.kir import (
    Instr,
    Label,
    Operand,
    Program,
    Sub,
    Sym,
    VReg,
    reg_units,
    renamed,
)

__all__ = ["PACKED", "pack_f32_pairs"]

#: scalar f32 opcode -> its packed form
PACKED: dict[str, str] = {
    "v_fma_f32": "v_pk_fma_f32",
    "v_add_f32": "v_pk_add_f32",
    "v_mul_f32": "v_pk_mul_f32",
}
LOOKAHEAD = 48  # instructions searched for a partner


class _Pairs:
    """Single VGPRs renamed into halves of new pairs (tentative until committed)."""

    def __init__(self) -> None:
        self.half: dict[VReg, Sub] = {}

    def resolve(self, op: Operand) -> Operand:
        return self.half.get(op, op) if isinstance(op, VReg) else op


def _free_single(op: Operand) -> bool:
    return isinstance(op, VReg) and op.cls == "v" and op.width == 1 and op.fixed is None


def _aligned_pair_of(op: Operand) -> tuple[VReg, int] | None:
    """(range, first index of the aligned pair holding ``op``) for a one-register slice."""
    if not (isinstance(op, Sub) and op.width == 1 and op.reg.cls == "v"):
        return None
    first = op.index - op.index % 2
    if op.reg.align % 2 or first + 2 > op.reg.width:
        return None
    return op.reg, first


def _source_pair(lo: Operand, hi: Operand, new: dict[VReg, Sub]
                 ) -> tuple[Operand, int, int] | None:
    """(pair operand, op_sel bit, op_sel_hi bit) reading ``lo`` for the low result and
    ``hi`` for the high one; ``new`` collects the single registers this pairs up."""
    lo, hi = new.get(lo, lo), new.get(hi, hi)  # type: ignore[call-overload]
    if lo is not hi and lo != hi and _free_single(lo) and _free_single(hi):
        pair = VReg("v", 2, 2)
        new[lo], new[hi] = Sub(pair, 0), Sub(pair, 1)  # type: ignore[index]
        return Sub(pair, 0, 2), 0, 1
    a, b = _aligned_pair_of(lo), _aligned_pair_of(hi)
    if a is None or b is None or a != b:
        return None
    reg, first = a
    assert isinstance(lo, Sub) and isinstance(hi, Sub)
    return Sub(reg, first, 2), lo.index - first, hi.index - first


def _all_units(ops: list[Operand]) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    for op in ops:
        out |= reg_units(op)
    return out


def _writes_exec(ins: Instr) -> bool:
    """EXEC named as a destination, or written implicitly (``s_and_saveexec_b64``)."""
    return "saveexec" in ins.opcode or any(isinstance(op, Sym) and op.name == "exec"
                                           for op in ins.defs)


def _can_move_up(body: list[Instr | Label], start: int, j: int) -> bool:
    """Whether ``body[j]`` may execute before ``body[start:j]``."""
    b = body[j]
    assert isinstance(b, Instr)
    reads, writes = _all_units(b.uses), _all_units(b.defs)
    for mid in body[start:j]:
        if isinstance(mid, Label) or mid.target is not None or _writes_exec(mid):
            return False
        if _all_units(mid.defs) & (reads | writes) or _all_units(mid.uses) & writes:
            return False
    return True


def _pack(a: Instr, b: Instr, pairs: _Pairs) -> Instr | None:
    """The packed instruction computing ``a`` (low half) and ``b`` (high half), or None;
    on success the new pairs it needs are recorded in ``pairs``."""
    if a.mods or b.mods or len(a.defs) != 1 or len(b.defs) != 1:
        return None
    new: dict[VReg, Sub] = {}
    da, db = pairs.resolve(a.defs[0]), pairs.resolve(b.defs[0])
    dst = _source_pair(da, db, new)
    if dst is None or dst[1:] != (0, 1):
        return None
    srcs: list[Operand] = []
    sel, sel_hi = [], []
    for x, y in zip(a.uses, b.uses, strict=True):
        got = _source_pair(pairs.resolve(x), pairs.resolve(y), new)
        if got is None:
            return None
        srcs.append(got[0])
        sel.append(got[1])
        sel_hi.append(got[2])
    pairs.half.update(new)
    mods = []
    if any(sel):
        mods.append(f"op_sel:[{','.join(map(str, sel))}]")
    if not all(sel_hi):
        mods.append(f"op_sel_hi:[{','.join(map(str, sel_hi))}]")
    return Instr(PACKED[a.opcode], [dst[0]], srcs, " ".join(mods),
                 comment=" ; ".join(c for c in (a.comment, b.comment) if c))


def pack_f32_pairs(program: Program) -> Program:
    """``program`` with independent f32 FMA/add/mul pairs as ``v_pk_*_f32`` (module docs)."""
    body = list(program.body)
    pairs = _Pairs()
    removed: set[int] = set()
    for i, a in enumerate(body):
        if i in removed or not isinstance(a, Instr) or a.opcode not in PACKED:
            continue
        for j in range(i + 1, min(len(body), i + 1 + LOOKAHEAD)):
            b = body[j]
            if isinstance(b, Label) or b.target is not None or _writes_exec(b):
                break
            if j in removed or b.opcode != a.opcode:
                continue
            if _all_units(a.defs) & _all_units([*b.uses, *b.defs]):
                continue  # b reads a's result (or writes the same register)
            if not _can_move_up(body, i + 1, j):
                continue
            packed = _pack(a, b, pairs)
            if packed is None:
                continue
            body[i] = packed
            removed.add(j)
            # later instructions name the new pairs, so the checks above compare like with like
            body[i + 1:] = [renamed(ins, pairs.half) for ins in body[i + 1:]]
            break
    out = [renamed(ins, pairs.half) for k, ins in enumerate(body) if k not in removed]
    return replace(program, body=out)
