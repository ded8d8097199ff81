"""Python's cyclic garbage collector held off while an analysis runs.

The analyses build many long-lived Python objects (access records, footprints, proof
caches) while the process may already hold hundreds of thousands (TVM's wrappers, a test
run). Each full collection scans all of them, and a pass that allocates steadily triggers
one every few thousand statements: on the 5,000-statement scaling kernel they were a
quarter of InsertSharedBarriers' time. Reference counting still frees everything that is
not part of a cycle; cycles made during the run are collected by a later full collection,
so the analyses avoid making them: ``tests/test_cyclic_gc.py`` checks that a barrier pass
leaves none.

On the way out, what the run allocated and still holds (the per-kernel tables of
:mod:`tilewave.kernel_memory`, the rewritten IR) moves straight to the oldest generation
(``gc.freeze()`` then ``gc.unfreeze()``) instead of being scanned by the young-generation
collection that the first allocation after ``gc.enable()`` would start: those objects are
long-lived, and that scan was ~3% of the barrier pass on the attention kernels. It is
skipped when the process froze objects itself (``gc.get_freeze_count()`` not 0), whose
freeze it would undo.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block if it was enabled, and enable it again
    on the way out (also on an exception). Nested uses leave it to the outermost one."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()  # (every tracked object now in the oldest generation)
            gc.enable()


def without_cyclic_gc(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorator: run ``func`` inside :func:`cyclic_gc_paused`."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with cyclic_gc_paused():
            return func(*args, **kwargs)

    return wrapper
