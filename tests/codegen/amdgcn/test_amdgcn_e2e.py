"""End to end: TVMScript kernel → tilewave.lower → AMDGCN assembly → llvm-mc/ld.lld (or
triton's LLVM for gfx950) → code object, its notes and kernel descriptor checked against
what the backend computed; results checked on the ISA simulator against NumPy."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import SimulationError, simulate

from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.toolchain import find_toolchain

READELF = shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")
N = kernels.N
rng = np.random.default_rng(1234)

_COMPILED: dict[tuple[str, str], amdgcn.CompiledKernel] = {}


def compiled(name: str, target: str = "gfx942") -> amdgcn.CompiledKernel:
    key = (name, target)
    if key not in _COMPILED:
        func = getattr(kernels, name)
        _COMPILED[key] = amdgcn.compile_device_func(amdgcn.device_function(func, target), target)
    return _COMPILED[key]


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _case_copy_f32():
    a, b = _f32(N), np.zeros(N, np.float32)
    return [a, b], (N // 64, 1, 1), (64, 1, 1), lambda: a, 1


def _case_copy_vec4():
    a, b = _f32(4 * N), np.zeros(4 * N, np.float32)
    return [a, b], (N // 64, 1, 1), (64, 1, 1), lambda: a, 1


def _case_axpy_f32():
    a, b, c = _f32(N), _f32(N), np.zeros(N, np.float32)
    return [a, b, c, 0.75], (N // 64, 1, 1), (64, 1, 1), lambda: a * np.float32(0.75) + b, 2


def _case_mul_add_f32():
    a, b, c = _f32(N), _f32(N), np.zeros(N, np.float32)
    return [a, b, c], (N // 64, 1, 1), (64, 1, 1), lambda: (a + b) * np.float32(3.0), 2


def _case_fma_f16():
    a, b = _f32(N).astype(np.float16), _f32(N).astype(np.float16)
    c = np.zeros(N, np.float16)
    return [a, b, c], (N // 64, 1, 1), (64, 1, 1), lambda: a * b + np.float16(1.5), 2


def _case_transpose_lds():
    a, b = _f32(16, 16), np.zeros((16, 16), np.float32)
    return [a, b], (1, 1, 1), (16, 16, 1), lambda: a.T, 1


def _case_row_sum():
    a, b = _f32(64, 32), np.zeros(64, np.float32)
    return [a, b], (1, 1, 1), (64, 1, 1), lambda: a.sum(axis=1), 1


def _case_guarded_scale():
    a, b = _f32(N), np.zeros(N, np.float32)
    n = 150
    ref = np.where(np.arange(N) < n, a * 2, -1).astype(np.float32)
    return [a, b, n], (N // 64, 1, 1), (64, 1, 1), lambda: ref, 1


def _gemm_operands(dtype):
    k = kernels.GEMM_K
    a = rng.standard_normal((16, k)).astype(dtype)
    b = rng.standard_normal((k, 16)).astype(dtype)
    # reference from the rounded 16-bit inputs, accumulated in float64
    return a, b, lambda: a.astype(np.float64) @ b.astype(np.float64)


def _case_gemm_f16():
    a, b, ref = _gemm_operands(np.float16)
    c = np.zeros((16, 16), np.float32)
    return [a, np.ascontiguousarray(b.T), c], (1, 1, 1), (64, 1, 1), ref, 2


def _case_gemm_bf16():
    import ml_dtypes

    a, b, ref = _gemm_operands(ml_dtypes.bfloat16)
    c = np.zeros((16, 16), np.float32)
    return [a, np.ascontiguousarray(b.T), c], (1, 1, 1), (64, 1, 1), ref, 2


def _case_gemm_lds_f16():
    a, b, ref = _gemm_operands(np.float16)
    c = np.zeros((16, 16), np.float32)
    return [a, b, c], (1, 1, 1), (64, 1, 1), ref, 2


def _case_block_sum_tree():
    a, b = _f32(4, 256), np.zeros(4, np.float32)
    return [a, b], (4, 1, 1), (256, 1, 1), lambda: a.astype(np.float64).sum(axis=1), 1


def _case_lds_dma_reverse():
    a, b = _f32(128), np.zeros(128, np.float32)
    return [a, b], (1, 1, 1), (128, 1, 1), lambda: a[::-1] * 2, 1


def _case_lds_dma_x4():
    a, b = _f32(4, 256), np.zeros((4, 256), np.float32)
    # lane l holds a[bx, 4l:4l+4] in S[4l:4l+4]; B[bx, 64j + l] = S[4l + j]
    ref = a.reshape(4, 64, 4).transpose(0, 2, 1).reshape(4, 256)
    return [a, b], (4, 1, 1), (64, 1, 1), lambda: ref, 1


# kernels only some targets can compile: name -> targets
TARGETS_OF = {"lds_dma_x4": ("gfx950",)}

CASES = {name[len("_case_"):]: fn for name, fn in globals().items() if name.startswith("_case_")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulated_result_matches_numpy(name):
    args, grid, wg, ref, out_index = CASES[name]()
    asm = compiled(name, TARGETS_OF.get(name, ("gfx942",))[0]).asm
    simulate(asm, args, grid, wg)
    expected = ref()
    tol = 1e-2 if args[out_index].dtype == np.float16 else 1e-5
    if name.startswith("gemm"):
        # 16-bit products are exact in float32; only the float32 accumulation over K rounds
        # (|error| <= K * 2**-24 * sum|a*b|, about 1e-4 here). The simulator rounds once per
        # MFMA, the hardware inside it: they may differ by a few ulps, not more.
        tol = 1e-4
    np.testing.assert_allclose(args[out_index], expected, rtol=tol, atol=tol)


def test_simulator_catches_a_missing_waitcnt():
    asm = compiled("axpy_f32").asm
    broken = "\n".join(ln for ln in asm.splitlines() if "vmcnt" not in ln)
    args, grid, wg, _, _ = CASES["axpy_f32"]()
    with pytest.raises(SimulationError, match="missing s_waitcnt"):
        simulate(broken, args, grid, wg)


def test_simulator_gives_a_wrong_transpose_without_the_wait_before_s_barrier():
    # the simulator lets waves pass s_barrier with LDS writes still queued (as gfx90a+ does),
    # so dropping the lgkmcnt(0) makes other waves read LDS their writer has not filled yet
    asm = compiled("transpose_lds").asm
    lines = asm.splitlines()
    barrier = next(i for i, ln in enumerate(lines) if ln.strip() == "s_barrier")
    assert "lgkmcnt(0)" in lines[barrier - 1]
    del lines[barrier - 1]
    args, grid, wg, expected, out_index = CASES["transpose_lds"]()
    simulate("\n".join(lines), args, grid, wg)
    assert not np.array_equal(args[out_index], expected())
    args, grid, wg, expected, out_index = CASES["transpose_lds"]()
    simulate(asm, args, grid, wg)
    np.testing.assert_array_equal(args[out_index], expected())


def test_copy_vec4_uses_16_byte_accesses():
    asm = compiled("copy_vec4").asm
    assert "global_load_dwordx4" in asm and "global_store_dwordx4" in asm
    assert "global_load_dword " not in asm


def test_loop_counter_is_an_sgpr_and_accumulator_is_chained():
    # row_sum's 32-step loop is unrolled: contiguous loads become dwordx4, no loop is left
    body = asm_body(compiled("row_sum").asm)
    assert "s_cbranch_scc1" not in body and body.count("global_load_dwordx4") == 8
    fma_or_add = re.search(r"v_add_f32 (v\d+), (v\d+), (v\d+)", body)
    assert fma_or_add and fma_or_add.group(1) in (fma_or_add.group(2), fma_or_add.group(3))
    # sgemm_regtile's k loop (32 steps of 16 FMAs) is unrolled by 4: 8 steps on an SGPR
    body = asm_body(compiled("sgemm_regtile").asm)
    assert re.search(r"s_add_u32 (s\d+), \1, 1\n\s+s_cmp_lt_i32 \1, 8\n\s+s_cbranch_scc1", body)


def asm_body(asm: str) -> str:
    return asm.split(".size")[0]


def _toolchain_or_skip(target: str):
    chain = find_toolchain(target)
    if chain is None:
        pytest.skip(f"no assembler for {target}: install llvm-19 lld-19 (gfx942) or "
                    "triton==3.6.0 (gfx942, gfx950)")
    return chain


def _notes(hsaco: bytes, tmp_path: Path) -> str:
    path = tmp_path / "k.hsaco"
    path.write_bytes(hsaco)
    return subprocess.run([READELF, "--notes", str(path)], capture_output=True, text=True,
                          check=True).stdout


def _kernel_descriptor(hsaco: bytes, tmp_path: Path, name: str) -> bytes:
    path = tmp_path / "kd.hsaco"
    path.write_bytes(hsaco)
    syms = subprocess.run([READELF, "-s", "--wide", str(path)], capture_output=True, text=True,
                          check=True).stdout
    value = next(int(ln.split()[1], 16) for ln in syms.splitlines()
                 if ln.strip().endswith(f"{name}.kd"))
    sections = subprocess.run([READELF, "-S", "--wide", str(path)], capture_output=True,
                              text=True, check=True).stdout
    for ln in sections.splitlines():
        m = re.search(r"\.rodata\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", ln)
        if m:
            addr, off = int(m.group(1), 16), int(m.group(2), 16)
            return hsaco[off + value - addr: off + value - addr + 64]
    raise AssertionError("no .rodata section")


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_assembles_links_and_metadata_matches(name, target, tmp_path):
    if target not in TARGETS_OF.get(name, (target,)):
        pytest.skip(f"{name} uses an instruction {target} does not have")
    _toolchain_or_skip(target)
    if READELF is None:
        pytest.skip("llvm-readelf not installed (apt-get install -y llvm-19)")
    kernel = compiled(name, target)
    hsaco = amdgcn.link(amdgcn.assemble(kernel.asm, target), target)
    notes = _notes(hsaco, tmp_path)
    res = kernel.resources
    assert re.search(rf"\.vgpr_count:\s+{res.vgpr_count}\b", notes)
    assert re.search(rf"\.sgpr_count:\s+{res.sgpr_count}\b", notes)
    assert re.search(rf"\.group_segment_fixed_size:\s+{res.lds_bytes}\b", notes)
    assert re.search(rf"\.max_flat_workgroup_size:\s+{res.workgroup_size}\b", notes)
    assert re.search(r"\.wavefront_size:\s+64\b", notes)
    kd = _kernel_descriptor(hsaco, tmp_path, kernel.final.name)
    rsrc1 = int.from_bytes(kd[48:52], "little")
    assert rsrc1 & 0x3F == res.vgpr_blocks  # GRANULATED_WORKITEM_VGPR_COUNT
    assert (rsrc1 >> 6) & 0xF == res.sgpr_blocks  # GRANULATED_WAVEFRONT_SGPR_COUNT
    assert int.from_bytes(kd[0:4], "little") == res.lds_bytes  # GROUP_SEGMENT_FIXED_SIZE
    # the code object is really for the asked processor (EF_AMDGPU_MACH in e_flags)
    assert int.from_bytes(hsaco[48:52], "little") & 0xFF == _MACH[target]


_MACH = {"gfx942": 0x4C, "gfx950": 0x4F}


def test_build_asm_writes_assembly_and_code_object(tmp_path):
    _toolchain_or_skip("gfx942")
    asm_path, hsaco_path = amdgcn.build_asm(kernels.copy_f32, "gfx942", tmp_path)
    assert asm_path.read_text().startswith('.amdgcn_target "amdgcn-amd-amdhsa--gfx942"')
    assert hsaco_path.read_bytes()[:4] == b"\x7fELF"


def test_emit_returns_the_assembly_text():
    text = amdgcn.emit(kernels.copy_f32, target="gfx942")
    assert ".amdhsa_kernel copy_f32_kernel" in text and "s_endpgm" in text


def test_tree_reduction_needs_its_barriers_on_the_simulator():
    """Drop the barrier inside the reduction loop: the waves (run one after another between
    barriers) then read partial sums other waves have not produced yet, and the sum is off."""
    asm = compiled("block_sum_tree").asm
    lines = asm.splitlines()
    loop_barrier = [i for i, ln in enumerate(lines) if ln.strip() == "s_barrier"][1]
    del lines[loop_barrier]
    args, grid, wg, ref, out_index = CASES["block_sum_tree"]()
    simulate("\n".join(lines), args, grid, wg)
    assert not np.allclose(args[out_index], ref(), rtol=1e-3, atol=1e-3)


def test_lds_dma_sets_m0_and_waits_vmcnt_before_the_lds_reads():
    body = asm_body(compiled("lds_dma_reverse", "gfx942").asm)
    lines = [ln.split(";")[0].strip() for ln in body.splitlines()]
    dma = next(i for i, ln in enumerate(lines) if ln.endswith(" lds"))
    assert re.match(r"buffer_load_dword v\d+, s\[\d+:\d+\], 0 offen offset:0 lds", lines[dma])
    m0 = max(i for i in range(dma) if lines[i].startswith("s_mov_b32 m0,"))
    assert "v_readfirstlane_b32" in lines[m0 - 1]  # the wave's LDS base, per wave
    first_read = next(i for i in range(dma, len(lines)) if lines[i].startswith("ds_read"))
    assert "s_waitcnt vmcnt(0)" in lines[dma + 1:first_read]
    assert "buffer_load_dwordx4" in asm_body(compiled("lds_dma_x4", "gfx950").asm)


def test_simulator_catches_an_lds_read_before_the_dma_lands():
    asm = compiled("lds_dma_reverse", "gfx942").asm
    broken = "\n".join(ln for ln in asm.splitlines() if "wait_async_ops" not in ln)
    # the waitcnt pass still drains vmcnt before s_barrier; drop that wait too
    lines = broken.splitlines()
    barrier = next(i for i, ln in enumerate(lines) if ln.strip() == "s_barrier")
    if "vmcnt" in lines[barrier - 1]:
        del lines[barrier - 1]
    # each wave reads the other wave's half: its own copy still in flight is no error there,
    # the other wave's copy has not landed either, so the read sees stale LDS
    args, grid, wg, expected, out_index = CASES["lds_dma_reverse"]()
    try:
        simulate("\n".join(lines), args, grid, wg)
    except SimulationError as err:
        assert re.search(r"s_barrier|missing s_waitcnt", str(err)), err
        return
    assert not np.array_equal(args[out_index], expected())


@pytest.mark.parametrize("example", ["amdgcn_axpy.py", "amdgcn_gemm.py"])
def test_amdgcn_examples_run(example, tmp_path, capsys, monkeypatch):
    import runpy

    _toolchain_or_skip("gfx942")
    path = Path(__file__).resolve().parents[3] / "examples" / example
    monkeypatch.setattr(sys, "argv", [str(path), "gfx942", str(tmp_path)])
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "s_endpgm" in out and "wrote" in out
    assert any(tmp_path.glob("*.hsaco"))
