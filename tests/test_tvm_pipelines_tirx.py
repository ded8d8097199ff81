"""``tir_pipeline="tilewave-tirx"``: TVM's TIRx pipeline with tilewave's synchronisation.

The TIRx example kernels (examples/tirx_*.py) are written with hand-placed barriers, waits and
commits; stripped of them and compiled with ``tilewave-tirx``, each verifies clean and carries
no more synchronisation statements of any kind than the hand version (the H100 run of
examples/tirx_h100.py checks results and speed).
"""

from __future__ import annotations

import pytest
import tvm
from example_loader import load_example
from tvm.tirx import compilation_pipeline

from tilewave.targets import get_target
from tilewave.tvm_pipelines import TILEWAVE_TIRX_PIPELINE, sync_stages, tirx_passes

DRIVER = load_example("tirx_h100.py")
KERNELS = ["tirx_transpose.py", "tirx_reduction.py", "tirx_cp_async_gemm.py"]


@pytest.fixture(scope="module", params=KERNELS)
def variants(request):
    return DRIVER.variant_sources(load_example(request.param))


def test_tirx_pipeline_is_registered_with_the_sync_stages_after_annotate_entry_func():
    assert TILEWAVE_TIRX_PIPELINE in compilation_pipeline.PIPELINE_MAP
    names = [p.info.name for p in tirx_passes(get_target("sm_90a"), {})]
    sync = [stage.name for stage in sync_stages(get_target("sm_90a"))]
    assert sync == [
        "tilewave.InsertSharedBarriers",
        "tilewave.InjectFenceProxy",
        "tilewave.LowerTilewaveOps",
    ]
    start = names.index("tirx.AnnotateEntryFunc") + 1
    assert names[start : start + len(sync)] == sync
    assert names[start + len(sync)] == "tirx.SplitHostDevice"
    assert names[0] == "tirx.LowerTIRx"


def test_stripped_kernel_races_under_tvm_tirx_and_verifies_clean_under_tilewave(variants):
    _, stripped = variants["stripped"]
    _, synced = variants["tilewave"]
    assert stripped["hazards"] > 0
    assert sum(stripped["sync"].values()) == 0
    assert synced["hazards"] == 0


def test_tilewave_places_no_more_synchronisation_than_the_hand_version(variants):
    _, hand = variants["hand"]
    _, synced = variants["tilewave"]
    assert hand["hazards"] == 0
    for kind, count in synced["sync"].items():
        assert count <= hand["sync"][kind], (kind, synced["sync"], hand["sync"])
    assert synced["sync"]["barriers"] >= 1
    assert synced["grid"] == hand["grid"] and synced["block"] == hand["block"]


def test_cp_async_gemm_keeps_the_prefetch_overlap():
    source, facts = DRIVER.variant_sources(load_example("tirx_cp_async_gemm.py"))["tilewave"]
    body = source[source.rindex("__global__") :]
    loop = body[body.index("for (int ko") :]
    # the wait for the current slice comes before the prefetch of the next one is issued
    assert loop.index("cp_async_wait_group") < loop.index("cp_async_cg")
    assert facts["sync"] == {"barriers": 1, "cp.async waits": 1, "cp.async commits": 2}


def test_tilewave_tirx_without_a_gpu_target_names_the_fix():
    from tilewave.errors import UnknownTargetError

    kernel = load_example("tirx_transpose.py").stripped()
    with pytest.raises(UnknownTargetError, match="tir_pipeline='tilewave-tirx'"):
        tvm.compile(kernel, tir_pipeline=TILEWAVE_TIRX_PIPELINE)


def test_hopper_tma_wgmma_gemm_emit_gets_the_hand_versions_barriers_and_fences(tmp_path):
    """The TMA + wgmma GEMMs (the example's mbarrier macros, and TVM's pipeline helpers) as
    tirx_h100.py --emit writes them for the H100 (both sizes): the stripped kernel through
    tilewave-tirx has as many block barriers, proxy fences and mbarrier-init fences as the
    hand one, none in the K loop, verifies clean (the stripped one under plain tirx does not),
    and one dynamic pool of the kernel's size is its only shared memory (1024-aligned where
    the example declares it; SMEMPool's is TVM's 64)."""
    import json

    hopper = load_example("tirx_h100_hopper.py")
    gemm = load_example("tirx_tma_wgmma_gemm.py")
    names = {gemm.NAME, load_example("tirx_tma_wgmma_gemm_helpers.py").NAME}
    hopper.emit(tmp_path, DRIVER._compile, DRIVER._hazards)
    for size_name, (m, n, k) in (("full", (gemm.M, gemm.N, gemm.K)), ("small", gemm.SMALL)):
        manifest = json.loads((tmp_path / size_name / "manifest.json").read_text())
        assert set(manifest["kernels"]) == names
        for name, entry in manifest["kernels"].items():
            assert (entry["m"], entry["n"], entry["k"]) == (m, n, k)
            assert entry["grid"] == [m // gemm.BLOCK_M * (n // gemm.BLOCK_N), 1, 1]
            hand, stripped, synced = (
                entry["variants"][v] for v in ("hand", "stripped", "stripped+tilewave-tirx")
            )
            wanted = {"syncthreads": 2, "fence_proxy_async": 1, "fence_mbarrier_init": 1}
            assert {kind: hand["sync"][kind] for kind in wanted} == wanted
            assert sum(stripped["sync"].values()) == 0
            for kind in wanted:
                assert 1 <= synced["sync"][kind] <= hand["sync"][kind], (name, synced["sync"])
            assert sum(synced["k_loop_sync"].values()) == 0
            assert (hand["hazards"], synced["hazards"]) == (0, 0) and stripped["hazards"] > 0
            for record in (hand, stripped, synced):
                assert record["dynamic_smem"] == gemm.POOL_BYTES
                body = (tmp_path / size_name / record["file"]).read_text()
                body = body[body.rindex("__global__") :]
                assert body.count("__shared__") == 1
                if name == gemm.NAME:
                    assert "extern __shared__ __align__(1024)" in body


def _pooled_transpose(pool_bytes: int | None = None):
    """A TIRx transpose through a tile from TVM's ``SMEMPool`` (a 0-byte ``shared.dyn``
    pool sized by ``tirx.dyn_smem_bytes``), without a barrier."""
    from tvm.backend.cuda.lang import SMEMPool
    from tvm.script import tirx as T

    @T.prim_func
    def pooled_transpose(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32")):
        T.func_attr({"global_symbol": "pooled_transpose"})
        T.device_entry()
        T.cta_id([1])
        ty, tx = T.thread_id([32, 32])
        pool = SMEMPool()
        tile = pool.alloc((32, 33), "float32")
        pool.commit(pool_bytes)
        tile[ty, tx] = A[ty, tx]
        B[ty, tx] = tile[tx, ty]

    return pooled_transpose


def test_smem_pool_kernels_get_their_barrier_under_tilewave_tirx():
    """TVM's SMEMPool idiom: tilewave-tirx checks the launch's dynamic shared size (the
    pool's 0 bytes were refused as dead code) and places the barrier; plain tirx races."""
    from tilewave.tvm_pipelines import launched_dynamic_bytes

    source, captured = DRIVER._compile(_pooled_transpose(), TILEWAVE_TIRX_PIPELINE)
    assert DRIVER.sync_counts(source)["barriers"] == 1
    assert DRIVER._hazards(captured) == 0
    racy_source, racy = DRIVER._compile(_pooled_transpose(), "tirx")
    assert DRIVER.sync_counts(racy_source)["barriers"] == 0
    assert DRIVER._hazards(racy) == 1
    lowered = []

    @tvm.instrument.pass_instrument
    class Last:
        def run_after_pass(self, mod, info):
            if info.name == "tirx.BF16StorageLegalize":  # the last lowering pass
                lowered.append(mod)

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(instruments=[Last()]):
        tvm.compile(_pooled_transpose(), target=target, tir_pipeline=TILEWAVE_TIRX_PIPELINE)
    assert launched_dynamic_bytes(lowered[-1]) == {"pooled_transpose_kernel": 32 * 33 * 4}


def test_smem_pool_over_the_limit_names_the_launch_size():
    from tilewave.errors import SharedMemoryLimitError

    with pytest.raises(SharedMemoryLimitError, match=r"launched with 300000 bytes .* 232448"):
        DRIVER._compile(_pooled_transpose(300000), TILEWAVE_TIRX_PIPELINE)
