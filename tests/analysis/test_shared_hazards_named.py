"""The hazard verifier's model of named barriers between warp-split branches."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from named_barrier_kernels import straight_split as straight_before
from named_barrier_kernels import ws_after as pipeline_synced
from named_barrier_kernels import ws_before as pipeline_before
from tvm import ir, tirx
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.analysis.shared_hazards import (
    HazardKind,
    find_divergent_barriers,
    find_shared_hazards,
)
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import TIRMutator, post_order_visit, rebuild
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers


def kinds(func):
    found = {(h.buffer, h.kind) for h in find_shared_hazards(func, "sm_90a")}
    return sorted(found, key=lambda pair: (pair[0], pair[1].name))




@pytest.mark.parametrize("before", [pipeline_before, straight_before])
def test_the_passs_named_barrier_output_has_no_hazards(before):
    assert kinds(before) == [("S", HazardKind.RAW)]
    assert kinds(insert_shared_barriers(before, "sm_90a")) == []


class _EditBarriers(TIRMutator):
    """Drop or re-number named barriers: ``edits`` maps (op, id) to a new id (0: drop)."""

    def __init__(self, edits, count):
        self.edits, self.count = edits, count

    def visit_Evaluate(self, node):
        call = node.value
        op = callee_name(call).rsplit("_", 1)[-1]  # "arrive" / "count" (bar.sync)
        key = ("arrive" if op == "arrive" else "sync", int(call.args[0].value))
        new_id = self.edits.get(key, key[1])
        if new_id == 0:
            return None
        args = list(call.args)
        args[0] = tirx.IntImm("uint32", new_id)
        args[1] = tirx.IntImm("uint32", self.count)
        return rebuild(node, {"value": rebuild(call, {"args": args})})


def _pipeline(edits, count=256):
    func = pipeline_synced
    return func.with_body(_EditBarriers(edits, count).visit(func.body))


def test_hand_written_pipeline_matches_the_model():
    assert kinds(pipeline_synced) == []
    assert kinds(_pipeline({})) == []  # the editor changes nothing by itself


@pytest.mark.parametrize(("edits", "count", "expected"), [
    ({("sync", 1): 0}, 256, HazardKind.RAW),  # consumer does not wait for the tile
    ({("arrive", 1): 0}, 256, HazardKind.RAW),  # producer never arrives at id 1
    ({("arrive", 1): 3}, 256, HazardKind.RAW),  # producer arrives at another id
    ({("sync", 1): 3}, 256, HazardKind.RAW),  # consumer waits on another id
    ({}, 128, HazardKind.RAW),  # 128 arrivals complete a phase without the consumers
    ({}, 512, HazardKind.RAW),  # more than the block: not the model's count
])
def test_broken_named_barriers_leave_the_hazard(edits, count, expected):
    hazards = find_shared_hazards(_pipeline(edits, count), "sm_90a")
    assert hazards, "the verifier must not certify this kernel"
    # one conflicting pair: the producer's write and the consumer's read (RAW is found
    # first; the WAR of the same pair is not reported twice)
    assert [(h.buffer, h.kind, h.first.describe(), h.second.describe()) for h in hazards] == [
        ("S", expected, "write S[tx]", "read S[255 - tx]")]


def test_dropping_the_war_pair_in_a_loop_gives_the_hazard_back():
    # Without the WAR pair the producer only arrives at id 1 and never waits: it can run a
    # whole iteration ahead and complete a phase of id 1 with its own second arrival, so
    # even the RAW order of id 1 is no longer proven; the pair is reported.
    hazards = find_shared_hazards(_pipeline({("arrive", 2): 0, ("sync", 2): 0}), "sm_90a")
    assert [(h.buffer, h.first.describe(), h.second.describe()) for h in hazards] == [
        ("S", "write S[tx]", "read S[255 - tx]")]


@T.prim_func
def producer_syncs_no_war_pair(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))  # waits for the consumers too
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[255 - tx]


def test_a_raw_pair_without_war_pair_leaves_exactly_the_war_hazard():
    # both sides sync on id 1, so its phases are exact and the RAW order is proven; the
    # consumer reads after its sync, so the producer's next write may overtake the read
    hazards = find_shared_hazards(producer_syncs_no_war_pair, "sm_90a")
    assert [(h.buffer, h.kind, h.first.describe(), h.second.describe()) for h in hazards] == [
        ("S", HazardKind.WAR, "read S[255 - tx]", "write S[tx]")]


@T.prim_func
def consumer_releases_before_reading(
    A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")
):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if tx < 128:
                S[tx] = A[k, tx]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                T.ptx.bar.arrive(T.uint32(2), T.uint32(256))  # too early: before the read
                B[k, tx - 128] = S[255 - tx]


def test_a_war_arrival_before_the_read_leaves_the_war_hazard():
    # both ids are phase-exact (each side waits on the other's id), the RAW order holds,
    # but the producer may write tile k+1 while a consumer still reads tile k
    hazards = find_shared_hazards(consumer_releases_before_reading, "sm_90a")
    assert [(h.buffer, h.kind, h.first.describe(), h.second.describe()) for h in hazards] == [
        ("S", HazardKind.WAR, "read S[255 - tx]", "write S[tx]")]


@T.prim_func
def run_ahead(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((8, 128), "float32", scope="shared")  # a fresh row per tile
        for k in range(8):
            if tx < 128:
                S[k, tx] = A[k, tx]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx - 128] = S[k, 255 - tx]


@T.prim_func
def run_ahead_once(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((8, 128), "float32", scope="shared")
        if tx < 128:
            S[0, tx] = A[0, tx]
            T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
        else:
            T.ptx.bar.sync(T.uint32(1), T.uint32(256))
            B[0, tx - 128] = S[0, 255 - tx]


def test_an_arrive_only_producer_in_a_loop_is_not_trusted():
    # No WAR conflict (each tile has its own row), but producer warps that only arrive can
    # arrive for tile k+1 before the consumers arrived for tile k; the counter then
    # completes a phase without them and a consumer may read a row not yet written.
    assert kinds(run_ahead) == [("S", HazardKind.RAW)]
    assert kinds(run_ahead_once) == []  # executed once: one phase, nothing to run ahead


def _split(condition, threads=(256,), tags=("threadIdx.x",)):
    """The straight-line RAW pipeline under another split condition / thread layout."""
    loops = "".join(
        f"{'    ' * (i + 1)}for t{i} in T.thread_binding({n}, thread=\"{tag}\"):\n"
        for i, (n, tag) in enumerate(zip(threads, tags, strict=True)))
    pad = "    " * (len(threads) + 1)
    linear = " + ".join(f"t{i}" + "".join(f" * {threads[j]}" for j in range(i))
                        for i in range(len(threads)))
    source = f"""
# from tvm.script import tirx as T
@T.prim_func
def f(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
{loops}{pad}S = T.alloc_buffer((256,), "float32", scope="shared")
{pad}lin: T.let[T.int32] = {linear}
{pad}if {condition}:
{pad}    S[lin] = A[lin]
{pad}    T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
{pad}else:
{pad}    T.ptx.bar.sync(T.uint32(1), T.uint32(256))
{pad}    B[lin] = S[255 - lin]
"""
    return from_source(source, extra_vars={"T": T})


@pytest.mark.parametrize(("condition", "threads", "tags"), [
    ("lin < 128", (256,), ("threadIdx.x",)),
    ("t0 >= 64", (256,), ("threadIdx.x",)),
    ("t0 // 32 % 2 == 0", (256,), ("threadIdx.x",)),  # even warps produce
    ("t1 < 4", (32, 8), ("threadIdx.x", "threadIdx.y")),  # warps 0-3 of a 32 x 8 block
    ("t1 < 2", (64, 4), ("threadIdx.x", "threadIdx.y")),
    ("t1 < 4", (16, 16), ("threadIdx.x", "threadIdx.y")),  # rows 0-3 = threads 0-63
])
def test_warp_aligned_splits_are_trusted(condition, threads, tags):
    assert kinds(_split(condition, threads, tags)) == []


@pytest.mark.parametrize(("condition", "threads", "tags"), [
    ("lin < 112", (256,), ("threadIdx.x",)),  # warp 3 is split: .aligned barriers are UB
    ("t0 % 2 == 0", (256,), ("threadIdx.x",)),
    ("t0 < 16", (32, 8), ("threadIdx.x", "threadIdx.y")),  # lanes 0-15 of every warp
    ("t1 < 3", (16, 16), ("threadIdx.x", "threadIdx.y")),  # rows 0-2 = threads 0-47
])
def test_splits_that_are_not_warp_aligned_are_not_trusted(condition, threads, tags):
    assert kinds(_split(condition, threads, tags)) == [("S", HazardKind.RAW)]


@T.prim_func
def roles_swap(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            if (tx + k * 128) % 256 < 128:  # producers and consumers swap every tile
                S[tx % 128] = A[k, tx % 128]
                T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
                T.ptx.bar.sync(T.uint32(2), T.uint32(256))
            else:
                T.ptx.bar.sync(T.uint32(1), T.uint32(256))
                B[k, tx % 128] = S[127 - tx % 128]
                T.ptx.bar.arrive(T.uint32(2), T.uint32(256))


def test_a_split_that_changes_between_executions_is_not_trusted():
    assert HazardKind.RAW in {kind for _, kind in kinds(roles_swap)}


@T.prim_func
def id_used_after_the_split(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tx < 128:
            S[tx] = A[tx]
            T.ptx.bar.arrive(T.uint32(1), T.uint32(256))
        else:
            T.ptx.bar.sync(T.uint32(1), T.uint32(256))
            B[tx - 128] = S[255 - tx]
        T.ptx.bar.sync(T.uint32(1))  # id 1 again, elsewhere: its phases are not the split's


def test_an_id_used_outside_the_split_is_not_trusted():
    assert kinds(id_used_after_the_split) == [("S", HazardKind.RAW)]


@T.prim_func
def uniform_counted_sync(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        S[tx] = A[tx]
        T.ptx.bar.sync(T.uint32(1), T.uint32(128))
        B[tx] = S[255 - tx]


def _with_count(func, count):
    return func.with_body(_EditBarriers({}, count).visit(func.body))


def test_a_counted_sync_is_a_full_barrier_only_with_the_block_size():
    # bar.sync(1, 128) in a 256-thread block releases the first 4 warps that arrive
    assert kinds(uniform_counted_sync) == [("S", HazardKind.RAW)]
    assert kinds(_with_count(uniform_counted_sync, 256)) == []


def test_trusted_named_barriers_are_not_divergent_barriers():
    assert find_divergent_barriers(pipeline_synced) == []
    broken = _pipeline({("arrive", 1): 3})
    assert len(find_divergent_barriers(broken)) == 2  # the two bar.sync ops


class _ArriveAgain(TIRMutator):
    """Append a second ``bar.arrive(1)`` to the consumer (else) branch."""

    def visit_IfThenElse(self, node):
        last = node.else_case.seq[-1]  # the consumer's bar.arrive(2)
        call = last.value
        again = rebuild(last, {"value": rebuild(call, {"args": [tirx.IntImm("uint32", 1),
                                                              *list(call.args)[1:]]})})
        return rebuild(node, {"else_case": tirx.SeqStmt([*node.else_case.seq, again])})


def test_an_id_used_twice_in_a_branch_is_not_trusted():
    id_reused = pipeline_synced.with_body(_ArriveAgain().visit(pipeline_synced.body))
    assert "T.uint32(1), T.uint32(256)" in id_reused.script()
    assert kinds(id_reused) != []


# -- generated warp-split kernels -----------------------------------------------------------
_PRODUCER_OPS = [
    "S[tx] = A[k, tx]",
    "S[tx] = A[k, tx] + T.float32({c})",  # producers write only their own elements
    "for j in range(2):\n{pad}    S[tx] = S[tx] * T.float32(0.5)",  # own elements only
    "C[k, tx] = A[k, tx]",  # no shared traffic
]
_CONSUMER_OPS = [
    "B[k, tx] = S[(tx + {c}) % {p}]",
    "B[k, tx] = S[255 - tx] * T.float32(2)",
    "for j in range(2):\n{pad}    B[k, tx] = B[k, tx] + S[(tx * 2 + j) % {p}]",
    "B[k, tx] = A[k, tx]",  # no shared traffic
]


@st.composite
def split_kernels(draw):
    """A warp-split kernel (warps below ``p`` produce, the others consume), straight-line
    or in a loop; and whether both sides touch S (then they always race)."""
    split = 32 * draw(st.integers(1, 7))
    in_loop = draw(st.booleans())
    pad = "    " * (4 if in_loop else 3)

    def ops(table):
        chosen = draw(st.lists(st.tuples(st.integers(0, len(table) - 1), st.integers(1, 255)),
                               min_size=1, max_size=3))
        return [table[i].format(c=c, p=split, pad=pad) for i, c in chosen]

    producer, consumer = ops(_PRODUCER_OPS), ops(_CONSUMER_OPS)
    loop = "        for k in range(4):" if in_loop else "        k = 0"
    lines = [loop, pad[:-4] + f"if tx < {split}:"]
    lines += [pad + op for op in producer]
    lines += [pad[:-4] + "else:"] + [pad + op for op in consumer]
    body = "\n".join(lines)
    return f'''
# from tvm.script import tirx as T
@T.prim_func
def k(A: T.Buffer((4, 256), "float32"), B: T.Buffer((4, 256), "float32"),
      C: T.Buffer((4, 256), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
{body}
''', any("S[" in op for op in producer) and any("S[" in op for op in consumer)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=split_kernels(), drop=st.integers(0, 3))
def test_generated_split_kernels_verify_clean_after_the_pass(case, drop):
    source, races = case
    func = from_source(source, extra_vars={"T": T})
    before = find_shared_hazards(func, "sm_90a")
    # every producer write and every consumer read touch overlapping elements
    assert bool(before) == races, source
    after = insert_shared_barriers(func, "sm_90a")
    assert find_shared_hazards(after, "sm_90a") == [], after.script()
    # without any one of the pass's named barriers the race is back
    present = _barrier_keys(after)
    assert bool(present) == races
    if present:
        broken = after.with_body(_EditBarriers({present[drop % len(present)]: 0}, 256)
                                 .visit(after.body))
        assert {h.buffer for h in find_shared_hazards(broken, "sm_90a")} == {"S"}, broken.script()


def _barrier_keys(func):
    keys = []

    def visit(node):
        if isinstance(node, tirx.Evaluate) and isinstance(node.value, ir.expr.Call):
            name = callee_name(node.value)
            if name in ("tirx.ptx.bar_arrive", "tirx.ptx.bar_sync_count",
                        "tirx.ptx.barrier_sync_count"):
                keys.append(("arrive" if name.endswith("arrive") else "sync",
                             int(node.value.args[0].value)))

    post_order_visit(func.body, visit)
    return keys
