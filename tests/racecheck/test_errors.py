"""racecheck's bad inputs: each raises a TilewaveError naming what, where and the fix."""

import sys
from pathlib import Path

import pytest
import tvm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import racecheck_kernels as k

from tilewave.errors import MalformedKernelError, PassOptionError, UnclassifiedOpError
from tilewave.racecheck import racecheck


def test_unknown_schedule():
    with pytest.raises(PassOptionError, match=r"unknown schedule 'bogus'; use 'lockstep'"):
        racecheck(k.in_bounds_ok, "sm_90a", schedules=["bogus"])


def test_no_thread_axis():
    with pytest.raises(MalformedKernelError, match=r"in function 'no_threads' binds no "
                       r"threadIdx axis.*T.thread_binding"):
        racecheck(k.no_threads, "sm_90a")


def test_scalar_parameter_needs_a_value():
    with pytest.raises(MalformedKernelError, match=r"variable 'n' has no value in function "
                       r"'scalar_param'; pass it in args="):
        racecheck(k.scalar_param, "sm_90a")
    assert racecheck(k.scalar_param, "sm_90a", args={"n": 2}).ok


def test_opaque_call_on_shared_memory():
    with pytest.raises(UnclassifiedOpError, match=r"no execution rule for op 'fill_tile' in "
                       r"function 'opaque_shared_call' at `T.call_extern"):
        racecheck(k.opaque_shared_call, "sm_90a")


def test_tma_load_needs_its_box_size():
    with pytest.raises(MalformedKernelError, match=r"TMA load in function 'tma_tensor_load'.*"
                       r"tensor_map_bytes=\{'<tensor-map parameter>': box_bytes\}"):
        racecheck(k.tma_tensor_load, "sm_90a")
    report = racecheck(k.tma_tensor_load, "sm_90a", tensor_map_bytes={"A_map": 8192})
    assert report.ok, report.format()
    short = racecheck(k.tma_tensor_load, "sm_90a", tensor_map_bytes={"A_map": 4096})
    assert "deadlock" in short.kinds()  # the phase expects 8192 bytes and gets 4096


def test_bad_block_count_and_inputs():
    with pytest.raises(PassOptionError, match=r"blocks=0; run at least one block"):
        racecheck(k.in_bounds_ok, "sm_90a", blocks=0)
    with pytest.raises(PassOptionError, match=r"expected a tvm.tirx.PrimFunc or tvm.IRModule, "
                       r"got str"):
        racecheck("kernel.py", "sm_90a")
    mod = tvm.IRModule({"a": k.in_bounds_ok, "b": k.split_ok})
    with pytest.raises(PassOptionError, match=r"PrimFuncs \['a', 'b'\]; pass func_name="):
        racecheck(mod, "sm_90a")
    assert racecheck(mod, "sm_90a", func_name="b").ok
