"""AMD barriers drain LDS first (issue 17): before/after TIR of the wait placement, the
assembly LLVM and tilewave's backend make of it, and the assembly checker finding the race
in the lowering without the waits."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
import amd_barrier_kernels as K
import asm_lds_checker
from example_loader import load_module

import tilewave
from tilewave.codegen import amdgcn, lower_ops
from tilewave.codegen.amd_barrier_waits import insert_amd_barrier_waits
from tilewave.codegen.lower_ops import lower_tilewave_ops
from tilewave.errors import TargetFeatureError

GFX9 = ("gfx942", "gfx950")
GFX12 = ("gfx1200", "gfx1201")


def _body(asm: str, name: str) -> list[str]:
    """The kernel's instructions, without comments and directives."""
    start = asm.index(f"{name}_kernel:" if f"{name}_kernel:" in asm else f"{name}:")
    out = []
    for line in asm[start:].splitlines()[1:]:
        text = line.split(";")[0].strip()
        if not text or text.startswith("."):
            continue
        out.append(re.sub(r"\s+", " ", text))
        if text == "s_endpgm":
            break
    return out


def _llvm_asm(func, target: str) -> str:
    return tilewave.build(func, target).source


@pytest.fixture
def old_lowering(monkeypatch):
    """The lowering before issue 17: the op table alone, no counter waits."""
    monkeypatch.setattr(lower_ops, "insert_amd_barrier_waits", lambda func, *_: func)


# ---------------------------------------------------------------- before / after (TIR)


@pytest.mark.parametrize(
    ("before", "target", "after"),
    [
        (K.basic, "gfx942", K.basic_gfx942),
        (K.basic, "gfx950", K.basic_gfx942),
        (K.basic, "gfx1200", K.basic_gfx1200),
        (K.split, "gfx1200", K.split_gfx1200),
        (K.split, "gfx1201", K.split_gfx1200),
        (K.after_dma, "gfx942", K.after_dma_gfx942),
        (K.after_dma_waited, "gfx942", K.after_dma_waited_gfx942),
        (K.in_loop, "gfx942", K.in_loop_gfx942),
        (K.loop_carried, "gfx942", K.loop_carried_gfx942),
        (K.user_sync, "gfx942", K.user_sync_gfx942),
        (K.user_sync, "gfx1200", K.user_sync_gfx1200),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_lowering_puts_the_counter_wait_before_the_barrier(before, target, after):
    tvm.ir.assert_structural_equal(lower_tilewave_ops(before, target), after)


def test_lowered_kernel_is_a_fixed_point():
    once = lower_tilewave_ops(K.in_loop, "gfx942")
    assert insert_amd_barrier_waits(once, "gfx942").same_as(once)


def _waits_before_barriers(func, target: str) -> list[int]:
    """For each releasing barrier of the lowered kernel, how many waits (the kernel's own
    included) stand right before it."""
    text = lower_tilewave_ops(func, target).script().splitlines()
    counts, run = [], 0
    for line in text:
        if "s.waitcnt" in line or "s.wait.dscnt" in line or "s.wait.loadcnt" in line:
            run += 1
        elif "s.barrier\"" in line or "storage_sync" in line or "barrier.signal" in line:
            counts.append(run)
            run = 0
        elif line.strip() and not line.strip().startswith("#"):
            run = 0
    return counts


def test_no_wait_where_nothing_is_in_flight():
    assert _waits_before_barriers(K.nothing_in_flight, "gfx942") == [0, 0, 0]


def test_an_explicit_wait_of_the_kernel_is_not_repeated():
    assert _waits_before_barriers(K.user_wait_kept, "gfx942") == [1]


def test_read_modify_write_global_keeps_its_wait():
    # the read's consumer stores to a buffer it also reads: LLVM may sink it past the barrier
    assert _waits_before_barriers(K.read_modify_write, "gfx942") == [1, 1]


def test_reads_feeding_a_write_only_store_through_a_local_need_no_wait():
    assert _waits_before_barriers(K.accumulate_then_store, "gfx942") == [0, 1]


def test_a_multi_element_local_is_not_tracked_element_by_element():
    assert _waits_before_barriers(K.two_element_local, "gfx942") == [1, 1]


def test_write_in_one_branch_reaches_the_join():
    assert _waits_before_barriers(K.branch_writes, "gfx942") == [1, 1]


# ---------------------------------------------------------------- errors


def test_global_storage_sync_is_refused_with_the_fix():
    with pytest.raises(
        TargetFeatureError,
        match=r"tvm_storage_sync\('global'\) in function 'global_sync'.*cannot tell what it "
        r"orders.*tvm_storage_sync\('shared'\)",
    ):
        lower_tilewave_ops(K.global_sync, "gfx942")


def test_unmodelled_named_barrier_op_is_refused_with_the_fix():
    with pytest.raises(
        TargetFeatureError,
        match=r"llvm.amdgcn.s.barrier.leave in function 'named_barrier_setup'.*cannot tell "
        r"which LDS accesses.*T.tilewave.lds_barrier\(\)",
    ):
        lower_tilewave_ops(K.named_barrier_setup, "gfx1200")


def test_waits_for_a_cuda_target_are_refused():
    with pytest.raises(
        TargetFeatureError,
        match=r"sm_90a in function 'basic'.*only for AMD targets.*Pass an AMD target",
    ):
        insert_amd_barrier_waits(K.basic, "sm_90a")


# ---------------------------------------------------------------- assembly (LLVM path)


@pytest.mark.parametrize("target", GFX9)
def test_basic_barrier_assembly_gfx9(target):
    ops = _body(_llvm_asm(K.basic, target), "basic")
    at = ops.index("s_barrier")
    assert ops[at - 2].startswith("ds_write_b32") and ops[at - 1] == "s_waitcnt lgkmcnt(0)"


@pytest.mark.parametrize("target", GFX12)
def test_basic_and_split_barrier_assembly_gfx12(target):
    ops = _body(_llvm_asm(K.basic, target), "basic")
    at = ops.index("s_barrier_signal -1")
    assert ops[at - 2].startswith("ds_store_b32") and ops[at - 1] == "s_wait_dscnt 0x0"
    ops = _body(_llvm_asm(K.split, target), "split")
    signal, wait = ops.index("s_barrier_signal -1"), ops.index("s_barrier_wait -1")
    assert ops[signal - 1] == "s_wait_dscnt 0x0"
    # the global store of C[tx] sits between signal and wait: the split still overlaps
    assert any(op.startswith("global_store_b32") for op in ops[signal + 1:wait])


@pytest.mark.parametrize("target", GFX9)
def test_barrier_after_lds_dma_assembly(target):
    ops = _body(_llvm_asm(K.after_dma, target), "after_dma")
    at = ops.index("s_barrier")
    assert ops[at - 1] == "s_waitcnt vmcnt(0)"
    assert any(op.startswith(("global_load_lds", "buffer_load")) for op in ops[:at])


@pytest.mark.parametrize("target", (*GFX9, *GFX12))
@pytest.mark.parametrize(
    "func",
    [K.basic, K.user_sync, K.branch_writes, K.nothing_in_flight, K.user_wait_kept, K.split],
    ids=lambda f: f.attrs["global_symbol"],
)
def test_new_lowering_assembly_is_clean(func, target):
    if func is K.split and target in GFX9:
        pytest.skip("split barriers are gfx12 instructions")
    assert asm_lds_checker.check(_llvm_asm(func, target), target) == []


@pytest.mark.parametrize("target", (*GFX9, *GFX12))
@pytest.mark.parametrize(
    "func", [K.in_loop, K.loop_carried, K.read_modify_write, K.accumulate_then_store],
    ids=lambda f: f.attrs["global_symbol"],
)
def test_loop_kernels_reach_no_barrier_with_lds_in_flight(func, target):
    # LLVM unrolls these loops; where it hoists the first iteration's ds_read above its own
    # lgkmcnt(0) for the kernel arguments (read_modify_write), the first copy of the loop's
    # wait finds the counter drained: a redundant wait TIR cannot foresee (docs)
    findings = asm_lds_checker.check(_llvm_asm(func, target), target)
    assert [f for f in findings if f.kind != "redundant"] == []
    assert len(findings) <= 1


@pytest.mark.parametrize("target", GFX9)
def test_dma_kernels_reach_no_barrier_with_the_dma_in_flight(target):
    assert asm_lds_checker.check(_llvm_asm(K.after_dma_waited, target), target) == []
    # InsertSharedBarriers keeps the user's barrier and adds wait_async_ops(0) + a second
    # barrier after it (it does not upgrade the existing one); with the vmcnt(0) the user's
    # barrier now gets, that second wait finds the counter drained
    findings = asm_lds_checker.check(_llvm_asm(K.after_dma, target), target)
    assert [(f.kind, f.text) for f in findings] == [("redundant", "s_waitcnt vmcnt(0)")]


@pytest.mark.parametrize("target", (*GFX9, *GFX12))
@pytest.mark.parametrize("func", [K.basic, K.in_loop, K.user_sync, K.split],
                         ids=lambda f: f.attrs["global_symbol"])
def test_checker_finds_the_race_in_the_old_lowering(func, target, old_lowering):
    if func is K.split and target in GFX9:
        pytest.skip("split barriers are gfx12 instructions")
    findings = asm_lds_checker.check(_llvm_asm(func, target), target)
    assert [f.kind for f in findings if f.kind == "barrier"], findings


@pytest.mark.parametrize("target", GFX9)
def test_checker_finds_the_unwaited_lds_dma_in_the_old_lowering(target, old_lowering):
    findings = asm_lds_checker.check(_llvm_asm(K.after_dma, target), target)
    assert any(f.kind == "barrier" and "dma" in f.detail for f in findings), findings


# ---------------------------------------------------------------- assembly backend


@pytest.mark.parametrize("target", GFX9)
@pytest.mark.parametrize("func", [K.basic, K.in_loop, K.loop_carried, K.user_sync],
                         ids=lambda f: f.attrs["global_symbol"])
def test_assembly_backend_output_is_clean(func, target):
    asm = amdgcn.compile_device_func(amdgcn.device_function(func, target), target).asm
    assert "s_barrier" in asm
    assert asm_lds_checker.check(asm, target) == []


# ---------------------------------------------------------------- generated kernels

_STATEMENTS = {
    "write": "S[tx] = A[tx] + T.float32({i})",
    "read_local": "acc[0] = acc[0] + S[255 - tx]",
    "read_store": "B[{i}, tx] = S[(tx + {i}) % 256]",
    "barrier": "T.tilewave.lds_barrier()",
    "sync": 'T.tvm_storage_sync("shared")',
    "compute": "acc[0] = acc[0] * T.float32(2)",
}
_GENERATED = """
from tvm.script import tirx as T
import tilewave

@T.prim_func
def generated(A: T.Buffer((256,), "float32"), B: T.Buffer((8, 256), "float32"),
              C: T.Buffer((256,), "float32")):
    T.func_attr({{"global_symbol": "generated"}})
    for tx in T.thread_binding(256, thread="threadIdx.x"):
        S = T.alloc_buffer((256,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
{body}
        C[tx] = acc[0] + S[(tx + 1) % 256]
"""


def _generated(kinds: list[str], loop: bool):
    """A kernel made of ``kinds`` (LDS writes and reads, barriers, stores), in a loop or not.

    TVMScript parses a function from its source file, so the kernel is written to one."""
    indent = " " * (12 if loop else 8)
    # S starts written and ends read: LLVM deletes a read of never-written LDS, and a write
    # nothing reads, with their ds_* instructions
    lines = ["        S[tx] = A[tx]", "        T.tilewave.lds_barrier()"]
    lines += ["        for k in range(4):"] if loop else []
    lines += [indent + _STATEMENTS[kind].format(i=i % 7) for i, kind in enumerate(kinds)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "generated_kernel.py"
        path.write_text(_GENERATED.format(body="\n".join(lines)))
        return load_module(path, "generated_kernel").generated


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(_STATEMENTS)), min_size=1, max_size=7), st.booleans(),
       st.sampled_from(("gfx942", "gfx1200")))
def test_generated_kernels_have_no_barrier_with_lds_in_flight(kinds, loop, target):
    # InsertSharedBarriers adds the barriers the hazards need; the waits go before all of them
    asm = _llvm_asm(_generated(kinds, loop), target)
    findings = asm_lds_checker.check(asm, target)
    assert [f for f in findings if f.kind != "redundant"] == []
    # in a loop, LLVM's unrolling can make the first copy of a wait redundant; and a read
    # into a local (`acc[0] += S[..]`) stays in flight for the placement, while LLVM may
    # drain it anyway in its wait for a later read that feeds a store (LDS completes in
    # order, but LLVM may also schedule the two reads the other way round, so the
    # placement cannot count on that wait)
    if not loop and "read_local" not in kinds:
        assert findings == []


# ---------------------------------------------------------------- every kernel


def test_examples_and_benchmarks_reach_no_barrier_with_lds_in_flight():
    # the whole tree (tests/ too, ~380 kernels, minutes) is `python amd_kernel_scan.py`;
    # CI scans the kernels a user would copy
    import amd_kernel_scan

    kernels = amd_kernel_scan.collect_kernels(("examples", "benchmarks"))
    result = amd_kernel_scan.scan(kernels)
    assert len(kernels) >= 10
    for backend, targets in (("llvm", ("gfx942", "gfx950", "gfx1200", "gfx1201")),
                             ("asm", ("gfx942", "gfx950"))):
        for target in targets:
            assert result.built[(backend, target)] > 0, (backend, target, result.skipped)
    assert [(label, b, t, f.kind, f.text) for label, b, t, f in result.findings
            if f.kind != "redundant"] == []
