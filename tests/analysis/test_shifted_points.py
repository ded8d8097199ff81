"""Whole-space points of accesses whose indices add constants to a shared base
(``whole_space_points`` enumerates the base once per analysis run and moves its points by
each access's offset): every answer equals a brute-force listing of the addresses and of
the lowest and highest thread touching each, over every thread and iteration, whatever
the offsets (either operand of an ``Add``, a ``Sub``, any dimension of a 2-D buffer) and path
conditions of the accesses sharing the base."""

from __future__ import annotations

import itertools
from typing import Any

import hypothesis.strategies as st
import numpy as np
from expr_eval import evaluate
from hypothesis import given, settings
from tvm import tirx
from tvm.script import tirx as T

import tilewave.analysis.index_enumeration as enumeration
from tilewave.analysis.shared_access import AccessKind, AccessScope, LoopRange, SharedAccess

TX_EXTENT, TY_EXTENT, TRIPS = 8, 2, 3
ROWS, COLUMNS = 24, 40


@T.prim_func
def _template(A: T.Buffer((64,), "int32")):
    S = T.alloc_buffer((ROWS, COLUMNS), "int32", scope="shared")
    for ty in T.thread_binding(TY_EXTENT, thread="threadIdx.y"):
        for tx in T.thread_binding(TX_EXTENT, thread="threadIdx.x"):
            for k in range(TRIPS):
                S[tx, k] = A[tx + ty]


def _parts() -> tuple[Any, Any, Any, Any]:
    node = _template.body
    while not (isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING):
        node = node.seq[-1] if isinstance(node, tirx.SeqStmt) else node.body
    tx_loop = node.body
    return tx_loop.body.body.buffer, node.loop_var, tx_loop.loop_var, tx_loop.body


BUFFER, TY, TX, K_LOOP = _parts()
K = K_LOOP.loop_var
K_RANGE = LoopRange.of(K_LOOP, AccessScope(), [TX, TY])

@st.composite
def base_index(draw: Any) -> Any:
    """A non-negative index over the threads and the loop (small: offsets keep it inside
    the buffer)."""
    term = draw(st.sampled_from([TX, tirx.floordiv(TX, 2), tirx.floordiv(TX, 4), None]))
    parts = [term] if term is not None else []
    parts += [v for v in (TY, K) if draw(st.booleans())]
    if not parts:
        return tirx.IntImm("int32", draw(st.integers(0, 3)))
    expr = parts[0]
    for part in parts[1:]:
        expr = tirx.Add(expr, part)
    if draw(st.booleans()):
        expr = tirx.floormod(expr, draw(st.sampled_from([3, 4])))
    return expr


def with_offset(index: Any, constants: list[tuple[int, str]]) -> Any:
    """``index`` with constants added at the top (on the left or on the right) or
    subtracted."""
    for value, how in constants:
        if how == "sub":
            index = tirx.Sub(tirx.Add(index, tirx.IntImm("int32", 8)), tirx.IntImm("int32", value))
            continue
        constant = tirx.IntImm("int32", value)
        index = tirx.Add(constant, index) if how == "left" else tirx.Add(index, constant)
    return index


offsets = st.lists(
    st.tuples(st.integers(0, 7), st.sampled_from(["left", "right", "sub"])), max_size=2
)
conditions = st.sampled_from([(), ((TX < 5, True),), ((tirx.EQ(TY, 1), True),), ((K < 2, False),)])


def brute_points(access: SharedAccess) -> tuple[list[int], list[int], list[int]]:
    """Sorted flat addresses, and the lowest and highest thread (``tx + 8 * ty``) at each."""
    touched: dict[int, list[int]] = {}
    for tx, ty, k in itertools.product(range(TX_EXTENT), range(TY_EXTENT), range(TRIPS)):
        env = {"tx": tx, "ty": ty, "k": k}
        if not all(bool(evaluate(c, env)) is holds for c, holds in access.scope.conditions):
            continue
        row, column = (evaluate(i, env) for i in access.indices)
        touched.setdefault(row * COLUMNS + column, []).append(tx + TX_EXTENT * ty)
    keys = sorted(touched)
    return keys, [min(touched[x]) for x in keys], [max(touched[x]) for x in keys]


@settings(deadline=None, max_examples=120)
@given(
    rows=base_index(),
    columns=base_index(),
    variants=st.lists(st.tuples(offsets, offsets, conditions), min_size=1, max_size=4),
)
def test_points_of_offset_accesses_are_the_brute_force_points(rows, columns, variants):
    extents = {TX: TX_EXTENT, TY: TY_EXTENT}  # (one analysis run for all the variants)
    for row_offsets, column_offsets, conds in variants:
        scope = AccessScope((K_RANGE,), conds)
        index = (with_offset(rows, row_offsets), with_offset(columns, column_offsets))
        access = SharedAccess(BUFFER, AccessKind.WRITE, index, None, scope.loops, scope)
        points = enumeration.whole_space_points(access, extents)
        assert points is not None, "a space of 48 points is small"
        keys, lo, hi = brute_points(access)
        np.testing.assert_array_equal(points.keys, keys)
        np.testing.assert_array_equal(points.lo, lo)
        np.testing.assert_array_equal(points.hi, hi)


def test_accesses_differing_by_constants_enumerate_their_base_once(monkeypatch):
    made = []
    real_side = enumeration._Side

    def counting_side(*args: Any, **kwargs: Any) -> Any:
        made.append(args)
        return real_side(*args, **kwargs)

    monkeypatch.setattr(enumeration, "_Side", counting_side)
    extents = {TX: TX_EXTENT, TY: TY_EXTENT}
    scope = AccessScope((K_RANGE,), ())
    base = tirx.floormod(tirx.Add(TX, K), 4)
    found = []
    for shift in (1, 2, 5, 9):
        index = (tirx.Add(TY, tirx.IntImm("int32", shift)), tirx.Add(base, tirx.IntImm("int32", 3)))
        access = SharedAccess(BUFFER, AccessKind.WRITE, index, None, scope.loops, scope)
        found.append(enumeration.whole_space_points(access, extents))
    assert len(made) == 1, "the base is enumerated once"
    for shift, points in zip((1, 2, 5, 9), found, strict=True):
        np.testing.assert_array_equal(points.keys, found[0].keys + (shift - 1) * COLUMNS)
