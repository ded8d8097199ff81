"""InsertSharedBarriers time against kernel size, next to TVM's ThreadSync on the same module.

Generated straight-line kernels of 1,000 / 5,000 / 20,000 shared-memory statements (one
128-thread block, eight shared buffers; a deterministic mix of per-thread writes and
updates, reads of a neighbour's element, global stores, and small serial loops holding
both), each lowered through tilewave's pass list up to its synchronisation stage, then
synchronised by ``tilewave.InsertSharedBarriers`` and by TVM's
``s_tir.transform.ThreadSync("shared")``. The table prints the pass times (CPU seconds, best
of ``--repeat``, each run as a first run on the kernel: see ``pass_time.py``), tilewave /
ThreadSync, the barriers each inserted, and the growth exponent ``log(t_20k / t_1k) /
log(20)`` of each pass (1.0 is linear).

Targets (issue 15): InsertSharedBarriers <= 0.5 s at 5,000 statements and <= 2 s at
20,000.

Run: ``python benchmarks/pass_scaling.py [--sizes 1000 5000 20000] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.script import from_source
from tvm.script import tirx as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

from barrier_count import static_counts, sync_input

from tilewave.kernel_memory import forget_kernels
from tilewave.targets import get_target
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers

THREADS = 128
BUFFERS = 8
ROWS = 64
TARGET = "sm_90a"


def _statement(rng: random.Random, index: int, indent: str) -> list[str]:
    """One generated statement (a loop of a few counts as that many)."""
    buf = f"S{rng.randrange(BUFFERS)}"
    row = index % ROWS
    kind = rng.random()
    if kind < 0.3:
        return [f"{indent}{buf}[tx] = A[{row}, tx] * T.float32(2)"]
    if kind < 0.55:
        return [f"{indent}{buf}[tx] = {buf}[tx] + T.float32(1)"]
    if kind < 0.85:
        shift = rng.randrange(1, THREADS)
        return [f"{indent}B[{row}, tx] = {buf}[(tx + {shift}) % {THREADS}]"]
    return [f"{indent}B[{row}, tx] = A[{row}, tx] + T.float32(3)"]


def kernel_source(statements: int, seed: int = 0) -> str:
    """TVMScript of a kernel with ``statements`` leaf statements."""
    rng = random.Random(seed)
    lines: list[str] = []
    count = 0
    while count < statements:
        if rng.random() < 0.05 and statements - count >= 6:
            lines.append(f"        for i{count} in range(4):")
            for _ in range(5):
                lines += _statement(rng, count, "            ")
                count += 1
            continue
        lines += _statement(rng, count, "        ")
        count += 1
    allocs = [f"        S{b} = T.alloc_shared(({THREADS},))" for b in range(BUFFERS)]
    return "\n".join(
        [
            "@T.prim_func",
            f'def scaled(A: T.Buffer(({ROWS}, {THREADS}), "float32"),',
            f'           B: T.Buffer(({ROWS}, {THREADS}), "float32")):',
            f'    for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):',
            *allocs,
            *lines,
        ]
    )


def parse(source: str) -> tirx.PrimFunc:
    """The PrimFunc of a generated source."""
    return from_source(source, extra_vars={"T": T})


def timed(make: Callable[[], Any], mod: Any, repeat: int) -> tuple[float, Any]:
    """Best CPU time of ``make()(mod)`` over ``repeat`` runs, and the last output."""
    best = math.inf
    out = None
    for _ in range(repeat):
        transform = make()
        forget_kernels()  # nothing learnt by an earlier run on this kernel is reused
        start = time.process_time()
        out = transform(mod)
        best = min(best, time.process_time() - start)
    return best, out


def barriers(mod: Any) -> int:
    """Barrier statements in the module's function."""
    func = next(f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc))
    return static_counts(func).get("barrier", 0)


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    info = get_target(TARGET)
    print(
        "| statements | tilewave s | ThreadSync s | tilewave / ThreadSync | "
        "barriers tilewave | barriers ThreadSync |"
    )
    print("|---|---|---|---|---|---|")
    times: dict[int, tuple[float, float]] = {}
    for size in args.sizes:
        mod = sync_input(parse(kernel_source(size)), TARGET)
        ours, ours_out = timed(lambda: InsertSharedBarriers(info), mod, args.repeat)
        theirs, theirs_out = timed(
            lambda: s_tir.transform.ThreadSync("shared"), mod, args.repeat
        )
        times[size] = (ours, theirs)
        print(
            f"| {size} | {ours:.3f} | {theirs:.4f} | {ours / max(theirs, 1e-9):.0f}x | "
            f"{barriers(ours_out)} | {barriers(theirs_out)} |"
        )
    if len(times) > 1:
        small, large = min(times), max(times)
        span = math.log(large / small)
        for name, column in (("tilewave", 0), ("ThreadSync", 1)):
            ratio = times[large][column] / max(times[small][column], 1e-9)
            print(f"growth exponent {name} ({small} -> {large}): {math.log(ratio) / span:.2f}")
    return 0


if __name__ == "__main__":
    tvm.support
    sys.exit(main())
