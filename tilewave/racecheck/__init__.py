"""racecheck: execute lowered TIR for whole thread blocks and report races and deadlocks.

``tilewave.racecheck(func, "sm_90a")`` runs every thread of one (or a few) blocks of a
PrimFunc on the CPU under several schedules, records happens-before between the block's
threads and its asynchronous units (cp.async, TMA, wgmma) with vector clocks, and reports
data races on shared memory (by byte, through every view of an allocation), missing
``fence.proxy.async``, deadlocks, out-of-bounds and uninitialised shared reads.

It shares no code with :mod:`tilewave.analysis` or the passes, so it can judge them: it
imports only :mod:`tilewave.ir`, :mod:`tilewave.targets` and :mod:`tilewave.errors`.
See docs/racecheck.md.
"""

from tilewave.racecheck.api import racecheck
from tilewave.racecheck.findings import Finding, Report
from tilewave.racecheck.schedule import DEFAULT_SCHEDULES

__all__ = ["DEFAULT_SCHEDULES", "Finding", "Report", "racecheck"]
