"""``commit_copy_runs``: a commit after each maximal run of cp.async copy statements.

Before/after cases for the statement roles (a copy, shared memory touched otherwise, neither,
both) and a property test against a model of the runs written here from the rule itself:
statement trees of copies, shared reads, global-only statements and serial loops."""

import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.ir.ops import call_op
from tilewave.transforms.async_groups import commit_copy_runs, waits_on_groups


@T.prim_func
def run_then_reading_loop(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        B[tx] = A[tx]  # global only: does not end the run
        T.ptx.cp.async_.cg.shared.global_(
            T.address_of(S[tx * 4 + 128]), T.address_of(A[tx * 4 + 128]), 16
        )
        for k in range(4):  # no copy inside, but it reads shared memory: ends the run
            B[k * 32 + tx] = A[tx]
            B[tx] = S[k * 32 + tx]


@T.prim_func
def run_then_reading_loop_after(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        B[tx] = A[tx]
        T.ptx.cp.async_.cg.shared.global_(
            T.address_of(S[tx * 4 + 128]), T.address_of(A[tx * 4 + 128]), 16
        )
        T.tilewave.commit_async_ops()
        for k in range(4):
            B[k * 32 + tx] = A[tx]
            B[tx] = S[k * 32 + tx]


@T.prim_func
def neutral_loop_inside_run(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        for k in range(4):  # global memory only: the run goes on
            B[k * 32 + tx] = A[k * 32 + tx]
        T.ptx.cp.async_.cg.shared.global_(
            T.address_of(S[tx * 4 + 128]), T.address_of(A[tx * 4 + 128]), 16
        )
        B[tx] = S[255 - tx]


@T.prim_func
def neutral_loop_inside_run_after(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        for k in range(4):
            B[k * 32 + tx] = A[k * 32 + tx]
        T.ptx.cp.async_.cg.shared.global_(
            T.address_of(S[tx * 4 + 128]), T.address_of(A[tx * 4 + 128]), 16
        )
        T.tilewave.commit_async_ops()
        B[tx] = S[255 - tx]


@T.prim_func
def mixed_loop(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        for k in range(4):  # copies and reads: its body gets its own commits
            B[tx] = S[tx]
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[tx * 4]), T.address_of(A[k * 4 + tx]), 16
            )
            B[k * 32 + tx] = A[tx]
        B[tx] = A[tx]


@T.prim_func
def mixed_loop_after(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        for k in range(4):
            B[tx] = S[tx]
            T.ptx.cp.async_.cg.shared.global_(
                T.address_of(S[tx * 4]), T.address_of(A[k * 4 + tx]), 16
            )
            T.tilewave.commit_async_ops()  # right after the run's last copy
            B[k * 32 + tx] = A[tx]
        B[tx] = A[tx]


@T.prim_func
def already_commits(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        B[tx] = A[tx]
        T.ptx.cp.async_.commit_group()
        T.ptx.cp.async_.cg.shared.global_(
            T.address_of(S[tx * 4 + 128]), T.address_of(A[tx * 4 + 128]), 16
        )
        B[tx] = S[255 - tx]


def test_a_loop_reading_shared_memory_ends_a_run_though_it_copies_nothing():
    got = commit_copy_runs(run_then_reading_loop.body)
    tvm.ir.assert_structural_equal(got, run_then_reading_loop_after.body, map_free_vars=True)


def test_a_global_only_loop_inside_a_run_does_not_end_it():
    got = commit_copy_runs(neutral_loop_inside_run.body)
    tvm.ir.assert_structural_equal(got, neutral_loop_inside_run_after.body, map_free_vars=True)


def test_a_loop_that_copies_and_reads_gets_its_commits_inside():
    got = commit_copy_runs(mixed_loop.body)
    tvm.ir.assert_structural_equal(got, mixed_loop_after.body, map_free_vars=True)


def test_a_kernel_that_commits_itself_is_left_alone():
    assert commit_copy_runs(already_commits.body).same_as(already_commits.body)


@T.prim_func
def waits_for_a_group(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        T.tilewave.commit_async_ops()
        T.tilewave.wait_async_ops(1)
        T.tilewave.lds_barrier()
        B[tx] = S[255 - tx]


def test_waits_on_groups_sees_a_group_wait_and_nothing_else():
    assert waits_on_groups(waits_for_a_group.body)
    assert not waits_on_groups(run_then_reading_loop_after.body)  # commits, no wait


# -- property: statement trees against a model of the rule ---------------------------------
@T.prim_func
def _template(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        T.ptx.cp.async_.cg.shared.global_(T.address_of(S[tx * 4]), T.address_of(A[tx * 4]), 16)
        B[tx] = S[255 - tx]
        B[tx] = A[tx]


def _template_leaves() -> dict[str, tirx.Stmt]:
    seq = _template.body
    while not isinstance(seq, tirx.SeqStmt):
        seq = seq.body
    copy, read, plain = list(seq.seq)[-3:]
    return {"copy": copy, "read": read, "global": plain}


_LEAVES = _template_leaves()
_OUTER = _template.body  # the thread loop: `tx` stays bound


def _leaf(kind: str) -> tirx.Stmt:
    """A new statement node (its own handle) of the template's ``kind`` statement."""
    leaf = _LEAVES[kind]
    if kind == "copy":
        return tirx.Evaluate(leaf.value)
    return tirx.BufferStore(leaf.buffer, leaf.value, leaf.indices)


_trees = st.recursive(
    st.sampled_from(["copy", "read", "global"]),
    lambda inner: st.lists(inner, min_size=1, max_size=4).map(lambda xs: ("loop", xs)),
    max_leaves=14,
)


def _role(item) -> str:
    """copy / other / neutral / mixed, from the rule (written here, not the pass's)."""
    if isinstance(item, str):
        return {"copy": "copy", "read": "other", "global": "neutral"}[item]
    roles = {_role(x) for x in item[1]} - {"neutral"}
    if not roles:
        return "neutral"
    if roles == {"copy"}:
        return "copy"
    return "mixed" if roles & {"copy", "mixed"} else "other"


def _build(items, expected: bool, counter: list[int]) -> tirx.Stmt:
    out: list[tirx.Stmt] = []
    open_run_end = None
    for item in items:
        role = _role(item) if expected else None
        if expected and role == "copy":
            out.append(_node(item, False, counter))  # a run's statements stay as they are
            open_run_end = len(out)
            continue
        if expected and role != "neutral" and open_run_end is not None:
            out.insert(open_run_end, call_op("tilewave.commit_async_ops"))
            open_run_end = None
        out.append(_node(item, expected and role == "mixed", counter))
    if expected and open_run_end is not None:
        out.insert(open_run_end, call_op("tilewave.commit_async_ops"))
    return out[0] if len(out) == 1 else tirx.SeqStmt(out)


def _node(item, rewrite: bool, counter: list[int]) -> tirx.Stmt:
    counter[0] += 1
    if isinstance(item, str):
        return _leaf(item)
    var = tirx.Var(f"k{counter[0]}", "int32")
    body = _build(item[1], rewrite, counter)
    return tirx.For(var, 0, 2, tirx.ForKind.SERIAL, body)


@settings(max_examples=60, deadline=None)
@given(st.lists(_trees, min_size=1, max_size=6))
def test_commits_close_exactly_the_model_runs(items):
    before = _build(items, False, [0])
    expected = _build(items, True, [0])
    got = commit_copy_runs(before)
    if "mixed" not in {_role(("loop", items))}:
        assert got.same_as(before)
        return
    tvm.ir.assert_structural_equal(got, expected, map_free_vars=True)
