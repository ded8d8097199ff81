"""Instruction-count folds of the selector: a literal constant carried by ``v_fmamk_f32`` /
``v_fmaak_f32``, and one quotient shared by ``x // c`` and ``x % c``. Each: the assembly
before/after (the instruction it replaces is gone), the simulator against NumPy, and LLVM's
assembler accepting the result."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate
from test_amdgcn_real_kernels import link_or_skip


def compiled(func, target="gfx942"):
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target)


def body(asm):
    return [ln.split(";")[0].strip() for ln in asm.split(".size")[0].splitlines()]


@T.prim_func
def affine(A: T.Buffer((64,), "float32"), S: T.Buffer((64,), "float32"),
           B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32"),
           D: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[tx] * T.float32(1.5) + S[tx]      # K a multiplicand: fmamk
        C[tx] = A[tx] * S[tx] + T.float32(0.3)      # K the addend: fmaak
        D[tx] = A[tx] * T.float32(1.5) + T.float32(0.3)  # both: one move, one fmamk


def _affine_expected(a, s):
    f = np.float64
    return [((f(a) * f(np.float32(k1)) + f(k2)).astype(np.float32))
            for k1, k2 in ((1.5, s), (s, np.float32(0.3)), (1.5, np.float32(0.3)))]


def test_a_literal_constant_rides_in_the_fma_instead_of_a_move():
    c = compiled(affine)
    lines = body(c.asm)
    assert "v_fma_f32" not in " ".join(lines)
    assert sum(ln.startswith("v_fmamk_f32") for ln in lines) == 2
    assert sum(ln.startswith("v_fmaak_f32") for ln in lines) == 1
    assert any(re.fullmatch(r"v_fmaak_f32 v\d+, v\d+, v\d+, 0x3e99999a", ln) for ln in lines)
    assert sum(ln.startswith("v_mov_b32") for ln in lines) == 1  # D's addend 0.3
    rng = np.random.default_rng(5)
    a, s = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    outs = [np.zeros(64, np.float32) for _ in range(3)]
    simulate(c.asm, [a, s, *outs], (1, 1, 1), (64, 1, 1))
    for got, want in zip(outs, _affine_expected(a, s), strict=True):
        np.testing.assert_array_equal(got, want)


def test_quotient_and_remainder_of_one_index_share_the_multiply_high():
    # B[(i % 3) * N + i // 3] = A[i]: one v_mul_hi_u32 (was two, the quotient recomputed)
    lines = body(compiled(kernels.index_div_mod).asm)
    assert sum(ln.startswith("v_mul_hi_u32") for ln in lines) == 1
    n = kernels.N
    a = np.arange(3 * n, dtype=np.float32)
    b = np.zeros(3 * n, np.float32)
    simulate(compiled(kernels.index_div_mod).asm, [a, b], (3 * n // 64, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a.reshape(n, 3).T.reshape(-1))


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_folded_forms_assemble(target):
    link_or_skip(compiled(affine, target).asm, target)


def test_a_local_set_to_a_constant_feeds_the_constant_to_straight_line_reads():
    # acc[0] = 0; acc[0] += A[tx, k] (k unrolled): the first add reads the inline 0, no move
    lines = body(compiled(kernels.row_sum).asm)
    adds = [ln for ln in lines if ln.startswith("v_add_f32")]
    assert len(adds) == 32 and re.fullmatch(r"v_add_f32 v\d+, 0, v\d+", adds[0]), adds[:2]
    assert not any(re.fullmatch(r"v_mov_b32 v\d+, 0", ln) for ln in lines)


@T.prim_func
def constant_then_control_flow(A: T.Buffer((64, 40), "float32"), B: T.Buffer((64,), "float32"),
                               C: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        acc = T.alloc_buffer((2,), "float32", scope="local")
        acc[0] = T.float32(1)
        for k in range(40):  # rolled (40 steps, not a multiple of 4): acc[0] must be 1 first
            acc[0] = acc[0] + A[tx, k]
        acc[1] = T.float32(-2)
        if tx < 20:  # divergent: lanes 20..63 must see -2, lanes 0..19 the value set here
            acc[1] = T.float32(3)
        B[tx] = acc[0]
        C[tx] = acc[1]


def test_a_constant_local_is_in_its_register_before_a_loop_and_across_a_branch():
    c = compiled(constant_then_control_flow)
    assert "s_cbranch_scc1" in c.asm  # the k loop stayed a loop
    a = np.random.default_rng(8).standard_normal((64, 40)).astype(np.float32)
    b, cc = np.zeros(64, np.float32), np.zeros(64, np.float32)
    simulate(c.asm, [a, b, cc], (1, 1, 1), (64, 1, 1))
    expected = np.float32(1)
    for k in range(40):
        expected = (expected + a[:, k]).astype(np.float32)
    np.testing.assert_array_equal(b, expected)
    np.testing.assert_array_equal(cc, np.where(np.arange(64) < 20, 3, -2).astype(np.float32))


@T.prim_func
def small_products(A: T.Buffer((64 * 48,), "float32"), B: T.Buffer((64 * 48,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx * 48] = A[tx * 48] - T.float32(4) * A[tx * 48 + 1]  # tx * 192 < 2^24


def test_small_products_use_the_24_bit_multiply_and_a_minus_k_x_is_one_fma():
    lines = body(compiled(small_products).asm)
    assert not any(ln.startswith("v_mul_lo_u32") for ln in lines)
    assert any(re.fullmatch(r"v_mul_u32_u24 v\d+, 0xc0, v\d+", ln) for ln in lines), lines
    # a - 4 * b: v_fma_f32 d, -4.0, b, a (contracted as a * b + c already is), no mul + sub
    assert any(re.fullmatch(r"v_fma_f32 v\d+, -4.0, v\d+, v\d+", ln) for ln in lines), lines
    assert not any(ln.startswith(("v_mul_f32", "v_sub_f32")) for ln in lines)
    a = np.random.default_rng(9).standard_normal(64 * 48).astype(np.float32)
    b = np.zeros_like(a)
    simulate(compiled(small_products).asm, [a, b], (1, 1, 1), (64, 1, 1))
    i = np.arange(64) * 48
    expected = (a[i].astype(np.float64) - 4.0 * a[i + 1].astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(b[i], expected)
    link_or_skip(compiled(small_products).asm, "gfx942")
