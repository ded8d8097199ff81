"""Register pressure of per-thread tiles: unrolled accesses share one lane address (the
4 KiB windows of the constant offset go to soffset), and a kernel that still needs more
than 256 VGPRs is a RegisterAllocationError naming the kernel and its pressure."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn
from tilewave.errors import RegisterAllocationError

sys.path.insert(0, str(Path(__file__).parent))
from isa_simulator import simulate


def tile_kernel(n: int):
    @T.prim_func
    def tile(A: T.Buffer((64 * n,), "float32"), B: T.Buffer((64 * n,), "float32")):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            acc = T.alloc_buffer((n,), "float32", scope="local")
            for i in T.unroll(n):
                acc[i] = A[i * 64 + tx]
            for i in T.unroll(n):
                B[i * 64 + tx] = acc[(i * 7) % n] * T.float32(2)

    return tile.with_attr("global_symbol", f"tile_{n}")


@pytest.mark.parametrize("n", [128, 240])
def test_a_per_thread_tile_needs_about_one_vgpr_per_element(n):
    compiled = amdgcn.compile_device_func(amdgcn.device_function(tile_kernel(n), "gfx942"),
                                          "gfx942")
    vgprs = int(re.search(r"amdhsa_next_free_vgpr (\d+)", compiled.asm).group(1))
    assert vgprs <= n + 2  # the tile, tx and its byte offset (was 241 for n = 128)
    a = np.arange(64 * n, dtype=np.float32)
    b = np.zeros_like(a)
    simulate(compiled.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, (a.reshape(n, 64)[(np.arange(n) * 7) % n] * 2).ravel())


@T.prim_func
def two_tiles(A: T.Buffer((64 * 400,), "float32"), B: T.Buffer((64 * 200,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        x = T.alloc_buffer((200,), "float32", scope="local")
        y = T.alloc_buffer((200,), "float32", scope="local")
        for i in T.unroll(200):
            x[i] = A[i * 64 + tx]
            y[i] = A[(i + 200) * 64 + tx]
        for i in T.unroll(200):
            B[i * 64 + tx] = x[199 - i] + y[i]


def test_more_than_256_live_vgprs_is_a_clear_error():
    with pytest.raises(RegisterAllocationError,
                       match=r"kernel 'two_tiles_kernel': out of VGPRs — \d+ VGPRs live at the "
                             r"peak .* the limit is 256.*does not spill"):
        amdgcn.compile_device_func(amdgcn.device_function(two_tiles, "gfx942"), "gfx942")
