"""InsertSharedBarriers on long runs of plain stores between barriers (an unrolled epilogue
writing accumulator fragments to a swizzled tile), before/after: the landed stores of one
buffer are compared with a new access at once (merged points), and the barriers are the
ones a pair-by-pair comparison gives: none between stores that each thread owns, one
before the first store or read that meets another thread's element."""

from __future__ import annotations

import importlib

import tvm
from structural import same
from tvm.script import tirx as T

import tilewave  # noqa: F401 (registers T.tilewave.*)
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers


@T.prim_func
def epilogue_before(A: T.Buffer((64,), "float32"), B: T.Buffer((512,), "float32")):
    C = T.alloc_shared((512,), "float32")
    with T.launch_thread("threadIdx.x", 64) as tx:
        # eight stores per thread into an XOR-swizzled tile: every element has one owner
        C[0 * 64 + T.bitwise_xor(tx // 8, 0) * 8 + tx % 8] = A[tx]
        C[1 * 64 + T.bitwise_xor(tx // 8, 1) * 8 + tx % 8] = A[tx] + T.float32(1)
        C[2 * 64 + T.bitwise_xor(tx // 8, 2) * 8 + tx % 8] = A[tx] + T.float32(2)
        C[3 * 64 + T.bitwise_xor(tx // 8, 3) * 8 + tx % 8] = A[tx] + T.float32(3)
        C[4 * 64 + T.bitwise_xor(tx // 8, 4) * 8 + tx % 8] = A[tx] + T.float32(4)
        C[5 * 64 + T.bitwise_xor(tx // 8, 5) * 8 + tx % 8] = A[tx] + T.float32(5)
        # the last one writes the rows of block 0 again, those of other threads
        C[T.bitwise_xor(tx // 8, 1) * 8 + tx % 8] = A[tx] + T.float32(6)
        B[tx] = C[tx * 8]


@T.prim_func
def epilogue_after(A: T.Buffer((64,), "float32"), B: T.Buffer((512,), "float32")):
    C = T.alloc_shared((512,), "float32")
    with T.launch_thread("threadIdx.x", 64) as tx:
        C[0 * 64 + T.bitwise_xor(tx // 8, 0) * 8 + tx % 8] = A[tx]
        C[1 * 64 + T.bitwise_xor(tx // 8, 1) * 8 + tx % 8] = A[tx] + T.float32(1)
        C[2 * 64 + T.bitwise_xor(tx // 8, 2) * 8 + tx % 8] = A[tx] + T.float32(2)
        C[3 * 64 + T.bitwise_xor(tx // 8, 3) * 8 + tx % 8] = A[tx] + T.float32(3)
        C[4 * 64 + T.bitwise_xor(tx // 8, 4) * 8 + tx % 8] = A[tx] + T.float32(4)
        C[5 * 64 + T.bitwise_xor(tx // 8, 5) * 8 + tx % 8] = A[tx] + T.float32(5)
        # write-after-write with the first store's other owners: one barrier
        T.tilewave.lds_barrier()
        C[T.bitwise_xor(tx // 8, 1) * 8 + tx % 8] = A[tx] + T.float32(6)
        # read-after-write of other threads' elements
        T.tilewave.lds_barrier()
        B[tx] = C[tx * 8]


def test_owned_stores_need_no_barrier_and_the_first_foreign_one_gets_one():
    assert find_shared_hazards(epilogue_before)  # the input races
    after = insert_shared_barriers(epilogue_before, "sm_90a")
    same(after, epilogue_after)
    assert find_shared_hazards(after) == []


@T.prim_func
def reads_among_stores_before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    C = T.alloc_shared((256,), "float32")
    with T.launch_thread("threadIdx.x", 64) as tx:
        C[tx] = A[tx]
        C[64 + tx] = A[tx] + T.float32(1)
        C[128 + tx] = A[tx] + T.float32(2)
        B[tx] = C[tx] + C[64 + tx]  # each thread reads back its own elements
        C[192 + tx] = A[tx] + T.float32(3)
        B[tx] = C[128 + (tx + 1) % 64]  # a neighbour's element


@T.prim_func
def reads_among_stores_after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    C = T.alloc_shared((256,), "float32")
    with T.launch_thread("threadIdx.x", 64) as tx:
        C[tx] = A[tx]
        C[64 + tx] = A[tx] + T.float32(1)
        C[128 + tx] = A[tx] + T.float32(2)
        B[tx] = C[tx] + C[64 + tx]
        C[192 + tx] = A[tx] + T.float32(3)
        T.tilewave.lds_barrier()
        B[tx] = C[128 + (tx + 1) % 64]


def test_own_reads_pass_merged_stores_and_a_neighbour_read_waits():
    after = insert_shared_barriers(reads_among_stores_before, "sm_90a")
    same(after, reads_among_stores_after)
    assert find_shared_hazards(after) == []


def _owned_stores(count: int) -> tvm.tirx.PrimFunc:
    """``count`` stores each thread makes to its own elements, then a read of another's."""
    lines = [f"        C[{k} * 64 + tx] = A[tx] + T.float32({k})" for k in range(count)]
    source = "\n".join(
        [
            "@T.prim_func",
            'def owned(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):',
            f'    C = T.alloc_shared(({count * 64},), "float32")',
            '    with T.launch_thread("threadIdx.x", 64) as tx:',
            *lines,
            "        B[tx] = C[(tx + 1) % 64]",
        ]
    )
    return tvm.script.from_source(source, extra_vars={"T": T})


def test_a_run_of_stores_is_not_compared_pair_by_pair(monkeypatch):
    module = importlib.import_module("tilewave.transforms.insert_shared_barriers")
    pairs = []
    real = module.may_conflict

    def counted(a, b, *args, **kwargs):
        pairs.append((a, b))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(module, "may_conflict", counted)
    after = insert_shared_barriers(_owned_stores(32), "sm_90a")
    body = after.script()
    assert body.count("lds_barrier") == 1  # before the read of a neighbour's element only
    # 32 stores pair by pair would be 496 questions; merged, the first stores' few pairs
    assert len(pairs) < 32, f"{len(pairs)} pairwise may_conflict questions"
