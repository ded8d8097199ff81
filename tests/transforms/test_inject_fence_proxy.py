"""InjectFenceProxy: before/after TVMScript pairs, options, targets, bad inputs, CUDA source."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import tvm
from example_loader import load_module
from tvm import tirx
from tvm.script import tirx as T

import tilewave
from tilewave.errors import MalformedKernelError, PassOptionError, UnknownTargetError
from tilewave.transforms.inject_fence_proxy import InjectFenceProxy, inject_fence_proxy

SM90 = "sm_90a"


def check(before: tirx.PrimFunc, expected: tirx.PrimFunc, **options: object) -> None:
    """The pass turns ``before`` into ``expected``, and is idempotent on the result."""
    options.setdefault("target", SM90)
    after = inject_fence_proxy(before, **options)
    expected = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    tvm.ir.assert_structural_equal(inject_fence_proxy(after, **options), after)


def unchanged(func: tirx.PrimFunc, **options: object) -> None:
    options.setdefault("target", SM90)
    assert inject_fence_proxy(func, **options).same_as(func)


# ---------------------------------------------------------------------------------------
# The seed's example: a shared store, then wgmma reading shared through a descriptor
#
# m64n8k16 f16 reads A (64 rows x 16 k x 2 B = 2 KiB) and B (8 rows, 256 B) through one
# K-major, unswizzled descriptor: 8-row x 16-byte core matrices, LBO 8 (x 16 B: the second
# k half of a row group 128 B on), SBO 16 (the next 8-row group 256 B on). A spans
# smem[0:1024] exactly and B is its first 256 bytes: the buffer holds both operands. Each
# wgmma comes with the handshake PTX asks for: wgmma.fence before it (register order),
# commit_group and wait_group 0 after it (before the kernel ends with it in flight).
# ---------------------------------------------------------------------------------------


@T.prim_func
def seed_before(A: T.Buffer((128,), "float16")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        smem[0] = T.float16(0)
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


@T.prim_func
def seed_after(A: T.Buffer((128,), "float16")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        smem[0] = T.float16(0)
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


def test_seed_wgmma_after_shared_store():
    # smem[0] is inside both operands: the generic store must be fenced before the wgmma's
    # async read, and one fence right before it suffices for the proxies (after wgmma.fence,
    # which orders registers, not shared memory). Ordering the other threads' stores before
    # the wgmma is InsertSharedBarriers' job (tilewave.lower puts a barrier there);
    # test_oracle checks the lowered kernel, and that it races without the fence.
    check(seed_before, seed_after)


@T.prim_func
def descriptor_only(A: T.Buffer((128,), "float16")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


def test_descriptor_encoding_is_not_shared_traffic():
    # The encoding takes smem's address but touches no shared memory, and nothing else
    # does before the wgmma: there is no generic access to fence. (The wgmma reads shared
    # memory nothing wrote, which racecheck reports as a warning, not an error.)
    unchanged(descriptor_only)


# ---------------------------------------------------------------------------------------
# Shared store -> bulk / TMA store (with the commit + wait handshake already there)
# ---------------------------------------------------------------------------------------


@T.prim_func
def store_then_bulk_store(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        smem[tx] = A[tx] + T.float32(1)
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def store_then_bulk_store_fenced(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        smem[tx] = A[tx] + T.float32(1)
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.fence("proxy", "async", "shared::cta", "")
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)


def test_store_then_bulk_store_fenced_after_the_barrier():
    # bar.sync orders threads, not proxies: the fence is still needed after it.
    check(store_then_bulk_store, store_then_bulk_store_fenced)


@T.prim_func
def store_then_tma_store(A: T.Buffer((64, 64), "float16"), tmap: T.handle):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((64 * 64,), "float16", scope="shared")
        smem[tx] = T.float16(0)
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 0, smem.data)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def store_then_tma_store_fenced(A: T.Buffer((64, 64), "float16"), tmap: T.handle):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((64 * 64,), "float16", scope="shared")
        smem[tx] = T.float16(0)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 0, smem.data)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_store_then_tma_store():
    check(store_then_tma_store, store_then_tma_store_fenced)


# ---------------------------------------------------------------------------------------
# ldmatrix / stmatrix (generic) -> wgmma (async)
# ---------------------------------------------------------------------------------------


@T.prim_func
def stmatrix_then_wgmma(A: T.Buffer((128,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.ldmatrix.sync.aligned.m8n8.x1.shared.b16(
            acc[0], T.address_of(smem[tx // 32 * 64 + tx % 8 * 8])
        )
        T.ptx.stmatrix.sync.aligned.m8n8.x1.shared.b16(
            T.address_of(smem[tx // 32 * 64 + tx % 8 * 8]), acc[0]
        )
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


@T.prim_func
def stmatrix_then_wgmma_fenced(A: T.Buffer((128,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.ldmatrix.sync.aligned.m8n8.x1.shared.b16(
            acc[0], T.address_of(smem[tx // 32 * 64 + tx % 8 * 8])
        )
        T.ptx.stmatrix.sync.aligned.m8n8.x1.shared.b16(
            T.address_of(smem[tx // 32 * 64 + tx % 8 * 8]), acc[0]
        )
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


def test_stmatrix_then_wgmma():
    # Lanes 0-7 of warp w name rows 8w..8w+7 (16 bytes each) of the A operand: the warps'
    # stmatrix rows are disjoint, and each warp's ldmatrix reads the rows it then writes.
    # The stmatrix writes through the generic proxy what the wgmma reads through the async
    # one, so the fence is needed; one after the stmatrix also covers the ldmatrix.
    check(stmatrix_then_wgmma, stmatrix_then_wgmma_fenced)


@T.prim_func
def ldmatrix_then_wgmma(A: T.Buffer((128,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.ldmatrix.sync.aligned.m8n8.x1.shared.b16(
            acc[0], T.address_of(smem[tx // 32 * 64 + tx % 8 * 8])
        )
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


@T.prim_func
def ldmatrix_then_wgmma_fenced(A: T.Buffer((128,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((1024,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.ldmatrix.sync.aligned.m8n8.x1.shared.b16(
            acc[0], T.address_of(smem[tx // 32 * 64 + tx % 8 * 8])
        )
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


def test_ldmatrix_then_wgmma():
    # ldmatrix only reads what the wgmma only reads: no hazard (racecheck reports none
    # without the fence). The op table counts ldmatrix as generic shared traffic, read or
    # not, so the pass fences it: conservative, one fence, and what this test pins down.
    check(ldmatrix_then_wgmma, ldmatrix_then_wgmma_fenced)


# ---------------------------------------------------------------------------------------
# Loops and branches
# ---------------------------------------------------------------------------------------


@T.prim_func
def loop_carried(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(n):
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
            smem[tx] = T.float32(k)


@T.prim_func
def loop_carried_fenced(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(n):
            T.ptx.fence("proxy", "async", "shared::cta", "")
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
            smem[tx] = T.float32(k)


def test_loop_carried_generic_fences_at_the_top_of_the_body():
    check(loop_carried, loop_carried_fenced)


@T.prim_func
def while_carried(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        left = T.alloc_buffer((1,), "int32", scope="local")
        left[0] = n
        while left[0] > 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
            smem[tx] = T.float32(1)
            left[0] = left[0] - 1


@T.prim_func
def while_carried_fenced(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        left = T.alloc_buffer((1,), "int32", scope="local")
        left[0] = n
        while left[0] > 0:
            T.ptx.fence("proxy", "async", "shared::cta", "")
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
            smem[tx] = T.float32(1)
            left[0] = left[0] - 1


def test_while_loop_carried():
    # As for the `for` loop: iteration i's generic store to smem reaches iteration i+1's
    # bulk store (an async read of smem) over the back edge, so the fence goes at the top
    # of the body (redundant, but harmless, on the first iteration). The countdown `left`
    # is local: no shared traffic.
    check(while_carried, while_carried_fenced)


@T.prim_func
def nested_loops(A: T.Buffer((128,), "float32"), n: T.int32):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for i in range(n):
            for _j in range(4):
                T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
                T.ptx.cp.async_.bulk.commit_group()
                T.ptx.cp.async_.bulk.wait_group.read(0)
            for j in range(4):
                smem[j] = T.float32(i)


@T.prim_func
def nested_loops_fenced(A: T.Buffer((128,), "float32"), n: T.int32):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for i in range(n):
            for _j in range(4):
                T.ptx.fence("proxy", "async", "shared::cta", "")
                T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
                T.ptx.cp.async_.bulk.commit_group()
                T.ptx.cp.async_.bulk.wait_group.read(0)
            for j in range(4):
                smem[j] = T.float32(i)


def test_nested_loops_outer_carried_generic_reaches_inner_async():
    check(nested_loops, nested_loops_fenced)


@T.prim_func
def async_then_generic_in_constant_loop(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        smem[tx] = T.float32(0)
        for _j in range(4):
            T.ptx.fence("proxy", "async", "shared::cta", "")
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_loop_with_positive_constant_extent_cannot_be_skipped():
    # The loop surely runs, so the store before it cannot reach the copy after it.
    unchanged(async_then_generic_in_constant_loop)


@T.prim_func
def generic_in_one_branch(A: T.Buffer((128,), "float32"), c: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        if c > 0:
            smem[tx] = T.float32(1)
        else:
            A[tx] = T.float32(2)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def generic_in_one_branch_fenced(A: T.Buffer((128,), "float32"), c: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        if c > 0:
            smem[tx] = T.float32(1)
        else:
            A[tx] = T.float32(2)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_if_else_generic_on_one_branch_joins_to_a_fence():
    check(generic_in_one_branch, generic_in_one_branch_fenced)


@T.prim_func
def fenced_on_both_branches(A: T.Buffer((128,), "float32"), c: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        if c > 0:
            smem[tx] = T.float32(1)
            T.ptx.fence("proxy", "async", "shared::cta", "")
        else:
            smem[tx] = T.float32(2)
            T.tilewave.fence_proxy_async()
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_already_fenced_input_gets_no_new_fence():
    # Both spellings of the fence count: TVM's tirx.ptx.fence_proxy and tilewave's op.
    unchanged(fenced_on_both_branches)


@T.prim_func
def async_then_async(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.tvm_storage_sync("shared")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_async_then_async_needs_no_fence():
    unchanged(async_then_async)


@T.prim_func
def generic_then_two_async(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        smem[tx] = T.float32(1)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 256)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def generic_then_two_async_fenced(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        smem[tx] = T.float32(1)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 256)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_one_fence_serves_a_run_of_async_ops():
    check(generic_then_two_async, generic_then_two_async_fenced)


@T.prim_func
def break_routes_generic_to_exit(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(4):
            T.ptx.fence("proxy", "async", "shared::cta", "")
            if k == n:
                smem[tx] = T.float32(1)
                break
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def break_routes_generic_to_exit_fenced(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(4):
            T.ptx.fence("proxy", "async", "shared::cta", "")
            if k == n:
                smem[tx] = T.float32(1)
                break
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_break_carries_its_state_to_the_loop_exit():
    check(break_routes_generic_to_exit, break_routes_generic_to_exit_fenced)


@T.prim_func
def thread_loop_does_not_carry(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)
        smem[tx] = T.float32(1)


def test_thread_binding_loop_is_one_execution_per_thread():
    unchanged(thread_loop_does_not_carry)


# ---------------------------------------------------------------------------------------
# Opaque and unknown calls
# ---------------------------------------------------------------------------------------


@T.prim_func
def opaque_shared_address(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_extern("void", "fill_tile", smem.data, 128)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def opaque_shared_address_fenced(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_extern("void", "fill_tile", smem.data, 128)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_opaque_call_taking_a_shared_address_is_generic():
    check(opaque_shared_address, opaque_shared_address_fenced)


@T.prim_func
def opaque_access_ptr(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        ptr = T.tvm_access_ptr(T.type_annotation("float32"), smem.data, 0, 128, 2)
        T.call_extern("void", "fill_tile", ptr)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def opaque_access_ptr_fenced(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        ptr = T.tvm_access_ptr(T.type_annotation("float32"), smem.data, 0, 128, 2)
        T.call_extern("void", "fill_tile", ptr)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_opaque_call_through_tvm_access_ptr_is_generic():
    check(opaque_access_ptr, opaque_access_ptr_fenced)


@T.prim_func
def unknown_call(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_extern("void", "log_progress", 7)
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def unknown_call_fenced(A: T.Buffer((128,), "float32")):
    for _tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_extern("void", "log_progress", 7)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def test_unknown_call_is_neutral_by_default():
    unchanged(unknown_call)


def test_unknown_call_is_generic_in_conservative_mode():
    check(unknown_call, unknown_call_fenced, conservative=True)


def test_user_registered_intrinsics_drive_the_state():
    tilewave.register_intrinsic("log_progress", "generic")
    try:
        check(unknown_call, unknown_call_fenced)
    finally:
        tilewave.unregister_intrinsic("log_progress")
    tilewave.register_intrinsic("log_progress", "async")
    try:
        # async -> async: still nothing to fence.
        unchanged(unknown_call)
    finally:
        tilewave.unregister_intrinsic("log_progress")


# ---------------------------------------------------------------------------------------
# Bulk-store handshake normalisation
# ---------------------------------------------------------------------------------------


@T.prim_func
def bare_bulk_store(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)


@T.prim_func
def bare_bulk_store_handshake(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)


def test_handshake_inserted_after_a_lone_bulk_store():
    check(bare_bulk_store, bare_bulk_store_handshake)


@T.prim_func
def tma_store_commit_only(A: T.Buffer((64, 64), "float16"), tmap: T.handle):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((64 * 64,), "float16", scope="shared")
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 0, smem.data)
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 32, smem.data)
        T.ptx.cp.async_.bulk.commit_group()
        A[0, tx] = T.float16(0)


@T.prim_func
def tma_store_commit_only_fixed(A: T.Buffer((64, 64), "float16"), tmap: T.handle):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((64 * 64,), "float16", scope="shared")
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 0, smem.data)
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 32, smem.data)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)
        A[0, tx] = T.float16(0)


def test_handshake_wait_inserted_after_an_existing_commit():
    check(tma_store_commit_only, tma_store_commit_only_fixed)


@T.prim_func
def tma_store_deferred_wait(A: T.Buffer((64, 64), "float16"), tmap: T.handle):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((64 * 64,), "float16", scope="shared")
        T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](tmap, 0, 0, smem.data)
        T.ptx.cp.async_.bulk.commit_group()
        A[0, tx] = T.float16(0)
        T.ptx.cp.async_.bulk.wait_group(0)


def test_handshake_already_there_is_left_alone():
    unchanged(tma_store_deferred_wait)


# ---------------------------------------------------------------------------------------
# Targets, the module pass, bad inputs
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["sm_80", "gfx942", "gfx1200"])
def test_targets_without_async_proxy_are_left_alone(target):
    unchanged(seed_before, target=target)


def test_force_transforms_on_any_target():
    check(seed_before, seed_after, target="sm_80", force=True)


def test_target_from_function_attribute_and_context():
    sm80 = seed_before.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    assert inject_fence_proxy(sm80).same_as(sm80)
    with tvm.target.Target({"kind": "cuda", "arch": "sm_80"}):
        assert inject_fence_proxy(seed_before).same_as(seed_before)
    # The explicit argument wins over the attribute.
    assert not inject_fence_proxy(sm80, target=SM90).same_as(sm80)


def test_no_target_anywhere_means_sm90a():
    assert tvm.target.Target.current(allow_none=True) is None
    expected = seed_after.with_attr("global_symbol", "seed_before")
    tvm.ir.assert_structural_equal(inject_fence_proxy(seed_before), expected)


def test_module_pass_handles_every_kernel():
    mod = tvm.IRModule({"a": seed_before, "b": stmatrix_then_wgmma, "c": async_then_async})
    out = InjectFenceProxy(target=SM90)(mod)
    tvm.ir.assert_structural_equal(out["a"], seed_after.with_attr("global_symbol", "seed_before"))
    tvm.ir.assert_structural_equal(
        out["b"], stmatrix_then_wgmma_fenced.with_attr("global_symbol", "stmatrix_then_wgmma")
    )
    assert out["c"].same_as(mod["c"])
    assert mod["a"].same_as(seed_before)  # the input module is not modified
    tvm.ir.assert_structural_equal(InjectFenceProxy(target=SM90)(out), out)


def test_module_pass_composes_in_sequential():
    mod = tvm.IRModule({"main": seed_before})
    seq = tvm.transform.Sequential([InjectFenceProxy(), InjectFenceProxy()])
    tvm.ir.assert_structural_equal(
        seq(mod)["main"], seed_after.with_attr("global_symbol", "seed_before")
    )


def test_non_primfunc_is_rejected():
    with pytest.raises(MalformedKernelError, match=r"expected a tvm.tirx.PrimFunc, got IRModule"):
        inject_fence_proxy(tvm.IRModule({"main": seed_before}))


def test_unknown_target_is_rejected():
    with pytest.raises(UnknownTargetError, match=r"unknown target 'sm_42'"):
        inject_fence_proxy(seed_before, target="sm_42")
    with pytest.raises(UnknownTargetError, match=r"unknown target 'volta'"):
        InjectFenceProxy(target="volta")


def test_bad_option_is_rejected():
    with pytest.raises(PassOptionError, match=r"option conservative must be True or False"):
        inject_fence_proxy(seed_before, conservative="yes")
    with pytest.raises(PassOptionError, match=r"option force must be True or False, got 1"):
        InjectFenceProxy(force=1)


# ---------------------------------------------------------------------------------------
# CUDA source
# ---------------------------------------------------------------------------------------


def _cuda_kernel_source(func: tirx.PrimFunc) -> str:
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    ex = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "k")}), target=target)
    source = ex.mod.imports[0].inspect_source()
    return source[source.index('extern "C" __global__ void __launch_bounds__(128) k_kernel(') :]


def _call_line(source: str, fragment: str) -> int:
    for number, line in enumerate(source.splitlines()):
        if fragment in line:
            return number
    raise AssertionError(f"{fragment!r} not in the kernel body:\n{source}")


def test_cuda_source_has_the_fence_between_the_store_and_the_wgmma():
    fenced = inject_fence_proxy(seed_before, target=SM90)
    kernel = _cuda_kernel_source(fenced)
    store = _call_line(kernel, "smem_ptr[0] = ")
    fence = _call_line(kernel, "fence_proxy")
    wgmma = _call_line(kernel, "wgmma_f16_ss")
    assert store < fence < wgmma
    full = tvm.compile(
        tvm.IRModule({"main": fenced.with_attr("global_symbol", "k")}),
        target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}),
    ).mod.imports[0].inspect_source()
    assert re.search(r'asm volatile\("fence\.proxy\.async\.shared::cta;"', full)


def test_cuda_source_fences_the_bulk_store_after_the_barrier():
    kernel = _cuda_kernel_source(inject_fence_proxy(store_then_bulk_store, target=SM90))
    barrier = _call_line(kernel, "__syncthreads()")
    fence = _call_line(kernel, "fence_proxy")
    copy = _call_line(kernel, "cp_async_bulk_s2g")
    commit = _call_line(kernel, "commit_group")
    wait = _call_line(kernel, "wait_group")
    assert barrier < fence < copy < commit < wait
    assert "fence_proxy" not in _cuda_kernel_source(store_then_bulk_store)


# ---------------------------------------------------------------------------------------
# The H100 example script
# ---------------------------------------------------------------------------------------

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fence_proxy_tma_store_h100.py"


def _load_example():
    return load_module(_EXAMPLE)


def test_example_emit_writes_a_fenced_kernel(tmp_path):
    _load_example().main(["--emit", str(tmp_path)])
    launch = json.loads((tmp_path / "launch.json").read_text())
    fenced = (tmp_path / "fenced.cu").read_text()
    unfenced = (tmp_path / "unfenced.cu").read_text()
    definition = fenced.rindex(f"{launch['kernel']}(float")
    body = fenced[fenced.index("{", definition):]
    calls = [line.split("(")[0].strip() for line in body.splitlines() if "tvm_builtin_ptx" in line]
    assert calls == [
        "tvm_builtin_ptx_fence_proxy_proxy_async_shared__cta",
        "tvm_builtin_ptx_cp_async_bulk_s2g_async_bulk_global_shared__cta_bulk_group",
        "tvm_builtin_ptx_cp_async_bulk_commit_group_async_bulk_commit_group",
        "tvm_builtin_ptx_cp_async_bulk_wait_group_async_bulk_wait_group_read_0",
    ]
    assert body.index("__syncthreads()") < body.index("tvm_builtin_ptx_fence_proxy")
    assert 'asm volatile("fence.proxy.async.shared::cta;"' in fenced
    assert "fence.proxy.async" not in unfenced and "commit_group" in unfenced


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvcc") is None or importlib.util.find_spec("cupy") is None,
                    reason="needs nvcc and cupy (an NVIDIA sm_90a GPU)")
def test_example_runs_on_the_gpu(tmp_path):
    example = _load_example()
    example.main(["--emit", str(tmp_path)])
    assert example.main(["--run", str(tmp_path), "--repeats", "5"]) == 0


def test_docs_before_after_pair_is_what_the_pass_produces(tmp_path):
    doc = (_EXAMPLE.parents[1] / "docs" / "passes" / "inject_fence_proxy.md").read_text()
    before_src, after_src = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
    module_file = tmp_path / "doc_pair.py"
    module_file.write_text("from tvm.script import tirx as T\n" + before_src + after_src)
    module = load_module(module_file)
    out = inject_fence_proxy(module.before, target=SM90)
    tvm.ir.assert_structural_equal(out, module.after.with_attr("global_symbol", "before"))
