"""Direct AMDGCN assembly backend for CDNA3 (gfx942, gfx950).

Stages, one module each: :mod:`.isel` (TIR → kernel IR, :mod:`.kir`), :mod:`.peephole`,
:mod:`.liveness`, :mod:`.regalloc`, :mod:`.waitcnt`, :mod:`.hazards`, :mod:`.render`,
:mod:`.metadata`, :mod:`.toolchain`; :mod:`.driver` strings them together.

Example::

    from tilewave.codegen import amdgcn
    text = amdgcn.emit(my_kernel, target="gfx942")
    hsaco = amdgcn.link(amdgcn.assemble(text, "gfx942"), "gfx942")
"""

from tilewave.codegen.amdgcn.driver import (
    CompiledKernel,
    assemble,
    build_asm,
    compile_device_func,
    device_function,
    emit,
    link,
)

__all__ = [
    "CompiledKernel",
    "assemble",
    "build_asm",
    "compile_device_func",
    "device_function",
    "emit",
    "link",
]
