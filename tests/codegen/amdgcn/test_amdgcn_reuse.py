"""Reuse of loaded values (value_reuse.py): a load, or arithmetic over loads, is selected
once until a store, a barrier or a loop that writes the location may change it."""

import sys
from pathlib import Path

import numpy as np
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.codegen import amdgcn

sys.path.insert(0, str(Path(__file__).parent))
from isa_simulator import simulate


def compiled(func):
    return amdgcn.compile_device_func(amdgcn.device_function(func, "gfx942"), "gfx942")


def loads(asm: str) -> int:
    kinds = ("global_load", "buffer_load", "ds_read")
    return sum(ln.strip().startswith(kinds) for ln in asm.splitlines())


@T.prim_func
def reread(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"),
           C: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = T.exp(A[tx]) + A[tx]
        C[tx] = T.exp(A[tx]) * A[tx]  # A[tx] and exp(A[tx]) again: no store to A between


def test_loads_and_functions_of_loads_are_reused_until_a_store():
    c = compiled(reread)
    assert loads(c.asm) == 1 and c.asm.count("v_exp_f32") == 1
    a = np.linspace(-2, 2, 64).astype(np.float32)
    b, cc = np.zeros(64, np.float32), np.zeros(64, np.float32)
    simulate(c.asm, [a, b, cc], (1, 1, 1), (64, 1, 1))
    np.testing.assert_allclose(b, np.exp(a) + a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cc, np.exp(a) * a, rtol=1e-6, atol=1e-6)


@T.prim_func
def store_between(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[tx]
        A[tx] = A[tx] + T.float32(1)
        B[tx] = B[tx] + A[tx]  # A[tx] changed: loaded again


def test_a_store_forgets_the_loaded_value():
    c = compiled(store_between)
    a, b = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, np.arange(64) * 2 + 1)
    np.testing.assert_array_equal(a, np.arange(64) + 1)


@T.prim_func
def loop_writes(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        B[tx] = A[tx]
        for _k in range(40):  # too long to unroll: a rolled loop storing to A
            A[tx] = A[tx] + T.float32(1)  # must read A again in every iteration


def test_a_loop_that_writes_a_location_does_not_reuse_the_value_from_before_it():
    c = compiled(loop_writes)
    a, b = np.zeros(64, np.float32), np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(a, np.full(64, 40, np.float32))


@T.prim_func
def barrier_between(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[63 - tx]
        T.tilewave.lds_barrier()
        S[63 - tx] = S[63 - tx] * T.float32(2)  # written by another thread than it reads
        T.tilewave.lds_barrier()
        B[tx] = B[tx] + S[63 - tx]  # after a barrier: read LDS again


def test_a_barrier_forgets_shared_values():
    c = compiled(barrier_between)
    a, b = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(b, a[::-1] * 3)


@T.prim_func
def local_elements(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        r = T.alloc_buffer((2,), "float32", scope="local")
        r[0] = A[tx]
        r[1] = A[tx] * T.float32(0)
        r[1] = r[1] + T.exp(A[tx] - r[0])
        r[1] = r[1] + T.exp(A[tx] - r[0])  # r[1] written, r[0] not: exp reused
        r[0] = r[0] + T.float32(1)
        B[tx] = r[1] + T.exp(A[tx] - r[0])  # r[0] written: exp computed again


def test_local_writes_forget_only_their_element():
    c = compiled(local_elements)
    assert c.asm.count("v_exp_f32") == 2
    a, b = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    simulate(c.asm, [a, b], (1, 1, 1), (64, 1, 1))
    np.testing.assert_allclose(b, 2 + np.exp(np.float32(-1)), rtol=1e-6)
