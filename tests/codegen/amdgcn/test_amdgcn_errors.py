"""What the AMDGCN backend cannot compile is a TilewaveError naming the construct and the
statement (never a TypeError or a TVM InternalError); the CLI reports it without a
traceback. Runtime sizes (symbolic buffer shapes and grids) compile and run."""

import io
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.cli import main
from tilewave.codegen import amdgcn
from tilewave.errors import MalformedKernelError

sys.path.insert(0, str(Path(__file__).parent))
from isa_simulator import simulate


def compile_(func, target="gfx942"):
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target)


@T.prim_func
def tanh_kernel(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = T.tanh(A[tx])


@T.prim_func
def popcount_kernel(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = T.popcount(A[tx])


@pytest.mark.parametrize("func, op", [(tanh_kernel, "tirx.tanh"),
                                      (popcount_kernel, "tirx.popcount")])
def test_an_unknown_call_names_the_op_and_the_statement(func, op):
    with pytest.raises(MalformedKernelError) as err:
        compile_(func)
    text = str(err.value)
    assert f"op {op} " in text and "is not supported" in text
    assert "in function '" in text and "B[threadIdx_x] = " in text  # the statement


@T.prim_func
def symbolic_threads(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), "float32")
    for tx in T.thread_binding(n, thread="threadIdx.x"):
        A[tx] = T.float32(0)


def test_symbolic_workgroup_size_is_rejected_before_isel():
    with pytest.raises(MalformedKernelError,
                       match=r"threadIdx.x has the symbolic extent n\. The workgroup size is "
                             r"fixed in the code object"):
        compile_(symbolic_threads)


@T.prim_func
def symbolic_shared(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), "float32")
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((n,), "float32", scope="shared")
        S[tx] = A[tx]
        A[tx] = S[tx]


def test_symbolic_lds_shape_is_rejected():
    # tilewave.lower may refuse it first; the selector checks on its own (device function as
    # written, not lowered)
    with pytest.raises(MalformedKernelError,
                       match=r"shared buffer 'S' has the symbolic shape \[n\].*constant shape"):
        amdgcn.compile_device_func(symbolic_shared, "gfx942")


@T.prim_func
def int64_scalar(A: T.Buffer((64,), "float32"), k: T.int64):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        A[tx] = T.Cast("float32", k)


def test_unsupported_scalar_argument_type_is_named():
    with pytest.raises(MalformedKernelError,
                       match=r"scalar argument 'k' has type int64\. Pass int32 or float32"):
        compile_(int64_scalar)


@T.prim_func
def saxpy_runtime(x: T.handle, y: T.handle, n: T.int32, alpha: T.float32):
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (n,), "float32")
    for bx in T.thread_binding((n + 63) // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:
                Y[bx * 64 + tx] = alpha * X[bx * 64 + tx] + Y[bx * 64 + tx]


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130])
def test_runtime_length_saxpy(n):
    compiled = compile_(saxpy_runtime)
    assert compiled.arguments == ["X_ptr", "Y_ptr", "n", "alpha"]
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    expected = np.float32(1.5) * x + y
    simulate(compiled.asm, [x, y, n, 1.5], ((n + 63) // 64, 1, 1), (64, 1, 1))
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


@T.prim_func
def vector_scale_cast(A: T.Buffer((256,), "float16"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for v in T.vectorized(4):
            B[tx * 4 + v] = T.Cast("float32", A[tx * 4 + v]) * T.float32(2)


def test_vectorized_store_that_is_not_a_copy():
    # VectorizeLoop leaves B[ramp] = cast(A[ramp]) * broadcast(2): selected lane by lane
    a = np.random.default_rng(3).standard_normal(256).astype(np.float16)
    b = np.zeros(256, np.float32)
    simulate(compile_(vector_scale_cast).asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a.astype(np.float32) * 2)


SYMBOLIC_THREADS_FILE = textwrap.dedent(
    """
    from tvm.script import tirx as T
    import tilewave

    @T.prim_func
    def fill(a: T.handle, n: T.int32):
        A = T.match_buffer(a, (n,), "float32")
        for tx in T.thread_binding(n, thread="threadIdx.x"):
            A[tx] = T.float32(0)
    """
)


def test_cli_reports_the_error_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "fill.py"
    path.write_text(SYMBOLIC_THREADS_FILE)
    code = main(["build", str(path), "--target", "gfx942", "--backend", "asm", "--out",
                 str(tmp_path / "out")], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1
    assert "tilewave: error: AMDGCN backend in function 'fill_kernel'" in err
    assert "threadIdx.x has the symbolic extent n" in err
    assert "Traceback" not in err
