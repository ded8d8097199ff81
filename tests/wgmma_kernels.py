"""A small kernel whose wgmma reads shared tiles that plain stores filled, shared by the
barrier-pass and verifier tests (each builds the variant it needs)."""

from tvm.script import tirx as T


def wgmma_after_stores(fence=False, storage_sync=False, lds_barrier=False):
    """Threads fill a 128B-swizzled A tile and a B tile with plain stores; one wgmma reads
    both through the matrix descriptors built from their addresses (nowhere else named by
    the call). ``fence`` / ``storage_sync``: a generic->async proxy fence / a block barrier
    right after the stores; ``lds_barrier``: tilewave's barrier right before the wgmma."""

    @T.prim_func
    def wgmma_reads(A: T.Buffer((4096,), "float16")):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            A_s = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
            B_s = T.alloc_buffer((512,), "float16", scope="shared.dyn")
            acc = T.alloc_buffer((4,), "float32", scope="local")
            desc_a = T.alloc_buffer((1,), "uint64", scope="local")
            desc_b = T.alloc_buffer((1,), "uint64", scope="local")
            for i in range(32):
                A_s[i * 128 + tx] = A[i * 128 + tx]
            for i in range(4):
                B_s[i * 128 + tx] = A[i * 128 + tx]
            if fence:
                T.ptx["fence.proxy.async.shared::cta"]()
            if storage_sync:
                T.tvm_storage_sync("shared")
            T.ptx.wgmma.fence.sync.aligned()
            T.cuda.wgmma.encode_matrix_descriptor(desc_a.data, T.address_of(A_s[0]), 1, 64, 3)
            T.cuda.wgmma.encode_matrix_descriptor(desc_b.data, T.address_of(B_s[0]), 1, 64, 3)
            if lds_barrier:
                T.tilewave.lds_barrier()
            T.ptx["wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"](
                acc[0], acc[1], acc[2], acc[3], desc_a[0], desc_b[0], T.bool(True), 1, 1, 0, 0
            )
            T.ptx.wgmma.commit_group.sync.aligned()
            T.ptx.wgmma.wait_group.sync.aligned(0)

    return wgmma_reads.with_attr("global_symbol", "wgmma_reads")
