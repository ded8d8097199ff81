"""What AMDGCN instruction selection makes of the kernel's values and buffers.

:mod:`tilewave.codegen.amdgcn.isel` produces them; its op selection
(:mod:`tilewave.codegen.amdgcn.isel_ops`) and global-memory addressing
(:mod:`tilewave.codegen.amdgcn.global_memory`) read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewave.codegen.amdgcn.kir import Instr, Operand, VReg, reg_class

__all__ = ["ELEM_BYTES", "SelectedBuffer", "Value"]

#: bytes per element of the TIR dtypes the backend selects
ELEM_BYTES = {"float32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "uint16": 2,
              "int8": 1, "uint8": 1, "float64": 8}


@dataclass(frozen=True)
class Value:
    """A selected expression: where it lives and its TIR dtype."""

    op: Operand
    dtype: str

    @property
    def uniform(self) -> bool:
        """Same in every lane: an immediate or an SGPR."""
        return reg_class(self.op) != "v"


@dataclass
class SelectedBuffer:
    """Where one buffer of the kernel lives after selection, by scope: a global buffer's
    descriptor or base address, a shared buffer's LDS offset, a local buffer's registers."""

    scope: str
    dtype: str
    shape: tuple[int | object, ...]  # global buffers may have symbolic dimensions
    srd: VReg | None = None  # global, MUBUF-addressed (see global_memory.py)
    base: Operand | None = None  # global: the 64-bit base address (an SGPR pair)
    base_load: Instr | None = None  # global: the s_load_dwordx2 of the base
    lds_offset: int = 0  # shared
    regs: list[Operand] | None = None  # local: one register (or range element) per element

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    @property
    def numel(self) -> int:
        """The element count of a buffer with a constant shape (LDS and local buffers)."""
        n = 1
        for d in self.shape:
            assert isinstance(d, int), "symbolic shapes exist for global buffers only"
            n *= d
        return n
