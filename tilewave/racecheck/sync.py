"""The synchronisation objects of one block: barriers, mbarriers, async-op groups.

Each object turns arrivals and waits into happens-before edges on :class:`Clocks` and tells
the executor which threads it releases; none of them executes code.

* :class:`HardwareBarriers`: ``bar.sync``/``bar.arrive`` ids 0-15 with thread counts
  (``__syncthreads()`` is id 0 with the whole block). Arrivals are counted per thread; a
  barrier completes when its count is reached, releases its syncing threads with the join
  of every participant's clock, and resets (PTX ISA, "bar, barrier"). A completed
  generation whose blocking arrivals include an *aligned* one (``bar.sync``,
  ``barrier.sync.aligned``, ``__syncthreads()``) and come from more than one static
  instruction is recorded in :attr:`HardwareBarriers.divergent`: PTX makes that undefined
  ("all threads in CTA will execute the same barrier{.cta} instruction"); arrivals by
  ``bar.arrive`` from other instructions are allowed (PTX's producer/consumer example).
* :class:`SplitBarriers`: a signal half and a wait half (gfx12 ``s_barrier_signal`` /
  ``s_barrier_wait``, ``tilewave.barrier_signal``/``barrier_wait`` before lowering): a
  wait returns once every thread has signalled the generation the waiter signalled.
* :class:`MBarriers`: mbarrier objects in shared memory, keyed by address: an expected
  arrival count, pending arrivals, a transaction count (``expect_tx`` adds,
  ``complete_tx`` from TMA subtracts), and the phase; a phase completes when both reach
  zero, and ``try_wait.parity p`` returns once the current phase's parity differs from
  ``p`` (PTX ISA, "mbarrier").
* :class:`AsyncGroups`: per-thread commit groups of an async unit (``cp.async``, bulk
  copies, ``wgmma``): ``wait_group n`` retires all but the ``n`` newest committed groups;
  uncommitted operations are never retired by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tilewave.racecheck.clocks import Clocks

__all__ = ["AsyncGroups", "HardwareBarriers", "MBarrier", "MBarriers", "SplitBarriers"]


@dataclass
class _Generation:
    expected: int
    arrived: int = 0
    accum_vc: np.ndarray | None = None
    accum_fenced: np.ndarray | None = None
    waiters: list[int] = field(default_factory=list)
    participants: list[int] = field(default_factory=list)
    instrs: set[int] = field(default_factory=set)
    sync_instrs: set[int] = field(default_factory=set)
    aligned: bool = False


def _accumulate(gen: _Generation, clocks: Clocks, threads: np.ndarray) -> None:
    vc, fenced = clocks.release_of(threads)
    gen.accum_vc = vc if gen.accum_vc is None else np.maximum(gen.accum_vc, vc)
    gen.accum_fenced = fenced if gen.accum_fenced is None else np.maximum(gen.accum_fenced,
                                                                        fenced)


class HardwareBarriers:
    """``bar.sync`` / ``bar.arrive`` barriers by id, with their thread counts."""

    def __init__(self, clocks: Clocks, threads: int) -> None:
        self.clocks = clocks
        self.threads = threads
        self.open: dict[int, _Generation] = {}
        self.count_mismatches: list[tuple[int, int, int, int]] = []  # (id, had, got, instr)
        #: (id, the blocking instructions, the threads) of each generation completed by
        #: aligned syncs from more than one static instruction
        self.divergent: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def arrive(self, bar_id: int, count: int, threads: np.ndarray, sync: bool,
               instr: int, aligned: bool = False) -> list[tuple[np.ndarray, _Generation]]:
        """``threads`` arrive at ``bar_id`` expecting ``count``; ``sync`` ones wait;
        ``aligned`` says the instruction is an aligned form (see the module docstring).

        Returns the generations completed by these arrivals, each with the syncing threads
        it releases (the executor advances them past their barrier instruction).
        """
        done: list[tuple[np.ndarray, _Generation]] = []
        pending = list(threads)
        while pending:
            gen = self.open.get(bar_id)
            if gen is None:
                gen = self.open[bar_id] = _Generation(count)
            elif gen.expected != count:
                self.count_mismatches.append((bar_id, gen.expected, count, instr))
            take = pending[: max(1, gen.expected - gen.arrived)]
            pending = pending[len(take):]
            chunk = np.asarray(take, dtype=np.int64)
            _accumulate(gen, self.clocks, chunk)
            self.clocks.tick(chunk)
            gen.arrived += len(take)
            gen.participants += take
            gen.instrs.add(instr)
            if sync:
                gen.waiters += take
                gen.sync_instrs.add(instr)
                gen.aligned |= aligned
            if gen.arrived >= gen.expected:
                del self.open[bar_id]
                if gen.aligned and len(gen.sync_instrs) > 1:
                    self.divergent.append((bar_id, tuple(sorted(gen.sync_instrs)),
                                           tuple(gen.waiters)))
                released = np.asarray(gen.waiters, dtype=np.int64)
                if released.size:
                    self.clocks.acquire(released, gen.accum_vc, gen.accum_fenced)
                done.append((released, gen))
        return done


class SplitBarriers:
    """Signal/wait split barriers over the whole block, by id."""

    def __init__(self, clocks: Clocks, threads: int) -> None:
        self.clocks = clocks
        self.threads = threads
        self.generation: dict[int, int] = {}
        self.open: dict[int, _Generation] = {}
        self.completed: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.signalled: dict[int, np.ndarray] = {}

    def _signalled(self, bar_id: int) -> np.ndarray:
        if bar_id not in self.signalled:
            self.signalled[bar_id] = np.full(self.threads, -1, dtype=np.int64)
        return self.signalled[bar_id]

    def signal(self, bar_id: int, threads: np.ndarray, instr: int) -> bool:
        """``threads`` signal; returns whether that completed a generation."""
        gen_no = self.generation.setdefault(bar_id, 0)
        gen = self.open.setdefault(bar_id, _Generation(self.threads))
        _accumulate(gen, self.clocks, threads)
        self.clocks.tick(threads)
        self._signalled(bar_id)[threads] = gen_no
        gen.arrived += len(threads)
        gen.participants += list(threads)
        gen.instrs.add(instr)
        if gen.arrived < gen.expected:
            return False
        self.completed[(bar_id, gen_no)] = (gen.accum_vc, gen.accum_fenced)
        self.generation[bar_id] = gen_no + 1
        del self.open[bar_id]
        return True

    def wait(self, bar_id: int, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Split ``threads`` into (released, still waiting, never signalled)."""
        gens = self._signalled(bar_id)[threads]
        unsignalled = threads[gens < 0]
        ready = np.zeros(threads.size, dtype=bool)
        for gen_no in np.unique(gens[gens >= 0]):
            edge = self.completed.get((bar_id, int(gen_no)))
            if edge is None:
                continue
            mask = gens == gen_no
            self.clocks.acquire(threads[mask], *edge)
            ready |= mask
        return threads[ready], threads[~ready & (gens >= 0)], unsignalled


@dataclass
class MBarrier:
    """One mbarrier's state (see the module docstring)."""

    expected: int
    pending: int
    tx: int = 0
    phase: int = 0
    accum_vc: np.ndarray | None = None
    accum_fenced: np.ndarray | None = None
    history: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    init_instr: int = -1


class MBarriers:
    """Every initialised mbarrier of the block, keyed by ``(storage id, byte offset)``."""

    def __init__(self, clocks: Clocks) -> None:
        self.clocks = clocks
        self.by_address: dict[tuple[int, int], MBarrier] = {}
        self.on_complete: Callable[[tuple[int, int]], None] = lambda key: None

    def init(self, key: tuple[int, int], count: int, instr: int) -> None:
        """``mbarrier.init`` with ``count`` expected arrivals."""
        self.by_address[key] = MBarrier(count, count, init_instr=instr)

    def _merge(self, bar: MBarrier, vc: np.ndarray, fenced: np.ndarray) -> None:
        bar.accum_vc = vc if bar.accum_vc is None else np.maximum(bar.accum_vc, vc)
        bar.accum_fenced = fenced if bar.accum_fenced is None else np.maximum(
            bar.accum_fenced, fenced)

    def _maybe_complete(self, key: tuple[int, int], bar: MBarrier) -> None:
        while bar.pending <= 0 and bar.tx == 0:
            zeros = np.zeros(self.clocks.vc.shape[0], dtype=np.int32)
            vc = bar.accum_vc if bar.accum_vc is not None else zeros
            fenced = bar.accum_fenced if bar.accum_fenced is not None else zeros
            bar.history[bar.phase] = (vc, fenced)
            bar.phase += 1
            bar.pending += bar.expected
            bar.accum_vc = bar.accum_fenced = None
            self.on_complete(key)

    def arrive(self, key: tuple[int, int], threads: np.ndarray, count: int = 1,
               tx: int = 0) -> list[int]:
        """``threads`` arrive (each counting ``count``, after adding ``tx`` expected
        transaction bytes); returns each thread's phase at arrival (the state token)."""
        bar = self.by_address[key]
        tokens = []
        for thread in threads:
            bar.tx += tx
            tokens.append(bar.phase)
            vc, fenced = self.clocks.release_of(np.asarray([thread]))
            self._merge(bar, vc, fenced)
            self.clocks.tick(int(thread))
            bar.pending -= count
            self._maybe_complete(key, bar)
        return tokens

    def expect_tx(self, key: tuple[int, int], tx: int) -> None:
        """``mbarrier.expect_tx``: more transaction bytes for the current phase."""
        self.by_address[key].tx += tx

    def complete_tx(self, key: tuple[int, int], unit: int, tx: int) -> None:
        """An async copy by ``unit`` delivered ``tx`` bytes to the current phase."""
        bar = self.by_address[key]
        self._merge(bar, self.clocks.vc[unit].copy(), self.clocks.fenced[unit].copy())
        bar.tx -= tx
        self._maybe_complete(key, bar)

    def parity_done(self, key: tuple[int, int], parity: np.ndarray) -> np.ndarray:
        """Per waiter: has the phase with ``parity`` completed (current parity differs)?"""
        bar = self.by_address[key]
        return (bar.phase % 2) != (parity % 2)

    def phase_done(self, key: tuple[int, int], token: np.ndarray) -> np.ndarray:
        """Per waiter: has the phase named by an arrive's state token completed?"""
        return self.by_address[key].phase > token

    def acquire_latest(self, key: tuple[int, int], threads: np.ndarray) -> None:
        """``threads`` observed the most recently completed phase."""
        bar = self.by_address[key]
        if bar.phase > 0:
            self.clocks.acquire(threads, *bar.history[bar.phase - 1])


class AsyncGroups:
    """Commit groups of one kind of async unit, per issuing thread.

    ``unit_of(threads)`` maps issuing threads to the unit whose epochs their operations
    carry; a group is remembered by the unit epoch of its newest operation.
    """

    def __init__(self, clocks: Clocks, threads: int, unit_of: Callable[[np.ndarray], np.ndarray],
                 auto_commit: bool = False) -> None:
        self.clocks = clocks
        self.unit_of = unit_of
        self.auto_commit = auto_commit
        self.groups: list[list[int]] = [[] for _ in range(threads)]
        self.issued = np.zeros(threads, dtype=bool)

    def issued_by(self, threads: np.ndarray) -> None:
        """``threads`` issued an operation (already given its epoch on its unit)."""
        self.issued[threads] = True
        if self.auto_commit:
            self.commit(threads)

    def commit(self, threads: np.ndarray) -> None:
        """``commit_group``: close each thread's open group (empty groups too)."""
        epochs = self.clocks.vc[self.unit_of(threads), self.unit_of(threads)]
        for thread, epoch in zip(threads.tolist(), epochs.tolist(), strict=True):
            self.groups[thread].append(epoch)

    def wait(self, threads: np.ndarray, keep: int, include_open: bool = False) -> None:
        """``wait_group keep``: retire all but the ``keep`` newest groups of each thread;
        ``include_open`` (``wait_all``) first commits the open group."""
        if include_open:
            self.commit(threads)
        units = self.unit_of(threads)
        for thread, unit in zip(threads.tolist(), np.atleast_1d(units).tolist(), strict=True):
            groups = self.groups[thread]
            if len(groups) > keep:
                epoch = groups[len(groups) - keep - 1]
                self.clocks.vc[thread, unit] = max(self.clocks.vc[thread, unit], epoch)
                self.clocks.fenced[thread, unit] = max(self.clocks.fenced[thread, unit], 0)
                del groups[: len(groups) - keep]
