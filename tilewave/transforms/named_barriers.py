"""Named barriers for warp-specialised producer/consumer branches (CUDA ``bar.arrive`` /
``bar.sync`` with a barrier id and a thread count).

``InsertSharedBarriers`` uses this for a thread-divergent ``if tx < P: <producer> else:
<consumer>`` whose branches conflict on shared memory, when ``P`` splits the block at a
warp boundary. Both groups reach the ``if`` equally often, so per execution:

* RAW (id ``r``): the producer ``bar.arrive r, n`` right after its last statement touching
  the buffers; the consumer ``bar.sync r, n`` right before its first;
* WAR across executions (id ``w``, only when the ``if`` sits in a loop): the consumer
  ``bar.arrive w, n`` after its last statement touching the buffers; the producer
  ``bar.sync w, n`` at the end of its branch, i.e. before its first write of the next
  execution. Each id is arrived at once and synced on once per execution, so no guard is
  needed for the first or last iteration.

``n`` is the number of threads of both groups (the block). Ids start at 1 (0 is
``__syncthreads``) and a CTA has 16.

This module holds the facts (is the split warp-aligned, which branch produces) and the
statement builders; the placement state lives in the pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import ir, tirx

from tilewave.errors import DivergentBarrierError, where
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import ffi_list
from tilewave.targets import TargetInfo

__all__ = [
    "MAX_NAMED_BARRIERS",
    "NAMED_ARRIVE_OPS",
    "NAMED_SYNC_OPS",
    "WarpSplit",
    "is_named_barrier",
    "named_arrive",
    "named_barrier_id",
    "named_sync",
    "strip_named_barriers",
    "warp_split",
]

#: hardware named barriers per CTA (ids 0..15; 0 is the one ``__syncthreads`` uses)
MAX_NAMED_BARRIERS = 16
NAMED_ARRIVE_OPS = frozenset({"tirx.ptx.bar_arrive", "tirx.ptx.barrier_arrive"})
NAMED_SYNC_OPS = frozenset({"tirx.ptx.bar_sync_count", "tirx.ptx.barrier_sync_count"})


@dataclass(frozen=True)
class WarpSplit:
    """A warp-aligned split of the block by an ``if`` condition.

    Attributes:
        threads: threads of the block (both groups), the barriers' thread count.
        boundary: the first thread of the second group.
    """

    threads: int
    boundary: int


def named_barrier_id(stmt: Any) -> tuple[str, int] | None:
    """``("arrive" | "sync", id)`` for a named-barrier statement with a constant id > 0
    and a thread count; ``None`` otherwise."""
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return None
    call = stmt.value
    name = callee_name(call)
    kind = "arrive" if name in NAMED_ARRIVE_OPS else "sync" if name in NAMED_SYNC_OPS else None
    if kind is None or not call.args or not isinstance(call.args[0], tirx.IntImm):
        return None
    bar_id = int(call.args[0].value)
    return (kind, bar_id) if bar_id > 0 else None


def is_named_barrier(stmt: Any) -> bool:
    """True for a ``bar.arrive``/``bar.sync`` with an id > 0 and a thread count."""
    return named_barrier_id(stmt) is not None


def _call(name: str, action: str, bar_id: int, threads: int) -> Any:
    args = [tirx.IntImm("uint32", bar_id), tirx.IntImm("uint32", threads)]
    args += [ir.expr.StringImm(s) for s in ("", action, "")]
    return tirx.Evaluate(ir.expr.Call(ir.Op.get(name), args, ret_ty="void"))


def named_arrive(bar_id: int, threads: int) -> Any:
    """``T.ptx.bar.arrive(bar_id, threads)``."""
    return _call("tirx.ptx.bar_arrive", "arrive", bar_id, threads)


def named_sync(bar_id: int, threads: int) -> Any:
    """``T.ptx.barrier.sync(bar_id, threads)``: PTX ``barrier.sync`` without ``.aligned``.

    The pass places one barrier generation at two instructions (the producer's and the
    consumer's side of a warp split); ``bar.sync`` is ``barrier.sync.aligned``, which PTX
    leaves undefined unless every thread runs the same instruction (compute-sanitizer's
    synccheck reports it)."""
    args = [tirx.IntImm("uint32", bar_id), tirx.IntImm("uint32", threads)]
    args += [ir.expr.StringImm(s) for s in ("", "sync", "", "")]
    return tirx.Evaluate(
        ir.expr.Call(ir.Op.get("tirx.ptx.barrier_sync_count"), args, ret_ty="void")
    )


def strip_named_barriers(stmt: Any) -> Any:
    """``stmt`` (a branch) without its top-level named barriers (the pass re-derives them)."""
    items = ffi_list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]
    kept = [s for s in items if not is_named_barrier(s)]
    if len(kept) == len(items):
        return stmt
    if not kept:
        return tirx.Evaluate(tirx.IntImm("int32", 0))
    return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)


def warp_split(
    cond: Any,
    thread_extents: dict[Any, int],
    target: TargetInfo,
    func_name: str,
    stmt: Any,
    pass_name: str,
) -> WarpSplit:
    """Check that ``cond`` (``tx < P`` or ``tx >= P``) splits the block at a warp boundary
    on a target with named barriers.

    Raises:
        DivergentBarrierError: the target has no named barriers (AMD), or the condition is
            not such a split.
    """
    if not target.is_cuda:
        raise DivergentBarrierError(
            f"{pass_name}: the two branches of the thread-dependent `if` "
            f"{where(func_name, stmt)} race on shared memory and {target.name} has no named "
            "barriers (AMD GPUs only have the workgroup barrier, which a divergent branch "
            "cannot use). Split the divergent region into separate `if`s with uniform code "
            "between them."
        )
    wide = [(v, e) for v, e in thread_extents.items() if e != 1]
    split = None
    if isinstance(cond, (tirx.LT, tirx.GE)) and isinstance(cond.b, tirx.IntImm) and len(wide) == 1:
        var, extent = wide[0]
        boundary = int(cond.b.value)
        if isinstance(cond.a, ir.expr.Var) and cond.a.same_as(var) and 0 < boundary < extent:
            split = WarpSplit(extent, boundary)
    if (
        split is None
        or split.boundary % target.wave_size
        or split.threads % target.wave_size
    ):
        raise DivergentBarrierError(
            f"{pass_name}: the two branches of the thread-dependent `if` "
            f"{where(func_name, stmt)} race on shared memory. Named barriers can order them "
            f"only when the condition is `tx < P` (or `tx >= P`) on the one thread index "
            f"with P a multiple of the warp size ({target.wave_size}) and the block a whole "
            f"number of warps; got `{cond}`. Make the producer and consumer whole warps."
        )
    return split
