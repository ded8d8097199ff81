"""The barrier stage's output check: off by default, on by option, switch or CLI flag.

A barrier pass that places nothing (standing in for a tilewave bug) is swapped into the
pipeline; the check must catch the hazard it leaves exactly when it is asked for.
"""

from __future__ import annotations

import io

import pytest
import tvm
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave.pipeline as pipeline
from tilewave.cli import main
from tilewave.errors import DebugOptionError, PassOptionError, UnfixableHazardError
from tilewave.instruments import ENV_VERIFY_BARRIERS, verify_barriers_from_env
from tilewave.pipeline import LowerOptions, build, lower
from tilewave.transforms.hazard_invariant import checked_barrier_pass

#: an unsynchronised mirror (a RAW race), as a kernel file's text and as a PrimFunc
_MIRRORED_SOURCE = """
@T.prim_func
def mirrored(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]
"""
mirrored_read = from_source(_MIRRORED_SOURCE, extra_vars={"T": T})


@tvm.transform.module_pass(opt_level=0, name="tilewave.InsertSharedBarriers")
def _forgetful(mod, _ctx):
    return mod  # places no barrier at all


@pytest.fixture
def forgetful_pipeline(monkeypatch):
    """The pipeline with a barrier pass that leaves every hazard in place."""
    monkeypatch.setattr(pipeline, "InsertSharedBarriers", lambda target: _forgetful)


@pytest.mark.parametrize(
    ("word", "expected"),
    [(None, False), ("", False), ("0", False), ("off", False), ("1", True), ("Yes", True)],
)
def test_environment_switch(monkeypatch, word, expected):
    if word is None:
        monkeypatch.delenv(ENV_VERIFY_BARRIERS, raising=False)
    else:
        monkeypatch.setenv(ENV_VERIFY_BARRIERS, word)
    assert verify_barriers_from_env() is expected
    assert LowerOptions().verify_barriers is expected


def test_environment_switch_with_a_bad_value(monkeypatch):
    monkeypatch.setenv(ENV_VERIFY_BARRIERS, "maybe")
    with pytest.raises(DebugOptionError, match=r"TILEWAVE_VERIFY_BARRIERS='maybe' is not a switch"):
        lower(mirrored_read, "sm_90a")


def test_option_must_be_a_bool():
    with pytest.raises(PassOptionError, match=r"verify_barriers must be True or False, got 'yes'"):
        lower(mirrored_read, "sm_90a", verify_barriers="yes")


def test_the_real_pass_output_verifies_clean_when_asked():
    assert "__syncthreads" in build(mirrored_read, "sm_90a", verify_barriers=True).source


@pytest.mark.usefixtures("forgetful_pipeline")
def test_a_left_hazard_is_reported_when_asked():
    with pytest.raises(UnfixableHazardError) as info:
        lower(mirrored_read, "sm_90a", verify_barriers=True)
    message = str(info.value)
    assert message.startswith("tilewave.InsertSharedBarriers left a RAW hazard")
    assert "`B[threadIdx_x] = S[63 - threadIdx_x]`" in message


@pytest.mark.usefixtures("forgetful_pipeline")
def test_no_check_by_default(monkeypatch):
    monkeypatch.delenv(ENV_VERIFY_BARRIERS, raising=False)
    lowered = lower(mirrored_read, "sm_90a")  # the hazard goes unnoticed: nobody asked
    assert "tvm_storage_sync" not in lowered.script()


@pytest.mark.usefixtures("forgetful_pipeline")
def test_environment_switch_turns_the_check_on_and_the_option_overrides_it(monkeypatch):
    monkeypatch.setenv(ENV_VERIFY_BARRIERS, "1")
    with pytest.raises(UnfixableHazardError, match="left a RAW hazard"):
        lower(mirrored_read, "sm_90a")
    lower(mirrored_read, "sm_90a", verify_barriers=False)


@pytest.mark.usefixtures("forgetful_pipeline")
def test_cli_flag(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(ENV_VERIFY_BARRIERS, raising=False)
    path = tmp_path / "mirrored_kernel.py"
    path.write_text("from tvm.script import tirx as T\n" + _MIRRORED_SOURCE)
    argv = ["lower", str(path), "--target", "sm_90a"]
    assert main(argv, out=io.StringIO()) == 0
    status = main([*argv, "--verify-barriers"], out=io.StringIO())
    assert status == 1
    assert "left a RAW hazard" in capsys.readouterr().err


def test_checked_pass_without_output_check_returns_the_inner_result():
    mod = tvm.IRModule({"k": mirrored_read})
    assert checked_barrier_pass(_forgetful, verify_output=False)(mod).same_as(mod)
