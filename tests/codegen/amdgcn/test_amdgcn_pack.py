"""Packed f32 math (pack_f32.py): pairs of independent f32 FMA/add/mul as ``v_pk_*_f32``.

Stage tests on hand-built kernel IR (what packs, what must not), per-unit liveness of the
pairs it creates, and whole kernels: the selector's program has the scalar ops, the final
assembly the packed ones, the simulator's result matches NumPy and LLVM's tools assemble it.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T

from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.kir import Imm, Instr, Label, Program, Sub, Sym, VReg
from tilewave.codegen.amdgcn.liveness import live_intervals
from tilewave.codegen.amdgcn.pack_f32 import pack_f32_pairs
from tilewave.codegen.amdgcn.regalloc import allocate
from tilewave.codegen.amdgcn.render import assign, format_body

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate
from test_amdgcn_real_kernels import case, link_or_skip


def ops(program):
    return [i.opcode for i in program.body if isinstance(i, Instr)]


def text(program):
    alloc = allocate(program, {"v": 256, "s": 100})
    return [ln.strip().split(" ;")[0].strip()
            for ln in format_body(assign(program, alloc)).splitlines()]


def _loads():
    """Two dwordx4 groups (A: a row of 4, B: 4 columns) as a register tile's loop loads them."""
    a, b = VReg("v", 4, 2), VReg("v", 4, 2)
    addr = VReg("v")
    return a, b, [
        Instr("v_mov_b32", [addr], [Imm.of_int(0)]),
        Instr("buffer_load_dwordx4", [a], [addr, VReg("s", 4, 4), Imm.of_int(0)], "offen"),
        Instr("buffer_load_dwordx4", [b], [addr, VReg("s", 4, 4), Imm.of_int(0)], "offen"),
    ]


def test_two_accumulating_fmas_become_one_packed_fma_with_a_broadcast_source():
    a, b, loads = _loads()
    acc0, acc1 = VReg("v"), VReg("v")
    before = Program("k", [
        *loads,
        Instr("v_mov_b32", [acc0], [Imm.of_int(0)]),
        Instr("v_mov_b32", [acc1], [Imm.of_int(0)]),
        Instr("v_fma_f32", [acc0], [Sub(a, 1), Sub(b, 2), acc0]),
        Instr("v_fma_f32", [acc1], [Sub(a, 1), Sub(b, 3), acc1]),
        Instr("s_endpgm", [], [acc0, acc1]),
    ])
    after = pack_f32_pairs(before)
    assert ops(after) == ["v_mov_b32", "buffer_load_dwordx4", "buffer_load_dwordx4",
                          "v_mov_b32", "v_mov_b32", "v_pk_fma_f32", "s_endpgm"]
    packed = after.body[5]
    pair = packed.defs[0].reg
    # acc0/acc1 became the halves of one aligned pair everywhere (the moves, the final use)
    assert packed.defs == [Sub(pair, 0, 2)]
    assert packed.uses == [Sub(a, 0, 2), Sub(b, 2, 2), Sub(pair, 0, 2)]
    assert packed.mods == "op_sel:[1,0,0]"  # a[1] for both results; op_sel_hi keeps 1
    assert after.body[3].defs == [Sub(pair, 0)] and after.body[4].defs == [Sub(pair, 1)]
    assert after.body[6].uses == [Sub(pair, 0), Sub(pair, 1)]
    assert text(after)[5].startswith("v_pk_fma_f32 v[")


def test_low_element_broadcast_sets_op_sel_hi():
    a, b, loads = _loads()
    d0, d1 = VReg("v"), VReg("v")
    after = pack_f32_pairs(Program("k", [
        *loads,
        Instr("v_mul_f32", [d0], [Sub(a, 2), Sub(b, 0)]),
        Instr("v_mul_f32", [d1], [Sub(a, 2), Sub(b, 1)]),
        Instr("s_endpgm", [], [d0, d1]),
    ]))
    packed = [i for i in after.body if isinstance(i, Instr) and i.opcode == "v_pk_mul_f32"]
    assert len(packed) == 1
    assert packed[0].uses == [Sub(a, 2, 2), Sub(b, 0, 2)]
    assert packed[0].mods == "op_sel_hi:[0,1]"


@pytest.mark.parametrize("why", ["dependent", "exec", "other_range", "sgpr", "constant",
                                 "source_rewritten", "label"])
def test_what_is_not_packed(why):
    a, b, loads = _loads()
    c = VReg("v", 4, 2)
    d0, d1 = VReg("v"), VReg("v")
    first = Instr("v_add_f32", [d0], [Sub(a, 0), Sub(b, 0)])
    second_srcs = {
        "dependent": [d0, Sub(b, 1)],           # reads the first result
        "other_range": [Sub(c, 1), Sub(b, 1)],  # a[0] and c[1]: not one pair
        "sgpr": [VReg("s"), Sub(b, 1)],
        "constant": [Imm.of_float(3.0, "float32"), Sub(b, 1)],
    }.get(why, [Sub(a, 1), Sub(b, 1)])
    between = {
        "exec": [Instr("s_and_saveexec_b64", [VReg("s", 2, 2)], [VReg("s", 2, 2)])],
        "source_rewritten": [Instr("v_mov_b32", [Sub(b, 1)], [Imm.of_int(0)])],
        "label": [Label("join")],
    }.get(why, [])
    if why in ("other_range", "sgpr", "constant"):  # a[0] must pair with something alike
        first = Instr("v_add_f32", [d0], [Sub(a, 0), Sub(b, 0)])
    before = Program("k", [*loads, first, *between,
                           Instr("v_add_f32", [d1], second_srcs),
                           Instr("s_endpgm", [], [d0, d1, c])])
    after = pack_f32_pairs(before)
    assert "v_pk_add_f32" not in ops(after)
    assert ops(after) == ops(before)


def test_independent_instructions_between_do_not_block_the_pair():
    a, b, loads = _loads()
    d0, d1, t = VReg("v"), VReg("v"), VReg("v")
    after = pack_f32_pairs(Program("k", [
        *loads,
        Instr("v_add_f32", [d0], [Sub(a, 0), Sub(b, 0)]),
        Instr("v_mov_b32", [t], [Sym("vcc_lo")]),
        Instr("v_add_f32", [d1], [Sub(a, 1), Sub(b, 1)]),
        Instr("s_endpgm", [], [d0, d1, t]),
    ]))
    assert ops(after)[-3:] == ["v_pk_add_f32", "v_mov_b32", "s_endpgm"]


def test_a_pair_written_half_by_half_is_not_live_before_its_first_write():
    pair, x = VReg("v", 2, 2), VReg("v")
    p = Program("k", [
        Instr("v_mov_b32", [x], [Imm.of_int(1)]),
        Instr("v_add_u32", [x], [x, x]),
        Instr("v_mov_b32", [Sub(pair, 0)], [x]),
        Instr("v_mov_b32", [Sub(pair, 1)], [x]),
        Instr("s_endpgm", [], [pair]),
    ])
    assert live_intervals(p)[pair] == (2, 4)


@T.prim_func
def scale_tile(A: T.Buffer((1024,), "float32"), S: T.Buffer((1024,), "float32"),
               B: T.Buffer((1024,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        a = T.alloc_buffer((4,), "float32", scope="local")
        s = T.alloc_buffer((4,), "float32", scope="local")
        for i in T.vectorized(4):
            a[i] = A[tx * 4 + i]
        for i in T.vectorized(4):
            s[i] = S[tx * 4 + i]
        for i in T.unroll(4):
            B[tx * 4 + i] = a[i] * s[i] + a[i]


def _compile(func, target="gfx942"):
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target)


def test_packed_fma_in_an_elementwise_tile_matches_numpy():
    compiled = _compile(scale_tile)
    assert ops(compiled.selected).count("v_fma_f32") == 4
    assert ops(compiled.final).count("v_pk_fma_f32") == 2
    assert "v_fma_f32" not in ops(compiled.final)
    rng = np.random.default_rng(4)
    a, s = (rng.standard_normal(1024).astype(np.float32) for _ in range(2))
    b = np.zeros(1024, np.float32)
    simulate(compiled.asm, [a, s, b], (1, 1, 1), (256, 1, 1))
    expected = (a.astype(np.float64) * s + a).astype(np.float32)
    np.testing.assert_array_equal(b, expected)


def test_sgemm_inner_product_is_packed_and_matches_numpy():
    compiled = _compile(kernels.sgemm_regtile)
    before, after = ops(compiled.selected), ops(compiled.final)
    assert before.count("v_fma_f32") == 64 and "v_pk_fma_f32" not in before
    assert after.count("v_pk_fma_f32") == 32 and "v_fma_f32" not in after
    args, grid, block, check = case("sgemm_regtile")
    simulate(compiled.asm, args, grid, block)
    actual, expected, tol = check()
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_packed_ops_assemble(target):
    asm = _compile(scale_tile, target).asm
    assert "v_pk_fma_f32" in asm
    link_or_skip(asm, target)
