"""The benchmark's real-program kernels (kernels.py, issue 13) on the ISA simulator against
NumPy: halo stencils, rows (softmax, layernorm), runtime-length saxpy at edge sizes, a
register-tiled SGEMM, a 4-wave LDS MFMA GEMM, index math, int8 and bfloat16."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate

from tilewave.codegen import amdgcn

rng = np.random.default_rng(13)
N = kernels.N


def compiled(name, target="gfx942"):
    func = getattr(kernels, name)
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target)


def link_or_skip(asm, target):
    """Assemble and link ``asm`` with LLVM's tools for ``target`` (skip when absent); the
    code object's bytes."""
    from tilewave.codegen.amdgcn.toolchain import find_toolchain

    if find_toolchain(target) is None:
        pytest.skip(f"no assembler for {target}: install llvm-19 lld-19 or triton==3.6.0")
    code_object = amdgcn.link(amdgcn.assemble(asm, target), target)
    assert code_object[:4] == b"\x7fELF"
    return code_object


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def laplacian_ref(a):
    """The 5-point Laplacian of ``a``'s interior (0 on the border)."""
    ref = np.zeros_like(a)
    ref[1:-1, 1:-1] = (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
                       - np.float32(4) * a[1:-1, 1:-1])
    return ref


def case(name):
    """(arguments, grid, workgroup, check(args)) of one benchmark kernel."""
    if name == "stencil_1d":
        n = kernels.STENCIL_N
        a, b = f32(n), np.zeros(n, np.float32)
        ref = np.zeros(n, np.float32)
        ref[1:-1] = (a[:-2] + a[1:-1] + a[2:]) * np.float32(1.0 / 3.0)
        return [a, b], (n // 64, 1, 1), (64, 1, 1), lambda: (b, ref, 1e-6)
    if name in ("laplacian_2d", "laplacian_2d_lds"):
        a, b = f32(kernels.LAP_H, kernels.LAP_W), np.zeros((kernels.LAP_H, kernels.LAP_W),
                                                           np.float32)
        grid = (kernels.LAP_W // 16, kernels.LAP_H // 16, 1)
        return [a, b], grid, (16, 16, 1), lambda: (b, laplacian_ref(a), 1e-5)
    if name == "softmax_rows":
        a, b = f32(kernels.ROWS, kernels.COLS), np.zeros((kernels.ROWS, kernels.COLS),
                                                         np.float32)
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return [a, b], (1, 1, 1), (kernels.ROWS, 1, 1), lambda: (b, e / e.sum(1, keepdims=True),
                                                                 1e-6)
    if name == "layernorm_rows":
        a, g = f32(kernels.ROWS, kernels.COLS), f32(kernels.COLS)
        b = np.zeros_like(a)
        mean = a.mean(1, keepdims=True)
        ref = (a - mean) / np.sqrt(((a - mean) ** 2).mean(1, keepdims=True) + 1e-5) * g
        return [a, g, b], (1, 1, 1), (kernels.ROWS, 1, 1), lambda: (b, ref, 1e-5)
    if name == "sgemm_regtile":
        a, bm = f32(kernels.SG, kernels.SG), f32(kernels.SG, kernels.SG)
        c = np.zeros_like(a)
        return [a, bm, c], (1, 1, 1), (kernels.SG // 4, kernels.SG // 4, 1), \
            lambda: (c, a @ bm, 1e-4)
    if name == "gemm_lds_4wave":
        a = rng.standard_normal((kernels.MG, kernels.GEMM_K)).astype(np.float16)
        bt = rng.standard_normal((kernels.MG, kernels.GEMM_K)).astype(np.float16)
        c = np.zeros((kernels.MG, kernels.MG), np.float32)
        ref = a.astype(np.float32) @ bt.astype(np.float32).T
        return [a, bt, c], (1, 1, 1), (256, 1, 1), lambda: (c, ref, 1e-4)
    if name == "sigmoid_f32":
        a, b = f32(N) * 8, np.zeros(N, np.float32)
        return [a, b], (N // 64, 1, 1), (64, 1, 1), lambda: (b, 1 / (1 + np.exp(-a)), 1e-6)
    if name == "index_div_mod":
        a, b = f32(3 * N), np.zeros(3 * N, np.float32)
        return [a, b], (3 * N // 64, 1, 1), (64, 1, 1), \
            lambda: (b, a.reshape(N, 3).T.reshape(-1), 0)
    if name == "quantize_int8":
        a, q = f32(N) * 100, np.zeros(N, np.int8)
        ref = np.trunc(np.clip(a * np.float32(0.9), -128, 127)).astype(np.int8)
        return [a, q, 0.9], (N // 64, 1, 1), (64, 1, 1), lambda: (q, ref, 0)
    if name == "scale_bf16":
        bits = (f32(N).view(np.uint32) >> 16).astype(np.uint16)
        b = np.zeros(N, np.uint16)
        av = (bits.astype(np.uint32) << 16).view(np.float32)
        fused = (av.astype(np.float64) * 1.5 + 0.25).astype(np.float32).view(np.uint32)
        ref = ((fused.astype(np.uint64) + 0x7FFF + ((fused >> 16) & 1)) >> 16).astype(np.uint16)
        return [bits, b], (N // 64, 1, 1), (64, 1, 1), lambda: (b, ref, 0)
    raise KeyError(name)


REAL = ["stencil_1d", "laplacian_2d", "laplacian_2d_lds", "softmax_rows", "layernorm_rows",
        "sgemm_regtile", "gemm_lds_4wave", "sigmoid_f32", "index_div_mod", "quantize_int8",
        "scale_bf16"]


@pytest.mark.parametrize("name", REAL)
def test_real_kernel_matches_numpy(name):
    args, grid, block, check = case(name)
    simulate(compiled(name).asm, args, grid, block)
    actual, expected, tol = check()
    if tol:
        np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 200])
def test_runtime_saxpy_edge_sizes(n):
    x, y = f32(n), f32(n)
    expected = (np.float64(0.5) * x + y).astype(np.float32)
    if n:  # n = 0: an empty grid, nothing launched
        simulate(compiled("saxpy_runtime").asm, [x, y, n, 0.5], ((n + 63) // 64, 1, 1),
                 (64, 1, 1))
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name", [*REAL, "saxpy_runtime"])
def test_real_kernel_assembles_and_links(name, target):
    link_or_skip(compiled(name, target).asm, target)
