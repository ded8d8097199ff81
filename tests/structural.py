"""Structural comparison of a pass's output with the expected kernel of a before/after test."""

from __future__ import annotations

from typing import Any

import tvm


def same(after: Any, expected: Any) -> None:
    """Structural equality up to the function's name (the expected kernel has its own)."""
    symbol = after.attrs["global_symbol"]
    tvm.ir.assert_structural_equal(after, expected.with_attr("global_symbol", symbol))
