"""The period of an index in a loop variable, read from its interval tree.

:func:`tilewave.analysis.index_enumeration.index_period` reads the TIR expression, an FFI
attribute access per node; the loop-fixed screen
(:func:`tilewave.analysis.interval_bounds.apart_with_loops_fixed`) asks it of every index
of every footprint for each loop it fixes, and a swizzled tile index has dozens of nodes.
The screen already holds each index as an interval tree (nested tuples), which carries
everything the period rule reads when the tree is *complete* (no ``None`` part: every
node is a constant, a variable, a cast, a bounded binary operation or a bitwise one). On
such a tree :func:`tree_period` applies the same rule and gives the same answer; on any
other it answers ``None`` and the caller asks ``index_period``.

The rule (see ``index_period``; both apply it at nodes through
:func:`~tilewave.analysis.index_enumeration.node_period`): a leaf that is the variable is
not periodic, any other leaf has period 1; a node none of whose operands mentions the
variable has period 1; ``x % m`` and ``x & (m - 1)`` (``m`` a constant, a power of two for
the mask) with ``x`` affine in the variable (``c * var + terms without it``) have period
``m / gcd(c, m)``; any other node has the least common multiple of its operands' periods
(not periodic when one is not).
"""

from __future__ import annotations

from typing import Any

from tilewave.analysis.index_enumeration import node_period
from tilewave.kernel_memory import kernel_table, remember

__all__ = ["IntervalTree", "tree_period"]

#: an expression as nested tuples: ``("c", value)``, ``("v", handle)``, ``("cast", x)``,
#: ``(operation, x, y)``, ``("k", low, high)`` (a part already bounded); ``None`` where
#: nothing is known (a load, an unknown call). Made by
#: :func:`tilewave.analysis.interval_bounds.interval_tree`.
IntervalTree = tuple[Any, ...] | None

#: (period or None when not periodic, whether the tree mentions the variable)
_Period = tuple[int | None, bool]


def tree_period(tree: IntervalTree, var: int) -> _Period | None:
    """The period in the variable with handle ``var`` of the index behind ``tree`` and
    whether the index mentions it; ``None`` when the tree is not complete (ask the TIR)."""
    if tree is None:
        return None
    op = tree[0]
    if op == "c":
        return 1, False
    if op == "v":
        return (None, True) if tree[1] == var else (1, False)
    if op == "k":
        return None  # (a reduced tree: its bounded parts no longer show their variables)
    # (remembered per compound tree and variable: the trees of a kernel's indices share
    # the subtrees of its Bind values, see interval_tree)
    key = (id(tree), var)
    found = _PERIODS.get(key)
    if found is None:
        # (the tree kept alive with its answer: its id cannot come to name another)
        found = remember(_PERIODS, key, (_compound_period(tree, var), tree), _PERIODS_LIMIT)
    return found[0]


#: tree_period's answers of compound trees by (tree id, variable handle), with the tree
_PERIODS: dict[tuple[int, int], tuple[_Period | None, Any]] = kernel_table()
_PERIODS_LIMIT = 100_000


def _compound_period(tree: tuple[Any, ...], var: int) -> _Period | None:
    parts = []
    for child in tree[1:]:
        part = tree_period(child, var)
        if part is None:
            return None
        parts.append(part)
    return node_period(parts, lambda: _modulus(tree), lambda x: _coefficient(x, var))


def _modulus(tree: tuple[object, ...]) -> tuple[IntervalTree, int] | None:
    """``(x, m)`` for ``x % m`` (``m > 0``) or ``x & (m - 1)`` (``m`` a power of two)."""
    op, operand = tree[0], tree[-1]
    if not (isinstance(operand, tuple) and operand[0] == "c"):
        return None
    value = int(operand[1])  # type: ignore[call-overload]
    if op == "floormod" and value > 0:
        return tree[1], value  # type: ignore[return-value]
    if op == "bitand" and value >= 0 and (value + 1) & value == 0:
        return tree[1], value + 1  # type: ignore[return-value]
    return None


def _coefficient(tree: tuple[Any, ...], var: int) -> int | None:
    """``c`` when the (complete) ``tree`` is ``c * var + (terms without var)``; else None."""
    op = tree[0]
    if op == "v":
        return 1 if tree[1] == var else 0
    if op == "c":
        return 0
    if op == "cast":
        return _coefficient(tree[1], var)
    if op in ("add", "sub"):
        a, b = _coefficient(tree[1], var), _coefficient(tree[2], var)
        if a is None or b is None:
            return None
        return a + b if op == "add" else a - b
    if op == "mul":
        for x, y in ((tree[1], tree[2]), (tree[2], tree[1])):
            if y[0] == "c":
                c = _coefficient(x, var)
                return None if c is None else c * y[1]
    return 0 if not _mentions(tree, var) else None


def _mentions(tree: tuple[Any, ...], var: int) -> bool:
    if tree[0] == "v":
        return tree[1] == var
    if tree[0] == "c":
        return False
    return any(_mentions(child, var) for child in tree[1:])
