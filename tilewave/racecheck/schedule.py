"""Schedules: which runnable threads execute the next instruction.

Every schedule runs one program counter's threads at a time; they differ in which group
goes first and how finely they split it. Happens-before checking finds a race on the path
a run takes whatever the interleaving, so schedules matter where the path or the barrier
matching depends on timing: which phase an early mbarrier arrival lands in, a producer
lapping a consumer, the order named-barrier arrivals reach their count.

* ``lockstep``: the lowest program counter first, all its threads together (fast: a
  converged block runs as one group);
* ``reverse``: the highest program counter first (branches that come later in the code run
  ahead);
* ``warps``: lowest program counter, one warp at a time, highest warp first;
* ``random:<seed>``: a random program counter and a random non-empty subset of its warps.
"""

from __future__ import annotations

import numpy as np

from tilewave.errors import PassOptionError

__all__ = ["DEFAULT_SCHEDULES", "Schedule", "make_schedule"]

WARP = 32
#: the schedules :func:`tilewave.racecheck` runs unless told otherwise
DEFAULT_SCHEDULES = ("lockstep", "reverse", "warps", "random:1")


class Schedule:
    """A named policy; :meth:`pick` returns the threads to run next."""

    def __init__(self, name: str, seed: int | None = None) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed) if seed is not None else None

    def pick(self, runnable: np.ndarray, pcs: np.ndarray) -> np.ndarray:
        """Among ``runnable`` threads (at program counters ``pcs``), those to run now."""
        if self.name == "reverse":
            return runnable[pcs == pcs.max()]
        chosen = pcs.min()
        if self.rng is not None:
            chosen = self.rng.choice(np.unique(pcs))
        group = runnable[pcs == chosen]
        if self.name == "warps":
            warps = group // WARP
            return group[warps == warps.max()]
        if self.rng is not None:
            warps = np.unique(group // WARP)
            take = warps[self.rng.random(warps.size) < 0.5]
            if take.size == 0:
                take = warps[[self.rng.integers(warps.size)]]
            return group[np.isin(group // WARP, take)]
        return group


def make_schedule(name: str) -> Schedule:
    """The schedule called ``name`` (see the module docstring).

    Raises:
        PassOptionError: an unknown schedule name.
    """
    if name in ("lockstep", "reverse", "warps"):
        return Schedule(name)
    if name.startswith("random"):
        _, _, seed = name.partition(":")
        try:
            return Schedule(name, int(seed or 0))
        except ValueError:
            pass
    raise PassOptionError(
        f"racecheck: unknown schedule {name!r}; use 'lockstep', 'reverse', 'warps' or "
        "'random:<seed>'."
    )
