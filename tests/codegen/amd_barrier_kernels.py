"""Kernels of the AMD barrier-wait tests (issue 17): the five shapes the issue names, each
before ``LowerTilewaveOps`` and after it for gfx942 (gfx950 has the same encoding) and
gfx1200, plus kernels for the rules that leave a wait out."""

from tvm.script import tirx as T

import tilewave  # noqa: F401  (registers T.tilewave.* before the kernels are parsed)

LGKMCNT0 = 49279  # s_waitcnt lgkmcnt(0) on gfx9: vmcnt 63 (0xC00F), expcnt 7 (0x70), lgkmcnt 0
VMCNT0 = 3952  # s_waitcnt vmcnt(0): lgkmcnt 15 (0xF00), expcnt 7 (0x70), vmcnt 0


# -- basic barrier ------------------------------------------------------------------------
@T.prim_func
def basic(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "basic"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[255 - tx]


@T.prim_func
def basic_gfx942(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "basic"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(LGKMCNT0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        B[tx] = S[255 - tx]


@T.prim_func
def basic_gfx1200(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "basic"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.dscnt", T.int16(0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        B[tx] = S[255 - tx]


# -- split barrier (gfx12): the wait goes before the signal, the work between still overlaps
@T.prim_func
def split(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"),
          C: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "split"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tilewave.barrier_signal(-1)
        C[tx] = A[tx] * T.float32(3)
        T.tilewave.barrier_wait(-1)
        B[tx] = S[255 - tx]


@T.prim_func
def split_gfx1200(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"),
                  C: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "split"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.dscnt", T.int16(0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.signal", T.int32(-1))
        C[tx] = A[tx] * T.float32(3)
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.wait", T.int16(-1))
        B[tx] = S[255 - tx]


# -- barrier after an LDS DMA: the user's barrier gets vmcnt(0) (no ds_* op is in flight) --
@T.prim_func
def after_dma(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "after_dma"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                           T.address_of(S[tx // 64 * 64]), 4, 0, 0)
        T.tilewave.lds_barrier()
        B[tx] = S[127 - tx] * T.float32(2)


@T.prim_func
def after_dma_gfx942(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "after_dma"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                           T.address_of(S[tx // 64 * 64]), 4, 0, 0)
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(VMCNT0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        B[tx] = S[127 - tx] * T.float32(2)


# InsertSharedBarriers' own form: wait_async_ops(0) then the barrier; the DMA is then waited
# for, and no ds_* op is in flight, so nothing is added
@T.prim_func
def after_dma_waited(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "after_dma_waited"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                           T.address_of(S[tx // 64 * 64]), 4, 0, 0)
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        B[tx] = S[127 - tx] * T.float32(2)


@T.prim_func
def after_dma_waited_gfx942(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "after_dma_waited"})
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        T.call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(A[tx]),
                           T.address_of(S[tx // 64 * 64]), 4, 0, 0)
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(VMCNT0))
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        B[tx] = S[127 - tx] * T.float32(2)


# -- barrier in a loop: both barriers of the iteration wait, the RAW one for the ds_write,
# the WAR one for the ds_read into a register (its consumer may be scheduled past the
# barrier); nothing reaches the loop head in flight (entry and back edge are both drained)
@T.prim_func
def in_loop(A: T.Buffer((8, 256), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "in_loop"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
        for k in range(8):
            S[tx] = A[k, tx]
            T.tilewave.lds_barrier()
            acc[0] = acc[0] + S[255 - tx]
            T.tilewave.lds_barrier()
        B[tx] = acc[0]


@T.prim_func
def in_loop_gfx942(A: T.Buffer((8, 256), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "in_loop"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
        for k in range(8):
            S[tx] = A[k, tx]
            T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(LGKMCNT0))
            T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
            acc[0] = acc[0] + S[255 - tx]
            T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(LGKMCNT0))
            T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
        B[tx] = acc[0]


# a barrier at the top of the loop: the previous iteration's write reaches it on the back edge
@T.prim_func
def loop_carried(A: T.Buffer((8, 256), "float32"), B: T.Buffer((8, 256), "float32")):
    T.func_attr({"global_symbol": "loop_carried"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()
            S[tx] = A[k, tx]
            T.tilewave.lds_barrier()
            B[k, tx] = S[255 - tx]


@T.prim_func
def loop_carried_gfx942(A: T.Buffer((8, 256), "float32"), B: T.Buffer((8, 256), "float32")):
    T.func_attr({"global_symbol": "loop_carried"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        for k in range(8):
            # only a write-only global store consumed the previous iteration's reads: drained
            T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
            S[tx] = A[k, tx]
            T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(LGKMCNT0))
            T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier")
            B[k, tx] = S[255 - tx]


# -- a barrier the user placed with TVM's own op ------------------------------------------
@T.prim_func
def user_sync(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "user_sync"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("shared")
        B[tx] = S[255 - tx]


@T.prim_func
def user_sync_gfx942(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "user_sync"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(LGKMCNT0))
        T.tvm_storage_sync("shared")
        B[tx] = S[255 - tx]


@T.prim_func
def user_sync_gfx1200(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "user_sync"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.wait.dscnt", T.int16(0))
        T.tvm_storage_sync("shared")
        B[tx] = S[255 - tx]


# -- waits that are left out -------------------------------------------------------------
@T.prim_func
def nothing_in_flight(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    # the second barrier follows the first with no LDS access in between; the first follows
    # only a write-only global store of an LDS read
    T.func_attr({"global_symbol": "nothing_in_flight"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.tilewave.lds_barrier()
        B[tx] = S[tx]
        T.tilewave.lds_barrier()
        T.tilewave.lds_barrier()
        S[tx] = A[tx]


@T.prim_func
def user_wait_kept(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    # the kernel already waits for LDS itself: no second wait
    T.func_attr({"global_symbol": "user_wait_kept"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", T.int32(LGKMCNT0))
        T.tilewave.lds_barrier()
        B[tx] = S[255 - tx]


@T.prim_func
def read_modify_write(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    # B is read as well as written: LLVM may keep B[tx] in a register across the barrier and
    # leave the ds_read in flight, so this barrier keeps its wait
    T.func_attr({"global_symbol": "read_modify_write"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        for k in range(4):
            B[tx] = B[tx] + S[(tx + k) % 256]
            T.tilewave.lds_barrier()
            S[tx] = A[tx] + T.Cast("float32", k)
            T.tilewave.lds_barrier()


@T.prim_func
def branch_writes(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    # one branch writes LDS, the other does not: the join may have the write in flight
    T.func_attr({"global_symbol": "branch_writes"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = T.float32(0)
        T.tilewave.lds_barrier()
        if A[0] > T.float32(0):
            S[tx] = A[tx]
        T.tilewave.lds_barrier()
        B[tx] = S[255 - tx]


# -- barriers tilewave cannot read ---------------------------------------------------------
@T.prim_func
def global_sync(A: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "global_sync"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.tvm_storage_sync("global", T.bool(True), 1)
        A[tx] = S[255 - tx]


@T.prim_func
def named_barrier_setup(A: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "named_barrier_setup"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.call_llvm_intrin("void", "llvm.amdgcn.s.barrier.leave", T.int16(1))
        A[tx] = S[255 - tx]


@T.prim_func
def accumulate_then_store(A: T.Buffer((8, 256), "float32"), B: T.Buffer((8, 256), "float32")):
    # the reads feed acc, which a write-only store of B uses before the loop's next barrier:
    # they are waited for there, so the barrier at the top of the loop needs no wait
    T.func_attr({"global_symbol": "accumulate_then_store"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        for k in range(8):
            T.tilewave.lds_barrier()
            S[tx] = A[k, tx]
            T.tilewave.lds_barrier()
            acc[0] = T.float32(0)
            for j in range(3):
                acc[0] = acc[0] + S[(tx + j + 1) % 256]
            B[k, tx] = acc[0]


@T.prim_func
def two_element_local(A: T.Buffer((8, 256), "float32"), B: T.Buffer((8, 256), "float32"),
                      C: T.Buffer((256,), "float32")):
    # acc[1]'s read is not consumed by the store of acc[0]: the barrier keeps its wait
    T.func_attr({"global_symbol": "two_element_local"})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        acc = T.alloc_buffer((2,), "float32", scope="local")
        for k in range(8):
            S[tx] = A[k, tx]
            T.tilewave.lds_barrier()
            acc[0] = S[(tx + 1) % 256]
            acc[1] = S[(tx + 2) % 256]
            B[k, tx] = acc[0]
            T.tilewave.lds_barrier()
        C[tx] = acc[1]
