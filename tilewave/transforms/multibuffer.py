"""Index-based multibuffering: give each iteration of a loop its own copy of a shared buffer.

A shared buffer that every iteration of a serial loop writes and then reads is grown by a
new *outer* dimension of size ``count``; every access inside the loop gets the slot index
``(normalised iteration) mod count`` prepended, so iteration ``i`` uses copy ``i mod count``.
Two consecutive iterations then touch disjoint memory, which removes the write-after-read
barrier between them (the seed design: ``index + block_size * (iv mod count)``).

Why a new outer dimension rather than scaling the flattened one: the original index
expressions stay untouched (their bounds still hold), and the slot is a separate
index an analysis can compare on its own to prove two iterations disjoint. Flattened
row-major, ``S[slot, i...]`` *is* ``S[i...] + block_size * slot``, which is also the offset
added to ``tvm_access_ptr`` operands.

* Slot index: ``(iv - min) // step`` normalises the iteration; the modulo becomes a mask
  (``& (count - 1)``) for power-of-two counts.
* Accesses before the loop (prologue) use the first iteration's copy (slot 0); accesses
  after it (epilogue) use the last iteration's copy, so an epilogue that reads what the
  loop's last iteration wrote still sees it.
* Addresses: ``T.address_of(S[i])`` becomes ``T.address_of(S[slot, i])``;
  ``T.tvm_access_ptr(t, S.data, off, ext, rw)`` gets ``off + block_size * slot``; a raw
  ``S.data`` operand becomes ``T.address_of(S[slot, 0, ...])`` (the slot's base).
* The grown ``AllocBuffer`` carries the annotation ``"tilewave.multi_buffer_count"``; a
  buffer that already has it is never grown again.

Which loop: the ``loop`` option names it (by loop-variable name); otherwise, per buffer,
the innermost serial loop that contains both a write and a read of the buffer.

Limitation: the pass requires that no value flows through the buffer from one iteration to
the next. It checks this in program order (the first access of the buffer in the loop
body must write, not read); it does not compare element indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx
from tvm.sym.analyzer import Analyzer
from tvm.tirx.layout import S as LayoutShape
from tvm.tirx.layout import TileLayout

from tilewave.analysis.loop_access import AccessKind, BufferUse, buffer_uses
from tilewave.analysis.shared_buffers import buffer_scope, is_shared_buffer
from tilewave.errors import (
    MalformedKernelError,
    PassOptionError,
    SharedMemoryLimitError,
    where,
)
from tilewave.ir.walker import TIRMutator, TIRVisitor, rebuild
from tilewave.targets import TargetInfo, get_target

__all__ = ["MULTI_BUFFER_COUNT_ATTR", "MultiBuffer", "multi_buffer"]

#: ``AllocBuffer`` annotation marking a buffer the pass has grown (value: the count).
MULTI_BUFFER_COUNT_ATTR = "tilewave.multi_buffer_count"

_PASS = "MultiBuffer"
_make_buffer_var = tvm_ffi.get_global_func("tirx.BufferVar")


@dataclass(frozen=True)
class _Plan:
    """One buffer to grow: its use facts, the loop that selects the copy, the new buffer."""

    use: BufferUse
    loop: tirx.For
    grown: ir.expr.Var


# --- options ----------------------------------------------------------------------------


def _check_count(count: Any) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise PassOptionError(
            f"{_PASS}: count must be a positive integer (the number of buffer copies), got "
            f"{count!r}. Use count=2 for double buffering."
        )
    return count


def _func_name(func: tirx.PrimFunc) -> str | None:
    attrs = func.attrs
    if attrs is not None and "global_symbol" in attrs:
        return str(attrs["global_symbol"])
    return None


def _resolve_target(func: tirx.PrimFunc, target: Any) -> TargetInfo | None:
    """The explicit target, else the function's ``target`` attribute, else the current one."""
    if target is not None:
        return get_target(target)
    if func.attrs is not None and "target" in func.attrs:
        return get_target(func.attrs["target"])
    current = tvm.target.Target.current(allow_none=True)
    return get_target(current) if current is not None else None


class _LoopFinder(TIRVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.found: list[tirx.For] = []

    def visit_For(self, node: tirx.For) -> None:
        if str(node.loop_var.name) == self.name:
            self.found.append(node)
        self.generic_visit(node)


def _named_loop(func: tirx.PrimFunc, name: str, func_name: str | None) -> tirx.For:
    finder = _LoopFinder(name)
    finder.visit(func.body)
    if not finder.found:
        raise PassOptionError(
            f"{_PASS}: no loop named '{name}' {where(func_name)}. Pass the name of the loop "
            "variable of the serial loop whose iterations should use separate copies."
        )
    if len(finder.found) > 1:
        raise PassOptionError(
            f"{_PASS}: {len(finder.found)} loops are named '{name}' {where(func_name)}; "
            "rename the loop variables so the loop option picks exactly one."
        )
    loop = finder.found[0]
    if loop.kind != tirx.ForKind.SERIAL:
        raise PassOptionError(
            f"{_PASS}: loop '{name}' is {tirx.ForKind(loop.kind).name.lower()}, not serial "
            f"{where(func_name, loop)}. Multibuffering gives each *sequential* iteration its "
            "own copy; name a serial loop (thread-bound, vectorized and unrolled loops have "
            "no iteration order to pipeline)."
        )
    return loop


def _select_uses(
    uses: list[BufferUse], buffers: Iterable[Any] | None, func_name: str | None
) -> tuple[list[BufferUse], bool]:
    """The buffers to consider, and whether the user named them explicitly."""
    if buffers is None:
        return [u for u in uses if is_shared_buffer(u.buffer)], False
    if isinstance(buffers, (str, ir.expr.Var)):
        buffers = [buffers]
    by_name = {u.name: u for u in uses}
    chosen = []
    for item in buffers:
        name = str(item.name) if isinstance(item, ir.expr.Var) else item
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise PassOptionError(
                f"{_PASS}: no allocated buffer named {name!r} {where(func_name)} "
                f"(allocated buffers: {known}). Name a buffer created with T.alloc_buffer."
            )
        use = by_name[name]
        if not is_shared_buffer(use.buffer):
            raise PassOptionError(
                f"{_PASS}: buffer '{name}' has scope '{buffer_scope(use.buffer)}', not shared "
                f"{where(func_name, use.alloc)}. Only shared-memory buffers are multibuffered; "
                "remove it from buffers=."
            )
        chosen.append(use)
    return chosen, True


# --- per-buffer checks --------------------------------------------------------------------


def _serial_loops_with_write_and_read(use: BufferUse) -> list[tirx.For]:
    loops: list[tirx.For] = []
    for loop in (lp for acc in use.accesses for lp in acc.loops):
        if loop.kind != tirx.ForKind.SERIAL or any(loop.same_as(lp) for lp in loops):
            continue
        kinds = AccessKind(0)
        for acc in use.accesses:
            if acc.inside(loop):
                kinds |= acc.kind
        if kinds == AccessKind.READ | AccessKind.WRITE:
            loops.append(loop)
    return loops


def _innermost(loops: list[tirx.For], use: BufferUse) -> list[tirx.For]:
    def encloses(outer: tirx.For, inner: tirx.For) -> bool:
        for acc in use.accesses:
            chain = list(acc.loops)
            pos = [i for i, lp in enumerate(chain) if lp.same_as(outer) or lp.same_as(inner)]
            if len(pos) == 2 and chain[pos[0]].same_as(outer):
                return True
        return False

    return [
        lp
        for lp in loops
        if not any(encloses(lp, other) for other in loops if not other.same_as(lp))
    ]


def _choose_loop(
    use: BufferUse, named: tirx.For | None, explicit: bool, func_name: str | None
) -> tirx.For | None:
    candidates = _serial_loops_with_write_and_read(use)
    if named is not None:
        if any(named.same_as(lp) for lp in candidates):
            return named
        if explicit:
            raise PassOptionError(
                f"{_PASS}: buffer '{use.name}' is not both written and read inside loop "
                f"'{named.loop_var.name}' {where(func_name)}; there is nothing to multibuffer. "
                "Name the loop whose iterations write and then read the buffer."
            )
        return None
    innermost = _innermost(candidates, use)
    if not innermost:
        if explicit:
            raise PassOptionError(
                f"{_PASS}: buffer '{use.name}' is not both written and read inside a serial "
                f"loop {where(func_name, use.alloc)}; there is nothing to multibuffer. "
                "Remove it from buffers=."
            )
        return None
    if len(innermost) > 1:
        names = ", ".join(f"'{lp.loop_var.name}'" for lp in innermost)
        raise PassOptionError(
            f"{_PASS}: buffer '{use.name}' is written and read in several separate loops "
            f"({names}) {where(func_name)}; pass loop=<name> to say which one selects the copy."
        )
    return innermost[0]


def _check_rewritable(use: BufferUse, loop: tirx.For, func_name: str | None) -> None:
    if use.escapes:
        escape = use.escapes[0]
        raise MalformedKernelError(
            f"{_PASS}: cannot multibuffer '{use.name}': {escape.reason} "
            f"{where(func_name, escape.stmt)}. Every address of the buffer must reach a "
            "known op through S.data, T.address_of(S[...]) or T.tvm_access_ptr so its "
            "offset can be rewritten; leave this buffer out with buffers=[...]."
        )
    ty = use.buffer.ty
    default = TileLayout(LayoutShape[tuple(ty.shape)]) if len(ty.shape) else None
    if len(ty.strides) or not tvm_ffi.structural_equal(ty.layout, default):
        raise MalformedKernelError(
            f"{_PASS}: buffer '{use.name}' has explicit strides or a non-default layout "
            f"{where(func_name, use.alloc)}; only dense row-major shared buffers can be grown. "
            "Leave it out with buffers=[...]."
        )
    for acc in use.accesses:
        if not acc.inside(loop):
            continue
        if acc.kind & AccessKind.READ:
            raise MalformedKernelError(
                f"{_PASS}: buffer '{use.name}' is read before it is written in the body of loop "
                f"'{loop.loop_var.name}' {where(func_name, acc.stmt)}, so its value flows from "
                "one iteration to the next and separate copies would change the result. "
                "Multibuffer before software pipelining, or leave it out with buffers=[...]."
            )
        break


def _already_grown(use: BufferUse) -> int | None:
    annotations = use.alloc.annotations
    if annotations is not None and MULTI_BUFFER_COUNT_ATTR in annotations:
        return int(annotations[MULTI_BUFFER_COUNT_ATTR])
    return None


# --- shared-memory budget -----------------------------------------------------------------


def _bytes(buffer: ir.expr.Var, factor: int = 1) -> int | None:
    size = factor * tvm.DataType(str(buffer.ty.dtype)).bits * tvm.DataType(
        str(buffer.ty.dtype)
    ).lanes // 8
    for dim in buffer.ty.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        size *= int(dim)
    return size


def _check_budget(
    uses: list[BufferUse], plans: list[_Plan], count: int, target: TargetInfo | None,
    func_name: str | None,
) -> None:
    if target is None or not plans:
        return
    grown = {plan.use.buffer for plan in plans}
    total = 0
    for use in uses:
        if is_shared_buffer(use.buffer):
            total += _bytes(use.buffer, count if use.buffer in grown else 1) or 0
    if total <= target.shared_memory_bytes:
        return
    plan = max(plans, key=lambda p: _bytes(p.use.buffer) or 0)
    before = _bytes(plan.use.buffer)
    raise SharedMemoryLimitError(
        f"{_PASS}: growing shared buffer '{plan.use.name}' from {before} to "
        f"{(before or 0) * count} bytes (count={count}) {where(func_name, plan.use.alloc)} "
        f"brings the kernel's shared memory to {total} bytes, over the "
        f"{target.shared_memory_bytes}-byte limit of {target.name}. Use a smaller count, "
        "fewer buffers (buffers=[...]) or smaller tiles."
    )


# --- rewriting ----------------------------------------------------------------------------


def _grow(buffer: ir.expr.Var, count: int) -> ir.expr.Var:
    ty = buffer.ty
    dim_dtype = str(ty.shape[0].ty) if len(ty.shape) else "int32"
    shape = [tirx.IntImm(dim_dtype, count), *ty.shape]
    new_ty = rebuild(ty, {"shape": shape, "layout": TileLayout(LayoutShape[tuple(shape)])})
    return _make_buffer_var(str(buffer.name), new_ty, buffer.span)


def _mod(value: Any, count: int) -> Any:
    if count & (count - 1) == 0:
        return tirx.bitwise_and(value, count - 1)
    return tirx.floormod(value, count)


class _SlotRewriter(TIRMutator):
    """Rewrites every access of the planned buffers with the slot index of its position."""

    def __init__(self, plans: list[_Plan], count: int) -> None:
        self._plans = {plan.use.buffer: plan for plan in plans}
        self._count = count
        self._slot: dict[ir.expr.Var, Any] = {plan.use.buffer: 0 for plan in plans}
        self._analyzer = Analyzer()

    def _iteration(self, loop: tirx.For) -> Any:
        step = loop.step if loop.step is not None else 1
        return self._analyzer.simplify(tirx.floordiv(loop.loop_var - loop.min, step))

    def _last_iteration(self, loop: tirx.For) -> Any:
        step = loop.step if loop.step is not None else 1
        trips = tirx.floordiv(loop.extent + step - 1, step)
        return self._analyzer.simplify(tirx.max(trips - 1, 0))

    def _slot_expr(self, buffer: ir.expr.Var, dtype: str) -> Any:
        slot = self._slot[buffer]
        if isinstance(slot, int):
            return tirx.IntImm(dtype, slot)
        if isinstance(slot, tirx.IntImm):
            return tirx.IntImm(dtype, int(slot) % self._count)
        slot = _mod(slot, self._count)
        return slot if str(slot.ty) == dtype else tirx.Cast(dtype, slot)

    def _index_dtype(self, indices: Sequence[Any]) -> str:
        return str(indices[0].ty) if len(indices) else "int32"

    def visit_For(self, node: tirx.For) -> Any:
        hits = [p for p in self._plans.values() if p.loop.same_as(node)]
        for plan in hits:
            self._slot[plan.use.buffer] = self._iteration(node)
        new = self.generic_visit(node)
        for plan in hits:
            self._slot[plan.use.buffer] = self._last_iteration(node)
        return new

    def visit_AllocBuffer(self, node: tirx.AllocBuffer) -> Any:
        plan = self._plans.get(node.buffer)
        if plan is None:
            return self.generic_visit(node)
        annotations = dict(node.annotations or {})
        annotations[MULTI_BUFFER_COUNT_ATTR] = tirx.IntImm("int32", self._count)
        return rebuild(node, {"buffer": plan.grown, "annotations": annotations})

    def visit_BufferStore(self, node: tirx.BufferStore) -> Any:
        new = self.generic_visit(node)
        plan = self._plans.get(node.buffer)
        if plan is None:
            return new
        slot = self._slot_expr(node.buffer, self._index_dtype(new.indices))
        return rebuild(new, {"buffer": plan.grown, "indices": [slot, *new.indices]})

    def visit_TensorLoad(self, node: Any) -> Any:
        new = self.generic_visit(node)
        plan = self._plans.get(node.source)
        if plan is None:
            return new
        slot = self._slot_expr(node.source, self._index_dtype(new.indices))
        return tirx.BufferLoad(plan.grown, [slot, *new.indices])

    def visit_Call(self, node: ir.expr.Call) -> Any:
        op = node.op.name if isinstance(node.op, ir.Op) else None
        if op == "tirx.tvm_access_ptr":
            data = node.args[1]
            plan = self._plans.get(_buffer_of_data(data))
            if plan is not None:
                args = [self.visit(a) for a in node.args]
                offset = args[2]
                block = _block_elements(plan.use.buffer)
                slot = self._slot_expr(plan.use.buffer, str(offset.ty))
                args[1] = tirx.buffer.buffer_data(plan.grown)
                args[2] = offset + block * slot
                return rebuild(node, {"args": args})
        if op == "tirx.buffer_data":
            plan = self._plans.get(node.args[0])
            if plan is not None:
                zeros = [tirx.IntImm(str(d.ty), 0) for d in plan.use.buffer.ty.shape]
                dtype = self._index_dtype(zeros)
                slot = self._slot_expr(plan.use.buffer, dtype)
                return tirx.address_of(tirx.BufferLoad(plan.grown, [slot, *zeros]))
        return self.generic_visit(node)


def _buffer_of_data(expr: Any) -> Any:
    if isinstance(expr, ir.expr.Call) and isinstance(expr.op, ir.Op):
        if expr.op.name == "tirx.buffer_data":
            return expr.args[0]
    return None


def _block_elements(buffer: ir.expr.Var) -> Any:
    size: Any = 1
    for dim in buffer.ty.shape:
        size = size * dim
    return size


# --- entry points -------------------------------------------------------------------------


def multi_buffer(
    func: tirx.PrimFunc,
    count: int,
    buffers: Iterable[str | ir.expr.Var] | str | None = None,
    loop: str | None = None,
    target: Any = None,
) -> tirx.PrimFunc:
    """Give each iteration of a serial loop its own copy of shared buffers.

    Args:
        func: the kernel.
        count: number of copies (``1`` returns ``func`` unchanged; ``2`` double-buffers).
        buffers: names (or buffer vars) of the shared buffers to grow; ``None`` grows every
            shared buffer that is written and read inside a serial loop.
        loop: name of the loop variable of the serial loop whose iteration selects the copy;
            ``None`` picks, per buffer, the innermost serial loop that writes and reads it.
        target: target for the shared-memory limit (a name, ``tvm.target.Target`` or
            :class:`~tilewave.targets.TargetInfo`); ``None`` uses the function's ``target``
            attribute or the current target, and skips the check when there is none.

    Raises:
        PassOptionError: count below 1; an unknown or non-shared buffer; a loop option naming
            no loop, several loops or a non-serial loop; a named buffer with nothing to do.
        MalformedKernelError: a buffer whose address escapes, whose layout is not dense, or
            whose value is carried from one iteration to the next.
        SharedMemoryLimitError: the grown allocations exceed the target's shared memory.

    Example::

        double = multi_buffer(kernel, count=2)                 # every eligible buffer
        only_a = multi_buffer(kernel, count=3, buffers=["A_sh"], loop="k")
    """
    count = _check_count(count)
    if loop is not None and not isinstance(loop, str):
        raise PassOptionError(
            f"{_PASS}: loop must be the name of a loop variable (a string), got {loop!r}"
        )
    func_name = _func_name(func)
    uses = buffer_uses(func)
    selected, explicit = _select_uses(uses, buffers, func_name)
    named_loop = _named_loop(func, loop, func_name) if loop is not None else None
    if count == 1:
        return func
    plans: list[_Plan] = []
    for use in selected:
        done = _already_grown(use)
        if done is not None:
            if explicit and done != count:
                raise PassOptionError(
                    f"{_PASS}: buffer '{use.name}' is already multibuffered with count {done} "
                    f"{where(func_name, use.alloc)}; it is not grown again, so count={count} "
                    "cannot apply. Start from the single-buffered kernel."
                )
            continue
        chosen = _choose_loop(use, named_loop, explicit, func_name)
        if chosen is None:
            continue
        _check_rewritable(use, chosen, func_name)
        plans.append(_Plan(use, chosen, _grow(use.buffer, count)))
    if not plans:
        return func
    _check_budget(uses, plans, count, _resolve_target(func, target), func_name)
    body = _SlotRewriter(plans, count).visit(func.body)
    return rebuild(func, {"body": body})


def MultiBuffer(
    count: int,
    buffers: Iterable[str | ir.expr.Var] | str | None = None,
    loop: str | None = None,
    target: Any = None,
) -> tvm.transform.Pass:
    """The :func:`multi_buffer` transform as a ``tvm.transform.Pass`` over every PrimFunc.

    Options are checked when the pass is built (a bad ``count`` fails here, not later).

    Example::

        mod = tilewave.transforms.MultiBuffer(count=2)(mod)
    """
    _check_count(count)

    def transform(func: tirx.PrimFunc, _mod: Any, _ctx: Any) -> tirx.PrimFunc:
        return multi_buffer(func, count, buffers=buffers, loop=loop, target=target)

    return tvm.tirx.transform.prim_func_pass(transform, opt_level=0, name="tilewave.MultiBuffer")
