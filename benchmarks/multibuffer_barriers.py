"""Barriers per loop iteration before and after multibuffering (N = 1, 2, 3).

A pipelined loop (load a tile into shared memory, compute from it) is written without
barriers, once with a plain store and once with ``cp.async`` loading the tile; for each
multibuffer count N the kernel goes through ``multi_buffer`` and then
``insert_shared_barriers``, and the barrier statements left inside the loop body are
counted (on split-barrier targets a signal and its wait are two statements).

A second column is an oracle measured in the same run: starting from the barrier pass's
output, each barrier in the loop is removed in turn and kept out when the block
interpreter (tests/tir_interpreter.py) still gives the reference result for every thread
order tried (forward, reverse, seeded shuffles). With N >= 2 the write-after-read barrier
between iterations is not needed; the ratio column compares each row to N = 1.

Run: ``python benchmarks/multibuffer_barriers.py [--target sm_90a]``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
from tvm import ir, tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401
from tilewave.ir.intrinsics import OpEffect, classify_call
from tilewave.ir.walker import TIRMutator, TIRVisitor, rebuild
from tilewave.transforms.insert_shared_barriers import insert_shared_barriers
from tilewave.transforms.multibuffer import multi_buffer

NT, TRIPS, WINDOW = 8, 4, 3
ORDERS = ("forward", "reverse", 1, 2, 3)


@T.prim_func
def pipelined(A: T.Buffer((TRIPS, NT), "float32"), B: T.Buffer((TRIPS, NT), "float32")):
    for tx in T.thread_binding(NT, thread="threadIdx.x"):
        S = T.alloc_buffer((NT,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        for k in range(TRIPS):
            S[tx] = A[k, tx]  # load tile k
            acc[0] = T.float32(0)
            for j in range(WINDOW):  # compute from the tile (other threads' elements)
                acc[0] = acc[0] + S[(tx + j + 1) % NT]
            B[k, tx] = acc[0]


@T.prim_func
def pipelined_cp_async(A: T.Buffer((TRIPS, NT), "float32"), B: T.Buffer((TRIPS, NT), "float32")):
    for tx in T.thread_binding(NT, thread="threadIdx.x"):
        S = T.alloc_buffer((NT,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        for k in range(TRIPS):
            # load tile k with cp.async: the slot is only inside the destination address
            T.ptx.cp.async_.ca.shared.global_(T.address_of(S[tx]), T.address_of(A[k, tx]), 4)
            acc[0] = T.float32(0)
            for j in range(WINDOW):
                acc[0] = acc[0] + S[(tx + j + 1) % NT]
            B[k, tx] = acc[0]


KERNELS = {"store": pipelined, "cp.async": pipelined_cp_async}


def _load_interpreter() -> Any:
    path = Path(__file__).resolve().parents[1] / "tests" / "tir_interpreter.py"
    spec = importlib.util.spec_from_file_location("tir_interpreter", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tir_interpreter", module)
    spec.loader.exec_module(module)
    return module


def _is_barrier(stmt: Any) -> bool:
    value = getattr(stmt, "value", None)
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(value, ir.expr.Call):
        return False
    effect = classify_call(value)
    return effect is not None and bool(effect & OpEffect.BARRIER)


class _LoopBarriers(TIRVisitor):
    """Barrier statements inside the body of the loop over ``k``."""

    def __init__(self) -> None:
        self.found: list[Any] = []
        self._in_loop = 0

    def visit_For(self, node: tirx.For) -> None:
        inside = str(node.loop_var.name) == "k"
        self._in_loop += inside
        self.generic_visit(node)
        self._in_loop -= inside

    def visit_Evaluate(self, node: tirx.Evaluate) -> None:
        if self._in_loop and _is_barrier(node):
            self.found.append(node)


class _Drop(TIRMutator):
    def __init__(self, victim: Any) -> None:
        self.victim = victim

    def visit_Evaluate(self, node: tirx.Evaluate) -> Any:
        return None if node.same_as(self.victim) else node


def loop_barriers(func: tirx.PrimFunc) -> list[Any]:
    """The barrier statements in the loop body of ``func``."""
    finder = _LoopBarriers()
    finder.visit(func.body)
    return finder.found


def minimal_barriers(func: tirx.PrimFunc, interp: Any, a: np.ndarray, expected: np.ndarray):
    """Greedily drop loop barriers while the interpreter still gives ``expected``."""
    for barrier in loop_barriers(func):
        body = _Drop(barrier).visit(func.body)
        candidate = rebuild(func, {"body": body})
        outputs = [
            interp.run_block(candidate, {"A": a, "B": np.zeros_like(a)}, order)["B"]
            for order in ORDERS
        ]
        if all(np.array_equal(out, expected) for out in outputs):
            func = candidate
    return func


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="sm_90a")
    args = parser.parse_args(argv)
    interp = _load_interpreter()
    a = np.random.default_rng(0).standard_normal((TRIPS, NT)).astype(np.float32)
    expected = sum(np.roll(a, -(j + 1), axis=1) for j in range(WINDOW)).astype(np.float32)
    synced_single = insert_shared_barriers(pipelined, args.target)
    try:
        for order in ORDERS:
            got = interp.run_block(synced_single, {"A": a, "B": np.zeros_like(a)}, order)["B"]
            np.testing.assert_allclose(got, expected, rtol=1e-6)  # the oracle's starting point
        expected = interp.run_block(synced_single, {"A": a, "B": np.zeros_like(a)})["B"]
    except interp.UnsupportedTIR as err:
        print(f"interpreter oracle unavailable for {args.target}: {err}")
        interp = None
    rows = []
    for load, kernel in KERNELS.items():
        for count in (1, 2, 3):
            synced = insert_shared_barriers(multi_buffer(kernel, count=count), args.target)
            pass_count = len(loop_barriers(synced))
            minimal = minimal_barriers(synced, interp, a, expected) if interp else None
            needed = len(loop_barriers(minimal)) if minimal else None
            rows.append((load, count, pass_count, needed))
    print(f"target {args.target}; loop of {TRIPS} iterations, {NT} threads, tile of {NT} floats")
    print(
        "| tile load | N | barriers/iter (InsertSharedBarriers) | ratio vs N=1 "
        "| barriers/iter needed (interpreter oracle) | ratio vs N=1 |"
    )
    print("|---|---|---|---|---|---|")
    for load, count, pass_count, min_count in rows:
        base_pass, base_min = next((r[2], r[3]) for r in rows if r[0] == load and r[1] == 1)
        oracle = f"{min_count} | {min_count / base_min:.2f}" if base_min else "n/a | n/a"
        print(f"| {load} | {count} | {pass_count} | {pass_count / base_pass:.2f} | {oracle} |")

if __name__ == "__main__":
    main()
