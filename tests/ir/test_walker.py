"""Tests for the reflection-based TIR visitor/mutator, substitute and post_order_visit."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tvm
import tvm_ffi
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tvm import ir, tirx
from tvm.ir.expr import StringImm
from tvm.sym.analyzer import Analyzer

from tilewave.ir.walker import (
    Deferred,
    TIRMutator,
    TIRVisitor,
    node_fields,
    node_is,
    post_order_visit,
    rebuild,
    rewrite_calls,
    seq_stmt,
    substitute,
)
from tilewave.kernel_memory import forget_kernels

sys.path.insert(0, str(Path(__file__).parent))
from walker_kernels import every_node_kind

X = tirx.Var("x", "int32")
Y = tirx.Var("y", "int32")
SHARED = tirx.decl_buffer((64,), "float32", "S", scope="shared")
INTS = tirx.decl_buffer((64,), "int32", "I", scope="shared")


def _i(value: int) -> tirx.IntImm:
    return tirx.IntImm("int32", value)


def _kinds(node) -> set[str]:
    seen: set[str] = set()
    post_order_visit(node, lambda n: seen.add(type(n).__name__))
    return seen


# Nodes TVMScript cannot spell directly (or spells through sugar); built by hand.
def _hand_built_nodes() -> dict[str, object]:
    v = tirx.Var("v", "int32")
    return {
        "Let": tirx.Let(v, X + 1, v * v),
        "Shuffle": tirx.Shuffle([tirx.Ramp(X, 1, 4)], [_i(1)]),
        "AssertStmt": tirx.AssertStmt(X > 0, StringImm("RuntimeError"), [StringImm("bad x")]),
        "Break": tirx.Break(),
        "Continue": tirx.Continue(),
        "Return": tirx.Return(X),
        "GT": X > Y,
        "BitwiseNot": tirx.BitwiseNot(X),
    }


REQUIRED_SCRIPT_KINDS = {
    "For", "While", "IfThenElse", "SeqStmt", "AttrStmt", "AllocBuffer", "DeclBuffer",
    "BufferStore", "TensorLoad", "Evaluate", "Call", "Bind", "Ramp", "Broadcast", "Select",
    "Cast", "IterVar", "Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max",
    "EQ", "NE", "LT", "LE", "GE", "And", "Or", "Not", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "LShift", "RShift", "IntImm", "FloatImm", "StringImm", "Var", "Op",
}  # fmt: skip


def test_fixture_kernel_covers_the_node_kinds_of_tvmscript_kernels():
    missing = REQUIRED_SCRIPT_KINDS - _kinds(every_node_kind.body)
    assert not missing, f"walker fixture lost node kinds: {missing}"


def _every_subnode(root) -> list:
    nodes: list = []
    post_order_visit(root, nodes.append)
    return nodes


@pytest.mark.parametrize(
    "root",
    [every_node_kind.body, *_hand_built_nodes().values()],
    ids=["script_kernel", *_hand_built_nodes()],
)
def test_identity_mutation_returns_the_identical_object_for_every_subtree(root):
    for node in _every_subnode(root):
        result = TIRMutator().visit(node)
        assert result.same_as(node), f"{type(node).__name__} was rebuilt by an identity mutation"
        tvm.ir.assert_structural_equal(result, node)


def test_visitor_reaches_every_node_in_execution_order():
    order: list[str] = []

    class StoreOrder(TIRVisitor):
        def visit_BufferStore(self, node):
            order.append(node.buffer.name)
            self.generic_visit(node)

    StoreOrder().visit(every_node_kind.body)
    # Stores in source order; `n: bind` and the scalar `i` are 1-element local buffers.
    assert order == ["S", "B", "B", "B", "i", "i", "S", "S", "B"]


class _BumpConstant(TIRMutator):
    """Replace the constant 63 by 62 (appears once, deep inside the kernel)."""

    def visit_IntImm(self, node):
        if node.value == 63:
            return tirx.IntImm(str(node.ty), 62)
        return node


def test_mutation_rebuilds_only_the_path_to_the_change():
    body = every_node_kind.body
    new_body = _BumpConstant().visit(body)
    assert not new_body.same_as(body)
    assert "C[62 - tx]" in every_node_kind.with_body(new_body).script()
    old_seq = body.body.body.seq
    new_seq = new_body.body.body.seq
    changed = [i for i in range(len(old_seq)) if not new_seq[i].same_as(old_seq[i])]
    assert len(changed) == 1, "only the statement holding the constant may be rebuilt"
    attr_stmt = old_seq[changed[0]]
    assert isinstance(attr_stmt, tirx.AttrStmt)


def test_statement_visitor_returning_none_deletes_it_and_seq_is_flattened():
    class DropSync(TIRMutator):
        def visit_Evaluate(self, node):
            call = node.value
            if isinstance(call, ir.expr.Call) and call.op.name == "tirx.tvm_storage_sync":
                return None
            if isinstance(call, ir.expr.Call) and call.op.name == "tirx.address_of":
                return tirx.SeqStmt([node, node])
            return node

    new_body = DropSync().visit(every_node_kind.body)
    text = every_node_kind.with_body(new_body).script()
    assert "tvm_storage_sync" not in text
    assert text.count("T.address_of(S[tx])") == 2
    assert all(not isinstance(s, tirx.SeqStmt) for s in new_body.body.body.seq)


def test_rebuild_keeps_other_fields():
    loop = every_node_kind.body
    new_loop = rebuild(loop, {"extent": _i(4)})
    assert new_loop.extent.value == 4
    assert new_loop.loop_var.same_as(loop.loop_var)
    assert new_loop.body.same_as(loop.body)
    assert new_loop.thread_binding.thread_tag == "blockIdx.x"


def test_node_fields_reads_reflection_and_skips_span_and_type():
    assert node_fields(tirx.For) == (
        "loop_var", "min", "extent", "kind", "body", "thread_binding", "annotations", "step",
    )  # fmt: skip
    assert node_fields(tirx.Add) == ("a", "b")
    assert "span" not in node_fields(tirx.IfThenElse)


def test_post_order_visit_calls_children_before_parents():
    expr = (X + 1) * Y
    names: list[str] = []
    post_order_visit(expr, lambda n: names.append(type(n).__name__))
    assert names == ["Var", "IntImm", "Add", "Var", "Mul"]


# --- substitute: one case per node kind ---------------------------------------------------
# Each builder makes a node around an int32 expression; substituting x -> y + 1 in
# builder(x) must give builder(y + 1).
def _loop(e):
    k = tirx.Var("k", "int32")
    return tirx.For(k, e, e + 4, tirx.ForKind.SERIAL, tirx.BufferStore(INTS, k + e, [k]))


SUBSTITUTION_CASES: dict[str, Callable] = {
    "Add": lambda e: e + 2,
    "Sub": lambda e: e - 2,
    "Mul": lambda e: e * 3,
    "Div": lambda e: tirx.Div(e, _i(3)),
    "Mod": lambda e: tirx.Mod(e, _i(3)),
    "FloorDiv": lambda e: tirx.floordiv(e, 4),
    "FloorMod": lambda e: tirx.floormod(e, 4),
    "Min": lambda e: tirx.min(e, 7),
    "Max": lambda e: tirx.max(e, 7),
    "EQ": lambda e: tirx.EQ(e, _i(1)),
    "NE": lambda e: tirx.NE(e, _i(1)),
    "LT": lambda e: e < 1,
    "LE": lambda e: e <= 1,
    "GT": lambda e: e > 1,
    "GE": lambda e: e >= 1,
    "And": lambda e: tirx.And(e > 0, e < 9),
    "Or": lambda e: tirx.Or(e > 0, e < 9),
    "Not": lambda e: tirx.Not(e > 0),
    "BitwiseAnd": lambda e: e & 6,
    "BitwiseOr": lambda e: e | 6,
    "BitwiseXor": lambda e: e ^ 6,
    "BitwiseNot": lambda e: tirx.BitwiseNot(e),
    "LShift": lambda e: e << 2,
    "RShift": lambda e: e >> 2,
    "Select": lambda e: tirx.Select(e > 0, e, _i(0)),
    "Cast": lambda e: tirx.Cast("float32", e),
    "Ramp": lambda e: tirx.Ramp(e, 1, 4),
    "Broadcast": lambda e: tirx.Broadcast(e, 4),
    "Shuffle": lambda e: tirx.Shuffle([tirx.Ramp(e, 1, 4)], [_i(2)]),
    "Let": lambda e: tirx.Let(tirx.Var("v", "int32"), e, _i(1)),
    "TensorLoad": lambda e: tirx.BufferLoad(SHARED, [e]),
    "Call": lambda e: tirx.call_extern("int32", "f", e),
    "BufferStore": lambda e: tirx.BufferStore(INTS, e, [e + 1]),
    "Evaluate": lambda e: tirx.Evaluate(e),
    "IfThenElse": lambda e: tirx.IfThenElse(
        e > 0, tirx.Evaluate(e), tirx.Evaluate(e + 1)
    ),
    "While": lambda e: tirx.While(e < 3, tirx.Evaluate(e)),
    "For": _loop,
    "SeqStmt": lambda e: tirx.SeqStmt([tirx.Evaluate(e), tirx.Evaluate(e * 2)]),
    "AttrStmt": lambda e: tirx.AttrStmt(_i(0), "pragma_test", e, tirx.Evaluate(e)),
    "Bind": lambda e: tirx.Bind(tirx.Var("b", "int32"), e),
    "AssertStmt": lambda e: tirx.AssertStmt(e > 0, StringImm("RuntimeError"), [StringImm("m")]),
    "Return": lambda e: tirx.Return(e),
}


@pytest.mark.parametrize("kind", list(SUBSTITUTION_CASES))
def test_substitute_replaces_uses_in_every_node_kind(kind):
    builder = SUBSTITUTION_CASES[kind]
    before = builder(X)
    assert type(before).__name__ == kind or kind in ("TensorLoad",)
    after = substitute(before, {X: Y + 1})
    tvm.ir.assert_structural_equal(after, builder(Y + 1), map_free_vars=True)
    assert not substitute(before, {Y: X}).same_as(None)
    assert substitute(before, {Y: X + 5}).same_as(before), "no use of y: nothing may change"


def test_substitute_leaves_definition_sites_but_accepts_var_renames():
    loop = _loop(X)
    k = loop.loop_var
    assert substitute(loop, {k: _i(3)}).loop_var.same_as(k)
    renamed = tirx.Var("k2", "int32")
    assert substitute(loop, {k: renamed}).loop_var.same_as(renamed)


def test_substitute_converts_python_numbers():
    result = substitute(X + Y, {X: 3})
    tvm.ir.assert_structural_equal(result, _i(3) + Y)


def test_substitute_computes_a_deferred_value_once_and_only_where_its_variable_is_used():
    computed: list[str] = []

    def value_of(name: str, expr: Any) -> Deferred:
        def compute() -> Any:
            computed.append(name)
            return expr

        return Deferred(compute)

    mapping = {X: value_of("x", Y + 1), Y: value_of("y", X * 2)}
    tvm.ir.assert_structural_equal(substitute(X + X, mapping), (Y + 1) + (Y + 1))
    assert computed == ["x"]  # y's value was never needed; x's was computed once
    tvm.ir.assert_structural_equal(substitute(Y, mapping), X * 2)
    assert computed == ["x", "y"]
    loop = _loop(X)
    # a definition site still takes only a variable, however the value is given
    assert substitute(loop, {loop.loop_var: value_of("k", _i(3))}).loop_var.same_as(loop.loop_var)


def test_substitute_in_script_kernel_rewrites_thread_index():
    tx = every_node_kind.body.body.loop_var
    body = every_node_kind.body.body.body
    text = every_node_kind.with_body(substitute(body, {tx: tx * 2})).script()
    assert "S[tx * 2] = A[bx * 64 + tx * 2]" in text


# --- property: substitution agrees with Python evaluation ---------------------------------
def _expressions() -> st.SearchStrategy:
    leaves = st.one_of(st.just(X), st.integers(-20, 20).map(_i))
    binary = [
        lambda a, b: a + b,
        lambda a, b: a - b,
        lambda a, b: a * b,
        lambda a, b: tirx.min(a, b),
        lambda a, b: tirx.max(a, b),
    ]
    return st.recursive(
        leaves,
        lambda inner: st.tuples(st.sampled_from(binary), inner, inner).map(
            lambda t: t[0](t[1], t[2])
        ),
        max_leaves=12,
    )


_INT32 = range(-(2**31), 2**31)


def _evaluate(expr, x_value: int) -> int | None:
    """The value of ``expr`` at ``x = x_value`` in Python integers; None when some
    intermediate value leaves int32 (TIR's int32 arithmetic then overflows: no reference)."""
    ops = {
        "Add": lambda a, b: a + b,
        "Sub": lambda a, b: a - b,
        "Mul": lambda a, b: a * b,
        "Min": min,
        "Max": max,
    }
    if isinstance(expr, tirx.IntImm):
        return expr.value
    if isinstance(expr, ir.expr.Var):
        return x_value
    a, b = _evaluate(expr.a, x_value), _evaluate(expr.b, x_value)
    if a is None or b is None:
        return None
    value = ops[type(expr).__name__](a, b)
    return value if value in _INT32 else None


@settings(max_examples=150, deadline=None)
@given(_expressions(), st.integers(-50, 50))
def test_substituting_a_constant_then_simplifying_matches_python(expr, x_value):
    expected = _evaluate(expr, x_value)
    assume(expected is not None)  # e.g. x * x * (x * x * (x * x)) at x = 36 overflows int32
    substituted = substitute(expr, {X: x_value})
    free: list = []
    post_order_visit(substituted, lambda n: free.append(n) if isinstance(n, ir.expr.Var) else 0)
    assert not free, "every use of x must be replaced"
    folded = Analyzer().simplify(substituted)
    assert isinstance(folded, tirx.IntImm)
    assert folded.value == expected


class _Refuse(TIRVisitor):
    def visit_BufferStore(self, node):
        raise ValueError("refused: a store")


def test_an_exception_from_a_visit_method_arrives_unchanged():
    # the walk runs in C++: the exception must come back as raised, with no IR text added
    with pytest.raises(ValueError) as caught:
        _Refuse().visit(every_node_kind.body)
    assert str(caught.value) == "refused: a store"
    with pytest.raises(KeyError) as caught:
        post_order_visit(every_node_kind.body, lambda node: {}["missing"])
    assert caught.value.args == ("missing",)


class _CountLoads(TIRVisitor):
    def __init__(self) -> None:
        self.loads = 0

    def visit_TensorLoad(self, node) -> None:
        self.loads += 1
        self.generic_visit(node)


def test_a_walked_visitor_is_freed_without_the_cyclic_collector():
    # its cached C++ dispatch entries must not refer back to it: a cycle would leave every
    # visitor (and all it holds) to the cyclic collector, which the analyses hold off
    visitor = _CountLoads()
    visitor.visit(every_node_kind.body)
    visitor.visit(every_node_kind.body)  # the second walk reuses the cached entries
    assert visitor.loads > 0
    gone = weakref.ref(visitor)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        del visitor
        assert gone() is None
    finally:
        if was_enabled:
            gc.enable()


def _call(name: str, *args) -> ir.expr.Call:
    return tvm.tirx.call_intrin("int32", name, *args)


def test_rewrite_calls_sees_inner_calls_first_and_keeps_what_it_declines():
    inner = _call("tirx.ptx.popc", X)
    outer = _call("tirx.ptx.brev", inner)
    stmt = tirx.Evaluate(outer + Y)
    seen: list[str] = []

    def rewrite(call):
        seen.append(call.op.name)
        if call.op.name == "tirx.ptx.popc":
            return X + 7
        return None

    out = rewrite_calls(stmt, rewrite)
    assert seen == ["tirx.ptx.popc", "tirx.ptx.brev"]
    expected = tirx.Evaluate(_call("tirx.ptx.brev", X + 7) + Y)
    tvm.ir.assert_structural_equal(out, expected)
    assert rewrite_calls(stmt, lambda call: None) is stmt


def test_rewrite_calls_reaches_calls_in_every_node_kind_and_raises_unchanged():
    body = every_node_kind.body
    names: list[str] = []
    post_order_visit(body, lambda n: names.append(n.op.name), types=(ir.expr.Call,))
    rewritten: list[str] = []
    assert rewrite_calls(body, lambda call: rewritten.append(call.op.name)).same_as(body)
    assert sorted(rewritten) == sorted(names) and names
    with pytest.raises(KeyError) as caught:
        rewrite_calls(body, lambda call: {}["missing"])
    assert caught.value.args == ("missing",)


def _walked(node, types) -> list:
    seen: list = []
    post_order_visit(node, seen.append, types)
    return seen


INDEXABLE_TYPE_SETS = [
    (tirx.BufferStore, ir.expr.Call),
    (ir.expr.Call,),
    (tirx.Evaluate,),
    (tirx.For, tirx.AttrStmt),
    (tirx.Bind,),
    (tirx.AllocBuffer, tirx.DeclBuffer),
    (tirx.SeqStmt,),
    (tirx.IfThenElse, tirx.While),
]


@pytest.mark.parametrize("kernel", ["fixture", "sm80_gemm", "sm80_flash_attention", "sm90_ws_gemm"])
def test_repeated_walks_of_a_statement_see_what_the_cpp_walk_sees(kernel):
    from tilewave.ir import walker

    if kernel == "fixture":
        body = every_node_kind.body
    else:
        from example_loader import load_example

        body = getattr(load_example(f"{kernel}.py"), "stripped", None)
        body = (body() if body is not None else load_example(f"{kernel}.py").hand()).body
    forget_kernels()  # (the walk indexes are kernel tables)
    for round_ in range(3):  # the first walks in C++, the second builds the index
        for types in INDEXABLE_TYPE_SETS:
            expected: list = []
            walker._walk(body, expected.append, types)
            got = _walked(body, types)
            assert [n.same_as(e) for n, e in zip(got, expected, strict=True)] == [True] * len(
                expected
            ), f"round {round_}, types {types}"
    assert hash(body) in walker._INDEXES, "the repeated walks were answered from the index"
    # a class outside the index is walked in C++ every time
    variables = _walked(body, (ir.expr.Var,))
    assert variables and len(variables) == len(_walked(body, (ir.expr.Var,)))


def test_a_statement_expected_to_be_walked_again_is_indexed_at_once(monkeypatch):
    from tilewave.ir import walker

    body = every_node_kind.body
    forget_kernels()  # (the walk indexes are kernel tables)
    walker.expect_repeated_walks(body)
    assert hash(body) in walker._INDEXES
    expected = {types: [] for types in INDEXABLE_TYPE_SETS}
    for types, found in expected.items():
        walker._walk(body, found.append, types)
    cpp_walks: list = []
    original = walker._walk
    monkeypatch.setattr(walker, "_walk", lambda *args: cpp_walks.append(args) or original(*args))
    for types, found in expected.items():
        got = _walked(body, types)  # the first walk, answered from the index
        assert [n.same_as(e) for n, e in zip(got, found, strict=True)] == [True] * len(found)
    assert cpp_walks == []


def test_an_exception_in_an_indexed_walk_reaches_the_caller_unchanged():
    body = every_node_kind.body
    _walked(body, (tirx.BufferStore,))
    _walked(body, (tirx.BufferStore,))

    def fail(_node):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        post_order_visit(body, fail, (tirx.BufferStore,))


@pytest.mark.parametrize("kernel", ["fixture", "sm80_flash_attention"])
def test_native_type_entries_walk_and_mutate_as_the_python_ones(monkeypatch, kernel):
    from tilewave.ir import walker

    if kernel == "fixture":
        body = every_node_kind.body
    else:
        from example_loader import load_example

        body = load_example(f"{kernel}.py").hand().body
    assert walker._PRUNE_TYPES is not walker._prune, "this TVM build has testing.nop"
    assert walker._KEEP_TYPES is not walker._keep, "this TVM build has testing.echo"

    renames = {v: tirx.Var(f"{v}_r", v.ty) for v in _free_vars(body)}

    def results() -> tuple[list, list, object, object]:
        calls: list = []
        everything: list = []
        walker._walk(body, calls.append, (ir.expr.Call,))
        walker._walk(body, everything.append, None)
        renamed = substitute(body, renames)
        rewritten = rewrite_calls(body, lambda call: None)
        return calls, everything, renamed, rewritten

    native = results()
    monkeypatch.setattr(walker, "_PRUNE_TYPES", walker._prune)
    monkeypatch.setattr(walker, "_KEEP_TYPES", walker._keep)
    python = results()
    for got, expected in zip(native[:2], python[:2], strict=True):
        assert len(got) == len(expected) > 0
        assert all(n.same_as(e) for n, e in zip(got, expected, strict=True))
    assert not native[2].same_as(body)
    tvm.ir.assert_structural_equal(native[2], python[2], map_free_vars=False)
    assert native[3].same_as(body) and python[3].same_as(body)


def test_a_missing_native_function_falls_back_to_python():
    from tilewave.ir import walker

    assert walker._native("tilewave.no_such_function", walker._prune) is walker._prune


def _free_vars(stmt) -> list:
    return list(tirx.analysis.undefined_vars(stmt, []))


def test_seq_stmt_builds_what_the_python_constructor_builds():
    x = tirx.Var("x", "int32")
    items = [tirx.Bind(x, tirx.IntImm("int32", 1)), tirx.Evaluate(x + 1), tirx.Evaluate(x)]
    made = seq_stmt(items)
    assert type(made) is tirx.SeqStmt
    assert [s.same_as(i) for s, i in zip(made.seq, items, strict=True)] == [True] * 3
    tvm.ir.assert_structural_equal(made, tirx.SeqStmt(items))


def test_node_is_agrees_with_isinstance() -> None:
    # (remembered per class pair: a second question of the same pair is a dictionary hit)
    x = tirx.Var("x", "int32")
    one = tirx.IntImm("int32", 1)
    cases = [
        (x, ir.expr.Var),
        (one, ir.expr.Var),
        (one, tirx.IntImm),
        (x, tirx.Stmt),
        (tirx.Evaluate(one), tirx.Stmt),
        ([x], (list, tuple)),
        (3, tvm_ffi.Object),
    ]
    for node, cls in cases * 2:
        assert node_is(node, cls) == isinstance(node, cls), (node, cls)
