"""Region analysis of shared accesses: soundness of ``may_conflict`` against brute force,
and the precision rules (guards, ``Bind`` values, injective thread maps, iteration
distances of multibuffered loops)."""

from __future__ import annotations

import itertools
from typing import Any

import hypothesis.strategies as st
import pytest
from expr_eval import evaluate
from hypothesis import given, settings
from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis.shared_access import (
    ANY,
    AccessKind,
    AccessScope,
    LoopRange,
    SharedAccess,
    may_conflict,
    same_iteration,
)

TRIPS = 4


@T.prim_func
def template(A: T.Buffer((64,), "int32")):
    S = T.alloc_buffer((4096,), "int32", scope="shared")
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        for k in range(TRIPS):
            S[tx + k] = A[tx]


def _template_parts() -> tuple[Any, Any, Any, Any]:
    thread_loop = template.body
    while not isinstance(thread_loop, tirx.For):
        thread_loop = thread_loop.seq[-1] if isinstance(thread_loop, tirx.SeqStmt) else None
    serial = thread_loop.body
    store = serial.body
    return store.buffer, thread_loop.loop_var, serial, store.value


BUFFER, TX, K_LOOP, A_LOAD = _template_parts()
K = K_LOOP.loop_var
K_RANGE = LoopRange.of(K_LOOP, AccessScope(), [TX])
BOUND = tirx.Var("bound", "int32")  # a Bind variable in some generated indices/guards


# ---------------------------------------------------------------- a tiny evaluator


# ---------------------------------------------------------------- generated accesses

coeff = st.integers(-3, 3)


@st.composite
def indices(draw: Any) -> Any:
    c_t, c_k, d = draw(coeff), draw(st.sampled_from([0, 0, 1, -1, 4, 8])), draw(st.integers(-4, 40))
    base = c_t * TX + c_k * K + d + 64  # + 64 keeps floormod/mask/shift operands positive
    wrap = draw(st.sampled_from(["none", "mod", "mask", "div"]))
    if wrap == "mod":
        return tirx.floormod(base, draw(st.sampled_from([2, 3, 5, 8])))
    if wrap == "mask":
        return tirx.bitwise_and(base, draw(st.sampled_from([1, 3, 7])))
    if wrap == "div":
        return tirx.floordiv(base, draw(st.sampled_from([2, 4])))
    return base


@st.composite
def guards(draw: Any) -> tuple[tuple[Any, bool], ...]:
    out = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["lt", "ge", "parity", "bound"]))
        g = draw(st.integers(0, 8))
        cond = {
            "lt": TX < g,
            "ge": TX >= g,
            "parity": tirx.EQ(tirx.floormod(TX, 2), g % 2),
            "bound": TX < BOUND,  # BOUND = 8 >> k, bound by a Bind
        }[kind]
        out.append((cond, draw(st.booleans())))
    return tuple(out)


def make_access(kind: AccessKind, index: Any, conds: Any, use_bind: bool) -> SharedAccess:
    bindings = ((BOUND, tirx.RShift(tirx.IntImm("int32", 8), K)),)
    if use_bind:
        index = index + BOUND  # resolved to `... + (8 >> k)` by the analysis
    scope = AccessScope((K_RANGE,), conds, bindings)
    return SharedAccess(BUFFER, kind, (index,), None, scope.loops, scope)


def brute_force_overlap(a: SharedAccess, b: SharedAccess, threads: int, relation: str) -> bool:
    """Whether two different threads, with the guards holding, hit one element."""
    pairs = {
        "same": [(k, k) for k in range(TRIPS)],
        "next": [(k, k + 1) for k in range(TRIPS - 1)],
        "any": list(itertools.product(range(TRIPS), repeat=2)),
    }[relation]
    for t1, t2 in itertools.permutations(range(threads), 2):
        for k1, k2 in pairs:
            env_a = {"tx": t1, "k": k1, "bound": 8 >> k1}
            env_b = {"tx": t2, "k": k2, "bound": 8 >> k2}
            if not all(evaluate(c, env_a) == h for c, h in a.scope.conditions):
                continue
            if not all(evaluate(c, env_b) == h for c, h in b.scope.conditions):
                continue
            ia = evaluate(a.scope.resolve(a.indices[0]), env_a)
            if ia == evaluate(b.scope.resolve(b.indices[0]), env_b):
                return True
    return False


PROVEN_APART = {"count": 0}


@settings(deadline=None, max_examples=150)
@given(
    threads=st.integers(1, 8),
    index_a=indices(),
    index_b=indices(),
    guards_a=guards(),
    guards_b=guards(),
    bind_a=st.booleans(),
    bind_b=st.booleans(),
    relation=st.sampled_from(["same", "next", "any"]),
)
def test_no_conflict_claim_is_confirmed_by_brute_force(
    threads, index_a, index_b, guards_a, guards_b, bind_a, bind_b, relation
):
    a = make_access(AccessKind.WRITE, index_a, guards_a, bind_a)
    b = make_access(AccessKind.READ, index_b, guards_b, bind_b)
    iterations = {
        "same": {K_LOOP: frozenset({0})},
        "next": {K_LOOP: frozenset({1})},
        "any": None,
    }[relation]
    if not may_conflict(a, b, {TX: threads}, iterations):
        PROVEN_APART["count"] += 1
        assert not brute_force_overlap(a, b, threads, relation), (
            f"claimed apart but overlap: {a.describe()} if {guards_a} / "
            f"{b.describe()} if {guards_b}, {threads} threads, {relation} iteration"
        )


def test_property_test_exercised_no_conflict_claims():
    # Run after the property test (file order): the soundness check must not be vacuous.
    if PROVEN_APART["count"] == 0:
        pytest.skip("run together with test_no_conflict_claim_is_confirmed_by_brute_force")
    assert PROVEN_APART["count"] > 10


# ---------------------------------------------------------------- targeted rules


def _access(kind: AccessKind, index: Any, conds=(), bindings=(), loops=(K_RANGE,)) -> SharedAccess:
    scope = AccessScope(tuple(loops), tuple(conds), tuple(bindings))
    return SharedAccess(BUFFER, kind, (index,), None, scope.loops, scope)


def test_tree_reduction_guard_separates_the_halves():
    stride = tirx.Var("stride", "int32")
    bind = ((stride, tirx.RShift(tirx.IntImm("int32", 4), K)),)
    guard = ((TX < stride, True),)
    write = _access(AccessKind.WRITE, TX, guard, bind)
    read_far = _access(AccessKind.READ, TX + stride, guard, bind)
    same = same_iteration(write, read_far)
    assert not may_conflict(read_far, write, {TX: 8}, same)
    # without the guard, thread tx + stride's write meets thread tx's read
    assert may_conflict(read_far, _access(AccessKind.WRITE, TX, (), bind), {TX: 8}, same)
    # different levels (any iteration distance): the halves are not apart any more
    assert may_conflict(write, read_far, {TX: 8}, None)


@pytest.mark.parametrize(
    ("index_a", "index_b", "conflict"),
    [
        (31 - TX, 31 - TX, False),  # one element per thread, negative coefficient
        (7 - 2 * TX, 7 - 2 * TX, False),
        (TX, 7 - TX, True),  # another thread's element
        (-4 * TX + 2, -4 * TX + 3, False),  # private slices of width 4
    ],
)
def test_any_injective_affine_thread_map(index_a, index_b, conflict):
    a = _access(AccessKind.WRITE, index_a)
    b = _access(AccessKind.READ, index_b)
    assert may_conflict(a, b, {TX: 8}, same_iteration(a, b)) is conflict


def test_bind_values_are_substituted_before_comparing():
    v = tirx.Var("v", "int32")
    bind = ((v, TX * 2),)
    write = _access(AccessKind.WRITE, v, (), bind)
    read_own = _access(AccessKind.READ, v, (), bind)
    read_next = _access(AccessKind.READ, v + 2, (), bind)
    assert not may_conflict(write, read_own, {TX: 8}, same_iteration(write, read_own))
    assert may_conflict(write, read_next, {TX: 8}, same_iteration(write, read_next))


@pytest.mark.parametrize(
    ("slot", "count"),
    [
        (lambda k: tirx.bitwise_and(k, 1), 2),
        (lambda k: tirx.floormod(k, 3), 3),
        (lambda k: tirx.bitwise_and(k - 1, 3), 4),
    ],
)
def test_multibuffer_slots_of_consecutive_iterations_differ(slot, count):
    index_read = slot(K) * 8 + tirx.floormod(TX + 1, 8)  # another thread's element
    index_write = slot(K) * 8 + TX
    read = _access(AccessKind.READ, index_read)
    write = _access(AccessKind.WRITE, index_write)
    # iteration k's read, then iteration k+1's write: different copies
    assert not may_conflict(read, write, {TX: 8}, {K_LOOP: frozenset({1})})
    # the same iteration or an unknown distance (slot reused): may conflict
    assert may_conflict(read, write, {TX: 8}, {K_LOOP: frozenset({0})})
    assert may_conflict(read, write, {TX: 8}, {K_LOOP: frozenset({1, ANY})})
    assert may_conflict(read, write, {TX: 8}, None)


def test_loads_in_indices_are_never_proven_apart():
    # `A[tx]` may differ between the two moments: the analyzer must not assume it equal
    read = _access(AccessKind.READ, TX + A_LOAD + 1)
    write = _access(AccessKind.WRITE, TX + A_LOAD)
    assert may_conflict(write, read, {TX: 8}, same_iteration(write, read))


@T.prim_func
def _symbolic_trips(n: T.int32):
    S = T.alloc_buffer((4096,), "int32", scope="shared")
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        for j in range(n):
            S[j + tx] = 0


def _symbolic_loop() -> tuple[Any, Any]:
    """The ``for j in range(n)`` of ``_symbolic_trips`` and its ``n``."""
    loop = _symbolic_trips.body
    while not (isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.SERIAL):
        loop = loop.seq[-1] if isinstance(loop, tirx.SeqStmt) else loop.body
    return loop, _symbolic_trips.params[0]


@pytest.mark.parametrize(("position", "premise", "conflict"), [
    (0, None, False),  # iteration 0 writes the thread's own element
    (1, None, True),  # iteration 1: thread tx - 1's element
    (1, "n <= 1", False),  # no iteration 1 when n <= 1
    (2, "n <= 2", False),
    (2, "n <= 3", True),
    (3, "n <= 3", False),
])
def test_a_fixed_iteration_of_a_symbolic_loop_must_exist(position, premise, conflict):
    # `S[tx]` before `for j in range(n): S[j + tx]`: iteration `position` of the loop
    # (entered after the first write) meets it only if the loop has that many iterations
    loop, n = _symbolic_loop()
    conds = () if premise is None else ((n <= int(premise.split("<=")[1]), True),)
    before = _access(AccessKind.WRITE, TX, conds, loops=())
    j_range = LoopRange.of(loop, AccessScope((), conds), [TX])
    inside = _access(AccessKind.WRITE, loop.loop_var + TX, conds, loops=(j_range,))
    verdict = may_conflict(before, inside, {TX: 8}, None, {loop: position})
    assert verdict is conflict
