"""Footprints: accesses of different statements share proof results exactly when the
proofs cannot tell them apart (same index structure, same variables, same loops)."""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis import footprint
from tilewave.analysis.footprint import FootprintCache
from tilewave.analysis.shared_access import (
    AccessScope,
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
