"""Stores of call-free arithmetic: their accesses found in Python, as the collector finds them.

``statement_accesses`` takes a store whose value and indices hold only arithmetic,
comparisons, casts, variables, constants and loads through
:func:`tilewave.analysis.plain_loads.plain_loads` instead of the C++ collector walk. The
property: on random stores (calls included, which the Python walk leaves to the collector)
both ways report the same accesses in the same order (the collector's way:
``collected_accesses``), with a wgmma descriptor map or without one (descriptors are read
only by wgmma calls, which the Python way leaves to the collector).
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from collector_reference import three_readings
from hypothesis import given, settings
from kernel_text import first_node
from tvm import ir, tirx

from tilewave.analysis.plain_loads import plain_loads
from tilewave.analysis.shared_access import (
    AccessScope,
    statement_accesses,
)

_LEAVES = st.sampled_from(["tx", "0", "3", "n"])


def _expressions() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "^", "&", "|"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        )
        # (constant divisors: the parser folds constants and refuses a zero one)
        division = st.tuples(inner, st.sampled_from(["//", "%"]), st.sampled_from("234")).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        )
        minmax = st.tuples(st.sampled_from(["T.min", "T.max"]), inner, inner).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})"
        )
        load = st.tuples(st.sampled_from(["S", "R", "A", "L"]), inner).map(
            lambda t: f"{t[0]}[{t[1]} % 8]"
        )
        # (constant shift counts: the parser folds constants and refuses large ones)
        shift = st.tuples(inner, st.sampled_from([">>", "<<"]), st.sampled_from("123")).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        )
        inverted = inner.map(lambda e: f"(~{e})")
        cast = inner.map(lambda e: f'T.Cast("int32", {e})')
        call = inner.map(lambda e: f'T.call_extern("int32", "f", {e})')
        # (calls rarer: an expression with one goes to the collector both ways)
        return st.one_of(binary, load, binary, load, division, shift, inverted, minmax, cast, call)

    return st.recursive(_LEAVES, extend, max_leaves=10)


def _store(target: str, index: str, value: str) -> Any:
    return first_node(
        f"""
@T.prim_func
def k(A: T.Buffer((64,), "int32"), n: T.int32):
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "int32", scope="shared")
        R = T.alloc_buffer((64,), "int32", scope="shared.dyn")
        L = T.alloc_buffer((8,), "int32", scope="local")
        {target}[{index} % 8] = {value}
""",
        tirx.BufferStore,
    )


@settings(max_examples=300, deadline=None)
@given(
    target=st.sampled_from(["S", "A", "L"]), index=_expressions(), value=_expressions()
)
def test_plain_stores_report_what_the_collector_reports(target, index, value):
    stmt = _store(target, index, value)
    fast, with_descriptors, collected = three_readings(stmt)
    assert fast == with_descriptors == collected


def test_a_call_leaves_the_expression_to_the_collector():
    stmt = _store("S", "tx", 'S[tx % 8] + T.call_extern("int32", "f", S[1 % 8])')
    found: list[Any] = []
    assert not plain_loads(stmt.value, found)
    # the collector reports both reads and the write
    assert [a.kind.name for a in statement_accesses(stmt, AccessScope())] == [
        "READ",
        "READ",
        "WRITE",
    ]


def test_loads_come_after_the_loads_in_their_indices():
    stmt = _store("A", "tx", "S[R[tx % 8] % 8] + S[3 % 8]")
    found: list[Any] = []
    assert plain_loads(stmt.value, found)
    assert [buffer.name for buffer, _ in found] == ["R", "S", "S"]
    assert all(type(i) is not ir.expr.Call for _, idx in found for i in idx)


def test_swizzle_operators_are_read_in_python_operands_in_order():
    for op in ("^", "&", "|", ">>", "<<"):
        stmt = _store("S", f"(tx {op} R[n % 8])", f"(S[tx % 8] {op} R[1 % 8]) + (~L[2 % 8])")
        found: list[Any] = []
        assert plain_loads(stmt.value, found), op
        assert [buffer.name for buffer, _ in found] == ["S", "R", "L"], op
        fast, with_descriptors, collected = three_readings(stmt)
        assert fast == with_descriptors == collected, op
