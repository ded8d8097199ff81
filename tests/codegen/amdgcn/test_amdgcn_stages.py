"""Unit tests of the AMDGCN backend stages on hand-built kernel IR, with exact expected
instruction sequences."""

import pytest

from tilewave.codegen.amdgcn.hazards import mitigate_hazards
from tilewave.codegen.amdgcn.kir import Imm, Instr, Label, PReg, Program, Sub, Sym, VReg
from tilewave.codegen.amdgcn.liveness import live_intervals, liveness
from tilewave.codegen.amdgcn.peephole import drop_final_exec_restore, fuse, pair_zero_moves
from tilewave.codegen.amdgcn.regalloc import allocate
from tilewave.codegen.amdgcn.render import format_body
from tilewave.codegen.amdgcn.waitcnt import insert_waitcnt
from tilewave.errors import RegisterAllocationError


def prog(*body, name="k"):
    return Program(name, list(body))


def text(program):
    return [ln.strip().split(" ;")[0].strip() for ln in format_body(program).splitlines()]


def v(i, w=1):
    return PReg("v", i, w)


def s(i, w=1):
    return PReg("s", i, w)


SRD = s(8, 4)


# -- liveness ------------------------------------------------------------------------------
def test_loop_carried_accumulator_is_live_across_the_back_edge():
    acc, x, n = VReg("v"), VReg("v"), VReg("s")
    p = prog(
        Instr("v_mov_b32", [acc], [Imm.of_int(0)]),
        Instr("s_mov_b32", [n], [Imm.of_int(0)]),
        Label("head"),
        Instr("v_mov_b32", [x], [Imm.of_int(1)]),
        Instr("v_add_u32", [acc], [acc, x]),
        Instr("s_add_u32", [n], [n, Imm.of_int(1)]),
        Instr("s_cmp_lt_i32", [], [n, Imm.of_int(4)]),
        Instr("s_cbranch_scc1", target="head"),
        Label("exit"),
        Instr("v_mov_b32", [x], [acc]),
        Instr("s_endpgm"),
    )
    blocks, _ = liveness(p)
    header = blocks[1]
    assert acc in header.live_in and n in header.live_in and x not in header.live_in
    spans = live_intervals(p)
    # acc is live from its definition to the use after the loop, through the whole loop body
    assert spans[acc] == (0, 9)
    # x is redefined each iteration: it is not live at the loop header
    assert spans[x][0] == 3


def test_partial_write_of_a_range_does_not_kill_it():
    srd = VReg("s", 4, 4)
    p = prog(
        Instr("s_mov_b32", [Sub(srd, 2)], [Imm.of_int(16)]),
        Instr("s_mov_b32", [Sub(srd, 3)], [Imm.of_int(0)]),
        Instr("s_endpgm", [], [srd]),
    )
    assert live_intervals(p)[srd] == (0, 2)


# -- register allocation --------------------------------------------------------------------
def test_allocator_honours_precoloring_alignment_and_reuse():
    kernarg = VReg("s", 2, 2, fixed=0)
    srd = VReg("s", 4, 4)
    a, b = VReg("v"), VReg("v")
    tid = VReg("v", fixed=0)
    p = prog(
        Instr("s_load_dwordx2", [Sub(srd, 0, 2)], [kernarg, Imm.of_int(0)]),
        Instr("s_mov_b32", [Sub(srd, 2)], [Imm.of_int(64)]),
        Instr("v_lshlrev_b32", [a], [Imm.of_int(2), tid]),
        Instr("buffer_load_dword", [b], [a, srd, Imm.of_int(0)], "offen"),
        Instr("buffer_store_dword", [], [b, a, srd, Imm.of_int(0)], "offen"),
        Instr("s_endpgm"),
    )
    alloc = allocate(p, {"v": 256, "s": 102})
    assert alloc.phys(kernarg) == PReg("s", 0, 2)
    assert alloc.phys(tid) == PReg("v", 0)
    assert alloc.phys(srd).index % 4 == 0 and alloc.phys(srd).index >= 2
    assert alloc.phys(srd) == PReg("s", 4, 4)  # s[0:1] live until the load: first free is 4
    # tid dies at the shift, so a and b may reuse v0 only where not overlapping
    assert alloc.phys(a) != alloc.phys(b)
    assert alloc.next_free == {"v": 2, "s": 8}


def test_result_reuses_a_source_read_last_by_its_instruction_except_early_clobbers():
    tid = VReg("v", fixed=0)
    x, y = VReg("v"), VReg("v")
    p = prog(
        Instr("v_lshlrev_b32", [x], [Imm.of_int(2), tid]),
        Instr("v_add_u32", [y], [x, Imm.of_int(4)]),  # x's last read: y may take its register
        Instr("s_endpgm", [], [y]),
    )
    alloc = allocate(p, {"v": 8, "s": 8})
    assert alloc.phys(y) == alloc.phys(x)

    a, b, acc, d = VReg("v", 2, 2), VReg("v", 2, 2), VReg("v", 4, 2), VReg("v", 4, 2)
    mfma = prog(
        Instr("v_mov_b32", [Sub(a, 0)], [Imm.of_int(0)]),
        Instr("v_mov_b32", [Sub(a, 1)], [Imm.of_int(0)]),
        Instr("v_mov_b32", [Sub(b, 0)], [Imm.of_int(0)]),
        Instr("v_mov_b32", [Sub(b, 1)], [Imm.of_int(0)]),
        Instr("v_mfma_f32_16x16x16_f16", [d], [a, b, Imm.of_int(0)]),
        Instr("s_endpgm", [], [d]),
    )
    alloc = allocate(mfma, {"v": 16, "s": 8})
    units = set(alloc.phys(d).units())
    assert not units & (set(alloc.phys(a).units()) | set(alloc.phys(b).units()))
    del acc

    mask, saved = VReg("s", 2, 2), VReg("s", 2, 2)
    branch = prog(
        Instr("v_cmp_lt_i32_e64", [mask], [tid, Imm.of_int(4)]),
        Instr("s_and_saveexec_b64", [saved], [mask]),
        Instr("s_or_b64", [Sym("exec")], [Sym("exec"), saved]),
        Instr("s_endpgm"),
    )
    alloc = allocate(branch, {"v": 8, "s": 8})
    assert alloc.phys(saved) != alloc.phys(mask)


def test_allocator_reports_kernel_class_demand_and_limit():
    regs = [VReg("v") for _ in range(5)]
    body = [Instr("v_mov_b32", [r], [Imm.of_int(i)]) for i, r in enumerate(regs)]
    body.append(Instr("s_endpgm", [], list(regs)))
    with pytest.raises(RegisterAllocationError,
                       match=r"kernel 'big': out of VGPRs — 5 VGPRs live at the peak .* "
                             r"limit is 4.*does not spill"):
        allocate(prog(*body, name="big"), {"v": 4, "s": 16})


# -- waitcnt -------------------------------------------------------------------------------
def test_waitcnt_counts_only_the_loads_needed():
    p = prog(
        Instr("buffer_load_dword", [v(1)], [v(0), SRD, Imm.of_int(0)], "offen"),
        Instr("buffer_load_dword", [v(2)], [v(0), SRD, Imm.of_int(0)], "offen offset:4"),
        Instr("v_add_f32", [v(3)], [v(1), v(1)]),
        Instr("v_add_f32", [v(3)], [v(3), v(2)]),
        Instr("s_endpgm"),
    )
    assert text(insert_waitcnt(p)) == [
        "buffer_load_dword v1, v0, s[8:11], 0 offen",
        "buffer_load_dword v2, v0, s[8:11], 0 offen offset:4",
        "s_waitcnt vmcnt(1)",
        "v_add_f32 v3, v1, v1",
        "s_waitcnt vmcnt(0)",
        "v_add_f32 v3, v3, v2",
        "s_endpgm",
    ]


def test_scalar_loads_force_lgkmcnt_zero_and_lds_reads_count_in_order():
    p = prog(
        Instr("s_load_dword", [s(4)], [s(0, 2), Imm.of_int(0)]),
        Instr("ds_read_b32", [v(1)], [v(0)]),
        Instr("ds_read_b32", [v(2)], [v(0)], "offset:4"),
        Instr("v_mov_b32", [v(3)], [v(1)]),
        Instr("v_mov_b32", [v(3)], [s(4)]),
        Instr("s_endpgm"),
    )
    assert text(insert_waitcnt(p)) == [
        "s_load_dword s4, s[0:1], 0",
        "ds_read_b32 v1, v0",
        "ds_read_b32 v2, v0 offset:4",
        "s_waitcnt lgkmcnt(0)",
        "v_mov_b32 v3, v1",
        "v_mov_b32 v3, s4",
        "s_endpgm",
    ]


def test_load_at_the_end_of_a_loop_is_waited_for_at_the_top():
    p = prog(
        Instr("v_mov_b32", [v(1)], [Imm.of_int(0)]),
        Label("head"),
        Instr("v_add_u32", [v(2)], [v(1), v(1)]),
        Instr("buffer_load_dword", [v(1)], [v(0), SRD, Imm.of_int(0)], "offen"),
        Instr("s_cmp_lt_i32", [], [s(4), Imm.of_int(4)]),
        Instr("s_cbranch_scc1", target="head"),
        Instr("s_endpgm"),
    )
    assert text(insert_waitcnt(p)) == [
        "v_mov_b32 v1, 0",
        "head:",
        "s_waitcnt vmcnt(0)",
        "v_add_u32 v2, v1, v1",
        "buffer_load_dword v1, v0, s[8:11], 0 offen",
        "s_cmp_lt_i32 s4, 4",
        "s_cbranch_scc1 head",
        "s_endpgm",
    ]


def test_barrier_waits_for_this_waves_lds_writes():
    p = prog(
        Instr("ds_write_b32", [], [v(0), v(1)]),
        Instr("s_barrier"),
        Instr("s_endpgm"),
    )
    assert text(insert_waitcnt(p)) == [
        "ds_write_b32 v0, v1", "s_waitcnt lgkmcnt(0)", "s_barrier", "s_endpgm"]


# -- hazards -------------------------------------------------------------------------------
def test_valu_write_then_readfirstlane_of_it_gets_one_nop():
    p = prog(
        Instr("v_add_u32", [v(7)], [v(1), v(2)]),
        Instr("v_readfirstlane_b32", [s(10)], [v(7)]),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(p)) == [
        "v_add_u32 v7, v1, v2", "s_nop 0", "v_readfirstlane_b32 s10, v7", "s_endpgm"]


def test_readfirstlane_of_another_register_or_after_a_gap_needs_no_nop():
    unrelated = prog(
        Instr("v_add_u32", [v(7)], [v(1), v(2)]),
        Instr("v_readfirstlane_b32", [s(10)], [v(8)]),
        Instr("s_endpgm"),
    )
    gap = prog(
        Instr("v_add_u32", [v(7)], [v(1), v(2)]),
        Instr("s_mov_b32", [s(3)], [Imm.of_int(1)]),
        Instr("v_readfirstlane_b32", [s(10)], [v(7)]),
        Instr("s_endpgm"),
    )
    assert "s_nop 0" not in text(mitigate_hazards(unrelated))
    assert "s_nop 0" not in text(mitigate_hazards(gap))


def test_valu_sgpr_write_then_vmem_read_gets_five_wait_states():
    p = prog(
        Instr("v_readfirstlane_b32", [s(12)], [v(3)]),
        Instr("v_mov_b32", [v(4)], [Imm.of_int(0)]),
        Instr("buffer_load_dword", [v(1)], [Sym("off"), SRD, s(12)], ""),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(p)) == [
        "v_readfirstlane_b32 s12, v3", "v_mov_b32 v4, 0", "s_nop 3",
        "buffer_load_dword v1, off, s[8:11], s12", "s_endpgm"]


def test_wide_store_data_overwritten_by_valu_gets_one_nop():
    p = prog(
        Instr("buffer_store_dwordx4", [], [v(4, 4), v(0), SRD, Imm.of_int(0)], "offen"),
        Instr("v_mov_b32", [v(5)], [Imm.of_int(0)]),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(p))[1] == "s_nop 0"


def test_hazard_is_found_across_a_loop_back_edge():
    p = prog(
        Label("head"),
        Instr("v_readfirstlane_b32", [s(10)], [v(7)]),
        Instr("v_add_u32", [v(7)], [v(1), v(2)]),
        Instr("s_cbranch_scc1", target="head"),
        Instr("s_endpgm"),
    )
    # one wait state (the branch) already separates the write from the read: no nop needed
    assert "s_nop 0" not in text(mitigate_hazards(p))
    tight = prog(
        Label("head"),
        Instr("v_readfirstlane_b32", [s(10)], [v(7)]),
        Instr("s_cbranch_scc1", target="head"),
        Instr("v_add_u32", [v(7)], [v(1), v(2)]),
        Instr("s_branch", target="head"),
    )
    out = text(mitigate_hazards(tight))
    assert out[:3] == ["head:", "v_readfirstlane_b32 s10, v7", "s_cbranch_scc1 head"]
    assert "s_nop" not in " ".join(out)  # s_branch counts as the wait state


def test_mfma_result_read_by_valu_waits_eight_wait_states():
    p = prog(
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
        Instr("v_mov_b32", [v(9)], [v(5)]),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(p))[1:3] == ["s_nop 7", "v_mov_b32 v9, v5"]


def test_one_nop_after_an_mfma_serves_every_later_reader():
    p = prog(
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
        Instr("v_mov_b32", [v(8)], [Imm.of_int(0)]),
        Instr("buffer_store_dword", [], [v(4), v(8), SRD, Imm.of_int(0)], "offen"),
        Instr("buffer_store_dword", [], [v(5), v(8), SRD, Imm.of_int(0)], "offen offset:4"),
        Instr("s_endpgm"),
    )
    out = text(mitigate_hazards(p))
    assert out[1:3] == ["v_mov_b32 v8, 0", "s_nop 6"]
    assert sum(ln.startswith("s_nop") for ln in out) == 1


def test_chained_mfma_accumulator_needs_no_nop_but_valu_operand_needs_two():
    chained = prog(
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), Imm.of_int(0)]),
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
        Instr("s_endpgm"),
    )
    assert "s_nop" not in " ".join(text(mitigate_hazards(chained)))
    valu_operand = prog(
        Instr("v_mov_b32", [v(1)], [Imm.of_int(0)]),
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(valu_operand))[1] == "s_nop 1"


def test_mfma_result_as_next_mfma_operand_or_overwritten_from_a_constant_waits():
    as_a = prog(
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
        Instr("v_mfma_f32_16x16x16_f16", [v(8, 4)], [v(4, 2), v(2, 2), v(8, 4)]),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(as_a))[1] == "s_nop 7"
    restart = prog(
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
        Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), Imm.of_int(0)]),
        Instr("s_endpgm"),
    )
    assert text(mitigate_hazards(restart))[1] == "s_nop 7"


# -- peephole ------------------------------------------------------------------------------
def test_shift_then_add_fuses_to_lshl_add():
    t, d, a, b = VReg("v"), VReg("v"), VReg("v"), VReg("v")
    p = prog(
        Instr("v_lshlrev_b32", [t], [Imm.of_int(2), a]),
        Instr("v_add_u32", [d], [t, b]),
        Instr("s_endpgm", [], [d]),
    )
    out = fuse(p).instructions()
    assert [(i.opcode, i.defs, i.uses) for i in out[:1]] == [
        ("v_lshl_add_u32", [d], [a, Imm.of_int(2), b])]
    assert len(out) == 2


@pytest.mark.parametrize("first,second,fused", [
    ("v_lshlrev_b32", "v_or_b32", "v_lshl_or_b32"),
    ("v_add_u32", "v_add_u32", "v_add3_u32"),
    ("v_or_b32", "v_or_b32", "v_or3_b32"),
])
def test_other_three_operand_fusions(first, second, fused):
    t, d, a, b, c = (VReg("v") for _ in range(5))
    lhs = [Imm.of_int(3), a] if first == "v_lshlrev_b32" else [a, b]
    p = prog(Instr(first, [t], lhs), Instr(second, [d], [c, t]), Instr("s_endpgm", [], [d]))
    out = fuse(p).instructions()
    assert out[0].opcode == fused and len(out) == 2


@pytest.mark.parametrize(("second", "fused"), [("v_add_u32", "v_lshl_add_u32"),
                                               ("v_or_b32", "v_lshl_or_b32")])
def test_a_uniform_shift_read_once_by_valu_is_shifted_inside_it(second, fused):
    t, s_in = VReg("s"), VReg("s")
    d, b = VReg("v"), VReg("v")
    p = prog(Instr("s_lshl_b32", [t], [s_in, Imm.of_int(4)]), Instr(second, [d], [t, b]),
             Instr("s_endpgm", [], [d]))
    out = fuse(p).instructions()
    assert [(i.opcode, i.uses) for i in out[:1]] == [(fused, [s_in, Imm.of_int(4), b])]
    assert len(out) == 2
    # two SGPR sources would exceed gfx9's one constant-bus read: not fused
    other = VReg("s")
    two = prog(Instr("s_lshl_b32", [t], [s_in, Imm.of_int(4)]), Instr(second, [d], [t, other]),
               Instr("s_endpgm", [], [d]))
    assert fuse(two).instructions()[0].opcode == "s_lshl_b32"


def test_no_fusion_when_the_temporary_has_two_uses_or_a_literal_would_land_in_vop3():
    t, d, a, b = VReg("v"), VReg("v"), VReg("v"), VReg("v")
    twice = prog(
        Instr("v_lshlrev_b32", [t], [Imm.of_int(2), a]),
        Instr("v_add_u32", [d], [t, b]),
        Instr("s_endpgm", [], [d, t]),
    )
    assert [i.opcode for i in fuse(twice).instructions()][:2] == ["v_lshlrev_b32", "v_add_u32"]
    literal = prog(
        Instr("v_lshlrev_b32", [t], [Imm.of_int(2), a]),
        Instr("v_add_u32", [d], [Imm.of_int(1000), t]),
        Instr("s_endpgm", [], [d]),
    )
    assert [i.opcode for i in fuse(literal).instructions()][:2] == ["v_lshlrev_b32", "v_add_u32"]


def test_no_fusion_when_a_source_is_rewritten_in_between():
    t, d, a, b = VReg("v"), VReg("v"), VReg("v"), VReg("v")
    p = prog(
        Instr("v_lshlrev_b32", [t], [Imm.of_int(2), a]),
        Instr("v_mov_b32", [a], [Imm.of_int(0)]),
        Instr("v_add_u32", [d], [t, b]),
        Instr("s_endpgm", [], [d, a]),
    )
    assert fuse(p).instructions()[0].opcode == "v_lshlrev_b32"


def test_zero_moves_into_an_aligned_pair_become_one_v_mov_b64():
    acc = VReg("v", 4, 2)
    odd = VReg("v", 3, 1)
    p = prog(
        *[Instr("v_mov_b32", [Sub(acc, i)], [Imm.of_int(0)]) for i in range(4)],
        Instr("v_mov_b32", [Sub(odd, 0)], [Imm.of_int(0)]),  # unaligned range: kept
        Instr("v_mov_b32", [Sub(odd, 1)], [Imm.of_int(0)]),
        Instr("v_mov_b32", [Sub(acc, 0)], [Imm.of_float(1.0, "float32")]),  # not zero: kept
        Instr("v_mov_b32", [Sub(acc, 1)], [Imm.of_float(1.0, "float32")]),
        Instr("s_endpgm", [], [acc, odd]),
    )
    out = pair_zero_moves(p).body
    assert [ins.opcode for ins in out] == ["v_mov_b64", "v_mov_b64"] + ["v_mov_b32"] * 4 + [
        "s_endpgm"]
    assert out[0].defs == [Sub(acc, 0, 2)] and out[1].defs == [Sub(acc, 2, 2)]


def test_v_mov_b64_before_an_mfma_waits_like_any_valu_write():
    def gap(first):
        p = prog(
            *first,
            Instr("v_mfma_f32_16x16x16_f16", [v(4, 4)], [v(0, 2), v(2, 2), v(4, 4)]),
            Instr("s_endpgm"),
        )
        return [ln for ln in text(mitigate_hazards(p)) if ln.startswith("s_nop")]

    wide = gap([Instr("v_mov_b64", [v(0, 2)], [Imm.of_int(0)])])
    narrow = gap([Instr("v_mov_b32", [v(1)], [Imm.of_int(0)])])
    assert wide == narrow == ["s_nop 1"]


def test_exec_restore_right_before_the_end_is_dropped_and_others_kept():
    saved = s(4, 2)
    p = prog(
        Instr("s_and_saveexec_b64", [saved], [s(6, 2)]),
        Instr("s_cbranch_execz", target=".Lend"),
        Instr("v_mov_b32", [v(1)], [Imm.of_int(0)]),
        Label(".Lmid"),
        Instr("s_or_b64", [Sym("exec")], [Sym("exec"), saved]),  # more code follows: kept
        Instr("s_and_saveexec_b64", [saved], [s(6, 2)]),
        Label(".Lend"),
        Instr("s_or_b64", [Sym("exec")], [Sym("exec"), saved]),  # only s_endpgm follows
        Instr("s_endpgm"),
    )
    assert text(drop_final_exec_restore(p)) == [
        "s_and_saveexec_b64 s[4:5], s[6:7]", "s_cbranch_execz .Lend", "v_mov_b32 v1, 0",
        ".Lmid:", "s_or_b64 exec, exec, s[4:5]", "s_and_saveexec_b64 s[4:5], s[6:7]", ".Lend:",
        "s_endpgm"]
