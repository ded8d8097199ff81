"""benchmarks/barrier_count.py: the static and executed-per-block sync counts it prints."""

from __future__ import annotations

from example_loader import REPO_ROOT, load_module
from tvm.script import tirx as T

COUNT = load_module(REPO_ROOT / "benchmarks" / "barrier_count.py")


@T.prim_func
def synced(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for k in range(4):
            T.ptx["cp.async.ca.shared.global"](T.address_of(S[tx]), T.address_of(A[k, tx]), 4)
            T.ptx["cp.async.commit_group"]()
            T.ptx["cp.async.wait_group"](0)
            T.tvm_storage_sync("shared")
            B[k, tx] = S[63 - tx]
            if k < 3:  # decided per iteration: 3 of the 4 iterations
                T.tvm_storage_sync("shared")


@T.prim_func
def thread_dependent(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        if A[0] > T.float32(0):  # a value the model cannot know
            T.tvm_storage_sync("shared")
        B[tx] = S[63 - tx]


@T.prim_func
def unsynced(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]


def test_static_counts_by_kind():
    counts = COUNT.static_counts(synced)
    assert counts == {"barrier": 2, "commit": 1, "wait 0": 1}


def test_executed_counts_follow_trip_counts_and_decided_branches():
    counts, approximate = COUNT.executed_counts(synced)
    assert counts == {"barrier": 4 + 3, "commit": 4, "wait 0": 4}
    assert not approximate


def test_an_undecidable_branch_counts_as_taken_and_marks_the_count():
    counts, approximate = COUNT.executed_counts(thread_dependent)
    assert counts == {"barrier": 1}
    assert approximate


def test_both_passes_run_on_the_same_pre_sync_module():
    mod = COUNT.sync_input(unsynced, "sm_90a")
    base = COUNT._only_func(mod)
    from tvm import s_tir

    ours = COUNT.run_pass(
        lambda: COUNT.InsertSharedBarriers(COUNT.get_target("sm_90a")), mod, "sm_90a"
    )
    theirs = COUNT.run_pass(lambda: s_tir.transform.ThreadSync("shared"), mod, "sm_90a")
    assert COUNT.static_counts(base) == {}
    assert COUNT.find_shared_hazards(base, "sm_90a")  # the input races
    for result in (ours, theirs):
        assert not result.error and result.hazards == 0 and result.ms > 0
        assert result.static == {"barrier": 1} and result.executed == {"barrier": 1}
