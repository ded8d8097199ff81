"""Warp roles: the threads a thread-dependent branch runs, when they are whole warps.

A warp-specialised kernel splits its block by the warp-group index (``wg = tx // 128``;
``if wg == 0: producer else: consumers``). Inside one role, a barrier over exactly that
role's threads — a named barrier ``bar.sync id, n`` with ``n`` the role's thread count —
orders the role's accesses without stopping the other roles (a ``__syncthreads`` there
would deadlock). :func:`role_of` evaluates the path conditions of a statement for every
thread of the block and returns the role when the threads that run it are whole warps.

Conditions the same for every thread (``kt > 0``; by default: those that do not mention a
thread index, or what the caller's ``uniform`` says, e.g. the uniformity analysis) do not
change the role; any other condition mixing thread indices with other values, or reading
memory other threads write, cannot be evaluated here (no role).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import tirx

from tilewave.analysis.local_scalars import ScalarForwarder
from tilewave.analysis.named_barrier_order import (
    WARP_SIZE,
    _evaluate,
    _Unknown,
    block_thread_values,
)

__all__ = ["WarpRole", "role_of"]


@dataclass(frozen=True)
class WarpRole:
    """The whole warps that run a statement: their linear thread ids (as a sorted tuple)."""

    threads: tuple[int, ...]

    @property
    def count(self) -> int:
        """How many threads the role has (the named barrier's thread count)."""
        return len(self.threads)


def _terms(cond: Any) -> list[Any]:
    if isinstance(cond, tirx.And):
        return _terms(cond.a) + _terms(cond.b)
    return [cond]


def role_of(
    conditions: tuple[tuple[Any, bool], ...],
    tags: Mapping[Any, str],
    extents: Mapping[Any, int],
    scalars: Mapping[Any, Any] | None = None,
    resolve: Any = None,
    uniform: Callable[[Any], bool] | None = None,
) -> WarpRole | None:
    """The warp role that runs under ``conditions`` (``(condition, holds)`` pairs, as in
    ``AccessScope``), or ``None`` when it is not whole warps or cannot be computed.
    ``uniform(expr)``: whether a condition or one of its conjuncts is the same in every
    thread of the block (default: it mentions no thread index)."""
    block = block_thread_values(dict(tags), dict(extents))
    if block is None:
        return None
    total, env = block
    forward = ScalarForwarder(dict(scalars or {}))

    def thread_free(expr: Any) -> bool:
        free = tirx.analysis.undefined_vars(expr, [])
        return not any(any(v.same_as(t) for t in tags) for v in free)

    same_everywhere = uniform if uniform is not None else thread_free
    mask = np.ones(total, bool)
    for cond, holds in conditions:
        expr = forward.visit(resolve(cond) if resolve is not None else cond)
        if same_everywhere(expr):
            continue  # the same for every thread
        terms = _terms(expr) if holds else [expr]
        value = np.ones(total, bool)
        for term in terms:
            if same_everywhere(term):
                continue
            try:
                part = np.broadcast_to(np.asarray(_evaluate(term, env)), (total,)).astype(bool)
            except _Unknown:
                return None
            value &= part
        mask &= value if holds else ~value
    warps = mask.reshape(-1, WARP_SIZE)
    if not np.all(warps == warps[:, :1]) or not mask.any():
        return None
    return WarpRole(tuple(int(t) for t in np.flatnonzero(mask)))
