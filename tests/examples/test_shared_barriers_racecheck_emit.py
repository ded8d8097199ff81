"""examples/shared_barriers_racecheck_h100.py --emit: stripped vs re-inserted barriers in CUDA."""

import json
from pathlib import Path

import numpy as np
import pytest
from example_loader import load_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shared_barriers_racecheck_h100.py"
GENERATED = EXAMPLE.parent / "generated" / "shared_barriers"
KERNELS = {"reverse", "transpose", "stencil", "loop_tile", "warp_specialized"}
VARIANTS = {"stripped", "tilewave-basic", "tilewave-split"}
NAMED_VARIANTS = {"stripped", "tilewave-named", "hand-arrive", "named-all-sync"}
ARRIVE = "tvm_builtin_ptx_bar_arrive_arrive((uint){}, (uint)256);"
SYNC = "tvm_builtin_ptx_bar_sync_count_sync((uint){}, (uint)256);"
#: what the pass emits: ``barrier.sync`` without ``.aligned`` (one generation, two sites)
NAMED_SYNC = "tvm_builtin_ptx_barrier_sync_count_sync((uint){}, (uint)256);"


def load_example():
    return load_module(EXAMPLE)


def kernel_body(source: str, kernel: str) -> str:
    start = source.index(f"{kernel}(", source.index('extern "C" __global__'))
    return source[source.index("{", start) :]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("shared_barriers")
    assert load_example().main(["--emit", str(out)]) == 0
    return out, json.loads((out / "manifest.json").read_text())


def test_manifest_lists_every_kernel_and_variant(emitted):
    out, manifest = emitted
    assert set(manifest["kernels"]) == KERNELS
    for kernel_id, entry in manifest["kernels"].items():
        want = NAMED_VARIANTS if kernel_id == "warp_specialized" else VARIANTS
        assert set(entry["variants"]) == want
        assert entry["reference"] == kernel_id
        names = set(entry["inputs"]) | set(entry["outputs"])
        for spec in entry["variants"].values():
            source = (out / spec["file"]).read_text()
            threads = int(np.prod(entry["block"]))
            assert f"__launch_bounds__({threads}) {spec['kernel']}(" in source
            assert set(spec["params"]) == names


def test_stripped_sources_have_no_barrier_and_tilewave_ones_do(emitted):
    out, manifest = emitted
    for kernel_id, entry in manifest["kernels"].items():
        if kernel_id == "warp_specialized":
            continue  # named barriers: the next test
        bodies = {
            v: kernel_body((out / s["file"]).read_text(), s["kernel"])
            for v, s in entry["variants"].items()
        }
        assert "__syncthreads" not in bodies["stripped"]
        assert "mbarrier" not in bodies["stripped"]
        assert entry["variants"]["stripped"]["verifier_hazards"] > 0
        assert "__syncthreads();" in bodies["tilewave-basic"]
        assert "mbarrier" not in bodies["tilewave-basic"]
        split = bodies["tilewave-split"]
        init = split.index("mbarrier_init_init_shared_b64")
        assert split.count("__syncthreads();") == 1  # publishes the init only
        assert init < split.index("__syncthreads();") < split.index("mbarrier_arrive")
        assert split.index("mbarrier_arrive") < split.index("mbarrier_try_wait_parity")
        for variant in ("tilewave-basic", "tilewave-split"):
            assert entry["variants"][variant]["verifier_hazards"] == 0


def test_warp_specialized_kernel_gets_raw_and_war_named_barriers(emitted):
    out, manifest = emitted
    spec = manifest["kernels"]["warp_specialized"]["variants"]
    stripped = kernel_body((out / spec["stripped"]["file"]).read_text(), "warp_specialized_kernel")
    assert "bar." not in stripped and "__syncthreads" not in stripped
    assert spec["stripped"]["verifier_hazards"] > 0
    named = kernel_body((out / spec["tilewave-named"]["file"]).read_text(),
                        "warp_specialized_kernel")
    assert spec["tilewave-named"]["verifier_hazards"] == 0
    loop = named[named.index("for (int k = 0;"):]
    producer, consumer = loop.split("} else {", 1)
    sync = NAMED_SYNC
    # producer: store, sync RAW id 1, sync WAR id 2; consumer: sync 1, read, sync 2
    assert producer.index("S_ptr[") < producer.index(sync.format(1)) < producer.index(
        sync.format(2))
    assert consumer.index(sync.format(1)) < consumer.index("S_ptr[") < consumer.index(
        sync.format(2))
    assert "__syncthreads" not in named


def test_all_sync_diagnostic_is_the_hand_kernel_with_aligned_syncs_for_arrives(emitted):
    out, manifest = emitted
    spec = manifest["kernels"]["warp_specialized"]["variants"]
    hand = kernel_body((out / spec["hand-arrive"]["file"]).read_text(),
                       "warp_specialized_kernel")
    all_sync = kernel_body((out / spec["named-all-sync"]["file"]).read_text(),
                           "warp_specialized_kernel")
    assert "bar_arrive" not in all_sync and "barrier_sync" not in all_sync
    assert all_sync.count("tvm_builtin_ptx_bar_sync_count_sync(") == 4
    assert all_sync == hand.replace("tvm_builtin_ptx_bar_arrive_arrive(",
                                    "tvm_builtin_ptx_bar_sync_count_sync(")
    assert "named-all-sync" not in load_example().TILEWAVE_VARIANTS  # shown, not judged


def _named_branches(out, spec, variant):
    body = kernel_body((out / spec[variant]["file"]).read_text(), "warp_specialized_kernel")
    loop = body[body.index("for (int k = 0;"):]
    return loop.split("} else {", 1)




def test_hand_arrive_variant_is_the_kernel_as_written(emitted):
    out, manifest = emitted
    spec = manifest["kernels"]["warp_specialized"]["variants"]
    producer, consumer = _named_branches(out, spec, "hand-arrive")
    assert producer.index(ARRIVE.format(1)) < producer.index(SYNC.format(2))
    assert consumer.index(SYNC.format(1)) < consumer.index("S_ptr[") < consumer.index(
        ARRIVE.format(2))
    assert spec["hand-arrive"]["verifier_hazards"] == 0
    assert "hand-arrive" not in load_example().TILEWAVE_VARIANTS  # shown, not judged


def test_consumers_signal_war_with_bar_sync(emitted):
    out, manifest = emitted
    spec = manifest["kernels"]["warp_specialized"]["variants"]
    producer, consumer = _named_branches(out, spec, "tilewave-named")
    assert consumer.index("S_ptr[") < consumer.index(NAMED_SYNC.format(2))
    assert "bar_arrive" not in consumer and "bar_arrive" not in producer
    assert producer.index(NAMED_SYNC.format(1)) < producer.index(NAMED_SYNC.format(2))


def test_loop_tile_gets_the_war_barrier_of_the_next_iteration(emitted):
    out, manifest = emitted
    spec = manifest["kernels"]["loop_tile"]["variants"]
    loop = kernel_body((out / spec["tilewave-basic"]["file"]).read_text(), "loop_tile_kernel")
    loop = loop[loop.index("for (int k = 0;") :]
    assert loop.count("__syncthreads();") == 2
    split = kernel_body((out / spec["tilewave-split"]["file"]).read_text(), "loop_tile_kernel")
    split = split[split.index("for (int k = 0;") :]
    assert split.count("mbarrier_arrive") == 2
    assert split.count("tw_phase_ptr[0] = (tw_phase_ptr[0] ^ (uint)1);") == 2


def test_committed_sources_are_what_emit_writes(emitted):
    out, manifest = emitted
    committed = json.loads((GENERATED / "manifest.json").read_text())
    assert committed == manifest
    for entry in manifest["kernels"].values():
        for spec in entry["variants"].values():
            assert (GENERATED / spec["file"]).read_text() == (out / spec["file"]).read_text()


def test_references_match_direct_loops():
    example = load_example()
    rng = np.random.default_rng(3)
    blocks, width, steps = example.BLOCKS, example.WIDTH, example.STEPS
    a = rng.standard_normal(blocks * width).astype(np.float32)
    rev = example.REFERENCES["reverse"](a)
    sten = example.REFERENCES["stencil"](a)
    for b in range(blocks):
        for t in range(width):
            i = b * width + t
            assert rev["B"][i] == a[b * width + width - 1 - t]
            left, right = a[b * width + (t - 1) % width], a[b * width + (t + 1) % width]
            assert sten["B"][i] == pytest.approx(left + 2 * a[i] + right, rel=1e-6, abs=1e-6)
    np.testing.assert_array_equal(rev["C"], a * np.float32(3))
    m = rng.standard_normal((example.N, example.N)).astype(np.float32)
    np.testing.assert_array_equal(example.REFERENCES["transpose"](m)["B"], m.T)
    tiles = rng.standard_normal((blocks, steps * width)).astype(np.float32)
    direct = np.zeros((blocks, width))
    for b in range(blocks):
        for t in range(width):
            for k in range(steps):
                direct[b, t] += tiles[b, k * width + (t + 1) % width] * (k + 1)
    got = example.REFERENCES["loop_tile"](tiles)["B"]
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)
    direct = np.zeros((blocks, width))
    for b in range(blocks):
        for t in range(width):  # consumer thread width + t reads S[width - 1 - t]
            for k in range(steps):
                direct[b, t] += tiles[b, k * width + width - 1 - t] * (k + 1)
    got = example.REFERENCES["warp_specialized"](tiles)["B"]
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)


def test_racecheck_summary_parsing():
    example = load_example()
    line = "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)"
    assert example._SUMMARY.search(line).group(1) == "3"
    assert example._SUMMARY.search("RACECHECK SUMMARY: 0 hazards displayed").group(1) == "0"
    log = ("========= Error: Potential WAR hazard detected at __shared__ 0x1fc in block (3,0,0) :\n"
           "========= Warning: Potential RAW hazard detected at __shared__ 0x0 in block (0,0,0)")
    assert example._HAZARD.findall(log) == ["WAR", "RAW"]
