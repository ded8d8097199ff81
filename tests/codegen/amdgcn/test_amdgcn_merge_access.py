"""Access merging (merge_access.py): runs of dword global stores as one dwordx2/x4 store,
runs of dword global loads as one dwordx2/x3/x4 load, two LDS dword reads as one ds_read2.

Stage tests on hand-built kernel IR (what merges, what must not), then whole kernels: the
selected program has the dword accesses, the final assembly the wide ones, the simulator's
result matches NumPy and LLVM's tools assemble it."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.kir import Imm, Instr, Label, Program, Sub, VReg
from tilewave.codegen.amdgcn.merge_access import (
    merge_lds_reads,
    merge_loads,
    merge_short_loads,
    merge_stores,
)

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate
from test_amdgcn_real_kernels import case, link_or_skip


def ops(program):
    return [i.opcode for i in program.body if isinstance(i, Instr)]


def _row(n=4, base=0):
    """``n`` values computed and stored to consecutive dwords at ``base``."""
    addr, saddr = VReg("v"), VReg("s", 2, 2)
    values = [VReg("v") for _ in range(n)]
    code = [Instr("v_mov_b32", [addr], [Imm.of_int(0)])]
    for k, v in enumerate(values):
        code.append(Instr("v_mov_b32", [v], [Imm.of_int(k)]))
        off = base + 4 * k
        code.append(Instr("global_store_dword", [], [addr, v, saddr],
                          f"offset:{off}" if off else ""))
    return addr, saddr, values, code


def test_four_dword_stores_become_one_dwordx4_of_a_new_range():
    addr, saddr, _, code = _row(base=16)
    after = merge_stores(Program("k", [*code, Instr("s_endpgm")]))
    assert ops(after) == ["v_mov_b32"] * 5 + ["global_store_dwordx4", "s_endpgm"]
    store = after.body[5]
    data = store.uses[1]
    assert store.uses[0] is addr and store.uses[2] is saddr and store.mods == "offset:16"
    assert isinstance(data, Sub) and data.index == 0 and data.width == 4
    assert data.reg.align == 2
    # each value is now an element of the range, where it is defined too
    assert [after.body[1 + k].defs[0] for k in range(4)] == [Sub(data.reg, k) for k in range(4)]


def test_two_consecutive_stores_become_a_dwordx2():
    _, _, _, code = _row(n=2)
    after = merge_stores(Program("k", [*code, Instr("s_endpgm")]))
    assert ops(after) == ["v_mov_b32"] * 3 + ["global_store_dwordx2", "s_endpgm"]


def test_data_already_in_an_aligned_range_is_stored_from_it():
    addr, saddr = VReg("v"), VReg("s", 2, 2)
    tile = VReg("v", 8, 2)
    code = [Instr("global_store_dword", [], [addr, Sub(tile, 4 + k), saddr],
                  f"offset:{4 * k}" if k else "") for k in range(4)]
    after = merge_stores(Program("k", [Instr("v_mov_b32", [addr], [Imm.of_int(0)]), *code]))
    assert ops(after) == ["v_mov_b32", "global_store_dwordx4"]
    assert after.body[1].uses[1] == Sub(tile, 4, 4)


@pytest.mark.parametrize("why", ["same_buffer_load", "data_rewritten", "label", "gap",
                                 "repeated_value", "odd_range_start"])
def test_what_is_not_merged(why):
    addr, saddr, values, code = _row(n=2)
    second = code.pop()  # the second store
    between = {
        "same_buffer_load": [Instr("global_load_dword", [VReg("v")], [addr, saddr])],
        "data_rewritten": [Instr("v_mov_b32", [values[0]], [Imm.of_int(9)])],
        "label": [Label("join")],
    }.get(why, [])
    if why == "gap":
        second.mods = "offset:8"
    if why == "repeated_value":
        second.uses[1] = values[0]
    if why == "odd_range_start":
        tile = VReg("v", 4, 2)
        code[2].uses[1] = Sub(tile, 1)
        second.uses[1] = Sub(tile, 2)
    before = Program("k", [*code, *between, second, Instr("s_endpgm")])
    assert "global_store_dwordx2" not in ops(merge_stores(before))


def test_a_load_of_another_buffer_in_between_does_not_block():
    addr, _, _, code = _row(n=2)
    second = code.pop()
    other = VReg("s", 2, 2)
    after = merge_stores(Program("k", [*code, Instr("global_load_dword", [VReg("v")],
                                                    [addr, other]), second]))
    assert ops(after)[-2:] == ["global_load_dword", "global_store_dwordx2"]


def _compile(func, target="gfx942"):
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target)


@pytest.mark.parametrize(("name", "dword", "wide"), [
    ("sgemm_regtile", 16, 4),   # the 4x4 register tile: four rows of four
    ("layernorm_rows", 16, 4),  # one row of 16 floats per thread
    ("softmax_rows", 16, 4),
])
def test_kernels_store_rows_as_dwordx4_and_match_numpy(name, dword, wide):
    c = _compile(getattr(kernels, name))
    assert ops(c.selected).count("global_store_dword") == dword
    assert ops(c.final).count("global_store_dwordx4") == wide
    assert "global_store_dword" not in ops(c.final)
    args, grid, block, check = case(name)
    simulate(c.asm, args, grid, block)
    actual, expected, tol = check()
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_merged_stores_assemble(target):
    asm = _compile(kernels.sgemm_regtile, target).asm
    assert "global_store_dwordx4" in asm
    link_or_skip(asm, target)


def _halo_loads(offsets, between=()):
    """Loads of one buffer at ``offsets`` (program order), ``between`` after the first."""
    addr, saddr = VReg("v"), VReg("s", 2, 2)
    dsts = [VReg("v") for _ in offsets]
    loads = [Instr("global_load_dword", [d], [addr, saddr], f"offset:{o}" if o else "")
             for d, o in zip(dsts, offsets, strict=True)]
    code = [Instr("v_mov_b32", [addr], [Imm.of_int(0)]), loads[0], *between, *loads[1:],
            Instr("s_endpgm", [], dsts)]
    return addr, saddr, dsts, code


def test_loads_at_consecutive_offsets_in_any_order_become_one_wide_load_at_the_first():
    _, _, _, code = _halo_loads([0, 4, -4])
    after = merge_loads(Program("k", code))
    assert ops(after) == ["v_mov_b32", "global_load_dwordx3", "s_endpgm"]
    load = after.body[1]
    data = load.defs[0]
    assert load.mods == "offset:-4" and isinstance(data, Sub) and data.width == 3
    # -4, 0, 4 are elements 0, 1, 2: the reader of dsts sees them renamed
    assert after.body[2].uses == [Sub(data.reg, 1), Sub(data.reg, 2), Sub(data.reg, 0)]


@pytest.mark.parametrize("why", ["store_same_base", "dst_read_between", "address_rewritten"])
def test_what_loads_are_not_merged(why):
    addr, saddr, dsts, code = _halo_loads([0, 4])
    between = {
        "store_same_base": [Instr("global_store_dword", [], [addr, VReg("v"), saddr])],
        "dst_read_between": [Instr("v_mov_b32", [VReg("v")], [dsts[1]])],
        "address_rewritten": [Instr("v_mov_b32", [addr], [Imm.of_int(8)])],
    }[why]
    code[2:2] = between
    assert "global_load_dwordx2" not in ops(merge_loads(Program("k", code)))


@pytest.mark.parametrize(("name", "wide"), [("stencil_1d", "global_load_dwordx3"),
                                             ("laplacian_2d", "global_load_dwordx3")])
def test_halo_loads_are_one_wide_load_and_match_numpy(name, wide):
    c = _compile(getattr(kernels, name))
    assert ops(c.selected).count("global_load_dword") >= 3
    assert ops(c.final).count(wide) == 1
    args, grid, block, check = case(name)
    simulate(c.asm, args, grid, block)
    actual, expected, tol = check()
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)
    link_or_skip(c.asm, "gfx942")


def test_a_two_sided_bound_on_a_sum_is_two_instructions_before_the_compare():
    # 1 <= by*16 + ty < 31: (by*16 + ty - 1) <u 30: the shift fused into the add, one add
    # of -1 (no SALU shift, no OR and subtract)
    lines = [ln.split(";")[0].strip() for ln in _compile(kernels.laplacian_2d).asm.splitlines()]
    head = lines[:lines.index(next(ln for ln in lines if ln.startswith("s_and_saveexec")))]
    assert sum(ln.startswith("v_lshl_add_u32") for ln in head) == 2
    assert sum(bool(re.fullmatch(r"v_add_u32 v\d+, -1, v\d+", ln)) for ln in head) == 2
    assert not any(ln.startswith(("v_or_b32", "v_sub_u32", "s_lshl")) for ln in head)


def test_a_bound_on_a_value_already_computed_reuses_it():
    # laplacian_2d_lds: x = bx*16 + tx is computed for the halo guards (1 <= x, x < 47);
    # the final 1 <= x < 47 subtracts 1 from that register instead of recomputing x
    lines = [ln.split(";")[0].strip()
             for ln in _compile(kernels.laplacian_2d_lds).asm.split(".size")[0].splitlines()]
    tail = lines[lines.index("s_barrier"):]
    head = tail[:tail.index(next(ln for ln in tail if ln.startswith("s_and_saveexec")))]
    ops_ = [ln.split()[0] for ln in head if ln.startswith(("v_", "s_lshl"))]
    assert len(ops_) == 4 and ops_.count("v_cmp_gt_u32_e64") == 2, ops_  # one op per bound
    assert "v_sub_u32" in ops_  # y - 1 from the register the halo guard computed
    args, grid, block, check = case("laplacian_2d_lds")
    simulate(_compile(kernels.laplacian_2d_lds).asm, args, grid, block)
    actual, expected, tol = check()
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def _lds_reads(offsets, between=()):
    addr = VReg("v")
    dsts = [VReg("v") for _ in offsets]
    reads = [Instr("ds_read_b32", [d], [addr], f"offset:{o}" if o else "")
             for d, o in zip(dsts, offsets, strict=True)]
    return dsts, [Instr("v_mov_b32", [addr], [Imm.of_int(0)]), reads[0], *between, *reads[1:],
                  Instr("s_endpgm", [], dsts)]


@pytest.mark.parametrize(("offsets", "form"), [
    ((16, 64), ("ds_read2_b32", "offset0:4 offset1:16")),      # dword units (8 bits each)
    ((0, 2048), ("ds_read2st64_b32", "offset0:0 offset1:8")),  # 512 dwords: 64-dword units
])
def test_two_lds_reads_of_one_address_become_a_read2(offsets, form):
    _, code = _lds_reads(offsets)
    after = merge_lds_reads(Program("k", code))
    assert ops(after) == ["v_mov_b32", form[0], "s_endpgm"]
    read2 = after.body[1]
    assert read2.mods == form[1]
    pair = read2.defs[0]
    assert isinstance(pair, Sub) and pair.width == 2 and pair.reg.align == 2
    assert after.body[2].uses == [Sub(pair.reg, 0), Sub(pair.reg, 1)]


@pytest.mark.parametrize("why", ["lds_write_between", "offset_too_far", "barrier"])
def test_what_lds_reads_are_not_paired(why):
    offsets = (0, 4 * 300) if why == "offset_too_far" else (0, 4)  # 300 dwords, not 64-aligned
    between = {
        "lds_write_between": [Instr("ds_write_b32", [], [VReg("v"), VReg("v")])],
        "barrier": [Instr("s_barrier")],
    }.get(why, [])
    _, code = _lds_reads(offsets, between)
    assert not any(op.startswith("ds_read2") for op in ops(merge_lds_reads(Program("k", code))))


def test_tree_reduction_levels_read_both_halves_at_once_and_match_numpy():
    # S[tx] + S[tx + (128 >> i)]: the unrolled shift folds to a constant offset, the two
    # reads become one ds_read2 (S[tx + 128]: offset1 128 dwords), no per-level address add
    c = _compile(kernels.block_sum_tree)
    lines = [ln.split(";")[0].strip() for ln in c.asm.split(".size")[0].splitlines()]
    reads = [ln for ln in lines if ln.startswith("ds_read")]
    assert len(reads) == 9 and all(ln.startswith("ds_read2") for ln in reads[:8]), reads
    assert reads[0].startswith("ds_read2_b32") and reads[0].endswith("offset0:0 offset1:128")
    assert not any(ln.startswith("v_add_u32") for ln in lines)
    a = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    b = np.zeros(4, np.float32)
    simulate(c.asm, [a, b], (4, 1, 1), (256, 1, 1))
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-4, atol=1e-4)
    link_or_skip(c.asm, "gfx942")


def test_two_b64_lds_reads_become_a_read2_b64_and_slices_follow():
    addr = VReg("v")
    frags = [VReg("v", 2, 2), VReg("v", 2, 2)]
    code = [Instr("v_mov_b32", [addr], [Imm.of_int(0)]),
            Instr("ds_read_b64", [frags[0]], [addr], ""),
            Instr("ds_read_b64", [frags[1]], [addr], "offset:32"),
            Instr("s_endpgm", [], [frags[0], Sub(frags[1], 1)])]
    after = merge_lds_reads(Program("k", code))
    assert ops(after) == ["v_mov_b32", "ds_read2_b64", "s_endpgm"]
    read2 = after.body[1]
    whole = read2.defs[0].reg
    assert read2.mods == "offset0:0 offset1:4" and read2.defs[0] == Sub(whole, 0, 4)
    assert after.body[2].uses == [Sub(whole, 0, 2), Sub(whole, 3)]


def _short_loads(readers):
    """Four 16-bit loads at offsets 0, 2, 4, 6; ``readers(values)`` the code reading them."""
    addr, saddr = VReg("v"), VReg("s", 2, 2)
    values = [VReg("v") for _ in range(4)]
    loads = [Instr("global_load_ushort", [v], [addr, saddr], f"offset:{2 * k}" if k else "")
             for k, v in enumerate(values)]
    return Program("k", [Instr("v_mov_b32", [addr], [Imm.of_int(0)]), *loads,
                         *readers(values), Instr("s_endpgm")])


def test_16_bit_loads_read_only_by_16_bit_stores_become_dword_loads():
    lds = VReg("v")
    after = merge_short_loads(_short_loads(lambda vals: [
        Instr("ds_write_b16", [], [lds, v], f"offset:{64 * k}") for k, v in enumerate(vals)]))
    assert ops(after) == ["v_mov_b32", "global_load_dwordx2", "ds_write_b16",
                          "ds_write_b16_d16_hi", "ds_write_b16", "ds_write_b16_d16_hi",
                          "s_endpgm"]
    words = after.body[1].defs[0]
    assert [w.uses[1] for w in after.body[2:6]] == [Sub(words.reg, 0), Sub(words.reg, 0),
                                                    Sub(words.reg, 1), Sub(words.reg, 1)]


def test_16_bit_loads_with_another_reader_stay_16_bit():
    lds = VReg("v")
    after = merge_short_loads(_short_loads(lambda vals: [
        *(Instr("ds_write_b16", [], [lds, v]) for v in vals),
        Instr("v_cvt_f32_f16", [VReg("v")], [vals[1]])]))  # reads the full 32-bit register
    # offsets 0 and 2 (the pair holding vals[1]) stay 16-bit; 4 and 6 become one dword
    assert ops(after)[1:4] == ["global_load_ushort", "global_load_ushort", "global_load_dword"]
    assert after.body[3].mods == "offset:4"


def test_f16_tile_staged_through_lds_loads_dwords_and_matches_numpy():
    c = _compile(kernels.gemm_lds_f16)
    assert ops(c.selected).count("global_load_ushort") == 32
    assert ops(c.final).count("global_load_ushort") == 16  # A[i, tx]: 128 bytes apart
    assert ops(c.final).count("global_load_dwordx4") == 2  # B[tx, 0:16]: 32 bytes per lane
    assert ops(c.final).count("ds_write_b16_d16_hi") == 8
    rng = np.random.default_rng(11)
    a = rng.standard_normal((16, kernels.GEMM_K)).astype(np.float16)
    b = rng.standard_normal((kernels.GEMM_K, 16)).astype(np.float16)
    out = np.zeros((16, 16), np.float32)
    simulate(c.asm, [a, b, out], (1, 1, 1), (64, 1, 1))
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4,
                               atol=1e-4)
    link_or_skip(c.asm, "gfx942")
    link_or_skip(_compile(kernels.gemm_lds_f16, "gfx950").asm, "gfx950")


def test_a_window_base_of_the_same_buffer_blocks_merging():
    # A's base and A's base + 4 KiB are different registers but the same buffer: a store
    # through the window between two loads of A must keep them apart (and vice versa)
    addr = VReg("v")
    base, window = VReg("s", 2, 2, name="base_A"), VReg("s", 2, 2, name="base_A")
    other = VReg("s", 2, 2, name="base_B")
    x, y = VReg("v"), VReg("v")

    def loads_around(store_base):
        return Program("k", [
            Instr("v_mov_b32", [addr], [Imm.of_int(0)]),
            Instr("global_load_dword", [x], [addr, base]),
            Instr("global_store_dword", [], [addr, VReg("v"), store_base]),
            Instr("global_load_dword", [y], [addr, base], "offset:4"),
            Instr("s_endpgm", [], [x, y])])

    assert "global_load_dwordx2" not in ops(merge_loads(loads_around(window)))
    assert "global_load_dwordx2" in ops(merge_loads(loads_around(other)))
    stores = Program("k", [
        Instr("v_mov_b32", [addr], [Imm.of_int(0)]),
        Instr("global_store_dword", [], [addr, x, base]),
        Instr("global_load_dword", [VReg("v")], [addr, window]),
        Instr("global_store_dword", [], [addr, y, base], "offset:4"),
        Instr("s_endpgm")])
    assert "global_store_dwordx2" not in ops(merge_stores(stores))
