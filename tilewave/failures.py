"""Turn exceptions that escape TVM's passes and code generators into tilewave errors that
name the stage, the kernel and the target.

TVM reports a failed internal check as ``InternalError: Check failed: ...`` with a C++
backtrace and no location in the user's kernel; these helpers keep its first line and add
what tilewave knows (which stage of its list ran, on which kernels, for which target).
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any

import tvm
from tvm import tirx

from tilewave.errors import CodegenError, StageFailedError
from tilewave.ir.walker import post_order_visit
from tilewave.targets import TargetInfo

__all__ = [
    "codegen_failure",
    "describe_load_failure",
    "error_summary",
    "kernel_names",
    "stage_failure",
]

_NOISE_PREFIXES = ("Traceback", "File ", "[bt]", "Stack trace", "  ")
_TARGET_JSON = re.compile(r"\{\"kind\".*\}")


def error_summary(err: BaseException) -> str:
    """``TypeName: first meaningful line`` of an exception (no backtrace lines)."""
    lines = [ln.rstrip() for ln in str(err).splitlines()]
    meaningful = [ln for ln in lines if ln.strip() and not ln.startswith(_NOISE_PREFIXES)]
    text = meaningful[0].strip() if meaningful else ""
    # TVM prints whole targets as JSON; the stage and target name are in tilewave's message.
    text = _TARGET_JSON.sub("{...}", text).rstrip(":. ")
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def kernel_names(mod: tvm.IRModule) -> str:
    """The module's PrimFunc names, quoted and comma-separated."""
    names = sorted(g.name_hint for g, f in mod.functions.items() if isinstance(f, tirx.PrimFunc))
    return ", ".join(f"'{n}'" for n in names) or "(none)"


def stage_failure(
    err: BaseException, stage: str, mod: tvm.IRModule, target: TargetInfo
) -> StageFailedError:
    """The error for stage ``stage`` raising ``err`` on ``mod`` (the stage's input)."""
    if stage.startswith("tilewave."):
        cause = "tilewave's own stage crashed: a bug in tilewave, please report it"
    else:
        cause = (
            "TVM's pass rejected the kernel; the kernel likely uses a construct that pass "
            "cannot lower"
        )
    return StageFailedError(
        f"lower: stage {stage} failed on kernel {kernel_names(mod)} for {target.name}: "
        f"{error_summary(err)}. {cause}. To see the IR the stage received, run with "
        "TILEWAVE_DUMP_IR=1 (or --dump-ir DIR); --traceback shows TVM's message in full."
    )


def _dtypes(mod: tvm.IRModule) -> list[str]:
    seen: set[str] = set()

    def visit(node: Any) -> None:
        dtype = getattr(node, "dtype", None)
        if dtype is not None and isinstance(node, tvm.ir.expr.Expr):
            seen.add(str(dtype))
        if isinstance(node, tirx.BufferStore):
            seen.add(str(node.buffer.ty.dtype))

    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            post_order_visit(func.body, visit)
    return sorted(d for d in seen if d not in {"bool", "int32", "handle"})


def codegen_failure(
    err: BaseException, device_mod: tvm.IRModule, target: TargetInfo
) -> CodegenError:
    """The error for TVM's code generator raising ``err`` on ``device_mod``."""
    language = "CUDA" if target.is_cuda else "ROCm (LLVM AMDGPU)"
    dtypes = ", ".join(_dtypes(device_mod)) or "none beyond int32/bool"
    return CodegenError(
        f"build: TVM's {language} code generator rejected kernel {kernel_names(device_mod)} "
        f"for {target.name}: {error_summary(err)}. Data types in the kernel: {dtypes}; an "
        f"unsupported data type or intrinsic for {target.name} is the usual cause. Use types "
        f"{target.name} supports (e.g. float16/float32), or build for another target."
    )


# TVMScript's diagnostics: "error: <message>\n --> file:line:col\n ... \n N |  <source line>".
_DIAGNOSTIC_AT = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):\d+")
_NO_ATTRIBUTE = re.compile(r"has no attribute '(?P<name>\w+)'")


def _enclosing_function(lines: list[str], line_no: int) -> str | None:
    for text in reversed(lines[: max(line_no, 0)]):
        match = re.match(r"\s*def\s+(\w+)\s*\(", text)
        if match:
            return match.group(1)
    return None


def _fix_hint(message: str) -> str:
    unknown = _NO_ATTRIBUTE.search(message)
    if unknown:
        return (
            f"'{unknown.group('name')}' is not an op or namespace TVMScript knows: check the "
            "spelling (tilewave's own ops are T.tilewave.lds_barrier/barrier_signal/"
            "barrier_wait/wait_async_ops/commit_async_ops/fence_proxy_async, and need "
            "`import tilewave` in the file)"
        )
    return "correct that statement so that `python FILE` runs"


def _location(path: Path, err: BaseException) -> tuple[int | None, str | None]:
    if isinstance(err, SyntaxError) and err.lineno is not None:
        return err.lineno, (err.text or "").strip() or None
    found = _DIAGNOSTIC_AT.search(str(err))
    if found and Path(found.group("file")).name == path.name:
        return int(found.group("line")), None
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if Path(f.filename).resolve() == path.resolve()
    ]
    if frames:
        return frames[-1].lineno, (frames[-1].line or "").strip() or None
    return None, None


def describe_load_failure(path: str | Path, err: BaseException) -> str:
    """A one-paragraph message for a kernel file that failed to run or parse: the file, the
    line, the ``@T.prim_func`` it is in, the failing statement, TVM's reason and a fix.

    TVMScript parse errors (``DiagnosticError``) carry their location in the message text;
    Python errors in their traceback or (``SyntaxError``) their attributes.
    """
    file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []
    line_no, statement = _location(file, err)
    if statement is None and line_no is not None and 0 < line_no <= len(lines):
        statement = lines[line_no - 1].strip()
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    reason = reason.removeprefix("error: ").rstrip(". ")
    parts = [f"kernel file {str(file)!r}"]
    if line_no is not None:
        parts.append(f"line {line_no}")
        func = _enclosing_function(lines, line_no)
        if func:
            parts.append(f"in function '{func}'")
    where_text = ", ".join(parts)
    at = f" at `{statement}`" if statement else ""
    if "Diagnostic" in type(err).__name__:
        what = f"TVMScript could not parse it: {reason}"
    else:
        what = f"failed to run: {type(err).__name__}: {reason}"
    return f"{where_text}{at}: {what}. Fix: {_fix_hint(reason)}."
