"""ctypes binding of ``points.c``: grouped index points of one access; overlap and merge of two.

:func:`core` is ``None`` when compiled cores are off or cannot be built; callers then use
their NumPy path. Arrays passed in are C-contiguous int64 NumPy arrays.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import threading
from dataclasses import dataclass
from functools import cache

import numpy as np

from tilewave.native import load

__all__ = ["PointsCore", "core", "pack_programs"]

_P = ctypes.c_void_p
_N = ctypes.c_int64

#: error codes of ``tw_points`` (negative results), for messages
ERRORS = {-1: "zero divisor", -2: "value out of range", -3: "bad program", -4: "out of memory"}


@dataclass(frozen=True)
class PointsCore:
    """The loaded library and its opcode numbering (``{name: opcode}``)."""

    library: ctypes.CDLL
    opcodes: dict[str, int]

    def points(
        self,
        program: np.ndarray,
        counts: tuple[int, int],
        axes: list[np.ndarray],
        ties: list[tuple[int, int, int]],
    ) -> np.ndarray | int:
        """Distinct keys ascending, then the lowest thread at each, then the highest (one
        array), or the negative error code of ``tw_points`` (see :data:`ERRORS`). ``program`` and
        ``counts`` (programs, threads) as :func:`pack_programs` made them; ``ties``:
        ``(axis, offset, count)`` each."""
        lens = [len(values) for values in axes]
        head = [*lens, *itertools.accumulate(lens[:-1], initial=0)] if axes else []
        for part in zip(*ties, strict=True) if ties else ():
            head.extend(part)
        size = math.prod(lens)
        input_words = len(head) + sum(lens)
        reused = _buffers(size, input_words)
        reused.input[: len(head)] = head
        if axes:
            np.concatenate(axes, out=reused.input[len(head) : input_words], casting="unsafe")
        found = self.library.tw_points(
            program.ctypes.data, *counts, reused.input_address, len(axes), len(ties),
            reused.scratch_address, len(reused.scratch), reused.out_address, reused.capacity,
        )  # fmt: skip
        if found < 0:
            return int(found)
        cap = reused.capacity
        out = reused.out
        return np.concatenate((out[:found], out[cap : cap + found], out[2 * cap : 2 * cap + found]))

    def overlap(
        self, a: np.ndarray, a_address: int, b: np.ndarray, b_address: int, ordered: bool
    ) -> bool:
        """Whether grouped point sets ``a`` and ``b`` (as :meth:`points` returns them, at
        the given addresses) share a key touched by two different threads (by any threads
        when not ``ordered``)."""
        library = self.library
        return bool(library.tw_overlap(a_address, len(a) // 3, b_address, len(b) // 3, ordered))

    def merge(self, a: np.ndarray, a_address: int, b: np.ndarray, b_address: int) -> np.ndarray:
        """Grouped point sets ``a`` and ``b`` (as :meth:`points` returns them, at the given
        addresses) as one: every key of either, with the lowest and the highest thread of
        either there."""
        out = np.empty(len(a) + len(b), np.int64)
        found = self.library.tw_merge(
            a_address, len(a) // 3, b_address, len(b) // 3, out.ctypes.data
        )
        return out[: 3 * found]


#: buffers reused between calls up to this many words (fresh memory costs page faults)
_REUSED_WORDS = 1 << 23
_reused = threading.local()


class _Buffers:
    """Input, scratch and output words for ``tw_points``, with their addresses."""

    def __init__(self, size: int, input_words: int, scratch_words: int) -> None:
        self.capacity = max(size, 1)
        self.input = np.empty(max(input_words, 1), np.int64)
        self.scratch = np.empty(scratch_words, np.int64)
        self.out = np.empty(3 * self.capacity, np.int64)
        self.input_address = self.input.ctypes.data
        self.scratch_address = self.scratch.ctypes.data
        self.out_address = self.out.ctypes.data

    def fits(self, size: int, input_words: int, scratch_words: int) -> bool:
        """Whether these buffers serve a call of this size."""
        return (
            self.capacity >= size
            and len(self.input) >= input_words
            and len(self.scratch) >= scratch_words
        )


def _buffers(size: int, input_words: int) -> _Buffers:
    """Buffers for a grid of ``size`` points: this thread's reused ones (grown where
    needed), or fresh ones for grids too large to keep buffers for. The scratch leaves
    room for ``tw_points`` to group keys in a table."""
    scratch_words = 10 * size + 12288 + _workspace()
    if scratch_words > _REUSED_WORDS:
        return _Buffers(size, input_words, 4 * size + _workspace())
    held: _Buffers | None = getattr(_reused, "buffers", None)
    if held is None or not held.fits(size, input_words, scratch_words):
        grown = (size, input_words, scratch_words)
        if held is not None:
            grown = (
                max(size, held.capacity),
                max(input_words, len(held.input)),
                max(scratch_words, len(held.scratch)),
            )
        held = _Buffers(*grown)
        _reused.buffers = held
    return held


@cache
def _workspace() -> int:
    points_core = core()
    return 0 if points_core is None else int(points_core.library.tw_workspace())


def pack_programs(programs: list[list[int]], thread_extents: list[int]) -> np.ndarray:
    """The ``program`` words of ``tw_points``: start offsets, lengths, thread extents,
    then the programs (address first, conditions after)."""
    lengths = [len(p) for p in programs]
    starts = list(itertools.accumulate(lengths[:-1], initial=0))
    words = [*starts, *lengths, *thread_extents, *itertools.chain.from_iterable(programs)]
    return np.array(words, np.int64)


@cache
def core() -> PointsCore | None:
    """The compiled points core, or ``None`` (compiled cores off or not buildable)."""
    library = load("points")
    if library is None:
        return None
    library.tw_opcode_names.restype = ctypes.c_char_p
    library.tw_opcode_names.argtypes = []
    library.tw_points.restype = _N
    library.tw_points.argtypes = [_P, _N, _N, _P, _N, _N, _P, _N, _P, _N]
    library.tw_workspace.restype = _N
    library.tw_workspace.argtypes = []
    library.tw_overlap.restype = _N
    library.tw_overlap.argtypes = [_P, _N, _P, _N, _N]
    library.tw_merge.restype = _N
    library.tw_merge.argtypes = [_P, _N, _P, _N, _P]
    names = library.tw_opcode_names().decode().split()
    return PointsCore(library, {name: code for code, name in enumerate(names)})
