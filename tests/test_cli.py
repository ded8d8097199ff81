"""The `tilewave` command: demo, targets, lower (diff, source, passes, debug flags), errors."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import pytest
from cli_kernels import REVERSE_KERNEL

from tilewave.cli import main
from tilewave.targets import TARGETS

KERNEL = REVERSE_KERNEL

NOT_A_GPU_KERNEL = textwrap.dedent(
    """
    from tvm.script import tirx as T

    @T.prim_func
    def serial(A: T.Buffer((64,), "float32")):
        T.func_attr({"global_symbol": "serial"})
        for i in range(64):
            A[i] = T.float32(0)
    """
)


def run(*argv):
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "reverse_kernel.py"
    path.write_text(KERNEL)
    return path


def test_targets_table_lists_every_target():
    status, text = run("targets")
    assert status == 0
    assert text.splitlines()[0].split()[:3] == ["target", "kind", "wave"]
    for name in TARGETS:
        assert any(line.startswith(name + " ") for line in text.splitlines())


def test_demo_lowers_real_kernels_for_cuda_and_rocm():
    status, text = run("demo", "--target", "sm_90a", "--target", "gfx942", "--target", "gfx1200")
    assert status == 0
    rows = [line.split() for line in text.splitlines() if line.startswith(("sm_90a ", "gfx"))]
    assert {(r[0], r[1]) for r in rows} == {
        (t, k) for t in ("sm_90a", "gfx942", "gfx1200") for k in ("tiled_transpose", "block_sum")
    }
    assert "== block_sum for sm_90a: CUDA C" in text
    assert "__syncthreads();" in text and "block_sum_kernel(" in text
    assert "== block_sum for gfx942: AMDGCN assembly" in text
    assert "\ts_barrier\n" in text and "s_endpgm" in text
    # block_sum is written without barriers: these are the ones InsertSharedBarriers placed
    # (one before each of the 8 reduction levels, unrolled by LLVM; none after the last).
    assert "8 s_barrier_signal, 8 s_barrier_wait" in text
    assert "8 s_barrier " in text


def test_lower_prints_a_diff_by_default(kernel_file):
    status, text = run("lower", str(kernel_file), "--target", "sm_90a")
    assert status == 0
    assert text.startswith(f"--- {kernel_file} (input)\n+++ device IR for sm_90a")
    assert "-            T.tilewave.lds_barrier()" in text
    assert "+" in text and 'T.tvm_storage_sync("shared"' in text


def test_lower_emits_source(kernel_file):
    status, text = run("lower", str(kernel_file), "--target", "gfx942", "--emit", "source")
    assert status == 0
    assert "reverse_kernel:" in text and "\ts_barrier\n" in text
    assert not text.startswith("---")


def test_list_passes(kernel_file):
    status, text = run("lower", "--list-passes", "--target", "gfx1200")
    assert status == 0
    assert "tilewave  tilewave.LowerTilewaveOps" in text
    assert "s_tir.ThreadSync.shared" not in text


def test_dump_ir_and_timing_flags(kernel_file, tmp_path, capsys):
    dumps = tmp_path / "dumps"
    status, _ = run(
        "lower", str(kernel_file), "--target", "sm_90a", "--dump-ir", str(dumps), "--timing"
    )
    assert status == 0
    assert (dumps / "00-input.py").is_file()
    assert any(p.name.endswith("-tilewave.LowerTilewaveOps.py") for p in dumps.iterdir())
    assert "# tilewave pass timings" in capsys.readouterr().err


def test_override_flag(kernel_file, tmp_path):
    dumps, override = tmp_path / "dumps", tmp_path / "override"
    override.mkdir()
    run("lower", str(kernel_file), "--target", "sm_90a", "--dump-ir", str(dumps))
    stage = next(dumps.glob("*-tilewave.LowerTilewaveOps.py"))
    edited = stage.read_text().replace(
        "S[63 - threadIdx_x]", "S[63 - threadIdx_x] * T.float32(0.25)"
    )
    assert edited != stage.read_text()
    (override / stage.name).write_text(edited)
    status, text = run(
        "lower",
        str(kernel_file),
        "--target",
        "sm_90a",
        "--override",
        str(override),
        "--emit",
        "source",
    )
    assert status == 0
    assert "0x1p-2f" in text


# ---------------------------------------------------------------- errors


def test_file_without_prim_func(tmp_path, capsys):
    path = tmp_path / "empty_kernel.py"
    path.write_text("x = 1\n")
    status, _ = run("lower", str(path), "--target", "sm_90a")
    assert status == 1
    assert "defines no @T.prim_func or IRModule" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    status, _ = run("lower", str(tmp_path / "nope.py"), "--target", "sm_90a")
    assert status == 1
    assert "does not exist" in capsys.readouterr().err


def test_file_that_fails_to_run(tmp_path, capsys):
    path = tmp_path / "broken_kernel.py"
    path.write_text("raise ValueError('bad kernel file')\n")
    status, _ = run("lower", str(path), "--target", "sm_90a")
    assert status == 1
    assert "failed to run: ValueError: bad kernel file" in capsys.readouterr().err


def test_unknown_target(kernel_file, capsys):
    status, _ = run("lower", str(kernel_file), "--target", "sm_1000")
    assert status == 1
    assert "unknown target 'sm_1000'" in capsys.readouterr().err


def test_not_a_gpu_kernel(tmp_path, capsys):
    path = tmp_path / "serial_kernel.py"
    path.write_text(NOT_A_GPU_KERNEL)
    status, _ = run("lower", str(path), "--target", "gfx942")
    assert status == 1
    assert "in function 'serial' is not a GPU kernel" in capsys.readouterr().err


def test_unreadable_override_file(kernel_file, tmp_path, capsys):
    (tmp_path / "01-tirx.BindTarget.py").write_bytes(b"\xff\xfe not utf-8")
    status, _ = run("lower", str(kernel_file), "--target", "sm_90a", "--override", str(tmp_path))
    assert status == 1
    assert "cannot read the override file" in capsys.readouterr().err


def test_unknown_func_name(kernel_file, capsys):
    status, _ = run("lower", str(kernel_file), "--target", "sm_90a", "--func", "other")
    assert status == 1
    assert "has no @T.prim_func or IRModule named 'other'" in capsys.readouterr().err


def test_module_entry_point_runs():
    done = subprocess.run(
        [sys.executable, "-m", "tilewave.cli", "targets"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "gfx1200" in done.stdout
