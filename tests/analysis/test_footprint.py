"""Footprints: accesses of different statements share proof results exactly when the
proofs cannot tell them apart (same index structure, same variables, same loops)."""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis import footprint, shared_access
from tilewave.analysis.footprint import FootprintCache, loops_read
from tilewave.analysis.shared_access import (
    AccessScope,
    LoopRange,
    collect_thread_extents,
    may_conflict,
    statement_accesses,
)
from tilewave.ir.walker import post_order_visit


@T.prim_func
def kernel(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        R = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx]
        S[tx] = A[tx] + T.float32(1)
        R[tx] = A[tx]
        B[tx] = S[(tx + 1) % 128]
        B[tx] = S[(tx + 1) % 128] + T.float32(1)


def _accesses() -> list:
    stores: list = []
    post_order_visit(kernel.body, stores.append, (tirx.BufferStore,))
    return [acc for store in stores for acc in statement_accesses(store, AccessScope())]


def test_same_indices_in_two_statements_share_a_footprint() -> None:
    write1, write2, other_buffer, read1, read2 = _accesses()
    assert write1.footprint == write2.footprint
    assert hash(write1.footprint) == hash(write2.footprint)
    assert read1.footprint == read2.footprint
    assert write1.footprint != read1.footprint  # other index
    # `R[tx]` has `S[tx]`'s indices and shape: its proofs are the same (the buffer is
    # compared before any proof)
    assert other_buffer.footprint == write1.footprint


def test_shared_proofs_give_the_unshared_verdicts() -> None:
    write1, write2, _, read1, read2 = _accesses()
    extents = collect_thread_extents(kernel)
    assert may_conflict(write1, read1, extents) is True
    assert may_conflict(write2, read2, extents) is True  # answered from write1/read1's
    assert may_conflict(write1, write2, extents) is False  # each thread its own element


def test_a_new_variable_is_a_new_footprint() -> None:
    write = _accesses()[0]
    other = tirx.Var("tx", "int32")
    moved = statement_accesses(
        tirx.BufferStore(write.stmt.buffer, write.stmt.value, [other]), AccessScope()
    )[-1]
    assert moved.footprint != write.footprint  # `tx` of another kernel is not this `tx`


def test_cache_is_per_run_and_bounded() -> None:
    cache = FootprintCache(limit=2, runs=2)
    run_a, run_b, run_c = {}, {}, {}
    cache.put("k", run_a, 1)
    assert cache.lookup("k", run_a) == (True, 1)
    assert cache.lookup("k", run_b) == (False, None)  # another run's map: not shared
    cache.put("k2", run_a, 2)
    cache.put("k3", run_a, 3)  # the limit drops what was there
    assert cache.lookup("k", run_a) == (False, None)
    assert cache.lookup("k3", run_a) == (True, 3)
    cache.put("k", run_b, 4)
    cache.put("k", run_c, 5)  # a third run: the oldest (run_a) goes
    assert cache.lookup("k3", run_a) == (False, None)
    assert cache.lookup("k", run_b) == (True, 4)
    assert cache.lookup("k", run_c) == (True, 5)


def test_the_handle_lookup_agrees_with_the_structural_key() -> None:
    # footprints are first looked up by the handles of the expression nodes; with that
    # memo emptied before every access, each one is keyed structurally: the same answers
    remembered = [acc.footprint for acc in _accesses()]
    fresh = []
    for acc in _accesses():
        footprint._BY_HANDLES.clear()
        fresh.append(acc.footprint)
    assert all(f is r for f, r in zip(fresh, remembered, strict=True))
    # one index node in a buffer of another shape: another footprint, by handle as well
    write = _accesses()[0]
    wide = tirx.decl_buffer((256,), "float32", "W", scope="shared")
    store = tirx.BufferStore(wide, write.stmt.value, list(write.stmt.indices))
    moved = statement_accesses(store, AccessScope())[-1]
    assert moved.footprint != write.footprint
    assert moved.footprint is statement_accesses(store, AccessScope())[-1].footprint


def test_constants_of_two_types_are_two_footprints() -> None:
    # a constant hashes by its value: the lookup by node must not take int32 3 for int64 3
    write = _accesses()[0]
    footprints = []
    for dtype in ("int32", "int64"):
        store = tirx.BufferStore(write.stmt.buffer, write.stmt.value, [tirx.IntImm(dtype, 3)])
        footprints.append(statement_accesses(store, AccessScope())[-1].footprint)
    footprint._BY_HANDLES.clear()
    structural = [
        statement_accesses(
            tirx.BufferStore(write.stmt.buffer, write.stmt.value, [tirx.IntImm(dtype, 3)]),
            AccessScope(),
        )[-1].footprint
        for dtype in ("int32", "int64")
    ]
    assert footprints[0] != footprints[1]
    assert footprints == structural


@T.prim_func
def looped(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(4):
            S[tx] = A[tx]
            B[tx] = S[(tx + 1) % 128]
            S[(tx + k) % 128] = A[tx]


def _looped_accesses() -> tuple[Any, Any, Any, Any]:
    """The loop and the accesses of its three statements, in the loop's scope."""
    loops: list = []
    post_order_visit(looped.body, loops.append, (tirx.For,))
    loop = next(lp for lp in loops if lp.kind == tirx.ForKind.SERIAL)
    tx = next(lp for lp in loops if lp.kind == tirx.ForKind.THREAD_BINDING).loop_var
    scope = AccessScope().within_loop(LoopRange.of(loop, AccessScope(), [tx]))
    write, read, shifted = (statement_accesses(s, scope)[-1] for s in loop.body.seq)
    return loop, write, read, shifted


def test_loops_read_names_the_loops_an_access_reads() -> None:
    loop, write, read, shifted = _looped_accesses()
    assert loops_read(write) == frozenset()
    assert loops_read(read) == frozenset()
    assert loops_read(shifted) == frozenset({hash(loop)})


def test_distances_of_a_loop_neither_access_reads_make_one_proof(monkeypatch) -> None:
    loop, write, read, shifted = _looped_accesses()
    extents = collect_thread_extents(looped)
    asked: list = []
    real = shared_access.prove_no_overlap

    def counting(a, b, thread_extents, iterations, *rest):  # type: ignore[no-untyped-def]
        asked.append(dict(iterations or {}))
        return real(a, b, thread_extents, iterations, *rest)

    real_small = shared_access.small_spaces_overlap

    def counting_small(a, b, thread_extents, ordered):  # type: ignore[no-untyped-def]
        asked.append("whole spaces, no loop")
        return real_small(a, b, thread_extents, ordered)

    monkeypatch.setattr(shared_access, "prove_no_overlap", counting)
    monkeypatch.setattr(shared_access, "small_spaces_overlap", counting_small)
    verdicts = [may_conflict(write, read, extents, {loop: frozenset({d})}) for d in (1, 2, 3)]
    assert verdicts == [True, True, True]  # another thread's element, in any iteration
    # asked once, without the loop (small spaces and no loop relation: compared whole)
    assert asked == ["whole spaces, no loop"]
    # a loop an access reads keeps its distances apart: they give different answers
    asked.clear()
    same = may_conflict(shifted, shifted, extents, {loop: frozenset({0})})
    next_one = may_conflict(shifted, shifted, extents, {loop: frozenset({1})})
    assert (same, next_one) == (False, True)
    assert asked == [{loop: frozenset({0})}, {loop: frozenset({1})}]


@T.prim_func
def invariant_in_loops(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx]
        for k in range(4):
            S[tx] = A[tx]
            S[(tx + k) % 128] = A[tx]
        for _j in range(0):
            S[tx] = A[tx]
        for _m in range(n):
            S[tx] = A[tx]


def test_a_loop_the_access_does_not_read_is_left_out_unless_it_may_be_empty() -> None:
    """A loop-invariant access inside a non-empty constant loop shares the footprint of the
    same access outside it; inside a loop that may run no iteration it does not (a proof
    about an empty loop's body holds vacuously), nor where it reads the loop."""
    tx = invariant_in_loops.body.loop_var if isinstance(invariant_in_loops.body, tirx.For) else None
    found: dict[str, Any] = {}

    def visit(stmt: Any, scope: AccessScope) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            for child in stmt.seq:
                visit(child, scope)
        elif isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.SERIAL:
            visit(stmt.body, scope.within_loop(LoopRange.of(stmt, scope, [tx])))
        elif isinstance(stmt, tirx.BufferStore):
            name = "+".join(lp.var.name for lp in scope.loops) or "none"
            name += "/shifted" if not isinstance(stmt.indices[0], tirx.Var) else ""
            found[name] = statement_accesses(stmt, scope)[-1]
        elif hasattr(stmt, "body"):
            visit(stmt.body, scope)

    visit(invariant_in_loops.body, AccessScope())
    outside = found["none"].footprint
    assert found["k"].footprint is outside
    assert found["k/shifted"].footprint is not outside
    assert loops_read(found["k/shifted"]) != frozenset()
    assert loops_read(found["k"]) == frozenset()
    assert found["_j"].footprint is not outside  # no iteration: kept
    assert found["_m"].footprint is not outside  # unknown trip count: kept
