"""The hazard verifier's model of named barriers between warp-split branches."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from named_barrier_kernels import ws_after as pipeline_synced
from named_barrier_kernels import ws_before as pipeline_before
from tvm import tirx
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import TIRMutator, rebuild
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers


def kinds(func):
    return sorted((h.buffer, h.kind) for h in find_shared_hazards(func, "sm_90a"))


@T.prim_func
def straight_before(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tx < 128:
            S[tx] = A[tx] * T.float32(2)
        else:
            B[tx - 128] = S[255 - tx]


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
    ({("arrive", 2): 0, ("sync", 2): 0}, 256, HazardKind.WAR),  # no WAR pair
    ({}, 128, HazardKind.RAW),  # 128 arrivals complete a phase without the consumers
])
def test_broken_named_barriers_leave_the_hazard(edits, count, expected):
    hazards = find_shared_hazards(_pipeline(edits, count), "sm_90a")
    assert hazards, "the verifier must not certify this kernel"
    assert {h.buffer for h in hazards} == {"S"}
    # one conflicting pair (the write and the read); its kind names the first access
    assert {h.kind for h in hazards} <= {expected, HazardKind.WAR}


def test_missing_war_pair_is_reported_as_the_read_then_the_next_write():
    hazards = find_shared_hazards(_pipeline({("arrive", 2): 0, ("sync", 2): 0}), "sm_90a")
    assert [(h.first.describe(), h.second.describe()) for h in hazards] == [
        ("read S[255 - tx]", "write S[tx]")]
    assert hazards[0].kind is HazardKind.WAR


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
    "B[k, tx] = A[k, tx]",  # no shared traffic
]
_CONSUMER_OPS = [
    "B[k, tx - 128] = S[(tx + {c}) % 128]",
    "B[k, tx - 128] = S[255 - tx] * T.float32(2)",
    "B[k, tx - 128] = A[k, tx - 128]",  # no shared traffic
]


@st.composite
def split_kernels(draw):
    def ops(table):
        chosen = draw(st.lists(st.tuples(st.integers(0, len(table) - 1), st.integers(1, 127)),
                               min_size=1, max_size=3))
        return [table[i].format(c=c) for i, c in chosen]

    producer, consumer = ops(_PRODUCER_OPS), ops(_CONSUMER_OPS)
    in_loop = draw(st.booleans())
    pad = "    " * (4 if in_loop else 3)
    loop = "        for k in range(4):\n" if in_loop else "        k = 0\n"
    lines = [loop.rstrip("\n"), pad[:-4] + "if tx < 128:"]
    lines += [pad + op for op in producer]
    lines += [pad[:-4] + "else:"] + [pad + op for op in consumer]
    body = "\n".join(lines)
    return f'''
# from tvm.script import tirx as T
@T.prim_func
def k(A: T.Buffer((4, 256), "float32"), B: T.Buffer((4, 256), "float32")):
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
{body}
''', any("S[" in op for op in producer) and any("S[" in op for op in consumer)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=split_kernels())
def test_generated_split_kernels_verify_clean_after_the_pass(case):
    source, races = case
    func = from_source(source, extra_vars={"T": T})
    before = find_shared_hazards(func, "sm_90a")
    # every producer write and every consumer read touch overlapping elements
    assert bool(before) == races, source
    after = insert_shared_barriers(func, "sm_90a")
    assert find_shared_hazards(after, "sm_90a") == [], after.script()
