"""The assembly dataflow checker on small hand-written programs: straight line, branches,
loops, the counters of gfx9 and gfx12, LDS DMA, redundant and back-to-back waits."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from asm_lds_checker import check


def _kinds(asm: str, target: str = "gfx942") -> list[tuple[str, int]]:
    return [(f.kind, f.line) for f in check(asm, target)]


def test_straight_line_write_then_barrier_is_found_and_the_wait_fixes_it():
    racy = "k:\n ds_write_b32 v0, v1\n s_barrier\n s_endpgm\n"
    assert _kinds(racy) == [("barrier", 3)]
    fixed = "k:\n ds_write_b32 v0, v1\n s_waitcnt lgkmcnt(0)\n s_barrier\n s_endpgm\n"
    assert _kinds(fixed) == []


def test_a_read_in_flight_counts_too():
    assert _kinds("k:\n ds_read_b32 v0, v1\n s_barrier\n s_endpgm\n") == [("barrier", 3)]


def test_partial_lds_wait_keeps_the_newer_operations():
    asm = ("k:\n ds_write_b32 v0, v1\n ds_write_b32 v0, v2\n s_waitcnt lgkmcnt(1)\n"
           " s_barrier\n s_endpgm\n")
    assert _kinds(asm) == [("barrier", 5)]


def test_pending_scalar_load_makes_a_partial_lgkm_wait_say_nothing():
    asm = ("k:\n s_load_dword s0, s[0:1], 0x0\n ds_write_b32 v0, v1\n s_waitcnt lgkmcnt(1)\n"
           " s_barrier\n s_endpgm\n")
    assert _kinds(asm) == [("barrier", 5)]
    # without the scalar load, lgkmcnt(1) after one ds_write is a wait for nothing
    asm = "k:\n ds_write_b32 v0, v1\n s_waitcnt lgkmcnt(1)\n s_barrier\n s_endpgm\n"
    assert _kinds(asm) == [("redundant", 3), ("barrier", 4)]


def test_write_in_one_branch_reaches_the_barrier_after_the_join():
    asm = """k:
    s_cbranch_scc0 .Lskip
    ds_write_b32 v0, v1
.Lskip:
    s_barrier
    s_endpgm
"""
    assert _kinds(asm) == [("barrier", 5)]


def test_write_at_the_end_of_a_loop_reaches_the_barrier_at_its_top():
    asm = """k:
.Lloop:
    s_barrier
    ds_read_b32 v2, v0
    s_waitcnt lgkmcnt(0)
    ds_write_b32 v0, v2
    s_cbranch_scc1 .Lloop
    s_endpgm
"""
    assert _kinds(asm) == [("barrier", 3)]
    fixed = asm.replace("    s_cbranch_scc1", "    s_waitcnt lgkmcnt(0)\n    s_cbranch_scc1")
    assert _kinds(fixed) == []


def test_wait_needed_on_one_path_only_is_not_redundant():
    asm = """k:
    s_cbranch_scc0 .Lskip
    ds_write_b32 v0, v1
.Lskip:
    s_waitcnt lgkmcnt(0)
    s_barrier
    s_endpgm
"""
    assert _kinds(asm) == []


def test_lds_dma_is_on_vmcnt():
    asm = ("k:\n buffer_load_dword v1, s[4:7], 0 offen lds\n s_waitcnt lgkmcnt(0)\n"
           " s_barrier\n s_endpgm\n")
    findings = check(asm, "gfx950")
    assert [(f.kind, "dma" in f.detail) for f in findings] == [("redundant", False),
                                                               ("barrier", True)]
    fixed = "k:\n global_load_lds_dword v0, s[0:1]\n s_waitcnt vmcnt(0)\n s_barrier\n s_endpgm\n"
    assert _kinds(fixed, "gfx950") == []


@pytest.mark.parametrize("target", ["gfx1200", "gfx1201"])
def test_gfx12_counters_and_signal(target):
    racy = "k:\n ds_store_b32 v0, v1\n s_barrier_signal -1\n s_barrier_wait -1\n s_endpgm\n"
    assert _kinds(racy, target) == [("barrier", 3)]
    fixed = racy.replace(" s_barrier_signal", " s_wait_dscnt 0x0\n s_barrier_signal")
    assert _kinds(fixed, target) == []
    # the packed form: loadcnt in [13:8], dscnt in [5:0]; 0x100 waits loadcnt 1, dscnt 0
    packed = racy.replace(" s_barrier_signal", " s_wait_loadcnt_dscnt 0x100\n s_barrier_signal")
    assert _kinds(packed, target) == []
    idle = racy.replace(" s_barrier_signal", " s_wait_dscnt 0x0\n s_wait_loadcnt 0x0\n"
                        " s_barrier_signal")
    # no load in flight; and s_wait_loadcnt_dscnt could have done both
    assert _kinds(idle, target) == [("redundant", 4), ("back-to-back", 4)]


def test_two_waits_one_instruction_could_express():
    asm = ("k:\n global_load_dword v1, v0, s[0:1]\n ds_write_b32 v0, v2\n s_waitcnt vmcnt(0)\n"
           " s_waitcnt lgkmcnt(0)\n s_barrier\n s_endpgm\n")
    assert _kinds(asm) == [("back-to-back", 5)]
    # gfx12 has no instruction for kmcnt and dscnt together: not reported
    asm = ("k:\n s_load_b32 s0, s[0:1], 0x0\n ds_store_b32 v0, v1\n s_wait_kmcnt 0x0\n"
           " s_wait_dscnt 0x0\n s_barrier_signal -1\n s_endpgm\n")
    assert _kinds(asm, "gfx1200") == []


def test_only_kernels_are_checked():
    # a helper function's entry state is its caller's: it is not analysed on its own
    asm = """.type helper,@function
.type k,@function
helper:
    s_waitcnt vmcnt(0) lgkmcnt(0)
    s_setpc_b64 s[30:31]
k:
    s_barrier
    s_endpgm
.amdhsa_kernel k
.end_amdhsa_kernel
"""
    assert _kinds(asm) == []
