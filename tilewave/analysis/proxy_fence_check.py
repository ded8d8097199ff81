"""The hazard verifier's check of proxy fences: ``fence.proxy.async`` and
``fence.mbarrier_init``.

Hopper reaches shared memory through two proxies. Plain stores, ``stmatrix`` and
``cp.async`` go through the *generic* proxy; TMA (``cp.async.bulk*``) and ``wgmma`` operand
reads go through the *async* proxy, and the two are not ordered by program order or by a
barrier alone: a generic write is visible to a later async-proxy access only with a
``fence.proxy.async`` between them (PTX ISA, "Proxies" and "membar/fence"). Likewise an
``mbarrier.init`` (a generic write of the mbarrier object) is visible to the TMA's
``complete_tx`` and to other threads only after ``fence.mbarrier_init`` (the issue 11
model: "init needs fence.mbarrier_init + one block barrier before first use").

Two rules, checked on the verifier's own control-flow graph of one thread's program
(:mod:`tilewave.analysis.shared_hazards`), independently of ``InjectFenceProxy`` and
:mod:`tilewave.analysis.proxy_state`:

1. from every generic write of shared memory, no path may reach an async-proxy access
   (read or write) of bytes it may overlap without passing a ``fence.proxy.async``;
2. from every ``mbarrier.init``, no path may reach a use of that mbarrier (arrive, wait, a
   TMA completing on it) without passing a ``fence.mbarrier_init`` or a
   ``fence.proxy.async``.

The graph is the program of every thread, so a path covers both the writing thread's own
later accesses and, through a barrier, another thread's: a fence anywhere on the path is
accepted, whether the writer runs it before the barrier (CUTLASS's
``fence_view_async_shared`` then ``__syncthreads``) or the issuing thread after it
(``InjectFenceProxy``'s placement) — the fence is cumulative over what the barrier ordered
before it. Whether the pair is *also* ordered between threads (a barrier) is the main
verifier's business; this module only asks for the fence.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tvm import ir, tirx

from tilewave.analysis.hazard_report import HazardKind, SharedHazard
from tilewave.analysis.shared_access import AccessKind, SharedAccess, may_conflict
from tilewave.ir.intrinsics import OpEffect, callee_name, classify_call

__all__ = ["MissingFenceHazard", "missing_fence_hazards"]

_PROXY_FENCES = frozenset({"tirx.ptx.fence_proxy", "tilewave.fence_proxy_async"})
_INIT_FENCE = "tirx.ptx.fence_mbarrier_init"


@dataclass(frozen=True)
class MissingFenceHazard(SharedHazard):
    """A :class:`SharedHazard` whose two accesses need a fence, not (only) a barrier.

    Attributes:
        fence: the fence missing between them (``fence.proxy.async`` or
            ``fence.mbarrier_init``).
    """

    fence: str = "fence.proxy.async"

    def __str__(self) -> str:
        if self.fence == "fence.mbarrier_init":
            return (
                f"missing fence.mbarrier_init on {self.buffer}: `{self.first.describe()}` "
                f"(mbarrier.init) reaches `{self.second.describe()}` with no "
                "fence.mbarrier_init after the init: put T.ptx.fence.mbarrier_init."
                "release.cluster() after the initialisation, before the barrier that "
                "publishes it"
            )
        return (
            f"missing fence.proxy.async on {self.buffer}: `{self.first.describe()}` "
            f"(generic proxy) then `{self.second.describe()}` (async proxy: TMA / wgmma) "
            "with no fence.proxy.async between them: put "
            'T.ptx.fence("proxy", "async", "shared::cta", "") after the writes'
        )


def _call(stmt: Any) -> Any:
    value = getattr(stmt, "value", None) if isinstance(stmt, tirx.Evaluate) else None
    return value if isinstance(value, ir.expr.Call) else None


def _is_proxy_fence(stmt: Any) -> bool:
    call = _call(stmt)
    if call is None or callee_name(call) not in _PROXY_FENCES:
        return False
    # T.ptx.fence("proxy", "async", ...): only the async proxy kind orders TMA / wgmma
    words = {a.value for a in call.args if isinstance(a, ir.expr.StringImm)}
    return callee_name(call).startswith("tilewave.") or "async" in words


def _is_init_fence(stmt: Any) -> bool:
    call = _call(stmt)
    return call is not None and callee_name(call) == _INIT_FENCE


def _async_proxy(access: SharedAccess) -> bool:
    """An access the async proxy makes (TMA, bulk copies, wgmma operand reads)."""
    call = _call(access.stmt)
    if call is None or access.mbarrier_access is not None:
        return False
    effect = classify_call(call)
    return effect is not None and OpEffect.ASYNC_PROXY in effect


def _generic_write(access: SharedAccess) -> bool:
    return (
        access.mbarrier_access is None
        and access.kind in (AccessKind.WRITE, AccessKind.ATOMIC, AccessKind.ASYNC_WRITE)
        and not _async_proxy(access)
    )


def _reached(nodes: Sequence[Any], start: int, stops: Any) -> list[int]:
    """Nodes reachable from ``start``'s successors without passing a node ``stops`` accepts
    (the stopping node itself is not reached)."""
    seen: set[int] = set()
    queue = deque(nodes[start].succ)
    out = []
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        if stops(nodes[node].stmt):
            continue
        out.append(node)
        queue.extend(nodes[node].succ)
    return out


def missing_fence_hazards(
    nodes: Sequence[Any], thread_extents: Mapping[Any, int]
) -> list[MissingFenceHazard]:
    """Pairs the two rules of this module report, one per (earlier, later) access pair.

    Args:
        nodes: the verifier's control-flow graph nodes (``accesses``, ``stmt``, ``succ``).
        thread_extents: thread index variables and their extents.
    """
    found: list[MissingFenceHazard] = []
    for start, node in enumerate(nodes):
        for access in node.accesses:
            if access.mbarrier_access == "init":
                found.extend(_init_uses(nodes, start, access))
            elif _generic_write(access):
                found.extend(_unfenced_async(nodes, start, access, thread_extents))
    return found


def _unfenced_async(
    nodes: Sequence[Any], start: int, write: SharedAccess, thread_extents: Mapping[Any, int]
) -> list[MissingFenceHazard]:
    out = []
    for later in _reached(nodes, start, _is_proxy_fence):
        for other in nodes[later].accesses:
            if _async_proxy(other) and may_conflict(write, other, thread_extents):
                kind = HazardKind.WAW if other.kind.writes else HazardKind.RAW
                out.append(MissingFenceHazard(write.buffer_name, kind, write, other))
                break  # one report per statement (a wgmma reads A and B through two operands)
    return out


def _init_uses(nodes: Sequence[Any], start: int, init: SharedAccess) -> list[MissingFenceHazard]:
    out = []
    for later in _reached(nodes, start, lambda s: _is_init_fence(s) or _is_proxy_fence(s)):
        for other in nodes[later].accesses:
            if other.mbarrier_access == "use" and other.buffer.same_as(init.buffer):
                out.append(
                    MissingFenceHazard(
                        init.buffer_name, HazardKind.WAW, init, other, "fence.mbarrier_init"
                    )
                )
                return out  # one report per init statement
    return out
