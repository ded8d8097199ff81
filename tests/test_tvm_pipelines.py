"""tilewave's pass lists registered as TVM TIR pipelines: ``tvm.compile(..., tir_pipeline=...)``."""

from __future__ import annotations

import pytest
import tvm
from tvm.script import tirx as T
from tvm.tirx import compilation_pipeline

import tilewave
from tilewave.codegen.rocm import offline_rocm_link
from tilewave.errors import UnknownTargetError
from tilewave.examples_builtin import block_sum, tiled_transpose
from tilewave.tvm_pipelines import TILEWAVE_PIPELINE


@T.prim_func
def reverse(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "reverse"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]


def _compile_source(kernel, target_name: str) -> tuple[tvm.runtime.Executable, str]:
    info = tilewave.get_target(target_name)
    if info.is_cuda:
        ex = tvm.compile(kernel, target=info.tvm_target(), tir_pipeline=TILEWAVE_PIPELINE)
        return ex, ex.mod.imports[0].inspect_source()
    with offline_rocm_link():
        ex = tvm.compile(kernel, target=info.tvm_target(), tir_pipeline=TILEWAVE_PIPELINE)
    return ex, ex.mod.imports[0].inspect_source("asm")


def test_import_registers_the_pipeline_with_tvm():
    assert TILEWAVE_PIPELINE in compilation_pipeline.PIPELINE_MAP
    lowering, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline(TILEWAVE_PIPELINE)
    assert isinstance(lowering, tvm.transform.Pass)
    assert [p.info.name for p in finalize_device().passes] == [
        "tirx.LowerWarpMemory",
        "tirx.StmtSimplify",
        "tirx.LowerIntrin",
    ]
    assert isinstance(finalize_host(), tvm.transform.Pass)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80", "gfx942", "gfx950", "gfx1200"])
@pytest.mark.parametrize("kernel", [tiled_transpose, block_sum], ids=["transpose", "block_sum"])
def test_tvm_compile_gives_the_device_code_of_tilewave_build(kernel, target):
    ex, source = _compile_source(kernel, target)
    assert source == tilewave.build(kernel, target).source
    # The executable is TVM's own: the host entry function is there to call.
    name = kernel.attrs["global_symbol"]
    assert isinstance(ex, tvm.runtime.Executable)
    assert ex.mod.get_function(name, query_imports=False) is not None


def test_tvm_compile_with_tilewave_puts_the_barrier_a_racy_kernel_needs():
    _, source = _compile_source(reverse, "sm_90a")
    body = source[source.index("__global__") :]
    assert body.count("__syncthreads()") == 1
    assert body.index("__syncthreads()") < body.index("63 - ")


def test_tvm_compile_without_a_gpu_target_names_the_fix():
    with pytest.raises(UnknownTargetError) as info:
        tvm.compile(reverse, tir_pipeline=TILEWAVE_PIPELINE)
    message = str(info.value)
    assert "tir_pipeline='tilewave'" in message
    assert "in function 'reverse'" in message
    assert "pass the GPU target" in message


def test_bound_target_rejects_a_module_without_targets():
    from tilewave.tvm_pipelines import bound_target

    with pytest.raises(UnknownTargetError, match="no kernel in the module has a target"):
        bound_target(tvm.IRModule({"reverse": reverse}), TILEWAVE_PIPELINE)


def test_readme_first_usage_example_runs_and_prints_the_barrier(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    first_python = re.search(r"```python\n(.*?)```", readme, re.S)
    assert first_python is not None
    code = first_python.group(1)
    assert 'tir_pipeline="tilewave"' in code
    script = tmp_path / "readme_example.py"
    script.write_text(code)
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True
    )
    kernel = run.stdout[run.stdout.rindex("__global__") :]
    assert kernel.count("__syncthreads()") == 1


@T.prim_func
def wide_reverse(A: T.Buffer((512,), "float32"), B: T.Buffer((512,), "float32")):
    T.func_attr({"global_symbol": "wide_reverse"})
    for tx in T.thread_binding(512, thread="threadIdx.x"):
        S = T.alloc_buffer((512,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[511 - tx]


def test_tvm_compile_refuses_rocm_blocks_the_offline_codegen_cannot_launch():
    from tilewave.errors import TargetFeatureError

    with pytest.raises(TargetFeatureError, match="'wide_reverse_kernel' runs 512 threads"):
        _compile_source(wide_reverse, "gfx942")
    assert "__syncthreads()" in _compile_source(wide_reverse, "sm_90a")[1]
