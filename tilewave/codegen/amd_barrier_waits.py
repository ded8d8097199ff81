"""Counter waits before AMD barriers: a barrier orders only the LDS traffic that has landed.

On gfx90a and later (back-off barriers) and on gfx12, ``s_barrier`` / ``s_barrier_signal``
do not wait for the wave's outstanding memory operations. A ``ds_write`` still in flight
when the wave signals can land after another wave has passed the barrier and read the old
value; a ``ds_read`` still in flight can see a value another wave writes after the
barrier. The wave must first wait for its LDS counter (``s_waitcnt lgkmcnt(0)`` on gfx9,
``s_wait_dscnt 0`` on gfx12) and, for an LDS DMA (``buffer_load ... lds``: global -> LDS
without VGPRs, counted on the vector-memory counter) that no ``wait_async_ops`` has waited
for, for that counter too (``vmcnt(0)`` / ``s_wait_loadcnt 0``).

:func:`insert_amd_barrier_waits` walks a kernel in program order with a small state per
program point (may an LDS operation be outstanding? an LDS DMA not yet waited for?) and puts
the target's wait intrinsic right before every barrier that releases LDS (tilewave's
``lds_barrier`` and ``barrier_signal``, ``tvm_storage_sync("shared")``, hand-written
``llvm.amdgcn.s.barrier`` / ``s.barrier.signal``) where something may be outstanding, and
nowhere else. A wait is left out where the counter is known to be zero at the barrier:

* nothing touched LDS since the kernel started, or since the previous barrier's wait (or an
  explicit wait the kernel already has), on any path;
* every LDS access since then is a read whose value a *write-only global store* needs,
  directly or through local buffers (``acc[0] = acc[0] + S[j]; ...; G[i] = acc[0]``):
  ``G`` a global buffer the kernel never reads nor stores to under an ``if``, ``i``
  depending on every enclosing loop's variable. The store needs the loaded value in a
  register, so LLVM (and tilewave's assembly backend) wait for each such read before it,
  and nothing moves the store past the barrier: LLVM sinks a store to a ``noalias``
  buffer across ``s_barrier`` by promoting a loop-invariant location to a register
  (LICM), by forwarding it to a later load of the location (GVN), or by merging the
  stores of an ``if``'s two arms into the join (store sinking); a never-read,
  loop-indexed location stored outside ``if`` offers none of these (DSE may delete such a
  store, and then its ``ds_read`` is dead too). A read-modify-write ``B[tx] = B[tx] +
  S[j]`` in a loop is promoted exactly so, leaving the ``ds_read`` in flight at the
  barrier: it keeps its wait.

Loops are iterated to a fixed point (the state at the loop head joins the entry state and
the state at the end of the body), ``if`` joins its branches.

Explicit intrinsics, not fences: TVM's LLVM codegen has no TIR form of an LLVM ``fence``;
and on gfx12 a workgroup release fence also drains ``storecnt`` and adds ``global_inv`` the
LDS barrier does not need (see docs/amd_barriers.md for the assembly of both).

Example::

    func = insert_amd_barrier_waits(func, "gfx942")
    # S[tx] = A[tx]; T.tilewave.lds_barrier()  ->
    # S[tx] = A[tx]; T.call_llvm_intrin("void", "llvm.amdgcn.s.waitcnt", 49279);
    # T.tilewave.lds_barrier()
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tvm import ir, tirx

from tilewave.analysis.shared_access import (
    AccessKind,
    SyncKind,
    is_leaf_statement,
    statement_accesses,
    sync_action,
)
from tilewave.codegen.rocm import lds_counter_wait, vmem_counter_wait, wait_drains
from tilewave.errors import TargetFeatureError, TilewaveError, where
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import TIRVisitor, ffi_list, post_order_visit, rebuild
from tilewave.targets import TargetInfo, get_target

__all__ = [
    "DMA_BOUNDED",
    "DMA_NONE",
    "DMA_UNWAITED",
    "CounterState",
    "insert_amd_barrier_waits",
    "releases_lds",
]

PASS_NAME = "LowerTilewaveOps"

#: barriers whose arrival publishes this wave's LDS writes to the other waves
_RELEASING = frozenset({
    "tilewave.lds_barrier",
    "tilewave.barrier_signal",
    "llvm.amdgcn.s.barrier",
    "llvm.amdgcn.s.barrier.signal",
    "llvm.amdgcn.s.barrier.signal.isfirst",
    "llvm.amdgcn.s.barrier.signal.var",
})
#: barrier halves that only wait: the signal before them carried the release
_WAIT_ONLY = frozenset({"tilewave.barrier_wait", "llvm.amdgcn.s.barrier.wait"})


#: LDS DMA states, ordered so that the join of two paths is the larger
DMA_NONE, DMA_BOUNDED, DMA_UNWAITED = 0, 1, 2


@dataclass(frozen=True)
class CounterState:
    """What may be outstanding in the wave at one program point.

    Attributes:
        lds: an LDS operation (``ds_*``) may not have completed, and nothing the barrier
            cannot pass is known to consume it.
        fed: one-element local buffers holding values of LDS reads that may not have
            completed (their reads complete before a write-only global store that uses them
            issues).
        dma: :data:`DMA_NONE` (no LDS DMA in flight), :data:`DMA_BOUNDED` (copies in flight
            that a ``wait_async_ops(n)`` with n > 0 left there on purpose: software
            pipelining) or :data:`DMA_UNWAITED` (a copy no wait has bounded since it issued).
    """

    lds: bool = False
    dma: int = DMA_NONE
    fed: frozenset[Any] = frozenset()

    def join(self, other: CounterState) -> CounterState:
        """The state after either of two paths."""
        return CounterState(self.lds or other.lds, max(self.dma, other.dma),
                            self.fed | other.fed)

    @property
    def lds_in_flight(self) -> bool:
        """Whether the barrier must wait for the LDS counter."""
        return self.lds or bool(self.fed)


def _call_of(stmt: Any) -> ir.expr.Call | None:
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, ir.expr.Call):
        return stmt.value
    return None


def releases_lds(stmt: Any, func_name: str) -> bool:
    """True for a barrier statement that other waves pass only after this wave arrives.

    Raises:
        TargetFeatureError: a ``tvm_storage_sync`` scope other than shared/warp, or an
            ``llvm.amdgcn.s.barrier.*`` intrinsic whose ordering tilewave cannot tell.
    """
    call = _call_of(stmt)
    if call is None:
        return False
    name = callee_name(call)
    if name == "tirx.tvm_storage_sync":
        scope = str(call.args[0].value) if isinstance(call.args[0], ir.expr.StringImm) else ""
        if scope == "warp":
            return False  # a wave runs in lockstep: no barrier instruction at all
        if scope.startswith("shared"):
            return True
        raise TargetFeatureError(
            f"{PASS_NAME}: tvm_storage_sync('{scope}') {where(func_name, stmt)}: AMD targets "
            "have no barrier for that scope, so tilewave cannot tell what it orders. Use "
            "tvm_storage_sync('shared') (or T.tilewave.lds_barrier()) for workgroup LDS."
        )
    if name in _RELEASING:
        return True
    if name.startswith("llvm.amdgcn.s.barrier") and name not in _WAIT_ONLY:
        raise TargetFeatureError(
            f"{PASS_NAME}: {name} {where(func_name, stmt)} is a barrier tilewave does not "
            "model (named-barrier setup or membership), so it cannot tell which LDS accesses "
            "it orders. Use T.tilewave.lds_barrier() or the split pair "
            "T.tilewave.barrier_signal(-1) / barrier_wait(-1)."
        )
    return False


class _GlobalUses(TIRVisitor):
    """Which buffers are read anywhere, and which are stored to under an ``if``."""

    def __init__(self) -> None:
        self.reads: Counter = Counter()
        self.stored_under_if: set[Any] = set()
        self._if_depth = 0

    def visit_IfThenElse(self, node: Any) -> None:
        self.visit(node.condition)
        self._if_depth += 1
        self.visit(node.then_case)
        self.visit(node.else_case)
        self._if_depth -= 1

    def visit_BufferStore(self, node: Any) -> None:
        if self._if_depth:
            self.stored_under_if.add(node.buffer)
        self.visit(node.value)
        self.visit(node.indices)

    def visit_TensorLoad(self, node: Any) -> None:
        self.reads[node.source] += 1
        self.visit(node.indices)

    def visit_AllocBuffer(self, node: Any) -> None:
        pass  # a declaration names the buffer; it neither reads nor writes it

    def visit_DeclBuffer(self, node: Any) -> None:
        self.visit(getattr(node, "body", None))

    def visit_Var(self, node: Any) -> None:
        self.reads[node] += 1  # a buffer used as a value (address_of, buffer_data, calls...)


_WHILE = object()  # an enclosing loop without an induction variable


def _is_scalar_local(buffer: Any) -> bool:
    # one element: a read of it is a read of everything stored in it (a register)
    shape = list(buffer.shape)
    return str(buffer.scope()) == "local" and all(
        isinstance(d, tirx.IntImm) and int(d.value) == 1 for d in shape
    )


class _WaitPlacer:
    def __init__(self, target: TargetInfo, func_name: str, body: Any) -> None:
        self.target = target
        self.func_name = func_name
        uses = _GlobalUses()
        uses.visit(body)
        self.uses = uses
        self.loops: list[Any] = []  # enclosing loop variables, innermost last
        self.deps: dict[Any, frozenset[Any]] = {}  # let-bound var -> variables it reads

    def vars_of(self, expr: Any) -> frozenset[Any]:
        """The variables ``expr`` depends on, through let bindings."""
        found: set[Any] = set()

        def add(node: Any) -> None:
            if isinstance(node, tirx.Var):
                found.add(node)
                found.update(self.deps.get(node, ()))

        post_order_visit(expr, add)
        return frozenset(found)

    def consumed_by_write_only_store(self, stmt: Any) -> bool:
        """``G[i] = f(S[j])`` with G a global buffer the kernel never reads nor stores to
        under an ``if``, indexed by every enclosing loop: its LDS reads are waited for
        before the store, and nothing moves the store past the barrier."""
        if not isinstance(stmt, tirx.BufferStore) or str(stmt.buffer.scope()) != "global":
            return False
        buffer = stmt.buffer
        if self.uses.reads[buffer] > 0 or buffer in self.uses.stored_under_if:
            return False
        index_vars = self.vars_of(list(stmt.indices))
        return all(loop is not _WHILE and loop in index_vars for loop in self.loops)

    def leaf(self, stmt: Any, state: CounterState) -> tuple[list[Any], CounterState]:
        """The statements replacing ``stmt`` (waits first) and the state after it."""
        drains = wait_drains(stmt, self.target)
        if drains is not None:
            lds_drained, vm_drained = drains
            if lds_drained:
                state = CounterState(dma=state.dma)
            return [stmt], CounterState(state.lds, DMA_NONE if vm_drained else state.dma,
                                        state.fed)
        if releases_lds(stmt, self.func_name):
            waits = []
            dma = state.dma
            if dma == DMA_UNWAITED:
                waits.append(tirx.Evaluate(vmem_counter_wait(self.target)))
                dma = DMA_NONE
            if state.lds_in_flight:
                waits.append(tirx.Evaluate(lds_counter_wait(self.target)))
            return [*waits, stmt], CounterState(False, dma)
        action = sync_action(stmt)
        if action is not None and action.kind is SyncKind.ASYNC_WAIT:
            # wait_async_ops(n): the copies it leaves in flight are meant to stay in flight
            return [stmt], CounterState(state.lds, DMA_NONE if action.arg == 0 else DMA_BOUNDED,
                                        state.fed)
        return [stmt], self.after_accesses(stmt, state)

    def after_accesses(self, stmt: Any, state: CounterState) -> CounterState:
        accesses = statement_accesses(stmt, func_name=self.func_name)
        dma = DMA_UNWAITED if any(a.kind is AccessKind.ASYNC_WRITE for a in accesses) \
            else state.dma
        lds_ops = [a for a in accesses if a.kind is not AccessKind.ASYNC_WRITE]
        lds = state.lds or any(a.kind is not AccessKind.READ for a in lds_ops)
        fed_used = self.locals_read(stmt) & state.fed
        if not lds_ops and not fed_used:
            return CounterState(lds, dma, state.fed)
        # the statement uses LDS-read values (directly or through a local)
        if isinstance(stmt, tirx.BufferStore) and _is_scalar_local(stmt.buffer):
            return CounterState(lds, dma, state.fed | {stmt.buffer})
        if self.consumed_by_write_only_store(stmt):
            return CounterState(lds, dma, state.fed - fed_used)
        return CounterState(True, dma, state.fed)  # a consumer the barrier may not order

    def locals_read(self, stmt: Any) -> frozenset[Any]:
        """Local buffers ``stmt`` reads."""
        found: set[Any] = set()

        def add(node: Any) -> None:
            if type(node).__name__ == "TensorLoad" and _is_scalar_local(node.source):
                found.add(node.source)

        post_order_visit(stmt.value if isinstance(stmt, tirx.BufferStore) else stmt, add)
        if isinstance(stmt, tirx.BufferStore):
            post_order_visit(list(stmt.indices), add)
        return frozenset(found)

    def expr_reads(self, exprs: list[Any], state: CounterState) -> CounterState:
        """A condition or bound that reads LDS (or a local fed by it) leaves the read
        (conservatively) in flight."""
        for expr in exprs:
            if expr is None:
                continue
            probe = tirx.Evaluate(expr)
            if statement_accesses(probe) or self.locals_read(probe) & state.fed:
                return CounterState(True, state.dma, state.fed)
        return state

    # -- compound statements -------------------------------------------------------------
    def visit(self, stmt: Any, state: CounterState) -> tuple[Any, CounterState]:
        if isinstance(stmt, tirx.SeqStmt):
            out: list[Any] = []
            for item in ffi_list(stmt.seq):
                new, state = self.visit(item, state)
                out.extend(ffi_list(new.seq) if isinstance(new, tirx.SeqStmt) else [new])
            return _seq(out, stmt), state
        if isinstance(stmt, tirx.IfThenElse):
            state = self.expr_reads([stmt.condition], state)
            then_case, then_state = self.visit(stmt.then_case, state)
            else_case, else_state = (
                self.visit(stmt.else_case, state) if stmt.else_case is not None
                else (None, state)
            )
            changed = not then_case.same_as(stmt.then_case) or (
                else_case is not None and not else_case.same_as(stmt.else_case)
            )
            new = tirx.IfThenElse(stmt.condition, then_case, else_case, stmt.span) \
                if changed else stmt
            return new, then_state.join(else_state)
        if isinstance(stmt, tirx.For) and stmt.thread_binding is not None:
            pass  # a thread index, not a repetition: the body runs once per thread
        elif isinstance(stmt, (tirx.For, tirx.While)):
            return self.loop(stmt, state)
        if isinstance(stmt, (tirx.Bind, tirx.LetStmt)):
            self.deps[stmt.var] = self.vars_of(stmt.value)
        if is_leaf_statement(stmt):
            items, state = self.leaf(stmt, state)
            return _seq(items, None) if len(items) > 1 else items[0], state
        body = getattr(stmt, "body", None)
        if isinstance(body, tirx.Stmt):
            new_body, state = self.visit(body, state)
            if new_body.same_as(body):
                return stmt, state
            return _with_body(stmt, new_body), state
        return stmt, state

    def loop(self, stmt: Any, state: CounterState) -> tuple[Any, CounterState]:
        bounds = [stmt.condition] if isinstance(stmt, tirx.While) else [stmt.min, stmt.extent]
        entry = self.expr_reads(bounds, state)
        head = entry
        self.loops.append(_WHILE if isinstance(stmt, tirx.While) else stmt.loop_var)
        for _ in range(4):  # two booleans: the join is stable after at most three rounds
            body, end = self.visit(stmt.body, head)
            joined = head.join(self.expr_reads(bounds, end))
            if joined == head:
                self.loops.pop()
                new = stmt if body.same_as(stmt.body) else _with_body(stmt, body)
                # the loop may run zero times: its exit state includes the entry state
                return new, joined
            head = joined
        raise TilewaveError(  # pragma: no cover (the lattice has four elements)
            f"{PASS_NAME}: counter-state iteration did not converge {where(self.func_name, stmt)}"
        )


def _with_body(stmt: Any, body: Any) -> Any:
    return rebuild(stmt, {"body": body})


def _seq(items: list[Any], original: Any) -> Any:
    if original is not None and len(items) == len(original.seq) and all(
        a.same_as(b) for a, b in zip(items, ffi_list(original.seq), strict=True)
    ):
        return original
    return items[0] if len(items) == 1 else tirx.SeqStmt(items)


def insert_amd_barrier_waits(
    func: tirx.PrimFunc, target: Any, func_name: str | None = None
) -> tirx.PrimFunc:
    """Return ``func`` with an LDS (and, after an unwaited LDS DMA, vector-memory) counter
    wait before every AMD barrier that needs one.

    Args:
        func: a kernel with tilewave's barrier ops or hand-placed barriers (before
            ``LowerTilewaveOps`` rewrites tilewave's ops, or after: both forms are read).
        target: an AMD target (anything :func:`tilewave.get_target` accepts).
        func_name: the name used in error messages (default: the ``global_symbol``).

    Raises:
        TargetFeatureError: ``target`` is not an AMD target; a barrier whose ordering
            tilewave cannot tell (see :func:`releases_lds`).
    """
    info = get_target(target)
    name = func_name or _symbol(func)
    if not info.is_rocm:
        raise TargetFeatureError(
            f"{PASS_NAME}: AMD barrier waits asked for {info.name} in function '{name}'; "
            "they exist only for AMD targets (gfx942, gfx950, gfx1200, gfx1201). Pass an AMD "
            "target, or run LowerTilewaveOps, which places them only for AMD targets."
        )
    body, _ = _WaitPlacer(info, name, func.body).visit(func.body, CounterState())
    return func if body.same_as(func.body) else func.with_body(body)


def _symbol(func: tirx.PrimFunc) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else "<anonymous>"
