"""benchmarks/tvm_executable_h100.py --emit: TVM executables exported for the GPU machine.

The emit step runs in its own process: it loads TVM's CUDA runtime library (over a driver
stand-in when the machine has no driver), after which TVM's CUDA codegen in that process
compiles device code instead of keeping the source, which other tests must not inherit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile

import pytest
from example_loader import REPO_ROOT, load_module

SCRIPT = REPO_ROOT / "benchmarks" / "tvm_executable_h100.py"
EXECUTABLES = load_module(SCRIPT)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    if shutil.which("nvcc") is None or shutil.which("gcc") is None:
        pytest.skip("the aot form needs nvcc and gcc")
    out = tmp_path_factory.mktemp("tvm_executable")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--emit", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_case_is_exported_in_both_forms_with_its_entry(emitted):
    manifest = json.loads((emitted / "manifest.json").read_text())
    assert set(manifest["cases"]) == {case.name for case in EXECUTABLES.CASES}
    for case in EXECUTABLES.CASES:
        entry = manifest["cases"][case.name]
        assert entry["pipeline"] == case.pipeline
        assert entry["entry"] == str(EXECUTABLES.load_kernel(case.kernel).attrs["global_symbol"])
        for form in EXECUTABLES.FORMS:
            library = (emitted / entry["files"][form]).read_bytes()
            assert library.startswith(b"\x7fELF")
            # without a driver the jit form carries the CUDA source; the aot form nvcc's fatbin
            has_source = b"__global__" in library
            if form == "aot" or manifest["jit_device_code"] == "source":
                assert has_source == (form == "jit"), (case.name, form)


def test_device_code_kinds_and_the_runtime_bundle(emitted):
    manifest = json.loads((emitted / "manifest.json").read_text())
    assert manifest["jit_device_code"] in ("source", "cuda")
    assert manifest["aot_device_code"] == "cuda"
    with tarfile.open(emitted / "runtime" / "tvm_runtime.tgz") as tar:
        names = tar.getnames()
    assert "tvm/lib/libtvm_runtime.so" in names
    assert "tvm/lib/libtvm_runtime_cuda.so" in names
    assert not any(name.endswith("libtvm_compiler.so") for name in names)
    assert not any("__pycache__" in name for name in names)


def test_gpu_side_references_match_torch_semantics():
    """The GPU side's references, on CPU tensors (skipped without torch)."""
    torch = pytest.importorskip("torch")
    a = torch.arange(32.0).view(2, 16)
    got, expected, _ = EXECUTABLES.reference("transpose", {"A": a, "B": a.t().clone()}, torch)
    assert torch.equal(got, expected)
    with pytest.raises(SystemExit, match="unknown reference 'nope'"):
        EXECUTABLES.reference("nope", {}, torch)
