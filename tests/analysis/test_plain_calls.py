"""Op calls on element addresses (``ldmatrix``, ``cp.async``): their accesses found in
Python, as the collector finds them.

``statement_accesses`` takes ``T.evaluate(op(...))`` whose operands are constants,
strings, arithmetic, loads of non-shared memory and ``T.address_of(B[i])`` (possibly inside
``cvta_generic_to_shared``) at load-free indices without the C++ collector walk. The
property: on random such calls (and on operands the Python way leaves to the collector: a
shared load, a load inside an address, another call) both ways report the same accesses,
in the same order, with the same copy regions, domains and collectiveness (the collector's
way: ``collected_accesses``), with a wgmma descriptor map or without one, as in
``test_plain_loads.py``.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from collector_reference import three_readings
from hypothesis import given, settings
from kernel_text import first_node
from tvm import tirx

from tilewave.analysis.shared_access import (
    AccessScope,
    statement_accesses,
)

_INDICES = st.sampled_from(["tx * 8", "tx * 8 + n", "(tx ^ 3) * 8", "tx // 4 * 64 + tx % 4 * 8"])


def _shared_address() -> st.SearchStrategy[str]:
    element = st.tuples(st.sampled_from(["S", "R"]), _INDICES).map(
        lambda t: f"T.address_of({t[0]}[{t[1]}])"
    )
    # a load inside the address (of shared memory, of registers): left to the collector
    loaded = st.sampled_from(["I", "L"]).map(lambda b: f"T.address_of(S[{b}[0] % 8 * 8])")
    converted = st.one_of(element, loaded).map(lambda e: f"T.cuda.cvta_generic_to_shared({e})")
    return st.one_of(element, converted, converted, loaded)


def _global_address() -> st.SearchStrategy[str]:
    return _INDICES.map(lambda i: f"T.address_of(A[{i}])")


def _register() -> st.SearchStrategy[str]:
    # a register indexed by a shared load: a shared read, left to the collector
    return st.sampled_from(["L[0]", "L[1]", "L[(tx + 1) % 8]", "L[n % 8]", "L[I[0] % 8]"])


def _call(op: str, registers: list[str], addresses: list[str]) -> Any:
    if op == "ldmatrix":
        text = (
            f"T.ptx.ldmatrix({', '.join(registers)}, {addresses[0]}, "
            '"sync", "aligned", "m8n8", "x4", "", "shared", "b16", "")'
        )
    elif op == "cp":
        text = (
            f"T.ptx.cp({addresses[0]}, {addresses[1]}, 16, "
            '"async", "cg", "shared", "global", "", "", "")'
        )
    else:  # a bulk copy completing on an mbarrier: the collector also reports its object
        text = (
            'T.ptx["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"]('
            f"{addresses[0]}, {addresses[1]}, 256, T.address_of(M[0]))"
        )
    return first_node(
        f"""
@T.prim_func
def k(A: T.Buffer((512,), "float16"), n: T.int32):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((512,), "float16", scope="shared")
        R = T.alloc_buffer((512,), "float16", scope="shared.dyn")
        I = T.alloc_buffer((8,), "int32", scope="shared")
        L = T.alloc_buffer((8,), "uint32", scope="local")
        M = T.alloc_buffer((2,), "uint64", scope="shared")
        {text}
""",
        tirx.Evaluate,
    )


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(["ldmatrix", "cp", "bulk"]),
    registers=st.lists(_register(), min_size=4, max_size=4),
    addresses=st.tuples(_shared_address(), _global_address()),
)
def test_calls_on_addresses_report_what_the_collector_reports(op, registers, addresses):
    stmt = _call(op, registers, addresses)
    fast, with_descriptors, collected = three_readings(stmt)
    assert fast == with_descriptors == collected


def test_a_copy_into_shared_memory_is_an_async_write_of_its_region():
    stmt = _call("cp", [], ["T.cuda.cvta_generic_to_shared(T.address_of(S[tx * 8]))",
                            "T.address_of(A[tx * 8])"])  # fmt: skip
    (access,) = statement_accesses(stmt, AccessScope())
    assert (access.kind.name, access.buffer.name, access.async_domain) == (
        "ASYNC_WRITE",
        "S",
        "cp.async",
    )
    assert [(lp.min, lp.extent) for lp in access.loops] == [(0, 8)]  # 16 bytes of fp16


def test_a_bulk_copy_reports_the_mbarrier_it_completes_on():
    """The op's own mbarrier access comes from the collector (a Python reading that skipped
    it once lost it: the order between the mbarrier's init and its use)."""
    stmt = _call("bulk", [], ["T.address_of(S[0])", "T.address_of(A[0])"])
    accesses = statement_accesses(stmt, AccessScope())
    assert [(a.kind.name, a.buffer.name, a.mbarrier_access) for a in accesses] == [
        ("ATOMIC", "M", "use"),
        ("ASYNC_WRITE", "S", None),
    ]
