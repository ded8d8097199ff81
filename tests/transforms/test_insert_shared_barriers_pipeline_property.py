"""Generated cp.async pipelines (1-4 stages, commits, waits and barriers placed at random or
left out, plain or XOR-swizzled reads of other threads' elements) through
InsertSharedBarriers: the verifier finds nothing afterwards, and executing the result in
``tilewave.racecheck`` (where a copy lands only at the ``wait_group`` that retires its
committed group) finds no race, so no inserted or kept wait retires too few groups.
"""

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

THREADS = 32
STEPS = 5


def _read_index(swizzled: bool) -> str:
    # another thread's first element of its 16-byte chunk
    if swizzled:
        return "T.bitwise_xor(tx, 5) * 4"
    return "(THREADS - 1 - tx) * 4"


@st.composite
def pipelines(draw):
    stages = draw(st.integers(1, 4))
    swizzled = draw(st.booleans())
    prologue_commit = draw(st.booleans())
    wait = draw(st.sampled_from([None, 0, 1, 2, 3]))
    barrier_at_top = draw(st.booleans())
    loop_commit = draw(st.sampled_from(["none", "after_copy", "before_read"]))
    ahead = stages - 1
    lines = [
        "# from tvm.script import tirx as T",
        "@T.prim_func",
        f"def k(A: T.Buffer(({STEPS}, {THREADS * 4}), 'float32'),"
        f" B: T.Buffer(({STEPS}, {THREADS}), 'float32')):",
        f"    for tx in T.thread_binding({THREADS}, thread='threadIdx.x'):",
        f"        S = T.alloc_buffer(({stages}, {THREADS * 4}), 'float32', scope='shared')",
    ]
    if ahead:
        lines += [
            f"        for s in range({ahead}):",
            "            T.ptx.cp.async_.cg.shared.global_("
            "T.address_of(S[s, tx * 4]), T.address_of(A[s, tx * 4]), 16)",
        ]
        if prologue_commit:
            lines.append("            T.ptx.cp.async_.commit_group()")
    lines.append(f"        for k in range({STEPS}):")
    if wait is not None:
        lines.append(f"            T.ptx.cp.async_.wait_group({wait})")
    if barrier_at_top:
        lines.append("            T.tvm_storage_sync('shared')")
    lines += [
        f"            if k + {ahead} < {STEPS}:",
        "                T.ptx.cp.async_.cg.shared.global_("
        f"T.address_of(S[(k + {ahead}) % {stages}, tx * 4]),"
        f" T.address_of(A[k + {ahead}, tx * 4]), 16)",
    ]
    if loop_commit == "after_copy":
        lines.append("            T.ptx.cp.async_.commit_group()")
    read = _read_index(swizzled).replace("THREADS", str(THREADS))
    lines.append(f"            B[k, tx] = S[k % {stages}, {read}]")
    if loop_commit == "before_read":
        lines.insert(-1, "            T.ptx.cp.async_.commit_group()")
    source = "\n".join(lines) + "\n"
    return source, from_source(source, extra_vars={"T": T})


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(pipelines())
def test_generated_pipelines_are_race_free_after_the_pass(case):
    source, kernel = case
    # the input: whatever racecheck executes as a race, the verifier reports too
    if not tilewave.racecheck(kernel, "sm_90a").ok:
        assert find_shared_hazards(kernel, "sm_90a"), source
    after = insert_shared_barriers(kernel, "sm_90a")
    hazards = find_shared_hazards(after, "sm_90a")
    assert hazards == [], f"{source}\n{after.script()}"
    report = tilewave.racecheck(after, "sm_90a")
    assert report.ok, f"{source}\n{after.script()}\n{report.format()}"
