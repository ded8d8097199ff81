"""CUDA split barriers: barrier_signal/barrier_wait -> mbarrier arrive / try_wait.parity."""

from __future__ import annotations

import re

import pytest
import tvm
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.codegen import cuda
from tilewave.codegen.cuda_split_barrier import lower_cuda_split_barriers
from tilewave.codegen.lower_ops import lower_tilewave_ops
from tilewave.errors import MalformedKernelError, TargetFeatureError
from tilewave.pipeline import build
from tilewave.racecheck import racecheck
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

# ---------------------------------------------------------------- before / after


@T.prim_func
def straight(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "straight"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(-1)
        B[tx] = A[tx] * T.float32(3)
        T.tilewave.barrier_wait(-1)
        B[tx] = B[tx] + S[63 - tx]


@T.prim_func
def straight_mbarrier(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "straight"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        tw_mbarrier = T.alloc_buffer((1,), "uint64", scope="shared")
        tw_phase = T.alloc_buffer((1,), "uint32", scope="local")
        tw_ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(tw_mbarrier[0]), T.uint32(64))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        tw_phase[0] = T.uint32(0)
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(tw_mbarrier[0]))
        B[tx] = A[tx] * T.float32(3)
        tw_ready[0] = T.uint32(0)
        while tw_ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(
                tw_ready[0], T.address_of(tw_mbarrier[0]), tw_phase[0]
            )
        tw_phase[0] = tw_phase[0] ^ T.uint32(1)
        B[tx] = B[tx] + S[63 - tx]


def test_signal_becomes_arrive_and_wait_becomes_parity_spin_loop():
    tvm.ir.assert_structural_equal(lower_cuda_split_barriers(straight), straight_mbarrier)


# A split barrier carried across iterations, as a valid protocol: barrier 0 orders every
# thread's read of S in iteration k - 1 before any thread's write of S in iteration k (WAR).
# Its signal ends each iteration and its wait opens the next; the prologue signal is what
# iteration 0 waits for (without it the first wait precedes every signal and hangs: see
# test_wait_before_any_signal_is_an_error). The lowering keeps the runtime phase per id, so
# each wait observes the phase the previous iteration's (or the prologue's) arrivals closed.
@T.prim_func
def in_loop(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "in_loop"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        T.tilewave.barrier_signal(0)
        for k in range(8):
            T.tilewave.barrier_wait(0)
            S[tx] = A[tx] + T.Cast("float32", k)
            T.tilewave.barrier_signal(-1)
            T.tilewave.barrier_wait(-1)
            B[tx] = B[tx] + S[63 - tx]
            T.tilewave.barrier_signal(0)


@T.prim_func
def in_loop_mbarrier(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "in_loop"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        # ids sorted: -1 -> slot 0, 0 -> slot 1
        tw_mbarrier = T.alloc_buffer((2,), "uint64", scope="shared")
        tw_phase = T.alloc_buffer((2,), "uint32", scope="local")
        tw_ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(tw_mbarrier[0]), T.uint32(64))
            T.ptx.mbarrier.init.shared.b64(T.address_of(tw_mbarrier[1]), T.uint32(64))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        tw_phase[0] = T.uint32(0)
        tw_phase[1] = T.uint32(0)
        S = T.alloc_buffer((64,), "float32", scope="shared")
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(tw_mbarrier[1]))
        for k in range(8):
            # the phase is a runtime local: iteration k waits on the parity it reached
            tw_ready[0] = T.uint32(0)
            while tw_ready[0] == T.uint32(0):
                T.ptx.mbarrier.try_wait.parity.shared.b64(
                    tw_ready[0], T.address_of(tw_mbarrier[1]), tw_phase[1]
                )
            tw_phase[1] = tw_phase[1] ^ T.uint32(1)
            S[tx] = A[tx] + T.Cast("float32", k)
            T.ptx.mbarrier.arrive.shared.b64(T.address_of(tw_mbarrier[0]))
            tw_ready[0] = T.uint32(0)
            while tw_ready[0] == T.uint32(0):
                T.ptx.mbarrier.try_wait.parity.shared.b64(
                    tw_ready[0], T.address_of(tw_mbarrier[0]), tw_phase[0]
                )
            tw_phase[0] = tw_phase[0] ^ T.uint32(1)
            B[tx] = B[tx] + S[63 - tx]
            T.ptx.mbarrier.arrive.shared.b64(T.address_of(tw_mbarrier[1]))


def test_one_mbarrier_and_phase_per_id_in_a_loop():
    tvm.ir.assert_structural_equal(lower_cuda_split_barriers(in_loop), in_loop_mbarrier)


@T.prim_func
def two_axes(A: T.Buffer((8, 32), "float32")):
    T.func_attr({"global_symbol": "two_axes"})
    for _bx in T.thread_binding(4, thread="blockIdx.x"):
        for ty in T.thread_binding(8, thread="threadIdx.y"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                S = T.alloc_buffer((8, 32), "float32", scope="shared")
                S[ty, tx] = A[ty, tx]
                T.tilewave.barrier_signal(-1)
                T.tilewave.barrier_wait(-1)
                A[ty, tx] = S[7 - ty, 31 - tx]


@T.prim_func
def two_axes_mbarrier(A: T.Buffer((8, 32), "float32")):
    T.func_attr({"global_symbol": "two_axes"})
    for _bx in T.thread_binding(4, thread="blockIdx.x"):
        for ty in T.thread_binding(8, thread="threadIdx.y"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                tw_mbarrier = T.alloc_buffer((1,), "uint64", scope="shared")
                tw_phase = T.alloc_buffer((1,), "uint32", scope="local")
                tw_ready = T.alloc_buffer((1,), "uint32", scope="local")
                if ty == 0 and tx == 0:
                    T.ptx.mbarrier.init.shared.b64(T.address_of(tw_mbarrier[0]), T.uint32(256))
                    T.ptx.fence.mbarrier_init.release.cluster()
                T.tvm_storage_sync("shared")
                tw_phase[0] = T.uint32(0)
                S = T.alloc_buffer((8, 32), "float32", scope="shared")
                S[ty, tx] = A[ty, tx]
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(tw_mbarrier[0]))
                tw_ready[0] = T.uint32(0)
                while tw_ready[0] == T.uint32(0):
                    T.ptx.mbarrier.try_wait.parity.shared.b64(
                        tw_ready[0], T.address_of(tw_mbarrier[0]), tw_phase[0]
                    )
                tw_phase[0] = tw_phase[0] ^ T.uint32(1)
                A[ty, tx] = S[7 - ty, 31 - tx]


def test_arrival_count_is_the_block_size_and_thread_zero_initialises():
    tvm.ir.assert_structural_equal(lower_cuda_split_barriers(two_axes), two_axes_mbarrier)


@T.prim_func
def no_split(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        A[tx] = S[63 - tx]


def test_kernel_without_split_barriers_is_returned_as_is():
    assert lower_cuda_split_barriers(no_split).same_as(no_split)
    # no split barrier, no target requirement
    assert lower_cuda_split_barriers(no_split, "sm_80").same_as(no_split)


def test_lower_tilewave_ops_runs_the_installed_rewrite():
    assert cuda.cuda_split_barrier_lowering() is lower_cuda_split_barriers
    out = lower_tilewave_ops(straight, "sm_90a")
    tvm.ir.assert_structural_equal(out, straight_mbarrier)


# ---------------------------------------------------------------- CUDA source


def kernel_body(source: str, name: str) -> list[str]:
    """Lines of the ``__global__`` definition of ``name`` (not the helpers above it)."""
    start = source.rindex("void __launch_bounds__")
    assert f" {name}_kernel(" in source[start:].splitlines()[0]
    return [ln.strip() for ln in source[start:].splitlines()[1:]]


def first_line(lines: list[str], needle: str) -> int:
    return next(i for i, ln in enumerate(lines) if needle in ln)


def test_cuda_source_inits_then_arrives_then_waits_on_the_parity():
    source = build(straight, "sm_90a").source
    # the PTX the helpers issue
    assert re.search(r'asm volatile\("mbarrier\.init\.shared\.b64 \[%0\], %1;"', source)
    assert 'asm volatile("fence.mbarrier_init.release.cluster;"' in source
    assert re.search(r'asm volatile\("mbarrier\.arrive\.shared\.b64 _, \[%0\];"', source)
    assert re.search(r"mbarrier\.try_wait\.parity\.shared\.b64 pd0, \[%1\], %2;", source)
    assert "__shared__ alignas(64) uint64_t tw_mbarrier_ptr[1];" in source
    body = kernel_body(source, "straight")
    init = first_line(body, "mbarrier_init_init_shared_b64")
    assert "(uint)64)" in body[init]  # arrival count: 64 threads
    assert body[init - 1] == "if (((int)threadIdx.x) == 0) {"
    sync = first_line(body, "__syncthreads();")
    arrive = first_line(body, "mbarrier_arrive_nocount_arrive_shared_b64")
    spin = first_line(body, "while (1) {")
    wait = first_line(body, "mbarrier_try_wait_parity_no_hint_try_wait_parity_shared_b64")
    flip = first_line(body, "tw_phase_ptr[0] = (tw_phase_ptr[0] ^ (uint)1);")
    consumer = first_line(body, "S_ptr[(63 - ((int)threadIdx.x))]")
    assert init < sync < arrive < spin < wait < flip < consumer
    assert body.count("__syncthreads();") == 1  # the init's; the split pair has none


def test_split_style_pass_then_build_gives_mbarrier_code():
    @T.prim_func
    def reverse(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
        T.func_attr({"global_symbol": "reverse"})
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            S = T.alloc_buffer((128,), "float32", scope="shared")
            S[tx] = A[tx]
            B[tx] = S[127 - tx]

    with_barriers = insert_shared_barriers(reverse, "sm_90a", barrier_style="split")
    assert "T.tilewave.barrier_signal(-1)" in with_barriers.script()
    body = kernel_body(build(with_barriers, "sm_90a").source, "reverse")
    store = first_line(body, "S_ptr[((int)threadIdx.x)] = A_ptr")
    arrive = first_line(body, "mbarrier_arrive")
    wait = first_line(body, "mbarrier_try_wait_parity")
    load = first_line(body, "S_ptr[(127 - ((int)threadIdx.x))]")
    assert store < arrive < wait < load


# ---------------------------------------------------------------- errors


@T.prim_func
def id_from_a_variable(A: T.Buffer((64,), "float32"), n: T.int32):
    T.func_attr({"global_symbol": "id_from_a_variable"})
    for _tx in T.thread_binding(64, thread="threadIdx.x"):
        T.tilewave.barrier_signal(n)
        T.tilewave.barrier_wait(n)


def test_barrier_id_must_be_a_constant():
    with pytest.raises(
        MalformedKernelError,
        match=r"barrier_signal in function 'id_from_a_variable'.*integer constant.*barrier id",
    ):
        lower_cuda_split_barriers(id_from_a_variable)


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_target_without_mbarrier_wait_is_refused(target):
    with pytest.raises(
        TargetFeatureError,
        match=rf"function 'straight' uses split barriers.*{target} does not have it.*'basic'",
    ):
        lower_cuda_split_barriers(straight, target)


def test_sm80_split_barrier_is_refused_through_lower_tilewave_ops():
    with pytest.raises(TargetFeatureError, match=r"straight.*sm_80 does not have it"):
        lower_tilewave_ops(straight, "sm_80")


@T.prim_func
def unbalanced(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "unbalanced"})
    for _tx in T.thread_binding(64, thread="threadIdx.x"):
        T.tilewave.barrier_signal(-1)
        T.tilewave.barrier_wait(-1)
        T.tilewave.barrier_signal(3)


def test_signal_without_wait_is_refused():
    with pytest.raises(
        MalformedKernelError, match=r"barrier id\(s\) \[3\] in function 'unbalanced'.*Pair every"
    ):
        lower_cuda_split_barriers(unbalanced)


# The loop of `in_loop` without its prologue signal (the form this test used to lower):
# iteration 0 of every thread waits on barrier 0 before any thread can signal it.
@T.prim_func
def wait_before_any_signal(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "wait_before_any_signal"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for k in range(8):
            T.tilewave.barrier_wait(0)
            S[tx] = A[tx] + T.Cast("float32", k)
            T.tilewave.barrier_signal(-1)
            T.tilewave.barrier_wait(-1)
            B[tx] = B[tx] + S[63 - tx]
            T.tilewave.barrier_signal(0)


# The same wait skipped in iteration 0: valid (the signal of iteration k - 1 precedes it).
@T.prim_func
def wait_after_first_iteration(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "wait_after_first_iteration"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for k in range(8):
            if k > 0:
                T.tilewave.barrier_wait(0)
            S[tx] = A[tx] + T.Cast("float32", k)
            T.tilewave.barrier_signal(-1)
            T.tilewave.barrier_wait(-1)
            B[tx] = B[tx] + S[63 - tx]
            T.tilewave.barrier_signal(0)


def test_wait_before_any_signal_is_an_error():
    with pytest.raises(
        MalformedKernelError,
        match=r"barrier_wait\(0\) in function 'wait_before_any_signal' at "
        r"`T.tilewave.barrier_wait\(0\)` waits before any barrier_signal\(0\) can run.*"
        r"the block hangs. Signal before waiting: .* needs a barrier_signal\(0\) before the "
        r"loop",
    ):
        lower_cuda_split_barriers(wait_before_any_signal)
    assert racecheck(wait_before_any_signal, "gfx1200").kinds() == {"deadlock"}


def test_wait_a_condition_skips_before_the_first_signal_is_lowered():
    lowered = lower_cuda_split_barriers(wait_after_first_iteration)
    assert racecheck(lowered, "sm_90a").ok
    assert racecheck(lower_cuda_split_barriers(in_loop), "sm_90a").ok


@T.prim_func
def outside_threads(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "outside_threads"})
    T.tilewave.barrier_signal(-1)
    for _tx in T.thread_binding(64, thread="threadIdx.x"):
        T.tilewave.barrier_wait(-1)


def test_barrier_outside_the_thread_scope_is_refused():
    with pytest.raises(
        MalformedKernelError,
        match=r"barrier_signal in function 'outside_threads'.*outside every threadIdx scope",
    ):
        lower_cuda_split_barriers(outside_threads)


@T.prim_func
def partly_bound(A: T.Buffer((8, 32), "float32")):
    T.func_attr({"global_symbol": "partly_bound"})
    for ty in T.thread_binding(8, thread="threadIdx.y"):
        T.tilewave.barrier_signal(-1)
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            A[ty, tx] = T.float32(0)
        T.tilewave.barrier_wait(-1)
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        A[0, tx] = T.float32(1)


def test_barrier_outside_one_thread_axis_is_refused():
    with pytest.raises(
        MalformedKernelError,
        match=r"in function 'partly_bound' do not all sit inside the threadIdx.x scope",
    ):
        lower_cuda_split_barriers(partly_bound)


@T.prim_func
def dynamic_block(A: T.handle, n: T.int32):
    T.func_attr({"global_symbol": "dynamic_block"})
    for _tx in T.thread_binding(n, thread="threadIdx.x"):
        T.tilewave.barrier_signal(-1)
        T.tilewave.barrier_wait(-1)


def test_non_constant_block_size_is_refused():
    with pytest.raises(
        MalformedKernelError,
        match=r"threadIdx.x has the non-constant extent n in function 'dynamic_block'",
    ):
        lower_cuda_split_barriers(dynamic_block)
