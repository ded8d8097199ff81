"""Python's cyclic garbage collector held off while an analysis runs.

The analyses build many long-lived Python objects (access records, footprints, proof
caches) while the process may already hold hundreds of thousands (TVM's wrappers, a test
run). Each full collection scans all of them, and a pass that allocates steadily triggers
one every few thousand statements: on the 5,000-statement scaling kernel they were a
quarter of InsertSharedBarriers' time. Reference counting still frees everything that is
not part of a cycle; cycles made during the run are collected by the first collection
after it (the collector's usual thresholds, once it is enabled again), so the analyses
avoid making them: ``tests/test_cyclic_gc.py`` checks that a barrier pass leaves none.
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
            gc.enable()


def without_cyclic_gc(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorator: run ``func`` inside :func:`cyclic_gc_paused`."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with cyclic_gc_paused():
            return func(*args, **kwargs)

    return wrapper
