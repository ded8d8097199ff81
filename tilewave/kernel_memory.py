"""Tables that remember facts about a kernel's nodes across pass runs, and forgetting them.

Some analyses keep module-level tables keyed by TIR nodes or expression structure
(footprints by their index nodes, shared-ness by buffer variable, walk indexes by
statement): within one process, a second run over the same kernel (the verifier after the
pass, a benchmark's repeat) finds what the first run learned. That is what they are for,
but a benchmark timing repeated runs on one module must not count it: :func:`forget_kernels`
empties every such table, so the next run costs what a first run on a new kernel costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["forget_kernels", "kernel_table", "node_fact", "remember"]

_TABLES: list[dict[Any, Any]] = []


def kernel_table() -> dict[Any, Any]:
    """A new module-level table of per-kernel facts, emptied by :func:`forget_kernels`."""
    table: dict[Any, Any] = {}
    _TABLES.append(table)
    return table


def remember(table: dict[Any, Any], key: Any, value: Any, limit: int) -> Any:
    """Store ``value`` under ``key`` in ``table`` and return it; a table holding ``limit``
    entries is emptied first (what it held is worked out again when asked)."""
    if len(table) >= limit:
        table.clear()
    table[key] = value
    return value


def node_fact(
    table: dict[int, tuple[Any, Any]], node: Any, compute: Callable[[Any], Any], limit: int
) -> Any:
    """``compute(node)``, remembered in ``table`` by the node's handle (``hash``) with the
    node kept alive beside it, so the handle cannot come to name another node while the
    entry exists (a table holding ``limit`` entries is emptied first, as by
    :func:`remember`)."""
    key = hash(node)
    found = table.get(key)
    if found is None:
        found = remember(table, key, (compute(node), node), limit)
    return found[0]


def forget_kernels() -> None:
    """Empty every table made by :func:`kernel_table`."""
    for table in _TABLES:
        table.clear()
