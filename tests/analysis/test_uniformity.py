"""The uniformity analysis: which conditions every thread of a block (or warp) evaluates
alike. Each ``if`` condition in the kernels below is classified and compared with the
level written next to it."""

from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis.shared_access import AccessScope
from tilewave.analysis.uniformity import Uniformity, UniformityAnalysis, unwritten_global_buffers

BLOCK, WARP, THREAD = Uniformity.BLOCK, Uniformity.WARP, Uniformity.THREAD


def conditions(func):
    """Every ``if`` condition of ``func`` in program order, with its scope's enclosing
    conditions (as the barrier pass sees them)."""
    found = []

    def walk(stmt, scope):
        if isinstance(stmt, tirx.SeqStmt):
            for item in stmt.seq:
                walk(item, scope)
        elif isinstance(stmt, tirx.IfThenElse):
            found.append((stmt.condition, scope))
            walk(stmt.then_case, scope.assuming(stmt.condition))
            if stmt.else_case is not None:
                walk(stmt.else_case, scope.assuming(stmt.condition, False))
        elif isinstance(stmt, (tirx.For, tirx.While)):
            walk(stmt.body, scope)
        elif isinstance(getattr(stmt, "body", None), tirx.Stmt):
            walk(stmt.body, scope)

    walk(func.body, AccessScope())
    return found


def levels(func):
    analysis = UniformityAnalysis(func)
    return [analysis.level(cond, scope) for cond, scope in conditions(func)]


@T.prim_func
def forms(
    A: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32"), W: T.Buffer((4,), "int32"),
    n: T.int32,
):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "int32", scope="shared")
            W[bx] = 1  # W is written by the kernel: its loads are not uniform
            if bx < 2:
                A[0] = 0.0
            if n > 100:
                A[0] = 0.0
            if C[bx] > 0:  # C is never written: read-only
                A[0] = 0.0
            if C[tx // 32] > 0:
                A[0] = 0.0
            if C[tx % 4] > 0:
                A[0] = 0.0
            if W[bx] > 0:
                A[0] = 0.0
            if tx // 32 == 1:
                A[0] = 0.0
            if tx < 32:
                A[0] = 0.0
            if tx // 64 == 0:  # 64 threads: always true
                A[0] = 0.0
            if S[0] > 0:  # one shared word, ordered against its writes by barriers
                A[0] = 0.0
            if S[tx] > 0:
                A[0] = 0.0
            if bx * 64 + tx < n:  # no premise: the last block may be split
                A[0] = 0.0
            if (bx * 64 + tx) // 64 < n:
                A[0] = 0.0
            if (bx * 64 + tx) % 64 < n:
                A[0] = 0.0
            if T.call_extern("int32", "clock") > 0:
                A[0] = 0.0


def test_each_form_gets_its_level():
    assert levels(forms) == [
        BLOCK, BLOCK, BLOCK, WARP, THREAD, THREAD, WARP, WARP, BLOCK, BLOCK, THREAD,
        THREAD, BLOCK, THREAD, THREAD,
    ]


@T.prim_func
def premises(A: T.Buffer((256,), "float32"), n: T.int32, m: T.int32):
    assert n % 64 == 0, "n must be a multiple of 64"
    T.assume(m % 32 == 0)
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:  # n % 64 == 0: a block is wholly in or out
                A[0] = 0.0
            if bx * 64 + tx >= n:
                A[0] = 0.0
            if bx * 64 + tx == n:  # true for thread 0 of one block only
                A[0] = 0.0
            if bx * 64 + tx < m:  # m % 32 == 0: whole warps
                A[0] = 0.0
            if bx * 64 + tx + 1 <= n:
                A[0] = 0.0
            if (bx * 64 + tx) // 64 < 2:
                A[0] = 0.0


def test_assert_and_assume_premises():
    assert levels(premises) == [BLOCK, BLOCK, THREAD, WARP, BLOCK, BLOCK]


@T.prim_func
def scoped_premises(A: T.Buffer((256,), "float32"), n: T.int32):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:  # the assert comes later: no premise yet
                A[0] = 0.0
            if bx < 1:  # block-uniform
                assert n % 64 == 0, "only checked in block 0"
                if bx * 64 + tx < n:  # after the assert in the same branch
                    A[0] = 0.0
            if bx * 64 + tx < n:  # the branch's assert does not hold here
                A[0] = 0.0
            if n % 64 == 0:
                if bx * 64 + tx < n:  # the enclosing `if` is a premise
                    A[0] = 0.0
            else:
                if bx * 64 + tx < n:  # ...that does not hold in its else branch
                    A[0] = 0.0


def test_premises_hold_only_where_they_dominate():
    assert levels(scoped_premises) == [THREAD, BLOCK, BLOCK, THREAD, BLOCK, BLOCK, THREAD]


@T.prim_func
def locals_and_loops(
    A: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32"), n: T.int32
):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for ty in T.thread_binding(1, thread="threadIdx.y"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                count: T.int32 = C[bx]
                mine: T.int32 = C[tx % 4]
                if count > 0:
                    A[0] = 0.0
                if mine > 0:
                    A[0] = 0.0
                if ty < 8:  # threadIdx.y has extent 1
                    A[0] = 0.0
                for k in range(n):
                    if k < count:  # a uniform loop's variable
                        A[0] = 0.0
                for j in range(tx, 64):
                    if j < 8:  # the loop starts at tx
                        A[0] = 0.0


def test_locals_thread_axes_of_extent_one_and_loop_variables():
    assert levels(locals_and_loops) == [BLOCK, THREAD, BLOCK, BLOCK, THREAD]


@T.prim_func
def view_write(A: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            V = T.decl_buffer((4,), "int32", data=C.data)
            if C[bx] > 0:  # V may be C's memory: C is not read-only
                A[0] = 0.0
            V[tx % 4] = 1


def test_a_write_through_a_view_makes_parameters_not_read_only():
    assert levels(view_write) == [THREAD]


@T.prim_func
def address_taken(A: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if C[bx] > 0:
                A[tx] = 0.0
            T.evaluate(T.call_extern("int32", "atomicAdd", T.address_of(C[0]), 1))


def test_an_address_taking_call_makes_a_buffer_not_read_only():
    assert levels(address_taken) == [THREAD]


@T.prim_func
def odd_block(A: T.Buffer((256,), "float32"), n: T.int32):
    assert n % 64 == 0, "n must be a multiple of 64"
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(48, thread="threadIdx.x"):
            if bx * 64 + tx < n:  # 48 threads within a 64-aligned range: still one side
                A[0] = 0.0
            if bx * 48 + tx < n:  # 48-wide blocks against a 64-aligned bound: split
                A[0] = 0.0


def test_blocks_that_are_not_whole_warps():
    assert levels(odd_block) == [BLOCK, THREAD]


def test_is_block_uniform_is_cached_per_expression_and_scope():
    analysis = UniformityAnalysis(premises)
    cond, scope = conditions(premises)[0]
    assert analysis.is_block_uniform(cond, scope)
    assert analysis.is_block_uniform(cond, scope)  # the cached answer
    other, other_scope = conditions(premises)[2]
    assert not analysis.is_block_uniform(other, other_scope)


@T.prim_func
def pointer_passed(A: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            p: T.let[T.handle("int32")] = T.address_of(C[0])
            if C[bx] > 0:  # the call below gets C's address through a variable
                A[tx] = 0.0
            T.evaluate(T.call_extern("int32", "atomicAdd", p, 1))


def test_a_pointer_variable_passed_to_a_call_makes_every_parameter_written():
    assert unwritten_global_buffers(pointer_passed) == {}
    assert levels(pointer_passed) == [THREAD]


@T.prim_func
def flattened_views(A: T.Buffer((256,), "float32"), C: T.Buffer((4,), "int32")):
    A_1 = T.decl_buffer((256,), data=A.data)
    C_1 = T.decl_buffer((4,), "int32", data=C.data)
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if C_1[bx] > 0:  # a view of a parameter only A's view writes
                A_1[bx * 64 + tx] = 0.0


def test_views_of_parameters_share_their_parameters_fate():
    read_only = {b.name for b in unwritten_global_buffers(flattened_views).values()}
    assert read_only == {"C", "C_1"}  # A is written through its view A_1
    assert levels(flattened_views) == [BLOCK]


@T.prim_func
def nested_loads(A: T.Buffer((256,), "float32"), C: T.Buffer((64,), "int32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "int32", scope="shared")
            if S[C[tx] % 64] > 0:  # a shared word picked per thread
                A[tx] = 0.0
            if S[C[bx] % 64] > 0:  # one word for the block
                A[tx] = 0.0


def test_a_load_indexed_by_a_per_thread_load_is_per_thread():
    assert levels(nested_loads) == [THREAD, BLOCK]

