"""Global memory through ``global_*`` with an SGPR base (global_memory.py): the assembly each
addressing case gets, and every kernel run on the ISA simulator against NumPy (the simulator
maps each buffer exactly, so a load outside a buffer is an error there, as it may fault on
the hardware)."""

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
from test_amdgcn_real_kernels import case, link_or_skip


def compiled(func, target="gfx942"):
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target)


def body(asm):
    return [ln.split(";")[0].strip() for ln in asm.split(".size")[0].splitlines()]


def test_a_buffer_argument_is_a_base_address_without_descriptor_words():
    lines = body(compiled(kernels.copy_f32).asm)
    # no num_records / format words: the only SALU op left is bx * 256
    assert [ln for ln in lines if ln.startswith("s_mov")] == []
    assert sum(ln.startswith("s_load_dwordx2") for ln in lines) == 2
    assert any(re.fullmatch(r"global_load_dword v\d+, v\d+, s\[\d+:\d+\]", ln) for ln in lines)


@T.prim_func
def shifted_select(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        # both arms are evaluated: A[-1] is read at tx = 0 and must not fault
        B[tx] = T.if_then_else(tx > 0, A[tx - 1], T.float32(0))


def test_a_buffer_loaded_in_a_select_arm_keeps_the_range_checked_descriptor():
    c = compiled(shifted_select)
    lines = body(c.asm)
    assert any(ln.startswith("buffer_load_dword") for ln in lines)  # A: MUBUF, range checked
    assert any(ln.startswith("global_store_dword") for ln in lines)  # B: global
    a = np.arange(1, 65, dtype=np.float32)
    b = np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, np.concatenate([[0], a[:-1]]))


@T.prim_func
def constant_index(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        if tx == 0:
            B[3] = A[5]


def test_a_constant_index_is_a_zero_vaddr_and_an_immediate():
    c = compiled(constant_index)
    lines = body(c.asm)
    assert any(re.fullmatch(r"global_load_dword v\d+, v\d+, s\[\d+:\d+\] offset:20", ln)
               for ln in lines), lines
    assert any(re.fullmatch(r"global_store_dword v\d+, v\d+, s\[\d+:\d+\] offset:12", ln)
               for ln in lines), lines
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    expected = np.zeros(64, np.float32)
    expected[3] = 5
    np.testing.assert_array_equal(b, expected)


@T.prim_func
def far_rows(A: T.Buffer((40, 64), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[0, tx] + A[20, tx] + A[39, tx]  # byte offsets 0, 5120, 9984


def test_offsets_beyond_the_field_use_a_window_base_and_share_the_lane_address():
    c = compiled(far_rows)
    lines = body(c.asm)
    loads = [ln for ln in lines if ln.startswith("global_load_dword")]
    assert len(loads) == 3 and len({ln.split(",")[1] for ln in loads}) == 1, loads
    # 5120 = 4096 + 1024 and 9984 = 8192 + 1792: two base + window pairs, computed once
    assert sorted(re.findall(r"s_add_u32 s\d+, s\d+, (0x\w+)", "\n".join(lines))) == [
        "0x1000", "0x2000"]
    assert sum(ln.startswith("s_addc_u32") for ln in lines) == 2
    assert sorted(int(ln.split("offset:")[1]) if "offset:" in ln else 0 for ln in loads) == [
        0, 1024, 1792]
    a = np.random.default_rng(3).standard_normal((40, 64)).astype(np.float32)
    b = np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a[0] + a[20] + a[39])


def row_kernel(n: int):
    """Sums A[0:30] of an ``n``-element buffer (a 30-step loop, unrolled)."""

    @T.prim_func
    def row(A: T.Buffer((n,), "float32"), B: T.Buffer((64,), "float32")):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            acc = T.alloc_buffer((1,), "float32", scope="local")
            acc[0] = T.float32(0)
            for j in range(30):
                acc[0] = acc[0] + A[j]
            B[tx] = acc[0]

    return row.with_attr("global_symbol", f"row_{n}")


def test_group_loads_stay_inside_the_buffer():
    # the aligned group of A[28] is A[28:32]: outside a 30-element buffer, inside a 32 one
    odd, even = compiled(row_kernel(30)), compiled(row_kernel(32))
    widths = {"dword": 1, "dwordx2": 2, "dwordx3": 3, "dwordx4": 4}
    loaded = [widths[ln.split()[0].removeprefix("global_load_")] for ln in body(odd.asm)
              if ln.startswith("global_load_")]
    assert sum(loaded) == 30  # exactly the elements read (merged loads, no aligned groups)
    assert even.asm.count("global_load_dwordx4") == 8
    for c, n in ((odd, 30), (even, 32)):
        a = np.arange(n, dtype=np.float32)
        b = np.zeros(64, np.float32)
        simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
        np.testing.assert_array_equal(b, np.full(64, a[:30].sum(), np.float32))


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_global_forms_assemble_with_llvm(target):
    for func in (shifted_select, constant_index, far_rows):
        link_or_skip(compiled(func, target).asm, target)


def test_a_guarded_index_is_shifted_into_the_byte_offset_once():
    # if i < n: Y[i] = alpha * X[i] + Y[i]: the guard computed i = bx*64 + tx; the three
    # accesses share one byte offset i << 2 (was: bx << 8 on the SALU and an OR per access)
    lines = body(compiled(kernels.saxpy_runtime).asm)
    then = lines[lines.index("s_cbranch_execz .Lsaxpy_runtime_kernel_else0") + 1:]
    assert [ln for ln in then if ln.startswith(("v_lshl", "s_lshl", "v_or"))] == [
        next(ln for ln in then if ln.startswith("v_lshlrev_b32"))]
    assert re.fullmatch(r"v_lshlrev_b32 v\d+, 2, v\d+", then[0])
    for n in (1, 63, 64, 65):
        rng = np.random.default_rng(n)
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        expected = (np.float64(0.5) * x + y).astype(np.float32)
        simulate(compiled(kernels.saxpy_runtime).asm, [x, y, n, 0.5], ((n + 63) // 64, 1, 1),
                 (64, 1, 1))
        np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def test_an_index_used_with_two_element_sizes_is_one_shift_apart():
    # Q[i] (1 byte) = int8(A[i] (4 bytes) * scale): Q's offset is A's shifted right by 2
    c = compiled(kernels.quantize_int8)
    lines = body(c.asm)
    load = next(ln for ln in lines if ln.startswith("global_load_dword"))
    store = next(ln for ln in lines if ln.startswith("global_store_byte"))
    a_off, q_off = load.split(",")[1].strip(), store.split(",")[0].split()[1]
    assert any(re.fullmatch(rf"v_lshrrev_b32 {q_off}, 2, {a_off}", ln) for ln in lines), lines
    assert sum(ln.startswith("s_lshl_b32") for ln in lines) == 1
    args, grid, block, check = case("quantize_int8")
    simulate(c.asm, args, grid, block)
    actual, expected, _ = check()
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, kernels.N])
def test_guarded_kernel_at_edge_sizes(n):
    # the guard alone keeps global accesses inside the buffers (there is no range check):
    # every lane at or past n takes the else branch
    a = np.random.default_rng(n).standard_normal(kernels.N).astype(np.float32)
    b = np.zeros(kernels.N, np.float32)
    simulate(compiled(kernels.guarded_scale).asm, [a, b, n], (kernels.N // 64, 1, 1),
             (64, 1, 1))
    np.testing.assert_array_equal(b, np.where(np.arange(kernels.N) < n, a * 2, -1))
