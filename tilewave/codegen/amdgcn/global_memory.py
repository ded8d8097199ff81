"""Global memory through ``global_*`` instructions with an SGPR base (the ``saddr`` form).

A mixin of the selector (:class:`tilewave.codegen.amdgcn.isel._Selector`). A global buffer
argument is its 64-bit base address, loaded once from the kernarg segment into an SGPR
pair; an access is

``global_load_dword vdst, vaddr, s[base:base+1] offset:imm``  →  ``base + zext(vaddr) + imm``

with ``vaddr`` a 32-bit per-lane byte offset and ``imm`` a signed 13-bit constant
(-4096..4095). Compared with buffer resource descriptors (MUBUF) this needs no descriptor
words (two ``s_mov`` per buffer), no ``soffset`` SGPR arithmetic and no ``num_records``
computation for runtime sizes; the uniform part of an index is added into ``vaddr`` on the
VALU, where it usually fuses with the per-lane part (``v_lshl_add_u32``, ``v_add3_u32``).

Offsets:

* ``vaddr`` is zero-extended, so it must hold a non-negative number: the non-constant part
  of the index goes there when it is provably non-negative and the constant goes to
  ``imm`` (``A[bx * 64 + tx - 1]``: ``vaddr = (bx * 64 + tx) * 4``, ``offset:-4``);
  otherwise the whole index, non-negative for every valid access, goes to ``vaddr``.
* A constant beyond the 13-bit field keeps its remainder in ``imm`` and adds its 4 KiB
  window to the base: one 64-bit SALU add per (buffer, window) in the prologue, so the
  unrolled copies of a large per-thread tile share one per-lane address.

There is no bounds check, so a global access must not be executed for an index outside the
buffer. Two selector features read memory the TIR did not: a ``Select`` / ``if_then_else``
evaluates both arms, and unrolled code loads a 4-byte element with its aligned group of
four. Buffers loaded inside a ``Select`` arm, and the sources of LDS DMA (``buffer_load ...
lds`` exists only as MUBUF), keep a buffer resource descriptor and MUBUF accesses, whose
range check turns an out-of-range load into 0; group loads of other buffers need a constant
element count that is a multiple of 4 (the aligned group then lies inside the buffer).
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import ir, tirx

from tilewave.codegen.amdgcn.kir import Imm, Instr, Operand, Sub, VReg, reg_class
from tilewave.codegen.amdgcn.selected import SelectedBuffer
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import post_order_visit

__all__ = ["MAX_GLOBAL_OFFSET", "MIN_GLOBAL_OFFSET", "GlobalMemory", "base_pair",
           "buffers_needing_srd", "place_late_prologue", "scale_term", "sum_terms"]

MIN_GLOBAL_OFFSET = -4096  # FLAT/global 13-bit signed offset field (gfx9)
MAX_GLOBAL_OFFSET = 4095
WINDOW = 4096

_GLOBAL_LOAD = {1: "global_load_ubyte", 2: "global_load_ushort", 4: "global_load_dword",
                8: "global_load_dwordx2", 16: "global_load_dwordx4"}
_GLOBAL_STORE = {1: "global_store_byte", 2: "global_store_short", 4: "global_store_dword",
                 8: "global_store_dwordx2", 16: "global_store_dwordx4"}
_SIGNED = {"global_load_ubyte": "global_load_sbyte"}


def scale_term(term: object, factor: int) -> object:
    """``term * factor``, folded into ``term``'s own constant factor when it has one."""
    if factor == 1:
        return term
    if isinstance(term, tirx.IntImm):
        return tirx.IntImm(str(term.ty), term.value * factor)
    if isinstance(term, tirx.Mul) and isinstance(term.b, tirx.IntImm):
        return tirx.Mul(term.a, tirx.IntImm(str(term.b.ty), term.b.value * factor))
    if isinstance(term, tirx.Mul) and isinstance(term.a, tirx.IntImm):
        return tirx.Mul(term.b, tirx.IntImm(str(term.a.ty), term.a.value * factor))
    return tirx.Mul(term, tirx.IntImm("int32", factor))


def sum_terms(terms: list[object]) -> object | None:
    """``terms[0] + terms[1] + ...`` (None for no terms)."""
    total = None
    for term in terms:
        total = term if total is None else tirx.Add(total, term)
    return total


def _offset_key(terms: list[object], elem_bytes: int) -> object:
    """The value-table key of the byte offset of index ``sum(terms)`` for ``elem_bytes``."""
    return tvm_ffi.convert([ir.expr.StringImm("byte offset"), sum_terms(terms),
                            tirx.IntImm("int32", elem_bytes)])


def buffers_needing_srd(body: object, select_parts: Any, address_of: Any) -> set[object]:
    """Buffer variables that keep a MUBUF descriptor: those loaded inside an arm of a
    ``Select`` / ``if_then_else`` (evaluated whether or not the condition holds) and the
    global sources of ``llvm.amdgcn.global.load.lds``."""
    found: set[object] = set()

    def loads_in(expr: object) -> None:
        post_order_visit(expr, lambda n: found.add(n.source)
                         if isinstance(n, ir.expr.TensorLoad) else None)

    def visit(node: object) -> None:
        parts = select_parts(node)
        if parts is not None:
            loads_in(parts[1])
            loads_in(parts[2])
        elif (isinstance(node, ir.expr.Call)
              and callee_name(node) == "llvm.amdgcn.global.load.lds" and len(node.args) > 1):
            src = address_of(node.args[1])
            if src is not None:
                found.add(src.source)

    post_order_visit(body, visit)
    return found


class GlobalMemory:
    """Global loads and stores through ``global_*`` with an SGPR base (module docs); mixed
    into the selector, which supplies ``emit``, ``expr``, ``index_terms``, ``scaled``,
    ``non_negative``, ``to_vgpr``, ``vreg``, ``values`` and ``loops``."""

    late_prologue: list[tuple[Instr, Instr]]  # (insert after this, instruction)

    def global_op(self: Any, buf: SelectedBuffer, flat: object, data: Operand, size: int,
                  store: bool, var: object) -> None:
        """Load ``size`` bytes at element ``flat`` of ``buf`` into ``data`` (or store them)."""
        vaddr, saddr, imm = self.flat_address(buf, flat)
        mods = f"offset:{imm}" if imm else ""
        if store:
            self.emit(_GLOBAL_STORE[size], [], [vaddr, data, saddr], mods, comment=var.name)
            return
        opcode = _GLOBAL_LOAD[size]
        if buf.dtype == "int8":
            opcode = _SIGNED[opcode]
        self.emit(opcode, [data], [vaddr, saddr], mods, comment=var.name)

    def flat_address(self: Any, buf: SelectedBuffer, flat: object) -> tuple[Operand, Operand, int]:
        """(vaddr, saddr, signed immediate offset) of element ``flat`` of ``buf``."""
        terms, const = self.index_terms(flat)
        imm = const * buf.elem_bytes
        if terms and const and not self.non_negative(terms):
            terms, imm = [*terms, tirx.IntImm("int32", const)], 0  # one index, whole
        saddr: Operand = buf.base
        if not MIN_GLOBAL_OFFSET <= imm <= MAX_GLOBAL_OFFSET:
            window = imm - imm % WINDOW
            saddr = self.window_base(buf, window)
            imm -= window
        if not terms:
            return self.zero_vgpr(), saddr, imm
        shifted = self.rescaled_offset(terms, buf.elem_bytes)
        if shifted is not None:
            return shifted, saddr, imm
        # per-lane terms first, uniform ones added last: the per-lane sum is then one value,
        # reused by the accesses that share it and hoisted out of loops it is invariant in
        lane = [t for t in terms if not self.expr_is_uniform(t)]
        uniform = [t for t in terms if self.expr_is_uniform(t)]
        parts = [sum_terms([scale_term(t, buf.elem_bytes) for t in group])
                 for group in (lane, uniform) if group]
        vaddr = self.to_vgpr(self.expr(parts[0] if len(parts) == 1 else parts[0] + parts[1]).op)
        if self.non_negative(terms):
            self.values.record(_offset_key(terms, buf.elem_bytes), vaddr)
        return vaddr, saddr, imm

    def rescaled_offset(self: Any, terms: list[object], elem_bytes: int) -> Operand | None:
        """The byte offset ``sum(terms) * elem_bytes`` as one shift of a register that
        already holds the index (a guard computed it: ``if i < n: B[i] = ...``) or its byte
        offset for another element size (``Q[i] = int8(A[i])``), else None. Only for a
        non-negative index: a byte offset below 2^32 then shifts back exactly."""
        if not self.non_negative(terms):
            return None
        index = sum_terms(terms)
        candidates = [(self.values.lookup(_offset_key(terms, elem_bytes)), elem_bytes),
                      (self.values.lookup(index), 1)]
        candidates += [(self.values.lookup(_offset_key(terms, size)), size)
                       for size in (1, 2, 4, 8, 16) if size != elem_bytes]
        for entry, size in candidates:
            known = getattr(entry, "op", entry)  # pure expressions are recorded as Values
            if known is None or reg_class(known) != "v":
                continue
            if size == elem_bytes:
                return known
            up = size < elem_bytes
            ratio = (elem_bytes // size) if up else (size // elem_bytes)
            opcode = "v_lshlrev_b32" if up else "v_lshrrev_b32"
            out = self.vreg("v")
            self.emit(opcode, [out], [Imm.of_int(ratio.bit_length() - 1), known])
            self.values.record(_offset_key(terms, elem_bytes), out)
            return out
        return None

    def window_base(self: Any, buf: SelectedBuffer, window: int) -> Operand:
        """``buf``'s base plus ``window`` bytes: an SGPR pair computed once, in the prologue."""
        key = (id(buf), window)
        known = self.windows.get(key)
        if known is not None:
            return known
        # named like the base: later passes tell buffers apart by the base register's name
        pair = VReg("s", 2, 2, name=buf.base.name if isinstance(buf.base, VReg) else "")
        lo, hi = (Sub(buf.base, 0), Sub(buf.base, 1)) if isinstance(buf.base, VReg) else (
            Sub(buf.base.reg, buf.base.index), Sub(buf.base.reg, buf.base.index + 1))
        add = Instr("s_add_u32", [Sub(pair, 0)], [lo, Imm.of_int(window)])
        carry = Instr("s_addc_u32", [Sub(pair, 1)], [hi, Imm.of_int(-1 if window < 0 else 0)],
                      comment=f"base + {window}")
        # right after the base address load (the buffer is declared there): dominates every
        # access, and a loop around the accesses does not repeat it
        self.late_prologue += [(buf.base_load, carry), (buf.base_load, add)]
        self.windows[key] = pair
        return pair

    def zero_vgpr(self: Any) -> Operand:
        """A VGPR holding 0 (the per-lane offset of an access with a constant index)."""
        return self.constant(0, "v", register=True)


def place_late_prologue(body: list[Any], late: list[tuple[Instr, Instr]]) -> None:
    """Insert each instruction of ``late`` right after its anchor (found by identity);
    later entries of one anchor go first."""
    for anchor, ins in late:
        body.insert(next(i for i, x in enumerate(body) if x is anchor) + 1, ins)


def base_pair(name: str) -> VReg:
    """The SGPR pair a global buffer's base address is loaded into."""
    return VReg("s", 2, 2, name=f"base_{name}")
