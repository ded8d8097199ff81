"""Which loops the AMDGCN selector unrolls, and what an unrolled copy looks like."""

import sys
from pathlib import Path

import numpy as np
import pytest
from tvm import tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.unroll import partially_unrolled, should_unroll, unrolled_copies
from tilewave.ir.walker import post_order_visit

sys.path.insert(0, str(Path(__file__).parent))
import kernels


def first_loop(func, name=None):
    """The first serial loop of ``func`` (or the one whose variable is called ``name``)."""
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, tirx.For)
                     and n.thread_binding is None else None)
    if name is not None:
        return next(loop for loop in found if loop.loop_var.name == name)
    return found[0]


@T.prim_func
def short_copy(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for i in range(4):
            x: T.let[T.int32] = i * 64 + tx
            B[x] = A[x]


@T.prim_func
def long_copy(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for i in range(64):
            B[i * 64 + tx] = A[i * 64 + tx]


@T.prim_func
def marked_unroll(A: T.Buffer((2048,), "float32"), B: T.Buffer((2048,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for i in T.unroll(32):
            B[i * 64 + tx] = A[i * 64 + tx]


@T.prim_func
def loop_with_barrier(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for i in range(4):
            S[tx] = A[i * 64 + tx]
            T.tilewave.lds_barrier()
            B[i * 64 + tx] = S[63 - tx]
            T.tilewave.lds_barrier()


@pytest.mark.parametrize(("func", "expected"), [
    (short_copy, True),  # 4 trips x 2 statements
    (long_copy, False),  # 64 trips: more than AUTO_UNROLL_TRIPS (unrolled by 4 instead)
    (marked_unroll, True),  # T.unroll: the user asked
    (loop_with_barrier, True),  # a barrier loop of 4 <= SHORT_SYNC_TRIPS steps
])
def test_unroll_rules(func, expected):
    assert should_unroll(first_loop(func)) is expected


def test_long_loop_is_unrolled_by_four_and_copies_correctly():
    from isa_simulator import simulate

    partial = partially_unrolled(first_loop(long_copy))
    assert partial is not None and int(partial.extent) == 16 and len(partial.body.seq) == 4
    assert partially_unrolled(first_loop(loop_with_barrier)) is None
    text = amdgcn.emit(long_copy, "gfx942")
    assert text.count("global_load_dword ") == 4  # one per copy, in a 16-step loop
    a = np.arange(4096, dtype=np.float32)
    b = np.zeros(4096, np.float32)
    simulate(text, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a)


def test_short_mfma_k_loop_is_unrolled_a_long_one_is_not():
    assert should_unroll(first_loop(kernels.gemm_f16, "k"))  # 4 steps
    assert partially_unrolled(first_loop(kernels.gemm_f16, "k")) is None
    assert should_unroll(first_loop(kernels.gemm_f16, "r"))  # its T.unroll(4) store loop


def test_copies_have_the_loop_value_folded_and_their_own_lets():
    copies = unrolled_copies(first_loop(short_copy))
    assert len(copies) == 4
    lets = [c.seq[0] for c in copies]
    original = first_loop(short_copy).body.seq[0].var
    variables = [b.var for b in lets] + [original]
    assert not any(a.same_as(b) for i, a in enumerate(variables) for b in variables[i + 1:])
    # i * 64 + tx with i = 2 folds to 128 + tx
    assert isinstance(lets[2].value.a, tirx.IntImm) and lets[2].value.a.value == 128


def test_unrolled_copy_puts_the_iteration_offset_in_the_offset_field():
    text = amdgcn.emit(short_copy, "gfx942").split(".size")[0]
    assert "s_cbranch_scc1" not in text
    loads = [ln.split(";")[0].strip() for ln in text.splitlines() if "global_load" in ln]
    assert [ln.split("offset:")[1] if "offset:" in ln else "0" for ln in loads] == [
        "0", "256", "512", "768"]
    assert text.count("v_lshlrev_b32") == 1  # tx * 4, shared by every copy


@pytest.mark.parametrize("func", [short_copy, marked_unroll])
def test_unrolled_kernels_copy_correctly_on_the_simulator(func):
    from isa_simulator import simulate

    size = 256 if func is short_copy else 2048
    a = np.arange(size, dtype=np.float32)
    b = np.zeros(size, np.float32)
    simulate(amdgcn.emit(func, "gfx942"), [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a)
