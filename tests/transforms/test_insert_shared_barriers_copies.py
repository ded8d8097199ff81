"""InsertSharedBarriers with async-copy destination regions: a cp.async-fed multibuffered
loop needs no write-after-read barrier (N = 2), a single buffer does (N = 1)."""

import tvm
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers


def check(before, expected, target="sm_90a"):
    after = insert_shared_barriers(before, target)
    expected = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    assert find_shared_hazards(after, target) == []
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, target), after)


@T.prim_func
def single(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[tx * 4]), T.address_of(A[k, tx * 4]), 16
            )
            B[k, tx] = S[127 - tx]


@T.prim_func
def single_after(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()  # WAR: iteration k-1 still reads S
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[tx * 4]), T.address_of(A[k, tx * 4]), 16
            )
            T.tilewave.commit_async_ops()
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()  # RAW
            B[k, tx] = S[127 - tx]


@T.prim_func
def double(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 128), "float32", scope="shared")
        for k in range(8):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k & 1, tx * 4]), T.address_of(A[k, tx * 4]), 16
            )
            B[k, tx] = S[k & 1, 127 - tx]


@T.prim_func
def double_after(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 128), "float32", scope="shared")
        for k in range(8):
            # iteration k-1 read the other copy: the 16 bytes at S[k & 1, tx*4] are apart
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k & 1, tx * 4]), T.address_of(A[k, tx * 4]), 16
            )
            T.tilewave.commit_async_ops()
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()  # RAW; also orders iteration k-2's reads of this copy
            B[k, tx] = S[k & 1, 127 - tx]


def test_single_buffer_fed_by_cp_async_keeps_its_war_barrier():
    check(single, single_after)


def test_double_buffer_fed_by_cp_async_needs_no_war_barrier():
    check(double, double_after)


@T.prim_func
def overlapping(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((2, 128), "float32", scope="shared")
        for k in range(8):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k & 1, tx * 4]), T.address_of(A[k, tx * 4]), 16
            )
            B[k, tx] = S[k & 1, tx * 4 + 2]


def test_the_copied_bytes_count_not_just_the_start():
    """S[tx*4 + 2] is no copy's start, but the third of the four floats tx's own copy
    writes; an async copy lands later even for its own thread: RAW."""
    hazards = find_shared_hazards(overlapping, "sm_90a")
    assert any(h.kind.name == "RAW" for h in hazards)
    after = insert_shared_barriers(overlapping, "sm_90a")
    assert find_shared_hazards(after, "sm_90a") == []
