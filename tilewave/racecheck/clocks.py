"""Happens-before as vector clocks over the *actors* of one block.

Actors are the block's threads and the asynchronous units that access shared memory on
their behalf: one ``cp.async`` unit and one bulk-copy (TMA) unit per thread, one ``wgmma``
unit per warp group. ``vc[a, b]`` is the latest event of actor ``b`` known to happen before
actor ``a``'s current point; ``vc[a, a]`` is ``a``'s own epoch, advanced after every release
so that accesses after a release are not covered by it.

A second matrix, ``fenced``, tracks the part of that knowledge that reached ``a`` through a
path containing ``fence.proxy.async`` (PTX ISA "proxy-preserved base causality order"): a
generic-proxy write is visible to an async-proxy access only when its epoch is covered by
the accessor's ``fenced`` row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Actors", "Clocks"]

WARPGROUP = 128  # threads per warp group (wgmma issues per warp group)


@dataclass(frozen=True)
class Actors:
    """The actor numbering of a block of ``threads`` threads."""

    threads: int

    @property
    def groups(self) -> int:
        """Warp groups (at least one, for blocks smaller than 128 threads)."""
        return max(1, -(-self.threads // WARPGROUP))

    @property
    def count(self) -> int:
        """All actors."""
        return 3 * self.threads + self.groups

    def cp_async(self, thread: np.ndarray | int) -> np.ndarray | int:
        """The cp.async unit of ``thread`` (generic proxy, writes shared at its wait)."""
        return self.threads + thread

    def bulk(self, thread: np.ndarray | int) -> np.ndarray | int:
        """The bulk-copy / TMA unit of ``thread`` (async proxy)."""
        return 2 * self.threads + thread

    def wgmma(self, group: np.ndarray | int) -> np.ndarray | int:
        """The wgmma unit of warp group ``group`` (async proxy, reads its operands)."""
        return 3 * self.threads + group

    def describe(self, actor: int) -> str:
        """A reader's name for ``actor``: ``thread 5``, ``cp.async unit of thread 5``..."""
        t = self.threads
        if actor < t:
            return f"thread {actor}"
        if actor < 2 * t:
            return f"cp.async unit of thread {actor - t}"
        if actor < 3 * t:
            return f"bulk/TMA unit of thread {actor - 2 * t}"
        return f"wgmma unit of warp group {actor - 3 * t}"


class Clocks:
    """The vector clocks of every actor (``vc``) and their proxy-fenced part (``fenced``)."""

    def __init__(self, actors: Actors) -> None:
        self.actors = actors
        n = actors.count
        self.vc = np.zeros((n, n), dtype=np.int32)
        self.fenced = np.zeros((n, n), dtype=np.int32)
        idx = np.arange(n)
        self.vc[idx, idx] = 1  # epochs start at 1; 0 means "nothing of that actor"

    def epoch(self, actor: np.ndarray | int) -> np.ndarray | int:
        """Current epoch of ``actor``."""
        return self.vc[actor, actor]

    def tick(self, actors: np.ndarray | int) -> None:
        """Start a new epoch of ``actors`` (after a release or an async issue)."""
        self.vc[actors, actors] += 1

    def release_of(self, actors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The join of ``actors``' clocks: what a barrier they arrive at carries."""
        return self.vc[actors].max(axis=0), self.fenced[actors].max(axis=0)

    def acquire(self, actors: np.ndarray | int, vc: np.ndarray, fenced: np.ndarray) -> None:
        """``actors`` now know everything in ``(vc, fenced)``."""
        self.vc[actors] = np.maximum(self.vc[actors], vc)
        self.fenced[actors] = np.maximum(self.fenced[actors], fenced)

    def fence_proxy(self, threads: np.ndarray) -> None:
        """``fence.proxy.async`` in ``threads``: all they know is now proxy-fenced."""
        self.fenced[threads] = np.maximum(self.fenced[threads], self.vc[threads])
        self.tick(threads)

    def inherit(self, unit: int, threads: np.ndarray) -> None:
        """An async unit issued by ``threads``: it starts after everything they know."""
        vc, fenced = self.release_of(threads)
        own = self.vc[unit, unit]
        self.vc[unit] = np.maximum(self.vc[unit], vc)
        self.fenced[unit] = np.maximum(self.fenced[unit], fenced)
        self.vc[unit, unit] = own + 1
        self.fenced[unit, unit] = self.vc[unit, unit]
