"""Instruction selection: uniformity, strength reduction, add→or, and every error."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn
from tilewave.errors import MalformedKernelError, TargetFeatureError

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate


def body(func, target="gfx942"):
    asm = amdgcn.compile_device_func(amdgcn.device_function(func, target), target).asm
    return asm.split(".size")[0]


def test_uniform_index_math_on_salu_per_thread_on_valu_with_fusions():
    text = body(kernels.copy_f32)
    # A[bx*64 + tx]: bx*64*4 is uniform (SALU shift), tx*4 per lane; one fused VALU op adds
    # them into the address, the base is an SGPR pair
    assert re.search(r"s_lshl_b32 (s\d+), s\d+, 8\n(.|\n)*"
                     r"v_lshl_(add_u32|or_b32) (v\d+), v0, 2, \1\n(.|\n)*"
                     r"global_load_dword v\d+, \4, s\[\d+:\d+\] ", text)
    assert "v_mul_lo_u32" not in text and "v_add_u32" not in text
    # S[ty*16 + tx] in LDS: the shift fused with the add (per-lane disjoint adds stay adds,
    # so they can also fuse into v_add3_u32)
    lds = body(kernels.transpose_lds)
    assert "v_lshl_add_u32" in lds
    assert "v_mul_lo_u32" not in lds and "v_add_u32" not in lds


@T.prim_func
def div_mod(A: T.Buffer((256,), "int32"), B: T.Buffer((256,), "int32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[tx] // 8 + A[tx] % 16 + A[tx] * 4


@T.prim_func
def div_by_three(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[tx] // 3


@T.prim_func
def split_barrier(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        T.tilewave.barrier_signal(0)
        A[tx] = T.float32(0)


@T.prim_func
def divergent_loop(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for _k in range(tx):
            A[tx] = A[tx] + T.float32(1)


def test_power_of_two_divide_modulo_multiply_become_shifts_and_masks():
    text = body(div_mod)
    assert "v_ashrrev_i32 " in text and "v_and_b32 " in text and "v_lshlrev_b32 " in text
    assert "v_mul_lo_u32" not in text


@T.prim_func
def div_by_argument(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32"), d: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[tx] // d


def test_division_by_a_constant_is_a_multiply_high_not_a_division():
    text = body(div_by_three)
    assert "v_mul_hi_i32" in text  # the dividend may be negative: the signed form


def test_division_by_a_variable_is_a_clear_error():
    with pytest.raises(MalformedKernelError,
                       match=r"div_by_argument_kernel.*floordiv by a non-constant or "
                             r"non-positive divisor"):
        body(div_by_argument)


def test_split_barrier_on_gfx942_names_the_target():
    with pytest.raises(TargetFeatureError, match="split barrier"):
        body(split_barrier)


def test_per_thread_loop_bound_is_rejected():
    with pytest.raises(MalformedKernelError, match="loop whose bounds differ between threads"):
        body(divergent_loop)


def test_non_cdna_target_is_rejected():
    with pytest.raises(TargetFeatureError, match="gfx1200 is not a CDNA3 target"):
        amdgcn.emit(kernels.copy_f32, target="gfx1200")


@T.prim_func
def lds_dma_size_8(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx * 2]),
                           T.address_of(S[0]), 8, 0, 0)
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        B[tx] = S[tx]


def test_dwordx4_lds_dma_on_gfx942_names_the_target_and_the_fix():
    with pytest.raises(TargetFeatureError,
                       match=r"lds_dma_x4_kernel.*16-byte LDS DMA .* does not exist on gfx942 "
                             r"\(widest: 4 bytes\); copy 4 bytes per lane or target gfx950"):
        body(kernels.lds_dma_x4, "gfx942")


def test_lds_dma_of_an_unsupported_size_is_rejected():
    with pytest.raises(MalformedKernelError, match=r"lds_dma_size_8_kernel.*size 4 or 16"):
        body(lds_dma_size_8, "gfx950")


# -- reuse of index arithmetic (value_reuse.py) ---------------------------------------------
def _loop_body(text: str, label: str) -> list[str]:
    lines = [ln.strip().split(" ;")[0] for ln in text.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln == f"{label}:")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("s_cbranch_scc1"))
    return lines[start + 1:end]


LONG_K = 16 * 12  # 12 MFMA steps: more than unroll.SHORT_SYNC_TRIPS, the K loop stays a loop


@T.prim_func
def gemm_long_k(A: T.Buffer((16, LONG_K), "float16"), BT: T.Buffer((16, LONG_K), "float16"),
                C: T.Buffer((16, 16), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        acc = T.alloc_buffer((4,), "float32", scope="local")
        acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
        for k in range(LONG_K // 16):
            acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                A[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                BT[tx % 16, T.Ramp(k * 16 + tx // 16 * 4, 1, 4)],
                acc[T.Ramp(0, 1, 4)], 0, 0, 0)
        for r in T.unroll(4):
            C[tx // 16 * 4 + r, tx % 16] = acc[r]


def test_loop_invariant_lane_address_is_hoisted_and_the_counter_part_added_once():
    text = body(gemm_long_k)
    loop = _loop_body(text, ".Lgemm_long_k_kernel_loop0")
    # A[m*64 + k*16 + q*4]: the lane part is computed before the loop; in the loop k*16*2
    # bytes is added to it once (k << 5 shifted inside the add), and both loads use that
    valu = [ln for ln in loop if ln.startswith("v_") and not ln.startswith("v_mfma")]
    assert len(valu) == 1 and re.match(r"v_lshl_add_u32 v\d+, s\d+, 5, v\d+", valu[0]), valu
    assert [ln for ln in loop if ln.startswith("s_lshl")] == []
    loads = [ln for ln in loop if ln.startswith("global_load_dwordx2")]
    assert len(loads) == 2
    assert {ln.split(",")[1].strip() for ln in loads} == {valu[0].split()[1].rstrip(",")}


def test_an_index_shared_by_load_and_store_is_computed_once():
    text = body(kernels.transpose_lds)
    # cse = ty*16 + tx addresses A (global), S (LDS) and B (global): one byte offset
    assert text.count("v_lshlrev_b32") == 2  # cse*4 and (tx*16 + ty)*4
    assert "v_add_u32" not in text


@T.prim_func
def branch_then_reuse(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        if tx < 32:
            B[tx * 3] = A[tx * 3]
        B[tx * 3 + 1] = A[tx]


def test_a_value_computed_in_a_divergent_branch_is_recomputed_after_it():
    # tx*3 written under EXEC = lanes 0..31 is undefined in lanes 32..63 after the branch
    text = body(branch_then_reuse)
    assert text.count("v_mul_u32_u24") == 2  # tx * 12 (tx < 64: the 24-bit multiply)
    compiled = amdgcn.compile_device_func(amdgcn.device_function(branch_then_reuse, "gfx942"),
                                          "gfx942")
    a = np.arange(256, dtype=np.float32)
    b = np.zeros(256, np.float32)
    simulate(compiled.asm, [a, b], (1, 1, 1), (64, 1, 1))
    expected = np.zeros(256, np.float32)
    tx = np.arange(64)
    expected[tx[:32] * 3] = a[tx[:32] * 3]
    expected[tx * 3 + 1] = a[tx]
    np.testing.assert_array_equal(b, expected)


@T.prim_func
def shifted_by_argument(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"),
                        n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        if tx == 0:
            B[n - 1 + 4] = A[n - 1 + 4]  # n - 1 may be -1: 4 must not stay in the offset field


def test_possibly_negative_uniform_index_keeps_its_constant_in_vaddr():
    text = body(shifted_by_argument)
    accesses = [ln for ln in text.splitlines() if ln.strip().startswith("global_")]
    assert len(accesses) == 2 and all("offset:" not in ln for ln in accesses), accesses
    compiled = amdgcn.compile_device_func(
        amdgcn.device_function(shifted_by_argument, "gfx942"), "gfx942")
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    simulate(compiled.asm, [a, b, 0], (1, 1, 1), (64, 1, 1))  # n = 0: index 3
    expected = np.zeros(64, np.float32)
    expected[3] = 3
    np.testing.assert_array_equal(b, expected)


def test_a_two_sided_bound_is_one_unsigned_compare():
    # 1 <= i and i < 319: (i - 1) <u 318, one v_cmp instead of two and an s_and
    text = body(kernels.stencil_1d)
    assert re.findall(r"v_cmp_\w+", text) == ["v_cmp_gt_u32_e64"]
