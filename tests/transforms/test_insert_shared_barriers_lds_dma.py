"""AMD LDS DMA pipelines: ``wait_async_ops(N)`` (``vmcnt(N)``) with the largest safe ``N``.

An LDS DMA (``llvm.amdgcn.global.load.lds``) is one vector-memory load per wave, counted on
``vmcnt`` from its issue. ``vmcnt(N)`` lets at most ``N`` of the wave's vector-memory
operations stay outstanding, loads complete in issue order, and every other load or store
issued after a copy only raises the count: so a copy with ``N`` copies issued after it on
every path is retired by ``vmcnt(N)``. A multi-stage DMA pipeline then keeps its younger
stages in flight across the barrier, as the cp.async pipelines do with ``wait_group N``.

Every output is checked by the verifier (its own model of the counter) and by
``tilewave.racecheck`` (which executes the copies lane by lane, landing at the wait that
counts them); the lowered kernels run on the ISA simulator against NumPy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.script import tirx as T
from wait_counts import with_wait

import tilewave
from tilewave.analysis.shared_access import FAR
from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.ir.ops import make_call
from tilewave.ir.walker import post_order_visit, rewrite_calls
from tilewave.racecheck import racecheck
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

DMA = "llvm.amdgcn.global.load.lds"

# fmt: off


# -- 3 stages: the copy of tile k + 2 is issued while tile k is read ---------------------
@T.prim_func
def three_stage(A: T.Buffer((10, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    T.func_attr({"global_symbol": "three_stage"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 128), "float32", scope="shared")
        T.call_llvm_intrin("void", DMA, T.address_of(A[0, tx]),
                           T.address_of(S[0, tx // 64 * 64]), 4, 0, 0)
        T.call_llvm_intrin("void", DMA, T.address_of(A[1, tx]),
                           T.address_of(S[1, tx // 64 * 64]), 4, 0, 0)
        for k in range(8):
            T.call_llvm_intrin("void", DMA, T.address_of(A[k + 2, tx]),
                               T.address_of(S[(k + 2) % 3, tx // 64 * 64]), 4, 0, 0)
            B[k, tx] = S[k % 3, 127 - tx]  # another wave's half


@T.prim_func
def three_stage_after(A: T.Buffer((10, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    T.func_attr({"global_symbol": "three_stage"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 128), "float32", scope="shared")
        T.call_llvm_intrin("void", DMA, T.address_of(A[0, tx]),
                           T.address_of(S[0, tx // 64 * 64]), 4, 0, 0)
        T.call_llvm_intrin("void", DMA, T.address_of(A[1, tx]),
                           T.address_of(S[1, tx // 64 * 64]), 4, 0, 0)
        for k in range(8):
            # tile k landed, tile k + 1 stays in flight; the barrier also orders iteration
            # k - 1's reads of S[(k + 2) % 3] before this iteration's copy into it
            T.tilewave.wait_async_ops(1)
            T.tilewave.lds_barrier()
            T.call_llvm_intrin("void", DMA, T.address_of(A[k + 2, tx]),
                               T.address_of(S[(k + 2) % 3, tx // 64 * 64]), 4, 0, 0)
            B[k, tx] = S[k % 3, 127 - tx]


# -- 2 stages: the copy of tile k + 1 overlaps the reads of tile k ----------------------
@T.prim_func
def two_stage(A: T.Buffer((9, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    T.func_attr({"global_symbol": "two_stage"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 128), "float32", scope="shared")
        T.call_llvm_intrin("void", DMA, T.address_of(A[0, tx]),
                           T.address_of(S[0, tx // 64 * 64]), 4, 0, 0)
        for k in range(8):
            T.call_llvm_intrin("void", DMA, T.address_of(A[k + 1, tx]),
                               T.address_of(S[(k + 1) % 2, tx // 64 * 64]), 4, 0, 0)
            B[k, tx] = S[k % 2, 127 - tx]


@T.prim_func
def two_stage_after(A: T.Buffer((9, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    T.func_attr({"global_symbol": "two_stage"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 128), "float32", scope="shared")
        T.call_llvm_intrin("void", DMA, T.address_of(A[0, tx]),
                           T.address_of(S[0, tx // 64 * 64]), 4, 0, 0)
        for k in range(8):
            # one wait + barrier a step, before the prefetch: it lands tile k and orders
            # the reads of step k - 1 before the copy into the same slot
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            T.call_llvm_intrin("void", DMA, T.address_of(A[k + 1, tx]),
                               T.address_of(S[(k + 1) % 2, tx // 64 * 64]), 4, 0, 0)
            B[k, tx] = S[k % 2, 127 - tx]


# -- a guarded prefetch: in the last step no copy follows tile k's, so vmcnt(1) could pass
# with tile k still in flight (a store issued after it may complete first): N stays 0 ----
@T.prim_func
def guarded_prefetch(A: T.Buffer((10, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    T.func_attr({"global_symbol": "guarded_prefetch"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 128), "float32", scope="shared")
        T.call_llvm_intrin("void", DMA, T.address_of(A[0, tx]),
                           T.address_of(S[0, tx // 64 * 64]), 4, 0, 0)
        T.call_llvm_intrin("void", DMA, T.address_of(A[1, tx]),
                           T.address_of(S[1, tx // 64 * 64]), 4, 0, 0)
        for k in range(8):
            if k < 6:
                T.call_llvm_intrin("void", DMA, T.address_of(A[k + 2, tx]),
                                   T.address_of(S[(k + 2) % 3, tx // 64 * 64]), 4, 0, 0)
            B[k, tx] = S[k % 3, 127 - tx]


@T.prim_func
def guarded_prefetch_after(A: T.Buffer((10, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    T.func_attr({"global_symbol": "guarded_prefetch"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 128), "float32", scope="shared")
        T.call_llvm_intrin("void", DMA, T.address_of(A[0, tx]),
                           T.address_of(S[0, tx // 64 * 64]), 4, 0, 0)
        T.call_llvm_intrin("void", DMA, T.address_of(A[1, tx]),
                           T.address_of(S[1, tx // 64 * 64]), 4, 0, 0)
        for k in range(8):
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            if k < 6:
                T.call_llvm_intrin("void", DMA, T.address_of(A[k + 2, tx]),
                                   T.address_of(S[(k + 2) % 3, tx // 64 * 64]), 4, 0, 0)
            B[k, tx] = S[k % 3, 127 - tx]
# fmt: on

CASES = [
    (three_stage, three_stage_after),
    (two_stage, two_stage_after),
    (guarded_prefetch, guarded_prefetch_after),
]


@pytest.mark.parametrize("before,after", CASES, ids=lambda f: f.attrs["global_symbol"])
def test_lds_dma_pipeline_waits_with_the_largest_safe_count(before, after):
    out = insert_shared_barriers(before, "gfx942")
    tvm.ir.assert_structural_equal(out, after)
    assert find_shared_hazards(out, "gfx942") == []


def test_one_wait_too_weak_is_a_raw_for_the_verifier_and_for_racecheck():
    assert racecheck(three_stage_after, "gfx942").ok
    weak = with_wait(three_stage_after, 2)
    hazards = find_shared_hazards(weak, "gfx942")
    # tile k may still be in flight when it is read (RAW); copy k - 1 is not when copy
    # k + 2 reuses its slot: vmcnt(2) in iteration k retires it (three copies out), which
    # the exact iteration distances see (no WAW), as racecheck does
    assert {h.kind for h in hazards} == {HazardKind.RAW}
    assert {h.first.kind.name for h in hazards} == {"ASYNC_WRITE"}
    report = racecheck(weak, "gfx942")
    assert report.kinds() == {"RAW"}, report.format()


def test_inputs_race_and_tilewave_output_is_racecheck_clean():
    for before, _ in CASES:
        assert {"RAW", "WAR"} <= racecheck(before, "gfx942").kinds()
        lowered = tilewave.lower(before, "gfx942")
        name = before.attrs["global_symbol"] + "_kernel"
        report = racecheck(lowered, "gfx942", func_name=name)
        assert report.ok, report.format()


def test_the_llvm_path_keeps_the_younger_copy_in_flight_across_the_barrier():
    # LowerTilewaveOps: vmcnt(1) before the barrier and no vmcnt(0) added by the AMD
    # barrier waits (the copy left in flight is bounded on purpose)
    asm = tilewave.build(three_stage, "gfx942").source
    body = asm[asm.index("three_stage_kernel:") :]
    body = body[: body.index("s_endpgm")]
    waits = [ln.strip() for ln in body.splitlines() if "s_waitcnt" in ln and "vmcnt" in ln]
    assert any("vmcnt(1)" in w for w in waits), waits
    loop = body[body.index("vmcnt(1)") :]
    assert "vmcnt(0)" not in loop[: loop.index("s_barrier")]


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codegen" / "amdgcn"))
ROWS = {"three_stage": 10, "two_stage": 9, "guarded_prefetch": 10}


def _inputs(rows: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.random.default_rng(7).standard_normal((rows, 128)).astype(np.float32)
    return a, np.zeros((8, 128), np.float32)


def _run_llvm_asm(asm: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    from llvm_asm_simulator import LLVMAsmSimulator

    a, b = _inputs(ROWS[name])
    sim = LLVMAsmSimulator(asm, f"{name}_kernel")
    sim.wg_size = (128, 1, 1)  # type: ignore[attr-defined]
    sim.run([a, b], (1, 1, 1))
    return b, a[:8, ::-1]


@pytest.mark.parametrize("func", [three_stage, two_stage, guarded_prefetch],
                         ids=lambda f: f.attrs["global_symbol"])
def test_llvm_assembly_of_the_pipelines_computes_the_reference(func):
    # the default build: TVM's LLVM codegen, run on the ISA simulator (loads complete in
    # issue order; an LDS read of a copy still counted on vmcnt is an error)
    name = func.attrs["global_symbol"]
    result, expected = _run_llvm_asm(tilewave.build(func, "gfx942").source, name)
    np.testing.assert_array_equal(result, expected)


def test_llvm_assembly_with_a_weaker_count_reads_a_tile_in_flight():
    from isa_simulator import SimulationError

    asm = tilewave.build(three_stage, "gfx942").source
    assert "vmcnt(1)" in asm
    weak = asm.replace("vmcnt(1)", "vmcnt(2)")
    try:
        result, expected = _run_llvm_asm(weak, "three_stage")
    except SimulationError:
        return  # the simulator saw the read of a slot a copy still writes
    assert not np.array_equal(result, expected)


@pytest.mark.parametrize("func", [three_stage, two_stage, guarded_prefetch],
                         ids=lambda f: f.attrs["global_symbol"])
def test_lowered_pipelines_compute_the_reference_on_the_isa_simulator(func):
    # tilewave's own assembly backend (its waitcnt pass also drains vmcnt before each LDS
    # read of a DMA'd buffer, so this checks the result, not the overlap)
    from isa_simulator import simulate

    from tilewave.codegen import amdgcn

    a, b = _inputs(ROWS[func.attrs["global_symbol"]])
    kernel = amdgcn.compile_device_func(amdgcn.device_function(func, "gfx942"), "gfx942")
    simulate(kernel.asm, [a, b], (1, 1, 1), (128, 1, 1))
    np.testing.assert_array_equal(b, a[:8, ::-1])


# -- property: generated DMA pipelines get the largest count that is still enough --------
def _dma_pipeline(stages: int, k_tiles: int, guarded: bool):
    """An ``stages``-deep LDS DMA pipeline over ``k_tiles`` tiles: a prologue loop of
    ``stages - 1`` copies, then one prefetch ``stages - 1`` tiles ahead per step (guarded by
    ``k + stages - 1 < k_tiles``, or unconditional into a padded source)."""
    ahead = stages - 1
    rows = k_tiles + ahead

    @T.prim_func
    def plain(A: T.Buffer((rows, 128), "float32"), B: T.Buffer((k_tiles, 128), "float32")):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            S = T.alloc_buffer((stages, 128), "float32", scope="shared")
            for p in range(ahead):
                T.call_llvm_intrin("void", DMA, T.address_of(A[p, tx]),
                                   T.address_of(S[p, tx // 64 * 64]), 4, 0, 0)
            for k in range(k_tiles):
                T.call_llvm_intrin("void", DMA, T.address_of(A[k + ahead, tx]),
                                   T.address_of(S[(k + ahead) % stages, tx // 64 * 64]), 4, 0, 0)
                B[k, tx] = S[k % stages, 127 - tx]

    @T.prim_func
    def guarded_kernel(A: T.Buffer((rows, 128), "float32"),
                       B: T.Buffer((k_tiles, 128), "float32")):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            S = T.alloc_buffer((stages, 128), "float32", scope="shared")
            for p in range(ahead):
                T.call_llvm_intrin("void", DMA, T.address_of(A[p, tx]),
                                   T.address_of(S[p, tx // 64 * 64]), 4, 0, 0)
            for k in range(k_tiles):
                if k + ahead < k_tiles:
                    T.call_llvm_intrin("void", DMA, T.address_of(A[k + ahead, tx]),
                                       T.address_of(S[(k + ahead) % stages, tx // 64 * 64]),
                                       4, 0, 0)
                B[k, tx] = S[k % stages, 127 - tx]

    return (guarded_kernel if guarded else plain).with_attr("global_symbol", "pipeline")


def _waits(func) -> list[int]:
    found: list[int] = []

    def visit(call):
        if call.op.name == "tilewave.wait_async_ops":
            found.append(int(call.args[0].value))

    post_order_visit(func.body, visit, types=(tvm.ir.expr.Call,))
    return found


def _bumped(func, index: int):
    """``func`` with its ``index``-th ``wait_async_ops`` leaving one more copy in flight."""
    seen = 0

    def rewrite(call):
        nonlocal seen
        if call.op.name != "tilewave.wait_async_ops":
            return None
        seen += 1
        if seen - 1 != index:
            return None
        count = int(call.args[0].value) + 1
        return make_call("tilewave.wait_async_ops", tvm.tirx.IntImm("int32", count))

    return func.with_body(rewrite_calls(func.body, rewrite))


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 6), st.integers(0, 3), st.booleans())
def test_generated_dma_pipelines_wait_for_exactly_what_they_need(stages, extra, guarded):
    func = _dma_pipeline(stages, stages + extra, guarded)
    out = insert_shared_barriers(func, "gfx942")
    assert find_shared_hazards(out, "gfx942") == []
    assert racecheck(out, "gfx942").ok
    waits = _waits(out)
    # in the steady state tiles k + 1 .. k + stages - 2 may stay in flight; a guarded
    # prefetch is not issued in the last steps, where only vmcnt(0) is enough. The pass
    # tells copies apart by exact iteration distances below FAR (FAR or more are one
    # class), so beyond FAR + 1 stages it keeps FAR - 1 copies in flight: safe, fewer
    # stages of overlap
    assert max(waits) == (0 if guarded else min(stages - 2, FAR - 1)), out.script()
    if stages - 2 <= FAR - 1:
        for index in range(len(waits)):  # each wait is the weakest that is enough
            assert "RAW" in racecheck(_bumped(out, index), "gfx942").kinds(), (index, waits)
