"""The cyclic collector is off while tilewave's analyses run and back on afterwards."""

from __future__ import annotations

import gc
import importlib

import pytest

from tilewave.analysis.access_model import SharedAccess
from tilewave.cyclic_gc import cyclic_gc_paused, without_cyclic_gc
from tilewave.examples_builtin import block_sum, tiled_transpose
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers


@pytest.fixture(autouse=True)
def _collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_inside_and_enabled_after() -> None:
    with cyclic_gc_paused():
        assert not gc.isenabled()
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves it to the outer one
    assert gc.isenabled()


def test_enabled_again_after_an_exception() -> None:
    @without_cyclic_gc
    def failing() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        failing()
    assert gc.isenabled()


def test_left_disabled_when_it_was_disabled() -> None:
    gc.disable()
    with cyclic_gc_paused():
        pass
    assert not gc.isenabled()


def test_the_barrier_pass_runs_with_it_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    # (the package exports a function of the module's name: import the module itself)
    pass_module = importlib.import_module("tilewave.transforms.insert_shared_barriers")
    original = pass_module._Placer.place

    def place(self, body):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return original(self, body)

    monkeypatch.setattr(pass_module._Placer, "place", place)

    out = insert_shared_barriers(tiled_transpose, "sm_90a")
    assert seen and not any(seen)
    assert gc.isenabled()
    assert "lds_barrier" in out.script()


def _live_access_records() -> int:
    gc.collect()
    return sum(type(obj) is SharedAccess for obj in gc.get_objects())


def test_a_barrier_pass_leaves_neither_access_records_nor_cycles_behind() -> None:
    # the analyses keep per-access results on the record itself (`SharedAccess.memo`) or
    # hold records weakly; a cached value that refers back to its record (or to another
    # record that refers back) would make a cycle or keep every record alive
    before = _live_access_records()
    for kernel in (block_sum, tiled_transpose):
        insert_shared_barriers(kernel, "sm_90a")
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        insert_shared_barriers(block_sum, "sm_90a")
        gc.collect()
        cyclic = [obj for obj in gc.garbage if type(obj) is SharedAccess]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []  # reference counting alone frees them
    assert _live_access_records() == before


def _collections_after_block(freeze_first: bool) -> list[int]:
    """The generations of the collections started by allocations right after a paused
    block that allocated 2,000 tracked containers it keeps."""
    gc.collect()
    started: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    if freeze_first:
        gc.freeze()
    try:
        gc.callbacks.append(record)  # (none can start inside the block: it is off there)
        try:
            with cyclic_gc_paused():
                kept = [[i] for i in range(2000)]
            more = [[i] for i in range(10)]
        finally:
            gc.callbacks.remove(record)
        assert kept and more and gc.is_tracked(kept[0])
    finally:
        if freeze_first:
            gc.unfreeze()
    return started


def test_what_the_block_kept_is_not_scanned_as_young_objects() -> None:
    # (moved to the oldest generation on the way out: no young collection meets them)
    assert _collections_after_block(freeze_first=False) == []
    assert gc.get_freeze_count() == 0


def test_a_freeze_of_the_process_is_left_as_it_is() -> None:
    # the block's objects stay young (the first allocation after it starts a collection
    # of them) rather than the process's own freeze being undone
    assert _collections_after_block(freeze_first=True) != []
