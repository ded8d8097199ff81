"""Debugging instruments: IR dumps, per-pass timings, stage overrides, and their env switches."""

from __future__ import annotations

import io
import re

import pytest
import tvm

from tilewave.errors import DebugOptionError
from tilewave.examples_builtin import block_sum
from tilewave.instruments import (
    DumpIR,
    OverrideIR,
    PassTimings,
    instruments_from_env,
    stage_file_name,
)
from tilewave.pipeline import build, lower, stages_for

_ENV = ("TILEWAVE_DUMP_IR", "TILEWAVE_DUMP_DIR", "TILEWAVE_TIMING", "TILEWAVE_OVERRIDE_DIR")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


def test_dump_writes_input_and_one_file_per_stage(tmp_path):
    lower(block_sum, "gfx942", instruments=[DumpIR(tmp_path)])
    files = sorted(p.name for p in tmp_path.iterdir())
    expected = ["00-input.py"] + [
        stage_file_name(i, s.name.removesuffix(".warp"))
        for i, s in enumerate(stages_for("gfx942"), 1)
    ]
    assert files == sorted(expected)
    # Passes run inside a pass (SplitHostDevice runs ConvertSSA) are not stages.
    assert not any("ConvertSSA" in name for name in files)
    lowered_ops = next(tmp_path.glob("*-tilewave.LowerTilewaveOps.py")).read_text()
    assert "llvm.amdgcn.s.barrier" in lowered_ops
    # block_sum is written without barriers; the InsertSharedBarriers stage adds them.
    before = (tmp_path / "00-input.py").read_text()
    assert "T.tilewave.lds_barrier()" not in before
    synced = next(tmp_path.glob("*-tilewave.InsertSharedBarriers.py")).read_text()
    assert "T.tilewave.lds_barrier()" in synced


def test_build_dumps_device_finalisation_too(tmp_path):
    build(block_sum, "sm_90a", instruments=[DumpIR(tmp_path)])
    assert (tmp_path / stage_file_name(len(stages_for("sm_90a")) + 3, "tirx.LowerIntrin")).is_file()


def test_dump_to_a_stream_has_a_header_per_stage():
    stream = io.StringIO()
    lower(block_sum, "sm_90a", instruments=[DumpIR(stream=stream)])
    headers = re.findall(r"^# ===== tilewave IR dump: (\S+)", stream.getvalue(), re.MULTILINE)
    assert headers[0] == "00-input.py"
    assert len(headers) == len(stages_for("sm_90a")) + 1


def test_dump_filter_keeps_only_matching_functions():
    stream = io.StringIO()
    lower(block_sum, "sm_90a", instruments=[DumpIR(stream=stream, func_filter="other_kernel")])
    assert stream.getvalue() == ""


def test_timings_table_has_every_stage_and_a_total():
    stream = io.StringIO()
    timings = PassTimings(stream=stream)
    lower(block_sum, "gfx1200", instruments=[timings])
    assert len(timings.rows) == len(stages_for("gfx1200"))
    table = stream.getvalue()
    assert table.startswith("# tilewave pass timings")
    assert re.search(r"^\d\d-tilewave\.LowerTilewaveOps\s+\d+\.\d{3}\s+\d+\.\d%$", table, re.M)
    assert re.search(r"^total\s+\d+\.\d{3}\s+100\.0%$", table, re.M)


def test_override_replaces_a_stage_and_reaches_the_generated_source(tmp_path):
    dump, override = tmp_path / "dump", tmp_path / "override"
    override.mkdir()
    build(block_sum, "sm_90a", instruments=[DumpIR(dump)])
    stage = next(dump.glob("*-tilewave.LowerTilewaveOps.py"))
    text = stage.read_text()
    edited = re.sub(r"(B_1\[blockIdx_x\] = partial\[0\])", r"\1 * T.float32(0.25)", text)
    assert edited != text
    (override / stage.name).write_text(edited)

    plain = build(block_sum, "sm_90a").source
    overrider = OverrideIR(override)
    result = build(block_sum, "sm_90a", instruments=[overrider])
    assert overrider.applied == [stage.name]
    assert "partial_ptr[0] * 0x1p-2f" in result.source  # 0.25 as a hex float
    assert "0x1p-2f" not in plain


def test_override_dir_from_env_is_used_by_lower(tmp_path, monkeypatch):
    dump, override = tmp_path / "dump", tmp_path / "override"
    override.mkdir()
    lower(block_sum, "gfx942", instruments=[DumpIR(dump)])
    stage = next(dump.glob("*-tilewave.LowerTilewaveOps.py"))
    text = stage.read_text()
    edited = re.sub(r"(B_1\[blockIdx_x\] = partial\[0\])", r"\1 * T.float32(0.25)", text)
    (override / stage.name).write_text(edited)
    monkeypatch.setenv("TILEWAVE_OVERRIDE_DIR", str(override))
    [instrument] = instruments_from_env()
    assert isinstance(instrument, OverrideIR)
    assert "T.float32(0.25)" in lower(block_sum, "gfx942").script()


def test_garbage_override_file_is_a_clear_error(tmp_path):
    name = stage_file_name(1, "tirx.BindTarget")
    (tmp_path / name).write_text("this is not TVMScript(\n")
    with pytest.raises(DebugOptionError, match=rf"{re.escape(name)}' is not a valid TVMScript"):
        lower(block_sum, "sm_90a", instruments=[OverrideIR(tmp_path)])


def test_unreadable_override_file_is_a_clear_error(tmp_path):
    name = stage_file_name(1, "tirx.BindTarget")
    (tmp_path / name).write_bytes(b"\xff\xfe\x00not utf-8")
    with pytest.raises(DebugOptionError, match=r"cannot read the override file .*01-tirx"):
        lower(block_sum, "sm_90a", instruments=[OverrideIR(tmp_path)])


def test_missing_override_dir_is_a_clear_error(tmp_path):
    with pytest.raises(DebugOptionError, match=r"override directory .*missing.* does not exist"):
        OverrideIR(tmp_path / "missing")


def test_unwritable_dump_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(DebugOptionError, match=r"cannot create the dump directory"):
        DumpIR(blocker / "dumps")


def test_env_switches(monkeypatch, tmp_path):
    assert instruments_from_env() == []
    monkeypatch.setenv("TILEWAVE_DUMP_IR", "1")
    monkeypatch.setenv("TILEWAVE_TIMING", "1")
    dump, timing = instruments_from_env()
    assert isinstance(dump, DumpIR) and dump.directory is None and dump.func_filter is None
    assert isinstance(timing, PassTimings)
    monkeypatch.setenv("TILEWAVE_DUMP_IR", "block_sum")
    monkeypatch.setenv("TILEWAVE_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("TILEWAVE_TIMING", "0")
    [dump] = instruments_from_env()
    assert dump.directory == tmp_path and dump.func_filter == "block_sum"


def test_env_dump_dir_is_honoured_by_lower(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEWAVE_DUMP_DIR", str(tmp_path))
    lower(block_sum, "sm_90a")
    assert (tmp_path / "00-input.py").is_file()
    assert len(list(tmp_path.iterdir())) == len(stages_for("sm_90a")) + 1


def test_instruments_work_in_a_users_own_sequential(tmp_path):
    from tilewave.codegen.lower_ops import LowerTilewaveOps

    mod = tvm.IRModule({"block_sum": block_sum})
    seq = tvm.transform.Sequential([LowerTilewaveOps("gfx942")])
    with tvm.transform.PassContext(instruments=[DumpIR(tmp_path)]):
        seq(mod)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00-input.py",
        "01-tilewave.LowerTilewaveOps.py",
    ]
