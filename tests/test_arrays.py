"""``distinct``: ``np.unique`` of plain integer arrays, without importing ``numpy.ma``."""

from __future__ import annotations

import subprocess
import sys

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

from tilewave.arrays import distinct


@given(st.lists(st.integers(-(2**40), 2**40), max_size=40))
def test_distinct_is_numpy_unique(values):
    flat = np.array(values, np.int64)
    for array in (flat, np.stack([flat, flat[::-1]])):  # (a 2-D array is flattened)
        assert distinct(array).tolist() == np.unique(array).tolist()


def test_distinct_does_not_import_numpy_ma():
    code = (
        "import sys, numpy as np; from tilewave.arrays import distinct; "
        "before = 'numpy.ma' in sys.modules; distinct(np.array([3, 1, 3])); "
        "print(before, 'numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.split()
    if before == "True":
        pytest.skip("this NumPy imports numpy.ma with numpy itself")
    assert after == "False"
