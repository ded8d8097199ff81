"""The simulator's memory: a value too large for a float type is stored as inf (what the
GPU's conversion gives), without a NumPy overflow warning."""

from __future__ import annotations

import warnings

import numpy as np

from tilewave.racecheck.memory import Memory


def test_a_value_out_of_a_float_types_range_is_stored_as_inf_without_a_warning():
    memory = Memory(threads=2)
    storage = memory.allocate("S", "shared", 8)
    threads = np.array([0, 1])
    offsets = np.array([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning would fail the test
        memory.store(storage, threads, offsets, np.array([1e300, -1e300]), np.dtype("float16"))
    stored = memory.load(storage, threads, offsets, np.dtype("float16"))
    assert stored.tolist() == [np.inf, -np.inf]
