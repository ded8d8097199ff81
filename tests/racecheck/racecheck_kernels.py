"""Minimal kernels for racecheck: one buggy and one fixed kernel per class of bug.

Each ``<name>_bug`` kernel has exactly the synchronisation bug its name says; ``<name>_ok`` is
the same kernel with the bug fixed the way a GPU programmer would fix it.
"""

from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*

# -- RAW through two views of one dynamic-shared allocation --------------------------------


@T.prim_func
def view_raw_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        buf = T.alloc_buffer((512,), "uint8", scope="shared.dyn")
        S = T.decl_buffer((64,), "float32", data=buf.data, scope="shared.dyn", elem_offset=64)
        W = T.decl_buffer((128,), "float32", data=buf.data, scope="shared.dyn")
        S[tx] = A[tx]
        B[tx] = W[127 - tx]  # W[64..127] are S's bytes, written by thread 63 - tx


@T.prim_func
def view_raw_ok(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        buf = T.alloc_buffer((512,), "uint8", scope="shared.dyn")
        S = T.decl_buffer((64,), "float32", data=buf.data, scope="shared.dyn", elem_offset=64)
        W = T.decl_buffer((128,), "float32", data=buf.data, scope="shared.dyn")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        B[tx] = W[127 - tx]


# -- WAR across loop iterations ----------------------------------------------------------


@T.prim_func
def loop_war_bug(A: T.Buffer((4, 64), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
        for k in range(4):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            acc[0] = acc[0] + S[63 - tx]
        B[tx] = acc[0]


@T.prim_func
def loop_war_ok(A: T.Buffer((4, 64), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
        for k in range(4):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            acc[0] = acc[0] + S[63 - tx]
            T.tvm_storage_sync("shared")
        B[tx] = acc[0]


# -- WAW with different element sizes -----------------------------------------------------


@T.prim_func
def bytes_waw_bug(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        buf = T.alloc_buffer((256,), "uint8", scope="shared")
        H = T.decl_buffer((128,), "float16", data=buf.data, scope="shared")
        S = T.decl_buffer((64,), "float32", data=buf.data, scope="shared")
        S[tx] = A[tx]
        H[(63 - tx) * 2 + 1] = T.float16(0)  # the upper half of S[63 - tx]


@T.prim_func
def bytes_waw_ok(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        buf = T.alloc_buffer((256,), "uint8", scope="shared")
        H = T.decl_buffer((128,), "float16", data=buf.data, scope="shared")
        S = T.decl_buffer((64,), "float32", data=buf.data, scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        H[(63 - tx) * 2 + 1] = T.float16(0)


# -- cp.async: the wait placed before the commit -------------------------------------------


@T.prim_func
def cp_async_bug(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.ptx["cp.async.wait_group"](0)  # retires committed groups only: this copy has none
        T.ptx["cp.async.commit_group"]()
        T.tvm_storage_sync("shared")
        B[tx] = S[(63 - tx) * 4]


@T.prim_func
def cp_async_ok(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.ptx["cp.async.commit_group"]()
        T.ptx["cp.async.wait_group"](0)
        T.tvm_storage_sync("shared")
        B[tx] = S[(63 - tx) * 4]


# -- bulk copy into shared completing on an mbarrier ---------------------------------------


@T.prim_func
def tma_load_no_wait_bug(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(1))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bar[0]), T.uint32(512))
            T.ptx.cp.async_.bulk.shared__cta.global_.mbarrier__complete_tx__bytes(
                T.address_of(S[0]), T.address_of(A[0]), T.uint32(512), T.address_of(bar[0])
            )
        B[tx] = S[127 - tx]  # nobody waited for the phase the copy completes


@T.prim_func
def tma_load_ok(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(1))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bar[0]), T.uint32(512))
            T.ptx.cp.async_.bulk.shared__cta.global_.mbarrier__complete_tx__bytes(
                T.address_of(S[0]), T.address_of(A[0]), T.uint32(512), T.address_of(bar[0])
            )
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))
        B[tx] = S[127 - tx]


@T.prim_func
def tma_load_no_expect_tx_bug(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(1))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        if tx == 0:
            # no transaction bytes: the arrival alone completes the phase, before the data lands
            T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
            T.ptx.cp.async_.bulk.shared__cta.global_.mbarrier__complete_tx__bytes(
                T.address_of(S[0]), T.address_of(A[0]), T.uint32(512), T.address_of(bar[0])
            )
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))
        B[tx] = S[127 - tx]


@T.prim_func
def mbarrier_wrong_parity_bug(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(128))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        S[tx] = A[tx]
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):  # phase 0 completed: parity 1 is the phase after it
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(1))
        B[tx] = S[127 - tx]


@T.prim_func
def mbarrier_ok(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(128))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        S[tx] = A[tx]
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))
        B[tx] = S[127 - tx]


@T.prim_func
def mbarrier_short_count_bug(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(160))  # 128 arrive
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        S[tx] = A[tx]
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))
        B[tx] = S[127 - tx]


@T.prim_func
def mbarrier_init_unpublished_bug(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(128))
        # no fence.mbarrier_init + barrier: other threads may arrive before the init
        S[tx] = A[tx]
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bar[0]))
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))
        B[tx] = S[127 - tx]


# -- TMA store: generic writes read by the async proxy -------------------------------------


@T.prim_func
def bulk_store_no_fence_bug(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx] + T.float32(1)
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, S.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)


@T.prim_func
def bulk_store_ok(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx] + T.float32(1)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, S.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
        T.tvm_storage_sync("shared")
        S[tx] = T.float32(0)


@T.prim_func
def bulk_store_reuse_bug(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx] + T.float32(1)
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, S.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
        T.tvm_storage_sync("shared")
        S[tx] = T.float32(0)  # the bulk copy may still be reading S: no wait_group.read


# -- wgmma reading shared through descriptors ----------------------------------------------


@T.prim_func
def wgmma_no_fence_bug(A: T.Buffer((2048,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((2048,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        for i in range(16):
            smem[i * 128 + tx] = A[i * 128 + tx]
        T.tvm_storage_sync("shared")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)


@T.prim_func
def wgmma_ok(A: T.Buffer((2048,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((2048,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        for i in range(16):
            smem[i * 128 + tx] = A[i * 128 + tx]
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.tvm_storage_sync("shared")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(0)
        T.tvm_storage_sync("shared")
        for i in range(16):
            smem[i * 128 + tx] = T.float16(0)


@T.prim_func
def wgmma_overwrite_bug(A: T.Buffer((2048,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((2048,), "float16", scope="shared")
        acc = T.alloc_buffer((4,), "float32", scope="local")
        desc = T.alloc_buffer((1,), "uint64", scope="local")
        for i in range(16):
            smem[i * 128 + tx] = A[i * 128 + tx]
        T.ptx.fence("proxy", "async", "shared::cta", "")
        T.tvm_storage_sync("shared")
        T.cuda.wgmma.encode_matrix_descriptor(desc.data, smem.data, 8, 16, 0)
        T.ptx.wgmma.fence.sync.aligned()
        T.ptx.wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16(
            acc[0], acc[1], acc[2], acc[3], desc[0], desc[0], T.bool(True), 1, 1, 0, 0
        )
        T.ptx.wgmma.commit_group.sync.aligned()
        T.tvm_storage_sync("shared")  # orders the threads, not the wgmma still reading
        for i in range(16):
            smem[i * 128 + tx] = T.float16(0)
        T.ptx.wgmma.wait_group.sync.aligned(0)


# -- named barriers ------------------------------------------------------------------------


@T.prim_func
def named_count_bug(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(384))  # counts threads that never come
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(384))
                B[k, tx - 128] = S[255 - tx]
                T.ptx.bar.arrive(T.uint32(2), T.uint32(256))


@T.prim_func
def named_missing_war_bug(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx]


@T.prim_func
def named_all_sync_bug(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:  # bar.sync is aligned: both roles must not sync from two sites
                S[tx] = A[k, tx]
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx]
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))


@T.prim_func
def named_all_sync_ok(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:  # barrier.sync without .aligned may be reached from any site
                S[tx] = A[k, tx]
                T.ptx.barrier.sync(T.uint32(1), T.uint32(256))
                T.ptx.barrier.sync(T.uint32(2), T.uint32(256))
            else:
                T.ptx.barrier.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx]
                T.ptx.barrier.sync(T.uint32(2), T.uint32(256))


@T.prim_func
def named_explicit_aligned_bug(A: T.Buffer((8, 128), "float32"),
                               B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                T.ptx.barrier.sync.aligned(T.uint32(1), T.uint32(256))
                T.ptx.barrier.sync.aligned(T.uint32(2), T.uint32(256))
            else:
                T.ptx.barrier.sync.aligned(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx]
                T.ptx.barrier.sync.aligned(T.uint32(2), T.uint32(256))


@T.prim_func
def named_arrive_sync_ok(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:  # PTX's producer/consumer form: one blocking site per generation
                S[tx] = A[k, tx]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx]
                T.ptx.bar.arrive(T.uint32(2), T.uint32(256))


@T.prim_func
def syncthreads_in_branches_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:  # every thread reaches a __syncthreads(), but not the same one
            S[tx] = A[tx]
            T.tvm_storage_sync("shared")
        else:
            T.tvm_storage_sync("shared")
            B[tx] = S[tx - 32]


@T.prim_func
def syncthreads_in_branches_ok(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        if tx < 32:
            S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        if tx >= 32:
            B[tx] = S[tx - 32]


# -- split barriers ------------------------------------------------------------------------


@T.prim_func
def split_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(0)
        B[tx] = S[63 - tx]  # read before the wait half
        T.tilewave.barrier_wait(0)


@T.prim_func
def split_ok(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(0)
        B[tx] = A[tx] * T.float32(3)
        T.tilewave.barrier_wait(0)
        B[tx] = S[63 - tx]


@T.prim_func
def split_wait_unsignalled_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_wait(0)
        B[tx] = S[63 - tx]


# -- block barrier not reached by every thread ---------------------------------------------


@T.prim_func
def divergent_barrier_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        if tx < 32:
            T.tvm_storage_sync("shared")
        B[tx] = S[63 - tx]


# -- out of bounds and uninitialised -------------------------------------------------------


@T.prim_func
def out_of_bounds_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx + 1] = A[tx]
        T.tvm_storage_sync("shared")
        B[tx] = S[tx]


@T.prim_func
def uninitialised_bug(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        B[tx] = S[64 + tx]


@T.prim_func
def in_bounds_ok(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        B[tx] = S[63 - tx]


# -- AMD: LDS DMA completes on vmcnt -------------------------------------------------------


@T.prim_func
def lds_dma_bug(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                           T.address_of(S[tx // 64 * 64]), 4, 0, 0)
        T.tilewave.lds_barrier()  # an AMD barrier orders completed accesses only
        B[tx] = S[127 - tx]


@T.prim_func
def lds_dma_ok(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                           T.address_of(S[tx // 64 * 64]), 4, 0, 0)
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        B[tx] = S[127 - tx]


# -- inputs racecheck refuses (tests of its error messages) -------------------------------


@T.prim_func
def no_threads(A: T.Buffer((4,), "float32")):
    for i in range(4):
        A[i] = T.float32(0)


@T.prim_func
def scalar_param(A: T.Buffer((64,), "float32"), n: T.int32):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for _i in range(n):
            A[tx] = A[tx] + T.float32(1)


@T.prim_func
def opaque_shared_call(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        T.call_extern("void", "fill_tile", S.data, 64)
        A[tx] = S[tx]


@T.prim_func
def tma_tensor_load(A_map: T.handle("tensormap"), B: T.Buffer((4096,), "float16")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((4096,), "float16", scope="shared")
        bar = T.alloc_buffer((1,), "uint64", scope="shared")
        ready = T.alloc_buffer((1,), "uint32", scope="local")
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), T.uint32(1))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bar[0]), T.uint32(8192))
            T.ptx["cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"](
                T.address_of(S[0]), T.address_of(A_map), 0, 0, T.address_of(bar[0])
            )
        ready[0] = T.uint32(0)
        while ready[0] == T.uint32(0):
            T.ptx.mbarrier.try_wait.parity.shared.b64(ready[0], T.address_of(bar[0]), T.uint32(0))
        for i in range(32):
            B[i * 128 + tx] = S[4095 - i * 128 - tx]
