"""Every bad input tilewave knows how to refuse: the catalogue behind docs/errors.md.

Each entry is an input (in words), how to produce it (an API call, or `tilewave` command
line run in a scratch directory holding the files of :data:`KERNEL_FILES`), the exception
class and fragments its message must contain. ``tests/test_errors.py`` runs them all and
writes the table.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm.script import tirx as T

import tilewave
from tilewave import errors
from tilewave.pipeline import build, lower


@dataclass(frozen=True)
class BadInput:
    """One bad input and what tilewave must say about it.

    Attributes:
        input: the input, in words (a table cell).
        error: the exception class.
        expect: fragments the message must contain (what, where, fix).
        call: raises the error (API inputs); ``None`` for command-line inputs.
        argv: the ``tilewave`` arguments (command-line inputs).
    """

    input: str
    error: type[errors.TilewaveError]
    expect: tuple[str, ...]
    call: Callable[[], object] | None = None
    argv: tuple[str, ...] = ()


def _file(body: str) -> str:
    return "from tvm.script import tirx as T\nimport tilewave\n\n" + textwrap.dedent(body)


#: Kernel files the command-line inputs use, by name.
KERNEL_FILES = {
    "syntax_error.py": _file(
        """
        @T.prim_func
        def broken(A: T.Buffer((64,), "float32")):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                A[tx] = A[tx] +
        """
    ),
    "unknown_op.py": _file(
        """
        @T.prim_func
        def uses_unknown_op(A: T.Buffer((64,), "float32")):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                S = T.alloc_buffer((64,), "float32", scope="shared")
                S[tx] = A[tx]
                T.tilewave.barrier_everything()
                A[tx] = S[63 - tx]
        """
    ),
    "wrong_rank.py": _file(
        """
        @T.prim_func
        def wrong_rank(A: T.Buffer((64,), "float32")):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                S = T.alloc_buffer((64,), "float32", scope="shared")
                S[tx, 1] = A[tx]
        """
    ),
    "no_kernel.py": "x = 1\n",
    "reverse.py": _file(
        """
        @T.prim_func
        def reverse(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                S = T.alloc_buffer((64,), "float32", scope="shared")
                S[tx] = A[tx]
                B[tx] = S[63 - tx]
        """
    ),
    "not_a_directory": "a file where --out expects a directory\n",
}


# --- kernels of the API inputs -------------------------------------------------------------
@T.prim_func
def serial_only(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "serial_only"})
    for i in range(64):
        A[i] = T.float32(0)


@T.prim_func
def symbolic_shared(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "symbolic_shared"})
    n = T.int32()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((n,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[n - 1 - tx]


@T.prim_func
def vectorized_symbolic(a: T.handle, n: T.int32):
    T.func_attr({"global_symbol": "vectorized_symbolic"})
    A = T.match_buffer(a, (1024,), "float32")
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for i in T.vectorized(n):
            A[tx * 16 + i] = T.float32(0)


@T.prim_func
def fp4_reverse(A: T.Buffer((64,), "float4_e2m1fn"), B: T.Buffer((64,), "float4_e2m1fn")):
    T.func_attr({"global_symbol": "fp4_reverse"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float4_e2m1fn", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx] + S[tx]


@T.prim_func
def big_tile(A: T.Buffer((32768,), "float32"), B: T.Buffer((32768,), "float32")):
    T.func_attr({"global_symbol": "big_tile"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((32768,), "float32", scope="shared")
        for i in range(128):
            S[i * 256 + tx] = A[i * 256 + tx]
        for i in range(128):
            B[i * 256 + tx] = S[32767 - i * 256 - tx]


@T.prim_func
def wide_block(A: T.Buffer((512,), "float32"), B: T.Buffer((512,), "float32")):
    T.func_attr({"global_symbol": "wide_block"})
    for tx in T.thread_binding(512, thread="threadIdx.x"):
        S = T.alloc_buffer((512,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[511 - tx]


@T.prim_func
def odd_even_writes(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "odd_even_writes"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx % 2 == 0:
            S[tx // 2] = A[tx]
        else:
            S[tx // 2] = A[tx] * T.float32(2)
        B[tx] = S[tx // 2]


@T.prim_func
def divergent_loop(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "divergent_loop"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        i: T.int32 = 0
        while i < tx % 4:
            B[tx] = B[tx] + S[63 - tx]
            S[tx] = A[tx]
            i = i + 1


@T.prim_func
def split_barrier_on_gfx942(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "split_barrier_on_gfx942"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(0)
        T.tilewave.barrier_wait(0)
        B[tx] = S[63 - tx]


@T.prim_func
def extern_on_shared(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "extern_on_shared"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.evaluate(T.call_extern("void", "mystery_op", S.data))
        A[tx] = S[63 - tx]


@T.prim_func
def dead_branch_buffer(A: T.Buffer((32,), "int32")):
    T.func_attr({"global_symbol": "dead_branch_buffer"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        Q = T.alloc_buffer((32,), "int32", scope="shared")
        R = T.alloc_buffer((64,), "int32", scope="shared")
        if tx < 8:
            if tx < 16:
                Q[tx] = A[tx] + 1
            else:
                R[tx] = A[tx] + 1


def _build_without_storage_rewrite(kernel: tvm.tirx.PrimFunc, target: str) -> object:
    with tvm.transform.PassContext(config={"tirx.disable_storage_rewrite": True}):
        return build(kernel, target)


def _tvm_compile_without_target() -> object:
    return tvm.compile(odd_even_writes, tir_pipeline="tilewave")


BAD_INPUTS: tuple[BadInput, ...] = (
    BadInput(
        "kernel file with a Python syntax error",
        errors.KernelSourceError,
        ("'syntax_error.py', line 8, in function 'broken'", "`A[tx] = A[tx] +`", "Fix:"),
        argv=("lower", "syntax_error.py", "--target", "sm_90a"),
    ),
    BadInput(
        "kernel file calling an op that does not exist (`T.tilewave.barrier_everything()`)",
        errors.KernelSourceError,
        ("line 10, in function 'uses_unknown_op'", "TVMScript could not parse it", "spelling"),
        argv=("lower", "unknown_op.py", "--target", "sm_90a"),
    ),
    BadInput(
        "kernel file indexing a 1-d buffer with two indices",
        errors.KernelSourceError,
        ("line 9, in function 'wrong_rank'", "`S[tx, 1] = A[tx]`", "1-dimensional"),
        argv=("build", "wrong_rank.py", "--target", "gfx942", "--out", "out"),
    ),
    BadInput(
        "kernel file that does not exist",
        errors.KernelSourceError,
        ("'missing.py' does not exist",),
        argv=("lower", "missing.py", "--target", "sm_90a"),
    ),
    BadInput(
        "kernel file that defines no kernel",
        errors.KernelSourceError,
        ("defines no @T.prim_func or IRModule",),
        argv=("lower", "no_kernel.py", "--target", "sm_90a"),
    ),
    BadInput(
        "`--out` is a file, not a directory",
        errors.OutputPathError,
        ("cannot create the output directory 'not_a_directory/sub'", "writable --out"),
        argv=("build", "reverse.py", "--target", "sm_90a", "--out", "not_a_directory/sub"),
    ),
    BadInput(
        "`--dump-ir` into a path below a file",
        errors.DebugOptionError,
        ("cannot create the dump directory", "writable directory"),
        argv=("lower", "reverse.py", "--target", "sm_90a", "--dump-ir", "not_a_directory/d"),
    ),
    BadInput(
        "unknown target name",
        errors.UnknownTargetError,
        ("unknown target 'sm_42'", "sm_90a"),
        call=lambda: lower(odd_even_writes, "sm_42"),
    ),
    BadInput(
        '`tvm.compile(kernel, tir_pipeline="tilewave")` without `target=`',
        errors.UnknownTargetError,
        ("tir_pipeline='tilewave'", "in function 'odd_even_writes'", "pass the GPU target"),
        call=_tvm_compile_without_target,
    ),
    BadInput(
        "kernel that binds no loop to `threadIdx`",
        errors.MalformedKernelError,
        ("'serial_only' is not a GPU kernel", "T.thread_binding"),
        call=lambda: lower(serial_only, "gfx942"),
    ),
    BadInput(
        "shared buffer with a symbolic size",
        errors.MalformedKernelError,
        ("shared buffer 'S' in function 'symbolic_shared'", "T.alloc_shared((n,))", "constant"),
        call=lambda: lower(symbolic_shared, "sm_90a"),
    ),
    BadInput(
        "vectorized loop with a symbolic extent (a TVM pass fails inside the pass list)",
        errors.StageFailedError,
        (
            "stage tirx.VectorizeLoop failed on kernel 'vectorized_symbolic' for sm_90a",
            "Failed to vectorize loop with extent n",
            "TILEWAVE_DUMP_IR=1",
        ),
        call=lambda: lower(vectorized_symbolic, "sm_90a"),
    ),
    BadInput(
        "float4 (fp4) data on gfx942",
        errors.CodegenError,
        (
            "ROCm (LLVM AMDGPU) code generator rejected kernel 'fp4_reverse_kernel' for gfx942",
            "float4_e2m1fn",
        ),
        call=lambda: build(fp4_reverse, "gfx942"),
    ),
    BadInput(
        "128 KiB of shared memory on gfx942 (64 KiB per block)",
        errors.SharedMemoryLimitError,
        ("131072 bytes", "65536-byte per-block limit of gfx942", "'S' (131072 bytes)"),
        call=lambda: build(big_tile, "gfx942"),
    ),
    BadInput(
        "512-thread block for a ROCm target (TVM's offline ROCm codegen declares 256)",
        errors.TargetFeatureError,
        ("'wide_block_kernel' runs 512 threads per block", "at most 256"),
        call=lambda: build(wide_block, "gfx942"),
    ),
    BadInput(
        "two writes to one shared word in the two arms of a thread-divergent `if`",
        errors.UnfixableHazardError,
        (
            "`S[tx // 2] = A[tx]` and `S[tx // 2] = A[tx] * T.float32(2.0)`",
            "both write shared buffer 'S'",
            "`if tx % 2 == 0`",
            "no barrier can order",
        ),
        call=lambda: build(odd_even_writes, "sm_90a"),
    ),
    BadInput(
        "a barrier needed inside a loop whose trip count differs per thread",
        errors.DivergentBarrierError,
        ("in function 'divergent_loop'", "thread-divergent"),
        call=lambda: build(divergent_loop, "gfx942"),
    ),
    BadInput(
        "split barrier (`T.tilewave.barrier_signal`) on gfx942",
        errors.TargetFeatureError,
        ("barrier_signal", "gfx942", "barrier_style='basic'"),
        call=lambda: build(split_barrier_on_gfx942, "gfx942"),
    ),
    BadInput(
        "extern call taking a shared buffer's address, op unknown to tilewave",
        errors.UnclassifiedOpError,
        ("'mystery_op'", "tilewave.register_intrinsic('mystery_op'"),
        call=lambda: build(extern_on_shared, "sm_90a"),
    ),
    BadInput(
        "shared buffer used only in a branch that cannot run (StorageRewrite off)",
        errors.MalformedKernelError,
        ("shared buffer 'R'", "after TVM's CompactBufferAllocation", "can never run"),
        call=lambda: _build_without_storage_rewrite(dead_branch_buffer, "sm_90a"),
    ),
    BadInput(
        "`multi_buffer_count=0`",
        errors.PassOptionError,
        ("multi_buffer_count must be a positive integer", "got 0"),
        call=lambda: lower(odd_even_writes, "sm_90a", multi_buffer_count=0),
    ),
    BadInput(
        "`tilewave.register_intrinsic` with an empty name",
        errors.IntrinsicRegistrationError,
        ("non-empty string",),
        call=lambda: tilewave.register_intrinsic("", "generic"),
    ),
)
