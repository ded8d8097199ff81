"""examples/multibuffer_h100.py --emit: CUDA source of the single/double-buffered kernels."""

import json
from pathlib import Path

import numpy as np
from example_loader import load_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multibuffer_h100.py"


def load_example():
    return load_module(EXAMPLE)


def test_emit_writes_every_variant(tmp_path):
    example = load_example()
    assert example.main(["--emit", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert set(manifest["variants"]) == {"single", "double", "double_nowar", "single_nowar"}
    sources = {v: (tmp_path / f"{v}.cu").read_text() for v in manifest["variants"]}
    for variant, source in sources.items():
        spec = manifest["variants"][variant]
        assert f'extern "C" __global__ void __launch_bounds__(128) {spec["kernel"]}(' in source
        assert sorted(spec["params"]) == ["A", "B", "W"]
        assert "cp.async.ca.shared.global" in source
    assert "float S_ptr[128];" in sources["single"]
    assert "float S_ptr[128];" in sources["single_nowar"]
    for variant in ("double", "double_nowar"):
        assert "float S_ptr[256];" in sources[variant]
        assert "(k & 1) * 128" in sources[variant]
    # Two barriers per iteration with the WAR barrier, one without it.
    assert sources["double"].count("__syncthreads();") == 2
    assert sources["double_nowar"].count("__syncthreads();") == 1


def test_committed_sources_match_the_manifest():
    generated = EXAMPLE.parent / "generated" / "multibuffer"
    manifest = json.loads((generated / "manifest.json").read_text())
    for spec in manifest["variants"].values():
        assert spec["kernel"] in (generated / spec["file"]).read_text()


def test_numpy_reference_matches_a_direct_loop():
    example = load_example()
    rng = np.random.default_rng(1)
    rows, tile, tiles, window = 2, 8, 3, 4
    a = rng.standard_normal((rows, tiles * tile)).astype(np.float32)
    w = rng.standard_normal(window).astype(np.float32)
    direct = np.zeros((rows, tile))
    for r in range(rows):
        for t in range(tile):
            for k in range(tiles):
                for j in range(window):
                    direct[r, t] += a[r, k * tile + (t + j) % tile] * w[j]
    got = example.reference(a, w, rows, tile, tiles, window)
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)
