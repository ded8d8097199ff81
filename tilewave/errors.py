"""tilewave's exception hierarchy.

Every user-facing failure raises a :class:`TilewaveError` subclass whose message says
what was wrong, where (function, statement or buffer), and what to do about it.
"""

from __future__ import annotations

import re

import tvm_ffi

# The printer declares free variables first (`x = T.int32()`); they are noise in a location.
_FREE_VAR_DECL = re.compile(r"^\w+ = T\.\w+\(\)$")
# ... and declares the buffers a statement uses (`S = T.Buffer((64,), scope="shared")`)
# before it: a location must show the statement, not the declarations.
_FREE_BUFFER_DECL = re.compile(r"^\w+ = T\.(Buffer|decl_buffer)\(.*\)$")


def _keep_type_across_ffi(cls: type[Exception]) -> None:
    # A TilewaveError raised inside a pass or pass instrument crosses TVM's C++ boundary;
    # without a registration tvm_ffi turns it into a RuntimeError on the way back.
    tvm_ffi.register_error(cls.__name__, cls)


class TilewaveError(Exception):
    """Base class of every error tilewave raises for a user mistake or an unsupported input.

    Every subclass is registered with TVM's FFI, so it keeps its type when raised inside a
    pass that runs under ``tvm.transform.Sequential``.
    """

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _keep_type_across_ffi(cls)


class UnknownTargetError(TilewaveError):
    """A target name or ``tvm.target.Target`` that tilewave has no architecture facts for."""


class KernelSourceError(TilewaveError):
    """A kernel file that cannot be loaded or defines no ``@T.prim_func`` / IRModule."""


class MalformedKernelError(TilewaveError):
    """A PrimFunc whose structure a pass cannot handle (wrong scope, bad loop, bad operands)."""


class UnclassifiedOpError(TilewaveError):
    """An op whose effect on shared memory or the memory proxy tilewave does not know,
    met where the classification decides correctness."""


class IntrinsicRegistrationError(TilewaveError):
    """A bad call to :func:`tilewave.register_intrinsic`."""


class PassOptionError(TilewaveError):
    """A pass constructed with an invalid option (a count below 1, an unknown buffer...)."""


class SharedMemoryLimitError(TilewaveError):
    """A shared-memory (LDS) allocation that exceeds the target's per-block limit."""


class DebugOptionError(TilewaveError):
    """A bad debugging switch: an unreadable override file, an unwritable dump directory."""


def where(func_name: str | None, stmt: object | None = None) -> str:
    """Format the location part of an error message: the function and a short statement text.

    Args:
        func_name: the PrimFunc's name (``global_symbol``) or ``None`` when unknown.
        stmt: the offending statement or expression; its TVMScript text is abbreviated.
    """
    parts = []
    if func_name:
        parts.append(f"in function '{func_name}'")
    if stmt is not None:
        text = _short_text(stmt)
        if text:
            parts.append(f"at `{text}`")
    return " ".join(parts)


def _short_text(stmt: object, limit: int = 120) -> str:
    script = getattr(stmt, "script", None)
    try:
        text = script() if callable(script) else str(stmt)
    except Exception:  # printing is best effort: a location must never mask the real error
        text = str(stmt)
    lines = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip()
        and not ln.startswith("#")
        and not _FREE_VAR_DECL.match(ln.strip())
        and not _FREE_BUFFER_DECL.match(ln.strip())
    ]
    flat = " ".join(lines)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class DivergentBarrierError(MalformedKernelError):
    """A barrier is needed where only some threads run (inside thread-divergent control
    flow) and cannot be hoisted out."""


class UnfixableHazardError(MalformedKernelError):
    """A shared-memory hazard no barrier can order: the two accesses run concurrently by
    construction (e.g. two writes to one shared word in the two arms of a thread-divergent
    ``if``), or a pass's output still holds a hazard it was responsible for."""


class StageFailedError(TilewaveError):
    """A TVM pass inside tilewave's pass list raised: the message names the stage and the
    kernel, and carries TVM's first message line."""


class CodegenError(TilewaveError):
    """TVM's code generator rejected the lowered kernel (an unsupported dtype or intrinsic
    for the target)."""


class OutputPathError(TilewaveError):
    """An output file or directory that cannot be created or written."""


class TargetFeatureError(TilewaveError):
    """An op or option that needs a hardware feature the target lacks (a split barrier on
    gfx942, ``fence.proxy.async`` before sm_90...)."""


class RegisterAllocationError(TilewaveError):
    """The AMDGCN backend ran out of registers of one class (it never spills)."""


class AssemblerError(TilewaveError):
    """LLVM's assembler or linker rejected the AMDGCN backend's output, or is not installed."""


_keep_type_across_ffi(TilewaveError)
