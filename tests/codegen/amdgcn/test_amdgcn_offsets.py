"""Signed offsets: halo accesses (``A[bx * 64 + tx - 1]``) whose per-lane part is negative
for some lanes must still read and write the right element.

``global_*`` zero-extends the 32-bit ``vaddr`` and adds a signed 13-bit immediate; MUBUF (kept
for buffers a ``Select`` arm loads) adds ``vaddr``, ``soffset`` and the offset field as
unsigned 32-bit numbers and checks the sum against ``num_records``. Either way a per-lane
part of ``-4`` (``0xFFFFFFFC``) would address the wrong place, so only provably
non-negative parts are split off a constant. Each kernel runs on the ISA simulator against
NumPy, on sizes whose first and last elements sit at the block and buffer boundaries.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate

rng = np.random.default_rng(77)


def run(func, args, grid, block, target="gfx942"):
    compiled = amdgcn.compile_device_func(amdgcn.device_function(func, target), target)
    simulate(compiled.asm, args, grid, block)
    return compiled.asm


def stencil_1d(n: int, shift: int):
    """``B[i] = A[i - shift] + A[i] + A[i + shift]`` for the interior points."""
    blocks = (n + 63) // 64

    @T.prim_func
    def kernel(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx * 64 + tx >= shift and bx * 64 + tx < n - shift:
                    B[bx * 64 + tx] = (A[bx * 64 + tx - shift] + A[bx * 64 + tx]
                                       + A[bx * 64 + tx + shift])

    return kernel.with_attr("global_symbol", f"stencil_1d_{n}_{shift}"), blocks


@pytest.mark.parametrize("n, shift", [(300, 1), (65, 1), (64, 1), (256, 64), (200, 65)])
def test_1d_three_point_stencil_with_negative_halo_offsets(n, shift):
    func, blocks = stencil_1d(n, shift)
    a = rng.standard_normal(n).astype(np.float32)
    b = np.zeros(n, np.float32)
    run(func, [a, b], (blocks, 1, 1), (64, 1, 1))
    ref = np.zeros(n, np.float32)
    ref[shift:n - shift] = a[:n - 2 * shift] + a[shift:n - shift] + a[2 * shift:]
    np.testing.assert_allclose(b, ref, rtol=1e-6, atol=1e-6)


H, W = kernels.LAP_H, kernels.LAP_W  # 2 x 3 tiles of 16 x 16


def _laplacian_ref(a: np.ndarray) -> np.ndarray:
    ref = np.zeros_like(a)
    ref[1:-1, 1:-1] = (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
                       - np.float32(4) * a[1:-1, 1:-1])
    return ref


def test_2d_five_point_laplacian_reads_the_row_above_each_tile():
    # A[y - 1, x] of the first row of a tile: the per-lane part ty * W - W is negative
    a = rng.standard_normal((H, W)).astype(np.float32)
    b = np.zeros((H, W), np.float32)
    run(kernels.laplacian_2d, [a, b], (W // 16, H // 16, 1), (16, 16, 1))
    np.testing.assert_allclose(b, _laplacian_ref(a), rtol=1e-5, atol=1e-5)


def test_2d_halo_staged_through_lds():
    a = rng.standard_normal((H, W)).astype(np.float32)
    b = np.zeros((H, W), np.float32)
    run(kernels.laplacian_2d_lds, [a, b], (W // 16, H // 16, 1), (16, 16, 1))
    np.testing.assert_allclose(b, _laplacian_ref(a), rtol=1e-5, atol=1e-5)


@T.prim_func
def gather_signed(A: T.Buffer((256,), "float32"), Idx: T.Buffer((256,), "int32"),
                  B: T.Buffer((256,), "float32")):
    # the per-lane part (a loaded index) is negative for some lanes, the whole index is not
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            B[bx * 64 + tx] = A[bx * 64 + Idx[bx * 64 + tx] + 3]


def test_gather_with_a_negative_loaded_index():
    a = rng.standard_normal(256).astype(np.float32)
    idx = np.tile(np.arange(-3, 61, dtype=np.int32), 4)  # bx*64 + idx + 3 covers the block
    b = np.zeros(256, np.float32)
    run(gather_signed, [a, idx, b], (4, 1, 1), (64, 1, 1))
    expected = a[np.repeat(np.arange(4), 64) * 64 + idx + 3]
    np.testing.assert_array_equal(b, expected)


@T.prim_func
def lds_signed(A: T.Buffer((64,), "float32"), Idx: T.Buffer((64,), "int32"),
               B: T.Buffer((64,), "float32")):
    # LDS: the ds_* offset field is unsigned too; S[Idx[tx] + 5] with Idx[tx] >= -5
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((80,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[Idx[tx] + 5]


def test_lds_read_with_a_negative_register_part():
    a = rng.standard_normal(64).astype(np.float32)
    idx = (np.arange(64, dtype=np.int32) * 7) % 64 - 5
    b = np.zeros(64, np.float32)
    run(lds_signed, [a, idx, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a[idx + 5])


@T.prim_func
def shifted_rows_loop(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
    # loop counter in soffset, the per-lane part tx - 1 negative at tx = 0
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for r in range(4):
            if tx >= 1:
                B[r, tx] = A[r, tx - 1]


def test_loop_row_offset_with_negative_lane_offset():
    a = rng.standard_normal((4, 64)).astype(np.float32)
    b = np.zeros((4, 64), np.float32)
    run(shifted_rows_loop, [a, b], (1, 1, 1), (64, 1, 1))
    ref = np.zeros_like(a)
    ref[:, 1:] = a[:, :-1]
    np.testing.assert_array_equal(b, ref)


def test_halo_loads_share_one_lane_address_with_signed_immediates():
    # global_* adds a signed 13-bit immediate to the zero-extended vaddr: A[bx*64 + tx + d]
    # for d = -1, 0, 1 is one non-negative vaddr (bx*64 + tx)*4 and offsets -4, 0, 4, which
    # merge_loads makes one dwordx3 at offset -4
    func, _ = stencil_1d(256, 1)
    compiled = amdgcn.compile_device_func(amdgcn.device_function(func, "gfx942"), "gfx942")
    loads = [ln.split(";")[0].strip() for ln in compiled.asm.splitlines()
             if ln.strip().startswith("global_load_")]
    assert len(loads) == 1 and loads[0].startswith("global_load_dwordx3 "), loads
    assert loads[0].endswith("offset:-4")


@T.prim_func
def gather_minus_five(A: T.Buffer((64,), "float32"), Idx: T.Buffer((64,), "int32"),
                      B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[Idx[tx] + 5]  # Idx[tx] may be negative: 5 must not go to the offset field


def test_a_possibly_negative_lane_part_keeps_its_constant_in_vaddr():
    a = rng.standard_normal(64).astype(np.float32)
    idx = (np.arange(64, dtype=np.int32) * 5) % 64 - 5
    b = np.zeros(64, np.float32)
    asm = run(gather_minus_five, [a, idx, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a[idx + 5])
    gather = [ln for ln in asm.splitlines() if ln.strip().startswith("global_load") and "; A" in ln]
    assert len(gather) == 1 and "offset:" not in gather[0], gather
