"""Proxy-state analysis: facts on small kernels, and a property test of InjectFenceProxy's
output against an independent path-enumerating checker written here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import ir, tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave ops
from tilewave.analysis.proxy_state import Proxy, ProxyEvent, analyze_proxy_state
from tilewave.errors import MalformedKernelError
from tilewave.transforms.inject_fence_proxy import inject_fence_proxy

G, A, N = Proxy.GENERIC, Proxy.ASYNC, Proxy.NONE


@T.prim_func
def leaves(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        smem[tx] = T.float32(1)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.tilewave.fence_proxy_async()
        T.call_extern("void", "opaque_helper", n)
        T.ptx.stmatrix.sync.aligned.m8n8.x1.shared.b16(T.address_of(smem[0]), acc[0])
        T.tvm_storage_sync("shared")
        T.ptx.cp.async_.bulk.commit_group()


def _template() -> tuple[tirx.For, list[tirx.Stmt], dict[str, tirx.Stmt], tirx.Var]:
    thread_loop = leaves.body
    seq = list(thread_loop.body.seq)
    allocs, ops = seq[:2], seq[2:]
    names = ["G", "A", "F", "U", "S", "B", "C"]
    return thread_loop, allocs, dict(zip(names, ops, strict=True)), leaves.params[1]


THREAD_LOOP, ALLOCS, LEAF, N_VAR = _template()


# ---------------------------------------------------------------------------------------
# Facts on small kernels
# ---------------------------------------------------------------------------------------


def _kernel(*stmts: tirx.Stmt) -> tirx.PrimFunc:
    body = tirx.SeqStmt([*ALLOCS, *stmts])
    return leaves.with_body(THREAD_LOOP.__class__(
        THREAD_LOOP.loop_var, THREAD_LOOP.min, THREAD_LOOP.extent, THREAD_LOOP.kind, body,
        THREAD_LOOP.thread_binding, THREAD_LOOP.annotations,
    ))


def _loop(body: tirx.Stmt, extent: Any = None) -> tirx.For:
    var = tirx.Var("k", "int32")
    ext = N_VAR if extent is None else tirx.IntImm("int32", extent)
    return tirx.For(var, tirx.IntImm("int32", 0), ext, tirx.ForKind.SERIAL, body)


def test_incoming_state_after_a_store():
    facts = analyze_proxy_state(_kernel(LEAF["G"], LEAF["A"], LEAF["A"]))
    assert [site.incoming for site in facts.async_ops] == [{G}, {A}]
    assert [site.may_follow_generic for site in facts.async_ops] == [True, False]
    assert facts.async_ops[0].op_name == "tirx.ptx.cp_async_bulk_s2g"
    assert facts.async_ops[0].stmt.same_as(LEAF["A"])
    assert facts.exit_state == {A}


def test_fences_reset_and_are_reported():
    facts = analyze_proxy_state(_kernel(LEAF["S"], LEAF["F"], LEAF["A"]))
    assert [site.incoming for site in facts.fences] == [{G}]
    assert facts.fences[0].event is ProxyEvent.FENCE
    assert [site.incoming for site in facts.async_ops] == [{N}]
    assert facts.fence_needed_before() == frozenset()


def test_barrier_does_not_order_proxies():
    facts = analyze_proxy_state(_kernel(LEAF["G"], LEAF["B"], LEAF["A"]))
    assert facts.async_ops[0].incoming == {G}


def test_loop_states_reach_a_fixed_point():
    # A symbolic loop may run zero times: the state before it reaches the code after it.
    facts = analyze_proxy_state(_kernel(LEAF["F"], _loop(tirx.SeqStmt([LEAF["A"], LEAF["G"]])),
                                        LEAF["A"]))
    inside, after = facts.async_ops
    assert inside.incoming == {N, G}
    assert after.incoming == {N, G}
    facts = analyze_proxy_state(_kernel(LEAF["F"], _loop(tirx.SeqStmt([LEAF["A"], LEAF["G"]]), 2),
                                        LEAF["A"]))
    assert facts.async_ops[1].incoming == {G}


def test_unknown_calls_in_both_modes():
    kernel = _kernel(LEAF["F"], LEAF["U"], LEAF["A"])
    assert analyze_proxy_state(kernel).async_ops[0].incoming == {N}
    assert analyze_proxy_state(kernel, conservative=True).async_ops[0].incoming == {G}


def test_site_paths_locate_their_statements():
    kernel = _kernel(LEAF["G"], tirx.IfThenElse(N_VAR > 0, LEAF["A"], None))
    (site,) = analyze_proxy_state(kernel).async_ops
    node: Any = kernel.body
    for name, index in site.path:
        node = getattr(node, name)
        if index >= 0:
            node = node[index]
    assert node.same_as(LEAF["A"])


def test_analysis_rejects_a_module():
    with pytest.raises(MalformedKernelError, match=r"analyze_proxy_state: expected a "
                       r"tvm.tirx.PrimFunc, got IRModule"):
        analyze_proxy_state(tvm.IRModule({"main": leaves}))


# ---------------------------------------------------------------------------------------
# Property: the pass's output against an independent path enumeration
# ---------------------------------------------------------------------------------------

LEAF_KINDS = ["G", "S", "A", "F", "U", "B"]


def _programs() -> st.SearchStrategy[Any]:
    leaf = st.sampled_from(LEAF_KINDS)
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3).map(lambda xs: ("seq", xs)),
            st.tuples(inner, st.none() | inner).map(lambda t: ("if", *t)),
            st.tuples(st.sampled_from(["n", 1, 3]), inner).map(lambda t: ("for", *t)),
            inner.map(lambda body: ("while", body)),
        ),
        max_leaves=9,
    )


def _build(tree: Any) -> tirx.Stmt:
    if isinstance(tree, str):
        return LEAF[tree]
    kind = tree[0]
    if kind == "seq":
        items = [_build(x) for x in tree[1]]
        return items[0] if len(items) == 1 else tirx.SeqStmt(items)
    if kind == "if":
        return tirx.IfThenElse(N_VAR > 1, _build(tree[1]),
                               None if tree[2] is None else _build(tree[2]))
    if kind == "for":
        return _loop(_build(tree[2]), None if tree[1] == "n" else tree[1])
    return tirx.While(N_VAR > 2, _build(tree[1]))


# The checker reads the output TIR on its own: op names and node types, nothing of tilewave.
_EVENT_OF_OP = {
    "tirx.ptx.cp_async_bulk_s2g": "A",
    "tirx.ptx.stmatrix": "G",
    "tirx.ptx.fence_proxy": "P",  # a fence the pass inserted
    "tilewave.fence_proxy_async": "F",  # a fence the input already had
}

Event = tuple[str, tuple[int, ...]]


def _leaf_events(stmt: Any, where: tuple[int, ...], conservative: bool) -> tuple[Event, ...]:
    if isinstance(stmt, tirx.BufferStore):
        shared = str(stmt.buffer.ty.storage_scope) == "shared"
        return (("G", where),) if shared else ()
    call = stmt.value
    name = call.op.name
    if name == "tirx.call_extern":
        return (("G", where),) if conservative else ()
    kind = _EVENT_OF_OP.get(name)
    return ((kind, where),) if kind else ()


def _paths(stmt: Any, where: tuple[int, ...], conservative: bool) -> set[tuple[Event, ...]]:
    """Every event sequence through ``stmt``; loops run 0 (if they may), 1 or 2 times."""
    if isinstance(stmt, tirx.SeqStmt):
        result: set[tuple[Event, ...]] = {()}
        for i, child in enumerate(stmt.seq):
            tails = _paths(child, (*where, i), conservative)
            result = {head + tail for head in result for tail in tails}
        return result
    if isinstance(stmt, tirx.IfThenElse):
        then = _paths(stmt.then_case, (*where, 0), conservative)
        other = {()} if stmt.else_case is None else _paths(stmt.else_case, (*where, 1),
                                                            conservative)
        return then | other
    if isinstance(stmt, (tirx.For, tirx.While)):
        body = _paths(stmt.body, (*where, 0), conservative)
        once = body
        twice = {a + b for a in body for b in body}
        may_skip = isinstance(stmt, tirx.While) or not isinstance(stmt.extent, tirx.IntImm)
        if isinstance(stmt, tirx.For) and isinstance(stmt.extent, tirx.IntImm) \
                and stmt.extent.value == 1:
            return once
        return once | twice | ({()} if may_skip else set())
    return {_leaf_events(stmt, where, conservative)}


def _check_paths(paths: set[tuple[Event, ...]]) -> tuple[set[Any], set[Any]]:
    """Returns (async ops a generic access reaches unfenced, inserted fences some generic
    access reaches with nothing in between)."""
    unfenced, useful = set(), set()
    for path in paths:
        last_proxy = None  # last of G / A / F / P
        last_order = None  # last of G / F / P (A is not an ordering point)
        for kind, where in path:
            if kind == "A" and last_order == "G":
                unfenced.add(where)
            if kind == "P" and last_proxy == "G":
                useful.add(where)
            last_proxy = kind
            if kind != "A":
                last_order = kind
    return unfenced, useful


def _inserted_fences(stmt: Any, where: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    if isinstance(stmt, tirx.SeqStmt):
        for i, child in enumerate(stmt.seq):
            yield from _inserted_fences(child, (*where, i))
    elif isinstance(stmt, tirx.IfThenElse):
        yield from _inserted_fences(stmt.then_case, (*where, 0))
        if stmt.else_case is not None:
            yield from _inserted_fences(stmt.else_case, (*where, 1))
    elif isinstance(stmt, (tirx.For, tirx.While)):
        yield from _inserted_fences(stmt.body, (*where, 0))
    elif isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, ir.expr.Call) \
            and stmt.value.op.name == "tirx.ptx.fence_proxy":
        yield where


def _user_code(output: tirx.PrimFunc) -> tirx.Stmt:
    seq = list(output.body.body.seq)  # the thread loop's body: allocations, then the code
    assert all(a.same_as(b) for a, b in zip(seq, ALLOCS, strict=False))
    code = seq[len(ALLOCS):]
    return code[0] if len(code) == 1 else tirx.SeqStmt(code)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_programs(), conservative=st.booleans())
def test_output_fences_every_generic_to_async_path_and_nothing_else(tree, conservative):
    func = _kernel(_build(tree))
    out = inject_fence_proxy(func, target="sm_90a", conservative=conservative)
    code = _user_code(out)
    paths = _paths(code, (), conservative)
    unfenced, useful = _check_paths(paths)
    assert not unfenced, f"async ops reached by a generic access unfenced at {unfenced}"
    inserted = set(_inserted_fences(code))
    assert inserted <= useful, f"fences no generic access reaches: {inserted - useful}"
    # Nothing but fences and the bulk-store handshake was added; running again adds nothing.
    tvm.ir.assert_structural_equal(
        inject_fence_proxy(out, target="sm_90a", conservative=conservative), out
    )


def test_checker_catches_a_missing_and_a_useless_fence():
    # The oracle itself must be able to fail: G A is unfenced; F P A has a useless fence.
    fence = tirx.Evaluate(T.ptx.fence.proxy.async_.shared__cta())
    missing = tirx.SeqStmt([LEAF["G"], LEAF["A"]])
    assert _check_paths(_paths(missing, (), False))[0] == {(1,)}
    useless = tirx.SeqStmt([LEAF["F"], fence, LEAF["A"]])
    assert list(_inserted_fences(useless)) == [(1,)]
    assert _check_paths(_paths(useless, (), False))[1] == set()
    loop = _loop(tirx.SeqStmt([LEAF["A"], LEAF["G"]]), 3)
    assert _check_paths(_paths(loop, (), False))[0] == {(0, 0)}
