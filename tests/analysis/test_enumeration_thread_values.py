"""The thread values an enumeration side keeps under a condition on one thread variable:
right against evaluation, and worked out once per analysis run for structurally equal
conditions (an epilogue's fragment stores each carry their own copy of the role's ``if``)."""

from __future__ import annotations

from typing import Any

import pytest
from enumeration_space import BUFFER, EXTENTS, TX, TX_EXTENT
from tvm import tirx

import tilewave.analysis.index_enumeration as enumeration
from tilewave.analysis.index_enumeration import enumerate_no_overlap
from tilewave.analysis.shared_access import AccessKind, AccessScope, SharedAccess


def _store_under(offset: int, kind: AccessKind) -> SharedAccess:
    """``S[tx + offset]`` under its own copy of ``if tx >= 4``."""
    scope = AccessScope().assuming(tirx.GE(TX, tirx.IntImm("int32", 4)))
    return SharedAccess(BUFFER, kind, (TX + offset,), None, (), scope)


@pytest.fixture
def evaluations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The conditions ``_holds`` evaluates."""
    seen: list[Any] = []
    original = enumeration._holds

    def recording(cond: Any, env: Any, shape: Any) -> Any:
        seen.append(cond)
        return original(cond, env, shape)

    monkeypatch.setattr(enumeration, "_holds", recording)
    return seen


def test_equal_conditions_are_evaluated_once_per_run(evaluations):
    run = dict(EXTENTS)  # one analysis run: one thread-extent map
    first, second = _store_under(0, AccessKind.WRITE), _store_under(64, AccessKind.WRITE)
    assert not first.scope.conditions[0][0].same_as(second.scope.conditions[0][0])
    assert enumerate_no_overlap(first, second, run, None, True) is True
    assert len(evaluations) == 1
    third = _store_under(128, AccessKind.READ)
    assert enumerate_no_overlap(first, third, dict(EXTENTS), None, True) is True
    assert len(evaluations) == 2  # another run evaluates it again


def test_kept_thread_values_are_those_where_the_condition_holds():
    values = enumeration._thread_values_where(
        tirx.GE(TX, tirx.IntImm("int32", 4)),
        TX,
        enumeration.np.arange(TX_EXTENT, dtype="int64"),
        dict(EXTENTS),
    )
    assert values.tolist() == [t for t in range(TX_EXTENT) if t >= 4]
    assert not values.flags.writeable  # shared between sides: nobody may change it
