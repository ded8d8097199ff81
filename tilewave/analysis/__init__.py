"""Read-only facts about PrimFuncs: shared accesses, proxy states, hazards.

Analyses return plain dataclasses and change nothing.
"""

from tilewave.analysis.shared_hazards import SharedHazard, find_shared_hazards

__all__ = ["SharedHazard", "find_shared_hazards"]
