"""Issue 15's block-uniform branch kernels: a barrier is needed inside a branch whose
condition every thread of a block evaluates alike.

Each case has a *hand* variant (barriers placed by hand, the reference) and a *stripped*
variant (no barrier: tilewave's ``InsertSharedBarriers`` must place them, inside the
branch). ``benchmarks/racecheck_h100.py`` imports :func:`uniform_cases` and runs both
variants, lowered for sm_90a, under compute-sanitizer on the H100; the CI tests in
``tests/transforms/test_insert_shared_barriers_uniform.py`` run them through
``tilewave.racecheck``.

Every kernel launches ``BLOCKS`` blocks of 64 threads (the thread-sync tests' form has
threadIdx.y of extent 1 besides; the two warp-uniform cases 128 threads, and their ``A``/``B``
hold ``BLOCKS * 128``); ``A``/``B`` are float32 vectors of ``BLOCKS * 64``,
``C`` an int32 vector of ``BLOCKS`` (a per-block count), ``n`` an int32 scalar.
:attr:`UniformCase.scalars` gives the scalar arguments a run should use (chosen so some
blocks take the branch and some do not, and the premises hold).

Run ``python benchmarks/issue15_uniform_cases.py`` to print, per case, the barriers
tilewave places in the stripped kernel and the racecheck verdict of both variants (CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tvm import ir, tirx
from tvm.script import tirx as T

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.ir.walker import TIRMutator

BLOCKS = 4
THREADS = 64
SIZE = BLOCKS * THREADS
#: the warp-uniform cases run 4 warps per block
WARPS_THREADS = 128
WIDE = BLOCKS * WARPS_THREADS


@dataclass(frozen=True)
class UniformCase:
    """One uniform-branch kernel in its hand-synchronised and stripped forms.

    Attributes:
        name: short identifier (used in tables and file names).
        form: the uniform-condition form of issue 15 the kernel exercises.
        hand: returns the kernel with barriers placed by hand.
        stripped: returns the kernel with no barrier.
        scalars: scalar arguments for a run (``n``).
        blocks: how many blocks a run launches.
    """

    name: str
    form: str
    hand: Callable[[], tirx.PrimFunc]
    stripped: Callable[[], tirx.PrimFunc]
    scalars: dict[str, int] = field(default_factory=dict)
    blocks: int = BLOCKS


# --- 1. a condition on blockIdx ------------------------------------------------------------
@T.prim_func
def blockidx_if_stripped(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if bx < 2:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def blockidx_if_hand(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if bx < 2:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


# --- 2. a condition on a kernel scalar -----------------------------------------------------
@T.prim_func
def scalar_if_stripped(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if n > 100:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def scalar_if_hand(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if n > 100:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


# --- 3. a value loaded at a blockIdx-only index of a buffer the kernel never writes --------
@T.prim_func
def loaded_if_stripped(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if C[bx] > 0:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def loaded_if_hand(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if C[bx] > 0:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


# --- 4. a tail guard `bx * 64 + tx < n` under `assert n % 64 == 0` (64 threads) ------------
@T.prim_func
def assert_tail_stripped(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    assert n % 64 == 0, "n must be a multiple of 64"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def assert_tail_hand(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    assert n % 64 == 0, "n must be a multiple of 64"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


# --- 5. the same guard under `T.assume(n % 64 == 0)` ----------------------------------------
@T.prim_func
def assume_tail_stripped(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    T.assume(n % 64 == 0)
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def assume_tail_hand(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    T.assume(n % 64 == 0)
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if bx * 64 + tx < n:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


# --- 6. nested guards: a premise from the enclosing `if`, a row index from floordiv ---------
@T.prim_func
def nested_stripped(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if n % 64 == 0:
                if bx * 64 + tx < n:
                    S[tx] = A[bx * 64 + tx]
                    if (bx * 64 + tx) // 64 < 2:
                        B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def nested_hand(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            if n % 64 == 0:
                if bx * 64 + tx < n:
                    S[tx] = A[bx * 64 + tx]
                    if (bx * 64 + tx) // 64 < 2:
                        T.tilewave.lds_barrier()
                        B[bx * 64 + tx] = S[63 - tx]


# --- 7. TileLang's form: a condition on threadIdx.y of extent 1 -----------------------------
@T.prim_func
def unit_thread_axis_stripped(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for ty in T.thread_binding(1, thread="threadIdx.y"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                S = T.alloc_buffer((THREADS,), "float32", scope="shared")
                if ty < 8:
                    S[tx] = A[bx * 64 + tx]
                    B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def unit_thread_axis_hand(A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for ty in T.thread_binding(1, thread="threadIdx.y"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                S = T.alloc_buffer((THREADS,), "float32", scope="shared")
                if ty < 8:
                    S[tx] = A[bx * 64 + tx]
                    T.tilewave.lds_barrier()
                    B[bx * 64 + tx] = S[63 - tx]


# --- 8. a local scalar holding a value loaded at the block's index -------------------------
@T.prim_func
def uniform_local_stripped(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            count: T.int32 = C[bx]
            if count > 0:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = S[63 - tx]


@T.prim_func
def uniform_local_hand(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            count: T.int32 = C[bx]
            if count > 0:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = S[63 - tx]


# --- 9. a loop whose trip count is loaded at the block's index -----------------------------
@T.prim_func
def loaded_loop_stripped(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            for k in range(C[bx] % 4):
                S[tx] = A[bx * 64 + tx] + T.Cast("float32", k)
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]


@T.prim_func
def loaded_loop_hand(
    A: T.Buffer((SIZE,), "float32"),
    B: T.Buffer((SIZE,), "float32"),
    C: T.Buffer((BLOCKS,), "int32"),
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            for k in range(C[bx] % 4):
                S[tx] = A[bx * 64 + tx] + T.Cast("float32", k)
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]
                T.tilewave.lds_barrier()


# --- 10. a `while` polling a shared flag that thread 0 updates ------------------------------
@T.prim_func
def shared_flag_while_stripped(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            flag = T.alloc_buffer((1,), "int32", scope="shared")
            if tx == 0:
                flag[0] = bx
            while flag[0] < n:
                S[tx] = A[bx * 64 + tx]
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]
                if tx == 0:
                    flag[0] = flag[0] + 1


@T.prim_func
def shared_flag_while_hand(
    A: T.Buffer((SIZE,), "float32"), B: T.Buffer((SIZE,), "float32"), n: T.int32
):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((THREADS,), "float32", scope="shared")
            flag = T.alloc_buffer((1,), "int32", scope="shared")
            if tx == 0:
                flag[0] = bx
            T.tilewave.lds_barrier()
            while flag[0] < n:
                S[tx] = A[bx * 64 + tx]
                T.tilewave.lds_barrier()
                B[bx * 64 + tx] = B[bx * 64 + tx] + S[63 - tx]
                T.tilewave.lds_barrier()
                if tx == 0:
                    flag[0] = flag[0] + 1
                T.tilewave.lds_barrier()


class _AssumeToAssert(TIRMutator):
    def visit_Evaluate(self, stmt: Any) -> Any:
        call = stmt.value
        if isinstance(call, ir.expr.Call) and isinstance(call.op, ir.Op):
            if call.op.name == "tirx.assume":
                message = ir.expr.StringImm("assumed by the kernel")
                # tvm 0.27's Python signature names (kind, condition); the constructor takes
                # (condition, kind)
                kind = ir.expr.StringImm("RuntimeError")
                return tirx.AssertStmt(call.args[0], kind, [message])
        return stmt


def without_assumes(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each ``T.assume(c)`` stated as ``assert c`` instead.

    ``tilewave.racecheck`` executes asserts but not ``T.assume`` (a compile-time fact), and
    the barrier pass takes both as premises, so the kernel keeps its meaning for inputs that
    satisfy the premise (the runs use such inputs, :attr:`UniformCase.scalars`) and stays
    lowerable with tilewave's barrier stage."""
    return func.with_body(_AssumeToAssert().visit(func.body))


# --- 11. a warp-uniform branch (`tx // 32 == 1`): a named barrier over its warp -------------
@T.prim_func
def warp_branch_stripped(A: T.Buffer((WIDE,), "float32"), B: T.Buffer((WIDE,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(WARPS_THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((WARPS_THREADS,), "float32", scope="shared")
            if tx // 32 == 1:
                S[tx] = A[bx * 128 + tx]
                B[bx * 128 + tx] = S[95 - tx]


@T.prim_func
def warp_branch_hand(A: T.Buffer((WIDE,), "float32"), B: T.Buffer((WIDE,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(WARPS_THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((WARPS_THREADS,), "float32", scope="shared")
            if tx // 32 == 1:
                S[tx] = A[bx * 128 + tx]
                T.ptx.barrier(T.uint32(1), T.uint32(32), "", "sync", "", "")
                B[bx * 128 + tx] = S[95 - tx]


# --- 12. the warp-uniform branch nested in a block-uniform tail guard -----------------------
@T.prim_func
def warp_in_tail_stripped(
    A: T.Buffer((WIDE,), "float32"), B: T.Buffer((WIDE,), "float32"), n: T.int32
):
    assert n % 128 == 0, "n must be a multiple of 128"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(WARPS_THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((WARPS_THREADS,), "float32", scope="shared")
            if bx * 128 + tx < n:
                if tx // 32 == 1:
                    S[tx] = A[bx * 128 + tx]
                    B[bx * 128 + tx] = S[95 - tx]


@T.prim_func
def warp_in_tail_hand(A: T.Buffer((WIDE,), "float32"), B: T.Buffer((WIDE,), "float32"), n: T.int32):
    assert n % 128 == 0, "n must be a multiple of 128"
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(WARPS_THREADS, thread="threadIdx.x"):
            S = T.alloc_buffer((WARPS_THREADS,), "float32", scope="shared")
            if bx * 128 + tx < n:
                if tx // 32 == 1:
                    S[tx] = A[bx * 128 + tx]
                    T.ptx.barrier(T.uint32(1), T.uint32(32), "", "sync", "", "")
                    B[bx * 128 + tx] = S[95 - tx]


def _kernel(func: tirx.PrimFunc, name: str) -> Callable[[], tirx.PrimFunc]:
    return lambda: func.with_attr("global_symbol", name)


def _case(name: str, form: str, hand: tirx.PrimFunc, stripped: tirx.PrimFunc,
          **scalars: int) -> UniformCase:
    return UniformCase(
        name, form, _kernel(hand, f"{name}_hand"), _kernel(stripped, f"{name}_stripped"),
        scalars,
    )


def uniform_cases() -> list[UniformCase]:
    """Every uniform-branch case of issue 15, hand and stripped."""
    return [
        _case("blockidx_if", "if on blockIdx", blockidx_if_hand, blockidx_if_stripped),
        _case("scalar_if", "if on a kernel scalar", scalar_if_hand, scalar_if_stripped, n=128),
        _case("loaded_if", "if on a value loaded at a blockIdx-only index", loaded_if_hand,
              loaded_if_stripped),
        _case("assert_tail", "bx*64+tx < n under assert n % 64 == 0", assert_tail_hand,
              assert_tail_stripped, n=128),
        _case("assume_tail", "bx*64+tx < n under T.assume(n % 64 == 0)", assume_tail_hand,
              assume_tail_stripped, n=192),
        _case("nested", "nested under uniform guards (enclosing-if premise, floordiv)",
              nested_hand, nested_stripped, n=192),
        _case("unit_thread_axis", "if on threadIdx.y of extent 1 (TileLang's thread-sync test)",
              unit_thread_axis_hand, unit_thread_axis_stripped),
        _case("uniform_local", "if on a local scalar loaded at the block's index",
              uniform_local_hand, uniform_local_stripped),
        _case("loaded_loop", "loop trip count loaded at the block's index", loaded_loop_hand,
              loaded_loop_stripped),
        _case("shared_flag_while", "while polling a shared flag thread 0 updates",
              shared_flag_while_hand, shared_flag_while_stripped, n=3),
        _case("warp_branch", "warp-uniform if (tx // 32 == 1): named barrier over one warp",
              warp_branch_hand, warp_branch_stripped),
        _case("warp_in_tail", "warp-uniform if inside bx*128+tx < n under n % 128 == 0",
              warp_in_tail_hand, warp_in_tail_stripped, n=256),
    ]


def main() -> None:
    """Print what tilewave does with each stripped kernel and racecheck's verdicts (CPU)."""
    from tilewave.racecheck import racecheck
    from tilewave.transforms.insert_shared_barriers import insert_shared_barriers

    print(f"{'case':<18} {'barriers':>8}  {'racecheck hand':<15} {'racecheck tilewave':<18}")
    for case in uniform_cases():
        after = insert_shared_barriers(case.stripped(), "sm_90a")
        text = after.script()
        count = text.count("lds_barrier") + text.count("T.ptx.barrier(")
        verdicts = [
            "ok"
            if racecheck(without_assumes(f), "sm_90a", args=dict(case.scalars),
                         blocks=case.blocks).ok
            else "RACE/DEADLOCK"
            for f in (case.hand(), after)
        ]
        print(f"{case.name:<18} {count:>8}  {verdicts[0]:<15} {verdicts[1]:<18}")


if __name__ == "__main__":
    main()
