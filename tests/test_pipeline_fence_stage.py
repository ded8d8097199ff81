"""tilewave's pipeline runs InjectFenceProxy on targets with the async proxy, and only there."""

from __future__ import annotations

import pytest
from tvm.script import tirx as T

from tilewave.pipeline import build, stages_for


@T.prim_func
def store_then_bulk_store(A: T.Buffer((128,), "float32")):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        smem[tx] = A[tx] + T.float32(1)
        T.tvm_storage_sync("shared")
        if tx == 0:
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)


@pytest.mark.parametrize(
    ("target", "has_stage"),
    [("sm_90a", True), ("sm_80", False), ("gfx942", False), ("gfx1200", False)],
)
def test_fence_stage_only_where_the_async_proxy_exists(target, has_stage):
    names = [stage.name for stage in stages_for(target)]
    assert ("tilewave.InjectFenceProxy" in names) is has_stage
    if has_stage:
        assert names.index("tilewave.InjectFenceProxy") < names.index("tilewave.LowerTilewaveOps")


def test_build_fences_the_bulk_store_in_cuda_source():
    source = build(store_then_bulk_store, "sm_90a").source
    body = source[source.index("__global__") :]
    positions = [
        body.index(fragment)
        for fragment in ("__syncthreads()", "fence_proxy", "cp_async_bulk_s2g", "commit_group")
    ]
    assert positions == sorted(positions), body
    assert body.count("tvm_builtin_ptx_fence_proxy_proxy_async_shared__cta();") == 1
    assert 'asm volatile("fence.proxy.async.shared::cta;"' in source
