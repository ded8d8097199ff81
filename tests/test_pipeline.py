"""tilewave.lower / tilewave.build: the pass list, real codegen, options and input errors."""

from __future__ import annotations

import importlib.util

import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tilewave.errors import (
    KernelSourceError,
    MalformedKernelError,
    PassOptionError,
    TargetFeatureError,
    UnknownTargetError,
)
from tilewave.examples_builtin import block_sum, tiled_transpose
from tilewave.pipeline import STAGES, build, default_passes, lower, stages_for


@T.prim_func
def racy_without_barrier(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "racy_without_barrier"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]


@T.prim_func
def not_a_gpu_kernel(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "not_a_gpu_kernel"})
    for i in range(64):
        A[i] = T.float32(0)


def _names(target, **options):
    return [stage.name for stage in stages_for(target, **options)]


@pytest.mark.parametrize("target", ["sm_90a", "gfx942", "gfx1200"])
def test_pass_list_replaces_tvm_shared_thread_sync_with_tilewave_stages(target):
    names = _names(target)
    assert "tilewave.LowerTilewaveOps" in names
    assert "s_tir.ThreadSync" in names
    assert not any(n.startswith("s_tir.ThreadSync.shared") for n in names)
    # tilewave's stage runs where TVM would sync shared memory: after AnnotateEntryFunc,
    # before host/device splitting.
    assert names.index("tirx.AnnotateEntryFunc") < names.index("tilewave.LowerTilewaveOps")
    assert names.index("tilewave.LowerTilewaveOps") < names.index("tirx.SplitHostDevice")
    assert len(default_passes(target)) == len(names)


def test_config_switches_select_stages_like_tvm():
    assert "tirx.StorageRewrite" in _names("sm_90a")
    with tvm.transform.PassContext(config={"tirx.disable_storage_rewrite": True}):
        assert "tirx.StorageRewrite" not in _names("sm_90a")
    assert "s_tir.LowerAsyncDMA" not in _names("sm_90a")
    with tvm.transform.PassContext(config={"tirx.use_async_copy": True}):
        assert "s_tir.LowerAsyncDMA" in _names("sm_90a")


def test_every_stage_has_a_known_origin():
    assert {stage.origin for stage in STAGES} == {"tvm", "tilewave"}


def test_lower_returns_host_and_device_functions_without_tilewave_ops():
    mod = lower(block_sum, "sm_90a")
    names = {gvar.name_hint for gvar in mod.get_global_vars()}
    assert names == {"block_sum", "block_sum_kernel"}
    text = mod.script()
    assert "T.tilewave" not in text
    assert 'T.tvm_storage_sync("shared"' in text


def test_tilewave_does_not_add_tvm_barriers():
    # TVM's own pipeline inserts __syncthreads() here; tilewave's leaves barriers to its passes.
    tvm_src = (
        tvm.compile(
            tvm.IRModule({"racy_without_barrier": racy_without_barrier}),
            target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}),
        )
        .mod.imports[0]
        .inspect_source()
    )
    assert "__syncthreads()" in tvm_src
    with tvm.transform.PassContext(disabled_pass=["tilewave.InsertSharedBarriers"]):
        assert "__syncthreads()" not in build(racy_without_barrier, "sm_90a").source


def test_insert_shared_barriers_stage_synchronises_the_racy_kernel():
    names = _names("sm_90a")
    assert names.index("tilewave.InsertSharedBarriers") < names.index("tilewave.LowerTilewaveOps")
    assert build(racy_without_barrier, "sm_90a").source.count("__syncthreads();") == 1


def test_build_cuda_gives_cuda_c():
    result = build(tiled_transpose, "sm_90a")
    assert result.source_language == "cuda"
    assert 'extern "C" __global__' in result.source
    assert "tiled_transpose_kernel" in result.source
    assert result.source.count("__syncthreads();") == 1
    assert result.llvm_ir is None


@pytest.mark.parametrize(
    ("target", "barrier"),
    [("gfx942", "s_barrier"), ("gfx950", "s_barrier"), ("gfx1200", "s_barrier_signal -1")],
)
def test_build_rocm_gives_amdgcn_and_llvm_ir(target, barrier):
    result = build(block_sum, target)
    assert result.source_language == "amdgcn"
    assert f'.amdgcn_target "amdgcn-amd-amdhsa-hcc-{target}' in result.source
    assert barrier in result.source
    assert "llvm.amdgcn.s.barrier" in result.llvm_ir


def test_build_restores_rocm_callbacks():
    names = ("tvm_callback_rocm_bitcode_path", "tvm_callback_rocm_link")
    before = [tvm_ffi.get_global_func(n, allow_missing=True) for n in names]
    build(block_sum, "gfx942")
    after = [tvm_ffi.get_global_func(n, allow_missing=True) for n in names]
    assert [f is None for f in before] == [f is None for f in after]
    for old, new in zip(before, after, strict=True):
        if old is not None:
            assert old.same_as(new)


def test_irmodule_input_is_accepted():
    mod = tvm.IRModule({"block_sum": block_sum})
    assert "block_sum_kernel" in build(mod, "gfx942").source


# ---------------------------------------------------------------- multi_buffer_count


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
def test_multi_buffer_count_must_be_a_positive_integer(bad):
    with pytest.raises(PassOptionError, match=r"multi_buffer_count must be a positive integer"):
        lower(block_sum, "sm_90a", multi_buffer_count=bad)


def test_multi_buffer_stage_runs_only_when_asked():
    assert "tilewave.MultiBuffer" not in _names("gfx942")
    names = _names("gfx942", multi_buffer_count=2)
    assert names.index("tilewave.MultiBuffer") < names.index("tirx.FlattenBuffer")


def test_multi_buffer_count_without_the_pass_is_refused(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def without_multibuffer(name, *args):
        return None if name == "tilewave.transforms.multibuffer" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_multibuffer)
    with pytest.raises(PassOptionError, match=r"multi_buffer_count=2.*no multibuffer pass yet"):
        lower(block_sum, "sm_90a", multi_buffer_count=2)


# ---------------------------------------------------------------- input errors


def test_unknown_target():
    with pytest.raises(UnknownTargetError, match=r"unknown target 'sm_1000'"):
        lower(block_sum, "sm_1000")


def test_kernel_without_thread_binding_is_not_a_gpu_kernel():
    with pytest.raises(
        MalformedKernelError, match=r"in function 'not_a_gpu_kernel'.*binds no loop to threadIdx"
    ):
        lower(not_a_gpu_kernel, "gfx942")


def test_lower_needs_a_primfunc_or_irmodule():
    with pytest.raises(KernelSourceError, match=r"expected a tvm.tirx.PrimFunc or tvm.IRModule"):
        lower("def kernel(): pass", "sm_90a")


def test_irmodule_without_primfunc_is_refused():
    with pytest.raises(KernelSourceError, match=r"holds no PrimFunc"):
        lower(tvm.IRModule({}), "sm_90a")


@T.prim_func
def split_barrier_kernel(A: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "split_barrier_kernel"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        T.tilewave.barrier_signal(0)
        T.tilewave.barrier_wait(0)
        A[tx] = T.float32(0)


def test_errors_inside_passes_keep_their_tilewave_type():
    # Raised inside LowerTilewaveOps, i.e. across TVM's C++ pass machinery.
    with pytest.raises(TargetFeatureError, match=r"split_barrier_kernel.*gfx942 does not have"):
        lower(split_barrier_kernel, "gfx942")


@pytest.mark.skipif(
    importlib.util.find_spec("tilewave.transforms.multibuffer") is None,
    reason="the multibuffer pass is not in this tree",
)
def test_multi_buffer_count_reaches_the_multibuffer_pass():
    # block_sum's `partial` is read before it is written in the loop: MultiBuffer refuses it,
    # which shows the option reached the real pass.
    with pytest.raises(MalformedKernelError, match=r"MultiBuffer: buffer 'partial'"):
        lower(block_sum, "sm_90a", multi_buffer_count=2)


@pytest.mark.parametrize("example", ["custom_sequential.py", "transpose.py"])
def test_examples_run(example, capsys):
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / example
    runpy.run_path(str(path), run_name="__main__")
    assert "@T.prim_func" in capsys.readouterr().out
