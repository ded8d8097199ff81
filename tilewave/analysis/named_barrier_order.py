"""When named barriers (``bar.arrive`` / ``bar.sync`` with an id and a thread count) order
two accesses in opposite branches of a warp-split ``if`` — the hazard verifier's model.

The model covers one shape, the one warp-specialised kernels use: a divergent two-branch
``if`` (threads split by their index) in uniform control flow, where for a barrier id
``r``

* each branch holds exactly one ``bar.arrive(r, n)`` or ``bar.sync(r, n)`` among its
  top-level statements (so every thread *arrives* at ``r`` exactly once per execution of
  the ``if``),
* ``n`` is the block's thread count (a phase completes only when every thread arrived),
* ``r`` is used nowhere else in the function.

Then the executions of the ``if`` and the phases of ``r`` correspond one to one, and a
``bar.sync(r)`` returns only after every thread's arrival of the same phase. Hence, for an
access ``a`` of a thread in branch X and an access ``b`` of a thread in branch Y:

* same execution of the ``if``: ``a`` happens before ``b`` when ``a`` precedes X's arrival
  at ``r`` and Y's ``bar.sync(r)`` precedes ``b``;
* ``b`` in a later execution: when ``a`` precedes X's arrival at ``r`` (phase i) and Y
  syncs on ``r`` anywhere (its sync of phase i comes before ``b``), or when Y's sync on
  ``r`` precedes ``b`` (phase j >= i + 1, and ``a``'s thread arrived at phase i or i + 1
  after ``a``).

Anything else — pairs inside one branch, ids that break the rules, other thread counts —
is not ordered by this model, so the verifier keeps reporting it. This module does not
read the barrier pass's code: it is part of the independent oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import ir, tirx

from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import post_order_visit

__all__ = ["NamedBarrierSplit", "named_barrier_splits"]

_ARRIVE = frozenset({"tirx.ptx.bar_arrive", "tirx.ptx.barrier_arrive"})
_SYNC = frozenset({"tirx.ptx.bar_sync_count", "tirx.ptx.barrier_sync_count"})


def _named_barrier(stmt: Any) -> tuple[str, int, int] | None:
    """("arrive" | "sync", id, thread count) of a named-barrier statement, else None."""
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return None
    call = stmt.value
    name = callee_name(call)
    kind = "arrive" if name in _ARRIVE else "sync" if name in _SYNC else None
    if kind is None:
        return None
    args = list(call.args)
    if len(args) < 2 or not all(isinstance(a, tirx.IntImm) for a in args[:2]):
        return (kind, -1, -1)  # id or count not constant: never trusted
    return kind, int(args[0].value), int(args[1].value)


def _top_level(branch: Any) -> list[Any]:
    return list(branch.seq) if isinstance(branch, tirx.SeqStmt) else [branch]


@dataclass(frozen=True)
class NamedBarrierSplit:
    """One warp-split ``if`` and the named barriers that follow the model's rules.

    Attributes:
        sides: node ids (of the verifier's graph) of the then- and the else-branch.
        arrivals: per side, barrier id -> node id of that side's arrive-or-sync.
        syncs: per side, barrier id -> node id of that side's ``bar.sync``.
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


def named_barrier_splits(
    func: Any, ifs: list[tuple[Any, range, range, bool]], block_threads: int, nodes: list[Any]
) -> list[NamedBarrierSplit]:
    """The warp-split ``if``s of ``func`` whose named barriers follow the model's rules.

    Args:
        func: the PrimFunc (every use of a barrier id is counted over it).
        ifs: ``(IfThenElse, then node ids, else node ids, in divergent code?)`` per ``if``
            with two branches under a thread-dependent condition.
        block_threads: the number of threads in the block.
        nodes: the verifier's graph nodes (``.stmt`` is each node's statement).
    """
    uses: dict[int, int] = {}

    def count(node: Any) -> None:
        found = _named_barrier(node) if isinstance(node, tirx.Evaluate) else None
        if found is not None:
            uses[found[1]] = uses.get(found[1], 0) + 1

    post_order_visit(func.body, count)
    splits = []
    for stmt, then_ids, else_ids, nested in ifs:
        if nested or stmt.else_case is None:
            continue
        arrivals: tuple[dict[int, int], dict[int, int]] = ({}, {})
        syncs: tuple[dict[int, int], dict[int, int]] = ({}, {})
        per_side: tuple[dict[int, int], dict[int, int]] = ({}, {})
        for side, (branch, ids) in enumerate(((stmt.then_case, then_ids),
                                               (stmt.else_case, else_ids))):
            top = _top_level(branch)
            for node_id in ids:
                node_stmt = nodes[node_id].stmt
                found = _named_barrier(node_stmt) if node_stmt is not None else None
                if found is None:
                    continue
                kind, bar_id, threads = found
                per_side[side][bar_id] = per_side[side].get(bar_id, 0) + 1
                if threads != block_threads or not any(node_stmt.same_as(t) for t in top):
                    per_side[side][bar_id] += 1  # disqualify: see the rules
                arrivals[side][bar_id] = node_id
                if kind == "sync":
                    syncs[side][bar_id] = node_id
        good = {
            bar_id for bar_id in set(per_side[0]) & set(per_side[1])
            if bar_id > 0 and per_side[0][bar_id] == 1 and per_side[1][bar_id] == 1
            and uses.get(bar_id) == 2
        }
        splits.append(NamedBarrierSplit(
            (then_ids, else_ids),
            tuple({i: n for i, n in side.items() if i in good} for side in arrivals),  # type: ignore[arg-type]
            tuple({i: n for i, n in side.items() if i in good} for side in syncs),  # type: ignore[arg-type]
        ))
    return splits
