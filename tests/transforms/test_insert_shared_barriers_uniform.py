"""InsertSharedBarriers on block-uniform and warp-uniform branches (issue 15).

The kernels are ``benchmarks/issue15_uniform_cases.py``'s (the H100 racecheck benchmark runs
the same ones). For each, the stripped kernel through the pass must equal the expected
TVMScript — the hand-synchronised kernel, or the form written out below where the pass does
better or places the barrier elsewhere — verify clean, be left alone by a second run, and
execute race- and deadlock-free under ``tilewave.racecheck`` for every block (the stripped
kernel races there). Conditions that stay thread-divergent raise with a message naming the
kernel and the statement.
"""

import re

import numpy as np
import pytest
import tvm
from example_loader import REPO_ROOT, load_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm.script import tirx as T

import tilewave
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.errors import UnfixableHazardError
from tilewave.ir.walker import rebuild
from tilewave.transforms.hazard_invariant import refuse_unfixable
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    insert_shared_barriers,
)

CASES = load_module(REPO_ROOT / "benchmarks" / "issue15_uniform_cases.py")
BY_NAME = {case.name: case for case in CASES.uniform_cases()}
SIZE, BLOCKS = CASES.SIZE, CASES.BLOCKS


# --- where the pass's result differs from the hand kernel ---------------------------------
@T.prim_func
def nested_expected(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if n % 64 == 0:
                if bx * 64 + tx < n:
                    S[tx] = A[bx * 64 + tx]
                    # before the inner uniform `if` (the same count as inside it)
                    T.tilewave.lds_barrier()
                    if (bx * 64 + tx) // 64 < 2:
                        B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def loaded_loop_expected(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            for k in range(C[bx] % 4):
                T.tilewave.lds_barrier()  # WAR with the previous iteration's read
                S[tx] = A[bx * 64 + tx] + T.Cast("float32", k)
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]


@T.prim_func
def shared_flag_while_expected(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            flag = T.alloc_buffer((1,), "int32", scope="shared")
            if tx == 0:
                flag[0] = bx
            T.tilewave.lds_barrier()  # every thread reads the flag thread 0 wrote
            while flag[0] < n:
                S[tx] = A[bx * 64 + tx]
                # also orders this iteration's reads of the flag before thread 0's update
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]
                if tx == 0:
                    flag[0] = flag[0] + 1
                T.tilewave.lds_barrier()  # the update before the next condition, S's WAR


EXPECTED = {
    "nested": nested_expected,
    "loaded_loop": loaded_loop_expected,
    "shared_flag_while": shared_flag_while_expected,
}


def _expected(case):
    func = EXPECTED[case.name] if case.name in EXPECTED else case.hand()
    return func.with_attr("global_symbol", f"{case.name}_stripped")


def _run(func, case):
    return tilewave.racecheck(
        CASES.without_assumes(func), "sm_90a", args=dict(case.scalars), blocks=case.blocks
    )


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_barrier_goes_inside_the_uniform_branch(name):
    case = BY_NAME[name]
    after = insert_shared_barriers(case.stripped(), "sm_90a")
    tvm.ir.assert_structural_equal(after, _expected(case))
    assert find_shared_hazards(after, "sm_90a") == []
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, "sm_90a"), after)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_racecheck_runs_every_block_clean(name):
    case = BY_NAME[name]
    after = insert_shared_barriers(case.stripped(), "sm_90a")
    report = _run(after, case)
    assert report.ok, report.format()
    assert _run(case.hand(), case).ok


@pytest.mark.parametrize("name", sorted(set(BY_NAME) - {"shared_flag_while"}))
def test_the_stripped_kernel_races(name):
    """The oracle sees the race the barrier fixes (the stripped flag loop may spin, so it is
    left out)."""
    case = BY_NAME[name]
    assert find_shared_hazards(case.stripped(), "sm_90a")
    assert not _run(case.stripped(), case).ok


def test_uniform_branch_on_amd_and_with_split_barriers():
    case = BY_NAME["assert_tail"]
    after = insert_shared_barriers(case.stripped(), "gfx942")
    assert after.script().count("T.tilewave.lds_barrier()") == 1
    assert find_shared_hazards(after, "gfx942") == []
    split = insert_shared_barriers(case.stripped(), "gfx1200")
    text = split.script()
    assert text.index("if bx * 64 + tx < n") < text.index("barrier_signal(-1)")
    assert text.index("barrier_signal(-1)") < text.index("barrier_wait(-1)")
    assert find_shared_hazards(split, "gfx1200") == []


# --- conditions that stay thread-divergent ------------------------------------------------
@T.prim_func
def tail_without_premise(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def tail_with_a_weaker_premise(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    assert n % 32 == 0, "n must be a multiple of 32"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if bx * 64 + tx < n:  # 64 threads, n a multiple of 32: a block may be split
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def premise_after_the_branch(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]
            assert n % 64 == 0, "too late to make the branch uniform"


@T.prim_func
def loaded_from_a_written_buffer(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if C[bx] > 0:  # C is written below (by some thread): threads may read either
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]
            if tx == 0:
                C[bx] = 0


@T.prim_func
def loaded_at_a_thread_index(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), C: T.Buffer((64,), "int32")
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if C[tx] > 0:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def flag_per_thread(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            flags = T.alloc_buffer((64,), "int32", scope="shared")
            flags[tx] = tx
            while flags[tx] < n:  # each thread polls its own word
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]
                flags[tx] = flags[tx] + 1


@T.prim_func
def warp_role_from_a_load(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), C: T.Buffer((4,), "int32")
):
    for _bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            S = T.alloc_buffer((128,), "float32", scope="shared")
            if C[tx // 32] > 0:  # warp-uniform, but which warps take it is known at run time
                S[tx] = A[tx]
                B[tx] = S[tx // 32 * 32 + 31 - tx % 32]


DIVERGENT = [
    (tail_without_premise, "tail_without_premise", r"B\[bx \* 64 \+ tx\] = S\[63 - tx\]"),
    (tail_with_a_weaker_premise, "tail_with_a_weaker_premise", r"B\[bx \* 64 \+ tx\]"),
    (premise_after_the_branch, "premise_after_the_branch", r"B\[bx \* 64 \+ tx\]"),
    (loaded_from_a_written_buffer, "loaded_from_a_written_buffer", r"B\[bx \* 64 \+ tx\]"),
    (loaded_at_a_thread_index, "loaded_at_a_thread_index", r"B\[bx \* 64 \+ tx\]"),
    (flag_per_thread, "flag_per_thread", r"S\[63 - tx\]|S\[tx\]"),
    (warp_role_from_a_load, "warp_role_from_a_load", r"B\[tx\]"),
]


@pytest.mark.parametrize(("func", "name", "statement"), DIVERGENT, ids=[d[1] for d in DIVERGENT])
def test_still_divergent_conditions_raise_naming_kernel_and_statement(func, name, statement):
    with pytest.raises(DivergentBarrierError) as info:
        insert_shared_barriers(func, "sm_90a")
    message = str(info.value)
    assert "thread-divergent control flow" in message
    assert f"function '{name}'" in message
    assert re.search(statement, message), message
    assert "deadlock" in message


# --- the hazard invariant: arms of a uniform `if` never run at the same time ---------------
@T.prim_func
def uniform_two_arm_writes(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    assert n % 64 == 0, "n must be a multiple of 64"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
            else:
                S[63 - tx] = T.float32(0)
            B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def divergent_two_arm_writes(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
            else:
                S[63 - tx] = T.float32(0)
            B[bx * 64 + tx] = S[63 - tx]


def test_two_arm_writes_of_a_uniform_if_are_not_refused():
    refuse_unfixable(uniform_two_arm_writes, "uniform_two_arm_writes", "InsertSharedBarriers")
    after = insert_shared_barriers(uniform_two_arm_writes, "sm_90a")
    assert find_shared_hazards(after, "sm_90a") == []
    report = tilewave.racecheck(after, "sm_90a", args={"n": 128}, blocks=BLOCKS)
    assert report.ok, report.format()


def test_two_arm_writes_of_a_divergent_if_are_refused():
    with pytest.raises(UnfixableHazardError, match=r"both write shared buffer 'S' in the two arms"):
        refuse_unfixable(
            divergent_two_arm_writes, "divergent_two_arm_writes", "InsertSharedBarriers"
        )


# --- through tilewave.lower: FlattenBuffer declares every parameter as a view --------------
@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_lowered_kernel_keeps_the_uniform_barrier_and_runs_clean(name):
    case = BY_NAME[name]
    mod = tilewave.lower(case.stripped(), "sm_90a")
    (device,) = [g for g in mod.get_global_vars() if g.name_hint.endswith("_kernel")]
    text = mod[device].script()
    placed = insert_shared_barriers(case.stripped(), "sm_90a").script()
    assert text.count("T.ptx.barrier(") + text.count("tvm_storage_sync") == placed.count(
        "T.ptx.barrier("
    ) + placed.count("lds_barrier")
    report = tilewave.racecheck(
        mod, "sm_90a", args=dict(case.scalars), blocks=case.blocks, func_name=device.name_hint
    )
    assert report.ok, report.format()


# --- generated conditions: the pass either refuses or its output runs clean ----------------
PROPERTY = load_module(
    REPO_ROOT / "tests" / "analysis" / "test_uniformity_property.py", "uniformity_property"
)


@T.prim_func
def guarded_template(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((16,), "int32"),
    n: T.int32,
    m: T.int32,
):
    assert n % 64 == 0, "replaced by the example's premise"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for ty in T.thread_binding(1, thread="threadIdx.y"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                S = T.alloc_buffer((64,), "float32", scope="shared")
                if bx + ty + tx + n + m > 0:  # replaced by the example's condition
                    S[tx] = A[bx * 64 + tx]
                    B[bx * 64 + tx] = S[63 - tx]


def _guarded(tree, premise):
    assert_stmt, blocks = guarded_template.body.seq
    ty_loop = blocks.body
    tx_loop = ty_loop.body
    alloc, if_stmt = tx_loop.body.seq
    params = guarded_template.params
    env = {"bx": blocks.loop_var, "ty": ty_loop.loop_var, "tx": tx_loop.loop_var,
           "C": params[2], "n": params[3], "m": params[4]}
    if_stmt = rebuild(if_stmt, {"condition": PROPERTY.to_tir(tree, env)})
    n = env["n"]
    cond = (
        tvm.tirx.EQ(tvm.tirx.FloorMod(n, premise), 0) if premise else tvm.tirx.const(True, "bool")
    )
    tx_loop = rebuild(tx_loop, {"body": tvm.tirx.SeqStmt([alloc, if_stmt])})
    body = tvm.tirx.SeqStmt([
        rebuild(assert_stmt, {"condition": cond}),
        rebuild(blocks, {"body": rebuild(ty_loop, {"body": tx_loop})}),
    ])
    return guarded_template.with_body(body)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree=PROPERTY.CONDITIONS,
    premise=st.sampled_from([0, 32, 64, 128]),
    seed=st.integers(0, 2**16),
)
def test_generated_guards_are_refused_or_synchronised_race_and_deadlock_free(
    tree, premise, seed
):
    func = _guarded(tree, premise)
    try:
        after = insert_shared_barriers(func, "sm_90a")
    except DivergentBarrierError as err:
        assert "thread-divergent control flow" in str(err)
        return
    assert find_shared_hazards(after, "sm_90a") == []
    for point in PROPERTY.samples(premise, seed)[:2]:
        args = {"n": point["n"], "m": point["m"], "C": np.array(point["C"], "int32")}
        report = tilewave.racecheck(after, "sm_90a", args=args, blocks=BLOCKS)
        assert report.ok, (tree, args, report.format())
