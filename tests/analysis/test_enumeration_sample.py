"""Large index spaces are searched in their first values before they are enumerated whole:
an overlap found there is the answer (the whole space is not enumerated), and a sample
without one never stands for a proof of disjointness."""

from __future__ import annotations

from typing import Any

import pytest
from enumeration_space import BUFFER, EXTENTS, TX
from tvm import tirx

import tilewave.analysis.index_enumeration as enumeration
from tilewave.analysis.index_enumeration import SAMPLE_POINTS, enumerate_no_overlap
from tilewave.analysis.shared_access import AccessKind, AccessScope, LoopRange, SharedAccess

#: a copy's element range (no ``For`` statement), long enough that one side's points exceed
#: the sample: 32,768 elements times the thread values
ELEMENTS = 1 << 15


def _tile_access(offset: int, kind: AccessKind) -> SharedAccess:
    element = LoopRange(tirx.Var("elem", "int32"), 0, ELEMENTS)
    scope = AccessScope((element,))
    return SharedAccess(BUFFER, kind, (element.var + offset,), None, scope.loops, scope)


@pytest.fixture
def enumerations(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The ``sample`` flag of every enumeration of one side's points."""
    seen: list[bool] = []
    original = enumeration._Side._enumerate

    def recording(self: Any, fixed: Any, ties: Any, sample: bool) -> Any:
        seen.append(sample)
        return original(self, fixed, ties, sample)

    monkeypatch.setattr(enumeration._Side, "_enumerate", recording)
    return seen


def test_an_overlap_of_large_tiles_is_found_in_the_sample(enumerations):
    write = _tile_access(0, AccessKind.ASYNC_WRITE)
    read = _tile_access(100, AccessKind.READ)
    assert ELEMENTS * 2 > SAMPLE_POINTS
    assert enumerate_no_overlap(write, read, EXTENTS, None, False) is False
    assert enumerations and all(enumerations)  # never the whole 32,768-element tiles


def test_large_disjoint_tiles_are_enumerated_whole(enumerations):
    write = _tile_access(0, AccessKind.ASYNC_WRITE)
    # apart, but only past the sampled first values of each tile
    read = _tile_access(ELEMENTS + 5, AccessKind.READ)
    assert enumerate_no_overlap(write, read, EXTENTS, None, False) is True
    assert True in enumerations and False in enumerations


def test_small_spaces_are_answered_by_the_first_pass_alone(enumerations):
    row = TX * 4
    write = SharedAccess(BUFFER, AccessKind.WRITE, (row,), None, (), AccessScope())
    read = SharedAccess(BUFFER, AccessKind.READ, (row + 1,), None, (), AccessScope())
    assert enumerate_no_overlap(write, read, EXTENTS, None, True) is True
    assert enumerations == [True, True]  # one enumeration per side, none repeated whole
