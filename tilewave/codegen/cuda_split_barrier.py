"""CUDA split barriers: ``barrier_signal``/``barrier_wait`` as an mbarrier in shared memory.

NVIDIA GPUs have no signal/wait instruction pair on the workgroup barrier; the counterpart
(sm_90+) is an *mbarrier*, a 64-bit object in shared memory that counts arrivals and flips
its phase when the expected count is reached. :func:`lower_cuda_split_barriers` rewrites a
kernel's split-barrier ops into one:

* one ``uint64`` mbarrier per barrier id used (a shared buffer ``tw_mbarrier``), initialised
  at the start of the thread scope by thread 0 with the block's thread count as the arrival
  count (``mbarrier.init``), published with ``fence.mbarrier_init`` and ``__syncthreads()``;
* ``barrier_signal(id)`` -> ``mbarrier.arrive`` (release, no state kept: the waiter tracks
  the phase itself);
* ``barrier_wait(id)`` -> a spin loop on ``mbarrier.try_wait.parity`` with this thread's
  phase bit (a per-thread local ``tw_phase[i]``, starting at 0), which flips after the wait.
  The phase is a runtime value, so it stays right across loop iterations.

Every thread arrives once per phase and waits for that phase before arriving again, so no
thread can run a full phase ahead of another: the parity bit is enough to name the phase.

A wait must follow a signal of its id: a loop that waits at the top of each iteration for
the previous iteration's signal needs one signal before the loop for iteration 0 (the
``in_loop`` test of ``tests/codegen/test_cuda_split_barrier.py``). A wait that every thread
reaches before any signal of its id can run (no ``if``/``while`` around it, no signal of the
id earlier in program order) hangs on every GPU; the lowering rejects it with a
``MalformedKernelError`` rather than emit the deadlock.

Example::

    before:                              after:
        S[tx] = A[tx]                        S[tx] = A[tx]
        T.tilewave.barrier_signal(-1)        T.ptx.mbarrier.arrive.shared.b64(&tw_mbarrier[0])
        B[tx] = A[tx] * 3                    B[tx] = A[tx] * 3
        T.tilewave.barrier_wait(-1)          tw_ready[0] = 0
                                             while tw_ready[0] == 0:
                                                 T.ptx.mbarrier.try_wait.parity.shared.b64(
                                                     tw_ready[0], &tw_mbarrier[0], tw_phase[0])
                                             tw_phase[0] = tw_phase[0] ^ 1
        C[tx] = S[63 - tx]                   C[tx] = S[63 - tx]

:mod:`tilewave.codegen.lower_ops` installs this rewrite through
:func:`tilewave.codegen.cuda.install_split_barrier_lowering`, so ``LowerTilewaveOps`` on a
CUDA target lowers split barriers.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any

from tvm import ir, tirx
from tvm.script import tirx as T

from tilewave.codegen.common import immediate_operand
from tilewave.errors import MalformedKernelError, TargetFeatureError, where
from tilewave.ir.walker import TIRMutator, TIRVisitor, ffi_list, post_order_visit, rebuild
from tilewave.targets import get_target

__all__ = ["MBARRIER_BUFFER", "PHASE_BUFFER", "READY_BUFFER", "lower_cuda_split_barriers"]

#: name of the shared ``uint64`` buffer holding one mbarrier per barrier id
MBARRIER_BUFFER = "tw_mbarrier"
#: name of the per-thread local ``uint32`` buffer holding each mbarrier's expected phase bit
PHASE_BUFFER = "tw_phase"
#: name of the per-thread local ``uint32`` flag ``mbarrier.try_wait.parity`` writes
READY_BUFFER = "tw_ready"

_SIGNAL = "tilewave.barrier_signal"
_WAIT = "tilewave.barrier_wait"
_PASS = "lower_cuda_split_barriers"
# PTX ISA, mbarrier: the expected arrival count is a 20-bit field.
_MAX_ARRIVALS = (1 << 20) - 1


@dataclass(frozen=True)
class _ThreadAxis:
    tag: str
    var: ir.expr.Var
    extent: int


def _split_op_name(stmt: Any) -> str | None:
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return None
    op = stmt.value.op
    name = op.name if isinstance(op, ir.Op) else None
    return name if name in (_SIGNAL, _WAIT) else None


def _has_split_ops(body: Any) -> bool:
    """Whether ``body`` holds a split-barrier op (one C++ walk, Python only at
    ``Evaluate`` statements: most kernels have none, and the scan below visits every
    statement in Python)."""
    found = False

    def check(stmt: Any) -> None:
        nonlocal found
        found = found or _split_op_name(stmt) is not None

    post_order_visit(body, check, (tirx.Evaluate,))
    return found


def _thread_axis(node: Any, func_name: str) -> _ThreadAxis | None:
    """The ``threadIdx`` axis a ``T.thread_binding`` loop or ``launch_thread`` binds."""
    if isinstance(node, tirx.For):
        if node.kind != tirx.ForKind.THREAD_BINDING or node.thread_binding is None:
            return None
        tag, var, extent = str(node.thread_binding.thread_tag), node.loop_var, node.extent
    elif isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
        tag, var, extent = str(node.node.thread_tag), node.node.var, node.value
    else:
        return None
    if not tag.startswith("threadIdx."):
        return None
    if not isinstance(extent, tirx.IntImm):
        raise MalformedKernelError(
            f"{_PASS}: {tag} has the non-constant extent {extent} {where(func_name)}; an "
            "mbarrier's arrival count is the block's thread count, fixed at init. Bind the "
            "thread loop with a constant extent."
        )
    return _ThreadAxis(tag, var, int(extent.value))


class _SplitBarrierScan(TIRVisitor):
    """Barrier ids signalled and waited on, and the thread scopes enclosing every op."""

    def __init__(self, func_name: str) -> None:
        self.func_name = func_name
        self.signalled: set[int] = set()
        self.waited: set[int] = set()
        self.tags_seen: set[str] = set()
        self.enclosing: list[tuple[Any, _ThreadAxis]] | None = None
        self._stack: list[tuple[Any, _ThreadAxis]] = []
        #: the first wait no signal of its id can precede: ``(id, statement)``
        self.unpreceded_wait: tuple[int, tirx.Evaluate] | None = None
        #: ids signalled somewhere earlier in program order (any branch, any loop)
        self._signalled_before: set[int] = set()
        #: ``if``/``while`` statements around the one being visited
        self._conditional = 0

    def _scope(self, node: Any) -> None:
        axis = _thread_axis(node, self.func_name)
        if axis is None:
            self.generic_visit(node)
            return
        self.tags_seen.add(axis.tag)
        self._stack.append((node, axis))
        self.generic_visit(node)
        self._stack.pop()

    visit_For = _scope
    visit_AttrStmt = _scope

    def _guarded(self, node: Any) -> None:
        self._conditional += 1
        self.generic_visit(node)
        self._conditional -= 1

    visit_IfThenElse = _guarded
    visit_While = _guarded

    def visit_Evaluate(self, node: tirx.Evaluate) -> None:
        name = _split_op_name(node)
        if name is None:
            self.generic_visit(node)
            return
        barrier_id = immediate_operand(
            node.value, self.func_name, "the barrier id", allow_negative=True
        )
        (self.signalled if name == _SIGNAL else self.waited).add(barrier_id)
        if name == _SIGNAL:
            self._signalled_before.add(barrier_id)
        elif (
            barrier_id not in self._signalled_before
            and not self._conditional
            and self.unpreceded_wait is None
        ):
            # every thread reaches it (in the first iteration of its loops) before any
            # thread can signal the id: the first phase never completes
            self.unpreceded_wait = (barrier_id, node)
        if not self._stack:
            raise MalformedKernelError(
                f"{_PASS}: {name} {where(self.func_name, node)} is outside every threadIdx "
                "scope; a split barrier synchronises the threads of a block. Move it inside "
                'the `T.thread_binding(..., thread="threadIdx.x")` loop.'
            )
        if self.enclosing is None:
            self.enclosing = list(self._stack)
            return
        common = 0
        for (a, _), (b, _) in zip(self.enclosing, self._stack, strict=False):
            if not a.same_as(b):
                break
            common += 1
        self.enclosing = self.enclosing[:common]


@dataclass(frozen=True)
class _Mbarriers:
    """The buffers of the rewrite and the index of each barrier id in them."""

    slots: dict[int, int]
    mbarrier: ir.expr.Var
    phase: ir.expr.Var
    ready: ir.expr.Var

    @staticmethod
    def for_ids(ids: list[int]) -> _Mbarriers:
        count = len(ids)
        return _Mbarriers(
            slots={barrier_id: slot for slot, barrier_id in enumerate(ids)},
            mbarrier=tirx.decl_buffer((count,), "uint64", MBARRIER_BUFFER, scope="shared"),
            phase=tirx.decl_buffer((count,), "uint32", PHASE_BUFFER, scope="local"),
            ready=tirx.decl_buffer((1,), "uint32", READY_BUFFER, scope="local"),
        )

    def address(self, barrier_id: int) -> ir.expr.Expr:
        return T.address_of(self.mbarrier[self.slots[barrier_id]])

    def prologue(self, axes: list[_ThreadAxis], arrivals: int) -> list[tirx.Stmt]:
        """Allocate, let thread 0 initialise every mbarrier, publish, reset the phases."""
        first_thread = functools.reduce(
            tirx.And, [tirx.EQ(a.var, tirx.IntImm("int32", 0)) for a in axes]
        )
        init = [
            tirx.Evaluate(T.ptx.mbarrier.init.shared.b64(self.address(i), T.uint32(arrivals)))
            for i in self.slots
        ]
        # fence.mbarrier_init is the PTX-prescribed release of an init; the block barrier
        # then makes every thread wait for thread 0 before its first arrive.
        init.append(tirx.Evaluate(T.ptx.fence.mbarrier_init.release.cluster()))
        return [
            tirx.AllocBuffer(self.mbarrier, {}),
            tirx.AllocBuffer(self.phase, {}),
            tirx.AllocBuffer(self.ready, {}),
            tirx.IfThenElse(first_thread, tirx.SeqStmt(init), None),
            tirx.Evaluate(T.tvm_storage_sync("shared")),
            *[self._store(self.phase, slot, T.uint32(0)) for slot in self.slots.values()],
        ]

    def signal(self, barrier_id: int) -> tirx.Stmt:
        return tirx.Evaluate(T.ptx.mbarrier.arrive.shared.b64(self.address(barrier_id)))

    def wait(self, barrier_id: int) -> tirx.Stmt:
        slot = self.slots[barrier_id]
        phase = self.phase[slot]
        ready = self.ready[0]
        poll = T.ptx.mbarrier.try_wait.parity.shared.b64(ready, self.address(barrier_id), phase)
        return tirx.SeqStmt(
            [
                self._store(self.ready, 0, T.uint32(0)),
                tirx.While(tirx.EQ(ready, T.uint32(0)), tirx.Evaluate(poll)),
                self._store(self.phase, slot, tirx.BitwiseXor(phase, T.uint32(1))),
            ]
        )

    @staticmethod
    def _store(buffer: ir.expr.Var, index: int, value: ir.expr.Expr) -> tirx.Stmt:
        return tirx.BufferStore(buffer, value, [tirx.IntImm("int32", index)])


class _SplitBarrierRewriter(TIRMutator):
    def __init__(self, scope: Any, prologue: list[tirx.Stmt], mbarriers: _Mbarriers) -> None:
        self._scope = scope
        self._prologue = prologue
        self._mbarriers = mbarriers

    def visit_Evaluate(self, node: tirx.Evaluate) -> Any:
        name = _split_op_name(node)
        if name is None:
            return self.generic_visit(node)
        barrier_id = int(node.value.args[0].value)
        if name == _SIGNAL:
            return self._mbarriers.signal(barrier_id)
        return self._mbarriers.wait(barrier_id)

    def _rewrite_scope(self, node: Any) -> Any:
        new = self.generic_visit(node)
        if not node.same_as(self._scope):
            return new
        body = ffi_list(new.body.seq) if isinstance(new.body, tirx.SeqStmt) else [new.body]
        return rebuild(new, {"body": tirx.SeqStmt(self._prologue + body)})

    visit_For = _rewrite_scope
    visit_AttrStmt = _rewrite_scope


def _func_name(func: tirx.PrimFunc) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else "<prim_func>"


def lower_cuda_split_barriers(func: tirx.PrimFunc, target: Any = "sm_90a") -> tirx.PrimFunc:
    """Rewrite ``func``'s ``barrier_signal``/``barrier_wait`` ops into mbarrier code.

    Args:
        func: a kernel whose split-barrier ops sit inside its ``threadIdx`` scope(s); returned
            unchanged (the same object) when it has none.
        target: a CUDA target with split barriers (anything :func:`tilewave.get_target`
            accepts; default ``"sm_90a"``).

    Raises:
        TargetFeatureError: the target has no mbarrier wait (before sm_90) or is not CUDA.
        MalformedKernelError: a barrier id that is not an integer constant; an id signalled
            but never waited on (or the reverse); a wait every thread reaches before any
            signal of its id (it hangs: the first iteration of a loop that waits at the top
            for the previous iteration's signal, with no signal before the loop); an op
            outside every ``threadIdx`` scope or in a scope that does not bind every thread
            axis; a non-constant thread extent.
    """
    info = get_target(target)
    if not _has_split_ops(func.body):
        return func
    name = _func_name(func)
    scan = _SplitBarrierScan(name)
    scan.visit(func.body)
    if scan.enclosing is None:
        return func
    if not info.is_cuda or not info.has_split_barrier:
        raise TargetFeatureError(
            f"{_PASS}: {where(name)} uses split barriers, which need mbarrier.try_wait "
            f"(sm_90 and later, CUDA); {info.name} does not have it. Use "
            "barrier_style='basic' for this target, or compile for sm_90a."
        )
    unbalanced = scan.signalled ^ scan.waited
    if unbalanced:
        raise MalformedKernelError(
            f"{_PASS}: barrier id(s) {sorted(unbalanced)} {where(name)} are signalled but "
            "never waited on, or waited on but never signalled; the mbarrier phases would "
            "drift and the waits hang. Pair every barrier_signal(id) with a "
            "barrier_wait(id)."
        )
    if scan.unpreceded_wait is not None:
        barrier_id, stmt = scan.unpreceded_wait
        raise MalformedKernelError(
            f"{_PASS}: barrier_wait({barrier_id}) {where(name, stmt)} waits before any "
            f"barrier_signal({barrier_id}) can run: every thread reaches it (no `if` or "
            "`while` around it; in a loop, in the first iteration) and no signal of that id "
            "comes earlier in the kernel, so the mbarrier phase it waits for never completes "
            f"and the block hangs. Signal before waiting: a wait at the top of a loop for the "
            f"previous iteration's signal needs a barrier_signal({barrier_id}) before the "
            "loop."
        )
    axes = [axis for _, axis in scan.enclosing]
    missing = scan.tags_seen - {a.tag for a in axes}
    if missing:
        raise MalformedKernelError(
            f"{_PASS}: the split barriers {where(name)} do not all sit inside the "
            f"{', '.join(sorted(missing))} scope; the mbarrier is initialised where every "
            "thread axis is bound. Put the barriers inside every threadIdx loop."
        )
    arrivals = functools.reduce(operator.mul, (a.extent for a in axes), 1)
    if arrivals > _MAX_ARRIVALS:
        raise MalformedKernelError(
            f"{_PASS}: {where(name)} has {arrivals} threads per block, more than an mbarrier "
            f"counts ({_MAX_ARRIVALS})."
        )
    mbarriers = _Mbarriers.for_ids(sorted(scan.signalled))
    scope = scan.enclosing[-1][0]
    prologue = mbarriers.prologue(axes, arrivals)
    body = _SplitBarrierRewriter(scope, prologue, mbarriers).visit(func.body)
    return func.with_body(body)
