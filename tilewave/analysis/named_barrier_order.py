"""When named barriers (``bar.arrive`` / ``bar.sync`` with an id and a thread count) order
two accesses in opposite branches of a warp-split ``if`` — the hazard verifier's model.

The model covers one shape, the one warp-specialised kernels use: a two-branch ``if``
whose condition depends on the thread index only, in uniform control flow. A barrier id
``r`` is *trusted* for it when

1. the condition is the same for the 32 threads of every warp, computed for every thread
   of the block (``bar.sync`` / ``bar.arrive`` are ``.aligned``: a warp executes them
   as a whole), and depends on nothing but the thread indices (every thread takes the
   same branch in every execution);
2. the block's thread count ``n`` is known and a multiple of 32;
3. each branch holds exactly one ``bar.arrive(r, n)`` or ``bar.sync(r, n)``, among its
   top-level statements, with constant ``r`` in 1..15 and ``n`` the block's thread count
   (so every thread arrives at ``r`` exactly once per execution, and a phase needs all of
   them);
4. ``r`` is used nowhere else in the function (no other ``bar``/``barrier`` op names it,
   none has a non-constant id, and no inline-asm string mentions a ``bar.`` instruction);
5. when the ``if`` sits in a loop (it may run more than once), no thread can arrive at
   ``r`` for execution k+1 before every thread arrived for execution k. A side that
   ``bar.sync``\\ s on ``r`` waits for that itself; a side that only *arrives* at ``r``
   must sync on another trusted id ``v`` in between: either before its arrival at ``r``
   (phase k+1 of ``v`` needs every thread's arrival at ``v`` in execution k+1, after its
   arrival at ``r`` in execution k), or after it, with the other side's ``v`` barrier
   also after its ``r`` barrier (phase k of ``v`` then needs every thread's arrival at
   ``r`` in execution k). The ids are pruned to the greatest set meeting this rule.
   Without it a producer that only arrives can run a whole execution ahead and complete a
   phase with its own second arrival, before the consumers arrived: the hardware barrier
   only counts arrivals.

Then the executions of the ``if`` and the phases of each trusted id correspond one to one,
and a ``bar.sync(r)`` returns only after every thread's arrival of the same phase (the
PTX memory model makes ``bar.arrive``/``bar.sync`` synchronize with a ``bar.sync`` on the
same barrier). Hence, for an access ``a`` of a thread in branch X and an access ``b`` of a
thread in branch Y:

* same execution of the ``if``: ``a`` happens before ``b`` when ``a`` precedes X's arrival
  at ``r`` and Y's ``bar.sync(r)`` precedes ``b``;
* ``b`` in a later execution: when ``a`` precedes X's arrival at ``r`` (phase i) and Y
  syncs on ``r`` anywhere (its sync of phase i comes before ``b``), or when Y's sync on
  ``r`` precedes ``b`` (phase j >= i + 1, and ``a``'s thread arrived at phase j after
  ``a``).

Anything else — pairs inside one branch, ids that break the rules, other thread counts,
conditions this module cannot evaluate — is not ordered by this model, so the verifier
keeps reporting it. This module does not read the barrier pass's code: it is part of the
independent oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import ir, tirx

from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import ffi_list, node_is, post_order_visit

__all__ = [
    "NamedBarrierSplit",
    "SplitIf",
    "arrive_barrier_ids",
    "barrier_id",
    "block_thread_count",
    "block_thread_values",
    "counted_barrier_threads",
    "named_barrier_ids",
    "named_barrier_splits",
    "thread_tags",
    "warp_aligned",
]

WARP_SIZE = 32  # NVIDIA; named barriers exist only there
_MAX_ID = 15  # a CTA has 16 named barriers, 0 is __syncthreads
_ARRIVE = frozenset({"tirx.ptx.bar_arrive", "tirx.ptx.barrier_arrive"})
_SYNC = frozenset({"tirx.ptx.bar_sync_count", "tirx.ptx.barrier_sync_count"})
_ID_OP_PREFIXES = ("tirx.ptx.bar_", "tirx.ptx.barrier_")
_NOT_ID_OPS = ("tirx.ptx.bar_warp_sync", "tirx.ptx.barrier_cluster")
_ANY_ID = -1  # an id the model cannot read: poisons every id


@dataclass(frozen=True)
class SplitIf:
    """A two-branch ``if`` on a thread-dependent condition, as the verifier's graph sees it.

    Attributes:
        stmt: the ``IfThenElse``.
        sides: graph node ids of the then- and the else-branch.
        nested: the ``if`` sits in divergent control flow.
        condition: its condition with ``Bind`` values substituted.
        repeats: the ``if`` sits in a loop (``For`` or ``While``): it may run again.
    """

    stmt: Any
    sides: tuple[range, range]
    nested: bool
    condition: Any
    repeats: bool


def _named_barrier(stmt: Any) -> tuple[str, int, int] | None:
    """("arrive" | "sync", id, thread count) of a counted named-barrier statement."""
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return None
    call = stmt.value
    name = callee_name(call)
    kind = "arrive" if name in _ARRIVE else "sync" if name in _SYNC else None
    if kind is None:
        return None
    args = list(call.args)
    if len(args) < 2 or not all(isinstance(a, tirx.IntImm) for a in args[:2]):
        return (kind, _ANY_ID, -1)  # id or count not constant: never trusted
    return kind, int(args[0].value), int(args[1].value)


def counted_barrier_threads(stmt: Any) -> int | None:
    """The thread count of a counted ``bar.sync``/``barrier.sync``/``bar.red`` statement
    (-1 when it is not a constant we can read); ``None`` for every other statement."""
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return None
    call = stmt.value
    name = callee_name(call)
    if name in _SYNC:
        found = _named_barrier(stmt)
        return -1 if found is None else found[2]
    if name.startswith(_ID_OP_PREFIXES) and "_count" in name:
        return -1  # bar.red with a count: argument layout not modelled
    return None


def barrier_id(stmt: Any) -> int | None:
    """The constant id of a named-barrier statement (``None``: not a constant)."""
    args = list(getattr(getattr(stmt, "value", None), "args", []))
    return int(args[0].value) if args and isinstance(args[0], tirx.IntImm) else None


def arrive_barrier_ids(func: Any) -> set[int | None]:
    """Named-barrier ids some ``bar.arrive`` names (such a barrier pairs two roles)."""
    found: set[int | None] = set()

    def check(node: Any) -> None:
        if isinstance(node, tirx.Evaluate):
            name = getattr(getattr(node.value, "op", None), "name", "")
            if name.startswith(("tirx.ptx.bar", "tirx.ptx.barrier")) and "arrive" in name:
                found.add(barrier_id(node))

    post_order_visit(func.body, check, (tirx.Evaluate,))
    return found


def named_barrier_ids(func: Any) -> set[int]:
    """The named-barrier ids ``func`` already uses (its own ``bar.sync``/``bar.arrive``)."""
    return {i for i in _id_uses(func, strings=False) if i >= 0}


def _id_uses(func: Any, strings: bool = True) -> dict[int, int]:
    """How many times each named-barrier id is named in ``func`` (``_ANY_ID``: some op's id
    cannot be read, or, with ``strings``, an inline-asm string mentions a barrier
    instruction)."""
    uses: dict[int, int] = {}

    def count(node: Any) -> None:
        if not isinstance(node, ir.expr.Call):
            return
        name = callee_name(node)
        if name.startswith(_ID_OP_PREFIXES) and not name.startswith(_NOT_ID_OPS):
            args = node.args
            key = int(args[0].value) if args and isinstance(args[0], tirx.IntImm) else _ANY_ID
            uses[key] = uses.get(key, 0) + 1
            return
        if not strings:
            return  # (the arguments are only read for their strings: skip the conversion)
        for arg in ffi_list(node.args):
            if isinstance(arg, ir.expr.StringImm) and (
                "bar." in arg.value or "barrier." in arg.value
            ):
                uses[_ANY_ID] = uses.get(_ANY_ID, 0) + 1

    post_order_visit(func.body, count, (ir.expr.Call,))
    return uses


def thread_tags(func: Any) -> dict[Any, str]:
    """``threadIdx.*`` variables of ``func`` (``T.thread_binding`` loops and
    ``thread_extent`` attributes) with their tag."""
    tags: dict[Any, str] = {}

    def check(node: Any) -> None:
        if node_is(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else ""
            if tag.startswith("threadIdx"):
                tags[node.loop_var] = tag
        elif node_is(node, tirx.AttrStmt) and str(node.attr_key) == "thread_extent":
            iv = node.node
            if isinstance(iv, tirx.IterVar) and str(iv.thread_tag).startswith("threadIdx"):
                tags[iv.var] = str(iv.thread_tag)

    post_order_visit(func.body, check, (tirx.For, tirx.AttrStmt))
    return tags


def _tag_extents(tags: dict[Any, str], extents: dict[Any, int]) -> dict[str, int] | None:
    """Extent per ``threadIdx`` tag; ``None`` when one is unknown or tags disagree."""
    out: dict[str, int] = {}
    for var, tag in tags.items():
        extent = extents.get(var, 0)
        if extent <= 0 or out.get(tag, extent) != extent:
            return None
        out[tag] = extent
    return out


def block_thread_count(tags: dict[Any, str], extents: dict[Any, int]) -> int | None:
    """Threads per block (product of the ``threadIdx`` extents), ``None`` if unknown."""
    per_tag = _tag_extents(tags, extents)
    if per_tag is None:
        return None
    total = 1
    for extent in per_tag.values():
        total *= extent
    return total


# -- evaluating a condition for every thread of the block ------------------------------------
_INT32 = 1 << 31


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Any, list[Any]], Any]:
    return lambda node, vals: fn(vals[0], vals[1])


def _trunc_div(a: Any, b: Any) -> Any:
    if np.any(b == 0):
        raise _Unknown
    return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))


def _floor_div(a: Any, b: Any) -> Any:
    if np.any(b == 0):
        raise _Unknown
    return a // b


def _floor_mod(a: Any, b: Any) -> Any:
    if np.any(b == 0):
        raise _Unknown
    return a % b


class _Unknown(Exception):
    """The expression has something the evaluator does not model."""


_OPS: dict[type, Callable[[Any, list[Any]], Any]] = {
    tirx.Add: _binary(lambda a, b: a + b),
    tirx.Sub: _binary(lambda a, b: a - b),
    tirx.Mul: _binary(lambda a, b: a * b),
    tirx.FloorDiv: _binary(_floor_div),
    tirx.FloorMod: _binary(_floor_mod),
    tirx.Div: _binary(_trunc_div),
    tirx.Mod: _binary(lambda a, b: a - _trunc_div(a, b) * b),
    tirx.Min: _binary(np.minimum),
    tirx.Max: _binary(np.maximum),
    tirx.EQ: _binary(lambda a, b: a == b),
    tirx.NE: _binary(lambda a, b: a != b),
    tirx.LT: _binary(lambda a, b: a < b),
    tirx.LE: _binary(lambda a, b: a <= b),
    tirx.GT: _binary(lambda a, b: a > b),
    tirx.GE: _binary(lambda a, b: a >= b),
    tirx.And: _binary(np.logical_and),
    tirx.Or: _binary(np.logical_or),
}


def _evaluate(expr: Any, env: dict[Any, Any]) -> Any:
    """``expr`` for every thread (numpy arrays indexed by linear thread id)."""
    if isinstance(expr, tirx.IntImm):
        return np.int64(expr.value)
    if isinstance(expr, ir.expr.Var):
        for var, value in env.items():
            if expr.same_as(var):
                return value
        raise _Unknown  # a loop variable, a parameter...: not the same in every execution
    if isinstance(expr, tirx.Not):
        return np.logical_not(_evaluate(expr.a, env))
    if isinstance(expr, tirx.Select):
        cond = _evaluate(expr.condition, env)
        return np.where(cond, _evaluate(expr.true_value, env), _evaluate(expr.false_value, env))
    if isinstance(expr, tirx.Cast):
        dtype = str(expr.ty)  # a 0.27 Cast has no .dtype: its type is .ty
        if not (dtype.startswith(("int", "uint")) or dtype == "bool"):
            raise _Unknown
        value = _evaluate(expr.value, env)
        return value.astype(bool) if dtype == "bool" else value
    op = _OPS.get(type(expr))
    if op is None:
        raise _Unknown
    value = op(expr, [_evaluate(expr.a, env), _evaluate(expr.b, env)])
    if np.asarray(value).dtype != bool and np.any(np.abs(value) >= _INT32):
        raise _Unknown  # would wrap around in 32-bit arithmetic
    return value


def block_thread_values(
    tags: dict[Any, str], extents: dict[Any, int]
) -> tuple[int, dict[Any, np.ndarray]] | None:
    """``(threads, {thread var: its value for each linear thread id})`` for a block of whole
    warps, or ``None`` (unknown extents, or not a whole number of warps)."""
    per_tag = _tag_extents(tags, extents)
    if per_tag is None:
        return None
    ex, ey, ez = (per_tag.get(f"threadIdx.{axis}", 1) for axis in "xyz")
    total = ex * ey * ez
    if total % WARP_SIZE:
        return None
    linear = np.arange(total, dtype=np.int64)
    by_tag = {
        "threadIdx.x": linear % ex,
        "threadIdx.y": (linear // ex) % ey,
        "threadIdx.z": linear // (ex * ey),
    }
    return total, {var: by_tag[tag] for var, tag in tags.items() if tag in by_tag}


def warp_aligned(condition: Any, tags: dict[Any, str], extents: dict[Any, int]) -> bool:
    """Whether ``condition`` depends on the thread indices only and is the same for the 32
    threads of every warp (computed for every thread of the block)."""
    block = block_thread_values(tags, extents)
    if block is None:
        return False
    total, env = block
    try:
        value = np.broadcast_to(np.asarray(_evaluate(condition, env)), (total,)).astype(bool)
    except _Unknown:
        return False
    warps = value.reshape(-1, WARP_SIZE)
    return bool(np.all(warps == warps[:, :1]))


# -- the model --------------------------------------------------------------------------------
@dataclass(frozen=True)
class NamedBarrierSplit:
    """One warp-split ``if`` and its trusted named barriers.

    Attributes:
        sides: node ids (of the verifier's graph) of the then- and the else-branch.
        arrivals: per side, trusted barrier id -> node id of that side's arrive-or-sync.
        syncs: per side, trusted barrier id -> node id of that side's ``bar.sync``.
    """

    sides: tuple[range, range]
    arrivals: tuple[dict[int, int], dict[int, int]]
    syncs: tuple[dict[int, int], dict[int, int]]

    def side_of(self, node: int) -> int | None:
        """0 (then), 1 (else) or None (not in this ``if``)."""
        for index, ids in enumerate(self.sides):
            if node in ids:
                return index
        return None

    def barrier_nodes(self) -> set[int]:
        """Node ids of the trusted barrier statements."""
        return {n for side in self.arrivals for n in side.values()}

    def orders(self, first: int, second: int, later_execution: bool) -> bool:
        """Whether the access at node ``first`` happens before the one at node ``second``
        (opposite sides; ``second`` in the same or a later execution of the ``if``)."""
        x, y = self.side_of(first), self.side_of(second)
        if x is None or y is None or x == y:
            return False
        for bar_id, arrival in self.arrivals[x].items():
            sync = self.syncs[y].get(bar_id)
            if sync is None:
                continue
            if first < arrival and (later_execution or sync < second):
                return True
            if later_execution and sync < second:
                return True
        return False


def _phase_exact(
    good: set[int],
    arrivals: tuple[dict[int, int], dict[int, int]],
    syncs: tuple[dict[int, int], dict[int, int]],
) -> set[int]:
    """The greatest subset of ``good`` meeting rule 5 (no arrival for the next execution
    before the current phase completes)."""
    trusted = set(good)
    changed = True
    while changed:
        changed = False
        for bar_id in sorted(trusted):
            safe = True
            for side in (0, 1):
                other = 1 - side
                if bar_id in syncs[side]:
                    continue
                here = arrivals[side][bar_id]
                safe = safe and any(
                    v != bar_id
                    and v in syncs[side]
                    and (
                        syncs[side][v] < here  # waits on phase k+1 of v first
                        or arrivals[other][v] > arrivals[other][bar_id]  # v after r on both
                    )
                    for v in trusted
                )
            if not safe:
                trusted.discard(bar_id)
                changed = True
    return trusted


def named_barrier_splits(
    func: Any, ifs: list[SplitIf], thread_extents: dict[Any, int], nodes: list[Any]
) -> list[NamedBarrierSplit]:
    """The warp-split ``if``s of ``func`` with the named barriers the model trusts.

    Args:
        func: the PrimFunc (every use of a barrier id is counted over it).
        ifs: every two-branch ``if`` under a thread-dependent condition.
        thread_extents: ``threadIdx`` variables -> extent (0: unknown).
        nodes: the verifier's graph nodes (``.stmt`` is each node's statement).
    """
    tags = thread_tags(func)
    block_threads = block_thread_count(tags, thread_extents)
    if block_threads is None or block_threads % WARP_SIZE:
        return []
    uses = _id_uses(func)
    if uses.get(_ANY_ID):
        return []
    splits = []
    for split in ifs:
        stmt = split.stmt
        if split.nested or stmt.else_case is None:
            continue
        if not warp_aligned(split.condition, tags, thread_extents):
            continue
        arrivals: tuple[dict[int, int], dict[int, int]] = ({}, {})
        syncs: tuple[dict[int, int], dict[int, int]] = ({}, {})
        bad: set[int] = set()
        for side, (branch, ids) in enumerate(
            ((stmt.then_case, split.sides[0]), (stmt.else_case, split.sides[1]))
        ):
            top = ffi_list(branch.seq) if isinstance(branch, tirx.SeqStmt) else [branch]
            for node_id in ids:
                node_stmt = nodes[node_id].stmt
                found = _named_barrier(node_stmt) if node_stmt is not None else None
                if found is None:
                    continue
                kind, bar_id, threads = found
                if (
                    bar_id in arrivals[side]
                    or threads != block_threads
                    or not any(node_stmt.same_as(t) for t in top)
                ):
                    bad.add(bar_id)
                arrivals[side][bar_id] = node_id
                if kind == "sync":
                    syncs[side][bar_id] = node_id
        good = {
            bar_id
            for bar_id in set(arrivals[0]) & set(arrivals[1])
            if 0 < bar_id <= _MAX_ID and bar_id not in bad and uses.get(bar_id) == 2
        }
        if split.repeats:
            good = _phase_exact(good, arrivals, syncs)
        splits.append(
            NamedBarrierSplit(
                split.sides,
                (
                    {i: n for i, n in arrivals[0].items() if i in good},
                    {i: n for i, n in arrivals[1].items() if i in good},
                ),
                (
                    {i: n for i, n in syncs[0].items() if i in good},
                    {i: n for i, n in syncs[1].items() if i in good},
                ),
            )
        )
    return splits
