"""racecheck as the passes' oracle.

* Every kernel of the pass tests (InsertSharedBarriers, MultiBuffer, InjectFenceProxy, the
  named-barrier placement and the CUDA split-barrier lowering) is executed after
  ``tilewave.lower``: racecheck must find no race, deadlock or bounds error, except a WAW
  between two threads running *the same statement* (the input writes one location from many
  threads; no barrier can order a statement with itself).
* Kernels racecheck cannot judge are listed in ``NOT_EXECUTABLE`` with the reason, and kernels
  where it finds a real problem in tilewave's output in ``KNOWN_BAD`` (strict xfail: the test
  fails once they are fixed, so the list stays true).
* Stripped real kernels (every barrier, wait and commit removed) show their races before
  tilewave, and are clean after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from example_loader import REPO_ROOT, load_example, load_module
from tvm import tirx

import tilewave
from tilewave.errors import TilewaveError
from tilewave.racecheck import Report, racecheck

TESTS = REPO_ROOT / "tests"
PASS_TEST_MODULES = (
    "transforms/test_insert_shared_barriers.py",
    "transforms/test_insert_shared_barriers_copies.py",
    "transforms/test_insert_shared_barriers_named.py",
    "transforms/test_insert_shared_barriers_while.py",
    "transforms/test_insert_shared_barriers_precision.py",
    "named_barrier_kernels.py",
    "transforms/test_multibuffer.py",
    "transforms/test_inject_fence_proxy.py",
    "codegen/test_cuda_split_barrier.py",
)
SCALARS = {"n": 3, "c": 1}  # values for the kernels' scalar parameters
SCHEDULES = ("lockstep",)  # the interleaving test covers the other schedules
MAX_STEPS = 20_000  # every pass test kernel finishes in far fewer

NOT_EXECUTABLE = {
    "opaque_access_ptr": "calls the opaque extern 'fill_tile' on shared memory",
    "opaque_access_ptr_fenced": "calls the opaque extern 'fill_tile' on shared memory",
    "unknown_call": "calls the opaque extern 'log_progress'",
    "unknown_call_fenced": "calls the opaque extern 'log_progress'",
    "symbolic_trips": "symbolic buffer shapes (needs concrete arrays)",
    "symbolic_trips_x2": "symbolic buffer shapes (needs concrete arrays)",
}
KNOWN_BAD: dict[str, str] = {}
#: (kernel, an op tilewave places in it, a finding kind racecheck reports once that op is
#: taken out of tilewave's output): the oracle can fail on these kernels
NEEDED_SYNC = (
    ("seed_before", "tirx.ptx.fence_proxy", "PROXY"),
    ("stmatrix_then_wgmma", "tirx.ptx.fence_proxy", "PROXY"),
    ("while_carried", "tirx.ptx.fence_proxy", "PROXY"),
    ("while_carried", "tirx.tvm_storage_sync", "RAW"),
)


def _kernels() -> list[tuple[str, str, tirx.PrimFunc]]:
    found = []
    for relative in PASS_TEST_MODULES:
        module = load_module(TESTS / relative, "oracle_" + Path(relative).stem)
        for name in sorted(vars(module)):
            func = getattr(module, name)
            if isinstance(func, tirx.PrimFunc) and name not in NOT_EXECUTABLE:
                found.append((Path(relative).stem, name, func))
    return found


KERNELS = _kernels()


def _device_kernels(mod):
    for gv, func in mod.functions.items():
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is not None and target.kind.name in ("cuda", "rocm"):
            yield gv.name_hint, func


def unfixable(finding) -> bool:
    """A WAW of one statement with itself: two threads write the same bytes at once."""
    return finding.kind == "WAW" and len(set(finding.statements)) == 1


def _param(module: str, name: str, func: tirx.PrimFunc):
    marks = []
    if name in KNOWN_BAD:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BAD[name]))
    return pytest.param(func, id=f"{module}.{name}", marks=marks)


def _scalars(func: tirx.PrimFunc) -> dict[str, int]:
    """The values of ``func``'s scalar parameters for a racecheck run."""
    return {p.name: SCALARS[p.name] for p in func.params if p.name in SCALARS}


def _check(kernel: tirx.PrimFunc, name: str, args: dict[str, int]) -> Report:
    """racecheck ``kernel`` (device function ``name``) as every oracle test here does."""
    return racecheck(kernel, "sm_90a", args=args, schedules=SCHEDULES, func_name=name,
                     max_steps=MAX_STEPS)


@pytest.mark.parametrize("func", [_param(m, n, f) for m, n, f in KERNELS])
def test_pass_test_kernel_is_clean_after_tilewave(func: tirx.PrimFunc) -> None:
    try:
        lowered = tilewave.lower(func, "sm_90a")
    except TilewaveError:
        pytest.skip("tilewave rejects this input (a negative test of the pass)")
    for name, kernel in _device_kernels(lowered):
        report = _check(kernel, name, _scalars(func))
        errors = [f for f in report.errors if not unfixable(f)]
        assert not errors, report.format()


@pytest.mark.parametrize(("kernel", "op", "kind"), NEEDED_SYNC)
def test_pass_test_kernel_races_without_the_sync_tilewave_placed(kernel: str, op: str,
                                                                 kind: str) -> None:
    """The clean verdict above is not vacuous: without ``op`` racecheck sees ``kind``."""
    func = next(f for _module, name, f in KERNELS if name == kernel)
    strip_sync = load_example("sm90_common.py").strip_sync
    for name, lowered in _device_kernels(tilewave.lower(func, "sm_90a")):
        report = _check(strip_sync(lowered, frozenset({op})), name, _scalars(func))
        assert kind in {f.kind for f in report.errors if not unfixable(f)}, report.format()


# ---------------------------------------------------------------- stripped real kernels


def _shared_barrier_variants():
    example = load_example("shared_barriers_racecheck_h100.py")
    for kernel_id, func in example.kernels().items():
        yield kernel_id, example.variants_of(func, kernel_id)


@pytest.mark.parametrize("kernel_id", ["reverse", "transpose", "stencil", "loop_tile",
                                       "warp_specialized"])
def test_stripped_example_races_and_tilewave_output_is_clean(kernel_id: str) -> None:
    variants = dict(_shared_barrier_variants())[kernel_id]
    stripped = racecheck(variants.pop("stripped"), "sm_90a")
    assert {"RAW", "WAR"} & stripped.kinds(), stripped.format()
    for name, func in variants.items():
        for name_, kernel in _device_kernels(tilewave.lower(func, "sm_90a")):
            report = racecheck(kernel, "sm_90a", func_name=name_)
            assert report.ok, f"{name}: {report.format()}"


def test_stripped_cp_async_gemm_races_and_is_clean_after_tilewave() -> None:
    gemm = load_example("sm80_gemm.py")
    hand = gemm.hand(128, 128, 96)  # one block, three k-steps
    assert racecheck(hand, "sm_90a", schedules=["lockstep"]).ok
    stripped = gemm.stripped(128, 128, 96)
    report = racecheck(stripped, "sm_90a", schedules=["lockstep"])
    assert "RAW" in report.kinds(), report.format()
    lowered = tilewave.lower(stripped, "sm_90a")
    for name, kernel in _device_kernels(lowered):
        after = racecheck(kernel, "sm_90a", schedules=["lockstep"], func_name=name)
        assert after.ok, after.format()


def test_stripped_tma_wgmma_gemm_shows_missing_fence_and_barrier() -> None:
    gemm = load_example("sm90_tma_wgmma_gemm.py")
    size = (gemm.BLOCK_M, gemm.BLOCK_N, 3 * gemm.BLOCK_K)  # one block, three k-steps
    launch = gemm.launch(*size)
    params = [p.name for p in gemm.hand(*size).params]
    boxes = {name: spec.box_rows * spec.box_cols * 2
             for name, spec in zip(params, launch.tensor_maps, strict=True)}
    hand = racecheck(gemm.hand(*size), "sm_90a", schedules=["lockstep"], tensor_map_bytes=boxes)
    assert hand.ok, hand.format()
    stripped = racecheck(gemm.stripped(*size), "sm_90a", schedules=["lockstep"],
                         tensor_map_bytes=boxes)
    assert {"PROXY", "RAW"} <= stripped.kinds(), stripped.format()
