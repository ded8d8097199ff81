"""`tilewave build`: TVM's device source (llvm backend) or tilewave's own AMDGCN assembly and
code object (asm backend) written to --out, and every error."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_kernels import REVERSE_KERNEL

from tilewave.cli import main
from tilewave.codegen.amdgcn.toolchain import find_toolchain

KERNEL = REVERSE_KERNEL


@pytest.fixture
def kernel_file(tmp_path: Path) -> Path:
    path = tmp_path / "reverse.py"
    path.write_text(KERNEL)
    return path


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out=out), out.getvalue()


def test_llvm_backend_writes_cuda_source(kernel_file, tmp_path):
    code, text = run(["build", str(kernel_file), "--target", "sm_90a", "--out",
                      str(tmp_path / "out")])
    assert code == 0
    source = (tmp_path / "out" / "reverse.cu").read_text()
    assert 'extern "C" __global__' in source and "__syncthreads()" in source
    assert f"wrote {tmp_path / 'out' / 'reverse.cu'}" in text


def test_llvm_backend_writes_amdgcn_assembly_from_tvm(kernel_file, tmp_path):
    code, _ = run(["build", str(kernel_file), "--target", "gfx942", "--backend", "llvm",
                   "--out", str(tmp_path)])
    assert code == 0
    source = (tmp_path / "reverse.s").read_text()
    assert re.search(r"^\s+s_barrier\b", source, re.MULTILINE)
    assert ".amdhsa_kernel" in source


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_asm_backend_writes_assembly_and_code_object(kernel_file, tmp_path, target):
    if find_toolchain(target) is None:
        pytest.skip(f"no assembler for {target}: install llvm-19 lld-19 or triton==3.6.0")
    code, text = run(["build", str(kernel_file), "--target", target, "--backend", "asm",
                      "--out", str(tmp_path / "asm")])
    assert code == 0
    # named after the device kernel tilewave.lower produces (<func>_kernel)
    asm = (tmp_path / "asm" / "reverse_kernel.s").read_text()
    hsaco = (tmp_path / "asm" / "reverse_kernel.hsaco").read_bytes()
    assert asm.startswith(f'.amdgcn_target "amdgcn-amd-amdhsa--{target}"')
    assert "s_barrier" in asm and "ds_write_b32" in asm
    assert hsaco[:4] == b"\x7fELF"
    assert "reverse_kernel.hsaco" in text
    readelf = shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")
    if readelf:
        notes = subprocess.run(
            [readelf, "--notes", str(tmp_path / "asm" / "reverse_kernel.hsaco")],
            capture_output=True, text=True, check=True).stdout
        assert re.search(r"\.name:\s+reverse_kernel\b", notes)


def test_asm_backend_refuses_a_non_cdna_target(kernel_file, tmp_path, capsys):
    code, _ = run(["build", str(kernel_file), "--target", "sm_90a", "--backend", "asm",
                   "--out", str(tmp_path)])
    assert code == 1
    assert re.search(r"tilewave: error: .*sm_90a is not a CDNA3 target", capsys.readouterr().err)
    assert not any(tmp_path.glob("*.s"))


def test_missing_file_and_unknown_target_are_errors(tmp_path, kernel_file, capsys):
    code, _ = run(["build", str(tmp_path / "nope.py"), "--target", "gfx942", "--out",
                   str(tmp_path)])
    assert code == 1
    assert "does not exist" in capsys.readouterr().err
    code, _ = run(["build", str(kernel_file), "--target", "gfx9000", "--out", str(tmp_path)])
    assert code == 1
    assert "gfx9000" in capsys.readouterr().err


def test_out_is_required_and_backend_is_checked(kernel_file):
    for argv in (["build", str(kernel_file), "--target", "gfx942"],
                 ["build", str(kernel_file), "--target", "gfx942", "--out", "x",
                  "--backend", "ptx"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2


def test_console_entry_point_runs_build(kernel_file, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tilewave.cli", "build", str(kernel_file),
                           "--target", "sm_90a", "--out", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "reverse.cu").exists()
