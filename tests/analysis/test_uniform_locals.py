"""uniform_local_buffers: which local scalars hold the same value in every thread."""

from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.uniform_locals import uniform_local_buffers


@T.prim_func
def counters(A: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        i: T.int32 = 0  # uniform: constant start, uniform step, uniform loop
        j: T.int32 = tx  # thread index
        k: T.int32 = 0  # updated from j: not uniform either
        m: T.int32 = 0  # stored under a divergent if
        g: T.int32 = 0  # loaded from global memory
        u: T.int32 = n * 2  # parameter arithmetic through a Bind
        while i < n:
            k = k + j
            if tx < 32:
                m = 1
            g = T.Cast("int32", A[0])
            i = i + u
        A[tx] = T.Cast("float32", i + j + k + m + g)


def names(func):
    return sorted(str(b.name) for b in uniform_local_buffers(func))


def test_counter_and_parameter_derived_locals_are_uniform():
    assert names(counters) == ["i", "u"]


@T.prim_func
def through_a_call(A: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        r: T.int32 = 0
        T.evaluate(T.call_extern("int32", "touch", r))
        A[tx] = T.Cast("float32", r)


def test_a_local_a_call_can_write_is_not_uniform():
    assert names(through_a_call) == []


@T.prim_func
def inside_divergent_while(A: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        i: T.int32 = 0
        c: T.int32 = 0
        while i < tx:
            c = c + 1  # counts a thread-dependent number of times
            i = i + 1
        A[tx] = T.Cast("float32", c)


def test_stores_in_a_divergent_loop_are_not_uniform():
    assert names(inside_divergent_while) == []
