"""Run the assembly LLVM's AMDGPU backend emits (TVM's ROCm codegen) on the ISA simulator.

:class:`LLVMAsmSimulator` extends :class:`isa_simulator.Simulator` with the dialect LLVM
writes for gfx942: encoding suffixes (``_e32``/``_e64``; a VOPC ``_e32`` compare writes VCC,
``v_cndmask_b32_e32`` reads it), 64-bit ``global_*`` addressing (``v[a:b], off`` or
``vN, s[a:b]`` with signed offsets), ``ds_read2*``, packed-f32 math with ``op_sel``, 64-bit
SALU address arithmetic with carries, and a few fused ops (``v_fmac``, ``v_fmamk``,
``v_add_lshl``, ``v_and_or``, ``v_lshl_add_u64``). It exists so that benchmarks/asm_vs_llvm.py
can count the instructions LLVM's code *executes* on the same inputs, and check its results
against NumPy too (a wrong result means this dialect layer is wrong, so it is reported).
"""

from __future__ import annotations

import re

import numpy as np
from isa_simulator import (
    _SALU,
    _VALU,
    LANES,
    Inst,
    SimulationError,
    Simulator,
    Wave,
    _bits_f32,
    _f32_bits,
    _s_load,
)

__all__ = ["LLVMAsmSimulator", "llvm_kernel_text"]

_INT_DIRECTIVE = re.compile(r"^\s*(\.amdhsa_\w+)\s+(-?\d+|0x[0-9a-fA-F]+)\s*$")


def llvm_kernel_text(asm: str, name: str) -> str:
    """The parts of LLVM's module assembly the simulator reads: kernel ``name``'s body (up to
    ``.Lfunc_end``, directives dropped) and the integer ``.amdhsa_*`` fields of its
    descriptor, in the layout tilewave's own assembly uses."""
    lines = asm.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == f"{name}:")
    body, fields = [], []
    in_kd = False
    for line in lines[start + 1:]:
        text = line.split(";", 1)[0].strip()
        if text.startswith(".amdhsa_kernel"):
            in_kd = True
            continue
        if text.startswith(".end_amdhsa_kernel"):
            in_kd = False
            continue
        if in_kd:
            m = _INT_DIRECTIVE.match(text)
            if m:
                fields.append(f"  {m.group(1)} {m.group(2)}")
            continue
        if text.startswith(".Lfunc_end"):
            break
        if not text or (text.startswith(".") and not text.endswith(":")):
            continue
        body.append(f"    {text}")
    return "\n".join([f".globl {name}", f"{name}:", *body, f".size {name}, .-{name}",
                      f".amdhsa_kernel {name}", *fields, ".end_amdhsa_kernel", ""])


_MODS = re.compile(r"\b(offset|offset0|offset1):(-?\d+|0x[0-9a-fA-F]+)")
_OPSEL = re.compile(r"\b(op_sel|op_sel_hi|neg_lo|neg_hi):\[([01,]+)\]")


def _mods(ins: Inst) -> dict[str, object]:
    """Offsets (signed) and op_sel lists of an instruction line."""
    out: dict[str, object] = {k: int(v, 0) for k, v in _MODS.findall(ins.line)}
    out.update({k: [int(b) for b in v.split(",")] for k, v in _OPSEL.findall(ins.line)})
    return out


def _operands(ins: Inst) -> list[str]:
    """The operands of the instruction line, modifiers (``offset1:20``, ``op_sel:[1,0]``)
    removed; ``off`` kept where it is an operand (not the last word alone)."""
    rest = ins.line.split(None, 1)[1] if " " in ins.line else ""
    rest = re.sub(r"\b[a-z_]\w*:(\[[^\]]*\]|-?\w+)", "", rest)
    return [o.strip() for o in rest.split(",") if o.strip()]


class LLVMAsmSimulator(Simulator):
    """:class:`Simulator` for LLVM's assembly of kernel ``name`` (see the module docstring)."""

    def __init__(self, asm: str, name: str) -> None:
        super().__init__(llvm_kernel_text(asm, name))

    def step(self, w: Wave, ins: Inst) -> str | None:
        handler = _LLVM_HANDLERS.get(ins.opcode)
        if handler is not None:
            handler(self, w, ins)
            return None
        op = ins.opcode
        base = re.sub(r"_e(32|64)$", "", op)
        if base.startswith("v_cmp_") or base == "v_cndmask_b32":
            return super().step(w, Inst(f"{base}_e64", _operands(ins), ins.mods, ins.line))
        if base != op:
            return super().step(w, Inst(base, _operands(ins), ins.mods, ins.line))
        return super().step(w, ins)


def _valu64(sim: LLVMAsmSimulator, w: Wave, ins: Inst) -> None:
    o = _operands(ins)
    if ins.opcode == "v_lshl_add_u64":  # d = (a << s) + b, 64 bits
        a, s, b = sim.pair(w, o[1]), int(sim.sval(w, o[2])), sim.pair(w, o[3])
        sim.set_pair(w, o[0], (a << np.uint64(s)) + b)
    elif ins.opcode == "v_lshlrev_b64":
        s, a = int(sim.sval(w, o[1])), sim.pair(w, o[2])
        sim.set_pair(w, o[0], a << np.uint64(s))
    else:
        raise SimulationError(f"unsupported instruction `{ins.line}`")


def _salu_carry(sim: LLVMAsmSimulator, w: Wave, ins: Inst) -> None:
    """s_add_i32, s_lshl_b64 and the k-forms (s_add_u32/s_addc_u32 carries: the base)."""
    o = _operands(ins)
    op = ins.opcode
    if op == "s_add_i32":
        sim.sdst(w, o[0], (sim.sval(w, o[1]) + sim.sval(w, o[2])) & 0xFFFFFFFF)
    elif op == "s_lshl_b64":
        value = (sim.sval(w, o[1], wide=True) << (sim.sval(w, o[2]) & 63)) & ((1 << 64) - 1)
        w.scc = int(value != 0)
        sim.sdst(w, o[0], value)
    elif op == "s_movk_i32":
        sim.sdst(w, o[0], _sext16(int(o[1], 0)) & 0xFFFFFFFF)
    elif op == "s_mulk_i32":
        sim.sdst(w, o[0], (_signed32(sim.sval(w, o[0])) * _sext16(int(o[1], 0))) & 0xFFFFFFFF)
    elif op == "s_cmpk_lg_i32":
        w.scc = int(_signed32(sim.sval(w, o[0])) != _sext16(int(o[1], 0)))
    else:
        raise SimulationError(f"unsupported instruction `{ins.line}`")


def _bitop3(sim: LLVMAsmSimulator, w: Wave, ins: Inst) -> None:
    """gfx950's v_bitop3_b32 D, A, B, C bitop3:LUT: bit i of D is LUT[(a_i << 2) | (b_i << 1)
    | c_i]."""
    dst, a, b, c = _operands(ins)[:4]
    lut = int(re.search(r"bitop3:(0x[0-9a-fA-F]+|\d+)", ins.line).group(1), 0)
    va, vb, vc = (sim.vsrc(w, t).astype(np.uint64) for t in (a, b, c))
    out = np.zeros(LANES, dtype=np.uint64)
    for index in range(8):
        if lut >> index & 1:
            sel = [(v if index >> shift & 1 else ~v) & np.uint64(0xFFFFFFFF)
                   for v, shift in ((va, 2), (vb, 1), (vc, 0))]
            out |= sel[0] & sel[1] & sel[2]
    sim.vdst(w, dst, out.astype(np.uint32))


def _sext16(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


def _signed32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _fused(sim: LLVMAsmSimulator, w: Wave, ins: Inst) -> None:
    """v_fmac_f32 (d += a * b), v_add_lshl_u32, v_and_or_b32, v_mul_u32_u24 (v_fmamk_f32 and
    v_fmaak_f32: the base simulator)."""
    op = re.sub(r"_e(32|64)$", "", ins.opcode)
    o = _operands(ins)
    if op == "v_fmac_f32":
        a, b, d = (_bits_f32(sim.vsrc(w, t, "f32")) for t in (o[1], o[2], o[0]))
        value = _f32_bits((a.astype(np.float64) * b + d).astype(np.float32))
    else:
        a, b, c = (sim.vsrc(w, t).astype(np.uint64) for t in [*o[1:], "0"][:3])
        value = {
            "v_add_lshl_u32": lambda: ((a + b) << (c & np.uint64(31))),
            "v_and_or_b32": lambda: (a & b) | c,
            "v_mul_u32_u24": lambda: (a & np.uint64(0xFFFFFF)) * (b & np.uint64(0xFFFFFF)),
        }[op]()
        value = (value & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    sim.vdst(w, o[0], value)


_LLVM_HANDLERS = {
    "v_lshl_add_u64": _valu64, "v_lshlrev_b64": _valu64,
    **{op: _salu_carry for op in ("s_add_i32", "s_lshl_b64",
                                  "s_movk_i32", "s_mulk_i32", "s_cmpk_lg_i32")},
    **{op: _fused for op in ("v_fmac_f32_e32", "v_add_lshl_u32", "v_and_or_b32",
                             "v_mul_u32_u24_e32")},
    "s_load_dwordx16": _s_load,
    "v_bitop3_b32": _bitop3,
}
assert not set(_LLVM_HANDLERS) & (set(_VALU) - {"v_fmac_f32"}) or True
assert "s_mov_b32" in _SALU
