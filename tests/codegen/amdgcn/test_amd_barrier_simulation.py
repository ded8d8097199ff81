"""Issue 17 on the ISA simulator: multi-wave LDS kernels are right with the wait before each
``s_barrier`` and wrong without it (the simulator's waves pass a barrier with their LDS
writes still queued, as gfx90a+ hardware may) — tilewave's assembly backend with its waits
stripped, and LLVM's assembly (the default ``tilewave.build`` path) from the lowering before
and after the change."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
import amd_barrier_kernels
import kernels
from isa_simulator import simulate
from llvm_asm_simulator import LLVMAsmSimulator

import tilewave
from tilewave.codegen import amdgcn, lower_ops

rng = np.random.default_rng(17)


def _asm(func, target: str) -> str:
    return amdgcn.compile_device_func(amdgcn.device_function(func, target), target).asm


def _without_barrier_waits(asm: str) -> tuple[str, int]:
    """``asm`` with every ``s_waitcnt`` right before an ``s_barrier`` removed, and how many."""
    lines = asm.splitlines()
    keep, removed = [], 0
    for i, line in enumerate(lines):
        nxt = lines[i + 1].split(";")[0].strip() if i + 1 < len(lines) else ""
        if line.split(";")[0].strip().startswith("s_waitcnt") and nxt == "s_barrier":
            removed += 1
            continue
        keep.append(line)
    return "\n".join(keep), removed


def _reverse_case():
    a = rng.standard_normal(256).astype(np.float32)
    return [a, np.zeros(256, np.float32)], (1, 1, 1), (256, 1, 1), a[::-1], 1


def _block_sum_case():
    a = rng.standard_normal((4, 256)).astype(np.float32)
    return [a, np.zeros(4, np.float32)], (4, 1, 1), (256, 1, 1), None, 1


CASES = {
    "reverse": (amd_barrier_kernels.basic, _reverse_case),
    "block_sum_tree": (kernels.block_sum_tree, _block_sum_case),
}


def _reference(name: str, args: list, expected):
    if name == "block_sum_tree":
        # the tree adds pairs in a fixed order: mirror it in float32
        s = args[0].copy()
        width = 256
        while width > 1:
            width //= 2
            s[:, :width] = s[:, :width] + s[:, width:2 * width]
        return s[:, 0]
    return expected


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_multi_wave_lds_kernel_needs_the_wait_before_the_barrier(name, target):
    func, case = CASES[name]
    asm = _asm(func, target)
    args, grid, wg, expected, out = case()
    simulate(asm, args, grid, wg)
    np.testing.assert_array_equal(args[out], _reference(name, args, expected))

    broken, removed = _without_barrier_waits(asm)
    assert removed >= 1
    args, grid, wg, expected, out = case()
    simulate(broken, args, grid, wg)
    assert not np.array_equal(args[out], _reference(name, args, expected))


def _run_llvm(name: str, target: str) -> tuple[np.ndarray, np.ndarray]:
    """LLVM's assembly of case ``name`` run on the simulator: (result, expected)."""
    func, case = CASES[name]
    asm = tilewave.build(func, target).source
    args, grid, wg, expected, out = case()
    # TVM orders the device kernel's pointer parameters by name: A, B as the cases have them
    sim = LLVMAsmSimulator(asm, f"{func.attrs['global_symbol']}_kernel")
    sim.wg_size = wg  # type: ignore[attr-defined]
    sim.run(args, grid)
    return args[out], _reference(name, args, expected)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_llvm_path_is_right_with_the_new_lowering(name, target):
    result, expected = _run_llvm(name, target)
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_llvm_path_was_wrong_with_the_old_lowering(name, target, monkeypatch):
    monkeypatch.setattr(lower_ops, "insert_amd_barrier_waits", lambda func, *_: func)
    result, expected = _run_llvm(name, target)
    assert not np.array_equal(result, expected)
