"""InsertSharedBarriers on shared buffers that share storage, and on stores every thread
makes alike (issue 15), before/after; the verifier checks every output, and whole kernels
lowered by ``tilewave.lower`` run clean under tilewave's racecheck."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from aliasing_kernels import CASES
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.pipeline import BARRIER_STAGE, STAGES
from tilewave.racecheck import racecheck
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    insert_shared_barriers,
)


def check(before, expected, target="sm_90a", config=None):
    """The pass gives ``expected``, the verifier finds nothing left, and a second run
    changes nothing."""
    with tvm.transform.PassContext(config=config or {}):
        after = insert_shared_barriers(before, target)
        symbol = after.attrs["global_symbol"] if after.attrs else None
        want = expected.with_attr("global_symbol", symbol) if symbol else expected
        tvm.ir.assert_structural_equal(after, want)
        assert find_shared_hazards(after, target) == []
        tvm.ir.assert_structural_equal(insert_shared_barriers(after, target), after)


# --- a decl_buffer view of another buffer's data ------------------------------------------
@T.prim_func
def view_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        V = T.decl_buffer((64,), "float32", data=S.data, scope="shared")
        S[tx] = A[tx]
        B[tx] = V[63 - tx]


@T.prim_func
def view_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        V = T.decl_buffer((64,), "float32", data=S.data, scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = V[63 - tx]


def test_a_view_of_another_buffers_data_is_the_same_memory():
    check(view_before, view_after)


@T.prim_func
def own_elements_through_a_view(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        V = T.decl_buffer((64,), "float32", data=S.data, scope="shared")
        S[tx] = A[tx]
        B[tx] = V[tx]


def test_a_thread_reading_its_own_element_through_a_view_needs_no_barrier():
    check(own_elements_through_a_view, own_elements_through_a_view)


# --- a view at an offset: T.address_of(S[128]) ---------------------------------------------
@T.prim_func
def offset_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        H = T.decl_buffer((32,), "float32", data=T.address_of(S[32]), scope="shared")
        S[tx + 32] = A[tx]
        B[tx] = H[31 - tx]
        S[tx] = A[tx + 32]
        B[tx + 32] = H[tx]


@T.prim_func
def offset_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        H = T.decl_buffer((32,), "float32", data=T.address_of(S[32]), scope="shared")
        S[tx + 32] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = H[31 - tx]
        S[tx] = A[tx + 32]
        B[tx + 32] = H[tx]


def test_a_view_at_an_offset_is_compared_byte_for_byte():
    """H[i] is S[32 + i]: the write of S[tx + 32] meets H[31 - tx] of another thread; the
    write of S[tx] (the lower half) meets nothing H reads, so no second barrier."""
    check(offset_before, offset_after)


# --- the form StorageRewrite leaves: a later buffer as a view of an earlier one's data -----
@T.prim_func
def reuse_before(A: T.Buffer((32,), "int32"), B: T.Buffer((32,), "int32")):
    with T.launch_thread("threadIdx.x", 32) as tx:
        Q = T.alloc_buffer((32,), "int32", scope="shared")
        Q_1 = T.decl_buffer((32,), "int32", data=Q.data, scope="shared")
        B[tx] = B[tx] * 2 + Q[tx]
        Q_1[31 - tx] = A[tx] + 1


@T.prim_func
def reuse_after(A: T.Buffer((32,), "int32"), B: T.Buffer((32,), "int32")):
    with T.launch_thread("threadIdx.x", 32) as tx:
        Q = T.alloc_buffer((32,), "int32", scope="shared")
        Q_1 = T.decl_buffer((32,), "int32", data=Q.data, scope="shared")
        B[tx] = B[tx] * 2 + Q[tx]
        T.tilewave.lds_barrier()
        Q_1[31 - tx] = A[tx] + 1


def test_storage_rewrite_reuse_orders_the_old_reads_before_the_new_writes():
    check(reuse_before, reuse_after)


# --- dynamic shared memory: every shared.dyn buffer is one block ----------------------------
@T.prim_func
def dyn_pair_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        R = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        B[tx] = S[tx]
        R[63 - tx] = A[tx]


@T.prim_func
def dyn_pair_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        R = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        B[tx] = S[tx]
        T.tilewave.lds_barrier()
        R[63 - tx] = A[tx]


def test_two_dynamic_buffers_may_be_merged_over_each_other_later():
    """TVM's MergeSharedMemoryAllocations runs after the barrier stage and may put R over
    S (S is dead once read): the read of S and the write of R are ordered."""
    check(dyn_pair_before, dyn_pair_after)


@T.prim_func
def dyn_pair_planned(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        R = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        bar = T.alloc_buffer((1,), "uint64", scope="shared.dyn")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(1))
        B[tx] = S[tx]
        R[63 - tx] = A[tx]


def test_dynamic_buffers_tilewave_lays_out_itself_stay_apart():
    """With an addressed dynamic buffer tilewave's planner places every shared.dyn buffer
    in allocation order without reuse (TVM's merge never sees the kernel): S and R never
    overlap and nothing else uses the mbarrier, so no barrier at all."""
    check(dyn_pair_planned, dyn_pair_planned)


@T.prim_func
def dyn_sizes_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float16")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        H = T.decl_buffer((128,), "float16", data=S.data, scope="shared.dyn")
        S[tx] = A[tx]
        B[tx] = H[tx * 2 + 1]
        S[tx] = A[tx] * T.float32(2)
        B[tx] = B[tx] + H[127 - tx * 2]


@T.prim_func
def dyn_sizes_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float16")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        H = T.decl_buffer((128,), "float16", data=S.data, scope="shared.dyn")
        S[tx] = A[tx]
        B[tx] = H[tx * 2 + 1]
        S[tx] = A[tx] * T.float32(2)
        T.tilewave.lds_barrier()
        B[tx] = B[tx] + H[127 - tx * 2]


def test_views_with_another_element_size_are_compared_by_bytes():
    """H[2 tx + 1] is the upper half of S[tx] (the thread's own bytes: no barrier);
    H[127 - 2 tx] is the upper half of S[63 - tx], another thread's."""
    check(dyn_sizes_before, dyn_sizes_after)


@T.prim_func
def static_pair_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        R = T.alloc_buffer((64,), "float32", scope="shared")
        B[tx] = S[tx]
        R[63 - tx] = A[tx]


@T.prim_func
def static_pair_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        R = T.alloc_buffer((64,), "float32", scope="shared")
        B[tx] = S[tx]
        T.tilewave.lds_barrier()
        R[63 - tx] = A[tx]


def test_static_buffers_are_apart_unless_tvm_merges_them_too():
    check(static_pair_before, static_pair_before)
    check(static_pair_before, static_pair_after, config={"tirx.merge_static_smem": True})


# --- stores every thread makes alike ---------------------------------------------------------
@T.prim_func
def row_copy_before(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for i in range(128):
            S[i] = A[i]
        B[tx] = S[127 - tx]


@T.prim_func
def row_copy_after(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for i in range(128):
            S[i] = A[i]
        T.tilewave.lds_barrier()
        B[tx] = S[127 - tx]


def test_a_row_every_thread_copies_is_synchronised_once_after_the_loop():
    check(row_copy_before, row_copy_after)


@T.prim_func
def bound_value_before(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for i in range(128):
            v = T.bind(A[i] * T.float32(2))
            S[0] = v
        B[tx] = S[0]


@T.prim_func
def bound_value_after(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for i in range(128):
            v = T.bind(A[i] * T.float32(2))
            S[0] = v
        T.tilewave.lds_barrier()
        B[tx] = S[0]


def test_a_bound_value_every_thread_stores_is_synchronised_once():
    """Every thread stores the same sequence of values into S[0]: whichever thread writes
    last, S[0] ends as the last value once all have passed the barrier."""
    check(bound_value_before, bound_value_after)


@T.prim_func
def read_back_each_iteration(A: T.Buffer((128,), "float32"), B: T.Buffer((8192,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for i in range(128):
            S[0] = A[i]
            B[i * 64 + tx] = S[0]


@T.prim_func
def read_back_each_iteration_after(
    A: T.Buffer((128,), "float32"), B: T.Buffer((8192,), "float32")
):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for i in range(128):
            T.tilewave.lds_barrier()
            S[0] = A[i]
            T.tilewave.lds_barrier()
            B[i * 64 + tx] = S[0]


def test_reads_between_the_stores_still_order_every_iteration():
    check(read_back_each_iteration, read_back_each_iteration_after)


@T.prim_func
def per_thread_value(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for _i in range(128):
            S[0] = A[tx]
        B[tx] = S[0]


def test_a_value_that_differs_per_thread_is_not_a_same_element_store():
    after = insert_shared_barriers(per_thread_value, "sm_90a")
    loop = after.body.body.seq[1]
    assert "lds_barrier" in loop.body.script()  # WAW between iterations of two threads
    assert find_shared_hazards(after, "sm_90a") == []


# --- whole kernels through tilewave.lower, judged by racecheck ------------------------------
def _device_kernel(lowered: tvm.IRModule):
    for gvar, func in lowered.functions.items():
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is not None and target.kind.name == "cuda":
            return gvar.name_hint, func
    raise AssertionError("no device kernel")


def _same_statement_waw(finding) -> bool:
    """All threads storing one element in one statement: no barrier can order a statement
    with itself (the same value here)."""
    return finding.kind == "WAW" and len(set(finding.statements)) == 1


#: results are checked on the GPU (benchmarks/racecheck_h100.py); two schedules keep the
#: 512-iteration row copies quick
@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_kernel_is_race_free(name):
    case = CASES[name]
    with tvm.transform.PassContext(config=case.config):
        lowered = tilewave.lower(case.func, "sm_90a")
    symbol, kernel = _device_kernel(lowered)
    rng = np.random.default_rng(0)
    inputs = {k: rng.standard_normal(n).astype(dt) for k, (n, dt) in case.inputs.items()}
    report = racecheck(kernel, "sm_90a", args={k: v.copy() for k, v in inputs.items()},
                       func_name=symbol, schedules=("lockstep", "reverse"))
    errors = [f for f in report.errors if not _same_statement_waw(f)]
    assert not errors, report.format()


def test_storage_rewrite_really_folds_the_two_buffers_and_the_stage_sees_it():
    seen = {}

    @tvm.instrument.pass_instrument
    class Capture:
        def run_before_pass(self, mod, info):
            if info.name == "tilewave.InsertSharedBarriers":
                seen["before"] = mod

        def run_after_pass(self, mod, info):
            if info.name == "tilewave.InsertSharedBarriers":
                seen["after"] = mod

    tilewave.lower(CASES["storage_rewrite_reuse"].func, "sm_90a", instruments=[Capture()])
    before = seen["before"]["storage_rewrite_reuse"].script()
    assert "data=Q.data" in before  # R became a view of Q's memory
    after = seen["after"]["storage_rewrite_reuse"].script()
    assert after.count("lds_barrier") + after.count("tvm_storage_sync") == 3


def test_tvms_merge_after_the_stage_lays_a_buffer_over_another_and_it_is_ordered():
    """With StorageRewrite off, MergeSharedMemoryAllocations (after the barrier stage) puts
    R at Q's offset in the dynamic block; the stage had already ordered Q's last read before
    R's first write, treating the two shared.dyn buffers as one memory."""
    case = CASES["dyn_merge"]
    with tvm.transform.PassContext(config=case.config):
        _, kernel = _device_kernel(tilewave.lower(case.func, "sm_90a"))
    text = kernel.script()
    assert 'R_1 = buf_dyn_shmem.view("float32")' in text
    assert 'Q = buf_dyn_shmem.view("float32")' in text  # both at byte 0
    between = text.split("= Q[255 - threadIdx_x]")[1].split("R_1[threadIdx_x] =")[0]
    assert "tvm_storage_sync" in between


def test_the_pipeline_rewrites_storage_before_the_barrier_stage_and_lays_it_out_after():
    """The order the storage model relies on: StorageRewrite's reuse is seen as views, and
    the dynamic-shared layout (TVM's merge) comes after the decision that assumed it."""
    names = [stage.name for stage in STAGES]
    barrier = names.index(BARRIER_STAGE)
    assert names.index("tirx.StorageRewrite") < barrier < names.index("tilewave.PlanSharedLayout")


ALIASING = ("view_raw", "offset_view", "dyn_view", "dyn_mixed_sizes", "dyn_merge",
            "storage_rewrite_reuse", "softmax_two_buffers")


@pytest.mark.parametrize("name", ALIASING)
def test_without_the_barrier_stage_the_verifier_finds_the_aliasing_race(name):
    """Lowered with the barrier stage left out, each kernel reaches the stage's position with
    a hazard between two *different* buffers of one storage, which the verifier reports."""
    seen = {}

    @tvm.instrument.pass_instrument
    class Capture:
        def run_before_pass(self, mod, info):
            if info.name == "tilewave.LowerTilewaveOps":
                seen["at_stage"] = mod

    case = CASES[name]
    with tvm.transform.PassContext(config=case.config, disabled_pass=[BARRIER_STAGE]):
        tilewave.lower(case.func, "sm_90a", instruments=[Capture()])
    func = next(iter(seen["at_stage"].functions.values()))
    hazards = find_shared_hazards(func, "sm_90a")
    assert any(not h.first.buffer.same_as(h.second.buffer) for h in hazards), hazards


@T.prim_func
def store_in_divergent_while(
    A: T.Buffer((4,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "int32")
):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        k = T.alloc_buffer((1,), "int32", scope="local")
        for i in range(4):
            k[0] = 0
            while k[0] < C[tx]:
                S[0] = A[i]
                k[0] = k[0] + 1
        B[tx] = S[0]


def test_a_store_in_a_while_threads_run_different_times_is_not_alike():
    """Thread 0 may store A[1] while thread 1 skips iteration 1's while: their last stores
    differ. The verifier keeps the WAW, and the pass refuses the kernel (the barrier would
    sit inside the thread-dependent while) instead of passing it as same-element stores."""
    assert any(h.kind.name == "WAW" for h in find_shared_hazards(store_in_divergent_while))
    with pytest.raises(DivergentBarrierError, match="thread-divergent control flow"):
        insert_shared_barriers(store_in_divergent_while, "sm_90a")


@T.prim_func
def store_in_loop_with_break(
    A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "int32")
):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for i in range(128):
            if C[tx] < i:
                T.evaluate(T.break_loop())
            S[0] = A[i]
        B[tx] = S[0]


def test_a_store_in_a_loop_threads_may_leave_early_is_not_alike():
    assert any(h.kind.name == "WAW" for h in find_shared_hazards(store_in_loop_with_break))


# --- property: generated kernels over views of one allocation, judged by racecheck ------------
_ITEMSIZE = {"int8": 1, "float16": 2, "float32": 4}


@st.composite
def view_kernels(draw) -> str:
    """A 32-thread kernel whose two views X and Y sit at drawn byte offsets of one uint8
    allocation (static or dynamic shared), with drawn stores and loads, some in a loop."""
    scope = draw(st.sampled_from(["shared", "shared.dyn"]))
    lines = []
    views = {}
    for name in "XY":
        dtype = draw(st.sampled_from(sorted(_ITEMSIZE)))
        offset = draw(st.integers(0, 16)) * _ITEMSIZE[dtype]
        views[name] = (dtype, (128 - offset) // _ITEMSIZE[dtype])
        lines.append(f'{name} = T.decl_buffer(({views[name][1]},), "{dtype}", '
                     f'data=T.address_of(P[{offset}]), scope="{scope}")')
    body = []
    for _ in range(draw(st.integers(2, 5))):
        name = draw(st.sampled_from("XY"))
        dtype, count = views[name]
        in_loop = draw(st.booleans())
        index = draw(st.sampled_from([
            "tx", "31 - tx", "tx * 2", "(tx * 3 + 1)", "tx // 2", "0",
            *(["(i * 7 + tx)", "i * 32 + tx"] if in_loop else []),
        ]))
        index = f"({index}) % {count}"
        if draw(st.booleans()):
            stmt = f'{name}[{index}] = T.Cast("{dtype}", A[tx])'
        else:
            stmt = f'B[tx] = B[tx] + T.Cast("float32", {name}[{index}])'
        body.append(["for i in range(3):", "    " + stmt] if in_loop else [stmt])
    text = "\n".join(" " * 8 + line for line in lines)
    text += "\n" + "\n".join(" " * 8 + line for stmt in body for line in stmt)
    return f'''@T.prim_func
def k(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({{"global_symbol": "k"}})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        P = T.alloc_buffer((128,), "uint8", scope="{scope}")
{text}
'''


def _races(report) -> list:
    return [f for f in report.errors if f.kind in ("RAW", "WAR", "WAW")
            and not _same_statement_waw(f)]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=view_kernels())
def test_generated_view_kernels_are_race_free_after_tilewave(source):
    func = from_source(source, extra_vars={"T": T})
    assert find_shared_hazards(insert_shared_barriers(func, "sm_90a"), "sm_90a") == [], source
    symbol, kernel = _device_kernel(tilewave.lower(func, "sm_90a"))
    report = racecheck(kernel, "sm_90a", func_name=symbol, schedules=("lockstep", "reverse"))
    assert not _races(report), source + report.format()


def test_the_generator_makes_races_between_the_two_views():
    """Some generated kernels race between X and Y before the pass (so the property above
    judges aliasing, not just kernels that need no barrier)."""

    def cross(source: str) -> bool:
        hazards = find_shared_hazards(from_source(source, extra_vars={"T": T}), "sm_90a")
        return any(not h.first.buffer.same_as(h.second.buffer) for h in hazards)

    # no deadline: the first call (imports, cold caches) can take 300 ms on a busy machine
    quiet = settings(database=None, derandomize=True, deadline=None)
    assert cross(find(view_kernels(), cross, settings=quiet))
