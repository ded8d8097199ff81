"""Large index spaces are searched in their first values before they are enumerated whole
(a small sample, then a larger one): an overlap found there is the answer (the whole space
is not enumerated), and a sample without one never stands for a proof of disjointness.
Spaces within the larger sample are taken whole at once."""

from __future__ import annotations

from typing import Any

import pytest
from enumeration_space import BUFFER, EXTENTS, TX
from tvm import tirx

import tilewave.analysis.index_enumeration as enumeration
from tilewave.analysis.index_enumeration import (
    SAMPLE_POINTS,
    SMALL_SAMPLE_POINTS,
    enumerate_no_overlap,
)
from tilewave.analysis.shared_access import AccessKind, AccessScope, LoopRange, SharedAccess

#: a copy's element range (no ``For`` statement), long enough that one side's points exceed
#: the sample: 32,768 elements times the thread values
ELEMENTS = 1 << 15


def _tile_access(offset: int, kind: AccessKind, elements: int = ELEMENTS) -> SharedAccess:
    element = LoopRange(tirx.Var("elem", "int32"), 0, elements)
    scope = AccessScope((element,))
    return SharedAccess(BUFFER, kind, (element.var + offset,), None, scope.loops, scope)


@pytest.fixture
def enumerations(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The sample size of every enumeration of one side's points (None: the whole)."""
    seen: list[int | None] = []
    original = enumeration._Side._enumerate

    def recording(self: Any, fixed: Any, ties: Any, sample: int | None) -> Any:
        seen.append(sample)
        return original(self, fixed, ties, sample)

    monkeypatch.setattr(enumeration._Side, "_enumerate", recording)
    return seen


def test_an_overlap_of_large_tiles_is_found_in_the_sample(enumerations):
    write = _tile_access(0, AccessKind.ASYNC_WRITE)
    read = _tile_access(100, AccessKind.READ)
    assert ELEMENTS * 2 > SAMPLE_POINTS
    assert enumerate_no_overlap(write, read, EXTENTS, None, False) is False
    # found in the small sample: never the larger one, never the whole 32,768-element tiles
    assert enumerations == [SMALL_SAMPLE_POINTS, SMALL_SAMPLE_POINTS]


def test_large_disjoint_tiles_are_enumerated_whole(enumerations):
    write = _tile_access(0, AccessKind.ASYNC_WRITE)
    # apart, but only past the sampled first values of each tile
    read = _tile_access(ELEMENTS + 5, AccessKind.READ)
    assert enumerate_no_overlap(write, read, EXTENTS, None, False) is True
    assert enumerations[:2] == [SMALL_SAMPLE_POINTS, SMALL_SAMPLE_POINTS]
    assert SAMPLE_POINTS in enumerations and None in enumerations  # then larger, then whole


def test_small_spaces_are_answered_by_the_first_pass_alone(enumerations):
    row = TX * 4
    write = SharedAccess(BUFFER, AccessKind.WRITE, (row,), None, (), AccessScope())
    read = SharedAccess(BUFFER, AccessKind.READ, (row + 1,), None, (), AccessScope())
    assert enumerate_no_overlap(write, read, EXTENTS, None, True) is True
    # one enumeration per side, at the first level, taken whole: none repeated
    assert enumerations == [SMALL_SAMPLE_POINTS, SMALL_SAMPLE_POINTS]


def test_an_overlap_past_the_small_sample_is_found_in_the_larger_one(enumerations):
    write = _tile_access(0, AccessKind.ASYNC_WRITE)
    # the first 512 points of each tile are apart; the first 16,384 are not
    read = _tile_access(2 * SMALL_SAMPLE_POINTS, AccessKind.READ)
    assert enumerate_no_overlap(write, read, EXTENTS, None, False) is False
    assert enumerations == [SMALL_SAMPLE_POINTS] * 2 + [SAMPLE_POINTS] * 2


def test_a_space_within_the_larger_sample_is_taken_whole_at_once(enumerations):
    elements = SAMPLE_POINTS // 4  # more points than the small sample, fewer than the larger
    assert elements > SMALL_SAMPLE_POINTS
    write = _tile_access(0, AccessKind.ASYNC_WRITE, elements)
    read = _tile_access(elements, AccessKind.READ, elements)  # right after it: apart
    assert enumerate_no_overlap(write, read, EXTENTS, None, False) is True
    assert enumerations == [SMALL_SAMPLE_POINTS, SMALL_SAMPLE_POINTS]  # final: not cut


def test_a_side_taken_whole_is_not_enumerated_again_at_the_next_level(enumerations):
    large = _tile_access(0, AccessKind.ASYNC_WRITE)  # cut at both sample sizes
    small = _tile_access(ELEMENTS + 5, AccessKind.READ, 64)  # whole at once; apart
    assert enumerate_no_overlap(large, small, EXTENTS, None, False) is True
    # the small side once; the large side at each size in turn
    assert enumerations == [SMALL_SAMPLE_POINTS, SMALL_SAMPLE_POINTS, SAMPLE_POINTS, None]
