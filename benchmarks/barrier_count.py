"""Synchronisation inserted by tilewave vs TVM's ThreadSync("shared") on the same kernels.

Every kernel is written without barriers (or has them stripped) and goes through tilewave's
pass list up to the synchronisation stage (the point where TVM's own pipeline runs
``ThreadSync("shared")``). That one module is then given to both

* ``tilewave.InsertSharedBarriers`` (tilewave's pass), and
* ``s_tir.transform.ThreadSync("shared")`` (TVM's C++ pass),

and for each output the table shows:

* **static**: barriers, ``cp.async.wait_group`` (by group count N) and ``commit_group``
  statements in the output, minus those already in the input (what the pass inserted);
* **executed / block**: how many of those statements one block executes, from a trip-count
  model: the output is walked with the block and thread indices set to 0, every serial loop
  iterated over its constant bounds and every ``if`` around a sync statement decided on the
  values at hand (a branch the model cannot decide counts as taken and the cell is marked
  ``~``). Barriers are block-uniform, so thread 0's count is the block's;
* **verifier**: hazards ``tilewave.analysis.shared_hazards.find_shared_hazards`` finds in the
  output (0 = clean);
* **pass ms**: wall time of the pass alone (best of up to 3 runs).

Run: ``python benchmarks/barrier_count.py [--target sm_90a] [--only NAME]``. Needs TVM, no GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.script import tirx as T
from tvm.sym.analyzer import Analyzer

import tilewave.ir.ops  # noqa: F401 (registers T.tilewave.* before the kernels are parsed)
from tilewave.analysis.shared_access import SyncKind, sync_action
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.examples_builtin import block_sum, tiled_transpose
from tilewave.ir.walker import TIRVisitor, substitute
from tilewave.kernel_memory import forget_kernels
from tilewave.pipeline import stages_for
from tilewave.targets import get_target
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers

REPO = Path(__file__).resolve().parents[1]
SYNC_STAGE = "tilewave.InsertSharedBarriers"
MAX_REPEAT_S = 5.0  # stop repeating a pass once it has taken this long in total

# ------------------------------------------------------------------ kernels written here


@T.prim_func
def warp_partials(A: T.Buffer((4096,), "float32"), B: T.Buffer((16,), "float32")):
    """Two-level sum: a tree inside each warp's slice, then thread 0 adds the 8 partials."""
    for bx in T.thread_binding(16, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            S = T.alloc_buffer((256,), "float32", scope="shared")
            W = T.alloc_buffer((8,), "float32", scope="shared")
            acc = T.alloc_buffer((1,), "float32", scope="local")
            S[tx] = A[bx * 256 + tx]
            for level in range(5):
                if tx % 32 < T.shift_right(16, level):
                    S[tx] = S[tx] + S[tx + T.shift_right(16, level)]
            if tx % 32 == 0:
                W[tx // 32] = S[tx]
            if tx == 0:
                acc[0] = T.float32(0)
                for w in range(8):
                    acc[0] = acc[0] + W[w]
                B[bx] = acc[0]


@T.prim_func
def scan(A: T.Buffer((2048,), "float32"), B: T.Buffer((2048,), "float32")):
    """Inclusive Hillis-Steele scan of each 256-element slice, ping-ponging two rows."""
    for bx in T.thread_binding(8, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            S = T.alloc_buffer((2, 256), "float32", scope="shared")
            S[0, tx] = A[bx * 256 + tx]
            for d in range(8):
                if tx >= T.shift_left(1, d):
                    S[(d + 1) % 2, tx] = S[d % 2, tx] + S[d % 2, tx - T.shift_left(1, d)]
                else:
                    S[(d + 1) % 2, tx] = S[d % 2, tx]
            B[bx * 256 + tx] = S[0, tx]


@T.prim_func
def stencil_2d(A: T.Buffer((66, 66), "float32"), B: T.Buffer((64, 64), "float32")):
    """5-point Laplacian of a 64x64 grid (A is padded by one): 16x16 tiles with a halo."""
    for by in T.thread_binding(4, thread="blockIdx.y"):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    S = T.alloc_buffer((18, 18), "float32", scope="shared")
                    S[ty + 1, tx + 1] = A[by * 16 + ty + 1, bx * 16 + tx + 1]
                    if tx == 0:
                        S[ty + 1, 0] = A[by * 16 + ty + 1, bx * 16]
                    if tx == 15:
                        S[ty + 1, 17] = A[by * 16 + ty + 1, bx * 16 + 17]
                    if ty == 0:
                        S[0, tx + 1] = A[by * 16, bx * 16 + tx + 1]
                    if ty == 15:
                        S[17, tx + 1] = A[by * 16 + 17, bx * 16 + tx + 1]
                    B[by * 16 + ty, bx * 16 + tx] = (
                        S[ty + 1, tx + 1] * T.float32(4)
                        - S[ty, tx + 1]
                        - S[ty + 2, tx + 1]
                        - S[ty + 1, tx]
                        - S[ty + 1, tx + 2]
                    )


@T.prim_func
def gemm_tile_loop(
    A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"),
    C: T.Buffer((64, 64), "float32"),
):
    """fp32 GEMM with 16x16 shared tiles of A and B reloaded every K step."""
    for by in T.thread_binding(4, thread="blockIdx.y"):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    As = T.alloc_buffer((16, 16), "float32", scope="shared")
                    Bs = T.alloc_buffer((16, 16), "float32", scope="shared")
                    acc = T.alloc_buffer((1,), "float32", scope="local")
                    acc[0] = T.float32(0)
                    for k in range(4):
                        As[ty, tx] = A[by * 16 + ty, k * 16 + tx]
                        Bs[ty, tx] = B[k * 16 + ty, bx * 16 + tx]
                        for i in range(16):
                            acc[0] = acc[0] + As[ty, i] * Bs[i, tx]
                    C[by * 16 + ty, bx * 16 + tx] = acc[0]


@T.prim_func
def double_buffered(A: T.Buffer((16, 1024), "float32"), B: T.Buffer((16, 128), "float32")):
    """Two-stage loop: tile k + 1 is stored into the other stage while tile k is read."""
    for bx in T.thread_binding(16, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            S = T.alloc_buffer((2, 128), "float32", scope="shared")
            acc = T.alloc_buffer((1,), "float32", scope="local")
            acc[0] = T.float32(0)
            S[0, tx] = A[bx, tx]
            for k in range(8):
                if k + 1 < 8:
                    S[(k + 1) % 2, tx] = A[bx, (k + 1) * 128 + tx]
                acc[0] = acc[0] + S[k % 2, (tx + 1) % 128]
            B[bx, tx] = acc[0]


@T.prim_func
def histogram(A: T.Buffer((16, 2048), "int32"), B: T.Buffer((16, 64), "int32")):
    """64-bin histogram per block: zero the bins, shared atomics, write the bins out."""
    for bx in T.thread_binding(16, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            H = T.alloc_buffer((64,), "int32", scope="shared")
            if tx < 64:
                H[tx] = 0
            for i in range(8):
                T.evaluate(
                    T.call_intrin(
                        "int32", "tirx.atomic_add", T.address_of(H[A[bx, i * 256 + tx] % 64]), 1
                    )
                )
            if tx < 64:
                B[bx, tx] = H[tx]


@T.prim_func
def cp_async_loop(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8, 128), "float32")):
    """A tile loaded by cp.async each iteration (no commit, no wait) and read reversed."""
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        S = T.alloc_buffer((128,), "float32", scope="shared")
        for k in range(8):
            T.ptx["cp.async.ca.shared.global"](T.address_of(S[tx]), T.address_of(A[k, tx]), 4)
            B[k, tx] = S[127 - tx]


# ------------------------------------------------------------------ kernels from elsewhere


def _load(path: Path, name: str) -> Any:
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _racecheck_kernels() -> dict[str, Any]:
    example = _load(REPO / "examples" / "shared_barriers_racecheck_h100.py", "sb_racecheck")
    found = example.kernels()
    return {
        name: example.strip_barriers(found[name]) for name in ("reverse", "stencil", "loop_tile")
    }


def _real_kernels() -> dict[str, Any]:
    gemm = _load(REPO / "examples" / "sm80_gemm.py", "sm80_gemm")
    attention = _load(REPO / "examples" / "sm80_flash_attention.py", "sm80_flash_attention")
    return {
        "sm80_gemm stripped": gemm.stripped(),
        "sm80_gemm plain": gemm.plain(),
        "sm80_flash_attention stripped": attention.stripped(),
        "sm80_flash_attention plain": attention.plain(),
    }


def kernels() -> dict[str, Any]:
    """name -> barrier-free PrimFunc, in table order."""
    racecheck = _racecheck_kernels()
    return {
        "transpose": tiled_transpose,
        "reduction (tree)": block_sum,
        "reduction (warp partials)": warp_partials,
        "scan": scan,
        "stencil 1-D": racecheck["stencil"],
        "stencil 2-D": stencil_2d,
        "reverse": racecheck["reverse"],
        "gemm tile loop": gemm_tile_loop,
        "loop tile": racecheck["loop_tile"],
        "double-buffered loop": double_buffered,
        "histogram (atomics)": histogram,
        "cp.async loop": cp_async_loop,
        **_real_kernels(),
    }


# ------------------------------------------------------------------ counting


def _sync_key(stmt: Any) -> str | None:
    action = sync_action(stmt)
    if action is None:
        return None
    if action.kind is SyncKind.ASYNC_WAIT and action.groups and not action.commits:
        return f"wait {action.arg}"
    if action.kind is SyncKind.ASYNC_WAIT:
        return "wait_all" if action.commits else "wait"
    return {SyncKind.ASYNC_COMMIT: "commit"}.get(action.kind, "barrier")


class _StaticCount(TIRVisitor):
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def visit_Evaluate(self, node: Any) -> None:
        key = _sync_key(node)
        if key is not None:
            self.counts[key] += 1


def static_counts(func: Any) -> Counter[str]:
    """Sync statements of ``func`` by kind (``barrier``, ``wait N``, ``commit``...)."""
    counter = _StaticCount()
    counter.visit(func.body)
    return counter.counts


def _has_sync(stmt: Any) -> bool:
    return bool(static_counts_of_stmt(stmt))


def static_counts_of_stmt(stmt: Any) -> Counter[str]:
    """:func:`static_counts` of one statement."""
    counter = _StaticCount()
    counter.visit(stmt)
    return counter.counts


class _Executed:
    """Trip-count model: sync statements one block executes (thread and block indices 0)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.approximate = False
        self.analyzer = Analyzer()

    def value(self, expr: Any, env: dict[Any, Any]) -> int | None:
        folded = self.analyzer.simplify(substitute(expr, env) if env else expr)
        return int(folded.value) if isinstance(folded, tirx.IntImm) else None

    def run(self, stmt: Any, env: dict[Any, Any]) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            env = dict(env)
            for child in stmt.seq:
                if isinstance(child, tirx.Bind):
                    env[child.var] = substitute(child.value, env)
                self.run(child, env)
            return
        if isinstance(stmt, tirx.Evaluate):
            key = _sync_key(stmt)
            if key is not None:
                self.counts[key] += 1
            return
        if not _has_sync(stmt):
            return
        if isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING:
            start, extent = self.value(stmt.min, env), self.value(stmt.extent, env)
            if start is None or extent is None:
                self.approximate = True
                start, extent = 0, 1
            for i in range(start, start + extent):
                self.run(stmt.body, {**env, stmt.loop_var: tirx.IntImm("int32", i)})
            return
        if isinstance(stmt, tirx.For):  # a thread-bound loop: thread 0 / block 0
            self.run(stmt.body, {**env, stmt.loop_var: tirx.IntImm("int32", 0)})
            return
        if isinstance(stmt, tirx.AttrStmt) and str(stmt.attr_key) == "thread_extent":
            self.run(stmt.body, {**env, stmt.node.var: tirx.IntImm("int32", 0)})
            return
        if isinstance(stmt, tirx.IfThenElse):
            taken = self.value(stmt.condition, env)
            if taken is None:
                self.approximate = True
            if taken is None or taken:
                self.run(stmt.then_case, env)
            if (taken is None or not taken) and stmt.else_case is not None:
                self.run(stmt.else_case, env)
            return
        body = getattr(stmt, "body", None)
        if body is not None:
            self.run(body, env)


def executed_counts(func: Any) -> tuple[Counter[str], bool]:
    """(sync statements one block executes by kind, whether the model had to guess)."""
    model = _Executed()
    model.run(func.body, {})
    return model.counts, model.approximate


# ------------------------------------------------------------------ the two passes


@dataclass
class PassRun:
    """One pass on one kernel: output, time, counts and the verifier's hazards."""

    output: Any = None
    ms: float = 0.0
    error: str = ""
    static: Counter[str] | None = None
    executed: Counter[str] | None = None
    approximate: bool = False
    hazards: int | str = "-"


def sync_input(func: Any, target: str) -> Any:
    """``func`` after tilewave's pass list up to (not including) its sync stage."""
    stages = stages_for(target)
    prefix = []
    info = get_target(target)
    from tilewave.pipeline import _options  # the options the stage factories expect

    options = _options(None)
    for stage in stages:
        if stage.name == SYNC_STAGE:
            break
        prefix.append(stage.make(info, options))
    symbol = func.attrs.get("global_symbol") if func.attrs else None
    mod = tvm.IRModule({str(symbol) if symbol else "main": func})
    return tvm.transform.Sequential(prefix)(mod)


def _only_func(mod: Any) -> Any:
    funcs = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    return funcs[0]


def run_pass(make: Callable[[], Any], mod: Any, target: str) -> PassRun:
    """Time ``make()`` on ``mod`` (best of up to 3 runs) and count/verify its output."""
    result = PassRun()
    times: list[float] = []
    try:
        while len(times) < 3 and sum(times) < MAX_REPEAT_S:
            transform = make()
            forget_kernels()  # (tilewave's tables of earlier runs on this kernel)
            start = time.perf_counter()
            out = transform(mod)
            times.append(time.perf_counter() - start)
    except Exception as err:  # a pass that fails on a kernel is a row, not a crash
        result.error = f"{type(err).__name__}: {err}".splitlines()[0][:120]
        return result
    result.output = _only_func(out)
    result.ms = min(times) * 1e3
    result.static = static_counts(result.output)
    result.executed, result.approximate = executed_counts(result.output)
    try:
        result.hazards = len(find_shared_hazards(result.output, target))
    except Exception as err:  # the verifier's own limits are shown, not hidden
        result.hazards = f"error: {type(err).__name__}"
    return result


def _cell(counts: Counter[str] | None, base: Counter[str], approx: bool = False) -> str:
    if counts is None:
        return "-"
    inserted = counts - base
    parts = [f"{key} {inserted[key]}" for key in sorted(inserted)] or ["0"]
    return ("~" if approx else "") + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="sm_90a")
    parser.add_argument("--only", help="one kernel name")
    args = parser.parse_args(argv)

    info = get_target(args.target)
    print(f"target {args.target}; counts are inserted statements (output minus input)")
    print(
        "| kernel | tilewave static | ThreadSync static | tilewave executed/block | "
        "ThreadSync executed/block | verifier hazards tilewave / ThreadSync | "
        "pass ms tilewave / ThreadSync |"
    )
    print("|---|---|---|---|---|---|---|")
    verdicts: dict[str, list[str]] = {}
    for name, func in kernels().items():
        if args.only and name != args.only:
            continue
        mod = sync_input(func, args.target)
        base = _only_func(mod)
        base_static = static_counts(base)
        base_executed, _ = executed_counts(base)
        ours = run_pass(lambda: InsertSharedBarriers(info), mod, args.target)
        theirs = run_pass(lambda: s_tir.transform.ThreadSync("shared"), mod, args.target)
        verdicts.setdefault(_verdict(ours, theirs, base_executed), []).append(name)
        print(
            f"| {name} | {ours.error or _cell(ours.static, base_static)} | "
            f"{theirs.error or _cell(theirs.static, base_static)} | "
            f"{_cell(ours.executed, base_executed, ours.approximate)} | "
            f"{_cell(theirs.executed, base_executed, theirs.approximate)} | "
            f"{ours.hazards} / {theirs.hazards} | {ours.ms:.1f} / {theirs.ms:.2f} |"
        )
    for verdict, names in sorted(verdicts.items()):
        print(f"{verdict}: {len(names)} ({', '.join(names)})")
    return 0


def _verdict(ours: PassRun, theirs: PassRun, base: Counter[str]) -> str:
    """How tilewave's executed sync count compares with ThreadSync's on one kernel."""
    if ours.executed is None or theirs.executed is None:
        return "a pass failed"
    mine = sum((ours.executed - base).values())
    other = sum((theirs.executed - base).values())
    relation = "fewer than" if mine < other else "more than" if mine > other else "as many as"
    clean = "ThreadSync output clean" if theirs.hazards == 0 else "ThreadSync output has hazards"
    return f"sync statements per block: tilewave executes {relation} ThreadSync ({clean})"


if __name__ == "__main__":
    sys.exit(main())
