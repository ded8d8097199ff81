"""Property test: the hazard verifier is the oracle for InsertSharedBarriers.

Small random kernels (stores, loads, atomics, async copies, barriers, ``for`` and
``while`` loops (counter-driven, uniform or thread-dependent), uniform and divergent
branches over two shared buffers; indices through ``Bind`` variables and, inside
loops, multibuffer-style slots ``(k & 1) * 32 + ...`` and ``tx + k``) are printed as
TVMScript and parsed. For each:
after the pass the verifier finds no hazard; the pass changes a kernel only when the
verifier found a hazard in it; and a second run changes nothing.
"""

import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.transforms.insert_shared_barriers import (
    DivergentBarrierError,
    insert_shared_barriers,
)

THREADS = 32
INDICES = [
    "tx",
    f"{THREADS - 1} - tx",
    f"(tx + 1) % {THREADS}",
    "0",
    f"tx + {THREADS}",
    "tx * 2",
    f"tx + {THREADS // 2}",
]
#: indices using the innermost loop variable ``{k}`` (copies of a multibuffered tile)
LOOP_INDICES = [
    f"({{k}} & 1) * {THREADS} + tx",
    f"({{k}} & 1) * {THREADS} + {THREADS - 1} - tx",
    f"(({{k}} + 1) & 1) * {THREADS} + (tx + 1) % {THREADS}",
    "tx + {k}",
]
BUFFERS = ["S", "R"]
TARGETS = ["gfx942", "gfx1200", "sm_90a"]


@st.composite
def leaf(draw, divergent, loop_var, counter):
    buf = draw(st.sampled_from(BUFFERS))
    choices = INDICES + ([i.format(k=loop_var) for i in LOOP_INDICES] if loop_var else [])
    idx = draw(st.sampled_from(choices))
    prefix = []
    if draw(st.integers(0, 3)) == 0:  # through a Bind variable, as CSE writes it
        counter[0] += 1
        prefix = [f"v{counter[0]}: T.let[T.int32] = {idx}"]
        idx = f"v{counter[0]}"
    kind = draw(st.sampled_from(["store", "load", "load", "work", "atomic", "async", "barrier"]))
    if kind == "store":
        return [*prefix, f"{buf}[{idx}] = A[tx] + 1"]
    if kind == "load":
        return [*prefix, f"B[tx] = B[tx] + {buf}[{idx}]"]
    if kind == "work":
        return ["B[tx] = B[tx] * 3"]
    if kind == "atomic":
        return [
            *prefix,
            f'T.evaluate(T.call_intrin("int32", "tirx.atomic_add", T.address_of({buf}[{idx}]), 1))',
        ]
    if kind == "async":
        return [
            f"T.ptx.cp.async_.ca.shared.global_(T.address_of({buf}[tx]), T.address_of(A[tx]), 4)"
        ]
    return ["B[tx] = B[tx] * 3"] if divergent else ["T.tilewave.lds_barrier()"]


def block(depth, counter, divergent=False, loop_var=None):
    @st.composite
    def make(draw):
        lines = []
        for _ in range(draw(st.integers(1, 3))):
            choice = draw(
                st.sampled_from(["leaf", "leaf", "loop", "if_u", "if_d", "while_u", "while_d"])
            )
            if choice == "leaf" or depth == 0:
                lines += draw(leaf(divergent, loop_var, counter))
                continue
            counter[0] += 1
            name = f"k{counter[0]}" if choice == "loop" else loop_var
            inner_divergent = divergent or choice in ("if_d", "while_d")
            body = draw(block(depth - 1, counter, inner_divergent, name))
            header = {
                "loop": f"for {name} in range({draw(st.integers(1, 4))}):",
                "if_u": "if n > 0:",
                "if_d": f"if tx < {THREADS // 2}:",
                "while_u": f"while w{counter[0]} < n:",
                "while_d": f"while w{counter[0]} < tx % 3:",
            }[choice]
            if choice.startswith("while"):
                # a local counter: uniform (``while_u``) unless the bound is per thread
                lines.append(f"w{counter[0]}: T.int32 = 0")
                body = [*body, f"w{counter[0]} = w{counter[0]} + 1"]
            lines.append(header)
            lines += ["    " + ln for ln in body]
        return lines

    return make()


@st.composite
def kernels(draw):
    body = draw(block(2, [0]))
    text = "\n".join("        " + ln for ln in body)
    return f'''
# from tvm.script import tirx as T
@T.prim_func
def k(A: T.Buffer(({2 * THREADS},), "int32"), B: T.Buffer(({THREADS},), "int32"), n: T.int32):
    for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):
        S = T.alloc_buffer(({2 * THREADS},), "int32", scope="shared")
        R = T.alloc_buffer(({2 * THREADS},), "int32", scope="shared")
{text}
'''


STATS = {"changed": 0, "unchanged": 0, "divergent": 0}


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=kernels(), target=st.sampled_from(TARGETS))
def test_verifier_finds_no_hazard_after_the_pass(source, target):
    func = from_source(source, extra_vars={"T": T})
    before = find_shared_hazards(func, target)
    try:
        after = insert_shared_barriers(func, target)
    except DivergentBarrierError:
        # a barrier would be needed where only some threads run: the input must race
        assert before, source
        STATS["divergent"] += 1
        return
    assert find_shared_hazards(after, target) == [], after.script()
    if after.same_as(func):
        assert not before, source
        STATS["unchanged"] += 1
    else:
        assert before, f"barrier inserted into a hazard-free kernel:\n{after.script()}"
        STATS["changed"] += 1
    tvm.ir.assert_structural_equal(insert_shared_barriers(after, target), after)


def test_generated_kernels_cover_every_outcome():
    """The generator reaches all three outcomes (run after the property test above)."""
    if sum(STATS.values()) == 0:
        test_verifier_finds_no_hazard_after_the_pass()
    assert all(STATS.values()), STATS
