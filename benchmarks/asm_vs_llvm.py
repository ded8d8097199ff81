"""tilewave's AMDGCN assembly next to the assembly TVM's LLVM codegen makes from the same TIR.

For each kernel the AMDGCN backend tests compile (tests/codegen/amdgcn/kernels.py: copy,
elementwise, LDS transpose, reductions, MFMA GEMMs, halo stencils, softmax/layernorm rows,
runtime-length saxpy, register-tiled SGEMM, a 4-wave LDS MFMA GEMM...), the kernel is
lowered once by ``tilewave.lower``; the same lowered device function is compiled

* by tilewave's backend (``tilewave.codegen.amdgcn``), and
* by TVM's ROCm codegen through LLVM (``tilewave.build``: LLVM's AMDGPU backend at -O3).

Two tables:

* **static**: instruction counts in each kernel body by class, and the VGPR/SGPR counts
  from each assembly's ``.amdhsa_next_free_vgpr`` / ``.amdhsa_next_free_sgpr``;
* **executed**: both assemblies run on the ISA simulator (tests/codegen/amdgcn) with the
  same inputs (the tests' NumPy cases); instructions executed per wave by class. LLVM's
  assembly runs through ``llvm_asm_simulator`` (its dialect: ``global_*``, ``_e32`` forms,
  packed f32...). Both results are checked against NumPy (``ok``), so a count comes from a
  run that computed the right answer. The target: executed VALU+SALU+VMEM+LDS and VGPRs
  <= LLVM's on every kernel (exit status 1 otherwise).

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
# measure the tilewave of this checkout (a git worktree's), not whichever one is installed
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the kernels (and their example loader) live there
sys.path.insert(0, str(REPO / "tests" / "codegen" / "amdgcn"))

import kernels  # noqa: E402
import numpy as np  # noqa: E402
import test_amdgcn_e2e  # noqa: E402
import test_amdgcn_real_kernels  # noqa: E402
import tvm  # noqa: E402
from isa_simulator import Simulator  # noqa: E402
from llvm_asm_simulator import LLVMAsmSimulator  # noqa: E402

import tilewave  # noqa: E402
from tilewave.codegen.amdgcn.driver import compile_device_func, device_function  # noqa: E402
from tilewave.errors import TilewaveError  # noqa: E402
from tilewave.pipeline import lower  # noqa: E402

CLASSES = ("VALU", "MFMA", "SALU", "SMEM", "VMEM", "LDS", "waitcnt", "nop", "other")
EXECUTED = ("VALU", "SALU", "VMEM", "LDS")  # the target's sum
KERNELS = (
    "copy_f32", "copy_vec4", "axpy_f32", "mul_add_f32", "fma_f16", "guarded_scale",
    "transpose_lds", "row_sum", "block_sum_tree", "gemm_f16", "gemm_bf16", "gemm_lds_f16",
    "stencil_1d", "laplacian_2d", "laplacian_2d_lds", "saxpy_runtime", "softmax_rows",
    "layernorm_rows", "sgemm_regtile", "gemm_lds_4wave", "sigmoid_f32", "index_div_mod",
    "quantize_int8", "scale_bf16",
)
SAXPY_N = 200  # the runtime length the executed table uses
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


@dataclass(frozen=True)
class Comparison:
    """Static and executed statistics of one kernel for both backends."""

    ours: AsmStats
    llvm: AsmStats | str  # the error's first line when TVM's LLVM codegen rejects the kernel
    ours_run: Executed
    llvm_run: Executed | None


def compare(kernel_name: str, target: str) -> Comparison:
    """Both backends' statistics for one kernel of tests/codegen/amdgcn/kernels.py."""
    func = getattr(kernels, kernel_name)
    device = device_function(func, target)
    ours = compile_device_func(device, target)
    name = str(device.attrs["global_symbol"])
    try:
        llvm = tilewave.build(func, target)
    except (tvm.error.InternalError, TilewaveError) as err:  # e.g. the bf16 MFMA
        run, _ = executed(kernel_name, ours.asm, ours.arguments, None, name, [])
        return Comparison(asm_stats(ours.asm, ours.final.name),
                          str(err).strip().splitlines()[0], run, None)
    run, llvm_run = executed(kernel_name, ours.asm, ours.arguments, llvm.source, name,
                             _tvm_argument_order(func, target))
    return Comparison(asm_stats(ours.asm, ours.final.name), asm_stats(llvm.source, name), run,
                      llvm_run)


def _run_row(name: str, who: str, run: Executed, vgprs: int, sgprs: int) -> str:
    cells = " ".join(f"{run.per_wave.get(c, 0.0):>7.1f}" for c in (*EXECUTED, "MFMA",
                                                                   "waitcnt"))
    return (f"{name:<17} {who:<8} {cells} {run.total:>7.1f} {vgprs:>5} {sgprs:>5} "
            f"{'ok' if run.correct else 'WRONG':>5}")


@dataclass(frozen=True)
class Executed:
    """Instructions one kernel run executed per wave, by class, and whether it was right."""

    per_wave: dict[str, float]
    correct: bool

    @property
    def total(self) -> float:
        """Executed VALU + SALU + VMEM + LDS per wave (the target's measure)."""
        return sum(self.per_wave.get(c, 0.0) for c in EXECUTED)


def _inputs(name: str) -> tuple[list[object], tuple, tuple, object]:
    """(arguments in PrimFunc order, grid, workgroup, check(args) -> bool) from the tests."""
    if name == "saxpy_runtime":
        rng = np.random.default_rng(0)
        x, y = (rng.standard_normal(SAXPY_N).astype(np.float32) for _ in range(2))
        ref = (np.float64(0.5) * x + y).astype(np.float32)
        return ([x, y, SAXPY_N, 0.5], ((SAXPY_N + 63) // 64, 1, 1), (64, 1, 1),
                lambda args: np.allclose(args[1], ref, rtol=1e-6, atol=1e-6))
    if name in test_amdgcn_e2e.CASES:
        args, grid, block, ref, out = test_amdgcn_e2e.CASES[name]()
        expected = ref()
        return args, grid, block, lambda a: np.allclose(a[out], expected, rtol=1e-2, atol=1e-3)
    args, grid, block, check = test_amdgcn_real_kernels.case(name)
    actual = check()[0]
    index = next(i for i, x in enumerate(args) if x is actual)

    def ok(a: list[object]) -> bool:
        _, expected, tol = check()
        return bool(np.allclose(a[index], expected, rtol=max(tol, 1e-5), atol=max(tol, 1e-5)))

    return args, grid, block, ok


def _copies(args: list[object]) -> list[object]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def executed(name: str, ours_asm: str, ours_args: list[str], llvm_asm: str | None,
             llvm_name: str, llvm_args: list[str]) -> tuple[Executed, Executed | None]:
    """Run both assemblies on the simulator with the same inputs (LLVM's arguments in its
    own order) and count executed instructions per wave."""
    args, grid, block, check = _inputs(name)

    def run(sim: Simulator, order: list[str]) -> Executed:
        by_name = dict(zip(ours_args, _copies(args), strict=True))
        ordered = [by_name[n] for n in order]
        sim.wg_size = block  # type: ignore[attr-defined]
        sim.run(ordered, grid)
        back = [by_name[n] for n in ours_args]
        counts: Counter[str] = Counter()
        for op, n in sim.executed.items():
            counts[instruction_class(op)] += n
        waves = max(sim.waves_run, 1)
        return Executed({c: n / waves for c, n in counts.items()}, bool(check(back)))

    ours = run(Simulator(ours_asm), ours_args)
    llvm = None if llvm_asm is None else run(LLVMAsmSimulator(llvm_asm, llvm_name), llvm_args)
    return ours, llvm


def _tvm_argument_order(func: object, target: str) -> list[str]:
    """The device kernel's parameter names in TVM's order (the order LLVM's code takes)."""
    lowered = lower(func, target)
    for f in lowered.functions.values():
        if f.attrs is not None and "target" in f.attrs and f.attrs["target"].kind.name == "rocm":
            return [p.name for p in f.params]
    raise ValueError("no device kernel")


def _row(name: str, who: str, stats: AsmStats) -> str:
    cells = " ".join(f"{stats.counts.get(c, 0):>7}" for c in CLASSES)
    return f"{name:<17} {who:<8} {cells} {stats.vgprs:>5} {stats.sgprs:>5}"


def main(argv: list[str] | None = None) -> int:
    """Print both tables; exit status 1 if an executed or VGPR ratio exceeds 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="gfx942", choices=("gfx942", "gfx950"))
    parser.add_argument("--kernels", nargs="*", default=list(KERNELS))
    args = parser.parse_args(argv)
    results = {name: compare(name, args.target) for name in args.kernels}

    header = " ".join(f"{c:>7}" for c in CLASSES)
    print(f"target {args.target}; static instruction counts per kernel body")
    print(f"{'kernel':<17} {'backend':<8} {header} {'VGPR':>5} {'SGPR':>5}  VALU/llvm VGPR/llvm")
    for name, res in results.items():
        ours, llvm = res.ours, res.llvm
        if isinstance(llvm, str):
            print(_row(name, "tilewave", ours))
            print(f"{'':<17} {'llvm':<8} TVM's LLVM codegen fails: {llvm[:80]}")
            continue
        valu_ratio = (ours.counts["VALU"] / llvm.counts["VALU"]) if llvm.counts["VALU"] else 0.0
        print(_row(name, "tilewave", ours) + f"  {valu_ratio:9.2f} {ours.vgprs / llvm.vgprs:9.2f}")
        print(_row("", "llvm", llvm))

    cols = " ".join(f"{c:>7}" for c in (*EXECUTED, "MFMA", "waitcnt"))
    print()
    print(f"target {args.target}; executed instructions per wave on the ISA simulator "
          "(sum = VALU+SALU+VMEM+LDS)")
    print(f"{'kernel':<17} {'backend':<8} {cols} {'sum':>7} {'VGPR':>5} {'SGPR':>5} {'check':>5}"
          "  sum/llvm VGPR/llvm")
    missed = []
    for name, res in results.items():
        print(_run_row(name, "tilewave", res.ours_run, res.ours.vgprs, res.ours.sgprs))
        if res.llvm_run is None or isinstance(res.llvm, str):
            print(f"{'':<17} {'llvm':<8} (no LLVM code object: see the static table)")
            continue
        ratio = res.ours_run.total / res.llvm_run.total
        vgpr_ratio = res.ours.vgprs / res.llvm.vgprs
        print(_run_row("", "llvm", res.llvm_run, res.llvm.vgprs, res.llvm.sgprs)
              + f"  {ratio:8.2f} {vgpr_ratio:9.2f}")
        if ratio > 1.0 or vgpr_ratio > 1.0 or not res.ours_run.correct:
            missed.append(name)
    print("target executed VALU+SALU+VMEM+LDS <= LLVM and VGPRs <= LLVM:",
          "met on every kernel" if not missed else f"missed on {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
