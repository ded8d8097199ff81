"""Kernels whose shared buffers share storage (issue 15), as ``tilewave.lower`` inputs.

Each is one block of 256 threads over float32 data with a NumPy reference (:data:`CASES`):
the aliasing forms (a ``decl_buffer`` view of another buffer's data, a view at an
``address_of`` offset, views with another element size, two ``shared.dyn`` buffers that
TVM's ``MergeSharedMemoryAllocations`` lays over each other after the barrier stage,
buffers TVM's
``StorageRewrite`` folds into one, a softmax with two reduction buffers) and the
same-element loops (every thread copies one row; a ``T.bind`` value written by all, into
a row or into one element).

``tests/transforms/test_insert_shared_barriers_aliasing.py`` lowers them and runs
tilewave's racecheck; ``benchmarks/racecheck_h100.py`` runs them on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from tvm.script import tirx as T

N = 256


@T.prim_func
def view_raw(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "view_raw"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        V = T.decl_buffer((256,), "float32", data=S.data, scope="shared")
        S[tx] = A[tx]
        B[tx] = V[255 - tx]


@T.prim_func
def offset_view(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "offset_view"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        H = T.decl_buffer((128,), "float32", data=T.address_of(S[128]), scope="shared")
        S[tx + 128] = A[tx]
        B[tx] = H[127 - tx]
        S[tx] = A[tx + 128]
        B[tx + 128] = S[127 - tx]


@T.prim_func
def dyn_view(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "dyn_view"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared.dyn")
        V = T.decl_buffer((256,), "float32", data=S.data, scope="shared.dyn")
        B[tx] = A[tx]
        S[tx] = A[tx] * T.float32(2)
        B[tx] = V[255 - tx]
        V[tx] = A[tx] * T.float32(3)
        B[tx] = B[tx] + S[(tx + 1) % 256]


@T.prim_func
def dyn_mixed_sizes(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float16")):
    T.func_attr({"global_symbol": "dyn_mixed_sizes"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared.dyn")
        H = T.decl_buffer((512,), "float16", data=S.data, scope="shared.dyn")
        S[tx] = A[tx]
        B[tx] = H[511 - tx * 2]


@T.prim_func
def dyn_merge(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "dyn_merge"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        Q = T.alloc_buffer((256,), "float32", scope="shared.dyn")
        R = T.alloc_buffer((256,), "float32", scope="shared.dyn")
        Q[tx] = A[tx]
        B[tx] = Q[255 - tx]
        R[tx] = A[tx] * T.float32(2)
        B[tx] = B[tx] + R[(tx + 7) % 256]


@T.prim_func
def storage_rewrite_reuse(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "storage_rewrite_reuse"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        Q = T.alloc_buffer((256,), "float32", scope="shared")
        R = T.alloc_buffer((256,), "float32", scope="shared")
        Q[tx] = A[tx]
        B[tx] = Q[255 - tx]
        R[tx] = A[tx] * T.float32(2)
        B[tx] = B[tx] + R[(tx + 7) % 256]


@T.prim_func
def softmax_two_buffers(X: T.Buffer((256,), "float32"), Y: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "softmax_two_buffers"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        M = T.alloc_buffer((256,), "float32", scope="shared")
        E = T.alloc_buffer((256,), "float32", scope="shared")
        top = T.alloc_buffer((1,), "float32", scope="local")
        M[tx] = X[tx]
        for k in range(8):
            if tx < T.shift_right(128, k):
                M[tx] = T.max(M[tx], M[tx + T.shift_right(128, k)])
        top[0] = M[0]
        E[tx] = T.exp(X[tx] - top[0])
        for k in range(8):
            if tx < T.shift_right(128, k):
                E[tx] = E[tx] + E[tx + T.shift_right(128, k)]
        Y[tx] = T.exp(X[tx] - top[0]) / E[0]


@T.prim_func
def row_copy(A: T.Buffer((512,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "row_copy"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((512,), "float32", scope="shared")
        for i in range(512):
            S[i] = A[i]
        B[tx] = S[(tx * 7) % 512] + S[511 - tx]


@T.prim_func
def bound_row(A: T.Buffer((512,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "bound_row"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((512,), "float32", scope="shared")
        for i in range(512):
            v = T.bind(A[i] * T.float32(2))
            S[i] = v
        B[tx] = S[(tx * 3) % 512]


@T.prim_func
def bound_scalar(A: T.Buffer((512,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "bound_scalar"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((1,), "float32", scope="shared")
        for i in range(512):
            v = T.bind(A[i] * T.float32(2))
            S[0] = v
        B[tx] = S[0] + A[tx]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return (e / e.sum()).astype(np.float32)


@dataclass(frozen=True)
class AliasCase:
    """One kernel: its TIR, its inputs' sizes and what it must compute."""

    func: object
    inputs: dict[str, tuple[int, str]]
    output: str
    reference: Callable[[dict[str, np.ndarray]], np.ndarray]
    #: relative tolerance of the result check
    tolerance: float = 1e-6
    #: the ``PassContext`` config to lower it under
    config: dict[str, object] = field(default_factory=dict)


CASES: dict[str, AliasCase] = {
    "view_raw": AliasCase(view_raw, {"A": (256, "float32"), "B": (256, "float32")}, "B",
                          lambda a: a["A"][::-1]),
    "offset_view": AliasCase(
        offset_view, {"A": (256, "float32"), "B": (256, "float32")}, "B",
        lambda a: np.concatenate([a["A"][:128][::-1], a["A"][128:][::-1]]),
    ),
    "dyn_view": AliasCase(
        dyn_view, {"A": (256, "float32"), "B": (256, "float32")}, "B",
        lambda a: 2 * a["A"][::-1] + 3 * np.roll(a["A"], -1),
    ),
    "dyn_mixed_sizes": AliasCase(
        dyn_mixed_sizes, {"A": (256, "float32"), "B": (256, "float16")}, "B",
        lambda a: a["A"].view(np.float16)[511 - 2 * np.arange(256)],
    ),
    # StorageRewrite off: TVM's MergeSharedMemoryAllocations (after the barrier stage) is
    # the pass that lays R over Q
    "dyn_merge": AliasCase(
        dyn_merge, {"A": (256, "float32"), "B": (256, "float32")}, "B",
        lambda a: a["A"][::-1] + 2 * np.roll(a["A"], -7),
        config={"tirx.disable_storage_rewrite": True},
    ),
    "storage_rewrite_reuse": AliasCase(
        storage_rewrite_reuse, {"A": (256, "float32"), "B": (256, "float32")}, "B",
        lambda a: a["A"][::-1] + 2 * np.roll(a["A"], -7),
    ),
    "softmax_two_buffers": AliasCase(
        softmax_two_buffers, {"X": (256, "float32"), "Y": (256, "float32")}, "Y",
        lambda a: _softmax(a["X"]), tolerance=1e-4,
    ),
    "row_copy": AliasCase(
        row_copy, {"A": (512, "float32"), "B": (256, "float32")}, "B",
        lambda a: a["A"][(np.arange(256) * 7) % 512] + a["A"][511 - np.arange(256)],
    ),
    "bound_row": AliasCase(
        bound_row, {"A": (512, "float32"), "B": (256, "float32")}, "B",
        lambda a: 2 * a["A"][(np.arange(256) * 3) % 512],
    ),
    "bound_scalar": AliasCase(
        bound_scalar, {"A": (512, "float32"), "B": (256, "float32")}, "B",
        lambda a: 2 * a["A"][511] + a["A"][:256],
    ),
}
