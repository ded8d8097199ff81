"""examples/sm80_gemm.py and sm80_flash_attention.py: the kernels parse, the hand variants
emit the sm_80 instructions with exactly the hand's synchronisation, the stripped and plain
variants carry none, and the verifier's view of each."""

from __future__ import annotations

import re

import pytest
from example_loader import load_example

from tilewave.analysis.shared_access import sync_action
from tilewave.analysis.shared_hazards import HazardKind, find_shared_hazards
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import TIRVisitor

GEMM = load_example("sm80_gemm.py")
ATTENTION = load_example("sm80_flash_attention.py")
VARIANTS = load_example("real_kernel_variants.py")
SMALL_GEMM = (256, 256, 256)
SMALL_ATTENTION = (2, 256)

#: (family module, small-size arguments)
KERNELS = {"gemm": (GEMM, SMALL_GEMM), "attention": (ATTENTION, SMALL_ATTENTION)}


def variant(kind: str, name: str):
    module, args = KERNELS[kind]
    return getattr(module, name)(*args)


class _Census(TIRVisitor):
    """Sync statements (by kind) and calls (by op name) of a kernel."""

    def __init__(self) -> None:
        self.sync: list[str] = []
        self.calls: dict[str, int] = {}

    def visit_Evaluate(self, node) -> None:
        action = sync_action(node)
        if action is not None:
            self.sync.append(f"{action.kind.value}:{action.arg}")
        self.generic_visit(node)

    def visit_Call(self, node) -> None:
        name = callee_name(node)
        self.calls[name] = self.calls.get(name, 0) + 1
        self.generic_visit(node)


def census(func) -> _Census:
    found = _Census()
    found.visit(func.body)
    return found


def kernel_body(source: str) -> str:
    return source[source.index('extern "C" __global__') :]


@pytest.fixture(scope="module", params=sorted(KERNELS))
def hand_source(request):
    return request.param, VARIANTS.build_hand(variant(request.param, "hand"))


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_hand_has_one_wait_one_barrier_per_step_and_two_commits(kind):
    sync = census(variant(kind, "hand")).sync
    # prologue commit (in its unrolled loop), then per step: wait_group 1, barrier, commit
    assert sync == ["async_commit:0", "async_wait:1", "barrier:0", "async_commit:0"]


@pytest.mark.parametrize("kind", sorted(KERNELS))
@pytest.mark.parametrize("name", ["stripped", "plain"])
def test_stripped_and_plain_carry_no_sync_and_the_same_instructions(kind, name):
    hand, other = census(variant(kind, "hand")), census(variant(kind, name))
    assert other.sync == []
    for op in ("tirx.ptx.ldmatrix", "tirx.ptx.mma"):
        assert other.calls[op] == hand.calls[op], op
    # the hand kernel copies in its prologue and in its loop; plain only in its loop
    copies = hand.calls["tirx.ptx.cp_async_cg"] // (2 if name == "plain" else 1)
    assert other.calls["tirx.ptx.cp_async_cg"] == copies


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_plain_has_one_shared_stage(kind):
    source = VARIANTS.build_hand(variant(kind, "plain"))
    sizes = [int(n) for n in re.findall(r"__shared__ alignas\(\d+\) half \w+\[(\d+)\]", source)]
    hand_sizes = [
        int(n)
        for n in re.findall(
            r"__shared__ alignas\(\d+\) half \w+\[(\d+)\]",
            VARIANTS.build_hand(variant(kind, "hand")),
        )
    ]
    assert len(sizes) == 2 and [3 * s for s in sizes] == hand_sizes


def test_hand_cuda_has_the_sm80_instructions_and_only_the_hand_sync(hand_source):
    kind, source = hand_source
    body = kernel_body(source)
    for instruction in (
        "cp.async.cg.shared.global [%0], [%1], 16;",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "cp.async.wait_group 1;",
        "cp.async.commit_group;",
    ):
        assert instruction in source, instruction
    if kind == "attention":
        for instruction in ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cvt.rn.f16x2.f32"):
            assert instruction in source, instruction
        assert "__shfl_xor_sync" in body
    assert body.count("__syncthreads()") == 1
    assert len(re.findall(r"wait_group_\d+\(\)", body)) == 1
    # the tiles keep their declared size: 3 stages x 128 x 32 (GEMM) / 3 x 64 x 64 halves
    assert body.count("half As_ptr[12288]") + body.count("half Ks_ptr[12288]") == 1


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_stripped_kernel_races_for_the_verifier(kind):
    hazards = find_shared_hazards(variant(kind, "stripped"), "sm_90a")
    assert any(h.kind is HazardKind.RAW for h in hazards), hazards


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_hand_kernel_verifies_clean(kind):
    assert find_shared_hazards(variant(kind, "hand"), "sm_90a") == []


# --- benchmarks/real_kernels_h100.py --emit ----------------------------------------------


def _failing_build() -> str:
    raise RuntimeError("no such pass")


def test_emit_writes_sources_sync_counts_and_failed_builds_as_rows(tmp_path, monkeypatch):
    from example_loader import REPO_ROOT, load_module

    bench = load_module(REPO_ROOT / "benchmarks" / "real_kernels_h100.py")
    gemm = GEMM.family(*SMALL_GEMM)
    family = VARIANTS.KernelFamily(
        name=gemm.name,
        problem=gemm.problem,
        grid=gemm.grid,
        block=gemm.block,
        flops=gemm.flops,
        variants=(
            gemm.variants[0],
            VARIANTS.BenchVariant("broken", "tilewave", _failing_build, "fails on purpose"),
        ),
    )
    monkeypatch.setattr(bench, "load_families", lambda small: [family])
    manifest = bench.emit_size(tmp_path, small=True)
    entry = manifest["families"]["sm80_gemm"]
    assert entry["problem"] == {"kind": "gemm_nt", "m": 256, "n": 256, "k": 256,
                                "dtype": "float16"}
    hand = entry["variants"]["hand"]
    assert hand["kernel"] == "sm80_gemm_kernel" and hand["params"] == ["A", "B", "C"]
    # commits: the two unrolled prologue copies and the loop's
    assert hand["sync"] == {"barriers": 1, "waits": {"1": 1}, "wait_all": 0, "commits": 3}
    assert (tmp_path / hand["file"]).read_text().count("mma.sync.aligned.m16n8k16") == 1
    broken = entry["variants"]["broken"]
    assert broken["error"] == "RuntimeError: no such pass" and "file" not in broken


# --- the synchronisation tilewave gives the stripped and plain kernels -------------------


def _loop_skeleton(func) -> list[str]:
    """The top-level statements of the K loop's body: sync statements by kind (with the
    group count of a wait), other statements by node type."""
    from tvm import tirx

    class _FindLoop(TIRVisitor):
        def __init__(self) -> None:
            self.loop = None

        def visit_For(self, node) -> None:
            if node.kind == tirx.ForKind.SERIAL and str(node.loop_var.name) in ("kt", "j"):
                self.loop = node
                return
            self.generic_visit(node)

    finder = _FindLoop()
    finder.visit(func.body)
    body = finder.loop.body
    statements = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    skeleton = []
    for stmt in statements:
        action = sync_action(stmt)
        if action is None:
            skeleton.append(type(stmt).__name__)
        elif action.kind.value == "async_wait":
            skeleton.append(f"wait {action.arg}")
        else:
            skeleton.append(action.kind.value)
    return skeleton


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_stripped_kernel_gets_the_hand_sync_in_its_k_loop(kind):
    from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

    synced = insert_shared_barriers(variant(kind, "stripped"), "sm_90a")
    hand = _loop_skeleton(variant(kind, "hand"))
    # wait_group STAGES - 2 and one barrier before the prefetch, its commit right after it
    assert hand[:4] == ["wait 1", "barrier", "IfThenElse", "async_commit"]
    assert _loop_skeleton(synced) == hand
    assert find_shared_hazards(synced, "sm_90a") == []


@pytest.mark.parametrize("kind", sorted(KERNELS))
@pytest.mark.parametrize("count", [2, 3])
def test_plain_kernel_multibuffered_and_prefetched_gets_the_hand_schedule(kind, count):
    from tilewave.transforms.async_prefetch import prefetch_async_copies
    from tilewave.transforms.insert_shared_barriers import insert_shared_barriers
    from tilewave.transforms.multibuffer import multi_buffer

    # the pipeline's order: MultiBuffer, PrefetchAsyncCopies, ..., InsertSharedBarriers
    pipelined = prefetch_async_copies(multi_buffer(variant(kind, "plain"), count=count))
    synced = insert_shared_barriers(pipelined, "sm_90a")
    # per K step: wait_group N - 2 (the copy N - 1 steps ahead stays in flight), one
    # barrier (no WAR barrier: N stages), the prefetch and its commit, then the compute
    assert _loop_skeleton(synced)[:4] == [f"wait {count - 2}", "barrier", "IfThenElse",
                                          "async_commit"]
    assert _loop_skeleton(synced).count("barrier") == 1
    assert find_shared_hazards(synced, "sm_90a") == []
