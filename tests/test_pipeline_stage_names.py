"""One name per stage: the listed name is the pass's own name, which disables it."""

from __future__ import annotations

import itertools

import pytest
import tvm
from test_pipeline_fence_stage import store_then_bulk_store
from tvm.script import tirx as T

from tilewave.pipeline import STAGES, LowerOptions, build
from tilewave.targets import TARGETS

_CONFIG_KEYS = (
    "tirx.disable_storage_rewrite",
    "tirx.use_async_copy",
    "tirx.instrument_bound_checkers",
    "tirx.s_tir.ldg32",
    "tirx.disable_cse_tir",
    "tirx.instrument_lwp",
)


@T.prim_func
def reverse(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "reverse"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_stage_name_is_its_pass_name(target):
    info = TARGETS[target]
    for flags in itertools.product([False, True], repeat=len(_CONFIG_KEYS)):
        options = LowerOptions(
            multi_buffer_count=2, config=dict(zip(_CONFIG_KEYS, flags, strict=True))
        )
        for stage in STAGES:
            if stage.when(info, options):
                assert stage.make(info, options).info.name == stage.name


def _kernel_source(kernel, target, disabled):
    with tvm.transform.PassContext(opt_level=3, disabled_pass=disabled):
        source = build(kernel, target).source
    return source[source.index("__global__") :]


def test_listed_fence_stage_name_disables_the_fence_stage():
    assert "fence_proxy" in _kernel_source(store_then_bulk_store, "sm_90a", [])
    fenceless = _kernel_source(store_then_bulk_store, "sm_90a", ["tilewave.InjectFenceProxy"])
    assert "fence_proxy" not in fenceless
    assert "cp_async_bulk_s2g" in fenceless


def test_listed_barrier_stage_name_disables_the_barrier_stage():
    assert _kernel_source(reverse, "sm_90a", []).count("__syncthreads()") == 1
    unsynced = _kernel_source(reverse, "sm_90a", ["tilewave.InsertSharedBarriers"])
    assert "__syncthreads()" not in unsynced
