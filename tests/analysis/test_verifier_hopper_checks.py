"""The hazard verifier on Hopper's async protocol: a missing mbarrier wait, a wrong
``try_wait.parity``, a missing ``fence.proxy.async`` and a missing ``fence.mbarrier_init``
are reported (naming the buffer and statement), the fixed kernels and the sm_90a GEMM
examples verify clean, and tilewave.racecheck agrees on the wrong parities.

The checks: :mod:`tilewave.analysis.mbarrier_parity_check` and
:mod:`tilewave.analysis.proxy_fence_check`, called from ``find_shared_hazards``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tvm
from example_loader import load_module
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import tirx
from tvm.script import tirx as T
from wgmma_kernels import wgmma_after_stores

import tilewave
from tilewave.analysis.mbarrier_parity_check import (
    MbarrierParityHazard,
    mbarrier_parity_findings,
)
from tilewave.analysis.proxy_fence_check import MissingFenceHazard
from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import TIRMutator, rebuild
from tilewave.pipeline import build

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
TILE = 1024  # fp16 elements of one stage
HAND_ONLY = ["tilewave.InsertSharedBarriers", "tilewave.InjectFenceProxy"]


def ring_parity(k, stages):
    """The right parity of the consumers' wait on ``full[k % stages]``."""
    return k // stages % 2


def ring(stages, k_tiles, parity=ring_parity, wait=True, producer=ring_parity,
         init_fence=True):
    """A TMA ring of ``stages`` stages over ``k_tiles`` steps: thread 0 loads a stage
    (``expect_tx`` + TMA on ``full``), every thread waits on ``full`` with ``parity(k, S)``,
    reads the stage and arrives on ``empty``; thread 0 waits on ``empty`` with
    ``producer(k, S)`` and reloads the stage."""

    @T.prim_func
    def tma_ring(A_map: T.handle("tensormap"), B: T.Buffer((k_tiles * 128,), "float16")):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            A_s = T.alloc_buffer((stages * TILE,), "float16", scope="shared.dyn")
            full = T.alloc_buffer((stages,), "uint64", scope="shared.dyn")
            empty = T.alloc_buffer((stages,), "uint64", scope="shared.dyn")
            ready = T.alloc_buffer((1,), "uint32", scope="local")
            if tx == 0:
                for s in range(stages):
                    T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
                    T.ptx.mbarrier.init.shared.b64(T.address_of(empty[s]), T.uint32(128))
                if init_fence:
                    T.ptx.fence.mbarrier_init.release.cluster()
            T.tvm_storage_sync("shared")
            if tx == 0:
                for s in range(stages):
                    T.ptx.mbarrier.arrive.expect_tx.shared.b64(
                        T.address_of(full[s]), T.uint32(TILE * 2)
                    )
                    T.ptx[TMA_LOAD](
                        T.address_of(A_s[s * TILE]), T.address_of(A_map), s * 64, 0,
                        T.address_of(full[s]),
                    )
            for kt in range(k_tiles):
                if wait:
                    ready[0] = T.uint32(0)
                    while ready[0] == T.uint32(0):
                        T.ptx.mbarrier.try_wait.parity.shared.b64(
                            ready[0], T.address_of(full[kt % stages]),
                            T.Cast("uint32", parity(kt, stages)),
                        )
                B[kt * 128 + tx] = A_s[kt % stages * TILE + tx]
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[kt % stages]))
                if tx == 0 and kt + stages < k_tiles:
                    ready[0] = T.uint32(0)
                    while ready[0] == T.uint32(0):
                        T.ptx.mbarrier.try_wait.parity.shared.b64(
                            ready[0], T.address_of(empty[kt % stages]),
                            T.Cast("uint32", producer(kt, stages)),
                        )
                    T.ptx.mbarrier.arrive.expect_tx.shared.b64(
                        T.address_of(full[kt % stages]), T.uint32(TILE * 2)
                    )
                    T.ptx[TMA_LOAD](
                        T.address_of(A_s[kt % stages * TILE]), T.address_of(A_map),
                        (kt + stages) * 64, 0, T.address_of(full[kt % stages]),
                    )

    return tma_ring


def _parity_hazards(func):
    return [h for h in find_shared_hazards(func, "sm_90a") if isinstance(h, MbarrierParityHazard)]


def _wait_name(hazard):
    return callee_name(hazard.second.stmt.value)


# --- missing wait -----------------------------------------------------------------------
def test_missing_mbarrier_wait_is_a_raw_on_the_tile_and_the_fixed_ring_is_clean():
    hazards = find_shared_hazards(ring(3, 8, wait=False), "sm_90a")
    raw = [h for h in hazards if h.kind is HazardKind.RAW and h.buffer == "A_s"]
    assert raw, hazards
    assert "async_write A_s[" in str(raw[0]) and "read A_s[kt % 3 * 1024 + tx]" in str(raw[0])
    assert find_shared_hazards(ring(3, 8), "sm_90a") == []


# --- wrong parity -----------------------------------------------------------------------
def test_k_mod_2_on_a_four_stage_ring_repeats_a_parity_on_one_element():
    hazards = _parity_hazards(ring(4, 8, parity=lambda k, s: k % 2))
    texts = [str(h) for h in hazards]
    assert any(
        "wait number 2 on full[0] waits parity 0, the parity of its previous wait" in t
        and "(at kt = 4)" in t
        for t in texts
    ), texts
    assert all(h.buffer == "full" and h.kind is HazardKind.RAW for h in hazards)
    assert _wait_name(hazards[0]).startswith("tirx.ptx.mbarrier_try_wait_parity")


def test_k_mod_2_on_a_three_stage_ring_waits_parity_1_first_on_a_tma_barrier():
    (hazard,) = _parity_hazards(ring(3, 8, parity=lambda k, s: k % 2))
    text = str(hazard)
    assert text.startswith("wrong mbarrier parity on full: thread 0's first wait on full[1]")
    assert "before the TMA bytes of phase 0 land (at kt = 1)" in text
    assert "(k // stages) % 2" in text  # the fix


def test_consumer_waiting_parity_1_first_is_reported():
    (hazard,) = _parity_hazards(ring(3, 8, parity=lambda k, s: (k // s + 1) % 2))
    assert "first wait on full[0] waits parity 1" in str(hazard)


def test_producer_waiting_an_older_phase_than_its_own_arrival_is_reported():
    (hazard,) = _parity_hazards(ring(3, 8, producer=lambda k, s: (k // s + 1) % 2))
    text = str(hazard)
    assert "thread 0 arrived 1 time(s) on empty[0] and then waits parity 1" in text
    assert "(at kt = 0)" in text
    assert hazard.buffer == "empty"


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_the_right_parities_verify_clean(stages):
    assert find_shared_hazards(ring(stages, 8), "sm_90a") == []


@settings(max_examples=25, deadline=None)
@given(
    stages=st.integers(1, 4),
    k_tiles=st.integers(1, 9),
    a=st.integers(0, 1),
    b=st.integers(0, 1),
    c=st.integers(0, 1),
)
def test_a_parity_is_reported_exactly_when_it_differs_from_the_phase(stages, k_tiles, a, b, c):
    """Consumer parity ``(a k + b (k // S) + c) % 2``: the n-th wait on an element must
    wait phase n, i.e. ``(k // S) % 2`` for every step the loop runs."""

    def parity(k, s):
        return (a * k + b * (k // s) + c) % 2

    wrong = any(
        (a * k + b * (k // stages) + c) % 2 != k // stages % 2 for k in range(k_tiles)
    )
    findings = mbarrier_parity_findings(ring(stages, k_tiles, parity=parity))
    assert bool(findings) == wrong, [f.message for f in findings]


def test_the_check_stays_silent_when_the_trip_count_is_unknown():
    @T.prim_func
    def dynamic(n: T.int32):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            full = T.alloc_buffer((2,), "uint64", scope="shared.dyn")
            ready = T.alloc_buffer((1,), "uint32", scope="local")
            if tx == 0:
                T.ptx.mbarrier.init.shared.b64(T.address_of(full[0]), T.uint32(128))
                T.ptx.fence.mbarrier_init.release.cluster()
            T.tvm_storage_sync("shared")
            for _kt in range(n):
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(full[0]))
                ready[0] = T.uint32(0)
                while ready[0] == T.uint32(0):
                    T.ptx.mbarrier.try_wait.parity.shared.b64(
                        ready[0], T.address_of(full[0]), T.Cast("uint32", 0)
                    )

    # parity 0 in every step is wrong from the second step on, but `n` is not known
    assert mbarrier_parity_findings(dynamic) == []


# --- racecheck agrees on the parities ---------------------------------------------------
def _racecheck(func):
    with tvm.transform.PassContext(disabled_pass=HAND_ONLY):
        lowered = tilewave.lower(func, "sm_90a")
    # thread 0 waits on a stage in another K step than its warp: the "warps" schedule
    return tilewave.racecheck(lowered, "sm_90a", blocks=1, schedules=["warps"],
                              func_name="tma_ring_kernel", tensor_map_bytes={"A_map": TILE * 2})


@pytest.mark.parametrize(
    "parity",
    [lambda k, s: k % 2, lambda k, s: (k // s + 1) % 2],
    ids=["k%2", "first-parity-1"],
)
def test_racecheck_fails_the_wrong_parities_and_passes_the_right_one(parity):
    assert _racecheck(ring(4, 8)).ok
    report = _racecheck(ring(4, 8, parity=parity))
    assert not report.ok
    assert {f.kind for f in report.findings} & {"deadlock", "RAW", "uninitialised"}


# --- missing init fence -----------------------------------------------------------------
def test_missing_fence_mbarrier_init_is_reported_for_each_mbarrier():
    hazards = [
        h for h in find_shared_hazards(ring(3, 8, init_fence=False), "sm_90a")
        if isinstance(h, MissingFenceHazard)
    ]
    assert sorted(h.buffer for h in hazards) == ["empty", "full"]
    text = str(next(h for h in hazards if h.buffer == "full"))
    assert text.startswith("missing fence.mbarrier_init on full: `write full[s]` (mbarrier.init)")
    assert "T.ptx.fence.mbarrier_init.release.cluster()" in text
    assert all(h.fence == "fence.mbarrier_init" for h in hazards)


# --- missing proxy fence ----------------------------------------------------------------
def tma_store(fence):
    """Every thread writes its column of the C tile; thread 0 stores it with TMA.
    ``fence``: ``None``, ``"writer"`` (each thread, before the barrier) or ``"issuer"``
    (thread 0, after it: InjectFenceProxy's placement)."""

    @T.prim_func
    def store_tile(C_map: T.handle("tensormap"), A: T.Buffer((8192,), "float16")):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            C_s = T.alloc_buffer((8192,), "float16", scope="shared.dyn")
            for i in range(64):
                C_s[i * 128 + tx] = A[i * 128 + tx]
            if fence == "writer":
                T.ptx["fence.proxy.async.shared::cta"]()
            T.tvm_storage_sync("shared")
            if tx == 0:
                if fence == "issuer":
                    T.ptx["fence.proxy.async.shared::cta"]()
                T.ptx[TMA_STORE](T.address_of(C_map), 0, 0, T.address_of(C_s[0]))
                T.ptx.cp.async_.bulk.commit_group()
                T.ptx.cp.async_.bulk.wait_group.read(0)

    return store_tile


def test_tma_store_of_a_tile_written_by_stores_needs_fence_proxy_async():
    (hazard,) = find_shared_hazards(tma_store(None), "sm_90a")
    assert isinstance(hazard, MissingFenceHazard) and hazard.kind is HazardKind.RAW
    assert hazard.buffer == "C_s"
    assert str(hazard).startswith(
        "missing fence.proxy.async on C_s: `write C_s[i * 128 + tx]` (generic proxy) then "
        "`read C_s[*]` (async proxy: TMA / wgmma)"
    )
    assert callee_name(hazard.second.stmt.value) == "tirx.ptx.cp_async_bulk_tensor_s2g"


@pytest.mark.parametrize("fence", ["writer", "issuer"])
def test_a_proxy_fence_on_either_side_of_the_barrier_verifies_clean(fence):
    assert find_shared_hazards(tma_store(fence), "sm_90a") == []


def wgmma_tile(fence):
    """Stores fill a 128B-swizzled A and B tile, a barrier; one wgmma reads them through
    descriptors."""
    return wgmma_after_stores(fence=fence, storage_sync=True)


def test_wgmma_reading_tiles_written_by_stores_needs_fence_proxy_async():
    hazards = find_shared_hazards(wgmma_tile(False), "sm_90a")
    assert {h.buffer for h in hazards} == {"A_s", "B_s"}
    assert all(isinstance(h, MissingFenceHazard) for h in hazards)
    text = str(next(h for h in hazards if h.buffer == "B_s"))
    assert "`write B_s[i * 128 + tx]` (generic proxy) then `read B_s[" in text
    assert find_shared_hazards(wgmma_tile(True), "sm_90a") == []


@pytest.mark.parametrize(
    ("kernel", "name", "maps"),
    [(tma_store, "store_tile_kernel", {"C_map": 8192 * 2}),
     (lambda fence: wgmma_tile(bool(fence)), "wgmma_reads_kernel", None)],
    ids=["tma-store", "wgmma"],
)
def test_racecheck_agrees_on_the_proxy_fence(kernel, name, maps):
    def run(fence):
        with tvm.transform.PassContext(disabled_pass=HAND_ONLY):
            lowered = tilewave.lower(kernel(fence), "sm_90a")
        return tilewave.racecheck(lowered, "sm_90a", blocks=1, schedules=["warps"],
                                  func_name=name, tensor_map_bytes=maps)

    assert {f.kind for f in run(None).findings} == {"PROXY"}
    assert run("writer").ok


def _racecheck_kernel(name):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "racecheck"))
    import racecheck_kernels

    return getattr(racecheck_kernels, name)


@pytest.mark.parametrize(
    ("bug", "fixed", "hazard_type"),
    [
        ("mbarrier_wrong_parity_bug", "mbarrier_ok", MbarrierParityHazard),
        ("mbarrier_short_count_bug", "mbarrier_ok", MbarrierParityHazard),
        ("mbarrier_init_unpublished_bug", "mbarrier_ok", MissingFenceHazard),
        ("bulk_store_no_fence_bug", "bulk_store_ok", MissingFenceHazard),
        ("wgmma_no_fence_bug", "wgmma_ok", MissingFenceHazard),
    ],
)
def test_racechecks_bug_classes_are_reported_and_their_fixes_are_clean(bug, fixed, hazard_type):
    """racecheck's own buggy/fixed pairs (tests/racecheck/test_classes.py) of the classes
    these checks model: the verifier agrees on both halves."""
    hazards = find_shared_hazards(_racecheck_kernel(bug), "sm_90a")
    assert any(isinstance(h, hazard_type) for h in hazards), hazards
    assert find_shared_hazards(_racecheck_kernel(fixed), "sm_90a") == []


def test_a_descriptor_of_a_whole_buffer_is_a_wgmma_read():
    """``encode_matrix_descriptor(desc.data, smem.data, ...)``: the wgmma reads ``smem``
    (the verifier missed both racecheck wgmma bugs when only ``address_of`` was read)."""
    hazards = find_shared_hazards(_racecheck_kernel("wgmma_overwrite_bug"), "sm_90a")
    assert {(h.kind, h.buffer) for h in hazards} == {(HazardKind.WAR, "smem")}
    assert all(h.first.describe() == "read smem[*]" for h in hazards)


# --- the sm_90a GEMM examples -----------------------------------------------------------
SMALL = (256, 256, 512)  # 2 blocks, 8 K steps: the 3-stage ring wraps twice


@pytest.fixture(scope="module", params=["sm90_tma_wgmma_gemm", "sm90_ws_gemm"])
def example(request):
    return load_module(EXAMPLES / f"{request.param}.py")


@tvm.instrument.pass_instrument
class _Before:
    """Keeps the module a named pass receives."""

    def __init__(self, pass_name):
        self.pass_name = pass_name
        self.mod = None

    def run_before_pass(self, mod, info):
        if info.name == self.pass_name:
            self.mod = mod


def _synchronised_by_tilewave(func):
    """``func`` after tilewave's barrier and fence passes (before op lowering)."""
    seen = _Before("tilewave.LowerTilewaveOps")
    build(func, "sm_90a", instruments=[seen])
    return next(f for f in seen.mod.functions.values() if isinstance(f, tirx.PrimFunc))


def test_hand_examples_verify_clean_with_the_protocol_checks(example):
    assert find_shared_hazards(example.hand(*SMALL), "sm_90a") == []
    assert find_shared_hazards(example.hand(4096, 4096, 4096), "sm_90a") == []


@pytest.mark.parametrize("variant", ["hand", "stripped"])
def test_examples_synchronised_by_tilewave_verify_clean(example, variant):
    func = getattr(example, variant)(*SMALL)
    assert find_shared_hazards(_synchronised_by_tilewave(func), "sm_90a") == []


def test_stripped_examples_miss_the_init_and_proxy_fences(example):
    hazards = find_shared_hazards(example.stripped(*SMALL), "sm_90a")
    fences = {(h.buffer, h.fence) for h in hazards if isinstance(h, MissingFenceHazard)}
    assert fences == {("full", "fence.mbarrier_init"), ("empty", "fence.mbarrier_init"),
                      ("C_s", "fence.proxy.async")}


def _with_parity(func, buffer, parity):
    """``func`` with the parity of every wait on ``buffer[k % S]`` replaced by
    ``parity(k)`` (``k``: the loop variable in the element index)."""

    class _Reparity(TIRMutator):
        def visit_Call(self, node):
            node = self.generic_visit(node)
            if not callee_name(node).startswith("tirx.ptx.mbarrier_try_wait_parity"):
                return node
            element = node.args[1].args[0].args[0]  # cvta(address_of(bar[k % S]))
            if element.source.name != buffer:
                return node
            k = element.indices[0].a
            return rebuild(node, {"args": [*node.args[:2], tirx.Cast("uint32", parity(k)),
                                           *node.args[3:]]})

    return func.with_body(_Reparity().visit(func.body))


def test_wrong_consumer_parity_in_the_examples_is_reported(example):
    func = _with_parity(example.hand(*SMALL), "full", lambda k: tirx.floormod(k, 2))
    hazards = [h for h in find_shared_hazards(func, "sm_90a")
               if isinstance(h, MbarrierParityHazard)]
    assert [h.buffer for h in hazards] == ["full"]
    assert "first wait on full[1] waits parity 1" in str(hazards[0])


#: racecheck schedules the examples run under (tests/examples/test_sm90_kernels.py says why)
EXAMPLE_SCHEDULES = {"sm90_tma_wgmma_gemm": ["warps"], "sm90_ws_gemm": ["lockstep"]}
TMA_BOX_BYTES = {"A_map": 128 * 64 * 2, "B_map": 256 * 64 * 2, "C_map": 128 * 64 * 2}


def test_racecheck_deadlocks_on_the_example_the_verifier_reports(example):
    """One 128 x 256 tile, 8 K steps: with ``k % 2`` the waiters of ``full[1]`` pass before
    its bytes land and the ring's phases fall out of step."""
    func = _with_parity(example.hand(128, 256, 512), "full", lambda k: tirx.floormod(k, 2))
    assert any(isinstance(h, MbarrierParityHazard) for h in find_shared_hazards(func, "sm_90a"))
    with tvm.transform.PassContext(disabled_pass=HAND_ONLY):
        lowered = tilewave.lower(func, "sm_90a")
    report = tilewave.racecheck(lowered, "sm_90a", blocks=1,
                                schedules=EXAMPLE_SCHEDULES[example.NAME],
                                func_name=f"{example.NAME}_kernel",
                                tensor_map_bytes=TMA_BOX_BYTES)
    assert not report.ok
    assert "deadlock" in {f.kind for f in report.findings}, report.format()


def test_ws_producer_without_the_free_stage_offset_never_returns():
    ws = load_module(EXAMPLES / "sm90_ws_gemm.py")
    func = _with_parity(ws.hand(*SMALL), "empty", lambda k: tirx.floormod(tirx.floordiv(k, 3), 2))
    (hazard,) = [h for h in find_shared_hazards(func, "sm_90a")
                 if isinstance(h, MbarrierParityHazard)]
    assert "thread 0 waits on empty[1] for 3 completed phases" in str(hazard)
    assert "complete at most 2: the wait never returns" in str(hazard)


def test_barrier_invariant_ignores_the_protocol_checks():
    """The barrier pass runs before InjectFenceProxy: its invariant asks for barrier
    hazards only (``protocol=False``), and the proxy fence is still reported after it."""
    store = tma_store(None)
    assert find_shared_hazards(store, "sm_90a", protocol=False) == []
    assert isinstance(find_shared_hazards(store, "sm_90a")[0], MissingFenceHazard)


# -- plain bulk copies (cp.async.bulk, no tensor map) complete on their mbarrier too ------


def test_plain_bulk_copy_lands_on_its_mbarrier_wait():
    assert find_shared_hazards(_racecheck_kernel("tma_load_ok"), "sm_90a") == []
    hazards = find_shared_hazards(_racecheck_kernel("tma_load_no_wait_bug"), "sm_90a")
    assert [(h.kind, h.buffer) for h in hazards] == [(HazardKind.RAW, "S")]
