"""The barrier pass's invariant: unfixable hazards refused before, no hazard left after."""

from __future__ import annotations

import pytest
import tvm
from tvm.script import tirx as T

from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.errors import UnfixableHazardError
from tilewave.pipeline import build
from tilewave.transforms.hazard_invariant import checked_barrier_pass, concurrent_arm_writes
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers


@T.prim_func
def odd_even_writes(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "odd_even_writes"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx % 2 == 0:
            S[tx // 2] = A[tx]
        else:
            S[tx // 2] = A[tx] * T.float32(2)
        B[tx] = S[tx // 2]


@T.prim_func
def warp_split_writes(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "warp_split_writes"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            S[tx] = A[tx]
        else:
            S[tx - 32] = A[tx] * T.float32(2)
        B[tx] = S[tx % 32]


@T.prim_func
def disjoint_arm_writes(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "disjoint_arm_writes"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx % 2 == 0:
            S[tx] = A[tx]
        else:
            S[tx] = A[tx] * T.float32(2)
        B[tx] = S[63 - tx]


@T.prim_func
def uniform_arm_writes(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "uniform_arm_writes"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for i in range(4):
            if i % 2 == 0:
                S[tx] = A[tx]
            else:
                S[63 - tx] = A[tx] * T.float32(2)
            B[tx] = B[tx] + S[tx // 2]


def _checked(target: str):
    return checked_barrier_pass(InsertSharedBarriers(target))


@pytest.mark.parametrize("target", ["sm_90a", "gfx942", "gfx1200"])
def test_two_arm_writes_to_one_word_are_refused_naming_both_statements_and_buffer(target):
    with pytest.raises(UnfixableHazardError) as info:
        build(odd_even_writes, target)
    message = str(info.value)
    # checked on the kernel as written, so the statements read as in the source
    assert message.startswith(
        "tilewave.InsertSharedBarriers: `S[tx // 2] = A[tx]` and "
        "`S[tx // 2] = A[tx] * T.float32(2.0)` in function 'odd_even_writes'"
    )
    assert "shared buffer 'S'" in message
    assert "`if tx % 2 == 0`" in message
    assert "Make the arms write disjoint elements" in message


def test_the_stage_itself_refuses_them_on_lowered_ir():
    with pytest.raises(UnfixableHazardError, match=r"`if tx % 2 == 0`"):
        _checked("gfx942")(tvm.IRModule({"odd_even_writes": odd_even_writes}))


def test_warp_split_writes_are_refused_before_the_pass_runs():
    with pytest.raises(UnfixableHazardError, match=r"`S\[tx\] = A\[tx\]` and `S\[tx - 32\] ="):
        _checked("sm_90a")(tvm.IRModule({"warp_split_writes": warp_split_writes}))


@pytest.mark.parametrize("kernel", [disjoint_arm_writes, uniform_arm_writes])
def test_fixable_kernels_pass_the_check_and_equal_the_unchecked_pass(kernel):
    assert not concurrent_arm_writes(kernel)
    mod = tvm.IRModule({"k": kernel})
    checked = _checked("sm_90a")(mod)
    tvm.ir.assert_structural_equal(checked, InsertSharedBarriers("sm_90a")(mod))
    assert find_shared_hazards(kernel)  # there was something to fix
    assert find_shared_hazards(checked["k"]) == []


def test_a_barrier_pass_that_leaves_a_hazard_is_caught():
    @tvm.transform.module_pass(opt_level=0, name="tilewave.InsertSharedBarriers")
    def forgetful(mod, _ctx):
        return mod  # places no barrier at all

    with pytest.raises(UnfixableHazardError) as info:
        checked_barrier_pass(forgetful)(tvm.IRModule({"k": disjoint_arm_writes}))
    message = str(info.value)
    assert message.startswith("tilewave.InsertSharedBarriers left a RAW hazard on shared buffer")
    assert "in function 'disjoint_arm_writes'" in message
    assert "`B[tx] = S[63 - tx]`" in message
    assert "This is a tilewave bug" in message


def test_checked_pass_keeps_the_inner_name():
    assert _checked("gfx942").info.name == "tilewave.InsertSharedBarriers"
