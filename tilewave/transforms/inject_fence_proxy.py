"""InjectFenceProxy: put ``fence.proxy.async`` between generic and async-proxy shared traffic.

On Hopper, a shared-memory write through the generic proxy (``st.shared``, ``stmatrix``,
``cp.async``...) is not ordered before a later async-proxy access of the same memory
(``wgmma`` operand fetch, TMA / ``cp.async.bulk`` store) unless a ``fence.proxy.async``
separates them. This pass:

1. normalises bulk stores (``cp.async.bulk{.tensor}`` shared->global): the last one of each
   statement sequence must be followed by ``cp.async.bulk.commit_group`` and then
   ``cp.async.bulk.wait_group.read 0``; whichever is missing is inserted right after;
2. asks :func:`tilewave.analysis.proxy_state.analyze_proxy_state` for the proxy state on
   entry to every async-proxy op, and inserts one fence right before each op a generic
   access may reach without a fence in between.

The fence inserted is TVM's own ``tirx.ptx.fence_proxy`` op with the ``async`` kind and the
``shared::cta`` state space (``T.ptx.fence("proxy", "async", "shared::cta", "")``, printed by
CUDA codegen as ``fence.proxy.async.shared::cta;``): stock TVM lowers it, so the pass output
compiles with or without tilewave's op lowering, and it round-trips through TVMScript.
tilewave's own ``tilewave.fence_proxy_async()`` is recognised as a fence in the input too.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import ir, tirx
from tvm.script import tirx as T

from tilewave.analysis.proxy_state import StmtPath, analyze_proxy_state, child_statements
from tilewave.cyclic_gc import without_cyclic_gc
from tilewave.errors import MalformedKernelError, PassOptionError
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import rebuild
from tilewave.targets import TargetInfo, get_target

__all__ = ["InjectFenceProxy", "inject_fence_proxy", "normalize_bulk_store_handshake"]

_PASS = "InjectFenceProxy"
#: Bulk copies shared::cta -> global that complete through a bulk async-group.
_BULK_STORE_PREFIXES = ("tirx.ptx.cp_async_bulk_tensor_s2g", "tirx.ptx.cp_async_bulk_s2g")
_BULK_COMMIT = "tirx.ptx.cp_async_bulk_commit_group"
_BULK_WAIT = "tirx.ptx.cp_async_bulk_wait_group"
#: Without a target anywhere, the pass assumes the architecture it exists for.
DEFAULT_TARGET = "sm_90a"


def _fence_stmt() -> tirx.Evaluate:
    return tirx.Evaluate(T.ptx.fence.proxy.async_.shared__cta())


def _commit_stmt() -> tirx.Evaluate:
    return tirx.Evaluate(T.ptx.cp.async_.bulk.commit_group())


def _wait_stmt() -> tirx.Evaluate:
    # `.read`: wait only until the bulk copies have read shared memory (it may be reused);
    # their global writes are visible at kernel exit, as in CUTLASS's tma_store_wait<0>.
    return tirx.Evaluate(T.ptx.cp.async_.bulk.wait_group.read(0))


def _evaluated_op(stmt: Any) -> str | None:
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, ir.expr.Call):
        return callee_name(stmt.value)
    return None


def _is_bulk_store(stmt: Any) -> bool:
    name = _evaluated_op(stmt)
    return name is not None and name.startswith(_BULK_STORE_PREFIXES)


# ----------------------------------------------------------------------------------------
# Rebuilding statements with new siblings
# ----------------------------------------------------------------------------------------


def _rewrite(stmt: Any, path: StmtPath, edit_sequence: Any) -> Any:
    """Rebuild ``stmt`` bottom-up, letting ``edit_sequence(items, paths)`` change every list of
    sibling statements (a ``SeqStmt`` or a lone child). Unchanged subtrees stay the same object.
    """
    changes: dict[str, Any] = {}
    groups: dict[str, list[tuple[int, Any]]] = {}
    for name, index, child in child_statements(stmt):
        groups.setdefault(name, []).append((index, child))
    for name, children in groups.items():
        paths = [(*path, (name, index)) for index, _ in children]
        items = [_rewrite(child, p, edit_sequence) for (_, child), p in zip(children, paths,
                                                                         strict=True)]
        edited = edit_sequence(items, paths)
        if len(edited) == len(children) and all(
            new.same_as(old) for new, (_, old) in zip(edited, children, strict=True)
        ):
            continue
        if children[0][0] == -1:
            changes[name] = edited[0] if len(edited) == 1 else tirx.SeqStmt(edited)
        else:
            changes[name] = edited
    if not changes:
        return stmt
    return rebuild(stmt, changes)


def _edit_body(func: tirx.PrimFunc, edit_sequence: Any) -> tirx.PrimFunc:
    body = _rewrite(func.body, (), edit_sequence)
    root = edit_sequence([body], [()])
    new_body = root[0] if len(root) == 1 else tirx.SeqStmt(root)
    if new_body.same_as(func.body):
        return func
    return rebuild(func, {"body": new_body})


# ----------------------------------------------------------------------------------------
# Step 1: bulk-store commit / wait handshake
# ----------------------------------------------------------------------------------------


def _with_handshake(items: list[Any], _paths: list[StmtPath]) -> list[Any]:
    last_store = max((i for i, s in enumerate(items) if _is_bulk_store(s)), default=None)
    if last_store is None:
        return items
    out = list(items)
    commit = next((i for i in range(last_store + 1, len(out))
                   if _evaluated_op(out[i]) == _BULK_COMMIT), None)
    if commit is None:
        commit = last_store + 1
        out.insert(commit, _commit_stmt())
    if not any(_evaluated_op(s) == _BULK_WAIT for s in out[commit + 1:]):
        out.insert(commit + 1, _wait_stmt())
    return out


def normalize_bulk_store_handshake(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Make every bulk shared->global store be followed by a commit and then a wait.

    Within each statement sequence, the last ``cp.async.bulk{.tensor}`` shared->global store
    must be followed (later in the same sequence) by ``cp.async.bulk.commit_group``, and that
    commit by a ``cp.async.bulk.wait_group``. What is missing is inserted right after the store
    (commit) or the commit (``wait_group.read 0``); what is there is left alone.
    """
    return _edit_body(func, _with_handshake)


# ----------------------------------------------------------------------------------------
# Step 2: fences
# ----------------------------------------------------------------------------------------


def _insert_fences(func: tirx.PrimFunc, conservative: bool) -> tirx.PrimFunc:
    needed = analyze_proxy_state(func, conservative=conservative).fence_needed_before()
    if not needed:
        return func

    def with_fences(items: list[Any], paths: list[StmtPath]) -> list[Any]:
        if not any(p in needed for p in paths):
            return items
        out: list[Any] = []
        for item, path in zip(items, paths, strict=True):
            if path in needed:
                out.append(_fence_stmt())
            out.append(item)
        return out

    return _edit_body(func, with_fences)


def _resolve_target(func: tirx.PrimFunc, target: Any) -> TargetInfo:
    if target is not None:
        return get_target(target)
    attrs = func.attrs
    if attrs is not None and "target" in attrs:
        return get_target(attrs["target"])
    current = tvm.target.Target.current(allow_none=True)
    if current is not None:
        return get_target(current)
    return get_target(DEFAULT_TARGET)


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise PassOptionError(
            f"{_PASS}: option {name} must be True or False, got {value!r} "
            f"({type(value).__name__})."
        )


@without_cyclic_gc
def inject_fence_proxy(
    func: tirx.PrimFunc,
    target: Any = None,
    conservative: bool = False,
    force: bool = False,
) -> tirx.PrimFunc:
    """Insert ``fence.proxy.async`` where generic shared traffic may reach an async-proxy op.

    Args:
        func: the PrimFunc to transform.
        target: a target name, ``tvm.target.Target`` or :class:`TargetInfo`. When ``None``:
            the function's ``"target"`` attribute, else ``tvm.target.Target.current()``, else
            ``sm_90a`` (a kernel with no async-proxy op is returned unchanged anyway).
        conservative: treat statement-level calls the op table does not know as generic
            shared accesses (default: they leave the proxy state unchanged, unless they take
            a shared buffer's address).
        force: transform even for targets without an async proxy (sm_80, ROCm), which are
            otherwise returned unchanged.

    Returns:
        The transformed PrimFunc (``func`` itself when nothing changed).

    Raises:
        MalformedKernelError: ``func`` is not a PrimFunc.
        UnknownTargetError: the target is not one tilewave knows.
        PassOptionError: ``conservative`` or ``force`` is not a bool.

    Example::

        fenced = inject_fence_proxy(kernel, target="sm_90a")
    """
    if not isinstance(func, tirx.PrimFunc):
        raise MalformedKernelError(
            f"{_PASS}: expected a tvm.tirx.PrimFunc, got {type(func).__name__}. Pass one "
            "function (mod['main']) or apply InjectFenceProxy() to the whole IRModule."
        )
    _check_flag("conservative", conservative)
    _check_flag("force", force)
    info = _resolve_target(func, target)
    if not (info.has_async_proxy or force):
        return func
    func = normalize_bulk_store_handshake(func)
    return _insert_fences(func, conservative)


def InjectFenceProxy(
    target: Any = None, conservative: bool = False, force: bool = False
) -> tvm.transform.Pass:
    """The :func:`inject_fence_proxy` transform as a module pass over every PrimFunc.

    Other functions of the module (Relax, externs) are left alone. Arguments as for
    :func:`inject_fence_proxy`; ``target`` is resolved per function when not given.

    Example::

        mod = tilewave.transforms.InjectFenceProxy(target="sm_90a")(mod)
    """
    _check_flag("conservative", conservative)
    _check_flag("force", force)
    if target is not None:
        get_target(target)  # fail at construction, not in the middle of a pipeline

    def transform(mod: ir.IRModule, _ctx: tvm.transform.PassContext) -> ir.IRModule:
        updates = {}
        for gvar, func in mod.functions.items():
            if isinstance(func, tirx.PrimFunc):
                new = inject_fence_proxy(func, target, conservative, force)
                if not new.same_as(func):
                    updates[gvar] = new
        if not updates:
            return mod
        mod = mod.clone()  # the caller's module is not modified in place
        for gvar, func in updates.items():
            mod.update_func(gvar, func)
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name=f"tilewave.{_PASS}")
