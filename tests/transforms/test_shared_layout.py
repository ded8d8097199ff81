"""Shared layout for addressed shared tiles: TVM's passes before, tilewave's stages after."""

from __future__ import annotations

import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import s_tir, tirx
from tvm.script import tirx as T

from tilewave.analysis.shared_buffers import shared_buffers_addressed
from tilewave.errors import MalformedKernelError
from tilewave.ir.walker import post_order_visit
from tilewave.transforms.shared_layout import (
    CompactBufferAllocation,
    PlanSharedLayout,
    StorageRewrite,
    _pin,
    _unpin,
    address_alignment,
    keep_addressed_shared,
    plan_dynamic_shared,
    shared_layout,
)

BULK_STORE = "cp.async.bulk.global.shared::cta.bulk_group"


def _run(pass_: tvm.transform.Pass, func: tirx.PrimFunc) -> tirx.PrimFunc:
    return pass_(tvm.IRModule({"main": func}))["main"]


def _alloc_shape(func: tirx.PrimFunc, name: str) -> list[int]:
    shapes = []

    def visit(node):
        if isinstance(node, tirx.AllocBuffer) and node.buffer.name == name:
            shapes.append([int(x) for x in node.buffer.ty.shape])

    post_order_visit(func.body, visit)
    return shapes[0] if shapes else []


# ---------------------------------------------------------------------------------------
# CompactBufferAllocation: a 4-stage ring addressed at its stage starts keeps all stages
# ---------------------------------------------------------------------------------------


@T.prim_func
def addressed_ring(A: T.Buffer((256,), "float16")):
    T.func_attr({"global_symbol": "addressed_ring"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        ring = T.alloc_buffer((4 * 64,), "float16", scope="shared.dyn")
        plain = T.alloc_buffer((64,), "float32", scope="shared")
        if tx == 0:
            for s in range(4):
                T.ptx[BULK_STORE](T.address_of(A[s * 64]), T.address_of(ring[s * 64]), 128)
        plain[tx % 32] = T.float32(1)


@T.prim_func
def addressed_ring_pinned(A: T.Buffer((256,), "float16")):
    T.func_attr({"global_symbol": "addressed_ring"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        ring = T.alloc_buffer((4 * 64,), "float16", scope="shared.dyn")
        T.evaluate(ring.data)
        plain = T.alloc_buffer((64,), "float32", scope="shared")
        if tx == 0:
            for s in range(4):
                T.ptx[BULK_STORE](T.address_of(A[s * 64]), T.address_of(ring[s * 64]), 128)
        plain[tx % 32] = T.float32(1)
        T.evaluate(ring.data)


def test_pins_mark_an_addressed_buffer_after_its_allocation_and_at_its_scope_end():
    ring = shared_buffers_addressed(addressed_ring.body)
    pinned = addressed_ring.with_body(_pin(addressed_ring.body, ring))
    tvm.ir.assert_structural_equal(pinned, addressed_ring_pinned, map_free_vars=True)
    tvm.ir.assert_structural_equal(_unpin(pinned.body, ring), addressed_ring.body)


def test_tvm_compaction_shrinks_an_addressed_ring():
    # before: TVM sizes the ring from its address_of expressions (3 stages + 1 element)
    compacted = _run(s_tir.transform.CompactBufferAllocation(), addressed_ring)
    assert _alloc_shape(compacted, "ring") == [3 * 64 + 1]


def test_compaction_keeps_an_addressed_ring_and_still_compacts_the_rest():
    after = _run(CompactBufferAllocation(), addressed_ring)
    assert _alloc_shape(after, "ring") == [4 * 64]
    assert _alloc_shape(after, "plain") == [32]  # TVM's compaction still runs on it


def _pins_ignored_then(tvm_pass):
    """``tvm_pass`` after a pass that removes tilewave's pins: what a TVM pass that no longer
    honours them would do."""

    def drop_pins(mod, _ctx):
        funcs = {
            gvar: func.with_body(_unpin(func.body, shared_buffers_addressed(func.body)))
            for gvar, func in mod.functions.items()
        }
        return tvm.IRModule(funcs, attrs=mod.attrs)

    pins_dropped = tvm.transform.module_pass(drop_pins, opt_level=0, name="drop_pins")
    return lambda: tvm.transform.Sequential([pins_dropped, tvm_pass()])


def test_a_pass_that_shrinks_an_addressed_tile_all_the_same_is_refused():
    wrapped = keep_addressed_shared(
        _pins_ignored_then(s_tir.transform.CompactBufferAllocation),
        "s_tir.CompactBufferAllocation",
    )
    with pytest.raises(MalformedKernelError) as caught:
        _run(wrapped, addressed_ring)
    assert str(caught.value) == (
        "s_tir.CompactBufferAllocation shrank shared buffer 'ring' in function "
        "'addressed_ring' from 512 to 386 bytes, although the kernel takes its address (an "
        "async copy, a matrix descriptor or an mbarrier may use bytes TVM's pass does not "
        "see); its async ops would read or write past the new end. Disable the pass for "
        'this kernel: PassContext(disabled_pass=["s_tir.CompactBufferAllocation"]).'
    )


def test_compaction_wrapper_is_exact_on_addressed_buffers():
    @T.prim_func
    def expected(A: T.Buffer((256,), "float16")):
        T.func_attr({"global_symbol": "addressed_ring"})
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            ring = T.alloc_buffer((4 * 64,), "float16", scope="shared.dyn")
            if tx == 0:
                for s in range(4):
                    T.ptx[BULK_STORE](T.address_of(A[s * 64]), T.address_of(ring[s * 64]), 128)

    tvm.ir.assert_structural_equal(_run(CompactBufferAllocation(), expected), expected)


# ---------------------------------------------------------------------------------------
# StorageRewrite: no reuse of an addressed buffer's memory
# ---------------------------------------------------------------------------------------


@T.prim_func
def reuse_after_async_read(A: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "reuse_after_async_read"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        tile = T.alloc_buffer((32,), "float32", scope="shared")
        later = T.alloc_buffer((32,), "float32", scope="shared")
        tile[tx] = A[tx]
        if tx == 0:
            # an async read of `tile` that is still running after this statement
            T.ptx[BULK_STORE](T.address_of(A[32]), T.address_of(tile[0]), 128)
        later[tx] = A[tx + 64]
        A[tx + 96] = later[31 - tx]


def _shared_allocs(func: tirx.PrimFunc) -> list[str]:
    names: list[str] = []

    def visit(node):
        if isinstance(node, tirx.AllocBuffer) and str(node.buffer.ty.storage_scope) == "shared":
            names.append(node.buffer.name)

    post_order_visit(func.body, visit)
    return names


def test_tvm_storage_rewrite_reuses_a_tile_an_async_copy_may_still_read():
    # before: `later` is folded into `tile`'s memory after tile's last syntactic use
    assert _shared_allocs(_run(tirx.transform.StorageRewrite(), reuse_after_async_read)) == [
        "tile"
    ]


@T.prim_func
def reuse_after_async_read_kept(A: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "reuse_after_async_read"})
    # StorageRewrite hoists both allocations; `later` gets memory of its own
    tile = T.alloc_buffer((32,), "float32", scope="shared")
    later = T.alloc_buffer((32,), "float32", scope="shared")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        tile[tx] = A[tx]
        if tx == 0:
            T.ptx[BULK_STORE](T.address_of(A[32]), T.address_of(tile[0]), 128)
        later[tx] = A[tx + 64]
        A[tx + 96] = later[31 - tx]


def test_storage_rewrite_keeps_an_addressed_tile_to_itself():
    after = _run(StorageRewrite(), reuse_after_async_read)
    tvm.ir.assert_structural_equal(after, reuse_after_async_read_kept)


def test_wrapped_passes_keep_tvm_pass_names():
    assert CompactBufferAllocation().info.name == "s_tir.CompactBufferAllocation"
    assert StorageRewrite().info.name == "tirx.StorageRewrite"
    assert PlanSharedLayout().info.name == "tilewave.PlanSharedLayout"


# ---------------------------------------------------------------------------------------
# PlanSharedLayout: one dynamic buffer, 1024-aligned tiles
# ---------------------------------------------------------------------------------------


# The stage runs on lowered kernels (thread extents as launch_thread), where TVM's merge acts.


@T.prim_func
def address_only_dyn(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "address_only_dyn"})
    with T.launch_thread("threadIdx.x", 64) as tx:
        tile = T.alloc_buffer((8192,), "float16", scope="shared.dyn")
        bar = T.alloc_buffer((2,), "uint64", scope="shared.dyn")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[1]), T.uint32(1))
            T.ptx[BULK_STORE](T.address_of(A[0]), T.address_of(tile[0]), 128)


@T.prim_func
def address_only_dyn_planned(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "address_only_dyn"})
    with T.launch_thread("threadIdx.x", 64) as tx:
        # tile: 16 KiB at 0 (1024-aligned); bar: 16 B at 16384
        buf_dyn_shmem = T.alloc_buffer((16400,), "uint8", scope="shared.dyn", align=1024)
        tile = T.decl_buffer((8200,), "float16", data=buf_dyn_shmem.data, scope="shared.dyn")
        bar = T.decl_buffer((2050,), "uint64", data=buf_dyn_shmem.data, scope="shared.dyn")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[2049]), T.uint32(1))
            T.ptx[BULK_STORE](T.address_of(A[0]), T.address_of(tile[0]), 128)


def test_tvm_merge_fails_on_address_only_dynamic_buffers():
    # before: TVM's pass cannot place buffers it never sees loaded or stored
    with pytest.raises(tvm.error.InternalError, match="buffer_byte_offsets"):
        s_tir.transform.MergeSharedMemoryAllocations()(tvm.IRModule({"main": address_only_dyn}))


def test_plan_places_address_only_dynamic_buffers():
    tvm.ir.assert_structural_equal(_run(PlanSharedLayout(), address_only_dyn),
                                   address_only_dyn_planned)


@T.prim_func
def addressed_dyn(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "addressed_dyn"})
    with T.launch_thread("threadIdx.x", 64) as tx:
        C = T.alloc_buffer((100,), "float32", scope="shared.dyn")
        tile = T.alloc_buffer((8192,), "float16", scope="shared.dyn")
        bar = T.alloc_buffer((2,), "uint64", scope="shared.dyn")
        C[tx] = A[tx]
        tile[tx] = T.float16(0)
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[1]), T.uint32(1))
            T.ptx[BULK_STORE](T.address_of(A[0]), tile.data, 128)
        A[tx] = C[tx + 1]


@T.prim_func
def addressed_dyn_planned(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "addressed_dyn"})
    with T.launch_thread("threadIdx.x", 64) as tx:
        # C: 400 B at 0; tile: 16 KiB at 1024 (1024-aligned, addressed); bar: 16 B at
        # 17408 (its declared 64-byte alignment); 17424 B in all
        buf_dyn_shmem = T.alloc_buffer((17424,), "uint8", scope="shared.dyn", align=1024)
        C = T.decl_buffer((4356,), "float32", data=buf_dyn_shmem.data, scope="shared.dyn")
        tile = T.decl_buffer((8712,), "float16", data=buf_dyn_shmem.data, scope="shared.dyn")
        bar = T.decl_buffer((2178,), "uint64", data=buf_dyn_shmem.data, scope="shared.dyn")
        C[tx] = A[tx]
        tile[tx + 512] = T.float16(0)
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[2177]), T.uint32(1))
            T.ptx[BULK_STORE](T.address_of(A[0]), T.address_of(tile[512]), 128)
        A[tx] = C[tx + 1]


def _tile_byte_offset(func: tirx.PrimFunc) -> int:
    offsets = []

    def visit(node):
        if isinstance(node, tirx.BufferStore) and node.buffer.name == "tile":
            offsets.append(2 * (int(node.indices[0].b.value)))

    post_order_visit(func.body, visit)
    return offsets[0]


@T.prim_func
def stored_and_addressed_dyn(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "stored_and_addressed_dyn"})
    with T.launch_thread("threadIdx.x", 64) as tx:
        C = T.alloc_buffer((100,), "float32", scope="shared.dyn")
        tile = T.alloc_buffer((8192,), "float16", scope="shared.dyn")
        C[tx] = A[tx]
        tile[tx] = T.float16(0)
        if tx == 0:
            T.ptx[BULK_STORE](T.address_of(A[0]), tile.data, 128)
        A[tx] = C[tx + 1]


def test_tvm_merge_aligns_a_tile_to_64_bytes_only():
    # before: TVM puts the 16 KiB tile right after C's 400 bytes, at 448 (a 64-byte multiple)
    mod = tvm.IRModule({"main": stored_and_addressed_dyn})
    assert _tile_byte_offset(s_tir.transform.MergeSharedMemoryAllocations()(mod)["main"]) == 448
    assert _tile_byte_offset(PlanSharedLayout()(mod)["main"]) == 1024


def test_plan_merges_dynamic_buffers_with_swizzle_alignment():
    planned = _run(PlanSharedLayout(), addressed_dyn)
    tvm.ir.assert_structural_equal(planned, addressed_dyn_planned)
    assert _tile_byte_offset(planned) == 1024


def test_layout_reports_offsets_and_alignments():
    slots = {s.name: s for s in shared_layout(addressed_dyn)}
    # C and bar keep their declared alignment (TVM's default, 64 bytes)
    assert (slots["C"].offset, slots["C"].alignment, slots["C"].addressed) == (0, 64, False)
    assert (slots["tile"].offset, slots["tile"].alignment, slots["tile"].addressed) == (
        1024, 1024, True
    )
    assert (slots["bar"].offset, slots["bar"].size, slots["bar"].alignment) == (17408, 16, 64)


@T.prim_func
def plain_dyn(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "plain_dyn"})
    with T.launch_thread("threadIdx.x", 64) as tx:
        X = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        Y = T.alloc_buffer((64,), "float32", scope="shared.dyn")
        X[tx] = A[tx]
        Y[tx] = X[63 - tx]
        A[tx] = Y[tx]


def test_kernels_without_addressed_dynamic_buffers_get_tvm_merge():
    assert plan_dynamic_shared(plain_dyn).same_as(plain_dyn)
    expected = s_tir.transform.MergeSharedMemoryAllocations()(tvm.IRModule({"main": plain_dyn}))
    tvm.ir.assert_structural_equal(_run(PlanSharedLayout(), plain_dyn), expected["main"])


@given(st.integers(min_value=1, max_value=1 << 20))
@settings(max_examples=60, deadline=None)
def test_address_alignment_is_the_largest_swizzle_atom_that_fits(size):
    align = address_alignment(size)
    assert align & (align - 1) == 0
    assert 16 <= align <= 1024
    assert align <= max(size, 16)
    assert align == 1024 or align == 16 or 2 * align > size


# ---------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------


@T.prim_func
def unflattened(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "unflattened"})
    for _tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((8, 8), "float32", scope="shared.dyn")
        T.ptx[BULK_STORE](T.address_of(A[0]), T.address_of(S[0, 0]), 128)


def test_multidimensional_buffer_is_rejected_with_the_fix():
    with pytest.raises(MalformedKernelError, match=r"buffer 'S' is not flat.*'unflattened'.*"
                       r"tirx\.FlattenBuffer"):
        plan_dynamic_shared(unflattened)


@T.prim_func
def split_scopes(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "split_scopes"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        if tx < 32:
            X = T.alloc_buffer((64,), "float32", scope="shared.dyn")
            T.ptx[BULK_STORE](T.address_of(A[0]), X.data, 128)
        else:
            Y = T.alloc_buffer((64,), "float32", scope="shared.dyn")
            T.ptx[BULK_STORE](T.address_of(A[0]), Y.data, 128)


def test_dynamic_buffers_in_separate_branches_are_rejected():
    with pytest.raises(MalformedKernelError, match=r"\bY are allocated outside the scope of 'X'"
                       r".*'split_scopes'.*allocate dynamic shared buffers together"):
        plan_dynamic_shared(split_scopes)
