"""InsertSharedBarriers with cp.async commit/wait groups: commits where groups are open,
the largest ``wait_group N`` that retires what is read, pipelined loops kept pipelined,
hand-synchronised pipelines left alone, multibuffer + prefetch giving the hand schedule.

Every result is also executed by ``tilewave.racecheck`` (an oracle that shares no code
with the pass): the inputs race, the outputs do not.
"""

import tvm
from tvm.script import tirx as T
from wait_counts import with_wait

import tilewave
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.transforms.async_prefetch import prefetch_async_copies
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers
from tilewave.transforms.multibuffer import multi_buffer


def check(before, expected, target="sm_90a"):
    after = insert_shared_barriers(before, target)
    expected = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(after, expected)
    assert find_shared_hazards(after, target) == []
    assert tilewave.racecheck(after, target).ok
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, target), after)
    return after


# --- a wait the user wrote without a commit -----------------------------------------------
@T.prim_func
def wait_without_commit(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.ptx.cp.async_.wait_group(0)
        T.tvm_storage_sync("shared")
        B[tx] = S[255 - tx * 4]


@T.prim_func
def wait_without_commit_after(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.tilewave.commit_async_ops()  # the user's wait_group 0 now retires the copy
        T.ptx.cp.async_.wait_group(0)
        T.tvm_storage_sync("shared")
        B[tx] = S[255 - tx * 4]


def test_wait_group_without_commit_gets_the_commit_it_needs():
    # a wait_group retires committed groups only: the copy is still in flight
    assert any(h.kind.name == "RAW" for h in find_shared_hazards(wait_without_commit, "sm_90a"))
    assert not tilewave.racecheck(wait_without_commit, "sm_90a").ok
    check(wait_without_commit, wait_without_commit_after)


# --- a hand-pipelined 3-stage loop is kept as written --------------------------------------
@T.prim_func
def hand3(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 256), "float32", scope="shared")
        for s in range(2):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[s, tx * 4]), T.address_of(A[s, tx * 4]), 16
            )
            T.ptx.cp.async_.commit_group()
        for k in range(16):
            T.ptx.cp.async_.wait_group(1)
            T.tvm_storage_sync("shared")
            if k + 2 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 2) % 3, tx * 4]), T.address_of(A[k + 2, tx * 4]), 16
                )
            T.ptx.cp.async_.commit_group()
            B[k, tx] = S[k % 3, 255 - tx * 4]


def test_hand_pipeline_keeps_its_wait_group_1():
    assert find_shared_hazards(hand3, "sm_90a") == []
    assert tilewave.racecheck(hand3, "sm_90a").ok
    after = insert_shared_barriers(hand3, "sm_90a")
    assert after.same_as(hand3)  # nothing strengthened, nothing added


@T.prim_func
def hand3_too_weak(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 256), "float32", scope="shared")
        for s in range(2):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[s, tx * 4]), T.address_of(A[s, tx * 4]), 16
            )
            T.ptx.cp.async_.commit_group()
        for k in range(16):
            T.ptx.cp.async_.wait_group(2)  # leaves the stage about to be read in flight
            T.tvm_storage_sync("shared")
            if k + 2 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 2) % 3, tx * 4]), T.address_of(A[k + 2, tx * 4]), 16
                )
            T.ptx.cp.async_.commit_group()
            B[k, tx] = S[k % 3, 255 - tx * 4]


def test_a_wait_group_that_retires_too_little_is_a_hazard_and_gets_fixed():
    assert any(h.kind.name == "RAW" for h in find_shared_hazards(hand3_too_weak, "sm_90a"))
    after = insert_shared_barriers(hand3_too_weak, "sm_90a")
    assert find_shared_hazards(after, "sm_90a") == []
    assert tilewave.racecheck(after, "sm_90a").ok


# --- the same loop stripped of its synchronisation ----------------------------------------
@T.prim_func
def stripped3(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 256), "float32", scope="shared")
        for s in range(2):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[s, tx * 4]), T.address_of(A[s, tx * 4]), 16
            )
        for k in range(16):
            if k + 2 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 2) % 3, tx * 4]), T.address_of(A[k + 2, tx * 4]), 16
                )
            B[k, tx] = S[k % 3, 255 - tx * 4]


@T.prim_func
def stripped3_after(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 256), "float32", scope="shared")
        for s in range(2):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[s, tx * 4]), T.address_of(A[s, tx * 4]), 16
            )
        # the prologue's copies form one group (one run of copies), read in iteration 0
        T.tilewave.commit_async_ops()
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        for k in range(16):
            # one wait + barrier per step: stage k lands (k + 1 stays in flight) and every
            # thread is done with stage k - 1, which the prefetch below overwrites
            T.tilewave.wait_async_ops(1)
            T.tilewave.lds_barrier()
            if k + 2 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 2) % 3, tx * 4]), T.address_of(A[k + 2, tx * 4]), 16
                )
            T.tilewave.commit_async_ops()
            B[k, tx] = S[k % 3, 255 - tx * 4]


def test_stripped_pipeline_gets_the_hand_schedule():
    assert not tilewave.racecheck(stripped3, "sm_90a").ok
    check(stripped3, stripped3_after)


# --- plain loop + multibuffer + prefetch ----------------------------------------------------
@T.prim_func
def plain(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        for k in range(16):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[tx * 4]), T.address_of(A[k, tx * 4]), 16
            )
            B[k, tx] = S[255 - tx * 4]


@T.prim_func
def plain_3_stages(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (3, 256), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        for k_prefetch in range(2):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k_prefetch % 3, tx * 4]), T.address_of(A[k_prefetch, tx * 4]), 16
            )
            T.tilewave.commit_async_ops()
        for k in range(16):
            T.tilewave.wait_async_ops(1)
            T.tilewave.lds_barrier()
            if k + 2 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 2) % 3, tx * 4]), T.address_of(A[k + 2, tx * 4]), 16
                )
            T.tilewave.commit_async_ops()
            B[k, tx] = S[k % 3, 255 - tx * 4]


@T.prim_func
def plain_2_stages(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 256), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k_prefetch in range(1):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k_prefetch & 1, tx * 4]), T.address_of(A[k_prefetch, tx * 4]), 16
            )
            T.tilewave.commit_async_ops()
        for k in range(16):
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            if k + 1 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 1) & 1, tx * 4]), T.address_of(A[k + 1, tx * 4]), 16
                )
            T.tilewave.commit_async_ops()
            B[k, tx] = S[k & 1, 255 - tx * 4]


@T.prim_func
def plain_4_stages(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (4, 256), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 4}
        )
        for k_prefetch in range(3):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k_prefetch & 3, tx * 4]), T.address_of(A[k_prefetch, tx * 4]), 16
            )
            T.tilewave.commit_async_ops()
        for k in range(16):
            # tiles k + 1 and k + 2 stay in flight: the copy of tile k, issued three
            # iterations back, is told apart from them by its exact distance
            T.tilewave.wait_async_ops(2)
            T.tilewave.lds_barrier()
            if k + 3 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 3) & 3, tx * 4]), T.address_of(A[k + 3, tx * 4]), 16
                )
            T.tilewave.commit_async_ops()
            B[k, tx] = S[k & 3, 255 - tx * 4]


@T.prim_func
def plain_5_stages(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (5, 256), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 5}
        )
        for k_prefetch in range(4):
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[k_prefetch % 5, tx * 4]), T.address_of(A[k_prefetch, tx * 4]), 16
            )
            T.tilewave.commit_async_ops()
        for k in range(16):
            T.tilewave.wait_async_ops(3)
            T.tilewave.lds_barrier()
            if k + 4 < 16:
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[(k + 4) % 5, tx * 4]), T.address_of(A[k + 4, tx * 4]), 16
                )
            T.tilewave.commit_async_ops()
            B[k, tx] = S[k % 5, 255 - tx * 4]


def test_multibuffer_and_prefetch_pipeline_a_plain_loop():
    cases = ((5, plain_5_stages), (4, plain_4_stages), (3, plain_3_stages), (2, plain_2_stages))
    for count, expected in cases:
        pipelined = prefetch_async_copies(multi_buffer(plain, count, target="sm_90a"))
        after = check(pipelined, expected)
        # stages - 2 is the largest count that is enough: one more and racecheck (which
        # shares no code with the pass) sees tile k read while its copy may be in flight
        weaker = with_wait(after, count - 1)
        assert "RAW" in tilewave.racecheck(weaker, "sm_90a").kinds(), count
        assert find_shared_hazards(weaker, "sm_90a") != []


def test_lower_with_multi_buffer_count_pipelines_and_synchronises():
    mod = tilewave.lower(plain, "sm_90a", multi_buffer_count=3)
    text = mod.script()
    assert 'T.ptx.cp("async", "commit_group", "")' in text
    assert 'T.ptx.cp(1, "async", "wait_group", "")' in text
    assert text.count("tvm_storage_sync") == 1  # one barrier per step, none elsewhere


# --- swizzled tiles and copy loops ------------------------------------------------------------
@T.prim_func
def swizzled(A: T.Buffer((8, 128, 32), "float16"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128, 32), "float16", scope="shared")
        for k in range(8):
            for i in T.unroll(4):
                row: T.let[T.int32] = i * 32 + tx // 4
                chunk: T.let[T.int32] = tx % 4
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[row, T.bitwise_xor(chunk, row // 2 % 4) * 8]),
                    T.address_of(A[k, row, chunk * 8]),
                    16,
                )
            B[k, tx] = T.Cast(
                "float32", S[127 - tx, T.bitwise_xor(tx % 4, (127 - tx) // 2 % 4) * 8]
            )


@T.prim_func
def swizzled_after(A: T.Buffer((8, 128, 32), "float16"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128, 32), "float16", scope="shared")
        for k in range(8):
            T.tilewave.lds_barrier()  # WAR: iteration k - 1 read the tile
            for i in T.unroll(4):  # the swizzled chunks of one copy loop need no barrier
                row: T.let[T.int32] = i * 32 + tx // 4
                chunk: T.let[T.int32] = tx % 4
                T.ptx.cp.async_.cg.shared.global_(
                    T.address_of(S[row, T.bitwise_xor(chunk, row // 2 % 4) * 8]),
                    T.address_of(A[k, row, chunk * 8]),
                    16,
                )
            T.tilewave.commit_async_ops()
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            B[k, tx] = T.Cast(
                "float32", S[127 - tx, T.bitwise_xor(tx % 4, (127 - tx) // 2 % 4) * 8]
            )


def test_xor_swizzled_copy_loop_is_one_group_and_needs_no_inner_barrier():
    check(swizzled, swizzled_after)


# --- copies through a let-bound pointer -------------------------------------------------------
# `p = T.address_of(S[0])` then `cp.async(p, ...)`: the copy writes S through p. It used to be
# invisible (no shared address among the call's operands), so no wait retired it before the
# read of another thread's element (racecheck: RAW). test_multibuffer.escapes_let, each thread
# copying its own element (there every thread copies S[0]: a WAW of one statement with itself).
@T.prim_func
def let_pointer_copy(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            p = T.address_of(S[tx])
            T.ptx["cp.async.ca.shared.global"](p, T.address_of(A[k, tx]), 4)
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def let_pointer_copy_after(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            p = T.address_of(S[tx])
            T.ptx["cp.async.ca.shared.global"](p, T.address_of(A[k, tx]), 4)
            T.tilewave.commit_async_ops()  # the copy's group, retired before S[31 - tx] is read
            T.tilewave.wait_async_ops(0)
            T.tilewave.lds_barrier()
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


def test_copy_through_a_let_bound_pointer_is_waited_for():
    (raw,) = [h for h in find_shared_hazards(let_pointer_copy, "sm_90a") if h.kind.name == "RAW"]
    assert raw.first.kind.name == "ASYNC_WRITE" and raw.second.stmt.buffer.name == "B"
    assert "RAW" in tilewave.racecheck(let_pointer_copy, "sm_90a").kinds()
    check(let_pointer_copy, let_pointer_copy_after)


@T.prim_func
def stripped3_let(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 256), "float32", scope="shared")
        for s in range(2):
            dst = T.address_of(S[s, tx * 4])
            T.ptx.cp.async_.cg.shared.global_(dst, T.address_of(A[s, tx * 4]), 16)
        for k in range(16):
            if k + 2 < 16:
                nxt = T.address_of(S[(k + 2) % 3, tx * 4])
                T.ptx.cp.async_.cg.shared.global_(nxt, T.address_of(A[k + 2, tx * 4]), 16)
            B[k, tx] = S[k % 3, 255 - tx * 4]


@T.prim_func
def stripped3_let_after(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 64), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((3, 256), "float32", scope="shared")
        for s in range(2):
            dst = T.address_of(S[s, tx * 4])
            T.ptx.cp.async_.cg.shared.global_(dst, T.address_of(A[s, tx * 4]), 16)
        T.tilewave.commit_async_ops()
        T.tilewave.wait_async_ops(0)
        T.tilewave.lds_barrier()
        for k in range(16):
            T.tilewave.wait_async_ops(1)
            T.tilewave.lds_barrier()
            if k + 2 < 16:
                nxt = T.address_of(S[(k + 2) % 3, tx * 4])
                T.ptx.cp.async_.cg.shared.global_(nxt, T.address_of(A[k + 2, tx * 4]), 16)
            T.tilewave.commit_async_ops()
            B[k, tx] = S[k % 3, 255 - tx * 4]


def test_pipeline_through_let_bound_pointers_gets_the_hand_schedule():
    # the copies through pointers form commit groups like direct ones (stripped3_after):
    # the loop keeps wait_group 1, not a wait for everything in every step
    assert not tilewave.racecheck(stripped3_let, "sm_90a").ok
    check(stripped3_let, stripped3_let_after)
