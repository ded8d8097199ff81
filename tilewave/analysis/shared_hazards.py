"""The shared-memory hazard verifier: every unsynchronised conflicting pair of accesses.

:func:`find_shared_hazards` builds a control-flow graph of one thread's program (the
body under the thread-binding loops) and, from every shared access, searches forward for
conflicting accesses reachable without passing a synchronisation that orders them:

* a full barrier (``lds_barrier``, ``__syncthreads``, ``bar.sync(id, n)`` with ``n`` the
  block's thread count...) in uniform control flow;
* a split barrier: a ``barrier_signal(id)`` followed later by a ``barrier_wait(id)``;
* for an async write (cp.async, TMA, gather-to-LDS), either of those only counts after
  a wait for the thread's outstanding copies (``wait_async_ops(0)``); a cp.async copy on
  CUDA is retired only by a ``wait_group N`` that follows a commit of its group and has
  at least ``N`` newer committed groups after it; an LDS DMA on AMD counts on the
  vector-memory counter from its issue, so ``wait_async_ops(N)`` (``vmcnt(N)``) retires
  it once ``N`` further copies issued after it (other loads only raise the count);
* between the two branches of a warp-split ``if``: named barriers (``bar.arrive`` /
  ``bar.sync``) under the rules of :mod:`tilewave.analysis.named_barrier_order`.

Two threads that pass no common barrier run concurrently in either order, so a pair is a
hazard when a barrier-free path leads from one access to the other. Threads that diverge
at an ``if`` (a condition on the thread index) run both branches concurrently: every pair
across the two branches is checked. Barriers under divergent control flow synchronise nothing (they
deadlock or are undefined); :func:`find_divergent_barriers` lists them.

Buffers are memory, not names: accesses of two buffers conflict when their bytes may meet
in one allocation (``decl_buffer`` views, StorageRewrite's reuse, the dynamic shared block
TVM's merge lays out), in the verifier's own model (:mod:`tilewave.analysis.storage_model`).

This is deliberately independent of :mod:`tilewave.transforms.insert_shared_barriers`:
it shares only the per-statement facts of :mod:`tilewave.analysis.shared_access` (not its
storage identity).
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tvm import tirx

from tilewave.analysis import mbarrier_parity_check, proxy_fence_check
from tilewave.analysis.hazard_report import HazardKind, SharedHazard
from tilewave.analysis.hopper_ops import (
    descriptor_sources,
    mbarrier_implications,
    mbarrier_wait_loop,
    ring_buffers,
)
from tilewave.analysis.local_scalars import loads_memory, single_assignment_scalars
from tilewave.analysis.named_barrier_order import (
    NamedBarrierSplit,
    SplitIf,
    arrive_barrier_ids,
    barrier_id,
    block_thread_count,
    counted_barrier_threads,
    named_barrier_splits,
    thread_tags,
)
from tilewave.analysis.shared_access import (
    ANY,
    FAR,
    AccessKind,
    AccessScope,
    LoopRange,
    SharedAccess,
    SyncAction,
    SyncKind,
    collect_thread_extents,
    is_leaf_statement,
    may_conflict,
    repeated_loops,
    same_iteration,
    statement_accesses,
    sync_action,
)
from tilewave.analysis.storage_model import SharedMemoryModel
from tilewave.analysis.uniformity import thread_conditions
from tilewave.analysis.uniformity_proof import UniformityProof
from tilewave.analysis.warp_roles import role_of
from tilewave.cyclic_gc import without_cyclic_gc
from tilewave.ir.walker import expect_repeated_walks, statements_of
from tilewave.targets import get_target

__all__ = ["HazardKind", "SharedHazard", "find_divergent_barriers", "find_shared_hazards"]


@dataclass(eq=False)
class _Node:
    accesses: list[SharedAccess] = field(default_factory=list)
    sync: SyncAction | None = None
    divergent: bool = False
    stmt: Any = None
    succ: list[int] = field(default_factory=list)
    #: threads of the warp role running the node (None: not whole warps / not divergent)
    role_threads: int | None = None
    #: a counted barrier over exactly its warp role's threads
    role_barrier: bool = False


class _Graph:
    """Control-flow graph of one thread's program, built from the statement tree."""

    def __init__(self, thread_vars: list[Any], func_name: str | None) -> None:
        self.nodes: list[_Node] = []
        #: node-id ranges of the two branches of each divergent `if`
        self.concurrent: list[tuple[range, range, set[Any]]] = []
        #: every ``if`` on a thread-dependent condition (for the named-barrier model)
        self.split_ifs: list[SplitIf] = []
        #: ``While`` loops around the statement being built
        self._whiles = 0
        #: loop back edges (body end, body start) -> the loop's ``For`` statement
        self.back_edges: dict[tuple[int, int], Any] = {}
        #: loop exit edges (body end, exit) -> the loop's ``For`` statement
        self.exit_edges: dict[tuple[int, int], Any] = {}
        #: loop entry edges (before the loop, body start) -> the loop's ``For`` statement
        self.entry_edges: dict[tuple[int, int], Any] = {}
        #: ``While`` back edges -> the number of serial loops around the ``While`` (loops
        #: deeper than that start a new instance in the next iteration)
        self.while_back_edges: dict[tuple[int, int], int] = {}
        self._thread_vars = thread_vars
        #: which conditions every thread of the block evaluates alike: proved its own way
        #: (two symbolic threads), not with the barrier pass's uniformity analysis
        self.uniformity: UniformityProof | None = None
        #: ``For`` statements that occur at several places (not one identifiable loop)
        self.repeated: set[Any] = set()
        #: wgmma descriptor sources and single-assignment scalars of the function
        self.descriptors: dict[Any, Any] = {}
        self.scalars: dict[Any, Any] = {}
        #: mbarrier -> mbarriers its observers are ordered after (full/empty rings)
        self.implied: dict[Any, set[Any]] = {}
        #: thread index tags, for the warp role of a counted barrier
        self.tags: dict[Any, str] = {}
        #: thread-dependent loops around the statement being built (no warp role there)
        self.divergent_loops = 0
        self.extents: dict[Any, int] = {}
        #: which buffers share memory (set by _build)
        self.memory: SharedMemoryModel | None = None
        self._func_name = func_name

    def new(self, **kwargs: Any) -> int:
        self.nodes.append(_Node(**kwargs))
        return len(self.nodes) - 1

    def edge(self, a: int, b: int) -> None:
        if b not in self.nodes[a].succ:
            self.nodes[a].succ.append(b)

    def build(self, stmt: Any, entry: int, scope: AccessScope, divergent: bool) -> int:
        """Add ``stmt`` after node ``entry``; return its exit node."""
        if isinstance(stmt, tirx.SeqStmt):
            for item in statements_of(stmt):
                entry = self.build(item, entry, scope, divergent)
                if isinstance(item, tirx.Bind):
                    scope = scope.binding(item.var, item.value)
            return entry
        if isinstance(stmt, tirx.IfThenElse):
            return self._build_if(stmt, entry, scope, divergent)
        if isinstance(stmt, tirx.For):
            return self._build_for(stmt, entry, scope, divergent)
        if isinstance(stmt, tirx.While):
            wait = mbarrier_wait_loop(stmt)
            if wait is None:
                return self._build_while(stmt, entry, scope, divergent)
            stmt = wait  # a polling loop acts as its mbarrier wait
        if is_leaf_statement(stmt):
            action = sync_action(stmt)
            role = None
            if (
                divergent
                and not self.divergent_loops
                and action is not None
                and action.is_full_barrier
            ):
                uniform = self.uniformity.is_block_uniform if self.uniformity else None
                role = role_of(
                    thread_conditions(scope, uniform) if uniform else scope.conditions,
                    self.tags,
                    self.extents,
                    self.scalars,
                    scope.resolve,
                    uniform,
                )
            node = self.new(
                accesses=statement_accesses(
                    stmt, scope, self._func_name, self.descriptors, self.scalars
                ),
                sync=action,
                divergent=divergent,
                stmt=stmt,
                role_threads=role.count if role is not None else None,
            )
            self.edge(entry, node)
            return node
        return self.build(stmt.body, entry, scope, divergent)

    def _condition(
        self, cond: Any, stmt: Any, entry: int, scope: AccessScope, divergent: bool
    ) -> int:
        node = self.new(
            accesses=statement_accesses(
                tirx.Evaluate(cond), scope, self._func_name, self.descriptors, self.scalars
            ),
            divergent=divergent,
            stmt=stmt,
        )
        self.edge(entry, node)
        return node

    def _build_if(self, stmt: Any, entry: int, scope: AccessScope, divergent: bool) -> int:
        head = self._condition(stmt.condition, stmt, entry, scope, divergent)
        own = self._divergent(stmt.condition, scope)
        inner = divergent or own
        then_in = self.new()
        self.edge(head, then_in)
        then_out = self.build(stmt.then_case, then_in, scope.assuming(stmt.condition), inner)
        else_in = self.new()
        self.edge(head, else_in)
        else_out = else_in
        if stmt.else_case is not None:
            else_scope = scope.assuming(stmt.condition, False)
            else_out = self.build(stmt.else_case, else_in, else_scope, inner)
        if own or (inner and not self._unchanging(stmt.condition)):
            # threads that took different branches run them concurrently. (In divergent
            # code, a block-uniform condition whose value cannot change during the kernel,
            # one that reads no memory or only parameters nothing writes, sends every thread
            # that reaches it the same way: its branches exclude each other as in uniform
            # code; executions in other iterations meet along the loop's paths. One that
            # loads other memory may be read at different times by different threads, so it
            # stays concurrent.)
            sides = (range(then_in, else_in), range(else_in, len(self.nodes)))
            handed = ring_buffers(
                stmt.then_case,
                stmt.else_case,
                [a for i in range(then_in, len(self.nodes)) for a in self.nodes[i].accesses],
            )
            self.concurrent.append((*sides, handed))
            self.split_ifs.append(
                SplitIf(
                    stmt,
                    sides,
                    divergent,
                    scope.resolve(stmt.condition),
                    repeats=bool(scope.loops) or self._whiles > 0,
                )
            )
        exit_node = self.new()
        self.edge(then_out, exit_node)
        self.edge(else_out, exit_node)
        return exit_node

    def _unchanging(self, cond: Any) -> bool:
        if self.uniformity is None:
            return not loads_memory(cond)
        return self.uniformity.reads_unchanging_memory(cond)

    def _divergent(self, cond: Any, scope: AccessScope) -> bool:
        return self.uniformity is None or not self.uniformity.is_block_uniform(cond, scope)

    def _build_while(self, stmt: Any, entry: int, scope: AccessScope, divergent: bool) -> int:
        """head -> condition -> (body -> head | exit): zero or more iterations."""
        inner = divergent or self._divergent(stmt.condition, scope)
        head = self.new()
        self.edge(entry, head)
        cond = self._condition(stmt.condition, stmt, head, scope, divergent)
        body_in = self.new()
        self.edge(cond, body_in)
        self._whiles += 1
        self.divergent_loops += inner and not divergent
        body_out = self.build(stmt.body, body_in, scope.inside_while(), inner)
        self.divergent_loops -= inner and not divergent
        self._whiles -= 1
        self.edge(body_out, head)
        self.while_back_edges[(body_out, head)] = len(scope.loops)
        exit_node = self.new()
        self.edge(cond, exit_node)
        return exit_node

    def _build_for(self, stmt: Any, entry: int, scope: AccessScope, divergent: bool) -> int:
        if stmt.kind == tirx.ForKind.THREAD_BINDING:
            return self.build(stmt.body, entry, scope, divergent)
        loop = LoopRange.of(stmt, scope, self._thread_vars)
        if stmt in self.repeated:
            loop = LoopRange(loop.var, loop.min, loop.extent)  # not one identifiable loop
        inner = divergent or self._divergent(tirx.Add(stmt.min, stmt.extent), scope)
        body_in = self.new()
        self.edge(entry, body_in)
        if loop.loop is not None:
            self.entry_edges[(entry, body_in)] = loop.loop
        self.divergent_loops += inner and not divergent
        body_out = self.build(stmt.body, body_in, scope.within_loop(loop), inner)
        self.divergent_loops -= inner and not divergent
        ext = loop.extent
        if ext is None or ext > 1:
            self.edge(body_out, body_in)
            if loop.loop is not None:
                self.back_edges[(body_out, body_in)] = loop.loop
        exit_node = self.new()
        self.edge(body_out, exit_node)
        if loop.loop is not None and loop.extent is not None and loop.extent >= 1:
            self.exit_edges[(body_out, exit_node)] = loop.loop
        if ext is None or ext < 1:
            self.edge(entry, exit_node)
        return exit_node


def _hazard_kind(first: SharedAccess, second: SharedAccess) -> HazardKind:
    if first.kind.writes and second.kind.writes:
        return HazardKind.WAW
    return HazardKind.RAW if first.kind.writes else HazardKind.WAR


class _Search:
    """Forward search from one access through synchronisation states."""

    def __init__(self, graph: _Graph, thread_extents: dict[Any, int]) -> None:
        self.graph = graph
        self.thread_extents = thread_extents

    @functools.cached_property
    def _loop_edges(self) -> set[tuple[int, int]]:
        """Edges that enter, leave or go back around a loop (on any other edge iteration
        distances and positions stay as they are); gathered when the search starts."""
        graph = self.graph
        return (
            set(graph.entry_edges)
            | set(graph.back_edges)
            | set(graph.exit_edges)
            | set(graph.while_back_edges)
        )

    @functools.cached_property
    def _landing(self) -> list[int]:
        """Per node, where a path entering it first meets a node that matters: a node
        without shared accesses or synchronisation, with one successor reached by an edge
        that is no loop edge, changes nothing in the search state, so paths skip it (most
        of a kernel's statements touch registers or global memory only)."""
        nodes, loop_edges = self.graph.nodes, self._loop_edges
        landing = list(range(len(nodes)))
        resolved = [False] * len(nodes)
        for first in range(len(nodes)):
            chain: dict[int, None] = {}  # (ordered; a set's lookup: chains can be long)
            at = first
            while not resolved[at] and at not in chain:
                node = nodes[at]
                if node.accesses or node.sync is not None or len(node.succ) != 1:
                    break
                if (at, node.succ[0]) in loop_edges:
                    break
                chain[at] = None
                at = node.succ[0]
            end = landing[at] if resolved[at] else at
            for passed in chain:
                landing[passed], resolved[passed] = end, True
            resolved[first] = True
        return landing

    @functools.cached_property
    def _edges(self) -> list[list[tuple[int, int, bool]]]:
        """Per node, its successors as ``(landing node, successor, loop edge?)``."""
        landing, loop_edges = self._landing, self._loop_edges
        return [
            [(landing[succ], succ, (i, succ) in loop_edges) for succ in node.succ]
            for i, node in enumerate(self.graph.nodes)
        ]

    @functools.cached_property
    def _writing(self) -> list[list[tuple[SharedAccess, bool]]]:
        """Per node, its accesses with whether each writes."""
        return [[(a, a.kind.writes) for a in node.accesses] for node in self.graph.nodes]

    def reachable_conflicts(
        self, start: int, access: SharedAccess, groups: bool = True
    ) -> list[SharedAccess]:
        """Conflicting accesses reachable from ``access`` (made at node ``start``) on a
        path that does not order them; ``groups``: cp.async copies complete through
        commit/wait groups (CUDA), else each async copy is counted by the wait from its
        issue (AMD LDS DMA on ``vmcnt`` / ``loadcnt``)."""
        is_async = access.is_async
        writes = access.kind.writes
        counted = not groups and access.kind is AccessKind.ASYNC_WRITE
        domain = access.async_domain if groups else ("cp.async" if counted else None)
        # a grouped access's group: _OPEN until a commit, then the number of newer groups
        # (a counted copy: the number of copies issued after it)
        group = _OPEN if is_async and domain in _GROUP_DOMAINS else _NO_GROUP
        if counted:
            group = 0
        loops = [lp.loop for lp in access.loops]
        found: dict[int, SharedAccess] = {}  # by id, in the order found
        asked: set[tuple[Any, ...]] = set()
        seen: set[tuple[Any, ...]] = set()
        zero = (0,) * len(loops)
        edges, writing, nodes = self._edges, self._writing, self.graph.nodes
        queue = deque(
            (
                target,
                frozenset(),
                False,
                group,
                self._moved(start, succ, loops, zero),
                self._positioned(start, succ, loops, ()),
            )
            for target, succ, _ in edges[start]
        )
        while queue:
            state = queue.popleft()
            if state in seen:
                continue
            seen.add(state)
            node_id, signalled, landed, group, distance, positions = state
            node = nodes[node_id]
            # accesses already found, pairs where neither access writes (no hazard either
            # way) and pairs already asked at these distances need no question: states that
            # differ only in what synchronisation was seen meet the same accesses again
            iterations: dict[Any, frozenset[int]] | None = None
            exited: dict[Any, int] = {}
            for other, other_writes in writing[node_id]:
                if not (writes or other_writes) or id(other) in found:
                    continue
                question = (id(other), distance, positions)
                if question in asked:
                    continue
                asked.add(question)
                if iterations is None:
                    iterations = {
                        lp: frozenset({d})
                        for lp, d in zip(loops, distance, strict=True)
                        if lp is not None and d < _EXITED
                    }
                    exited = {
                        lp: d - _EXITED
                        for lp, d in zip(loops, distance, strict=True)
                        if lp is not None and d >= _EXITED
                    }
                conflict = _conflict(
                    self.graph.memory,
                    access,
                    other,
                    self.thread_extents,
                    iterations,
                    dict(positions) or None,
                    exited or None,
                )
                if conflict:
                    found[id(other)] = other
            if counted and not landed and any(
                a.kind is AccessKind.ASYNC_WRITE for a in node.accesses
            ):
                group = min(group + 1, _MAX_NEWER)  # a copy issued after it: one count more
            if node.sync is None:
                next_state: tuple[frozenset, bool, int] | None = (signalled, landed, group)
            else:
                next_state = self._step(
                    node, signalled, landed, is_async, group, access, domain, self.graph.implied
                )
                if next_state is None:
                    continue
            for target, succ, loop_edge in edges[node_id]:
                if loop_edge:
                    moved = self._moved(node_id, succ, loops, distance)
                    placed = self._positioned(node_id, succ, loops, positions)
                    queue.append((target, *next_state, moved, placed))
                else:
                    queue.append((target, *next_state, distance, positions))
        return list(found.values())

    def _positioned(
        self, src: int, dst: int, loops: list[Any], positions: tuple[tuple[Any, int], ...]
    ) -> tuple[tuple[Any, int], ...]:
        """Iterations completed of the loops entered after the start access (loops it is
        not in), after the edge ``src->dst``: 0 on entry, one more per back edge (up to
        FAR: that many or more), forgotten on exit; unknown after a ``While``'s back edge."""
        edge = (src, dst)
        if edge not in self._loop_edges:
            return positions
        if edge in self.graph.entry_edges:
            loop = self.graph.entry_edges[edge]
            if any(lp is not None and lp.same_as(loop) for lp in loops):
                return positions
            return (*((k, d) for k, d in positions if not k.same_as(loop)), (loop, 0))
        loop = self.graph.back_edges.get(edge)
        if loop is not None:
            return tuple((k, min(d + 1, FAR) if k.same_as(loop) else d) for k, d in positions)
        loop = self.graph.exit_edges.get(edge)
        if loop is not None:
            return tuple((k, d) for k, d in positions if not k.same_as(loop))
        if edge in self.graph.while_back_edges:
            return tuple((k, ANY) for k, d in positions)
        return positions

    def _moved(
        self, src: int, dst: int, loops: list[Any], distance: tuple[int, ...]
    ) -> tuple[int, ...]:
        """Iteration distances (per loop of the start access) after the edge ``src->dst``:
        a back edge is one iteration more of its loop and a new instance of loops inside;
        an exit edge records the distance from the loop's last iteration (``_EXITED + d``)."""
        if (src, dst) not in self._loop_edges:
            return distance
        depth = self.graph.while_back_edges.get((src, dst))
        if depth is not None:
            # loops inside the While start a new instance; loops the access has exited
            # (outside the While) keep their distance from their last iteration
            inner = tuple(d if d >= _EXITED else ANY for d in distance[depth:])
            return (*distance[:depth], *inner)[: len(loops)]
        exited = self.graph.exit_edges.get((src, dst))
        if exited is not None:
            at = next(
                (i for i, lp in enumerate(loops) if lp is not None and lp.same_as(exited)), None
            )
            if at is None or distance[at] >= _EXITED:
                return distance
            return (*distance[:at], _EXITED + distance[at], *distance[at + 1 :])
        loop = self.graph.back_edges.get((src, dst))
        if loop is None:
            return distance
        at = next((i for i, lp in enumerate(loops) if lp is not None and lp.same_as(loop)), None)
        if at is None or distance[at] >= _EXITED:
            return distance  # (a loop the access has exited: a new instance of it runs)
        # loops inside start a new instance, but one the access has exited keeps its
        # distance from its last iteration: the access ran there, whatever runs next
        inner = tuple(d if d >= _EXITED else ANY for d in distance[at + 1 :])
        return (*distance[:at], min(distance[at] + 1, FAR), *inner)

    @staticmethod
    def _step(
        node: _Node,
        signalled: frozenset,
        landed: bool,
        is_async: bool,
        group: int,
        access: SharedAccess,
        domain: str | None,
        implied: dict[Any, set[Any]],
    ) -> tuple[frozenset, bool, int] | None:
        """The state after ``node``, or ``None`` when it orders the access before what
        follows."""
        sync = node.sync
        if sync is None:
            return signalled, landed, group
        if group != _NO_GROUP and not landed and sync.domain == domain:
            # commits and group waits are per thread: they count in divergent code too
            if sync.kind is SyncKind.ASYNC_COMMIT or sync.commits:
                group = 0 if group == _OPEN else min(group + 1, _MAX_NEWER)
            if sync.kind is SyncKind.ASYNC_WAIT and sync.groups and group != _OPEN:
                landed = group >= sync.arg
        if sync.kind is SyncKind.MBAR_ARRIVE:
            # point to point, in any control flow: the arriving threads' completed
            # accesses are ordered before whoever observes the phase
            if landed or not is_async:
                return signalled | {("mbarrier", sync.barrier)}, landed, group
            return signalled, landed, group
        if sync.kind is SyncKind.MBAR_WAIT:
            if domain == "mbarrier" and (
                sync.barrier.same_as(access.completes_on)
                or access.completes_on in implied.get(sync.barrier, ())
            ):
                return None  # the TMA's bytes are counted by the phase the wait observes
            if ("mbarrier", sync.barrier) in signalled:
                return None
            return signalled, landed, group
        if node.divergent and not node.role_barrier:
            return signalled, landed, group
        if group == _NO_GROUP and domain != "mbarrier" and sync.completes_async:
            landed = True
        ordered = landed or not is_async
        if sync.is_full_barrier and ordered:
            return None
        if sync.kind is SyncKind.SIGNAL and ordered:
            return signalled | {sync.arg}, landed, group
        if sync.kind is SyncKind.WAIT and sync.arg in signalled:
            return None
        return signalled, landed, group


#: a grouped access not committed yet; an access that is no group member
_OPEN, _NO_GROUP = -1, -2
#: async units retired through commit/wait groups
_GROUP_DOMAINS = frozenset({"cp.async", "wgmma", "bulk"})
#: newer groups counted at most (fewer only makes a wait look weaker: sound)
_MAX_NEWER = 8
#: distances at or above this mark a loop that has exited (distance from its last iteration)
_EXITED = 16


def _conflict(
    memory: SharedMemoryModel | None,
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: dict[Any, int],
    iterations: dict[Any, frozenset[int]] | None = None,
    positions: dict[Any, int] | None = None,
    finished: dict[Any, int] | None = None,
) -> bool:
    """``may_conflict`` for accesses of one buffer, the storage model for two buffers."""
    if may_conflict(a, b, thread_extents, iterations, positions, finished):
        return True
    return memory is not None and memory.conflict(
        a, b, thread_extents, iterations, positions, finished
    )


def _is_sync(stmt: Any) -> bool:
    """A ``bar.sync``/``barrier.sync`` (not an arrive)."""
    value = getattr(stmt, "value", None)
    name = getattr(getattr(value, "op", None), "name", "")
    return "sync" in name and "arrive" not in name


def _build(func: Any) -> tuple[_Graph, dict[Any, int]]:
    expect_repeated_walks(func.body)  # (the per-kernel analyses below each walk it)
    thread_extents = collect_thread_extents(func)
    name = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else None
    graph = _Graph(list(thread_extents), str(name) if name is not None else None)
    graph.repeated = repeated_loops(func.body)
    graph.uniformity = UniformityProof(func)
    graph.descriptors = descriptor_sources(func.body)
    graph.scalars = single_assignment_scalars(func)
    graph.implied = mbarrier_implications(func.body)
    graph.tags = thread_tags(func)
    graph.extents = thread_extents
    graph.memory = SharedMemoryModel(func)
    entry = graph.new()
    graph.build(func.body, entry, AccessScope(), False)
    block_threads = block_thread_count(thread_tags(func), thread_extents)
    arrive_ids = arrive_barrier_ids(func)
    for node in graph.nodes:
        threads = counted_barrier_threads(node.stmt)
        if threads is not None and threads != block_threads:
            # a counted barrier (bar.sync(id, n)) releases groups of n threads: only with
            # n = the whole block, or inside a warp role of exactly n threads (a barrier of
            # that role), does it order accesses
            if (
                node.role_threads == threads
                and _is_sync(node.stmt)
                and barrier_id(node.stmt) not in arrive_ids
            ):
                node.role_barrier = True
            else:
                node.sync = None
    return graph, thread_extents


@without_cyclic_gc
def find_shared_hazards(
    func: Any, target: Any = None, protocol: bool = True
) -> list[SharedHazard]:
    """Every pair of shared accesses that two threads may perform unsynchronised.

    Args:
        func: a ``tvm.tirx.PrimFunc`` whose threads are bound with ``T.thread_binding``.
        target: a tilewave target (name, ``tvm.target.Target`` or ``TargetInfo``): how
            async copies complete (CUDA: cp.async commit/wait groups; AMD: each LDS DMA
            counted by ``wait_async_ops(N)`` from its issue); ``None``: CUDA's semantics.
        protocol: also check Hopper's async protocol: missing ``fence.proxy.async`` /
            ``fence.mbarrier_init`` (:mod:`tilewave.analysis.proxy_fence_check`) and
            wrong ``try_wait.parity`` (:mod:`tilewave.analysis.mbarrier_parity_check`).

    Returns:
        one :class:`SharedHazard` per unordered pair of conflicting accesses, including
        pairs inside one statement (``S[tx] = S[tx + 1]``). Accesses by one statement
        instance to a single element from all threads (``S[0] = x`` outside loops) are
        not reported: no barrier can order them.

    Raises:
        UnknownTargetError: ``target`` is not a tilewave target.
        UnclassifiedOpError: a call addresses a shared buffer through an unknown op.
    """
    groups = target is None or get_target(target).is_cuda
    graph, thread_extents = _build(func)
    search = _Search(graph, thread_extents)
    splits = named_barrier_splits(func, graph.split_ifs, thread_extents, graph.nodes)
    node_of = {id(acc): i for i, node in enumerate(graph.nodes) for acc in node.accesses}

    def named_ordered(first: SharedAccess, second: SharedAccess, later: bool) -> bool:
        a, b = node_of[id(first)], node_of[id(second)]
        return any(split.orders(a, b, later) for split in splits)

    hazards: list[SharedHazard] = []
    reported: set[tuple[int, int]] = set()

    def report(first: SharedAccess, second: SharedAccess) -> None:
        key = tuple(sorted((id(first), id(second))))
        if key in reported:
            return
        reported.add(key)  # type: ignore[arg-type]
        hazards.append(SharedHazard(first.buffer_name, _hazard_kind(first, second), first, second))

    for node_id, node in enumerate(graph.nodes):
        for i, access in enumerate(node.accesses):
            for later in node.accesses[i + 1 :]:
                same = same_iteration(access, later)
                if _conflict(graph.memory, access, later, thread_extents, same):
                    report(access, later)
            for other in search.reachable_conflicts(node_id, access, groups):
                # a path from one branch of a split `if` into the other is a later execution
                if not named_ordered(access, other, later=True):
                    report(access, other)
    for then_ids, else_ids, handed in graph.concurrent:
        for a in (acc for i in then_ids for acc in graph.nodes[i].accesses):
            for b in (acc for i in else_ids for acc in graph.nodes[i].accesses):
                if a.buffer in handed or b.buffer in handed:
                    continue  # passed between the branches through their mbarrier ring
                # other iterations' pairs are found by the search around the back edge
                if _conflict(graph.memory, a, b, thread_extents, same_iteration(a, b)) and not (
                    named_ordered(a, b, later=False) or named_ordered(b, a, later=False)
                ):
                    report(a, b)
    if protocol:  # Hopper's async protocol: fences and mbarrier parities
        hazards += proxy_fence_check.missing_fence_hazards(graph.nodes, thread_extents)
        hazards += mbarrier_parity_check.mbarrier_parity_hazards(func)
    return hazards


def find_divergent_barriers(func: Any) -> list[Any]:
    """Barrier statements that sit under thread-dependent control flow (a deadlock risk),
    except the named barriers of warp-split ``if``\\ s that the verifier's model trusts
    (:mod:`tilewave.analysis.named_barrier_order`)."""
    graph, thread_extents = _build(func)
    splits: list[NamedBarrierSplit] = named_barrier_splits(
        func, graph.split_ifs, thread_extents, graph.nodes
    )
    modelled = {n for split in splits for n in split.barrier_nodes()}
    return [
        n.stmt
        for i, n in enumerate(graph.nodes)
        if i not in modelled
        and n.divergent
        and (
            (n.sync is not None and n.sync.kind is not SyncKind.ASYNC_WAIT)
            or counted_barrier_threads(n.stmt) is not None
        )
    ]
