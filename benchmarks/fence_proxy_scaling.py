"""How InjectFenceProxy's time grows with kernel size (1k -> 10k statements).

Generates kernels made of a repeated unit (a serial loop with a shared store and a bulk copy,
a branch with a store on one side, a fenced copy, an unknown call, a barrier), runs the
analysis alone and the whole pass, and prints times with their ratio to the 1k-statement run
measured in the same process. Linear growth shows as a ratio close to the size ratio.

    python benchmarks/fence_proxy_scaling.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from tvm import tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave ops
from tilewave.analysis.proxy_state import analyze_proxy_state
from tilewave.ir.walker import post_order_visit
from tilewave.transforms.inject_fence_proxy import inject_fence_proxy


@T.prim_func
def unit(A: T.Buffer((128,), "float32"), n: T.int32):
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        smem = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(n):
            smem[tx] = T.float32(k)
            T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
            T.ptx.cp.async_.bulk.commit_group()
            T.ptx.cp.async_.bulk.wait_group.read(0)
        if n > 3:
            smem[tx] = T.float32(1)
        T.call_extern("void", "opaque_helper", n)
        T.tvm_storage_sync("shared")
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.tilewave.fence_proxy_async()
        T.ptx.cp.async_.bulk.global_.shared__cta.bulk_group(A.data, smem.data, 512)
        T.ptx.cp.async_.bulk.commit_group()
        T.ptx.cp.async_.bulk.wait_group.read(0)


def count_statements(node: object) -> int:
    """Statements under ``node`` (every Stmt node, containers included)."""
    count = 0

    def visit(item: object) -> None:
        nonlocal count
        count += isinstance(item, tirx.Stmt)

    post_order_visit(node, visit)
    return count


def kernel_of(repeats: int) -> tirx.PrimFunc:
    """``unit``'s code repeated ``repeats`` times inside one thread loop."""
    thread_loop = unit.body
    alloc, *code = list(thread_loop.body.seq)
    body = tirx.SeqStmt([alloc, *(code * repeats)])
    loop = tirx.For(thread_loop.loop_var, thread_loop.min, thread_loop.extent, thread_loop.kind,
                    body, thread_loop.thread_binding, thread_loop.annotations)
    return unit.with_body(loop)


def best_of(fn: Callable[[], object], runs: int = 3) -> float:
    """Median wall time of ``runs`` calls, in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Print the scaling table."""
    per_unit = count_statements(kernel_of(2)) - count_statements(kernel_of(1))
    sizes = [1000, 2000, 5000, 10000]
    rows = []
    for size in sizes:
        func = kernel_of(max(1, round(size / per_unit)))
        stmts = count_statements(func.body)
        analysis = best_of(lambda f=func: analyze_proxy_state(f))
        full = best_of(lambda f=func: inject_fence_proxy(f, target="sm_90a"))
        rows.append((stmts, analysis, full))
    base_stmts, base_analysis, base_full = rows[0]
    print(f"{'statements':>10} {'size x':>7} {'analysis s':>11} {'ratio':>6} "
          f"{'pass s':>8} {'ratio':>6} {'us/stmt':>8}")
    for stmts, analysis, full in rows:
        print(f"{stmts:>10} {stmts / base_stmts:>7.2f} {analysis:>11.3f} "
              f"{analysis / base_analysis:>6.2f} {full:>8.3f} {full / base_full:>6.2f} "
              f"{1e6 * full / stmts:>8.1f}")


if __name__ == "__main__":
    main()
