"""Small NumPy helpers the analyses share.

``np.unique`` asks ``np.ma.is_masked`` of its input, and NumPy imports ``numpy.ma`` on
that first use (about 10 ms, once per process: a tenth of a small kernel's barrier pass);
the analyses need only the distinct values of plain integer arrays.
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct"]


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (flattened), ascending: ``np.unique(values)``."""
    ordered = np.sort(values, axis=None)
    if ordered.size < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
