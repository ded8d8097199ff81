"""Shadow memory of one shared storage: who last wrote and who read each byte, and when.

Each byte keeps its last write (actor, epoch, instruction, proxy, atomic) and, per reading
actor, the epoch and instruction of its last read since that write (reads by threads use
one column per thread; other readers, such as a wgmma or TMA unit, get a column on their
first read). An access conflicts with a recorded one when they come from different actors,
overlap in bytes, at least one writes (two atomics never conflict), and the recorded epoch
is not covered by the accessor's vector clock. A generic-proxy write followed by an
async-proxy access must also be covered by the accessor's *proxy-fenced* clock.

Checks run on whole batches (every byte touched by every thread executing one statement),
so one NumPy pass handles 256 threads; bytes touched twice within a batch by different
actors are conflicts too (nothing orders two threads inside one instruction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilewave.racecheck.clocks import Clocks

__all__ = ["Conflicts", "Shadow"]

GENERIC, ASYNC = 0, 1


@dataclass
class Conflicts:
    """Conflicting byte pairs found by one check, as parallel arrays.

    ``kind`` is ``"RAW"``, ``"WAR"``, ``"WAW"`` or ``"PROXY"`` (ordered, but the generic
    write never passed a ``fence.proxy.async`` on its way to the async-proxy access).
    """

    kind: str
    byte: np.ndarray
    prior_actor: np.ndarray
    prior_instr: np.ndarray
    actor: np.ndarray


class Shadow:
    """Shadow state of a storage of ``nbytes`` bytes in a block of ``threads`` threads."""

    def __init__(self, nbytes: int, threads: int) -> None:
        self.w_actor = np.full(nbytes, -1, dtype=np.int32)
        self.w_epoch = np.zeros(nbytes, dtype=np.int32)
        self.w_instr = np.zeros(nbytes, dtype=np.int32)
        self.w_proxy = np.zeros(nbytes, dtype=np.uint8)
        self.w_atomic = np.zeros(nbytes, dtype=bool)
        self.r_epoch = np.zeros((nbytes, threads), dtype=np.int32)
        self.r_instr = np.zeros((nbytes, threads), dtype=np.int16)
        self.col_actor = np.arange(threads, dtype=np.int64)
        self._threads = threads

    def _columns(self, actors: np.ndarray) -> np.ndarray:
        cols = np.asarray(actors, dtype=np.int64).copy()
        extra = np.unique(cols[cols >= self._threads])
        for actor in extra:
            hit = np.nonzero(self.col_actor == actor)[0]
            if hit.size == 0:
                self.col_actor = np.append(self.col_actor, actor)
                pad = np.zeros((self.r_epoch.shape[0], 1), dtype=np.int32)
                self.r_epoch = np.hstack([self.r_epoch, pad])
                self.r_instr = np.hstack([self.r_instr, pad.astype(np.int16)])
                col = self.col_actor.size - 1
            else:
                col = int(hit[0])
            cols[cols == actor] = col
        return cols

    def access(self, clocks: Clocks, byte: np.ndarray, actor: np.ndarray, instr: int,
               write: bool, proxy: int = GENERIC, atomic: bool = False) -> list[Conflicts]:
        """Check one batch of byte accesses against the shadow, then record it.

        Args:
            clocks: the block's clocks (read, never changed).
            byte: flat byte indices touched; ``actor``: the actor touching each.
            instr: the instruction's index (named in reports).
            write: whether the batch writes (an atomic is a write).
            proxy: ``GENERIC`` or ``ASYNC``.
            atomic: atomics do not conflict with atomics.
        """
        found: list[Conflicts] = []
        if byte.size == 0:
            return found
        found += self._within_batch(byte, actor, instr, write, atomic)
        found += self._against_write(clocks, byte, actor, write, proxy, atomic)
        if write:
            found += self._against_reads(clocks, byte, actor)
            self.w_actor[byte] = actor
            self.w_epoch[byte] = clocks.vc[actor, actor]
            self.w_instr[byte] = instr
            self.w_proxy[byte] = proxy
            self.w_atomic[byte] = atomic
            self.r_epoch[byte] = 0
        else:
            cols = self._columns(actor)
            self.r_epoch[byte, cols] = clocks.vc[actor, actor]
            self.r_instr[byte, cols] = instr
        return found

    def _within_batch(self, byte: np.ndarray, actor: np.ndarray, instr: int, write: bool,
                      atomic: bool) -> list[Conflicts]:
        if not write or atomic:
            return []
        order = np.lexsort((actor, byte))
        b, a = byte[order], actor[order]
        clash = (b[1:] == b[:-1]) & (a[1:] != a[:-1])
        if not clash.any():
            return []
        idx = np.nonzero(clash)[0]
        instrs = np.full(idx.size, instr, dtype=np.int32)
        return [Conflicts("WAW", b[idx + 1], a[idx], instrs, a[idx + 1])]

    def _against_write(self, clocks: Clocks, byte: np.ndarray, actor: np.ndarray,
                       write: bool, proxy: int, atomic: bool) -> list[Conflicts]:
        prior = self.w_actor[byte]
        live = (prior >= 0) & (prior != actor)
        if atomic:
            live &= ~self.w_atomic[byte]
        if not live.any():
            return []
        b, a, p = byte[live], actor[live], prior[live]
        epoch = self.w_epoch[b]
        unordered = clocks.vc[a, p] < epoch
        found = []
        if unordered.any():
            kind = "WAW" if write else "RAW"
            found.append(Conflicts(kind, b[unordered], p[unordered], self.w_instr[b[unordered]],
                                   a[unordered]))
        if proxy == ASYNC:
            crossing = ~unordered & (self.w_proxy[b] == GENERIC)
            unfenced = crossing & (clocks.fenced[a, p] < epoch)
            if unfenced.any():
                found.append(Conflicts("PROXY", b[unfenced], p[unfenced],
                                       self.w_instr[b[unfenced]], a[unfenced]))
        return found

    def _against_reads(self, clocks: Clocks, byte: np.ndarray,
                       actor: np.ndarray) -> list[Conflicts]:
        epochs = self.r_epoch[byte]  # (k, columns)
        if not epochs.any():
            return []
        known = clocks.vc[actor[:, None], self.col_actor[None, :]]
        other = self.col_actor[None, :] != actor[:, None]
        bad = (epochs > known) & other
        if not bad.any():
            return []
        rows, cols = np.nonzero(bad)
        return [Conflicts("WAR", byte[rows], self.col_actor[cols],
                          self.r_instr[byte[rows], cols].astype(np.int32), actor[rows])]
