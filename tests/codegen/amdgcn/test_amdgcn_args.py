"""Kernel arguments: the code object takes them in the PrimFunc's order (TVM's device
split would put pointers first, then sort by name)."""

import re
import sys
from pathlib import Path

import numpy as np
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn

sys.path.insert(0, str(Path(__file__).parent))
from isa_simulator import simulate


@T.prim_func
def scaled_offset_copy(n: T.int32, Z: T.Buffer((128,), "float32"), alpha: T.float32,
                       A: T.Buffer((128,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:
                A[bx * 64 + tx] = Z[bx * 64 + tx] * alpha


def test_arguments_follow_the_primfunc_order():
    compiled = amdgcn.compile_device_func(
        amdgcn.device_function(scaled_offset_copy, "gfx942"), "gfx942")
    assert compiled.arguments == ["n", "Z_ptr", "alpha", "A_ptr"]
    # the metadata's argument list (what a runtime reads) has the same order and offsets
    # (`n` is YAML's "no": the metadata spells it n_arg)
    names = re.findall(r"- \.name:\s+(\w+)", compiled.asm.split(".args:")[1])
    offsets = [int(x) for x in re.findall(r"\.offset:\s+(\d+)", compiled.asm)]
    assert names == ["n_arg", "Z_ptr", "alpha", "A_ptr"], names
    assert offsets == [0, 8, 16, 24]
    z = np.arange(128, dtype=np.float32)
    a = np.zeros(128, np.float32)
    simulate(compiled.asm, [100, z, 0.5, a], (2, 1, 1), (64, 1, 1))  # the PrimFunc's order
    expected = np.where(np.arange(128) < 100, z * 0.5, 0).astype(np.float32)
    np.testing.assert_array_equal(a, expected)
