"""MultiBuffer preserves what a kernel computes: interpret one thread block before and after.

The interpreter (tests/tir_interpreter.py) runs each thread up to its next barrier in a
chosen order, so a race shows up as a wrong result; every generated kernel must give the
reference result before and after multibuffering, under several thread orders.
"""


import numpy as np
import pytest
import tir_interpreter as interp
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.transforms.multibuffer import multi_buffer


def make_kernel(nt, start, step, trips, shift, use_async, prologue, epilogue, second, sync_war):
    """A loop that loads a tile into shared memory and reads it back permuted."""
    rows = start + step * trips + 2
    stop = start + step * trips

    @T.prim_func
    def kernel(A: T.Buffer((rows, nt), "float32"), B: T.Buffer((rows, nt), "float32")):
        for tx in T.thread_binding(nt, thread="threadIdx.x"):
            S = T.alloc_buffer((nt,), "float32", scope="shared")
            S2 = T.alloc_buffer((2, nt), "float32", scope="shared")
            if prologue:
                S[tx] = A[rows - 1, tx] * T.float32(2)
                T.tvm_storage_sync("shared")
                B[rows - 1, tx] = S[(tx + shift) % nt]
                T.tvm_storage_sync("shared")
            for k in range(start, stop, step):
                if use_async:
                    T.ptx["cp.async.ca.shared.global"](
                        T.address_of(S[tx]), T.address_of(A[k, tx]), 4
                    )
                    T.ptx["cp.async.commit_group"]()
                    T.ptx["cp.async.wait_group"](0)
                else:
                    S[tx] = A[k, tx]
                if second:
                    S2[tx % 2, tx] = A[k, tx] + T.float32(1)
                T.tvm_storage_sync("shared")
                if second:
                    B[k, tx] = S[(tx + shift) % nt] + S2[(tx + 1) % 2, (tx + 1) % nt]
                else:
                    B[k, tx] = S[(tx + shift) % nt]
                if sync_war:
                    T.tvm_storage_sync("shared")
            if epilogue:
                T.tvm_storage_sync("shared")
                B[rows - 2, tx] = S[(tx + 1) % nt]

    return kernel


def reference(a, nt, start, step, trips, shift, prologue, epilogue, second):
    b = np.zeros_like(a)
    rows = a.shape[0]
    perm = (np.arange(nt) + shift) % nt
    if prologue:
        b[rows - 1] = (a[rows - 1] * np.float32(2))[perm]
    ks = list(range(start, start + step * trips, step))
    for k in ks:
        b[k] = a[k][perm]
        if second:
            src = (np.arange(nt) + 1) % nt
            b[k] = b[k] + (a[k][src] + np.float32(1))
    if epilogue and ks:
        b[rows - 2] = a[ks[-1]][(np.arange(nt) + 1) % nt]
    return b


def random_input(kernel, nt, seed):
    rows = int(kernel.params[0].ty.shape[0])
    return np.random.default_rng(seed).standard_normal((rows, nt)).astype("float32")


kernel_params = st.fixed_dictionaries(
    {
        "nt": st.sampled_from([4, 8]),
        "start": st.integers(0, 3),
        "step": st.integers(1, 3),
        "trips": st.integers(1, 5),
        "shift": st.integers(1, 7),
        "use_async": st.booleans(),
        "prologue": st.booleans(),
        "epilogue": st.booleans(),
        "second": st.booleans(),
    }
)


@settings(max_examples=25, deadline=None)
@given(params=kernel_params, count=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_multibuffered_kernel_computes_the_same(params, count, seed):
    kernel = make_kernel(**params, sync_war=True)
    after = multi_buffer(kernel, count=count)
    a = random_input(kernel, params["nt"], seed)
    expected = reference(a, **{k: v for k, v in params.items() if k != "use_async"})
    for order in ("forward", "reverse", seed):
        before_out = interp.run_block(kernel, {"A": a, "B": np.zeros_like(a)}, order)["B"]
        after_out = interp.run_block(after, {"A": a, "B": np.zeros_like(a)}, order)["B"]
        np.testing.assert_array_equal(before_out, expected)
        np.testing.assert_array_equal(after_out, expected)


@settings(max_examples=15, deadline=None)
@given(params=kernel_params, seed=st.integers(0, 2**16))
def test_war_barrier_is_unneeded_with_two_or_more_copies(params, seed):
    """Without the end-of-iteration barrier the single buffer races (for some thread order)
    but every multibuffered version is still correct for every order tried."""
    params = {**params, "trips": max(params["trips"], 2), "shift": params["shift"] % 3 + 1}
    kernel = make_kernel(**params, sync_war=False)
    a = random_input(kernel, params["nt"], seed)
    expected = reference(a, **{k: v for k, v in params.items() if k != "use_async"})
    orders = ("forward", "reverse", seed)
    single = [interp.run_block(kernel, {"A": a, "B": np.zeros_like(a)}, o)["B"] for o in orders]
    assert any(not np.array_equal(out, expected) for out in single)
    for count in (2, 3):
        after = multi_buffer(kernel, count=count)
        for order in orders:
            out = interp.run_block(after, {"A": a, "B": np.zeros_like(a)}, order)["B"]
            np.testing.assert_array_equal(out, expected)


def test_interpreter_reports_unsupported_ops():
    @T.prim_func
    def extern(A: T.Buffer((4,), "float32")):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            A[tx] = T.float32(0)
            T.evaluate(T.call_extern("void", "mystery"))

    with pytest.raises(interp.UnsupportedTIR, match=r"op tirx.call_extern"):
        interp.run_block(extern, {"A": np.zeros(4, "float32")})


@settings(max_examples=30, deadline=None)
@given(params=kernel_params)
def test_loop_access_analysis_on_generated_kernels(params):
    """buffer_uses sees each generated access of S in the right place with the right kind."""
    from tilewave.analysis.loop_access import AccessKind, buffer_uses

    kernel = make_kernel(**params, sync_war=True)
    uses = {use.name: use for use in buffer_uses(kernel)}
    s_use = uses["S"]
    assert not s_use.escapes
    in_loop = [acc for acc in s_use.accesses if any(lp.loop_var.name == "k" for lp in acc.loops)]
    outside = [acc for acc in s_use.accesses if acc not in in_loop]
    assert [acc.kind for acc in in_loop] == [AccessKind.WRITE, AccessKind.READ]
    assert in_loop[0].via_address == params["use_async"]
    expected_outside = [AccessKind.WRITE, AccessKind.READ] * params["prologue"] + [
        AccessKind.READ
    ] * params["epilogue"]
    assert [acc.kind for acc in outside] == expected_outside
    s2_kinds = [acc.kind for acc in uses["S2"].accesses]
    assert s2_kinds == ([AccessKind.WRITE, AccessKind.READ] if params["second"] else [])
