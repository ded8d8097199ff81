"""Kernel IR: AMDGCN instructions over virtual (then physical) registers.

A :class:`Program` is a flat list of :class:`Instr` with :class:`Label` markers; control
flow is explicit (``s_branch``/``s_cbranch_*`` naming a label). Operands are

* :class:`VReg` — a virtual register or a register *range* (``width`` consecutive
  registers, first index a multiple of ``align``) of class ``"v"`` (VGPR) or ``"s"`` (SGPR);
  ``fixed`` pins it to a physical index (the ABI registers: kernarg pointer, ids);
* :class:`Sub` — ``width`` registers of a range starting at element ``index``;
* :class:`PReg` — a physical register (range), after allocation;
* :class:`Imm` — an immediate, rendered as an inline constant or a literal;
* :class:`Sym` — a name the assembler knows (``exec``, ``vcc``, ``off``, a label).

Instructions list their written operands (``defs``) before the read ones (``uses``);
the assembly text is ``opcode defs, uses modifiers`` for every opcode tilewave emits.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = [
    "Imm",
    "Instr",
    "KernelArg",
    "Label",
    "Operand",
    "PReg",
    "Program",
    "RegClass",
    "Sub",
    "Sym",
    "VReg",
    "base_reg",
    "reg_class",
    "reg_units",
    "renamed",
]

RegClass = Literal["v", "s"]
_ids = itertools.count()


@dataclass(eq=False)
class VReg:
    """A virtual register (``width`` 1) or register range, of class ``cls``.

    Compared by identity: two VRegs are the same register only if they are the same object.
    """

    cls: RegClass
    width: int = 1
    align: int = 1
    fixed: int | None = None
    name: str = ""
    id: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        size = f"x{self.width}" if self.width > 1 else ""
        pin = f"@{self.fixed}" if self.fixed is not None else ""
        return f"%{self.cls}{self.id}{size}{pin}"


@dataclass(frozen=True)
class Sub:
    """``width`` registers of range ``reg`` starting at element ``index``."""

    reg: VReg
    index: int
    width: int = 1

    def __repr__(self) -> str:
        return f"{self.reg!r}[{self.index}:{self.index + self.width}]"


@dataclass(frozen=True)
class PReg:
    """Physical registers ``cls[index : index + width]``."""

    cls: RegClass
    index: int
    width: int = 1

    def __str__(self) -> str:
        if self.width == 1:
            return f"{self.cls}{self.index}"
        return f"{self.cls}[{self.index}:{self.index + self.width - 1}]"

    def units(self) -> tuple[tuple[str, int], ...]:
        """The single registers this range covers, as ``(class, index)`` pairs."""
        return tuple((self.cls, self.index + i) for i in range(self.width))


_INLINE_FLOATS = {
    0.0: "0",
    0.5: "0.5",
    1.0: "1.0",
    2.0: "2.0",
    4.0: "4.0",
    -0.5: "-0.5",
    -1.0: "-1.0",
    -2.0: "-2.0",
    -4.0: "-4.0",
}


@dataclass(frozen=True)
class Imm:
    """An immediate: ``bits`` is the 32-bit pattern; ``kind`` says how it was written.

    ``kind`` ``"int"`` values in [-16, 64] and ``"f32"``/``"f16"`` values in
    {0, ±0.5, ±1, ±2, ±4} are inline constants (free in any encoding); anything else is a
    literal (VOP2/VOP1/SALU only on gfx9, and it uses the constant bus).
    """

    bits: int
    kind: Literal["int", "f32", "f16"] = "int"

    @staticmethod
    def of_int(value: int) -> Imm:
        """The integer ``value`` (wrapped to 32 bits)."""
        return Imm(value & 0xFFFFFFFF, "int")

    @staticmethod
    def of_float(value: float, dtype: str) -> Imm:
        """The float ``value`` encoded as ``dtype`` (``float32`` or ``float16``)."""
        if dtype == "float16":
            return Imm(struct.unpack("<H", struct.pack("<e", value))[0], "f16")
        return Imm(struct.unpack("<I", struct.pack("<f", value))[0], "f32")

    @property
    def signed(self) -> int:
        """The bits read as a signed 32-bit integer."""
        return self.bits - (1 << 32) if self.bits & 0x80000000 else self.bits

    def float_value(self) -> float:
        """The value as a float (for ``f32``/``f16`` kinds)."""
        if self.kind == "f16":
            return struct.unpack("<e", struct.pack("<H", self.bits))[0]
        return struct.unpack("<f", struct.pack("<I", self.bits))[0]

    @property
    def is_inline(self) -> bool:
        """Whether the hardware encodes it without a literal dword."""
        if self.kind == "int":
            return -16 <= self.signed <= 64
        return self.float_value() in _INLINE_FLOATS

    def __str__(self) -> str:
        if self.kind == "int":
            return str(self.signed) if self.is_inline else hex(self.bits)
        if self.is_inline:
            return _INLINE_FLOATS[self.float_value()]
        return hex(self.bits)


@dataclass(frozen=True)
class Sym:
    """A name the assembler resolves: ``exec``, ``vcc``, ``scc``, ``off``, a label."""

    name: str

    def __str__(self) -> str:
        return self.name


Operand = VReg | Sub | PReg | Imm | Sym


def base_reg(op: object) -> VReg | None:
    """The virtual register an operand refers to (itself or the range of a Sub)."""
    if isinstance(op, VReg):
        return op
    if isinstance(op, Sub):
        return op.reg
    return None


def reg_class(op: object) -> RegClass | None:
    """``"v"``/``"s"`` for register operands, None for immediates and symbols."""
    if isinstance(op, VReg | PReg):
        return op.cls
    if isinstance(op, Sub):
        return op.reg.cls
    return None


def reg_units(op: object) -> set[tuple[int, int]]:
    """The single virtual registers ``op`` covers, as ``(range id, element)`` pairs."""
    if isinstance(op, VReg):
        return {(op.id, i) for i in range(op.width)}
    if isinstance(op, Sub):
        return {(op.reg.id, op.index + i) for i in range(op.width)}
    return set()


@dataclass
class Instr:
    """One instruction: ``opcode defs..., uses... mods``.

    ``mods`` holds the trailing modifier text (``offen offset:16``, ``vmcnt(0)``);
    ``target`` the label a branch jumps to; ``comment`` is copied into the assembly.
    """

    opcode: str
    defs: list[Operand] = field(default_factory=list)
    uses: list[Operand] = field(default_factory=list)
    mods: str = ""
    target: str | None = None
    comment: str = ""

    @property
    def is_branch(self) -> bool:
        """A branch (conditional or not) to ``target``."""
        return self.target is not None

    @property
    def is_unconditional(self) -> bool:
        """Control never falls through to the next instruction."""
        return self.opcode in ("s_branch", "s_endpgm")


def renamed(ins: Instr | Label, mapping: dict[VReg, Sub]) -> Instr | Label:
    """``ins`` with each register of ``mapping`` replaced by its slice of a range (a label
    as it is)."""
    if isinstance(ins, Label):
        return ins

    def swap(op: Operand) -> Operand:
        if isinstance(op, VReg):
            return mapping.get(op, op)
        if isinstance(op, Sub) and op.reg in mapping:  # a slice of a register now in a range
            where = mapping[op.reg]
            return Sub(where.reg, where.index + op.index, op.width)
        return op

    return replace(ins, defs=[swap(o) for o in ins.defs], uses=[swap(o) for o in ins.uses])


@dataclass
class Label:
    """A branch target: ``name:`` in the assembly."""

    name: str


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument: its name, kernarg-segment offset/size and HSA value kind."""

    name: str
    offset: int
    size: int
    value_kind: Literal["global_buffer", "by_value"]


@dataclass
class Program:
    """A kernel's instructions plus the launch facts metadata needs.

    Attributes:
        name: the kernel symbol.
        body: instructions and labels in layout order.
        args: the kernarg layout.
        lds_bytes: static LDS (group segment) size.
        workgroup_size: threads per workgroup along x, y, z.
        workgroup_ids: which of x, y, z workgroup ids the kernel reads (system SGPRs).
        workitem_dims: 0, 1 or 2: highest workitem-id dimension read (``v0`` packing).
    """

    name: str
    body: list[Instr | Label] = field(default_factory=list)
    args: list[KernelArg] = field(default_factory=list)
    lds_bytes: int = 0
    workgroup_size: tuple[int, int, int] = (1, 1, 1)
    workgroup_ids: tuple[bool, bool, bool] = (False, False, False)
    workitem_dims: int = 0

    @property
    def kernarg_bytes(self) -> int:
        """Size of the kernarg segment (8-byte aligned)."""
        end = max((a.offset + a.size for a in self.args), default=0)
        return (end + 7) // 8 * 8

    def instructions(self) -> list[Instr]:
        """The instructions, labels left out."""
        return [i for i in self.body if isinstance(i, Instr)]
