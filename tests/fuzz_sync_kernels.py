"""Random shared-memory kernels for the synchronisation fuzz test and benchmarks/fuzz_sync.py.

:func:`kernels` is a hypothesis strategy of TVMScript sources: one block of 32 threads, three
shared buffers (``S``, ``R`` of 64 words, ``Q`` of 32), indices affine and modular in the
thread and loop variables, serial loops with constant and symbolic (``n``) trip counts,
uniform and thread-divergent ``if``s, atomics, and hand-placed barriers in uniform code.

:func:`check_kernel` is the property, for one kernel and target:

* ``tilewave.lower`` finishes or raises a :class:`~tilewave.errors.TilewaveError` (never
  anything else);
* the barrier stage's output verifies clean (``find_shared_hazards`` is empty), or, where the
  verifier is conservative and the pass precise (an ``if`` on a block-uniform shared word
  inside thread-divergent code), the
  lowered kernel runs race-free under :mod:`tilewave.racecheck` for every ``n`` in
  :data:`RACECHECK_TRIPS` (:attr:`Outcome.verifier_overruled`); the stage is idempotent
  (running ``InsertSharedBarriers`` on its output changes nothing);
* where the input synchronised by TVM's own ``ThreadSync("shared")`` (in TVM's pass order)
  gives the same result under every thread order of the reference interpreter (it is
  race-free), tilewave's lowered kernel gives that result under every order too. The
  interpreter runs one thread at a time between barriers, so a race whose every such order
  agrees goes unseen there; where the results differ, :mod:`tilewave.racecheck` (its own
  execution model, lockstep schedules included) decides: a reference it finds racy is not
  compared with (:attr:`Outcome.reference_racy`), and tilewave's kernel must then be clean
  by the same check.

Both lowered forms are interpreted with :mod:`tir_interpreter`, extended here to TVM's
lowered IR (``launch_thread``, ``decl_buffer`` views, ``atomic_add``, split barriers
written back to back). A split barrier with statements between its halves is not modelled:
such kernels skip the result comparison (:attr:`Outcome.compared` is False).
"""

from __future__ import annotations

import enum
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import tir_interpreter as interp
import tvm
from hypothesis import strategies as st
from tvm import ir, s_tir, tirx
from tvm.script import from_source
from tvm.script import tirx as T

import tilewave
from tilewave.analysis.shared_hazards import find_shared_hazards
from tilewave.errors import TilewaveError
from tilewave.ir.intrinsics import callee_name
from tilewave.pipeline import default_passes
from tilewave.racecheck import racecheck
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers

THREADS = 32
SYMBOLIC_TRIPS = 3  # the value of ``n`` in every run
#: the values of ``n`` racecheck runs a kernel with when the verifier reports hazards (the
#: generated conditions compare ``n`` with 1, and loops run ``n`` times)
RACECHECK_TRIPS = (0, 1, 2, 3)
ORDERS: tuple[str | int, ...] = ("forward", "reverse", 1)
BUFFER_SIZES = {"S": 64, "R": 64, "Q": 32}
TARGETS = ("sm_90a", "gfx1200")

_BARRIER_STAGE = "tilewave.InsertSharedBarriers"
_LAST_SYNC_STAGE = "tilewave.LowerTilewaveOps"
_SPLIT_SIGNAL = "llvm.amdgcn.s.barrier.signal"
_SPLIT_WAIT = "llvm.amdgcn.s.barrier.wait"
_FULL_BARRIER = "llvm.amdgcn.s.barrier"


# --- the generator ---------------------------------------------------------------------------
def _indices(size: int, loop_vars: list[str]) -> list[str]:
    base = [
        "tx",
        f"{THREADS - 1} - tx",
        f"(tx + 1) % {THREADS}",
        f"(tx * 3 + 5) % {size}",
        "tx // 2",
        f"(tx * 2) % {size}",
        "0",
    ]
    if size > THREADS:
        base += [f"tx + {THREADS}", f"({THREADS - 1} - tx) + {THREADS}"]
    for k in loop_vars:
        base += [
            f"({k} * 5 + tx) % {size}",
            f"({k} & 1) * {size // 2} + tx % {size // 2}",
            f"(tx + {k}) % {size}",
        ]
    return base


@st.composite
def _leaf(draw: Any, divergent: bool, loop_vars: list[str]) -> list[str]:
    buffer = draw(st.sampled_from(sorted(BUFFER_SIZES)))
    index = draw(st.sampled_from(_indices(BUFFER_SIZES[buffer], loop_vars)))
    kind = draw(st.sampled_from(["store", "store", "load", "load", "atomic", "work", "barrier"]))
    value = f"A[tx] + {loop_vars[-1]}" if loop_vars else "A[tx] + 1"
    if kind == "store":
        return [f"{buffer}[{index}] = {value}"]
    if kind == "load":
        return [f"B[tx] = B[tx] % 65536 * 2 + {buffer}[{index}]"]
    if kind == "atomic":
        return [
            'T.evaluate(T.call_intrin("int32", "tirx.atomic_add", '
            f"T.address_of({buffer}[{index}]), 1))"
        ]
    if kind == "barrier" and not divergent:
        return ["T.tilewave.lds_barrier()"]
    return ["B[tx] = B[tx] + 3"]


def _block(depth: int, counter: list[int], divergent: bool, loop_vars: list[str]) -> Any:
    @st.composite
    def make(draw: Any) -> list[str]:
        lines: list[str] = []
        for _ in range(draw(st.integers(1, 3))):
            choice = draw(
                st.sampled_from(["leaf", "leaf", "for", "for_n", "if_u", "if_k", "if_d", "if_m"])
            )
            if choice == "leaf" or depth == 0 or (choice == "if_k" and not loop_vars):
                lines += draw(_leaf(divergent, loop_vars))
                continue
            counter[0] += 1
            var = f"k{counter[0]}"
            is_loop = choice.startswith("for")
            inner_vars = [*loop_vars, var] if is_loop else loop_vars
            inner_divergent = divergent or choice in ("if_d", "if_m")
            body = draw(_block(depth - 1, counter, inner_divergent, inner_vars))
            header = {
                "for": f"for {var} in range({draw(st.integers(1, 3))}):",
                "for_n": f"for {var} in range(n):",
                "if_u": "if n > 1:",
                "if_k": f"if {loop_vars[-1] if loop_vars else 'n'} % 2 == 0:",
                "if_d": f"if tx < {draw(st.sampled_from([8, 16, 24]))}:",
                "if_m": f"if tx % {draw(st.sampled_from([2, 3]))} == 0:",
            }[choice]
            lines.append(header)
            lines += ["    " + line for line in body]
            if choice.startswith("if") and draw(st.booleans()):
                else_body = draw(_block(depth - 1, counter, inner_divergent, loop_vars))
                lines.append("else:")
                lines += ["    " + line for line in else_body]
        return lines

    return make()


@st.composite
def kernels(draw: Any) -> str:
    """TVMScript source of one random kernel ``k(A, B, n)``."""
    return kernel_source("\n".join(draw(_block(2, [0], False, []))))


def kernel_source(body: str) -> str:
    """TVMScript source of a kernel ``k(A, B, n)`` of this family (the generator's, and the
    regression kernels the fuzz test found): its thread loop and shared buffers, then
    ``body``, the statements inside the thread loop written without its indentation."""
    text = "\n".join("        " + line for line in body.strip("\n").splitlines())
    allocs = "\n".join(
        f'        {name} = T.alloc_buffer(({size},), "int32", scope="shared")'
        for name, size in sorted(BUFFER_SIZES.items())
    )
    return (
        "@T.prim_func\n"
        f'def k(A: T.Buffer(({THREADS},), "int32"), B: T.Buffer(({THREADS},), "int32"), '
        "n: T.int32):\n"
        '    T.func_attr({"global_symbol": "k"})\n'
        f'    for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):\n'
        f"{allocs}\n{text}\n"
    )


def parse(source: str) -> tirx.PrimFunc:
    """The PrimFunc of a generated source."""
    return from_source(source, extra_vars={"T": T})


# --- the interpreter for lowered IR ----------------------------------------------------------
class _LoweredThread(interp._Thread):
    def run(self, stmt: Any) -> Generator[object, None, None]:
        kind = type(stmt).__name__
        if kind == "DeclBuffer":
            if stmt.data is None:
                raise interp.UnsupportedTIR("decl_buffer without data")
            data = self.eval(stmt.data) if not isinstance(stmt.data, ir.expr.Var) else None
            if isinstance(data, interp.Pointer) and data.offset == 0:
                self.block.arrays[stmt.buffer] = self._array(data.buffer)
            else:
                self.block.arrays[stmt.buffer] = self._array(stmt.data)
            return
        if kind == "Evaluate" and _intrin_name(stmt.value) in (_SPLIT_WAIT, _FULL_BARRIER):
            yield interp._BARRIER
            return
        yield from super().run(stmt)

    def _call(self, node: ir.expr.Call) -> Any:
        op = node.op.name if isinstance(node.op, ir.Op) else str(node.op)
        if op == "tirx.atomic_add":
            pointer = self._pointer(node.args[0])
            array = self._array(pointer.buffer)
            old = array[pointer.offset]
            array[pointer.offset] = old + self.eval(node.args[1])
            return old
        if op == "tirx.call_llvm_intrin":
            return None  # split-barrier signal / LDS waits: ordering is in the wait above
        return super()._call(node)


class _LoweredRoot(_LoweredThread):
    def __init__(self, block: Any, env: dict[Any, Any], order: str | int) -> None:
        super().__init__(block, env)
        self.order = order

    def run(self, stmt: Any) -> Generator[object, None, None]:
        if type(stmt).__name__ == "AttrStmt" and stmt.attr_key == "thread_extent":
            tag = str(stmt.node.thread_tag)
            if not tag.startswith("threadIdx.x"):
                raise interp.UnsupportedTIR(f"launch_thread {tag}")
            threads = []
            for tid in range(int(self.eval(stmt.value))):
                thread = _LoweredThread(self.block, {**self.env, stmt.node.var: tid})
                thread.local = {b: a.copy() for b, a in self.local.items()}
                threads.append(thread.run(stmt.body))
            interp._schedule(threads, self.order)
            return
        yield from super().run(stmt)


def _intrin_name(call: Any) -> str | None:
    if isinstance(call, ir.expr.Call) and isinstance(call.op, ir.Op):
        if call.op.name == "tirx.call_llvm_intrin":
            return callee_name(call)
    return None


def run_lowered(func: tirx.PrimFunc, order: str | int) -> np.ndarray:
    """Run a lowered (pre host/device split) ``k`` on fixed inputs; return ``B``."""
    arrays: dict[Any, np.ndarray] = {}
    env: dict[Any, Any] = {}
    for param in func.params:
        name = str(param.name)
        if name == "A":
            arrays[param] = np.arange(THREADS, dtype=np.int32) * 7 + 1
        elif name == "B":
            arrays[param] = np.zeros(THREADS, dtype=np.int32)
        else:
            env[param] = SYMBOLIC_TRIPS
    root = _LoweredRoot(interp._Block(arrays), env, order)
    for _ in root.run(func.body):
        raise interp.UnsupportedTIR("a barrier outside the thread launch")
    return next(a for p, a in arrays.items() if str(p.name) == "B").copy()


def split_halves_adjacent(func: tirx.PrimFunc) -> bool:
    """True when every split-barrier signal is directly followed by its wait."""
    adjacent = True

    def visit(node: Any) -> None:
        nonlocal adjacent
        if isinstance(node, tirx.SeqStmt):
            items = [
                s
                for s in node.seq
                if _intrin_name(getattr(s, "value", None)) != ("llvm.amdgcn.s.wait.dscnt")
            ]
            for i, item in enumerate(items):
                if _intrin_name(getattr(item, "value", None)) == _SPLIT_SIGNAL:
                    following = items[i + 1] if i + 1 < len(items) else None
                    if _intrin_name(getattr(following, "value", None)) != _SPLIT_WAIT:
                        adjacent = False

    tilewave.ir.walker.post_order_visit(func.body, visit)
    return adjacent


# --- the property ----------------------------------------------------------------------------
class Result(enum.Enum):
    """How one kernel/target check ended."""

    LOWERED = "lowered"
    REFUSED = "refused with a TilewaveError"


@dataclass
class Outcome:
    """What :func:`check_kernel` saw."""

    result: Result
    error: str = ""
    hazards_before: int = 0
    compared: bool = False
    reference_racy: bool = False
    reference_failed: bool = False
    #: the verifier reported hazards in the barrier stage's output that racecheck, run for
    #: every trip count in :data:`RACECHECK_TRIPS`, does not find
    verifier_overruled: bool = False


@tvm.instrument.pass_instrument
class _Capture:
    def __init__(self) -> None:
        self.after: dict[str, tvm.IRModule] = {}

    def run_after_pass(self, mod: tvm.IRModule, info: Any) -> None:
        if info.name in (_BARRIER_STAGE, _LAST_SYNC_STAGE):
            self.after[info.name] = mod


def _reference(func: tirx.PrimFunc, target: str) -> tirx.PrimFunc:
    """The input lowered by tilewave's list up to its sync stages, then TVM's ThreadSync."""
    passes = []
    for stage_pass in default_passes(target):
        if stage_pass.info.name == _BARRIER_STAGE:
            break
        passes.append(stage_pass)
    passes.append(s_tir.transform.ThreadSync("shared"))
    mod = tvm.IRModule({"k": func})
    for stage_pass in passes:
        mod = tvm.transform.Sequential([stage_pass])(mod)
    return mod["k"]


def _results(func: tirx.PrimFunc) -> list[np.ndarray]:
    return [run_lowered(func, order) for order in ORDERS]


#: The ``PassContext`` config of the fuzz property: TVM's defaults, StorageRewrite on (it may
#: put two shared buffers in one allocation, a ``decl_buffer`` view over the other's data;
#: the barrier pass and the verifier compare storage, not buffer names).
FUZZ_CONFIG: dict[str, Any] = {}


def check_kernel(source: str, target: str, config: dict[str, Any] | None = None) -> Outcome:
    """Check the fuzz property for one kernel source and target (see the module doc)."""
    with tvm.transform.PassContext(config=FUZZ_CONFIG if config is None else config):
        return _check_kernel(source, target)


def _check_kernel(source: str, target: str) -> Outcome:
    func = parse(source)
    outcome = Outcome(Result.LOWERED, hazards_before=len(find_shared_hazards(func, target)))
    capture = _Capture()
    try:
        tilewave.lower(func, target, instruments=[capture])
    except TilewaveError as err:
        outcome.result = Result.REFUSED
        outcome.error = type(err).__name__
        return outcome
    synced = capture.after[_BARRIER_STAGE]["k"]
    lowered = capture.after[_LAST_SYNC_STAGE]["k"]
    hazards = find_shared_hazards(synced, target)
    if hazards:
        # the verifier is conservative where the pass is precise (an `if S[0] > 0` on a
        # shared word inside thread-divergent code: its arms concurrent to the verifier,
        # exclusive to the pass, which knows the word's writes are behind a barrier):
        # racecheck, running the lowered kernel for every trip count the generated
        # conditions tell apart, decides
        racy = [trips for trips in RACECHECK_TRIPS if _races(lowered, target, trips)]
        assert not racy, (racy, hazards, synced.script())
        outcome.verifier_overruled = True
    again = InsertSharedBarriers(target)(tvm.IRModule({"k": synced}))["k"]
    tvm.ir.assert_structural_equal(again, synced)
    try:
        reference_func = _reference(func, target)
    except tvm.error.InternalError as err:
        # TVM's ThreadSync refuses kernels needing a barrier under any `if` ("Cannot insert
        # syncs inside condition") and fails a check on a shared load in the condition of an
        # `if` nested in another ("allow_append_"): no reference to compare with.
        assert any(known in str(err) for known in _REFERENCE_LIMITS), err
        outcome.reference_failed = True
        return outcome
    reference = _results(reference_func)
    if any(not np.array_equal(reference[0], r) for r in reference[1:]):
        outcome.reference_racy = True
        return outcome
    if not split_halves_adjacent(lowered):
        return outcome
    results = _results(lowered)
    if any(not np.array_equal(got, reference[0]) for got in results) and _races(
        reference_func, target
    ):
        # every interpreted order agreed on a result the reference reaches only by a race
        # (the interpreter runs a thread at a time between barriers; racecheck also steps
        # the threads in lockstep): nothing to compare with; tilewave's kernel must be
        # race-free by the same check
        assert not _races(lowered, target), lowered.script()
        outcome.reference_racy = True
        return outcome
    for order, got in zip(ORDERS, results, strict=True):
        assert np.array_equal(got, reference[0]), (order, got, reference[0], lowered.script())
    outcome.compared = True
    return outcome


#: what TVM's ThreadSync says on the kernels it cannot synchronise
_REFERENCE_LIMITS = ("inside condition", "allow_append_")


def _races(func: tirx.PrimFunc, target: str, trips: int = SYMBOLIC_TRIPS) -> bool:
    """Whether :func:`tilewave.racecheck.racecheck` (executing the block under its own
    schedules, with its own memory model) finds a race or deadlock in ``func`` run with
    ``n = trips``."""
    return not racecheck(func, target=target, args={"n": trips}).ok
