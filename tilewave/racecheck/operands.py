"""What the op handlers (:mod:`tilewave.racecheck.semantics`) and the executor
(:mod:`tilewave.racecheck.machine`) hand each other: a resolved memory operand, and the
signal that threads must wait."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilewave.racecheck.memory import Storage

__all__ = ["Access", "Blocked"]


class Blocked(Exception):
    """Raised by an op handler: these threads wait here (their pc does not advance)."""

    def __init__(self, threads: np.ndarray, reason: str,
                 reasons: dict[int, str] | None = None) -> None:
        super().__init__(reason)
        self.threads = threads
        self.reason = reason
        self.reasons = reasons or {}

    def reason_of(self, thread: int) -> str:
        """Why ``thread`` waits (threads of one group may wait on different objects)."""
        return self.reasons.get(thread, self.reason)


@dataclass
class Access:
    """A resolved memory operand: storage, per-thread byte offsets, element dtype."""

    storage: Storage
    offsets: np.ndarray
    dtype: np.dtype
