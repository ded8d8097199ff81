"""Assembling and linking with LLVM's real tools.

Two toolchains are tried, in order, for each target:

* Debian's LLVM 19 (``llvm-mc-19`` and ``ld.lld-19``, or unsuffixed ``llvm-mc``/``ld.lld``
  of version 19+): knows gfx942 but **not** gfx950 (it warns and assembles for a generic
  processor, which would prove nothing), so it is used only for targets it knows;
* triton 3.6's bundled LLVM (``triton._C.libtriton.amd.assemble_amdgcn`` /
  ``link_hsaco``): knows gfx942 and gfx950. It reports assembly errors on stderr and
  returns an empty object instead of raising, so the output is checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tilewave.errors import AssemblerError

__all__ = ["Toolchain", "assemble", "find_toolchain", "link"]

_LLVM19_CPUS = frozenset({"gfx942", "gfx1200", "gfx1201"})


@dataclass(frozen=True)
class Toolchain:
    """Which assembler/linker serves a target: ``"llvm19"`` (paths set) or ``"triton"``."""

    kind: str
    llvm_mc: str | None = None
    ld_lld: str | None = None

    def describe(self) -> str:
        """A short human-readable name."""
        return f"{self.llvm_mc} + {self.ld_lld}" if self.kind == "llvm19" else "triton 3.6 LLVM"


def _triton_available() -> bool:
    try:
        from triton._C.libtriton import amd, llvm  # noqa: F401
    except Exception:
        return False
    return True


def find_toolchain(mcpu: str) -> Toolchain | None:
    """The toolchain that can assemble for ``mcpu``, or None when none is installed."""
    if mcpu in _LLVM19_CPUS:
        mc = shutil.which("llvm-mc-19")
        ld = shutil.which("ld.lld-19")
        if mc and ld:
            return Toolchain("llvm19", mc, ld)
    if _triton_available():
        return Toolchain("triton")
    return None


def _require(mcpu: str) -> Toolchain:
    chain = find_toolchain(mcpu)
    if chain is None:
        raise AssemblerError(
            f"no assembler for {mcpu}: install Debian's LLVM 19 (`apt-get install -y llvm-19 "
            "lld-19`, gfx942 only) or triton 3.6 (`pip install triton==3.6.0`, gfx942 and "
            "gfx950)."
        )
    return chain


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssemblerError(f"{what} failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")


def assemble(asm: str, mcpu: str) -> bytes:
    """Assemble AMDGCN ``asm`` for ``mcpu`` into an ELF relocatable object.

    Raises:
        AssemblerError: no toolchain for ``mcpu``, or the assembler rejected the text (the
            message carries its diagnostics).
    """
    chain = _require(mcpu)
    with tempfile.TemporaryDirectory(prefix="tilewave-asm-") as tmp:
        src, obj = Path(tmp, "kernel.s"), Path(tmp, "kernel.o")
        src.write_text(asm)
        if chain.kind == "llvm19":
            assert chain.llvm_mc is not None
            _run([chain.llvm_mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-filetype=obj",
                  str(src), "-o", str(obj)], "llvm-mc")
            return obj.read_bytes()
        return _triton_assemble(asm, mcpu, Path(tmp))


def _triton_assemble(asm: str, mcpu: str, tmp: Path) -> bytes:
    from triton._C.libtriton import amd, llvm

    llvm.init_targets()
    err_path = tmp / "stderr.txt"
    saved = os.dup(2)
    with open(err_path, "w") as err:
        os.dup2(err.fileno(), 2)
        try:
            obj = amd.assemble_amdgcn(asm, mcpu, "")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    if not obj:
        raise AssemblerError(
            f"triton's LLVM assembler rejected the kernel for {mcpu}:\n"
            f"{err_path.read_text().strip()}"
        )
    return bytes(obj)


def link(obj: bytes, mcpu: str) -> bytes:
    """Link one relocatable object into a code object (``.hsaco``).

    Raises:
        AssemblerError: no linker, or the link failed.
    """
    chain = _require(mcpu)
    with tempfile.TemporaryDirectory(prefix="tilewave-link-") as tmp:
        obj_path, out = Path(tmp, "kernel.o"), Path(tmp, "kernel.hsaco")
        obj_path.write_bytes(obj)
        if chain.kind == "llvm19":
            assert chain.ld_lld is not None
            _run([chain.ld_lld, "-shared", str(obj_path), "-o", str(out)], "ld.lld")
        else:
            from triton._C.libtriton import amd

            amd.link_hsaco(str(obj_path), str(out))
            if not out.exists() or out.stat().st_size == 0:
                raise AssemblerError(f"triton's in-process lld produced no code object for {mcpu}")
        return out.read_bytes()
