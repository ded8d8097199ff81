"""The barrier pass's invariant, checked: its output has no shared-memory hazard left.

:func:`checked_barrier_pass` wraps a barrier-inserting pass (``InsertSharedBarriers``) so
that, for every kernel,

* before it runs, hazards **no barrier can fix** are refused with an
  :class:`~tilewave.errors.UnfixableHazardError` naming both statements and the buffer:
  two writes to a shared buffer in the two arms of a thread-dependent ``if`` run
  concurrently (different threads take different arms), so their order on a common word is
  undefined whatever barriers surround them;
* after it runs, :func:`~tilewave.analysis.shared_hazards.find_shared_hazards` (the verifier,
  which shares no placement logic with the pass) must find nothing; a hazard left behind is
  reported as a tilewave bug with both statements, instead of returning a racy kernel.

The check before the pass costs a syntactic filter, plus one verifier run for kernels with
shared writes in both arms of a thread-dependent ``if``; it always runs (it refuses user
kernels). The check after it costs one verifier run per kernel, about as much as the pass
itself, and guards against tilewave bugs rather than user mistakes: ``tilewave.lower`` /
``build`` run it when asked (``verify_barriers=True``, ``TILEWAVE_VERIFY_BARRIERS=1``,
``--verify-barriers``; the test suite turns it on), as release compilers leave their IR
verifier to debug and test builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import ir, tirx

from tilewave.analysis.shared_access import AccessKind, SharedAccess
from tilewave.analysis.shared_buffers import is_shared_buffer
from tilewave.analysis.shared_hazards import HazardKind, SharedHazard, find_shared_hazards
from tilewave.analysis.uniformity import UniformityAnalysis
from tilewave.errors import UnfixableHazardError, where
from tilewave.ir.walker import post_order_visit

__all__ = [
    "checked_barrier_pass",
    "concurrent_arm_writes",
    "refuse_unfixable",
    "refuse_unfixable_in_module",
    "require_no_hazards_left",
]


def _opposite_arm_condition(first: SharedAccess, second: SharedAccess) -> Any | None:
    for cond, holds in first.scope.conditions:
        for other, other_holds in second.scope.conditions:
            if cond.same_as(other) and holds != other_holds:
                return cond
    return None


def _writes_shared(stmt: Any) -> bool:
    found = False

    def visit(node: Any) -> None:
        nonlocal found
        if isinstance(node, tirx.BufferStore) and is_shared_buffer(node.buffer):
            found = True

    post_order_visit(stmt, visit, (tirx.BufferStore,))
    return found


def _two_arm_shared_write_conditions(func: tirx.PrimFunc) -> list[Any]:
    # A syntactic pre-filter, so the verifier only runs on kernels that can have the pattern.
    found: list[Any] = []

    def visit(node: Any) -> None:
        if (
            isinstance(node, tirx.IfThenElse)
            and node.else_case is not None
            and _writes_shared(node.then_case)
            and _writes_shared(node.else_case)
        ):
            found.append(node.condition)

    post_order_visit(func.body, visit, (tirx.IfThenElse,))
    return found


def concurrent_arm_writes(func: tirx.PrimFunc) -> list[tuple[SharedHazard, Any]]:
    """Write/write hazards between the two arms of one thread-dependent ``if``, with the
    condition: pairs that run concurrently and that no barrier can order."""
    candidates = _two_arm_shared_write_conditions(func)
    if not candidates:
        return []
    uniformity = UniformityAnalysis(func)
    # arms of a block-uniform `if` never run at the same time
    divergent: Callable[[Any], bool] = lambda c: not uniformity.is_block_uniform(c)  # noqa: E731
    if not any(divergent(c) for c in candidates):
        return []
    found = []
    for hazard in find_shared_hazards(func):
        if hazard.kind is not HazardKind.WAW:
            continue
        if hazard.first.kind != AccessKind.WRITE or hazard.second.kind != AccessKind.WRITE:
            continue
        cond = _opposite_arm_condition(hazard.first, hazard.second)
        if cond is not None and divergent(cond):
            found.append((hazard, cond))
    return found


def _func_name(gvar: ir.GlobalVar, func: tirx.PrimFunc) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs else None
    return str(symbol) if symbol else gvar.name_hint


def _statement(access: SharedAccess) -> str:
    return where(None, access.stmt).removeprefix("at ")


def refuse_unfixable(func: tirx.PrimFunc, func_name: str, pass_name: str) -> None:
    """Raise for the first pair :func:`concurrent_arm_writes` finds.

    Raises:
        UnfixableHazardError: naming both statements, the buffer and the condition.
    """
    for hazard, cond in concurrent_arm_writes(func):
        raise UnfixableHazardError(
            f"{pass_name}: {_statement(hazard.first)} and {_statement(hazard.second)} "
            f"{where(func_name)} both write shared buffer '{hazard.buffer}' in the two arms "
            f"of the thread-dependent `if {cond}`, which different threads run at the same "
            "time: they may write one word concurrently and no barrier can order them. Make "
            "the arms write disjoint elements, or do the write in one arm only."
        )


def refuse_unfixable_in_module(mod: tvm.IRModule, pass_name: str) -> None:
    """:func:`refuse_unfixable` for every PrimFunc of ``mod`` (run on the user's kernel, so
    the message shows the statements as written)."""
    for gvar, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            refuse_unfixable(func, _func_name(gvar, func), pass_name)


def require_no_hazards_left(
    func: tirx.PrimFunc, func_name: str, pass_name: str, target: Any = None
) -> None:
    """The invariant: the verifier finds no hazard in ``func`` (a barrier pass's output),
    under ``target``'s async-copy semantics (``None``: CUDA's).

    Raises:
        UnfixableHazardError: naming the hazard's two statements and buffer.
    """
    # barrier hazards only: the fences come from InjectFenceProxy, after this pass, and a
    # wrong mbarrier parity is the user's protocol, not something the pass left behind
    for hazard in find_shared_hazards(func, target, protocol=False):
        raise UnfixableHazardError(
            f"{pass_name} left a {hazard.kind.name} hazard on shared buffer '{hazard.buffer}' "
            f"{where(func_name)}: {_statement(hazard.first)} then {_statement(hazard.second)} "
            "with no barrier between them. This is a tilewave bug (the pass must order every "
            "hazard or refuse the kernel); report it with the kernel. Until fixed, put "
            "T.tilewave.lds_barrier() between the two statements yourself."
        )


def checked_barrier_pass(
    inner: tvm.transform.Pass, target: Any = None, verify_output: bool = True
) -> tvm.transform.Pass:
    """``inner`` with the checks of this module around it, under ``inner``'s own name (so
    ``disabled_pass`` and dumps see one stage).

    Args:
        inner: a pass that inserts shared-memory barriers into every PrimFunc.
        target: the target ``inner`` synchronises for (how its async copies complete);
            ``None``: CUDA's semantics.
        verify_output: also run :func:`require_no_hazards_left` on ``inner``'s output
            (the unfixable-hazard refusal before it always runs).

    Example::

        checked = checked_barrier_pass(InsertSharedBarriers("sm_90a"))
    """
    name = inner.info.name

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        refuse_unfixable_in_module(mod, name)
        result = inner(mod)
        if not verify_output:
            return result
        for gvar, func in result.functions.items():
            if isinstance(func, tirx.PrimFunc):
                require_no_hazards_left(func, _func_name(gvar, func), name, target)
        return result

    return tvm.transform.module_pass(run, opt_level=0, name=name)
