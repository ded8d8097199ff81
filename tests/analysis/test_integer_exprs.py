"""``analysable``: an expression is plain integer/boolean arithmetic over variables and
constants. Checked against a reference written here with the C++ node walk (every node
visited, classes tested with ``isinstance``), on random expressions with loads, calls,
lets, casts to integer and float types, selects, comparisons and bitwise operations."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings
from kernel_text import first_node
from tvm import ir, tirx

from tilewave.analysis.integer_exprs import analysable
from tilewave.ir.walker import post_order_visit

_ALLOWED = (
    ir.expr.Var, tirx.IntImm, tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod,
    tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE,
    tirx.GT, tirx.GE, tirx.And, tirx.Or, tirx.Not, tirx.Select, tirx.BitwiseAnd,
    tirx.BitwiseOr, tirx.BitwiseXor, tirx.RShift, tirx.LShift,
)  # fmt: skip


def _reference(expr: Any) -> bool:
    ok = True

    def check(node: Any) -> None:
        nonlocal ok
        if isinstance(node, tirx.Cast):
            ok = ok and str(node.ty).startswith(("int", "uint", "bool"))
        elif not isinstance(node, _ALLOWED):
            ok = False

    post_order_visit(expr, check)
    return ok


def _expressions() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "^", "&", "|"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        )
        # (constant divisors and shifts: the parser folds constants and refuses a zero one)
        by_constant = st.tuples(
            inner, st.sampled_from(["//", "%", ">>", "<<"]), st.sampled_from("123")
        ).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        compare = st.tuples(inner, st.sampled_from(["<", "==", ">="]), inner).map(
            lambda t: f"T.Cast('int32', {t[0]} {t[1]} {t[2]})"
        )
        minmax = st.tuples(st.sampled_from(["T.min", "T.max"]), inner, inner).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})"
        )
        select = st.tuples(inner, inner, inner).map(
            lambda t: f"T.Select({t[0]} < 3, {t[1]}, {t[2]})"
        )
        load = inner.map(lambda e: f"A[{e} % 8]")
        call = inner.map(lambda e: f'T.call_extern("int32", "f", {e})')
        cast = st.tuples(st.sampled_from(["int64", "int32", "float32"]), inner).map(
            lambda t: f"T.Cast('int32', T.Cast('{t[0]}', {t[1]}))"
        )
        return st.one_of(binary, by_constant, compare, minmax, select, load, call, cast)

    return st.recursive(st.sampled_from(["tx", "n", "0", "3", "7"]), extend, max_leaves=10)


def _expression(text: str) -> Any:
    store = first_node(
        f"""
@T.prim_func
def k(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32"), n: T.int32):
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        B[0] = {text}
""",
        tirx.BufferStore,
    )
    return store.value


@settings(max_examples=300, deadline=None)
@given(text=_expressions())
def test_analysable_is_what_a_walk_of_every_node_finds(text):
    expr = _expression(text)
    assert analysable(expr) == _reference(expr)
    # remembered per node: asked again, and about a larger expression holding the node
    assert analysable(expr) == _reference(expr)
    larger = tirx.Add(expr, tirx.Var("m", "int32"))
    assert analysable(larger) == _reference(larger)


def test_a_float_cast_inside_integer_arithmetic_is_notanalysable():
    assert analysable(_expression("tx * 2 + 1"))
    assert not analysable(_expression("T.Cast('int32', T.Cast('float32', tx)) + 1"))
    assert not analysable(_expression("A[tx % 8] + 1"))
