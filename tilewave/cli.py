"""The ``tilewave`` command: lower a kernel file, list targets and passes, run the demo.

::

    tilewave demo                                  # built-in kernels, every target
    tilewave targets                               # the architecture table
    tilewave lower kernel.py --target sm_90a       # IR diff before/after lowering
    tilewave lower kernel.py --target gfx942 --emit source --dump-ir dumps/ --timing
    tilewave lower --list-passes --target gfx1200  # the pass list for a target
    tilewave build kernel.py --target gfx942 --backend asm --out out/  # .s + .hsaco
    tilewave racecheck kernel.py --target sm_90a   # execute one block, report races
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import runpy
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import tvm

from tilewave.errors import KernelSourceError, OutputPathError, TilewaveError
from tilewave.failures import describe_load_failure
from tilewave.instruments import DumpIR, OverrideIR, PassTimings, instruments_from_env
from tilewave.pipeline import BuildResult, build, device_finalize_passes, stages_for
from tilewave.targets import TARGETS, get_target
from tilewave.tvm_log import quiet_device_probe_warnings

__all__ = ["barrier_summary", "device_code_excerpt", "load_kernels", "main"]


def load_kernels(path: str | Path, func: str | None = None) -> tvm.IRModule:
    """Run the Python file ``path`` and collect the kernels it defines.

    Args:
        path: a Python file defining ``@T.prim_func`` kernels or an ``IRModule``.
        func: the name of the one global to take; by default the file's only IRModule, or
            all its PrimFuncs together.

    Raises:
        KernelSourceError: the file cannot be read or run, or defines no kernel (or no
            kernel named ``func``).
    """
    file = Path(path)
    if not file.is_file():
        raise KernelSourceError(f"kernel file {str(file)!r} does not exist or is not a file.")
    try:
        namespace = runpy.run_path(str(file), run_name="__tilewave_kernel__")
    except Exception as err:
        raise KernelSourceError(describe_load_failure(file, err)) from err
    kernels = {
        name: value
        for name, value in namespace.items()
        if isinstance(value, (tvm.tirx.PrimFunc, tvm.IRModule)) and not name.startswith("_")
    }
    if func is not None:
        if func not in kernels:
            raise KernelSourceError(
                f"kernel file {str(file)!r} has no @T.prim_func or IRModule named {func!r}; "
                f"it defines {sorted(kernels) or 'none'}."
            )
        chosen = kernels[func]
        return chosen if isinstance(chosen, tvm.IRModule) else tvm.IRModule({func: chosen})
    modules = [v for v in kernels.values() if isinstance(v, tvm.IRModule)]
    funcs = {n: v for n, v in kernels.items() if isinstance(v, tvm.tirx.PrimFunc)}
    if len(modules) == 1 and not funcs:
        return modules[0]
    if funcs and not modules:
        return tvm.IRModule(funcs)
    if not kernels:
        raise KernelSourceError(
            f"kernel file {str(file)!r} defines no @T.prim_func or IRModule at module level. "
            "Define one (from tvm.script import tirx as T; @T.prim_func def kernel(...): ...)."
        )
    raise KernelSourceError(
        f"kernel file {str(file)!r} defines several kernels ({', '.join(sorted(kernels))}); "
        "choose one with --func NAME."
    )


def barrier_summary(result: BuildResult) -> str:
    """The barrier instructions in the generated device code, counted: ``"2 __syncthreads"``."""
    if result.target.is_cuda:
        counts = Counter(re.findall(r"__syncthreads\(\)|bar\.sync|mbarrier\.\w+", result.source))
    else:
        counts = Counter(
            m.group(1) for m in re.finditer(r"^\s+(s_barrier\w*)", result.source, re.MULTILINE)
        )
    if not counts:
        return "none"
    return ", ".join(f"{n} {name.rstrip('()')}" for name, n in sorted(counts.items()))


def device_code_excerpt(result: BuildResult) -> str:
    """The kernel itself from the generated source (no helper prelude, no metadata)."""
    src = result.source
    if result.target.is_cuda:
        start = src.find('extern "C" __global__')
        return src[start:].strip() if start >= 0 else src
    lines = []
    inside = False
    for line in src.splitlines():
        if re.match(r"^\w+_kernel:", line):
            inside = True
        if inside and line.strip() and not line.lstrip().startswith(";") and not (
            line.startswith("\t.")  # assembler directives; labels start in column 0
        ):
            lines.append(line.rstrip())
        if inside and line.strip() == "s_endpgm":
            break
    return "\n".join(lines)


def _device_script(result: BuildResult) -> str:
    return result.device.script()


def _instruments(args: argparse.Namespace) -> list[Any]:
    chosen = instruments_from_env()
    if getattr(args, "override", None):
        chosen.insert(0, OverrideIR(args.override))
    if getattr(args, "dump_ir", None):
        chosen.append(DumpIR(directory=None if args.dump_ir == "-" else args.dump_ir))
    if getattr(args, "timing", False):
        chosen.append(PassTimings())
    return chosen


def _cmd_targets(args: argparse.Namespace, out: TextIO) -> int:
    header = (
        "target",
        "kind",
        "wave",
        "shared/LDS bytes",
        "barrier",
        "split",
        "async proxy",
        "async copy",
    )
    rows = [
        (
            t.name,
            t.kind,
            str(t.wave_size),
            str(t.shared_memory_bytes),
            t.barrier_style,
            "yes" if t.has_split_barrier else "no",
            "yes" if t.has_async_proxy else "no",
            t.async_lds_copy or "-",
        )
        for t in TARGETS.values()
    ]
    _print_table(header, rows, out)
    return 0


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        out.write("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")


def _cmd_list_passes(target: str, multi_buffer_count: int | None, out: TextIO) -> int:
    info = get_target(target)
    out.write(f"# tilewave pass list for {info.name} ({info.kind})\n")
    stages = stages_for(info, multi_buffer_count=multi_buffer_count)
    for index, stage in enumerate(stages, 1):
        out.write(f"{index:2d}  {stage.origin:<8}  {stage.name}\n")
    out.write("# then, in build(), on the device module:\n")
    for index, device_pass in enumerate(device_finalize_passes(), len(stages) + 1):
        out.write(f"{index:2d}  {'tvm':<8}  {device_pass.info.name}\n")
    return 0


def _verify_barriers(args: argparse.Namespace) -> bool | None:
    # the flag turns the check on; without it TILEWAVE_VERIFY_BARRIERS decides
    return True if getattr(args, "verify_barriers", False) else None


def _cmd_lower(args: argparse.Namespace, out: TextIO) -> int:
    if args.list_passes:
        return _cmd_list_passes(args.target, args.multi_buffer_count, out)
    if args.file is None:
        raise KernelSourceError("tilewave lower: give a kernel FILE (or --list-passes).")
    mod = load_kernels(args.file, args.func)
    before = mod.script()
    result = build(
        mod,
        args.target,
        multi_buffer_count=args.multi_buffer_count,
        instruments=_instruments(args),
        verify_barriers=_verify_barriers(args),
    )
    emit = args.emit or ["diff"]
    if "diff" in emit:
        after = _device_script(result)
        diff = difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            fromfile=f"{args.file} (input)",
            tofile=f"device IR for {result.target.name} (after tilewave.lower)",
            lineterm="",
        )
        out.write("\n".join(diff) + "\n")
    if "ir" in emit:
        out.write(result.lowered.script() + "\n")
    if "source" in emit:
        out.write(result.source + "\n")
    return 0


_SOURCE_SUFFIX = {"cuda": ".cu", "amdgcn": ".s"}


def _writable_directory(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputPathError(
            f"tilewave build: cannot create the output directory {str(directory)!r}: "
            f"{err.strerror}. Choose a writable --out directory."
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"tilewave build: the output directory {str(directory)!r} is not writable. "
            "Choose a writable --out directory (or fix its permissions)."
        )
    return directory


def _cmd_build(args: argparse.Namespace, out: TextIO) -> int:
    mod = load_kernels(args.file, args.func)
    out_dir = _writable_directory(Path(args.out))
    stem = args.func or Path(args.file).stem
    if args.backend == "asm":
        from tilewave.codegen.amdgcn import build_asm

        asm_path, hsaco_path = build_asm(mod, args.target, out_dir)
        out.write(f"wrote {asm_path}\nwrote {hsaco_path}\n")
        return 0
    result = build(
        mod, args.target, instruments=_instruments(args), verify_barriers=_verify_barriers(args)
    )
    path = out_dir / f"{stem}{_SOURCE_SUFFIX[result.source_language]}"
    try:
        path.write_text(result.source)
    except OSError as err:
        raise OutputPathError(
            f"tilewave build: cannot write {str(path)!r}: {err.strerror}. Choose a writable "
            "--out directory."
        ) from None
    out.write(f"wrote {path}\n")
    return 0


def _cmd_racecheck(args: argparse.Namespace, out: TextIO) -> int:
    from tilewave.racecheck import DEFAULT_SCHEDULES, racecheck

    mod = load_kernels(args.file, args.func)
    if args.lower:
        from tilewave.pipeline import lower

        mod = lower(mod, args.target)
    schedules = args.schedule or list(DEFAULT_SCHEDULES)
    status = 0
    for gv, func in mod.functions.items():
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is not None and target.kind.name not in ("cuda", "rocm"):
            continue  # the host side of a lowered module launches the kernel; nothing to run
        report = racecheck(func, args.target, blocks=args.blocks, schedules=schedules,
                           func_name=gv.name_hint)
        out.write(report.format() + "\n")
        status = status or (0 if report.ok else 1)
    return status


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from tilewave.examples_builtin import BUILTIN_KERNELS

    targets = args.target or list(TARGETS)
    kernels = args.kernel or list(BUILTIN_KERNELS)
    for name in kernels:
        if name not in BUILTIN_KERNELS:
            raise KernelSourceError(
                f"tilewave demo: no built-in kernel {name!r}; choose from {list(BUILTIN_KERNELS)}."
            )
    out.write(
        "tilewave demo: lowering the built-in kernels with tilewave's pipeline and TVM's codegen\n"
        "(no GPU needed; the device code below is what TVM generated, not a template)\n\n"
    )
    results: list[tuple[str, BuildResult, float]] = []
    instruments = _instruments(args)
    for target in targets:
        for name in kernels:
            start = time.perf_counter()
            result = build(
                BUILTIN_KERNELS[name],
                target,
                instruments=instruments,
                verify_barriers=_verify_barriers(args),
            )
            results.append((name, result, time.perf_counter() - start))
    header = ("target", "kernel", "output", "lines", "barrier instructions", "ms")
    rows = [
        (
            r.target.name,
            name,
            r.source_language,
            str(len(r.source.splitlines())),
            barrier_summary(r),
            f"{seconds * 1e3:.0f}",
        )
        for name, r, seconds in results
    ]
    _print_table(header, rows, out)
    shown = args.show or ["sm_90a", "gfx942"]
    for name, result, _ in results:
        if result.target.name in shown and name == kernels[-1]:
            language = "CUDA C" if result.target.is_cuda else "AMDGCN assembly"
            out.write(f"\n== {name} for {result.target.name}: {language} (kernel excerpt) ==\n")
            out.write(device_code_excerpt(result) + "\n")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tilewave",
        description="GPU synchronisation and memory-pipelining passes for Apache TVM TIR.",
    )
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="print the Python traceback of an error (by default only its message)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def debug_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--traceback",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print the Python traceback of an error (by default only its message)",
        )
        p.add_argument(
            "--dump-ir",
            metavar="DIR",
            help="dump the IR after every pass to DIR "
            "(one file per pass, NN-pass.py); '-' dumps to stderr",
        )
        p.add_argument("--timing", action="store_true", help="print per-pass timings to stderr")
        p.add_argument(
            "--verify-barriers",
            action="store_true",
            help="check the barrier stage's output with the hazard verifier (as "
            "TILEWAVE_VERIFY_BARRIERS=1; about doubles that stage's time)",
        )
        p.add_argument(
            "--override",
            metavar="DIR",
            help="replace a pass's output with DIR/"
            "NN-pass.py when that file exists (edit a dumped file)",
        )

    lower = sub.add_parser("lower", help="lower a kernel file and show what changed")
    lower.add_argument("file", nargs="?", help="Python file defining a @T.prim_func or IRModule")
    lower.add_argument("--target", required=True, help="target name, e.g. sm_90a or gfx942")
    lower.add_argument("--func", help="which kernel of the file to lower")
    lower.add_argument(
        "--emit",
        action="append",
        choices=["diff", "ir", "source"],
        help="what to print (repeatable): the IR diff (default), the whole "
        "lowered IR, the generated device source",
    )
    lower.add_argument(
        "--multi-buffer-count", type=int, metavar="N", help="multibuffer shared buffers N times"
    )
    lower.add_argument(
        "--list-passes", action="store_true", help="print the pass list for --target and exit"
    )
    debug_flags(lower)

    sub.add_parser("targets", help="print the targets tilewave knows")

    build_cmd = sub.add_parser("build", help="compile a kernel file and write the device code")
    build_cmd.add_argument("file", help="Python file defining a @T.prim_func or IRModule")
    build_cmd.add_argument("--target", required=True, help="target name, e.g. sm_90a or gfx942")
    build_cmd.add_argument("--func", help="which kernel of the file to build")
    build_cmd.add_argument(
        "--backend",
        choices=["llvm", "asm"],
        default="llvm",
        help="llvm (default): TVM's codegen after tilewave.lower, writes CUDA C (.cu) or "
        "AMDGCN assembly (.s); asm: tilewave's own AMDGCN backend (gfx942, gfx950), writes "
        "<kernel>.s and the linked <kernel>.hsaco",
    )
    build_cmd.add_argument("--out", required=True, metavar="DIR", help="output directory")
    debug_flags(build_cmd)

    check = sub.add_parser("racecheck", help="execute a kernel's blocks on the CPU and report "
                           "races and deadlocks (exit status 1 when it finds one)")
    check.add_argument("file", help="Python file defining a @T.prim_func or IRModule")
    check.add_argument("--target", required=True, help="target name, e.g. sm_90a or gfx942")
    check.add_argument("--func", help="which kernel of the file to check")
    check.add_argument("--blocks", type=int, default=1, help="blocks to run (default 1)")
    check.add_argument("--schedule", action="append", help="schedule (repeatable): lockstep, "
                       "reverse, warps, random:<seed>; default: all four")
    check.add_argument("--lower", action="store_true", help="run tilewave.lower first")

    demo = sub.add_parser("demo", help="lower the built-in kernels for every target")
    demo.add_argument("--target", action="append", help="only this target (repeatable)")
    demo.add_argument("--kernel", action="append", help="only this built-in kernel (repeatable)")
    demo.add_argument(
        "--show",
        action="append",
        metavar="TARGET",
        help="print the device code for TARGET (default: sm_90a and gfx942)",
    )
    debug_flags(demo)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the ``tilewave`` command and return its exit status.

    0: success; 1: a user mistake (a :class:`TilewaveError`, message only); 2: bad command
    line (argparse); 3: an internal error. ``--traceback`` adds the Python traceback.
    TVM's warnings about ROCm devices this machine lacks are filtered
    (:mod:`tilewave.tvm_log`).
    """
    args = _parser().parse_args(argv)
    stream = out or sys.stdout
    commands = {
        "lower": _cmd_lower,
        "targets": _cmd_targets,
        "demo": _cmd_demo,
        "build": _cmd_build,
        "racecheck": _cmd_racecheck,
    }
    with quiet_device_probe_warnings():
        return _run_reporting_errors(lambda: commands[args.command](args, stream), args.traceback)


#: Exit statuses of the ``tilewave`` command (docs/errors.md lists them).
EXIT_OK, EXIT_USER_ERROR, EXIT_USAGE, EXIT_INTERNAL_ERROR = 0, 1, 2, 3


def _run_reporting_errors(command: Callable[[], int], show_traceback: bool) -> int:
    # A user mistake is a TilewaveError: its message says what and how to fix it, so no
    # traceback unless asked. Anything else is a bug (tilewave's or TVM's): say so.
    try:
        return command()
    except TilewaveError as err:
        if show_traceback:
            traceback.print_exc()
        sys.stderr.write(f"tilewave: error: {err}\n")
        return EXIT_USER_ERROR
    except Exception as err:
        if show_traceback:
            traceback.print_exc()
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        sys.stderr.write(
            f"tilewave: internal error (a bug in tilewave or TVM, not in your input): "
            f"{type(err).__name__}: {first}\nRerun with --traceback and report it with the "
            "kernel file.\n"
        )
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
