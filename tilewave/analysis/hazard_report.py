"""What the shared-memory verifier reports: one unsynchronised conflicting pair of accesses.

:func:`tilewave.analysis.shared_hazards.find_shared_hazards` and the checks of Hopper's
async protocol it runs (:mod:`tilewave.analysis.proxy_fence_check`,
:mod:`tilewave.analysis.mbarrier_parity_check`) report in these terms.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tilewave.analysis.shared_access import SharedAccess

__all__ = ["HazardKind", "SharedHazard"]


class HazardKind(enum.Enum):
    """The order of a conflicting pair: which of the two writes."""

    RAW = "read-after-write"
    WAR = "write-after-read"
    WAW = "write-after-write"


@dataclass(frozen=True)
class SharedHazard:
    """One unsynchronised conflicting pair.

    Attributes:
        buffer: name of the shared buffer.
        kind: RAW, WAR or WAW (an atomic counts as a read and a write).
        first: the access that comes first on the barrier-free path.
        second: the access that comes after it.
    """

    buffer: str
    kind: HazardKind
    first: SharedAccess
    second: SharedAccess

    def __str__(self) -> str:
        return (
            f"{self.kind.name} on {self.buffer}: `{self.first.describe()}` then "
            f"`{self.second.describe()}` with no barrier between them"
        )
