"""Load scheduling (schedule.py): loads move up past independent ALU work, never past what
they depend on or another memory operation; loops get their kernel-argument wait before the
head; waits in the result come late (vmcnt(n) with n > 0)."""

import re
import sys
from pathlib import Path

from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.kir import Imm, Instr, Label, Program, VReg
from tilewave.codegen.amdgcn.schedule import hoist_loads, wait_before_loops

sys.path.insert(0, str(Path(__file__).parent))
import kernels


def ops(program):
    return [i.opcode if isinstance(i, Instr) else f"{i.name}:" for i in program.body]


def test_a_load_moves_above_independent_alu_but_not_above_its_address():
    srd, addr, a, b, x = VReg("s", 4, 4), VReg("v"), VReg("v"), VReg("v"), VReg("v")
    p = Program("k", [
        Instr("v_lshlrev_b32", [addr], [Imm.of_int(2), VReg("v")]),
        Instr("v_add_f32", [x], [a, b]),        # independent: the load passes it
        Instr("v_mul_f32", [x], [x, x]),
        Instr("buffer_load_dword", [a := VReg("v")], [addr, srd, Imm.of_int(0)], "offen"),
        Instr("v_add_f32", [b], [a, x]),
    ])
    assert ops(hoist_loads(p)) == ["v_lshlrev_b32", "buffer_load_dword", "v_add_f32",
                                   "v_mul_f32", "v_add_f32"]


def test_a_load_does_not_pass_a_store_a_label_or_a_reader_of_its_destination():
    srd, addr, v = VReg("s", 4, 4), VReg("v"), VReg("v")
    p = Program("k", [
        Instr("buffer_store_dword", [], [v, addr, srd, Imm.of_int(0)], "offen"),
        Instr("v_mov_b32", [VReg("v")], [Imm.of_int(1)]),
        Label(".L0"),
        Instr("v_add_f32", [VReg("v")], [v, v]),  # reads v, which the load overwrites
        Instr("buffer_load_dword", [v], [addr, srd, Imm.of_int(0)], "offen"),
    ])
    assert ops(hoist_loads(p)) == ops(p)


def test_kernel_argument_wait_goes_before_the_loop():
    p = Program("k", [
        Instr("s_load_dwordx2", [VReg("s", 2, 2)], [VReg("s", 2, 2), Imm.of_int(0)]),
        Label(".Lloop"),
        Instr("s_add_u32", [c := VReg("s")], [c, Imm.of_int(1)]),
        Instr("s_cbranch_scc1", target=".Lloop"),
    ])
    assert ops(wait_before_loops(p)) == ["s_load_dwordx2", "s_waitcnt", ".Lloop:", "s_add_u32",
                                         "s_cbranch_scc1"]


def test_loop_loads_are_issued_together_and_waited_for_one_by_one():
    asm = amdgcn.compile_device_func(
        amdgcn.device_function(kernels.sgemm_regtile, "gfx942"), "gfx942").asm
    loop = asm.split(".Lsgemm_regtile_kernel_loop0:")[1].split("s_cbranch_scc1")[0]
    assert "lgkmcnt" not in loop  # the kernel-argument wait is before the loop
    waits = re.findall(r"vmcnt\((\d+)\)", loop)
    assert "3" in waits and "2" in waits  # later loads still in flight while FMAs run
