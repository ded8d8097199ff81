"""tilewave's AMDGCN assembly next to the assembly TVM's LLVM codegen makes from the same TIR.

For each kernel the AMDGCN backend tests compile (tests/codegen/amdgcn/kernels.py: copy,
elementwise, LDS transpose, reductions, MFMA GEMMs), the kernel is lowered once by
``tilewave.lower``; the same lowered device function is compiled

* by tilewave's backend (``tilewave.codegen.amdgcn``), and
* by TVM's ROCm codegen through LLVM (``tilewave.build``: LLVM's AMDGPU backend at -O3).

Static instruction counts in each kernel body are grouped by class, and the VGPR/SGPR
counts are read from each assembly's ``.amdhsa_next_free_vgpr`` / ``.amdhsa_next_free_sgpr``
(the same field for both, so the comparison is like for like). The ratio columns are
tilewave / LLVM for VALU instructions and VGPRs; the target is <= 1.00 on every kernel.

Run: ``python benchmarks/asm_vs_llvm.py [--target gfx942]``
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the kernels (and their example loader) live there
sys.path.insert(0, str(REPO / "tests" / "codegen" / "amdgcn"))

import kernels  # noqa: E402
import tvm  # noqa: E402

import tilewave  # noqa: E402
from tilewave.codegen.amdgcn.driver import compile_device_func, device_function  # noqa: E402

CLASSES = ("VALU", "MFMA", "SALU", "SMEM", "VMEM", "LDS", "waitcnt", "nop", "other")
KERNELS = (
    "copy_f32", "copy_vec4", "axpy_f32", "mul_add_f32", "fma_f16", "guarded_scale",
    "transpose_lds", "row_sum", "block_sum_tree", "gemm_f16", "gemm_bf16", "gemm_lds_f16",
)
_SMEM = ("s_load_", "s_buffer_load_", "s_store_", "s_dcache_")
_SOPP_OTHER = ("s_barrier", "s_cbranch", "s_branch", "s_endpgm", "s_setprio", "s_sleep",
               "s_trap", "s_sethalt", "s_setpc", "s_getpc", "s_swappc")


def instruction_class(mnemonic: str) -> str:
    """The class of one AMDGCN mnemonic (as the table's columns group them)."""
    if mnemonic.startswith("v_mfma"):
        return "MFMA"
    if mnemonic.startswith("v_"):
        return "VALU"
    if mnemonic.startswith(("buffer_", "global_", "flat_", "scratch_")):
        return "VMEM"
    if mnemonic.startswith("ds_"):
        return "LDS"
    if mnemonic == "s_waitcnt" or mnemonic.startswith("s_waitcnt_"):
        return "waitcnt"
    if mnemonic == "s_nop":
        return "nop"
    if mnemonic.startswith(_SMEM):
        return "SMEM"
    if mnemonic.startswith(_SOPP_OTHER):
        return "other"
    if mnemonic.startswith("s_"):
        return "SALU"
    return "other"


@dataclass(frozen=True)
class AsmStats:
    """Instruction counts by class and register counts of one kernel's assembly."""

    counts: Counter[str]
    vgprs: int
    sgprs: int


def _field(asm: str, name: str) -> int:
    match = re.search(rf"^\s*{re.escape(name)}\s+(\d+)", asm, re.MULTILINE)
    if match is None:
        raise ValueError(f"no {name} in the assembly")
    return int(match.group(1))


def kernel_body(asm: str, name: str) -> list[str]:
    """The instruction lines between ``name:`` and the end of that function."""
    lines = asm.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{name}:")
    body = []
    for line in lines[start + 1:]:
        text = line.split(";", 1)[0].split("//", 1)[0].strip()
        if text.startswith((".Lfunc_end", ".size")):
            break
        if not text or text.startswith(".") or text.endswith(":"):
            continue
        body.append(text)
    return body


def asm_stats(asm: str, name: str) -> AsmStats:
    """Count ``name``'s instructions by class and read its register counts."""
    counts = Counter(instruction_class(line.split()[0]) for line in kernel_body(asm, name))
    return AsmStats(counts, _field(asm, ".amdhsa_next_free_vgpr"),
                    _field(asm, ".amdhsa_next_free_sgpr"))


def compare(kernel_name: str, target: str) -> tuple[AsmStats, AsmStats | str]:
    """(tilewave, LLVM) statistics for one kernel of tests/codegen/amdgcn/kernels.py.

    The LLVM entry is the error's first line when TVM's LLVM codegen rejects the kernel.
    """
    func = getattr(kernels, kernel_name)
    device = device_function(func, target)
    ours = compile_device_func(device, target)
    try:
        llvm = tilewave.build(func, target)
    except tvm.error.InternalError as err:
        return asm_stats(ours.asm, ours.final.name), str(err).strip().splitlines()[0]
    return (asm_stats(ours.asm, ours.final.name),
            asm_stats(llvm.source, str(device.attrs["global_symbol"])))


def _row(name: str, who: str, stats: AsmStats) -> str:
    cells = " ".join(f"{stats.counts.get(c, 0):>7}" for c in CLASSES)
    return f"{name:<15} {who:<8} {cells} {stats.vgprs:>5} {stats.sgprs:>5}"


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table; exit status 1 if a VALU or VGPR ratio exceeds 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="gfx942", choices=("gfx942", "gfx950"))
    parser.add_argument("--kernels", nargs="*", default=list(KERNELS))
    args = parser.parse_args(argv)

    header = " ".join(f"{c:>7}" for c in CLASSES)
    print(f"target {args.target}; static instruction counts per kernel body")
    print(f"{'kernel':<15} {'backend':<8} {header} {'VGPR':>5} {'SGPR':>5}  VALU/llvm VGPR/llvm")
    missed = []
    for name in args.kernels:
        ours, llvm = compare(name, args.target)
        if isinstance(llvm, str):
            print(_row(name, "tilewave", ours))
            print(f"{'':<15} {'llvm':<8} TVM's LLVM codegen fails: {llvm[:80]}")
            continue
        valu_ratio = (ours.counts["VALU"] / llvm.counts["VALU"]) if llvm.counts["VALU"] else 0.0
        vgpr_ratio = ours.vgprs / llvm.vgprs
        print(_row(name, "tilewave", ours) + f"  {valu_ratio:9.2f} {vgpr_ratio:9.2f}")
        print(_row("", "llvm", llvm))
        if ours.counts["VALU"] > llvm.counts["VALU"] or ours.vgprs > llvm.vgprs:
            missed.append(name)
    print("target VALU <= LLVM and VGPRs <= LLVM:",
          "met on every kernel" if not missed else f"missed on {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
