"""The `tilewave` command's output hygiene: no TVM device-probe warnings, no tracebacks for
user mistakes (unless --traceback), documented exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tilewave.cli import EXIT_INTERNAL_ERROR, EXIT_OK, EXIT_USAGE, EXIT_USER_ERROR, main
from tilewave.tvm_log import quiet_device_probe_warnings


def _tilewave(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tilewave.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_demo_prints_no_tvm_warnings_for_rocm_targets():
    run = _tilewave("demo", "--target", "gfx942", "--target", "gfx1200", "--kernel", "block_sum")
    assert run.returncode == EXIT_OK, run.stderr
    assert run.stderr == ""
    assert "Warning" not in run.stdout
    assert run.stdout.splitlines()[0].startswith("tilewave demo:")
    assert any(line.startswith("gfx942 ") for line in run.stdout.splitlines())


def test_probe_filter_drops_only_the_rocm_probe_lines(capfd):
    with quiet_device_probe_warnings():
        os.write(2, b"[07:20:09] target_kind.cc:96: Warning: Unable to detect ROCm version, "
                 b"assuming >= 3.5\n")  # fmt: skip
        os.write(2, b"[07:20:09] codegen_amdgpu.cc:78: Warning: Cannot get maximum number of "
                 b"threads for AMD codegen\n")  # fmt: skip
        os.write(2, b"[07:20:09] other.cc:1: Warning: something else\n")
        sys.stderr.write("python line\n")
    captured = capfd.readouterr()
    assert "ROCm" not in captured.err and "maximum number" not in captured.err
    assert "Warning: something else" in captured.err
    assert "python line" in captured.err


def test_user_mistake_prints_one_message_and_no_traceback():
    run = _tilewave("lower", "no_such_kernel.py", "--target", "sm_90a")
    assert run.returncode == EXIT_USER_ERROR
    assert run.stderr == (
        "tilewave: error: kernel file 'no_such_kernel.py' does not exist or is not a file.\n"
    )


@pytest.mark.parametrize("position", ["before", "after"])
def test_traceback_flag_shows_the_traceback(position):
    argv = ["lower", "no_such_kernel.py", "--target", "sm_90a"]
    argv = ["--traceback", *argv] if position == "before" else [*argv, "--traceback"]
    run = _tilewave(*argv)
    assert run.returncode == EXIT_USER_ERROR
    assert run.stderr.startswith("Traceback (most recent call last):")
    assert "KernelSourceError" in run.stderr
    assert run.stderr.endswith("does not exist or is not a file.\n")


def test_bad_command_line_is_usage_status():
    run = _tilewave("lower", "k.py")  # --target missing
    assert run.returncode == EXIT_USAGE
    assert "--target" in run.stderr


def test_internal_error_is_reported_as_a_bug_with_status_3(monkeypatch, capsys):
    import tilewave.cli as cli

    def broken(args, out):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "_cmd_targets", broken)
    assert main(["targets"]) == EXIT_INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "internal error (a bug in tilewave or TVM, not in your input)" in err
    assert "ZeroDivisionError: division by zero" in err
    assert "Traceback" not in err
