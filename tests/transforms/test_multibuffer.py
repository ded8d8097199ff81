"""Before/after tests of tilewave.transforms.multibuffer, and its error messages."""

import pytest
import tvm
from structural import same
from tvm.script import tirx as T

import tilewave  # noqa: F401  (registers T.tilewave ops)
from tilewave.errors import MalformedKernelError, PassOptionError, SharedMemoryLimitError
from tilewave.transforms.multibuffer import MultiBuffer, multi_buffer


def check(before, expected, **options):
    after = multi_buffer(before, **options)
    same(after, expected)
    return after


# --- one buffer, counts -------------------------------------------------------------------


@T.prim_func
def single(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(64):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def single_x2(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k in range(64):
            S[k & 1, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k & 1, 31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def single_x3(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (3, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        for k in range(64):
            S[k % 3, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k % 3, 31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def single_x4(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (4, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 4}
        )
        for k in range(64):
            S[k & 3, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k & 3, 31 - tx]
            T.tvm_storage_sync("shared")


@pytest.mark.parametrize(
    ("count", "expected"), [(2, single_x2), (3, single_x3), (4, single_x4)]
)
def test_single_buffer_counts(count, expected):
    check(single, expected, count=count)


def test_count_one_is_identity():
    assert multi_buffer(single, count=1).same_as(single)


def test_pass_wrapper_rewrites_every_function():
    mod = MultiBuffer(count=2)(tvm.IRModule({"single": single}))
    same(mod["single"], single_x2)


# --- two buffers, buffer selection ------------------------------------------------------


@T.prim_func
def two(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        SA = T.alloc_buffer((32,), "float32", scope="shared")
        SB = T.alloc_buffer((4, 8), "float16", scope="shared")
        for k in range(16):
            SA[tx] = A[k, tx]
            SB[tx // 8, tx % 8] = T.Cast("float16", A[k, tx])
            T.tvm_storage_sync("shared")
            B[k, tx] = SA[31 - tx] + T.Cast("float32", SB[tx % 4, tx // 4])
            T.tvm_storage_sync("shared")


@T.prim_func
def two_x2(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        SA = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        SB = T.alloc_buffer(
            (2, 4, 8), "float16", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k in range(16):
            SA[k & 1, tx] = A[k, tx]
            SB[k & 1, tx // 8, tx % 8] = T.Cast("float16", A[k, tx])
            T.tvm_storage_sync("shared")
            B[k, tx] = SA[k & 1, 31 - tx] + T.Cast("float32", SB[k & 1, tx % 4, tx // 4])
            T.tvm_storage_sync("shared")


@T.prim_func
def two_only_sb(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        SA = T.alloc_buffer((32,), "float32", scope="shared")
        SB = T.alloc_buffer(
            (3, 4, 8), "float16", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        for k in range(16):
            SA[tx] = A[k, tx]
            SB[k % 3, tx // 8, tx % 8] = T.Cast("float16", A[k, tx])
            T.tvm_storage_sync("shared")
            B[k, tx] = SA[31 - tx] + T.Cast("float32", SB[k % 3, tx % 4, tx // 4])
            T.tvm_storage_sync("shared")


def test_two_buffers():
    check(two, two_x2, count=2)


def test_only_named_buffer_is_grown():
    check(two, two_only_sb, count=3, buffers=["SB"])


def test_already_multibuffered_is_not_grown_again():
    once = multi_buffer(two, count=2)
    same(multi_buffer(once, count=2), two_x2)
    # A different count leaves the annotated buffers alone too (the default selection).
    same(multi_buffer(once, count=4), two_x2)
    # Only the remaining single buffer is grown when one already carries the annotation.
    assert multi_buffer(two_only_sb, count=3, buffers=["SB"]).same_as(two_only_sb)


# --- loop start and step ------------------------------------------------------------------


@T.prim_func
def strided(A: T.Buffer((20, 32), "float32"), B: T.Buffer((20, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(2, 20, 3):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def strided_x2(A: T.Buffer((20, 32), "float32"), B: T.Buffer((20, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k in range(2, 20, 3):
            S[(k - 2) // 3 & 1, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[(k - 2) // 3 & 1, 31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def offset_start(A: T.Buffer((20, 32), "float32"), B: T.Buffer((20, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(5, 20):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def offset_start_x3(A: T.Buffer((20, 32), "float32"), B: T.Buffer((20, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (3, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        for k in range(5, 20):
            S[(k - 5) % 3, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[(k - 5) % 3, 31 - tx]
            T.tvm_storage_sync("shared")


def test_nonzero_start_and_step():
    check(strided, strided_x2, count=2)


def test_nonzero_start():
    check(offset_start, offset_start_x3, count=3)


# --- async copies and address operands ----------------------------------------------------


@T.prim_func
def async_copy(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            T.ptx["cp.async.ca.shared.global"](T.address_of(S[tx]), T.address_of(A[k, tx]), 4)
            T.ptx["cp.async.commit_group"]()
            T.ptx["cp.async.wait_group"](0)
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def async_copy_x2(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k in range(8):
            T.ptx["cp.async.ca.shared.global"](
                T.address_of(S[k & 1, tx]), T.address_of(A[k, tx]), 4
            )
            T.ptx["cp.async.commit_group"]()
            T.ptx["cp.async.wait_group"](0)
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k & 1, 31 - tx]
            T.tvm_storage_sync("shared")


def test_async_copy_into_buffer():
    check(async_copy, async_copy_x2, count=2)


@T.prim_func
def operands(A: T.Buffer((8, 64), "float16"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((8, 8), "float16", scope="shared")
        r = T.alloc_buffer((1,), "uint32", scope="local")
        for k in range(8):
            T.ptx["cp.async.ca.shared.global"](S.data, T.address_of(A[k, 0]), 4)
            T.ptx["cp.async.ca.shared.global"](
                T.tvm_access_ptr(T.type_annotation("float16"), S.data, tx * 2, 2, 2),
                T.address_of(A[k, tx * 2]),
                4,
            )
            T.tvm_storage_sync("shared")
            T.ptx["ldmatrix.sync.aligned.m8n8.x1.shared.b16"](r[0], T.address_of(S[tx % 8, 0]))
            B[k, tx] = T.Cast("float32", r[0])
            T.tvm_storage_sync("shared")


@T.prim_func
def operands_x3(A: T.Buffer((8, 64), "float16"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (3, 8, 8), "float16", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        r = T.alloc_buffer((1,), "uint32", scope="local")
        for k in range(8):
            T.ptx["cp.async.ca.shared.global"](
                T.address_of(S[k % 3, 0, 0]), T.address_of(A[k, 0]), 4
            )
            T.ptx["cp.async.ca.shared.global"](
                T.tvm_access_ptr(T.type_annotation("float16"), S.data, tx * 2 + 64 * (k % 3), 2, 2),
                T.address_of(A[k, tx * 2]),
                4,
            )
            T.tvm_storage_sync("shared")
            T.ptx["ldmatrix.sync.aligned.m8n8.x1.shared.b16"](
                r[0], T.address_of(S[k % 3, tx % 8, 0])
            )
            B[k, tx] = T.Cast("float32", r[0])
            T.tvm_storage_sync("shared")


def test_raw_data_access_ptr_and_ldmatrix_operands():
    check(operands, operands_x3, count=3)


def test_rewritten_operands_compile_to_cuda():
    after = multi_buffer(operands, count=3)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    src = tvm.compile(tvm.IRModule({"main": after}), target=target).mod.imports[0].inspect_source()
    assert "half S_ptr[192]" in src  # 3 copies of 8x8 halves
    assert "(k % 3) * 64" in src


# --- prologue / epilogue --------------------------------------------------------------------


@T.prim_func
def pro_epi(A: T.Buffer((10, 32), "float32"), B: T.Buffer((10, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        S[tx] = A[0, tx]
        T.tvm_storage_sync("shared")
        B[0, tx] = S[31 - tx]
        T.tvm_storage_sync("shared")
        for k in range(1, 8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")
        B[9, tx] = S[tx]


@T.prim_func
def pro_epi_x2(A: T.Buffer((10, 32), "float32"), B: T.Buffer((10, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        S[0, tx] = A[0, tx]
        T.tvm_storage_sync("shared")
        B[0, tx] = S[0, 31 - tx]
        T.tvm_storage_sync("shared")
        for k in range(1, 8):
            S[k - 1 & 1, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k - 1 & 1, 31 - tx]
            T.tvm_storage_sync("shared")
        B[9, tx] = S[0, tx]  # 7 iterations: the last one used copy 6 & 1 == 0


@T.prim_func
def pro_epi_x3(A: T.Buffer((10, 32), "float32"), B: T.Buffer((10, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (3, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 3}
        )
        S[0, tx] = A[0, tx]
        T.tvm_storage_sync("shared")
        B[0, tx] = S[0, 31 - tx]
        T.tvm_storage_sync("shared")
        for k in range(1, 8):
            S[(k - 1) % 3, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[(k - 1) % 3, 31 - tx]
            T.tvm_storage_sync("shared")
        B[9, tx] = S[0, tx]  # last iteration 6 % 3 == 0


@T.prim_func
def pro_epi_x4(A: T.Buffer((10, 32), "float32"), B: T.Buffer((10, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (4, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 4}
        )
        S[0, tx] = A[0, tx]
        T.tvm_storage_sync("shared")
        B[0, tx] = S[0, 31 - tx]
        T.tvm_storage_sync("shared")
        for k in range(1, 8):
            S[k - 1 & 3, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k - 1 & 3, 31 - tx]
            T.tvm_storage_sync("shared")
        B[9, tx] = S[2, tx]  # last iteration 6 & 3 == 2


@pytest.mark.parametrize(
    ("count", "expected"), [(2, pro_epi_x2), (3, pro_epi_x3), (4, pro_epi_x4)]
)
def test_prologue_and_epilogue(count, expected):
    check(pro_epi, expected, count=count)


@T.prim_func
def symbolic_trips(a: T.handle, b: T.handle, n: T.int32):
    A = T.match_buffer(a, (n, 32), "float32")
    B = T.match_buffer(b, (n, 32), "float32")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(n):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")
        B[0, tx] = S[tx]


@T.prim_func
def symbolic_trips_x2(a: T.handle, b: T.handle, n: T.int32):
    A = T.match_buffer(a, (n, 32), "float32")
    B = T.match_buffer(b, (n, 32), "float32")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for k in range(n):
            S[k & 1, tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[k & 1, 31 - tx]
            T.tvm_storage_sync("shared")
        B[0, tx] = S[T.max(n - 1, 0) & 1, tx]


def test_epilogue_with_symbolic_trip_count():
    check(symbolic_trips, symbolic_trips_x2, count=2)


# --- nested loops -------------------------------------------------------------------------


@T.prim_func
def nested(A: T.Buffer((4, 8, 32), "float32"), B: T.Buffer((4, 8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for ko in range(4):
            for ki in range(8):
                S[tx] = A[ko, ki, tx]
                T.tvm_storage_sync("shared")
                B[ko, ki, tx] = S[31 - tx]
                T.tvm_storage_sync("shared")


@T.prim_func
def nested_inner_x2(A: T.Buffer((4, 8, 32), "float32"), B: T.Buffer((4, 8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for ko in range(4):
            for ki in range(8):
                S[ki & 1, tx] = A[ko, ki, tx]
                T.tvm_storage_sync("shared")
                B[ko, ki, tx] = S[ki & 1, 31 - tx]
                T.tvm_storage_sync("shared")


@T.prim_func
def nested_outer_x2(A: T.Buffer((4, 8, 32), "float32"), B: T.Buffer((4, 8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for ko in range(4):
            for ki in range(8):
                S[ko & 1, tx] = A[ko, ki, tx]
                T.tvm_storage_sync("shared")
                B[ko, ki, tx] = S[ko & 1, 31 - tx]
                T.tvm_storage_sync("shared")


def test_nested_default_is_innermost_loop():
    check(nested, nested_inner_x2, count=2)


def test_nested_only_the_named_loop_level():
    check(nested, nested_inner_x2, count=2, loop="ki")
    check(nested, nested_outer_x2, count=2, loop="ko")


@T.prim_func
def nested_prologue(A: T.Buffer((4, 9, 32), "float32"), B: T.Buffer((4, 9, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for ko in range(4):
            S[tx] = A[ko, 8, tx]
            T.tvm_storage_sync("shared")
            B[ko, 8, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")
            for ki in range(8):
                S[tx] = A[ko, ki, tx]
                T.tvm_storage_sync("shared")
                B[ko, ki, tx] = S[31 - tx]
                T.tvm_storage_sync("shared")


@T.prim_func
def nested_prologue_ki_x2(
    A: T.Buffer((4, 9, 32), "float32"), B: T.Buffer((4, 9, 32), "float32")
):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer(
            (2, 32), "float32", scope="shared", annotations={"tilewave.multi_buffer_count": 2}
        )
        for ko in range(4):
            S[0, tx] = A[ko, 8, tx]
            T.tvm_storage_sync("shared")
            B[ko, 8, tx] = S[0, 31 - tx]
            T.tvm_storage_sync("shared")
            for ki in range(8):
                S[ki & 1, tx] = A[ko, ki, tx]
                T.tvm_storage_sync("shared")
                B[ko, ki, tx] = S[ki & 1, 31 - tx]
                T.tvm_storage_sync("shared")


def test_named_inner_loop_treats_outer_body_as_prologue():
    check(nested_prologue, nested_prologue_ki_x2, count=2, loop="ki")


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, -1, 2.0, "2", True, None])
def test_bad_count(count):
    with pytest.raises(PassOptionError, match=r"count must be a positive integer.*got"):
        multi_buffer(single, count=count)
    with pytest.raises(PassOptionError, match=r"count must be a positive integer"):
        MultiBuffer(count=count)


@T.prim_func
def with_local(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        L = T.alloc_buffer((4,), "float32", scope="local")
        for k in range(8):
            L[0] = A[k, tx]
            B[k, tx] = L[0]


def test_buffer_not_shared():
    with pytest.raises(PassOptionError, match=r"buffer 'L' has scope 'local', not shared"):
        multi_buffer(with_local, count=2, buffers=["L"])


def test_unknown_buffer():
    with pytest.raises(PassOptionError, match=r"no allocated buffer named 'X'.*buffers: S\)"):
        multi_buffer(single, count=2, buffers=["X"])


@T.prim_func
def unrolled(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in T.unroll(8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def vectorized(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((8, 32), "float32", scope="shared")
        for k in T.vectorized(8):
            S[k, tx] = A[k, tx]
            B[k, tx] = S[k, tx]


@pytest.mark.parametrize(
    ("func", "loop", "kind"),
    [
        (single, "tx", "thread_binding"),
        (unrolled, "k", "unrolled"),
        (vectorized, "k", "vectorized"),
    ],
)
def test_loop_not_serial(func, loop, kind):
    with pytest.raises(PassOptionError, match=rf"loop '{loop}' is {kind}, not serial"):
        multi_buffer(func, count=2, loop=loop)


def test_unrolled_loop_is_not_picked_by_default():
    assert multi_buffer(unrolled, count=2).same_as(unrolled)
    with pytest.raises(PassOptionError, match=r"'S' is not both written and read inside a serial"):
        multi_buffer(unrolled, count=2, buffers=["S"])


def test_unknown_loop_name():
    with pytest.raises(PassOptionError, match=r"no loop named 'kk'"):
        multi_buffer(single, count=2, loop="kk")
    with pytest.raises(PassOptionError, match=r"loop must be the name of a loop variable"):
        multi_buffer(single, count=2, loop=3)


@T.prim_func
def escapes_extern(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            T.evaluate(T.call_extern("void", "consume", S.data))
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@T.prim_func
def escapes_let(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for k in range(8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            p = T.address_of(S[0])
            T.ptx["cp.async.ca.shared.global"](p, T.address_of(A[k, 0]), 4)
            B[k, tx] = S[31 - tx]
            T.tvm_storage_sync("shared")


@pytest.mark.parametrize(
    ("func", "reason"),
    [
        (escapes_extern, r"its address is passed to 'consume', an op tilewave does not know"),
        (escapes_let, r"its address is bound to a variable"),
    ],
)
def test_address_escapes(func, reason):
    with pytest.raises(MalformedKernelError, match=rf"cannot multibuffer 'S': {reason}.*at `"):
        multi_buffer(func, count=2)


@T.prim_func
def carried(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        S[tx] = T.float32(0)
        for k in range(8):
            S[tx] = S[tx] + A[k, tx]
        B[0, tx] = S[tx]


def test_value_carried_across_iterations():
    with pytest.raises(MalformedKernelError, match=r"'S' is read before it is written .* loop 'k'"):
        multi_buffer(carried, count=2)


@T.prim_func
def big(A: T.Buffer((8, 12288), "float32"), B: T.Buffer((8, 12288), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((12288,), "float32", scope="shared")
        T2 = T.alloc_buffer((1024,), "float32", scope="shared")
        for k in range(8):
            S[tx] = A[k, tx]
            T.tvm_storage_sync("shared")
            B[k, tx] = S[12287 - tx]
            T.tvm_storage_sync("shared")
        T2[tx] = A[0, tx]


def test_shared_memory_limit():
    assert multi_buffer(big, count=2, target="sm_90a") is not big  # 96 KiB + 4 KiB fits
    with pytest.raises(
        SharedMemoryLimitError,
        match=r"'S' from 49152 to 98304 bytes \(count=2\).*102400 bytes, over the "
        r"65536-byte limit of gfx942",
    ):
        multi_buffer(big, count=2, target="gfx942")
    with pytest.raises(SharedMemoryLimitError, match=r"over the 232448-byte limit of sm_90a"):
        multi_buffer(big, count=5, target="sm_90a")


def test_target_from_function_attribute():
    func = big.with_attr("target", tvm.target.Target({"kind": "rocm", "mcpu": "gfx942"}))
    with pytest.raises(SharedMemoryLimitError, match=r"limit of gfx942"):
        multi_buffer(func, count=2)


def test_regrowing_with_other_count_is_refused():
    once = multi_buffer(single, count=2)
    with pytest.raises(PassOptionError, match=r"'S' is already multibuffered with count 2"):
        multi_buffer(once, count=3, buffers=["S"])


@T.prim_func
def siblings(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for i in range(4):
            S[tx] = A[i, tx]
            B[i, tx] = S[tx]
        for j in range(4):
            S[tx] = A[j + 4, tx]
            B[j + 4, tx] = S[tx]


def test_sibling_loops_need_a_loop_name():
    with pytest.raises(PassOptionError, match=r"several separate loops \('i', 'j'\).*loop=<name>"):
        multi_buffer(siblings, count=2)


def test_named_buffer_unused_in_named_loop():
    assert multi_buffer(siblings_named_ko, count=2, loop="ko").same_as(siblings_named_ko)
    with pytest.raises(PassOptionError, match=r"'S' is not both written and read inside loop 'ko'"):
        multi_buffer(siblings_named_ko, count=2, buffers=["S"], loop="ko")


@T.prim_func
def siblings_named_ko(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for ko in range(2):
            B[ko, tx] = A[ko, tx]
        for k in range(4):
            S[tx] = A[k, tx]
            B[k, tx] = S[tx]
