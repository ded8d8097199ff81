"""The sm_90a GEMM examples: they parse, strip, emit the Hopper instructions, and assemble.

``examples/sm90_tma_wgmma_gemm.py`` (TMA + mbarrier ring + wgmma, one role) and
``examples/sm90_ws_gemm.py`` (warp-specialised). The GPU runs are
``benchmarks/real_kernels_sm90.py --run``; here: structure, CUDA text, and ptxas when an
nvcc is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import tvm
from example_loader import load_module

from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import post_order_visit
from tilewave.pipeline import build
from tilewave.transforms.shared_layout import shared_layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BENCHMARK = EXAMPLES.parent / "benchmarks" / "real_kernels_sm90.py"
SMALL = (256, 256, 512)  # 2 blocks, 8 K steps: the 3-stage ring wraps twice
HAND_ONLY = ["tilewave.InsertSharedBarriers", "tilewave.InjectFenceProxy"]


@pytest.fixture(scope="module")
def gemm():
    return load_module(EXAMPLES / "sm90_tma_wgmma_gemm.py")


@pytest.fixture(scope="module")
def ws():
    return load_module(EXAMPLES / "sm90_ws_gemm.py")


def _ops(func) -> Counter:
    ops: Counter = Counter()

    def visit(node):
        if isinstance(node, tvm.ir.expr.Call) and isinstance(node.op, tvm.ir.Op):
            ops[callee_name(node)] += 1

    post_order_visit(func.body, visit)
    return ops


SYNC_OPS = {"tirx.tvm_storage_sync", "tirx.ptx.bar_sync_count", "tirx.ptx.bar_arrive",
            "tirx.ptx.fence_proxy", "tirx.ptx.fence_mbarrier_init"}
PROTOCOL_OPS = {"tirx.ptx.mbarrier_init", "tirx.ptx.mbarrier_arrive_expect_tx",
                "tirx.ptx.mbarrier_arrive_nocount", "tirx.ptx.mbarrier_try_wait_parity_no_hint",
                "tirx.ptx.cp_async_bulk_tensor_g2s_cluster", "tirx.ptx.cp_async_bulk_tensor_s2g",
                "tirx.ptx.wgmma_fence", "tirx.ptx.wgmma_commit_group",
                "tirx.ptx.wgmma_wait_group", "tirx.ptx.cp_async_bulk_wait_group"}


@pytest.mark.parametrize("name", ["gemm", "ws"])
def test_stripped_drops_barriers_and_fences_and_keeps_the_mbarrier_protocol(name, request):
    module = request.getfixturevalue(name)
    hand, stripped = _ops(module.hand(*SMALL)), _ops(module.stripped(*SMALL))
    assert {op for op in SYNC_OPS if hand[op]} >= {"tirx.tvm_storage_sync",
                                                  "tirx.ptx.fence_proxy",
                                                  "tirx.ptx.fence_mbarrier_init"}
    assert not any(stripped[op] for op in SYNC_OPS)
    for op in PROTOCOL_OPS:
        assert hand[op] > 0, op
        assert stripped[op] == hand[op], op


def test_ws_hand_epilogue_uses_a_named_barrier_over_the_consumers(ws):
    ops = _ops(ws.hand(*SMALL))
    assert ops["tirx.ptx.bar_sync_count"] == 1
    assert ops["tirx.tvm_storage_sync"] == 1  # after the mbarrier initialisation only
    assert ops["tirx.ptx.setmaxnreg"] == 2


def _hand_source(module) -> str:
    with tvm.transform.PassContext(disabled_pass=HAND_ONLY):
        return build(module.hand(*SMALL), "sm_90a").source


@pytest.fixture(scope="module")
def sources(gemm, ws):
    return {"gemm": _hand_source(gemm), "ws": _hand_source(ws)}


def _body(source: str) -> str:
    return source[source.index('extern "C" __global__'):]


@pytest.mark.parametrize("name", ["gemm", "ws"])
def test_hand_cuda_has_the_hopper_instructions(name, sources):
    source = sources[name]
    for ptx in ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                "mbarrier.try_wait.parity.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
                "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "wgmma.fence.sync.aligned",
                "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1",
                "cvt.rn.f16x2.f32", "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
                "cp.async.bulk.wait_group.read 0", "fence.proxy.async.shared::cta",
                "fence.mbarrier_init.release.cluster"):
        assert ptx in source, ptx
    body = _body(source)
    assert "const __grid_constant__ CUtensorMap A_map" in body
    assert "extern __shared__ __align__(1024) uchar buf_dyn_shmem_ptr[];" in body
    assert "ptx_wgmma_encode_matrix_descriptor(" in body


def test_ws_cuda_has_setmaxnreg_and_the_consumer_barrier(sources):
    source = sources["ws"]
    assert "setmaxnreg.dec.sync.aligned.u32 40" in source
    assert "setmaxnreg.inc.sync.aligned.u32 232" in source
    assert _body(source).count("__syncthreads()") == 1
    assert re.search(r"tvm_builtin_ptx_bar_sync_count_sync\(\(uint\)1, \(uint\)256\)",
                     _body(source))


@tvm.instrument.pass_instrument
class _Before:
    """A pass instrument keeping the module a named pass receives."""

    def __init__(self, pass_name: str) -> None:
        self.pass_name = pass_name
        self.mod = None

    def run_before_pass(self, mod, info) -> None:
        if info.name == self.pass_name:
            self.mod = mod


@pytest.mark.parametrize("name", ["gemm", "ws"])
def test_tma_tiles_are_laid_out_on_1024_byte_boundaries(name, request):
    module = request.getfixturevalue(name)
    seen = _Before("tilewave.PlanSharedLayout")
    with tvm.transform.PassContext(disabled_pass=HAND_ONLY):
        build(module.hand(*SMALL), "sm_90a", instruments=[seen])
    func = next(f for f in seen.mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    slots = {slot.name: slot for slot in shared_layout(func)}
    assert set(slots) == {"A_s", "B_s", "C_s", "full", "empty"}
    for tile in ("A_s", "B_s", "C_s"):  # whole, addressed, 128B-swizzle aligned
        assert slots[tile].addressed and slots[tile].offset % 1024 == 0
    assert slots["A_s"].size == module.STAGES * module.A_TILE * 2
    assert slots["C_s"].size == module.BLOCK_M * module.BLOCK_N * 2


def test_k_loop_has_no_block_barrier_in_the_hand_kernels(sources):
    bench = load_module(BENCHMARK)
    for source in sources.values():
        counts = bench.k_loop_sync(source)
        assert counts["syncthreads"] == 0
        assert counts["bar_sync"] == 0
    assert bench.sync_counts(_body(sources["gemm"]))["syncthreads"] == 2


@pytest.mark.parametrize("name", ["gemm", "ws"])
def test_hand_kernels_verify_clean(name, request):
    module = request.getfixturevalue(name)
    assert find_shared_hazards(module.hand(*SMALL), "sm_90a") == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (ptxas) to assemble")
@pytest.mark.parametrize("name", ["gemm", "ws"])
def test_ptxas_assembles_without_serialising_wgmma(name, sources, ws, tmp_path):
    source = tmp_path / f"{name}.cu"
    source.write_text(sources[name])
    flags = list(ws.NVCC_FLAGS) if name == "ws" else []
    done = subprocess.run(
        ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v",
         *flags, "-o", str(tmp_path / f"{name}.cubin"), str(source)],
        capture_output=True, text=True, check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-2000:]
    assert "C7514" not in log  # wgmma serialised by accumulator reads
    assert "C7508" not in log  # setmaxnreg ignored
    assert "0 bytes spill stores" in log


# tilewave.racecheck executes the lowered kernel (one block, its stage ring wraps twice) and
# shares no code with the passes or the verifier. The single-role kernel runs under the
# "warps" schedule: under lockstep/reverse, thread 0 (the TMA issuer) waits on a stage's
# mbarrier in a different K step than its warp, which racecheck does not run
# ("threads of one group use different mbarriers").
RACECHECK = {"gemm": ["warps"], "ws": ["lockstep"]}
TMA_BOX_BYTES = {"A_map": 128 * 64 * 2, "B_map": 256 * 64 * 2, "C_map": 128 * 64 * 2}
ONE_BLOCK = (128, 256, 512)  # one 128 x 256 tile, 8 K steps: the 3-stage ring wraps twice


def _racecheck(module, variant, schedules):
    import tilewave

    with tvm.transform.PassContext(disabled_pass=HAND_ONLY):
        lowered = tilewave.lower(getattr(module, variant)(*ONE_BLOCK), "sm_90a")
    return tilewave.racecheck(lowered, "sm_90a", blocks=1, schedules=schedules,
                              func_name=f"{module.NAME}_kernel",
                              tensor_map_bytes=TMA_BOX_BYTES)


@pytest.mark.parametrize("name", ["gemm", "ws"])
def test_hand_kernels_run_clean_in_racecheck(name, request):
    report = _racecheck(request.getfixturevalue(name), "hand", RACECHECK[name])
    assert report.ok, report.format()


def test_stripped_ws_kernel_races_on_the_c_tile_in_racecheck(ws):
    report = _racecheck(ws, "stripped", RACECHECK["ws"])
    kinds = {finding.kind for finding in report.findings}
    assert {"RAW", "PROXY"} <= kinds  # C stores vs the TMA store: no barrier, no fence


def test_rasterisation_groups_fit_small_problems_and_reject_partial_tiles(gemm):
    assert gemm.rasterisation(4096, 4096) == (512, 16, 8)
    assert gemm.rasterisation(256, 512) == (4, 2, 2)  # fewer row tiles than GROUP_M
    with pytest.raises(ValueError, match=r"M=200, N=512 must be multiples of 128 and 256"):
        gemm.rasterisation(200, 512)
