"""InsertSharedBarriers screens the in-flight copies a new access meets together
(``_Placer._screen_together``: one loop fixing for a group of copies, see
``tilewave.analysis.shared_access.proven_apart_together``): on the pipelined real kernels
it must decide exactly what the pair-by-pair questions decide, and it must be what
answers the copies there (a screen that never proves anything would pass the first check
and save nothing)."""

from __future__ import annotations

import importlib

import pytest
import tvm
from example_loader import REPO_ROOT, load_module
from structural import same

from tilewave.kernel_memory import forget_kernels

# (the package exports the function under the module's name: import the module itself)
isb = importlib.import_module("tilewave.transforms.insert_shared_barriers")

BARRIER_COUNT = load_module(REPO_ROOT / "benchmarks" / "barrier_count.py", "barrier_count")
GEMM = load_module(REPO_ROOT / "examples" / "sm80_gemm.py", "sm80_gemm")
ATTENTION = load_module(REPO_ROOT / "examples" / "sm80_flash_attention.py", "sm80_flash_attn")

KERNELS = {
    "gemm hand": GEMM.hand,
    "gemm stripped": GEMM.stripped,
    "attention hand": ATTENTION.hand,
    "attention stripped": ATTENTION.stripped,
}


def _sync_input(make) -> tvm.tirx.PrimFunc:
    mod = BARRIER_COUNT.sync_input(make(), "sm_80")
    (func,) = mod.functions.values()
    return func


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_copies_screened_together_get_the_pair_by_pair_barriers(name, monkeypatch):
    func = _sync_input(KERNELS[name])
    proven: list[int] = []
    screen = isb._Placer._screen_together

    def counting(self, access, state, verdicts):
        before = sum(1 for v in verdicts.values() if v is False)
        screen(self, access, state, verdicts)
        proven.append(sum(1 for v in verdicts.values() if v is False) - before)

    monkeypatch.setattr(isb._Placer, "_screen_together", counting)
    forget_kernels()
    together = isb.insert_shared_barriers(func, "sm_80")
    assert sum(proven) >= 8  # copies of whole pipeline stages were kept apart at once

    monkeypatch.setattr(isb._Placer, "_screen_together", lambda self, *args: None)
    forget_kernels()
    pair_by_pair = isb.insert_shared_barriers(func, "sm_80")
    same(together, pair_by_pair)
