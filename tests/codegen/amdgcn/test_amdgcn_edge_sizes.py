"""Every kernel of benchmarks/asm_vs_llvm.py at edge sizes on the ISA simulator, against NumPy.

Each benchmark kernel is the default instance of a size factory in kernels.py
(``make_<kernel>``); here the same kernel is built at the sizes where a backend goes wrong
first, run on the ISA simulator (which maps each buffer exactly: a lane that reads or writes
past a buffer is an error, not a silent zero) and compared with NumPy on random data:

* 1-D kernels (copy, axpy, f16/bf16/int8 elementwise, sigmoid, index div/mod, the halo
  stencil): n = 1, 63, 64, 65 and 200 (a partial last wave of 8 lanes), the workgroups
  covering n and the lanes past n guarded off. n = 0 at compile time leaves no device kernel
  (nothing to launch): emit() says so with a MalformedKernelError, checked here;
* rows kernels (row_sum, softmax, layernorm: one lane per row in one workgroup): 1, 63, 64,
  65 and 200 rows (65 and 200 end in a partial wave), and 1 or an odd number of columns;
* 2-D stencils (Laplacian, direct and through LDS): grids that are not multiples of the
  16x16 tile (partial tiles, the LDS halo staged only inside the grid) and one tile;
* register-tiled SGEMM: one lane (4x4x1), 81 lanes (36x36, a partial second wave), a
  reduction length the unroll by 4 does not divide (33), a non-square workgroup;
* MFMA GEMMs: the 16x16 tile is fixed by the instruction and the wave, so the reduction
  length varies (K = 16: one step, the bf16 kernel's peeled loop then empty; up to 256);
* LDS transpose and the tree reduction: the 16x16 tile and the 256-lane tree are fixed by
  the workgroup; the number of workgroups varies (1, 2, 5);
* the runtime-length kernels: saxpy_runtime at n = 0 with one workgroup launched anyway and
  with more workgroups than n needs (test_amdgcn_real_kernels covers n = 0 unlaunched, 1,
  63, 64, 65, 200); guarded_scale's runtime n at 0, 1, 63, 64, 65, N is in
  test_amdgcn_global.

The last tests check the coverage itself: every benchmark kernel has a random-data simulator
test, an edge-size test and an assemble-and-link test on gfx942 and gfx950.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tvm_ffi
from example_loader import REPO_ROOT, load_module
from tvm import tirx

from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.toolchain import find_toolchain
from tilewave.errors import MalformedKernelError

sys.path.insert(0, str(Path(__file__).parent))
import kernels
import test_amdgcn_e2e
import test_amdgcn_real_kernels
from isa_simulator import simulate

TARGETS = ("gfx942", "gfx950")


@dataclass
class Case:
    """One kernel variant, its arguments (PrimFunc order), launch shape and expected output."""

    func: tirx.PrimFunc
    args: list[object]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    out: np.ndarray
    expected: np.ndarray
    tol: float  # 0: bit-exact

    def run(self, target: str) -> None:
        """Compile for ``target``, simulate, compare ``out`` with ``expected``; then assemble
        and link the variant with LLVM's tools where they are installed."""
        compiled = amdgcn.compile_device_func(amdgcn.device_function(self.func, target),
                                              target)
        simulate(compiled.asm, self.args, self.grid, self.block)
        if self.tol:
            np.testing.assert_allclose(self.out, self.expected, rtol=self.tol, atol=self.tol)
        else:
            np.testing.assert_array_equal(self.out, self.expected)
        if find_toolchain(target) is not None:
            assert amdgcn.link(amdgcn.assemble(compiled.asm, target), target)[:4] == b"\x7fELF"


def _rng(*key: object) -> np.random.Generator:
    """A generator seeded by ``key`` (the same data on every run)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _lanes(n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and workgroup of the 1-D kernels: 64 lanes a workgroup, enough to cover n."""
    return (kernels.blocks_of(n), 1, 1), (64, 1, 1)


def _pointwise(factory: Callable[[int], tirx.PrimFunc], inputs: Callable[..., list[np.ndarray]],
               out_dtype: type, ref: Callable[..., np.ndarray], tol: float,
               scalars: tuple[object, ...] = (), lanes_per_item: int = 1) -> Callable[[int], Case]:
    """A case builder for a 1-D kernel ``out = ref(*inputs, *scalars)`` of length n (one
    lane per element, ``lanes_per_item`` lanes per item of n)."""
    def build(n: int) -> Case:
        ins = inputs(_rng(factory.__name__, n), n)
        out = np.zeros(ins[0].shape, out_dtype)
        grid, block = _lanes(n * lanes_per_item)
        return Case(factory(n), [*ins, out, *scalars], grid, block, out,
                    ref(*ins, *scalars), tol)
    return build


def _one_f32(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [_f32(rng, n)]


def _two_f32(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [_f32(rng, n), _f32(rng, n)]


def _two_f16(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [x.astype(np.float16) for x in _two_f32(rng, n)]


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as their 16-bit patterns."""
    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _quantize_ref(a: np.ndarray, scale: float) -> np.ndarray:
    return np.trunc(np.clip(a * np.float32(scale), -128, 127)).astype(np.int8)


def _stencil_ref(a: np.ndarray) -> np.ndarray:
    ref = np.zeros_like(a)
    ref[1:-1] = (a[:-2] + a[1:-1] + a[2:]) * np.float32(1.0 / 3.0)
    return ref


POINTWISE: dict[str, Callable[[int], Case]] = {
    "copy_f32": _pointwise(kernels.make_copy_f32, _one_f32, np.float32, lambda a: a, 0),
    "copy_vec4": _pointwise(kernels.make_copy_vec4, lambda r, n: [_f32(r, 4 * n)], np.float32,
                            lambda a: a, 0),
    "axpy_f32": _pointwise(kernels.make_axpy_f32, _two_f32, np.float32,
                           lambda a, b, alpha: a * np.float32(alpha) + b, 1e-6, (0.75,)),
    "mul_add_f32": _pointwise(kernels.make_mul_add_f32, _two_f32, np.float32,
                              lambda a, b: (a + b) * np.float32(3.0), 1e-6),
    "fma_f16": _pointwise(kernels.make_fma_f16, _two_f16, np.float16,
                          lambda a, b: a * b + np.float16(1.5), 1e-2),
    "sigmoid_f32": _pointwise(kernels.make_sigmoid_f32, lambda r, n: [_f32(r, n) * 8],
                              np.float32, lambda a: 1 / (1 + np.exp(-a)), 1e-6),
    "index_div_mod": _pointwise(kernels.make_index_div_mod, lambda r, n: [_f32(r, 3 * n)],
                                np.float32, lambda a: a.reshape(-1, 3).T.reshape(-1), 0,
                                lanes_per_item=3),
    "quantize_int8": _pointwise(kernels.make_quantize_int8, lambda r, n: [_f32(r, n) * 100],
                                np.int8, _quantize_ref, 0, (0.9,)),
    "scale_bf16": _pointwise(
        kernels.make_scale_bf16, lambda r, n: [_bf16_bits(_f32(r, n))], np.uint16,
        lambda a: _bf16_bits((_bf16_value(a).astype(np.float64) * 1.5 + 0.25)
                             .astype(np.float32)), 0),
    "stencil_1d": _pointwise(kernels.make_stencil_1d, _one_f32, np.float32, _stencil_ref, 1e-6),
}
LENGTHS = (1, 63, 64, 65, 200)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_1d_kernel_at_edge_lengths(name: str, n: int, target: str) -> None:
    if name == "stencil_1d" and n < 3:
        n = 3  # one interior point (n = 1, 2 have none: see the test below)
    POINTWISE[name](n).run(target)


EMPTY = [(name, 0) for name in sorted(POINTWISE)] + [("stencil_1d", 1), ("stencil_1d", 2)]


@pytest.mark.parametrize("name, n", EMPTY)
def test_1d_kernel_without_work_has_nothing_to_launch(name: str, n: int) -> None:
    factory = getattr(kernels, f"make_{name}")
    with pytest.raises(MalformedKernelError, match=r"no device kernel.*nothing to launch"):
        amdgcn.device_function(factory(n), "gfx942")


# -- rows: one lane per row, one workgroup of `rows` lanes ---------------------------------
def _rows_case(name: str, rows: int, cols: int) -> Case:
    rng = _rng(name, rows, cols)
    a = _f32(rng, rows, cols)
    block = (rows, 1, 1)
    if name == "row_sum":
        out = np.zeros(rows, np.float32)
        return Case(kernels.make_row_sum(rows, cols), [a, out], (1, 1, 1), block, out,
                    a.astype(np.float64).sum(axis=1), 1e-5)
    out = np.zeros_like(a)
    if name == "softmax_rows":
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return Case(kernels.make_softmax_rows(rows, cols), [a, out], (1, 1, 1), block, out,
                    e / e.sum(axis=1, keepdims=True), 1e-6)
    g = _f32(rng, cols)
    mean = a.mean(axis=1, keepdims=True)
    ref = (a - mean) / np.sqrt(((a - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g
    return Case(kernels.make_layernorm_rows(rows, cols), [a, g, out], (1, 1, 1), block, out,
                ref, 1e-5)


ROW_SHAPES = [(1, 16), (63, 16), (64, 16), (65, 16), (200, 16), (64, 1), (65, 33)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rows, cols", ROW_SHAPES)
@pytest.mark.parametrize("name", ["row_sum", "softmax_rows", "layernorm_rows"])
def test_rows_kernel_at_edge_row_counts(name: str, rows: int, cols: int, target: str) -> None:
    _rows_case(name, rows, cols).run(target)


# -- 2-D stencils -------------------------------------------------------------------------
def _laplacian_case(name: str, h: int, w: int) -> Case:
    a = _f32(_rng(name, h, w), h, w)
    out = np.zeros_like(a)
    grid = (kernels.blocks_of(w, 16), kernels.blocks_of(h, 16), 1)
    factory = getattr(kernels, f"make_{name}")
    return Case(factory(h, w), [a, out], grid, (16, 16, 1), out,
                test_amdgcn_real_kernels.laplacian_ref(a), 1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("h, w", [(3, 3), (3, 70), (16, 16), (17, 33), (33, 17), (40, 65)])
@pytest.mark.parametrize("name", ["laplacian_2d", "laplacian_2d_lds"])
def test_laplacian_on_partial_tiles(name: str, h: int, w: int, target: str) -> None:
    _laplacian_case(name, h, w).run(target)


# -- register-tiled SGEMM -----------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m, n, depth", [(4, 4, 1), (4, 4, 32), (36, 36, 36), (32, 32, 33),
                                         (8, 64, 5)])
def test_sgemm_regtile_at_edge_shapes(m: int, n: int, depth: int, target: str) -> None:
    rng = _rng("sgemm", m, n, depth)
    a, b = _f32(rng, m, depth), _f32(rng, depth, n)
    c = np.zeros((m, n), np.float32)
    Case(kernels.make_sgemm_regtile(m, n, depth), [a, b, c], (1, 1, 1), (n // 4, m // 4, 1), c,
         a.astype(np.float64) @ b, 1e-4).run(target)


# -- MFMA GEMMs: the reduction length varies --------------------------------------------
def _gemm_case(name: str, k: int) -> Case:
    rng = _rng(name, k)
    rows = kernels.MG if name == "gemm_lds_4wave" else 16
    dtype = ml_dtypes.bfloat16 if name == "gemm_bf16" else np.float16
    a, bt = (rng.standard_normal((rows, k)).astype(dtype) for _ in range(2))
    # 16-bit products are exact in float32; only the accumulation over k rounds
    ref = a.astype(np.float64) @ bt.astype(np.float64).T
    c = np.zeros((rows, rows), np.float32)
    b_arg = np.ascontiguousarray(bt.T) if name == "gemm_lds_f16" else bt  # B row-major there
    return Case(getattr(kernels, f"make_{name}")(k), [a, b_arg, c], (1, 1, 1),
                (256 if name == "gemm_lds_4wave" else 64, 1, 1), c, ref, 1e-4)


GEMM_KS = {"gemm_f16": (16, 32, 128), "gemm_bf16": (16, 32, 128),
           "gemm_lds_f16": (128, 192), "gemm_lds_4wave": (16, 32, 128, 256)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, k", [(n, k) for n, ks in GEMM_KS.items() for k in ks])
def test_mfma_gemm_at_other_reduction_lengths(name: str, k: int, target: str) -> None:
    _gemm_case(name, k).run(target)


def test_the_f16_gemm_factory_is_the_example() -> None:
    assert tvm_ffi.structural_equal(kernels.make_gemm_f16(kernels.GEMM_K), kernels.gemm_f16)


# -- fixed workgroup tiles: the number of workgroups varies ----------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tiles", [1, 2, 5])
def test_lds_transpose_over_several_tiles(tiles: int, target: str) -> None:
    a = _f32(_rng("transpose", tiles), 16, 16 * tiles)
    b = np.zeros((16 * tiles, 16), np.float32)
    Case(kernels.make_transpose_lds(tiles), [a, b], (tiles, 1, 1), (16, 16, 1), b, a.T,
         0).run(target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rows", [1, 2, 5])
def test_tree_reduction_over_several_rows(rows: int, target: str) -> None:
    a = _f32(_rng("tree", rows), rows, 256)
    b = np.zeros(rows, np.float32)
    Case(kernels.make_block_sum_tree(rows), [a, b], (rows, 1, 1), (256, 1, 1), b,
         a.astype(np.float64).sum(axis=1), 1e-5).run(target)


# -- runtime lengths --------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n, blocks", [(0, 1), (1, 3), (65, 4)])
def test_runtime_saxpy_launched_over_more_lanes_than_n(n: int, blocks: int, target: str) -> None:
    rng = _rng("saxpy", n, blocks)
    x, y = _f32(rng, n), _f32(rng, n)
    expected = (np.float64(0.5) * x + y).astype(np.float32)
    Case(kernels.saxpy_runtime, [x, y, n, 0.5], (blocks, 1, 1), (64, 1, 1), y, expected,
         1e-6).run(target)


# -- coverage of the benchmark's kernels ----------------------------------------------
BENCHMARK = load_module(REPO_ROOT / "benchmarks" / "asm_vs_llvm.py")
# guarded_scale's edge sizes: test_amdgcn_global.test_guarded_kernel_at_edge_sizes
EDGE_TESTED = {*POINTWISE, "row_sum", "softmax_rows", "layernorm_rows", "laplacian_2d",
               "laplacian_2d_lds", "sgemm_regtile", *GEMM_KS, "transpose_lds",
               "block_sum_tree", "saxpy_runtime", "guarded_scale"}


def test_every_benchmark_kernel_has_random_edge_and_link_tests() -> None:
    # random data: test_amdgcn_e2e's cases, test_amdgcn_real_kernels' and its saxpy sizes;
    # assemble and link on both targets: the same two modules' parametrised link tests
    randomised = {*test_amdgcn_e2e.CASES, *test_amdgcn_real_kernels.REAL, "saxpy_runtime"}
    benchmark = set(BENCHMARK.KERNELS)
    assert len(benchmark) >= 20
    assert benchmark <= randomised
    assert benchmark <= EDGE_TESTED
    assert not {name for name in benchmark if name in test_amdgcn_e2e.TARGETS_OF}, \
        "a benchmark kernel limited to some targets would not link on both"
