"""LowerTilewaveOps: tilewave ops -> CUDA / AMDGCN instructions, before/after and real codegen."""

from __future__ import annotations

import re

import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.script import tirx as T

import tilewave
from tilewave.codegen import cuda
from tilewave.codegen.lower_ops import LowerTilewaveOps, lower_tilewave_ops
from tilewave.codegen.rocm import gfx9_vmcnt_waitcnt
from tilewave.errors import MalformedKernelError, TargetFeatureError
from tilewave.pipeline import build

# ---------------------------------------------------------------- before / after


@T.prim_func
def basic_ops(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "basic_ops"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        T.tilewave.wait_async_ops(2)
        A[tx] = S[63 - tx]


@T.prim_func
def basic_ops_cuda(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "basic_ops"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        T.ptx.cp(2, "async", "wait_group", "")
        A[tx] = S[63 - tx]


@T.prim_func
def basic_ops_gfx942(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "basic_ops"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        # the barrier waits for nothing itself: lgkmcnt(0) first (vmcnt 0xC00F, expcnt 0x70)
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(49279))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        # vmcnt(2): lgkmcnt 0xF << 8 | expcnt 0x7 << 4 | 2 = 3954
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(3954))
        A[tx] = S[63 - tx]


@T.prim_func
def basic_ops_gfx1200(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "basic_ops"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.dscnt", T.int16(0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.loadcnt", T.int16(2))
        A[tx] = S[63 - tx]


@T.prim_func
def split_barrier(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "split_barrier"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(0)
        T.tilewave.barrier_wait(0)
        A[tx] = S[63 - tx]


@T.prim_func
def split_barrier_gfx1200(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "split_barrier"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.dscnt", T.int16(0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.signal", T.int32(-1))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.wait", T.int16(-1))
        A[tx] = S[63 - tx]


@T.prim_func
def fence(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "fence"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.fence_proxy_async()
        A[tx] = S[tx]


@T.prim_func
def fence_cuda(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "fence"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.ptx.fence("proxy", "async", "shared::cta", "")
        A[tx] = S[tx]


@T.prim_func
def no_tilewave_ops(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        A[tx] = A[tx] + T.float32(1)


@T.prim_func
def wait_count_from_a_variable(A: T.Buffer((64,), "float32"), n: T.int32):
    T.func_attr({"global_symbol": "wait_count_from_a_variable"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        T.tilewave.wait_async_ops(n)
        A[tx] = T.float32(0)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("sm_90a", basic_ops_cuda),
        ("sm_80", basic_ops_cuda),
        ("gfx942", basic_ops_gfx942),
        ("gfx950", basic_ops_gfx942),
        ("gfx1200", basic_ops_gfx1200),
    ],
)
def test_barrier_and_wait_lower_per_target(target, expected):
    tvm.ir.assert_structural_equal(lower_tilewave_ops(basic_ops, target), expected)


def test_split_barrier_lowers_to_gfx12_signal_and_wait():
    tvm.ir.assert_structural_equal(
        lower_tilewave_ops(split_barrier, "gfx1200"), split_barrier_gfx1200
    )


def test_fence_proxy_lowers_on_sm90a():
    tvm.ir.assert_structural_equal(lower_tilewave_ops(fence, "sm_90a"), fence_cuda)


def test_function_without_tilewave_ops_comes_back_unchanged():
    assert lower_tilewave_ops(no_tilewave_ops, "gfx942").same_as(no_tilewave_ops)


def test_pass_form_rewrites_every_function_in_a_module():
    mod = tvm.IRModule({"basic_ops": basic_ops, "fence": fence})
    out = LowerTilewaveOps("sm_90a")(mod)
    tvm.ir.assert_structural_equal(out["basic_ops"], basic_ops_cuda)
    tvm.ir.assert_structural_equal(out["fence"], fence_cuda)


# ---------------------------------------------------------------- errors


def test_split_barrier_on_gfx942_is_refused():
    with pytest.raises(TargetFeatureError, match=r"gfx942 does not have.*barrier_style='basic'"):
        lower_tilewave_ops(split_barrier, "gfx942")


def test_split_barrier_reaching_cuda_untransformed_is_refused(restore_split_barrier_hook):
    cuda.install_split_barrier_lowering(None)
    with pytest.raises(
        TargetFeatureError,
        match=r"tilewave.barrier_signal in function 'split_barrier'.*untransformed.*mbarrier",
    ):
        lower_tilewave_ops(split_barrier, "sm_90a")


@pytest.mark.parametrize("target", ["sm_80", "gfx942", "gfx1200"])
def test_fence_proxy_without_async_proxy_is_refused(target):
    with pytest.raises(
        TargetFeatureError, match=rf"fence_proxy_async in function 'fence'.*{target}"
    ):
        lower_tilewave_ops(fence, target)


@pytest.mark.parametrize("target", ["sm_90a", "gfx942", "gfx1200"])
def test_wait_count_must_be_a_constant(target):
    with pytest.raises(MalformedKernelError, match=r"wait_async_ops.*integer constant"):
        lower_tilewave_ops(wait_count_from_a_variable, target)


def test_negative_wait_count_is_refused():
    func = tilewave.ir.ops.call_op("tilewave.wait_async_ops", -1)
    prim = basic_ops.with_body(func)
    with pytest.raises(MalformedKernelError, match=r"negative operand -1"):
        lower_tilewave_ops(prim, "gfx942")


def test_wait_count_beyond_gfx9_vmcnt_range_is_refused():
    prim = basic_ops.with_body(tilewave.ir.ops.call_op("tilewave.wait_async_ops", 64))
    with pytest.raises(TargetFeatureError, match=r"wait_async_ops\(64\).*vmcnt range 0..63"):
        lower_tilewave_ops(prim, "gfx942")


# ---------------------------------------------------------------- the CUDA split-barrier hook


@pytest.fixture
def restore_split_barrier_hook():
    saved = cuda.cuda_split_barrier_lowering()
    yield
    cuda.install_split_barrier_lowering(saved)


def test_installed_split_barrier_rewrite_runs_before_the_op_table(restore_split_barrier_hook):
    seen = []

    def to_basic_barrier(func, target):
        # Stand-in for the mbarrier rewrite: turn the signal/wait pair into one lds_barrier.
        seen.append(target.name)
        return func.with_body(_replace_split_pair(func.body))

    cuda.install_split_barrier_lowering(to_basic_barrier)
    out = lower_tilewave_ops(split_barrier, "sm_90a")
    assert seen == ["sm_90a"]
    assert "T.tvm_storage_sync" in out.script()
    assert "tilewave" not in out.script()


def _replace_split_pair(stmt):
    from tilewave.ir.walker import TIRMutator

    class Rewrite(TIRMutator):
        def visit_Evaluate(self, node):
            name = getattr(node.value.op, "name", "")
            if name == "tilewave.barrier_signal":
                return None
            if name == "tilewave.barrier_wait":
                return tilewave.ir.ops.call_op("tilewave.lds_barrier")
            return node

    return Rewrite().visit(stmt)


# ---------------------------------------------------------------- gfx9 s_waitcnt encoding


@settings(deadline=None, max_examples=64)
@given(st.integers(min_value=0, max_value=63))
def test_gfx9_waitcnt_encodes_only_vmcnt(count):
    imm = gfx9_vmcnt_waitcnt(count)
    assert (imm & 0xF) | (((imm >> 14) & 0x3) << 4) == count  # vmcnt, split field
    assert (imm >> 4) & 0x7 == 0x7  # expcnt at max: no wait
    assert (imm >> 8) & 0xF == 0xF  # lgkmcnt at max: no wait
    assert imm >> 16 == 0


@pytest.mark.parametrize("count", [-1, 64])
def test_gfx9_waitcnt_range(count):
    with pytest.raises(ValueError, match=r"outside 0\.\.63"):
        gfx9_vmcnt_waitcnt(count)


# ---------------------------------------------------------------- real codegen


@T.prim_func
def store_then_wait(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "store_then_wait"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]
        T.tilewave.wait_async_ops(0)


@T.prim_func
def store_without_wait(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "store_without_wait"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]


@T.prim_func
def split_then_fence(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "split_then_fence"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(0)
        T.tilewave.barrier_wait(0)
        B[tx] = S[63 - tx]
        T.tilewave.wait_async_ops(1)


def _instructions(asm: str, kernel: str) -> list[str]:
    body = asm[asm.index(f"{kernel}_kernel:") : asm.index("s_endpgm")]
    lines = [ln.strip() for ln in body.splitlines()[1:]]
    return [ln for ln in lines if ln and not ln.startswith((".", ";"))] + ["s_endpgm"]


def test_cuda_source_has_syncthreads_wait_group_and_fence():
    src = build(store_then_wait, "sm_90a").source
    assert "__syncthreads();" in src
    assert "cp.async.wait_group 0;" in src
    fenced = build(fence, "sm_90a").source
    assert "fence.proxy.async.shared::cta;" in fenced


def test_gfx942_asm_has_s_barrier_and_the_requested_vmcnt_wait():
    asm = build(store_then_wait, "gfx942").source
    ops = _instructions(asm, "store_then_wait")
    assert "s_barrier" in ops
    # The wait_async_ops(0) after the last store: LLVM adds no wait there by itself.
    assert ops[-2:] == ["s_waitcnt vmcnt(0)", "s_endpgm"]
    baseline = _instructions(build(store_without_wait, "gfx942").source, "store_without_wait")
    assert baseline[-2] != "s_waitcnt vmcnt(0)"


def test_gfx1200_asm_has_split_barrier_and_loadcnt_wait():
    asm = build(split_then_fence, "gfx1200").source
    ops = _instructions(asm, "split_then_fence")
    assert "s_barrier_signal -1" in ops
    assert "s_barrier_wait -1" in ops
    assert ops.index("s_barrier_signal -1") < ops.index("s_barrier_wait -1")
    assert any(re.fullmatch(r"s_wait_loadcnt 0x1", op) for op in ops)


def test_gfx12_workgroup_barrier_id_minus_one_is_accepted():
    body = tvm.tirx.SeqStmt(
        [
            tilewave.ir.ops.call_op("tilewave.barrier_signal", -1),
            tilewave.ir.ops.call_op("tilewave.barrier_wait", -1),
        ]
    )
    out = lower_tilewave_ops(split_barrier.with_body(body), "gfx1200")
    tvm.ir.assert_structural_equal(
        out.body,
        tvm.tirx.SeqStmt(
            # no LDS access before the signal: no s_wait_dscnt (seq[2]) in front of it
            [split_barrier_gfx1200.body.body.seq[3], split_barrier_gfx1200.body.body.seq[4]]
        ),
    )
