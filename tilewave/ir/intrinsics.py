"""The one table that says what each op does to shared memory and to the memory proxy.

Every analysis that must know whether a call touches shared memory, issues async-proxy
traffic, synchronises threads or waits for async copies asks :func:`classify`. Users
extend the table for their own intrinsics with :func:`register_intrinsic`.

Effects are flags (an op may have several): ``cp.async`` is a *generic* shared access that
is also an *async copy* which *writes shared*; a TMA load is an *async-proxy* op, an async
copy, and writes shared.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tvm import ir

from tilewave.errors import IntrinsicRegistrationError, UnclassifiedOpError, where
from tilewave.kernel_memory import forget_kernels

__all__ = [
    "OpEffect",
    "classify",
    "classify_call",
    "intrinsic_table",
    "op_name",
    "register_intrinsic",
    "require_classification",
    "unregister_intrinsic",
]


class OpEffect(enum.Flag):
    """What an op does, as far as tilewave's passes care."""

    NONE = 0
    #: Shared-memory traffic through the generic proxy (ld/st.shared, ldmatrix, cp.async).
    GENERIC_SHARED = enum.auto()
    #: Async-proxy traffic (wgmma operands, TMA / cp.async.bulk, tcgen05).
    ASYNC_PROXY = enum.auto()
    #: A thread barrier (bar.sync, s_barrier, a split barrier's signal or wait).
    BARRIER = enum.auto()
    #: ``fence.proxy.async``: generic accesses before it are ordered before async ones after.
    FENCE_PROXY = enum.auto()
    #: An asynchronous copy from global into shared memory; completes later.
    ASYNC_COPY = enum.auto()
    #: Waits for outstanding async copies (cp.async.wait_group, s_waitcnt vmcnt, mbarrier wait).
    ASYNC_WAIT = enum.auto()
    #: An atomic read-modify-write.
    ATOMIC = enum.auto()
    #: Reads shared memory through a pointer operand.
    READS_SHARED = enum.auto()
    #: Writes shared memory through a pointer operand.
    WRITES_SHARED = enum.auto()


E = OpEffect
_KIND_NAMES: dict[str, OpEffect] = {
    "none": E.NONE,
    "generic": E.GENERIC_SHARED,
    "async": E.ASYNC_PROXY,
    "barrier": E.BARRIER,
    "fence": E.FENCE_PROXY,
    "async_copy": E.ASYNC_COPY,
    "async_wait": E.ASYNC_WAIT,
    "atomic": E.ATOMIC,
    "reads_shared": E.READS_SHARED,
    "writes_shared": E.WRITES_SHARED,
}

_PTX = "tirx.ptx."
# Exact op names, checked before the prefix rules.
_EXACT: dict[str, OpEffect] = {
    "tirx.tvm_storage_sync": E.BARRIER,
    "tirx.cuda.cta_sync": E.BARRIER,
    "tirx.cuda.syncthreads_and": E.BARRIER,
    "tirx.cuda.syncthreads_or": E.BARRIER,
    "tirx.cuda.warpgroup_sync": E.BARRIER,
    "tirx.cuda.mbarrier_wait": E.BARRIER | E.ASYNC_WAIT,
    "tirx.cuda.atomic_add": E.ATOMIC,
    "tirx.cuda.atomic_cas": E.ATOMIC,
    # Address arithmetic on a shared pointer: no shared-memory traffic of their own.
    "tirx.cuda.cvta_generic_to_shared": E.NONE,
    "tirx.cuda.wgmma_encode_matrix_descriptor": E.NONE,
    "tirx.atomic_add": E.ATOMIC,
    "tirx.s_tir.cp_async_raw": E.GENERIC_SHARED | E.ASYNC_COPY | E.WRITES_SHARED,
    _PTX + "fence_proxy": E.FENCE_PROXY,
    _PTX + "wgmma_fence": E.NONE,
    _PTX + "wgmma_commit_group": E.NONE,
    _PTX + "wgmma_wait_group": E.ASYNC_WAIT,
    _PTX + "cp_async_commit_group": E.NONE,
    _PTX + "cp_async_wait_group": E.ASYNC_WAIT,
    _PTX + "cp_async_wait_all": E.ASYNC_WAIT,
    _PTX + "cp_async_mbarrier_arrive": E.NONE,
    _PTX + "cp_async_bulk_commit_group": E.NONE,
    _PTX + "cp_async_bulk_wait_group": E.ASYNC_WAIT,
    _PTX + "mbarrier_init": E.NONE,
    _PTX + "fence_mbarrier_init": E.NONE,
    _PTX + "tcgen05_fence": E.NONE,
    _PTX + "tcgen05_wait": E.ASYNC_WAIT,
    _PTX + "tcgen05_commit": E.NONE,
    "tilewave.lds_barrier": E.BARRIER,
    "tilewave.barrier_signal": E.BARRIER,
    "tilewave.barrier_wait": E.BARRIER,
    "tilewave.wait_async_ops": E.ASYNC_WAIT,
    "tilewave.commit_async_ops": E.NONE,
    "tilewave.fence_proxy_async": E.FENCE_PROXY,
    # what tilewave.LowerTilewaveOps turns lds_barrier into on ROCm (s_barrier)
    "llvm.amdgcn.s.barrier": E.BARRIER,
    # gfx9 LDS DMA (buffer_load ... lds): global -> LDS without VGPRs, completes on vmcnt
    "llvm.amdgcn.global.load.lds": E.GENERIC_SHARED | E.ASYNC_COPY | E.WRITES_SHARED,
}

# (prefix, effect): the longest matching prefix wins.
_PREFIXES: tuple[tuple[str, OpEffect], ...] = (
    (_PTX + "ldmatrix", E.GENERIC_SHARED | E.READS_SHARED),
    (_PTX + "stmatrix", E.GENERIC_SHARED | E.WRITES_SHARED),
    (_PTX + "cp_async_ca", E.GENERIC_SHARED | E.ASYNC_COPY | E.WRITES_SHARED),
    (_PTX + "cp_async_cg", E.GENERIC_SHARED | E.ASYNC_COPY | E.WRITES_SHARED),
    (_PTX + "wgmma_", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "cp_async_bulk_tensor_g2s", E.ASYNC_PROXY | E.ASYNC_COPY | E.WRITES_SHARED),
    (_PTX + "cp_async_bulk_g2s", E.ASYNC_PROXY | E.ASYNC_COPY | E.WRITES_SHARED),
    (_PTX + "cp_async_bulk_tensor_s2g", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "cp_async_bulk_s2g", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "cp_async_bulk_s2c", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "cp_async_bulk_tensor_prefetch", E.NONE),
    (_PTX + "cp_async_bulk_prefetch", E.NONE),
    (_PTX + "cp_reduce_async_bulk", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "multimem_cp_async_bulk", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "multimem_cp_reduce_async_bulk", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "tcgen05_mma", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "tcgen05_cp", E.ASYNC_PROXY | E.READS_SHARED),
    (_PTX + "bar_sync", E.BARRIER),
    (_PTX + "barrier_sync", E.BARRIER),
    (_PTX + "bar_arrive", E.BARRIER),
    (_PTX + "barrier_arrive", E.BARRIER),
    (_PTX + "bar_red", E.BARRIER),
    (_PTX + "barrier_red", E.BARRIER),
    (_PTX + "mbarrier_arrive", E.BARRIER),
    (_PTX + "mbarrier_try_wait", E.BARRIER | E.ASYNC_WAIT),
    (_PTX + "mbarrier_test_wait", E.BARRIER | E.ASYNC_WAIT),
    (_PTX + "fence_proxy_tensormap", E.NONE),
    (_PTX + "atom", E.ATOMIC),
    (_PTX + "red", E.ATOMIC),
    (_PTX + "redux_sync", E.NONE),  # a warp reduction in registers, not an atomic
)

_USER: dict[str, OpEffect] = {}


@dataclass(frozen=True)
class IntrinsicEntry:
    """One row of the op table as :func:`intrinsic_table` reports it."""

    name: str
    effects: OpEffect
    source: str  # "user", "exact" or "prefix:<prefix>"


def _to_effect(kind: str | OpEffect | Iterable[str | OpEffect]) -> OpEffect:
    if isinstance(kind, OpEffect):
        return kind
    if isinstance(kind, str):
        if kind not in _KIND_NAMES:
            raise IntrinsicRegistrationError(
                f"register_intrinsic: unknown kind {kind!r}; use one of "
                f"{sorted(_KIND_NAMES)} or a tilewave.OpEffect value"
            )
        return _KIND_NAMES[kind]
    effect = E.NONE
    for item in kind:
        effect |= _to_effect(item)
    return effect


def register_intrinsic(
    name: str, kind: str | OpEffect | Iterable[str | OpEffect], *, override: bool = False
) -> None:
    """Tell tilewave what the op ``name`` does to shared memory and the memory proxy.

    Args:
        name: full op name as in ``tvm.ir.Op.list_op_names()`` (e.g. ``"tirx.ptx.foo"``), or
            the function name of a ``T.call_extern`` / ``T.call_intrin`` callee.
        kind: one kind name (``"generic"``, ``"async"``, ``"barrier"``, ``"fence"``,
            ``"async_copy"``, ``"async_wait"``, ``"atomic"``, ``"reads_shared"``,
            ``"writes_shared"``, ``"none"``), an :class:`OpEffect`, or a list of them.
        override: allow replacing an earlier user registration of the same name.

    Raises:
        IntrinsicRegistrationError: empty name, unknown kind, or a second registration
            without ``override=True``.

    Example::

        tilewave.register_intrinsic("my_tma_load", ["async", "async_copy", "writes_shared"])
    """
    if not isinstance(name, str) or not name:
        raise IntrinsicRegistrationError(
            f"register_intrinsic: the op name must be a non-empty string, got {name!r}"
        )
    effect = _to_effect(kind)
    if name in _USER and not override and _USER[name] != effect:
        raise IntrinsicRegistrationError(
            f"register_intrinsic: {name!r} is already registered as {_USER[name]}; "
            "pass override=True to replace it"
        )
    _USER[name] = effect
    forget_kernels()  # (what the analyses learnt of kernels' statements used the old table)


def unregister_intrinsic(name: str) -> None:
    """Remove a user registration made with :func:`register_intrinsic` (no-op if absent)."""
    if _USER.pop(name, None) is not None:
        forget_kernels()


def _lookup(name: str) -> IntrinsicEntry | None:
    if name in _USER:
        return IntrinsicEntry(name, _USER[name], "user")
    if name not in _BUILT_IN:
        _BUILT_IN[name] = _built_in_lookup(name)
    return _BUILT_IN[name]


#: :func:`_built_in_lookup` by name (the built-in tables do not change; the analyses ask
#: about the same few ops at every call)
_BUILT_IN: dict[str, IntrinsicEntry | None] = {}


def _built_in_lookup(name: str) -> IntrinsicEntry | None:
    if name in _EXACT:
        return IntrinsicEntry(name, _EXACT[name], "exact")
    best: tuple[str, OpEffect] | None = None
    for prefix, effect in _PREFIXES:
        if name.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, effect)
    if best is not None:
        return IntrinsicEntry(name, best[1], "prefix:" + best[0])
    return None


def _is_pure(name: str) -> bool:
    """Ops TVM itself marks pure (math, casts, address arithmetic) touch no memory."""
    try:
        op = ir.Op.get(name)
    except Exception:  # not a registered op (an extern function name)
        return False
    kind = op.get_attr("TCallEffectKind")
    return kind is not None and int(kind) <= 1  # kExprAnnotation or kPure


def classify(name: str) -> OpEffect | None:
    """Effects of the op called ``name``, or ``None`` when tilewave does not know it.

    User registrations win over the built-in table; ops TVM marks pure are ``NONE``.
    """
    entry = _lookup(name)
    if entry is not None:
        return entry.effects
    if _is_pure(name):
        return E.NONE
    return None


def op_name(op: ir.Op) -> str:
    """``op.name``, remembered per op (reading the name converts an FFI string every time;
    ops are registered once per process, so a handle always names the same op)."""
    key = hash(op)
    found = _OP_NAMES.get(key)
    if found is None:
        found = _OP_NAMES[key] = (op.name, op)  # (the op kept alive with its name)
    return found[0]


_OP_NAMES: dict[int, tuple[str, ir.Op]] = {}


def callee_name(call: ir.expr.Call) -> str:
    """The name a call is classified by: the op name, or the callee of an extern call."""
    op = call.op
    if type(op) is ir.Op:  # (no subclasses: an exact test skips the FFI classes' ABC check)
        name = op_name(op)
    else:  # a call to another function of the module (a GlobalVar)
        name = str(getattr(op, "name_hint", op))
    if name in ("tirx.call_extern", "tirx.call_pure_extern", "tirx.call_llvm_intrin",
                "tirx.call_llvm_pure_intrin") and len(call.args) > 0:
        first = call.args[0]
        if isinstance(first, ir.expr.StringImm):
            return first.value
        if name.startswith("tirx.call_llvm") and type(first).__name__ == "IntImm":
            # TVMScript stores an LLVM intrinsic as its numeric id
            from tvm.target import codegen

            return str(codegen.llvm_get_intrinsic_name(first.value)) or name
    return name


def classify_call(call: ir.expr.Call) -> OpEffect | None:
    """Effects of a ``Call`` expression (see :func:`classify`)."""
    name = callee_name(call)
    effect = classify(name)
    op = call.op
    if effect is None and type(op) is ir.Op and name != op_name(op):
        effect = _USER.get(op_name(op))
    return effect


def require_classification(call: ir.expr.Call, func_name: str | None, pass_name: str) -> OpEffect:
    """Classify ``call`` or raise :class:`UnclassifiedOpError` naming it and the fix."""
    effect = classify_call(call)
    if effect is None:
        name = callee_name(call)
        raise UnclassifiedOpError(
            f"{pass_name}: cannot tell what op '{name}' does to shared memory "
            f"{where(func_name, call)}. Register it with "
            f"tilewave.register_intrinsic({name!r}, kind=...) (kinds: {sorted(_KIND_NAMES)})."
        )
    return effect


def intrinsic_table() -> list[IntrinsicEntry]:
    """Every registered op tilewave classifies, with its effects (for docs and the CLI)."""
    rows: dict[str, IntrinsicEntry] = {}
    for name in ir.Op.list_op_names():
        entry = _lookup(name)
        if entry is not None:
            rows[name] = entry
    for name in _USER:
        rows[name] = IntrinsicEntry(name, _USER[name], "user")
    return sorted(rows.values(), key=lambda e: e.name)
