"""Build every kernel defined in tests/, examples/ and benchmarks/ for the AMD targets,
through both backends, and run :mod:`asm_lds_checker` on the assembly.

A "kernel" is a module-level ``@T.prim_func`` (or a PrimFunc inside a module-level
IRModule) that binds ``threadIdx`` and that tilewave can build for the target; a function
that does not build for an AMD target (CUDA-only ops, a split barrier on gfx942, the
before/after expectations of CUDA passes...) is counted as skipped with the reason. Kernels
created inside test functions are not seen. Run as a script for the table::

    python tests/codegen/amd_kernel_scan.py            # LLVM path and assembly backend
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import pickle
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tvm import tirx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "tests"), str(HERE / "amdgcn")]

import asm_lds_checker  # noqa: E402
from example_loader import load_module  # noqa: E402

import tilewave  # noqa: E402
from tilewave.codegen import amdgcn  # noqa: E402

TARGETS = ("gfx942", "gfx950", "gfx1200", "gfx1201")
ROOTS = ("tests", "examples", "benchmarks")
#: files whose import runs a long computation, or that this scan itself is
_SKIP_FILES = frozenset({"amd_kernel_scan.py"})


@dataclass
class ScanResult:
    """What one scan saw: checked builds, findings, skipped builds by reason."""

    built: Counter = field(default_factory=Counter)  # (backend, target) -> kernels checked
    with_barrier: Counter = field(default_factory=Counter)
    findings: list[tuple[str, str, str, asm_lds_checker.Finding]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # (backend, reason) -> count
    kernels: list[str] = field(default_factory=list)


def _binds_threads(func: tirx.PrimFunc) -> bool:
    return "threadIdx" in func.script()


def _prim_funcs(module: object) -> Iterator[tuple[str, tirx.PrimFunc]]:
    for name, value in sorted(vars(module).items()):
        if isinstance(value, tirx.PrimFunc):
            yield name, value
        elif isinstance(value, tvm.IRModule):
            for gvar, func in value.functions.items():
                if isinstance(func, tirx.PrimFunc):
                    yield f"{name}.{gvar.name_hint}", func


def collect_kernels(roots: tuple[str, ...] = ROOTS) -> list[tuple[str, tirx.PrimFunc]]:
    """``(file:name, PrimFunc)`` for every module-level GPU kernel under ``roots``."""
    seen: dict[int, str] = {}
    kernels: list[tuple[str, tirx.PrimFunc]] = []
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            if path.name in _SKIP_FILES or "generated" in path.parts:
                continue
            text = path.read_text()
            if "prim_func" not in text and "IRModule" not in text:
                continue
            module_name = "scan_" + "_".join(path.relative_to(REPO).with_suffix("").parts)
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    module = load_module(path, module_name)
            except Exception:
                continue
            for name, func in _prim_funcs(module):
                if id(func) in seen or not _binds_threads(func):
                    continue
                label = f"{path.relative_to(REPO)}:{name}"
                seen[id(func)] = label
                kernels.append((label, func))
    return kernels


def _reason(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:90]}"


def _assemble(func: tirx.PrimFunc, backend: str, target: str) -> str:
    if backend == "llvm":
        return tilewave.build(func, target).source
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target).asm


def _check_one(func: tirx.PrimFunc, target: str) -> list[tuple[str, object]]:
    """``(backend, findings or skip reason)`` for each backend of ``target``."""
    out: list[tuple[str, object]] = []
    backends = ["llvm"] + (["asm"] if tilewave.get_target(target).asm_isa else [])
    for backend in backends:
        try:
            asm = _assemble(func, backend, target)
        except Exception as err:
            out.append((backend, _reason(err)))
            continue
        out.append((backend, ("s_barrier" in asm, asm_lds_checker.check(asm, target))))
    return out


def _in_child(func: tirx.PrimFunc, target: str) -> list[tuple[str, object]]:
    # LLVM aborts the whole process on some inputs ("Cannot select: intrinsic ...mfma..." for
    # gfx12): build in a forked child so that one kernel cannot end the scan.
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        faulthandler.disable()  # pytest's handler writes an abort's dump to its own stderr
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # LLVM's abort message
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                payload = pickle.dumps(_check_one(func, target))
        except Exception as err:
            payload = pickle.dumps([("llvm", _reason(err))])
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(payload)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return [("llvm", f"the build aborted the process (status {status})")]
    return pickle.loads(data)


def scan(kernels: list[tuple[str, tirx.PrimFunc]] | None = None,
         targets: tuple[str, ...] = TARGETS) -> ScanResult:
    """Build each kernel for each target through each backend and check the assembly."""
    result = ScanResult()
    kernels = collect_kernels() if kernels is None else kernels
    result.kernels = [label for label, _ in kernels]
    for label, func in kernels:
        for target in targets:
            for backend, outcome in _in_child(func, target):
                if isinstance(outcome, str):
                    result.skipped[(backend, outcome)] += 1
                    continue
                has_barrier, findings = outcome
                result.built[(backend, target)] += 1
                result.with_barrier[(backend, target)] += has_barrier
                for finding in findings:
                    result.findings.append((label, backend, target, finding))
    return result


def main() -> None:
    """Print the scan table."""
    result = scan()
    print(f"{len(result.kernels)} kernels found under {', '.join(ROOTS)}")
    print("| backend | target | built | with a barrier | barrier | redundant | back-to-back |")
    print("|---|---|---|---|---|---|---|")
    for backend in ("llvm", "asm"):
        for target in TARGETS:
            if (backend, target) not in result.built:
                continue
            kinds = Counter(f.kind for _, b, t, f in result.findings
                            if b == backend and t == target)
            print(f"| {backend} | {target} | {result.built[(backend, target)]} | "
                  f"{result.with_barrier[(backend, target)]} | {kinds['barrier']} | "
                  f"{kinds['redundant']} | {kinds['back-to-back']} |")
    for label, backend, target, finding in result.findings:
        print(f"  {backend} {target} {label}: {finding.kind} line {finding.line} "
              f"`{finding.text}` ({finding.detail})")
    print("skipped builds:")
    for (backend, reason), count in result.skipped.most_common():
        print(f"  {count:4d} {backend}: {reason}")


if __name__ == "__main__":
    main()
