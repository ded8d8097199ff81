"""Storage identity (tilewave.analysis.storage_identity, the pass's) and the verifier's own
storage model (tilewave.analysis.storage_model): views resolved to allocations and bytes,
pools, and a property test of both against brute-force byte overlap."""

from __future__ import annotations

import itertools

import numpy as np
import tvm
from example_loader import REPO_ROOT, load_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import tirx
from tvm.script import from_source
from tvm.script import tirx as T

from tilewave.analysis.shared_access import (
    AccessKind,
    collect_thread_extents,
    may_conflict,
    statement_accesses,
)
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.analysis.storage_identity import (
    BufferStorage,
    StorageRelation,
    common_unit,
    dynamic_shared_placed_apart,
    storage_map,
    storage_relation,
)
from tilewave.analysis.storage_model import SharedMemoryModel
from tilewave.ir.walker import post_order_visit


def buffers(func) -> dict[str, object]:
    found = {}

    def visit(node):
        if isinstance(node, (tirx.AllocBuffer, tirx.DeclBuffer)):
            found[node.buffer.name] = node.buffer

    post_order_visit(func.body, visit)
    return found


@T.prim_func
def views(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        V = T.decl_buffer((64,), "float32", data=S.data, scope="shared")
        H = T.decl_buffer((64,), "float16", data=T.address_of(V[16]), scope="shared")
        W = T.decl_buffer((8,), "float64", data=H.data, scope="shared")
        K = T.decl_buffer((8,), "float32", data=T.address_of(S[tx]), scope="shared")
        R = T.alloc_buffer((8,), "float32", scope="shared")
        D = T.alloc_buffer((8,), "float32", scope="shared.dyn")
        E = T.alloc_buffer((8,), "float32", scope="shared.dyn")
        S[tx] = A[tx]
        A[tx] = V[tx] + T.Cast("float32", H[tx]) + T.Cast("float32", W[0]) + K[0] + R[0]
        A[tx] = D[tx % 8] + E[tx % 8]


def test_views_resolve_to_their_allocation_and_byte_offset():
    found = buffers(views)
    storage = storage_map(views)
    s, v, h, w = (storage.of(found[n]) for n in "SVHW")
    assert (s.root.name, s.base, s.itemsize) == ("S", 0, 4)
    assert (v.root.name, v.base, v.itemsize) == ("S", 0, 4)
    assert (h.root.name, h.base, h.itemsize) == ("S", 64, 2)  # V[16] is byte 64
    assert (w.root.name, w.base, w.itemsize) == ("S", 64, 8)  # H's data pointer
    assert (storage.of(found["K"]).root.name, storage.of(found["K"]).base) == ("S", None)
    assert common_unit(s, h) == 2 and common_unit(h, w) == 2 and common_unit(s, w) == 4


def test_relations_between_buffers():
    found = buffers(views)
    storage = storage_map(views)
    rel = {(a, b): storage_relation(storage.of(found[a]), storage.of(found[b]))
           for a, b in itertools.permutations("SVHWKRDE", 2)}
    assert rel["S", "H"] is StorageRelation.SAME
    assert rel["S", "K"] is StorageRelation.UNKNOWN  # in S, at a per-thread offset
    assert rel["R", "K"] is StorageRelation.DISTINCT
    assert rel["S", "R"] is StorageRelation.DISTINCT  # two static allocations
    # TVM's merge places them later, apart: one statement uses both
    assert rel["D", "E"] is StorageRelation.DISTINCT
    assert rel["S", "D"] is StorageRelation.DISTINCT  # static vs dynamic shared


@T.prim_func
def dyn_lifetimes(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        D = T.alloc_buffer((32,), "float32", scope="shared.dyn")
        E = T.alloc_buffer((32,), "float32", scope="shared.dyn")
        F = T.alloc_buffer((32,), "float32", scope="shared.dyn")
        G = T.alloc_buffer((32,), "float32", scope="shared.dyn")
        D[tx] = A[tx]
        E[tx] = A[tx]
        A[tx] = D[31 - tx]
        for i in range(2):
            F[tx] = A[tx + i]
            A[tx] = E[tx] + F[31 - tx]
        G[tx] = A[tx]
        A[tx] = G[31 - tx]


def test_dynamic_buffers_in_use_at_once_are_apart_and_sequential_ones_may_share():
    found = buffers(dyn_lifetimes)
    storage = storage_map(dyn_lifetimes)
    rel = {(a, b): storage_relation(storage.of(found[a]), storage.of(found[b]))
           for a, b in itertools.permutations("DEFG", 2)}
    assert rel["D", "E"] is StorageRelation.DISTINCT  # E written while D is live
    assert rel["E", "F"] is StorageRelation.DISTINCT  # one loop uses both
    # TVM may reuse D's bytes for F and G, and E's or F's for G
    assert {rel["D", "F"], rel["D", "G"], rel["E", "G"], rel["F", "G"]} == {
        StorageRelation.UNKNOWN
    }


def test_a_view_whose_data_pointer_is_not_read_may_be_any_shared_memory():
    found = buffers(views)
    storage = storage_map(views)
    unknown = BufferStorage(found["K"], None, None, 4)
    assert {storage_relation(unknown, storage.of(found[n])) for n in "SRD"} == {
        StorageRelation.UNKNOWN
    }


@T.prim_func
def static_in_turn(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        R = T.alloc_buffer((32,), "float32", scope="shared")
        S[tx] = A[tx]
        A[tx] = S[31 - tx]
        R[tx] = A[tx]
        A[tx] = R[31 - tx]


def test_merge_static_smem_puts_static_buffers_in_one_pool():
    found = buffers(static_in_turn)
    s, r = found["S"], found["R"]
    merged = storage_map(static_in_turn, {"tirx.merge_static_smem": True})
    assert storage_relation(merged.of(s), merged.of(r)) is StorageRelation.UNKNOWN
    assert storage_relation(storage_map(static_in_turn).of(s), storage_map(
        static_in_turn).of(r)) is StorageRelation.DISTINCT
    # used by one statement: in use at once, so the merge keeps them apart
    found = buffers(views)
    storage = storage_map(views, {"tirx.merge_static_smem": True})
    assert storage_relation(storage.of(found["S"]), storage.of(found["R"])) is (
        StorageRelation.DISTINCT
    )


@T.prim_func
def planned(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        D = T.alloc_buffer((8,), "float32", scope="shared.dyn")
        E = T.alloc_buffer((8,), "float32", scope="shared.dyn")
        bar = T.alloc_buffer((1,), "uint64", scope="shared.dyn")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(1))
        A[tx] = D[tx % 8] + E[tx % 8]


def test_dynamic_buffers_of_a_kernel_tilewave_lays_out_are_apart():
    assert dynamic_shared_placed_apart(planned)
    assert not dynamic_shared_placed_apart(views)
    found = buffers(planned)
    storage = storage_map(planned)
    assert storage_relation(storage.of(found["D"]), storage.of(found["E"])) is (
        StorageRelation.DISTINCT
    )


# --- the verifier reports each aliasing hazard when the barrier is missing ---------------
#: the pass's before/after kernels: the verifier must find each "before" racy on its own
PASS_TESTS = load_module(
    REPO_ROOT / "tests/transforms/test_insert_shared_barriers_aliasing.py", "aliasing_pass_tests"
)


def _found(func) -> list[tuple[str, str, str]]:
    return sorted(
        (h.kind.name, h.first.buffer.name, h.second.buffer.name)
        for h in find_shared_hazards(func, "sm_90a")
    )


def test_the_verifier_reports_every_aliasing_form():
    kernels = PASS_TESTS
    assert _found(kernels.view_before) == [("RAW", "S", "V")]
    assert _found(kernels.offset_before) == [("RAW", "S", "H")]
    assert _found(kernels.reuse_before) == [("WAR", "Q", "Q_1")]
    assert _found(kernels.dyn_pair_before) == [("WAR", "S", "R")]
    assert _found(kernels.dyn_sizes_before) == [("RAW", "S", "H"), ("RAW", "S", "H")]
    assert _found(kernels.static_pair_before) == []
    with tvm.transform.PassContext(config={"tirx.merge_static_smem": True}):
        assert _found(kernels.static_pair_before) == [("WAR", "S", "R")]
    for name in ("view", "offset", "reuse", "dyn_pair", "dyn_sizes"):
        assert _found(getattr(kernels, f"{name}_after")) == [], name


def test_the_verifiers_model_is_its_own():
    """The verifier judges two buffers through SharedMemoryModel, not through the pass's
    storage map: accesses collected without a map still conflict there."""
    sizes = PASS_TESTS.dyn_sizes_before
    body = sizes.body.body.seq
    write, read = statement_accesses(body[2])[-1], statement_accesses(body[5])[-1]
    extents = collect_thread_extents(sizes)
    assert write.storage is None and not may_conflict(write, read, extents)
    assert SharedMemoryModel(sizes).conflict(write, read, extents)


# --- property: both models against brute-force byte overlap -------------------------------
_DTYPES = {"int8": 1, "float16": 2, "float32": 4, "float64": 8}
THREADS = 16
POOL_BYTES = 256


def _kernel(dt1, o1, c1, d1, dt2, o2, c2, d2) -> str:
    n1, n2 = ((POOL_BYTES - o) // _DTYPES[dt] for o, dt in ((o1, dt1), (o2, dt2)))
    return f'''@T.prim_func
def k(A: T.Buffer(({THREADS},), "float32")):
    for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):
        P = T.alloc_buffer(({POOL_BYTES},), "uint8", scope="shared")
        X = T.decl_buffer(({n1},), "{dt1}", data=T.address_of(P[{o1}]), scope="shared")
        Y = T.decl_buffer(({n2},), "{dt2}", data=T.address_of(P[{o2}]), scope="shared")
        X[(tx * {c1} + {d1}) % {n1}] = T.Cast("{dt1}", A[tx])
        A[tx] = T.Cast("float32", Y[(tx * {c2} + {d2}) % {n2}])
'''


def _overlap(dt1, o1, c1, d1, dt2, o2, c2, d2) -> bool:
    s1, s2 = _DTYPES[dt1], _DTYPES[dt2]
    n1, n2 = (POOL_BYTES - o1) // s1, (POOL_BYTES - o2) // s2
    tx = np.arange(THREADS)
    lo1 = o1 + ((tx * c1 + d1) % n1) * s1
    lo2 = o2 + ((tx * c2 + d2) % n2) * s2
    meet = (lo1[:, None] < lo2[None, :] + s2) & (lo2[None, :] < lo1[:, None] + s1)
    np.fill_diagonal(meet, False)  # one thread: program order
    return bool(meet.any())


@st.composite
def views_pair(draw):
    out = []
    for _ in range(2):
        dt = draw(st.sampled_from(sorted(_DTYPES)))
        offset_ = draw(st.integers(0, 64 // _DTYPES[dt])) * _DTYPES[dt]
        out += [dt, offset_, draw(st.sampled_from([0, 1, 2, 3, -1])), draw(st.integers(0, 40))]
    return tuple(out)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(views_pair())
def test_both_models_match_brute_force_byte_overlap(params):
    func = from_source(_kernel(*params), extra_vars={"T": T})
    truth = _overlap(*params)
    seq = func.body.body.seq
    storage = storage_map(func)
    write = next(a for a in statement_accesses(seq[3], storage=storage) if a.kind.writes)
    read = next(a for a in statement_accesses(seq[4], storage=storage)
            if a.kind is AccessKind.READ and a.buffer.name == "Y")
    extents = collect_thread_extents(func)
    assert may_conflict(write, read, extents) == truth, params
    hazards = [h for h in find_shared_hazards(func, "sm_90a") if h.buffer != "A"]
    assert bool(hazards) == truth, params


def test_the_property_sees_both_outcomes():
    cases = [("float32", 0, 1, 0, "float16", 0, 2, 0), ("float32", 0, 1, 0, "float16", 0, 1, 0)]
    assert [_overlap(*c) for c in cases] == [False, True]
    with tvm.transform.PassContext():
        for case in cases:
            test_both_models_match_brute_force_byte_overlap.hypothesis.inner_test(case)


@T.prim_func
def pointer_reach(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        P = T.alloc_buffer((512,), "uint8", scope="shared")
        X = T.decl_buffer((64,), "float32", data=P.data, scope="shared")
        Y = T.decl_buffer((64,), "float32", data=P.data, scope="shared")
        X[tx] = A[tx]
        T.call_extern("void", "consume", T.address_of(Y[64 + tx % 2]))
        T.call_extern("void", "consume", T.address_of(Y[tx % 2]))


def test_a_pointer_reaches_from_its_address_to_the_allocations_end():
    """An opaque reader of ``&Y[64 + k]`` (past Y's declared shape, as TIRx's flattened
    views are) cannot touch the bytes X[0..31] wrote below it; ``&Y[k]`` can."""
    import tilewave

    tilewave.register_intrinsic("consume", kind="reads_shared")
    try:
        seq = pointer_reach.body.body.seq
        storage = storage_map(pointer_reach)
        extents = collect_thread_extents(pointer_reach)
        write = statement_accesses(seq[3], storage=storage)[-1]
        far, near = (statement_accesses(seq[i], storage=storage)[-1] for i in (4, 5))
        assert far.indices is None and far.start is not None
        assert not may_conflict(write, far, extents) and may_conflict(write, near, extents)
        model = SharedMemoryModel(pointer_reach)
        plain = [statement_accesses(seq[i])[-1] for i in (3, 4, 5)]
        assert not model.conflict(plain[0], plain[1], extents)
        assert model.conflict(plain[0], plain[2], extents)
    finally:
        tilewave.unregister_intrinsic("consume")


@T.prim_func
def pool_parts(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        pool = T.alloc_buffer((1024,), "uint8", scope="shared.dyn")
        P = T.decl_buffer((64,), "float32", data=pool.data, scope="shared.dyn")
        Q = T.decl_buffer((64,), "float32", data=T.address_of(pool[256]), scope="shared.dyn")
        R = T.decl_buffer((64,), "float32", data=T.address_of(pool[128]), scope="shared.dyn")
        P[tx] = A[tx]
        Q[tx] = A[tx]
        R[tx] = A[tx]


def test_views_of_disjoint_parts_of_one_allocation_are_apart():
    found = buffers(pool_parts)
    storage = storage_map(pool_parts)
    p, q, r = (storage.of(found[n]) for n in "PQR")
    assert (p.byte_span, q.byte_span, r.byte_span) == ((0, 256), (256, 512), (128, 384))
    assert storage_relation(p, q) is StorageRelation.DISTINCT  # bytes 0-255 and 256-511
    assert storage_relation(p, r) is StorageRelation.SAME  # 128-255 shared
    assert storage_relation(q, r) is StorageRelation.SAME


@T.prim_func
def pool_parts_race(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        pool = T.alloc_buffer((1024,), "uint8", scope="shared.dyn")
        P = T.decl_buffer((64,), "float32", data=pool.data, scope="shared.dyn")
        Q = T.decl_buffer((64,), "float32", data=T.address_of(pool[256]), scope="shared.dyn")
        R = T.decl_buffer((64,), "float32", data=T.address_of(pool[128]), scope="shared.dyn")
        P[tx + 32] = A[tx]
        A[tx] = Q[31 - tx] + R[31 - tx]


def test_both_models_order_only_the_overlapping_view():
    from tilewave.analysis.shared_hazards import find_shared_hazards
    from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

    # P's elements 32..63 are bytes 128..255: R (from byte 128) reads them, Q does not
    hazards = find_shared_hazards(pool_parts_race, "sm_90a")
    assert [(h.kind.name, h.first.buffer_name, h.second.buffer_name) for h in hazards] == [
        ("RAW", "P", "R")
    ]
    after = insert_shared_barriers(pool_parts_race, "sm_90a")
    assert find_shared_hazards(after, "sm_90a") == []
    assert after.script().count("lds_barrier") == 1
