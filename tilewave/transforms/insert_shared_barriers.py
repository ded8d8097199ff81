"""``InsertSharedBarriers``: order conflicting shared-memory (LDS) accesses with barriers.

The pass walks the kernel in program order keeping the *pending* accesses: those made
since the last barrier on some path. When a statement's access may conflict with a
pending one (RAW, WAR, WAW; an atomic is both a read and a write; see
:func:`tilewave.analysis.shared_access.may_conflict`), it inserts a barrier before it:

* basic-barrier targets (gfx942, gfx950, CUDA by default): ``T.tilewave.lds_barrier()``
  right before the consumer;
* split-barrier targets (gfx1200/gfx1201, or CUDA with ``barrier_style="split"``):
  ``T.tilewave.barrier_wait(-1)`` before the consumer and ``T.tilewave.barrier_signal(-1)``
  right after the last statement of the same block that touches shared memory, so the
  work between them overlaps the barrier. Each signal and its wait sit in one block, so
  they are balanced on every path;
* after an async write (cp.async, TMA, gather-to-LDS) ``T.tilewave.wait_async_ops(0)``
  goes before the barrier.

Loops are analysed to a fixed point (the state at the loop head is the entry state joined
with the state at the end of the body), so a write at the end of iteration i and a read at
the start of iteration i+1 get a barrier. A barrier that only guards accesses from before
the loop is placed before the loop when that saves barriers inside it. Barriers never go
into thread-divergent code: a conflict with accesses before a divergent ``if``/loop puts
the barrier before it; a conflict inside it raises :class:`DivergentBarrierError`.
Existing barriers, split barriers and async waits are understood and kept, so the pass is
idempotent.

Example::

    func = insert_shared_barriers(func, target="gfx942")
    mod = InsertSharedBarriers(target="gfx1200")(mod)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis.hopper_ops import (
    descriptor_sources,
    mbarrier_implications,
    mbarrier_wait_loop,
    ring_buffers,
)
from tilewave.analysis.index_enumeration import MergedPoints
from tilewave.analysis.local_scalars import single_assignment_scalars
from tilewave.analysis.named_barrier_order import (
    arrive_barrier_ids,
    barrier_id,
    counted_barrier_threads,
    named_barrier_ids,
    thread_tags,
)
from tilewave.analysis.shared_access import (
    ANY_MEMORY,
    AccessScope,
    EarlierAccess,
    LoopRange,
    SharedAccess,
    SyncAction,
    SyncKind,
    collect_thread_extents,
    is_leaf_statement,
    may_conflict,
    nested_statements,
    proven_apart_together,
    repeated_loops,
    same_iteration,
    statement_accesses,
    sync_action,
    touches_shared_or_sync,
    unrelated_points,
)
from tilewave.analysis.storage_identity import storage_map
from tilewave.analysis.uniformity import UniformityAnalysis, thread_conditions
from tilewave.analysis.warp_roles import WarpRole, role_of
from tilewave.cyclic_gc import without_cyclic_gc
from tilewave.errors import (  # DivergentBarrierError re-exported: it used to live here
    DivergentBarrierError,
    MalformedKernelError,
    PassOptionError,
    TilewaveError,
    where,
)
from tilewave.ir.ops import call_op
from tilewave.ir.walker import (
    expect_repeated_walks,
    rebuild,
    seq_stmt,
    statements_of,
)
from tilewave.targets import TargetInfo, get_target
from tilewave.transforms.async_groups import commit_copy_runs, waits_on_groups
from tilewave.transforms.barrier_state import (
    GROUP_DOMAINS,
    MAX_NEWER_GROUPS,
    OPEN_GROUP,
    Barrier,
    Instance,
    Pending,
    State,
    amd_async_domain,
    committed,
    join,
    merge,
    retired,
    state_around,
    state_around_while,
)
from tilewave.transforms.barrier_waits import barrier_waiting_for, joins_that_matter
from tilewave.transforms.named_barriers import (
    MAX_NAMED_BARRIERS,
    named_sync,
    strip_named_barriers,
    warp_split,
)

__all__ = ["DivergentBarrierError", "InsertSharedBarriers", "insert_shared_barriers"]

PASS_NAME = "InsertSharedBarriers"
#: the barrier id of the whole workgroup (gfx12 ``s_barrier_signal -1``)
WORKGROUP_BARRIER = -1
_MAX_FIXPOINT_ROUNDS = 32
_MBARRIER_SYNC = (SyncKind.MBAR_ARRIVE, SyncKind.MBAR_WAIT)
#: pairs without a remembered verdict from which :meth:`_Placer.blocks_any` merges points
#: (fewer: pair by pair, where the proof caches answer most)
_MERGED_MEMBERS = 8
#: landed lists from this long meet a fresh access through :meth:`_Placer._landed_candidates`
#: (shorter ones are screened directly: a split remembered for them seldom fits the next)
_SPLIT_FROM = 32
#: what :meth:`_Placer._landed_candidates` / :meth:`_Placer._landed_split` found in a landed
#: list: (that list, the instances that may race by kind and memory, how many of those are
#: split, the mergeable ones' points, the others)
_Split = tuple[list[Instance], list[Instance], int, list[Any], list[Instance]]


class _ScopeFacts:
    """What the placer remembers about the leaf statements of one scope."""

    __slots__ = ("accesses", "inert")

    def __init__(self) -> None:
        #: each leaf's accesses (every fixed-point round then sees the same objects)
        self.accesses: dict[Any, list[SharedAccess]] = {}
        #: leaves with no shared access and no synchronisation: every visit passes them
        #: through unchanged, so statement lists skip them without a visit
        self.inert: set[Any] = set()


#: one child of a statement list that :meth:`_Placer._visit_planned` visits: its position,
#: the child and its class, its scope and that scope's facts, the scope after it
_Step = tuple[int, Any, type, AccessScope, _ScopeFacts, AccessScope]


class _Placer:
    """Walks one PrimFunc body and decides where barriers go."""

    def __init__(self, func: tirx.PrimFunc, target: TargetInfo, split: bool) -> None:
        self.func_name = _func_name(func)
        self.thread_extents = collect_thread_extents(func)
        self.split = split
        #: accesses of ``if`` / ``while`` conditions by (owner, scope); a leaf's are in
        #: its scope's :class:`_ScopeFacts`
        self._access_cache: dict[Any, list[SharedAccess]] = {}
        self._facts: dict[AccessScope, _ScopeFacts] = {}
        self._repeated = repeated_loops(func.body)
        self.uniformity = UniformityAnalysis(func)
        self.descriptors = descriptor_sources(func.body)
        self.implied = mbarrier_implications(func.body)
        self.scalars = single_assignment_scalars(func)
        #: views of one allocation and merged dynamic shared buffers are one memory
        self.storage = storage_map(func)
        self.target = target
        self._is_cuda = target.is_cuda
        #: named-barrier ids ``(raw, war)`` of each warp-split ``if`` (reused every round)
        self._named_ids: dict[Any, tuple[int, int | None]] = {}
        self._loop_depth = 0
        #: the statement lists being visited, innermost last: (list statement, its
        #: children, the position after the child being visited, the scope there)
        self._upcoming: list[tuple[Any, list[Any], int, AccessScope]] = []
        #: :meth:`later_accesses` by (list statement, position, scope)
        self._later: dict[tuple[Any, int, AccessScope], list[SharedAccess]] = {}
        #: :meth:`_visit_list`'s plan of each statement list by (list, scope)
        self._plans: dict[tuple[Any, AccessScope], list[_Step]] = {}
        #: warp roles per scope, and the named-barrier id given to each role
        self.thread_tags = thread_tags(func)
        self._roles: dict[AccessScope, WarpRole | None] = {}
        self._divergent_loops = 0
        self._role_ids: dict[WarpRole, int] = {}
        self._user_ids = named_barrier_ids(func)
        self._arrive_ids = arrive_barrier_ids(func)
        #: results of serial loops already visited with the same entry state
        self._loop_memo: dict[Any, tuple[list[Any], State]] = {}
        #: ``may_conflict`` verdicts by new access, then pending instance
        self._verdicts: dict[SharedAccess, dict[Instance, bool]] = {}
        #: instances moved around a loop by (instance, loop, plain record), for the
        #: fixed-point rounds (:func:`state_around`)
        self._moved: dict[tuple[Instance, Any, bool], Instance] = {}
        #: ``sync_action`` of leaf statements and the sync counts of statement trees, by
        #: node (fixed-point rounds and rewritten bodies meet the same nodes again)
        self._actions: dict[Any, SyncAction | None] = {}
        #: access lists already checked for races inside their statement, by id
        self._checked: dict[int, list[SharedAccess]] = {}
        #: ``if`` statements (by node) and scopes whose branches were found not to race
        self._apart: set[tuple[Any, AccessScope]] = set()
        #: the scope after a ``Bind`` / inside a loop, per (statement, outer scope)
        self._scopes: dict[tuple[Any, AccessScope], AccessScope] = {}
        self._counts: dict[int, tuple[tuple[int, int], Any]] = {}
        #: :meth:`_stepped` moves by (instance, loop, entering)
        self._steps: dict[tuple[Instance, Any, bool], Instance] = {}
        #: :meth:`issued` of each access
        self._issued: dict[SharedAccess, tuple[Instance, Pending]] = {}
        #: the records :meth:`issued` made, each value once
        self._records: dict[Pending, Pending] = {}
        #: the record of a synchronous access (shared by all of them)
        self._plain = Pending(True, frozenset())
        #: merged points of landed accesses (:meth:`blocks_any`)
        self._merged = MergedPoints()
        #: :meth:`_landed_candidates`' last answer by (kind, memory, buffer, rank), with its
        #: landed list and :meth:`_landed_split`'s split of it
        self._splits: dict[tuple[Any, ...], _Split] = {}
        self._records[self._plain] = self._plain

    # -- facts ---------------------------------------------------------------------------
    def sync_action(self, stmt: Any) -> SyncAction | None:
        """:func:`~tilewave.analysis.shared_access.sync_action` of ``stmt``, remembered."""
        if stmt not in self._actions:
            self._actions[stmt] = sync_action(stmt)
        return self._actions[stmt]

    def sync_counts(self, stmt: Any) -> tuple[int, int]:
        """The barriers (full barriers and split-barrier waits) under ``stmt`` and how much
        its async waits hold back (``wait(N)`` counts ``MAX_NEWER_GROUPS - N``);
        expressions are not entered: every synchronisation is an ``Evaluate`` statement.
        Remembered per node, so a rewritten body only costs its new statements."""
        key = hash(stmt)  # (by handle: each read of a field is a new Python object)
        found = self._counts.get(key)
        if found is not None:
            return found[0]
        if type(stmt) is tirx.Evaluate:
            counts = _action_cost(self.sync_action(stmt))
        else:
            barriers = strength = 0
            known = self._counts
            for child in nested_statements(stmt):
                found = known.get(hash(child))  # (a rebuilt list: most children are known)
                b, w = found[0] if found is not None else self.sync_counts(child)
                barriers += b
                strength += w
            counts = (barriers, strength)
        # (the node kept alive with its counts: its handle cannot come to name another)
        self._counts[key] = (counts, stmt)
        return counts

    def sync_cost(self, new: Any, old: Any) -> tuple[int, int]:
        """What a loop body rewritten from ``old`` to ``new`` costs per iteration: barriers
        added, then how much the added async waits hold back (``wait(N)`` costs less the
        more groups it leaves in flight)."""
        (new_barriers, new_strength), (old_barriers, old_strength) = (
            self.sync_counts(new),
            self.sync_counts(old),
        )
        return (new_barriers - old_barriers, new_strength - old_strength)

    def facts(self, scope: AccessScope) -> _ScopeFacts:
        """What is remembered about the leaves of ``scope`` (one object per scope value:
        statement lists look it up once, not once per statement)."""
        found = self._facts.get(scope)
        if found is None:
            found = self._facts[scope] = _ScopeFacts()
        return found

    def accesses(self, stmt: Any, scope: AccessScope, owner: Any = None) -> list[SharedAccess]:
        """Accesses of a leaf statement, or of the condition of ``owner`` (an ``if``);
        cached so every fixed-point round sees the same access objects."""
        if owner is None:
            table, key = self.facts(scope).accesses, stmt
        else:
            table, key = self._access_cache, (owner, scope)
        found = table.get(key)
        if found is None:
            found = table[key] = statement_accesses(
                stmt, scope, self.func_name, self.descriptors, self.scalars, self.storage
            )
        return found

    def condition_accesses(self, owner: Any, scope: AccessScope) -> list[SharedAccess]:
        """Accesses of the condition of ``owner`` (an ``if`` or ``while``), cached."""
        found = self._access_cache.get((owner, scope))
        if found is None:
            found = self.accesses(tirx.Evaluate(owner.condition), scope, owner=owner)
        return found

    def all_accesses(self, stmt: Any, scope: AccessScope) -> list[SharedAccess]:
        """Every access under ``stmt`` (conditions included)."""
        kind = type(stmt)  # (TIR node classes have no subclasses: exact type tests)
        if kind is tirx.SeqStmt:
            out = []
            for child in statements_of(stmt):
                out += self.all_accesses(child, scope)
                if type(child) is tirx.Bind:
                    scope = self.after_bind(child, scope)
            return out
        if kind is tirx.IfThenElse:
            out = self.condition_accesses(stmt, scope)
            out = out + self.all_accesses(stmt.then_case, scope.assuming(stmt.condition))
            if stmt.else_case is not None:
                out = out + self.all_accesses(stmt.else_case, scope.assuming(stmt.condition, False))
            return out
        if kind is tirx.For:
            return self.all_accesses(stmt.body, self._scope_inside(stmt, scope))
        if kind is tirx.While:
            out = self.condition_accesses(stmt, scope)
            return out + self.all_accesses(stmt.body, scope)
        if is_leaf_statement(stmt):
            return self.accesses(stmt, scope)
        return self.all_accesses(stmt.body, scope)

    def conflicts(
        self,
        access: SharedAccess,
        state: Iterable[Instance],
        first: bool = False,
        unasked: list[Instance] | None = None,
    ) -> list[Instance]:
        """The pending instances ``access`` may race with (``may_conflict`` verdicts are
        remembered per pair: fixed-point rounds and look-aheads ask the same pairs again);
        ``first``: stop at the first one found; ``unasked``: only remembered verdicts count,
        the instances without one are appended there."""
        writes = access.kind.writes
        memory = access.memory_key
        anywhere = memory is ANY_MEMORY
        verdicts = self._verdicts.get(access)
        if verdicts is None:
            verdicts = self._verdicts[access] = {}
        if not first and unasked is None and isinstance(state, list) and len(state) > 1:
            self._screen_together(access, state, verdicts)
        found = []
        for inst in state:  # (the pending accesses of every statement: kept plain)
            other = inst.access
            if not (writes or other.kind.writes):
                continue
            key = other.memory_key
            if not (anywhere or key is ANY_MEMORY or key == memory):
                continue
            verdict = verdicts.get(inst)
            if verdict is None:
                if unasked is not None:
                    unasked.append(inst)
                    continue
                verdict = verdicts[inst] = self._may_conflict(inst, access)
            if verdict:
                found.append(inst)
                if first:
                    break
        return found

    def _screen_together(
        self, access: SharedAccess, state: list[Instance], verdicts: dict[Instance, bool]
    ) -> None:
        """Remember "no conflict" for the pending instances without a verdict that
        :func:`proven_apart_together` keeps apart from ``access`` (several in-flight copies
        meet each new access: they are screened together instead of pair by pair)."""
        if access.indices is None:
            return
        writes = access.kind.writes
        buffer = hash(access.buffer)  # (a node's hash is its handle: the same buffer)
        pending = [
            inst
            for inst in state
            if inst not in verdicts
            and (writes or inst.access.kind.writes)
            and hash(inst.access.buffer) == buffer
            and inst.access.indices is not None
        ]
        if len(pending) < 2:
            return
        earlier = [
            EarlierAccess(
                inst.access,
                (inst.carried, inst.positions, inst.finished),
                inst.iterations(),
                dict(inst.positions),
                dict(inst.finished),
            )
            for inst in pending
        ]
        proven = proven_apart_together(access, earlier, self.thread_extents)
        for inst, apart in zip(pending, proven, strict=True):
            if apart:
                verdicts[inst] = False

    def blocks_any(self, new: list[SharedAccess], landed: list[Instance]) -> bool:
        """Whether an access of ``new`` may race with a ``landed`` instance. Remembered
        verdicts first; where many pairs are new, plain accesses that read no loop and have
        small index spaces (:func:`unrelated_points`) meet all such instances of their
        buffer in one comparison of merged points (the answer of every pair's
        ``may_conflict``, at the cost of one: a long run of stores between barriers, such
        as an unrolled epilogue, is otherwise asked pair by pair)."""
        for access in new:
            if len(landed) >= _SPLIT_FROM and not self._verdicts.get(access):
                # nothing remembered for this access: every instance is unasked, and a run
                # of landed stores is split the way it was one store ago
                key, candidates = self._landed_candidates(access, landed)
                points = (
                    unrelated_points(access, self.thread_extents)
                    if len(candidates) >= _MERGED_MEMBERS
                    else None
                )
                if points is not None:
                    group, unasked = self._landed_split(key)
                    if self._merged.overlaps_any(tuple(group), points, True):
                        return True
                    if unasked and self.conflicts(access, unasked, first=True):
                        return True
                    continue
            unasked = []
            if self.conflicts(access, landed, first=True, unasked=unasked):
                return True
            if len(unasked) >= _MERGED_MEMBERS:
                points = unrelated_points(access, self.thread_extents)
                if points is not None:
                    group_points, unasked = self.merged_members(access, unasked)
                    if self._merged.overlaps_any(group_points, points, True):
                        return True
            if unasked and self.conflicts(access, unasked, first=True):
                return True
        return False

    def _landed_candidates(
        self, access: SharedAccess, landed: list[Instance]
    ) -> tuple[tuple[Any, ...], list[Instance]]:
        """For an access with no remembered verdict: the instances of ``landed`` that may
        race with it by kind and memory, with the key under which :meth:`_landed_split`
        finds them. Remembered per key, (kind, memory, buffer, rank), for the last list
        seen: between barriers each statement lands after the previous one's check, so
        the next list extends that one and only its new instances are looked at."""
        writes = access.kind.writes
        memory = access.memory_key
        key = (writes, memory, hash(access.buffer), len(access.indices or ()))
        found = self._splits.get(key)
        if found is not None and found[0] == landed[: len(found[0])]:
            seen, candidates, split, group, rest = found
            candidates = list(candidates)
        else:
            seen, candidates, split, group, rest = [], [], 0, [], []
        anywhere = memory is ANY_MEMORY
        for inst in landed[len(seen) :]:
            other = inst.access
            if not (writes or other.kind.writes):
                continue
            other_key = other.memory_key
            if anywhere or other_key is ANY_MEMORY or other_key == memory:
                candidates.append(inst)
        # (``landed`` is the caller's own list, built for this check: kept, not copied)
        self._splits[key] = (landed, candidates, split, group, rest)
        return key, candidates

    def _landed_split(self, key: tuple[Any, ...]) -> tuple[list[Any], list[Instance]]:
        """The candidates :meth:`_landed_candidates` last found under ``key`` split as
        :meth:`merged_members` splits them (the points of the mergeable ones, the other
        instances), only those not split before looked at (asked only when the split is
        used: finding an instance's points may enumerate its index space)."""
        landed, candidates, done, group, rest = self._splits[key]
        group, rest = list(group), list(rest)
        self._sort_members(candidates[done:], key[2], key[3], group, rest)
        self._splits[key] = (landed, candidates, len(candidates), group, rest)
        return group, rest

    def merged_members(
        self, access: SharedAccess, unasked: list[Instance]
    ) -> tuple[tuple[Any, ...], list[Instance]]:
        """The points of the instances of ``unasked`` (landed, each able to race with
        ``access``) that :meth:`blocks_any` compares with ``access`` at once (same buffer,
        plain, reading no loop), and the other instances."""
        group: list[Any] = []
        rest: list[Instance] = []
        self._sort_members(unasked, hash(access.buffer), len(access.indices or ()), group, rest)
        return tuple(group), rest

    def _sort_members(
        self,
        instances: Iterable[Instance],
        buffer: int,
        ndim: int,
        group: list[Any],
        rest: list[Instance],
    ) -> None:
        """Append to ``group`` the points of each of ``instances`` that meets an access of
        the buffer with handle ``buffer`` and rank ``ndim`` by merged points (same buffer
        and rank, plain, reading no loop), and the other instances to ``rest``."""
        extents = self.thread_extents
        for inst in instances:
            other = inst.access
            points = (
                unrelated_points(other, extents)
                if hash(other.buffer) == buffer and len(other.indices or ()) == ndim
                else None
            )
            if points is None:
                rest.append(inst)
            else:
                group.append(points)

    def _may_conflict(self, inst: Instance, access: SharedAccess) -> bool:
        """``may_conflict`` of a pending instance and a new access."""
        return may_conflict(
            inst.access,
            access,
            self.thread_extents,
            inst.iterations(),
            inst.position_map() if inst.positions else None,
            dict(inst.finished) if inst.finished else None,
        )

    def after_bind(self, stmt: Any, scope: AccessScope) -> AccessScope:
        """The scope of the statements that follow the ``Bind`` ``stmt`` in its statement
        list (one object per statement and scope: rounds and look-aheads reuse it). Other
        statements leave the scope as it is: callers test for ``Bind`` themselves, as
        statement lists are walked often and most statements are not bindings."""
        key = (stmt, scope)
        found = self._scopes.get(key)
        if found is None:
            found = self._scopes[key] = scope.binding(stmt.var, stmt.value)
        return found

    def _scope_inside(self, loop: Any, scope: AccessScope) -> AccessScope:
        if loop.kind == tirx.ForKind.THREAD_BINDING:
            return scope
        key = (loop, scope)
        found = self._scopes.get(key)
        if found is None:
            lr = LoopRange.of(loop, scope, list(self.thread_extents))
            if lr.loop is not None and lr.loop in self._repeated:
                lr = replace(lr, loop=None)  # one For at two places: not one loop instance
            found = self._scopes[key] = scope.within_loop(lr)
        return found

    def is_divergent(self, expr: Any, scope: AccessScope) -> bool:
        """Whether control flow on ``expr`` may differ between threads (not proved
        block-uniform by :mod:`tilewave.analysis.uniformity`)."""
        return not self.uniformity.is_block_uniform(expr, scope)

    def loop_is_divergent(self, loop: Any, scope: AccessScope) -> bool:
        """Whether threads may run ``loop`` different numbers of times (its ``min + extent``
        is not block-uniform); a constant trip count is the same in every thread, which
        the analysis would find by evaluating the sum in every thread."""
        if type(loop.min) is tirx.IntImm and type(loop.extent) is tirx.IntImm:
            return False
        return self.is_divergent(tirx.Add(loop.min, loop.extent), scope)

    # -- barrier decisions ---------------------------------------------------------------
    def barrier_before(
        self, new: Iterable[SharedAccess], state: State, strict: bool = True
    ) -> tuple[Barrier | None, State]:
        """The barrier ``new`` accesses need after ``state``, and the state after it.

        A pending async copy must land before the barrier: the barrier gets a commit when
        the copy's group is still open and ``wait_async_ops(N)`` with the largest ``N``
        that retires it, so younger groups stay in flight. Copies that the rest of the
        current statement list reads are waited for at the same barrier (the usual
        pipelined schedule: one wait + barrier serves both the write-after-read of the next
        prefetch and the read of the current stage)."""
        # which instances block matters only for copies still in flight (their waits) and
        # mbarrier initialisations (the fence); any one landed blocker suffices otherwise,
        # as the barrier orders every landed access
        new = list(new)
        decisive: list[Instance] = []
        rest: list[Instance] = []
        for inst, record in state.items():
            if record.landed and inst.access.mbarrier_access != "init":
                rest.append(inst)
            else:
                decisive.append(inst)
        blocking: set[Instance] = set()
        # in-flight copies are asked about only while their joining could change the waits
        # (`joins_that_matter`); mbarrier initialisations and TMA loads always (the fence,
        # the refusal); an instance found blocking is not asked about again
        copies = [
            inst
            for inst in decisive
            if not state[inst].landed
            and state[inst].domain != "mbarrier"
            and inst.access.mbarrier_access != "init"
        ]
        copy_set = set(copies)
        always = [inst for inst in decisive if inst not in copy_set]
        for a in new if decisive else ():
            unlanded = {inst for inst in blocking if not state[inst].landed}
            open_instances = [inst for inst in always if inst not in blocking]
            open_instances += joins_that_matter(state, unlanded, copies)
            if not open_instances:
                break
            blocking.update(self.conflicts(a, open_instances))
        if not blocking and not self.blocks_any(new, rest):
            return None, state
        unlanded = {inst for inst in blocking if not state[inst].landed}
        in_flight = [
            inst for inst in state if not state[inst].landed and state[inst].domain != "mbarrier"
        ]
        if in_flight and self._upcoming:
            # an in-flight copy joins when any later access conflicts with it: ask only
            # about copies not already waited for, and stop once every one has joined
            later = self.later_accesses()
            open_copies = joins_that_matter(state, unlanded, in_flight)
            for a in later if open_copies else ():
                joined = self.conflicts(a, open_copies)
                if joined:
                    unlanded.update(joined)
                    open_copies = joins_that_matter(state, unlanded, open_copies)
                    if not open_copies:
                        break
        fence_init = any(i.access.mbarrier_access == "init" for i in blocking)
        if not unlanded:
            return Barrier(fence_init=fence_init), {i: p for i, p in state.items() if not p.landed}
        unfixable = {i for i in unlanded if state[i].domain == "mbarrier"}
        if unfixable and strict:
            inst = next(iter(unfixable))
            raise MalformedKernelError(
                f"{PASS_NAME}: `{inst.access.describe()}` is written by a TMA load that "
                f"completes on mbarrier `{state[inst].barrier.name}`, and a later access "
                "may use it before any wait on that mbarrier "
                f"{where(self.func_name, inst.access.stmt)}. A barrier cannot make a TMA "
                "load land: wait on its mbarrier phase (mbarrier.try_wait.parity) before "
                "using the tile."
            )
        # a what-if (hoisting): those stay pending for a wait later
        return barrier_waiting_for(state, unlanded - unfixable, fence_init)

    def sync(
        self, stmt: Any, state: State, divergent: bool, scope: AccessScope | None = None
    ) -> State | None:
        """Apply an existing synchronisation statement to ``state`` (None: not one). In a
        warp role, a counted barrier over exactly the role's threads is a full barrier."""
        action = self.sync_action(stmt)
        if action is None:
            return None
        if divergent and action.is_full_barrier and scope is not None:
            role = self.role(scope)
            if (
                role is not None
                and counted_barrier_threads(stmt) == role.count
                and barrier_id(stmt) not in self._arrive_ids
            ):
                divergent = False  # a barrier over exactly this role's threads
        per_thread = (
            SyncKind.ASYNC_WAIT,
            SyncKind.ASYNC_COMMIT,
            SyncKind.MBAR_ARRIVE,
            SyncKind.MBAR_WAIT,
        )
        if divergent and action.kind not in per_thread:
            raise DivergentBarrierError(
                f"{PASS_NAME}: a barrier sits in thread-divergent control flow "
                f"{where(self.func_name, stmt)}; threads that skip it deadlock. Move it out "
                "of the thread-dependent `if`/loop."
            )
        if action.kind is SyncKind.ASYNC_COMMIT or action.commits:
            state = {i: committed(p, action.domain) for i, p in state.items()}
        if action.kind in (SyncKind.ASYNC_WAIT, SyncKind.ASYNC_WAIT_BARRIER):
            state = {i: replace(p, landed=retired(p, action)) for i, p in state.items()}
        if action.kind is SyncKind.MBAR_ARRIVE:
            # what this thread completed before arriving is ordered before the threads
            # that observe the phase (the mbarrier's elements are paired by the program)
            key = ("mbarrier", action.barrier)
            return {
                i: replace(p, signalled=p.signalled | {key}) if p.landed else p
                for i, p in state.items()
            }
        if action.kind is SyncKind.MBAR_WAIT:
            key = ("mbarrier", action.barrier)
            return {
                i: p
                for i, p in state.items()
                if not (retired(p, action, self.implied) and p.domain == "mbarrier")
                and key not in p.signalled
            }
        if action.is_full_barrier:
            return {i: p for i, p in state.items() if not p.landed}
        if action.kind is SyncKind.SIGNAL:
            return {
                i: replace(p, signalled=p.signalled | {action.arg}) if p.landed else p
                for i, p in state.items()
            }
        if action.kind is SyncKind.WAIT:
            return {i: p for i, p in state.items() if action.arg not in p.signalled}
        return state

    # -- statements ----------------------------------------------------------------------
    def visit(
        self, stmt: Any, state: State, scope: AccessScope, divergent: bool
    ) -> tuple[list[Any], State]:
        """Return the items replacing ``stmt`` (statements and barrier placeholders)."""
        kind = type(stmt)  # (TIR node classes have no subclasses: exact type tests)
        if kind is tirx.SeqStmt:
            plan = self._plans.get((stmt, scope))
            if plan is None:
                return self._visit_list(stmt, state, scope, divergent)
            return self._visit_planned(stmt, plan, state, divergent)
        if kind is tirx.IfThenElse:
            return self.visit_if(stmt, state, scope, divergent)
        if kind is tirx.For:
            return self.visit_for(stmt, state, scope, divergent)
        if kind is tirx.While:
            return self.visit_while(stmt, state, scope, divergent)
        if is_leaf_statement(stmt):
            return self.visit_leaf(stmt, state, scope, divergent)
        body_items, state = self.visit(stmt.body, state, scope, divergent)
        return [self.rebuilt(stmt, "body", body_items)], state

    def _visit_list(
        self, stmt: Any, state: State, scope: AccessScope, divergent: bool
    ) -> tuple[list[Any], State]:
        """The first visit of a statement list in ``scope``: every child in turn, the
        scope growing at each ``Bind``. Leaves out the plan of later visits: the children
        not found inert (:attr:`_ScopeFacts.inert`), each with its scope; the inert ones
        (most statements of an unrolled loop body) are then passed through as runs."""
        items: list[Any] = []
        children = statements_of(stmt)
        entry = scope
        facts = self.facts(scope)
        plan: list[_Step] = []
        for at, child in enumerate(children):
            child_kind = type(child)
            later = self.after_bind(child, scope) if child_kind is tirx.Bind else scope
            if child not in facts.inert:
                step = (at, child, child_kind, scope, facts, later)
                new, state = self._visit_child(stmt, children, step, state, divergent)
                items.extend(new)
                if child not in facts.inert:  # (found inert by this visit: left out)
                    plan.append(step)
            else:
                items.append(child)
            if later is not scope:
                scope = later
                facts = self.facts(scope)
        self._plans[(stmt, entry)] = plan
        return items, state

    def _visit_planned(
        self, stmt: Any, plan: list[_Step], state: State, divergent: bool
    ) -> tuple[list[Any], State]:
        """A later visit of a statement list: the children of its plan in turn, the runs
        of inert children between them passed through unchanged."""
        items: list[Any] = []
        children = statements_of(stmt)
        done = 0
        for step in plan:
            at = step[0]
            if at > done:
                items.extend(children[done:at])
            new, state = self._visit_child(stmt, children, step, state, divergent)
            items.extend(new)
            done = at + 1
        if done < len(children):
            items.extend(children[done:])
        return items, state

    def _visit_child(
        self, seq: Any, children: tuple[Any, ...], step: _Step, state: State, divergent: bool
    ) -> tuple[list[Any], State]:
        """Visit one child of the statement list ``seq`` (its later siblings are what
        :meth:`later_accesses` looks ahead to)."""
        at, child, child_kind, scope, facts, later = step
        self._upcoming.append((seq, children, at + 1, later))
        try:
            if child_kind is tirx.BufferStore or child_kind is tirx.Evaluate:
                return self.visit_leaf(child, state, scope, divergent, None, facts)
            return self.visit(child, state, scope, divergent)
        finally:
            self._upcoming.pop()

    def later_accesses(self) -> list[SharedAccess]:
        """The accesses of the statements after the one being visited in the innermost
        statement list (remembered per list, position and scope: fixed-point rounds ask
        again)."""
        seq, children, start, scope = self._upcoming[-1]
        key = (seq, start, scope)
        found = self._later.get(key)
        if found is None:
            found = []
            for child in children[start:]:
                found += self.all_accesses(child, scope)
                if type(child) is tirx.Bind:
                    scope = self.after_bind(child, scope)
            self._later[key] = found
        return found

    def rebuilt(self, stmt: Any, field: str, items: list[Any]) -> Any:
        old = getattr(stmt, field)
        new_body = self.sequence(items, old)
        if new_body.same_as(old):
            return stmt
        return rebuild(stmt, {field: new_body})

    def visit_leaf(
        self,
        stmt: Any,
        state: State,
        scope: AccessScope,
        divergent: bool,
        owner: Any = None,
        facts: _ScopeFacts | None = None,
    ) -> tuple[list[Any], State]:
        # (the common path inlined: this runs for every leaf in every fixed-point round)
        action = None if type(stmt) is tirx.BufferStore else self.sync_action(stmt)
        if action is not None and action.kind not in _MBARRIER_SYNC:
            return [stmt], self.sync(stmt, state, divergent, scope)
        if owner is None:
            if facts is None:
                facts = self.facts(scope)
            accesses = facts.accesses.get(stmt)
            if accesses is None:
                accesses = self.accesses(stmt, scope)
        else:
            accesses = self.accesses(stmt, scope, owner)
        if not accesses and action is None:
            if facts is not None:
                facts.inert.add(stmt)
            return [stmt], state  # registers and global memory only
        if len(accesses) > 1:
            self.check_within_statement(stmt, accesses)
        barrier = None
        if state:
            barrier, state = self.barrier_before(accesses, state)
            if barrier is not None and divergent:
                barrier = self.in_role(barrier, stmt, scope)
        state = dict(state)
        issued = self._issued
        for acc in accesses:
            # an older instance of the same access (an earlier iteration) stays pending too
            found = issued.get(acc)
            inst, new = found if found is not None else self.issued(acc)
            old = state.get(inst)
            state[inst] = new if old is None or old is new else join(new, old)
        if not self._is_cuda and any(amd_async_domain(a) for a in accesses):
            # an AMD LDS DMA is one vector-memory load per wave, counted from its issue: it
            # is its own group, one newer for every copy issued before it
            state = {i: committed(p) for i, p in state.items()}
        if action is not None:  # an mbarrier arrive or wait, after its object was checked
            state = self.sync(stmt, state, divergent)
        return ([stmt] if barrier is None else [barrier, stmt]), state

    def issued(self, acc: SharedAccess) -> tuple[Instance, Pending]:
        """The instance ``acc`` starts when its statement runs, and its record (one pair
        per access: every visit of the statement issues the same, and states then find
        the instance by identity)."""
        found = self._issued.get(acc)
        if found is not None:
            return found
        if not acc.is_async and acc.completes_on is None:
            record = self._plain  # (most accesses: a plain access, landed)
        else:
            is_async = acc.is_async
            domain = acc.async_domain if self._is_cuda else amd_async_domain(acc)
            grouped = is_async and domain in GROUP_DOMAINS
            record = Pending(
                not is_async,
                frozenset(),
                OPEN_GROUP if grouped else 0,
                domain if is_async else None,
                acc.completes_on,
            )
            # one object per distinct record: joins and state comparisons then meet
            # identical objects
            record = self._records.setdefault(record, record)
        found = self._issued[acc] = (Instance(acc), record)
        return found

    def check_within_statement(self, stmt: Any, accesses: list[SharedAccess]) -> None:
        """Raise when two accesses of one statement may race (checked once per access
        list: fixed-point rounds visit the statement again with the same list)."""
        if len(accesses) < 2 or id(accesses) in self._checked:
            return
        self._checked[id(accesses)] = accesses  # (kept: the id stays this list's)
        for i, a in enumerate(accesses):
            for b in accesses[i + 1 :]:
                # one statement instance: the same iteration of every loop
                if may_conflict(a, b, self.thread_extents, same_iteration(a, b)):
                    raise MalformedKernelError(
                        f"{PASS_NAME}: `{a.describe()}` and `{b.describe()}` may race between "
                        f"threads inside one statement {where(self.func_name, stmt)}; no "
                        "barrier can go between them. Load the value into a local variable "
                        "in a separate statement first."
                    )

    def role(self, scope: AccessScope) -> WarpRole | None:
        """The warp role (whole warps) that runs code in ``scope``, on CUDA targets (none
        inside a loop whose trip count differs between threads)."""
        if not self._is_cuda or self._divergent_loops:
            return None
        if scope not in self._roles:
            self._roles[scope] = role_of(
                # block-uniform conditions select no threads
                thread_conditions(scope, self.uniformity.is_block_uniform),
                self.thread_tags,
                self.thread_extents,
                self.scalars,
                scope.resolve,
                self.uniformity.is_block_uniform,
            )
        return self._roles[scope]

    def in_role(self, barrier: Barrier, stmt: Any, scope: AccessScope) -> Barrier:
        """``barrier`` as a named barrier over the warp role running ``stmt`` (a block
        barrier would deadlock there); raises when the threads are not whole warps."""
        role = self.role(scope)
        if role is None or barrier.fence_init:
            raise self.divergent_error(stmt)
        if role not in self._role_ids:
            used = [i for pair in self._named_ids.values() for i in pair if i is not None]
            used += list(self._role_ids.values()) + list(self._user_ids)
            first = max(used, default=0) + 1
            if first >= MAX_NAMED_BARRIERS:
                raise self.divergent_error(stmt)
            self._role_ids[role] = first
        return replace(barrier, named=(self._role_ids[role], role.count))

    def divergent_error(self, stmt: Any) -> DivergentBarrierError:
        return DivergentBarrierError(
            f"{PASS_NAME}: a barrier is needed inside thread-divergent control flow "
            f"{where(self.func_name, stmt)}: both accesses run under a condition on the thread "
            "index, so some threads would skip the barrier and deadlock. Split the divergent "
            "region so the producer and the consumer sit in separate `if`s with uniform code "
            "between them."
        )

    def enter_divergent(
        self, stmt: Any, state: State, scope: AccessScope
    ) -> tuple[list[Any], State]:
        """Barrier before a divergent region for conflicts with accesses before it.

        Accesses that arrived on an mbarrier the region waits on are left to the region:
        its threads are ordered after them by that wait (a conflict inside the region
        before the wait is still found there, and raises)."""
        waited = {
            ("mbarrier", a.barrier) for a in _sync_actions(stmt) if a.kind is SyncKind.MBAR_WAIT
        }
        held = {i: p for i, p in state.items() if p.signalled & waited}
        rest = {i: p for i, p in state.items() if i not in held}
        barrier, rest = self.barrier_before(self.all_accesses(stmt, scope), rest)
        if barrier is not None:
            return [barrier], {**rest, **{i: p for i, p in held.items() if not p.landed}}
        return [], state

    def visit_if(
        self, stmt: Any, state: State, scope: AccessScope, divergent: bool
    ) -> tuple[list[Any], State]:
        cond_stmt = tirx.Evaluate(stmt.condition)
        own = self.is_divergent(stmt.condition, scope)
        inner = divergent or own
        prefix: list[Any] = []
        if divergent and own:
            # an `if` on the thread index inside divergent code: its branches run
            # concurrently too, and no barrier can go between them
            self.check_branches_apart(stmt, scope)
        if inner and not divergent:
            named = self.visit_warp_split(stmt, state, scope)
            if named is not None:
                return named
            prefix, state = self.enter_divergent(stmt, state, scope)
            self.check_branches_apart(stmt, scope)
        elif inner and self.role(scope) is not None:
            # a branch inside a warp role: what it needs from before, a barrier over the
            # role's threads gives
            prefix, state = self.enter_divergent(stmt, state, scope)
            prefix = [self.in_role(b, stmt, scope) for b in prefix]
        cond_items, state = self.visit_leaf(cond_stmt, state, scope, divergent, owner=stmt)
        prefix += [i for i in cond_items if isinstance(i, Barrier)]
        new_stmt, out = self._visit_branches(stmt, state, scope, inner)
        if not inner and self.sync_cost(new_stmt, stmt)[0] > 0:
            # a uniform `if` with barriers in its branches: one barrier before it can
            # replace them
            barrier, hoisted_state = self.barrier_before(
                self.all_accesses(stmt, scope), state, strict=False
            )
            if barrier is not None:
                hoisted_stmt, hoisted_out = self._visit_branches(stmt, hoisted_state, scope, inner)
                if self.sync_cost(hoisted_stmt, stmt)[0] < self.sync_cost(new_stmt, stmt)[0]:
                    prefix.append(barrier)
                    new_stmt, out = hoisted_stmt, hoisted_out
        return [*prefix, new_stmt], out

    def _visit_branches(
        self, stmt: Any, state: State, scope: AccessScope, inner: bool
    ) -> tuple[Any, State]:
        """The ``if`` with its branches synchronised after ``state``, and the joined state."""
        then_scope = scope.assuming(stmt.condition)
        then_items, then_state = self.visit(stmt.then_case, state, then_scope, inner)
        else_state = state
        changes = {"then_case": self.sequence(then_items, stmt.then_case)}
        if stmt.else_case is not None:
            else_scope = scope.assuming(stmt.condition, False)
            else_items, else_state = self.visit(stmt.else_case, state, else_scope, inner)
            changes["else_case"] = self.sequence(else_items, stmt.else_case)
        if all(changes[k].same_as(getattr(stmt, k)) for k in changes):
            return stmt, merge(then_state, else_state)
        return rebuild(stmt, changes), merge(then_state, else_state)

    def branch_conflicts(self, stmt: Any, scope: AccessScope) -> Iterator[tuple[Any, Any]]:
        """Pairs of accesses of the two branches of ``stmt`` that may race in one execution
        (asked lazily: a caller that needs one stops there)."""
        if stmt.else_case is None:
            return
        then_acc = self.all_accesses(stmt.then_case, scope.assuming(stmt.condition))
        else_acc = self.all_accesses(stmt.else_case, scope.assuming(stmt.condition, False))
        # buffers handed between the branches through their mbarrier ring do not race
        ring = ring_buffers(stmt.then_case, stmt.else_case, then_acc + else_acc)
        for a in then_acc:
            for b in else_acc:
                if not (a.buffer in ring or b.buffer in ring) and may_conflict(
                    a, b, self.thread_extents, same_iteration(a, b)
                ):
                    yield a, b

    def visit_warp_split(
        self, stmt: Any, state: State, scope: AccessScope
    ) -> tuple[list[Any], State] | None:
        """A divergent ``if`` whose branches race, ordered with named barriers (CUDA,
        warp-aligned ``tx < P``); ``None`` when its branches do not race."""
        then_case = strip_named_barriers(stmt.then_case)
        else_case = stmt.else_case
        if else_case is not None:
            else_case = strip_named_barriers(else_case)
            stripped = rebuild(stmt, {"then_case": then_case, "else_case": else_case})
        else:
            stripped = rebuild(stmt, {"then_case": then_case})
        conflicts = list(self.branch_conflicts(stripped, scope))
        if not conflicts:
            # (named barriers access no shared memory: the `if` as written is apart too)
            self._apart.add((stmt, scope))
            return None
        split = warp_split(
            scope.resolve(stmt.condition),
            self.thread_extents,
            self.target,
            self.func_name,
            stmt,
            PASS_NAME,
        )
        then_writes = any(a.kind.writes for a, _ in conflicts)
        else_writes = any(b.kind.writes for _, b in conflicts)
        if then_writes == else_writes:
            raise DivergentBarrierError(
                f"{PASS_NAME}: both branches of the warp-split `if` {where(self.func_name, stmt)} "
                "write shared memory the other branch uses; named barriers order one producer "
                "branch before one consumer branch. Keep the writes in one branch."
            )
        raw, war = self.named_ids(stmt, in_loop=self._loop_depth > 0)
        then_scope = scope.assuming(stmt.condition)
        else_scope = scope.assuming(stmt.condition, False)
        own = set(self.all_accesses(stripped.then_case, then_scope))
        own |= set(self.all_accesses(stripped.else_case, else_scope))
        buffers = [a.buffer for pair in conflicts for a in pair]
        # earlier executions of this `if` are ordered by its own named barriers
        others = {i: p for i, p in state.items() if i.access not in own}
        barrier, others = self.barrier_before(own, others)
        prefix = [barrier] if barrier is not None else []
        cond_items, others = self.visit_leaf(
            tirx.Evaluate(stmt.condition), others, scope, False, owner=stmt
        )
        prefix += [i for i in cond_items if isinstance(i, Barrier)]
        then_items, then_state = self.visit(stripped.then_case, others, then_scope, True)
        else_items, else_state = self.visit(stripped.else_case, others, else_scope, True)
        producer, consumer = (then_items, else_items) if then_writes else (else_items, then_items)
        n = split.threads
        last_p = self.last_touching(producer, buffers)
        producer.insert(last_p + 1, named_sync(raw, n))
        first_c = self.first_touching(consumer, buffers)
        consumer.insert(first_c, named_sync(raw, n))
        if war is not None:
            consumer.insert(self.last_touching(consumer, buffers) + 1, named_sync(war, n))
            producer.append(named_sync(war, n))
        new_stmt = rebuild(
            stmt,
            {
                "then_case": self.sequence(then_items, stmt.then_case),
                "else_case": self.sequence(else_items, stmt.else_case),
            },
        )
        if tvm_ffi.structural_equal(new_stmt, stmt):
            new_stmt = stmt
        return [*prefix, new_stmt], merge(then_state, else_state)

    def named_ids(self, stmt: Any, in_loop: bool) -> tuple[int, int | None]:
        """The ``(raw, war)`` named-barrier ids of a warp-split ``if`` (``war`` None when
        the ``if`` runs once)."""
        if stmt not in self._named_ids:
            used = [i for pair in self._named_ids.values() for i in pair if i is not None]
            first = max(used, default=0) + 1
            ids = (first, first + 1 if in_loop else None)
            if max(i for i in ids if i is not None) >= MAX_NAMED_BARRIERS:
                raise MalformedKernelError(
                    f"{PASS_NAME}: {self.func_name} needs more than {MAX_NAMED_BARRIERS - 1} "
                    f"named barriers (ids 1..{MAX_NAMED_BARRIERS - 1}; 0 is __syncthreads) "
                    f"at the warp-split `if` {where(self.func_name, stmt)}. Use fewer "
                    "producer/consumer splits per kernel."
                )
            self._named_ids[stmt] = ids
        return self._named_ids[stmt]

    def _touching(self, items: list[Any], buffers: list[Any]) -> list[int]:
        return [
            i
            for i, item in enumerate(items)
            if any(
                any(acc.buffer.same_as(b) for b in buffers)
                for acc in self.all_accesses(item, AccessScope())
            )
        ]

    def last_touching(self, items: list[Any], buffers: list[Any]) -> int:
        """Index of the last statement of ``items`` that accesses one of ``buffers``."""
        return self._touching(items, buffers)[-1]

    def first_touching(self, items: list[Any], buffers: list[Any]) -> int:
        """Index of the first statement of ``items`` that accesses one of ``buffers``."""
        return self._touching(items, buffers)[0]

    def check_branches_apart(self, stmt: Any, scope: AccessScope) -> None:
        """Threads in the two branches of a divergent ``if`` run concurrently (other
        iterations are ordered by the loop analysis: a barrier before the ``if``)."""
        if (stmt, scope) in self._apart:
            return  # (fixed-point rounds and the warp-split test meet an `if` again)
        if next(self.branch_conflicts(stmt, scope), None) is not None:
            raise self.divergent_error(stmt)
        self._apart.add((stmt, scope))

    def visit_for(
        self, stmt: Any, state: State, scope: AccessScope, divergent: bool
    ) -> tuple[list[Any], State]:
        if stmt.kind == tirx.ForKind.THREAD_BINDING:
            items, state = self.visit(stmt.body, state, scope, divergent)
            return [self.rebuilt(stmt, "body", items)], state
        inner_scope = self._scope_inside(stmt, scope)
        inner = divergent or self.loop_is_divergent(stmt, scope)
        # an outer loop's fixed-point rounds often reach an inner loop with the same state
        key = (stmt, scope, divergent, self._loop_depth, frozenset(state.items()))
        if key in self._loop_memo:
            items, out = self._loop_memo[key]
            return list(items), out  # callers may insert into the item list
        self._loop_depth += 1
        loop_divergent = inner and not divergent  # threads run different trip counts
        self._divergent_loops += loop_divergent
        try:
            result = self._visit_serial_for(stmt, state, scope, divergent, inner_scope, inner)
        finally:
            self._loop_depth -= 1
            self._divergent_loops -= loop_divergent
        self._loop_memo[key] = (list(result[0]), result[1])
        return result

    def _visit_serial_for(
        self,
        stmt: Any,
        state: State,
        scope: AccessScope,
        divergent: bool,
        inner_scope: AccessScope,
        inner: bool,
    ) -> tuple[list[Any], State]:
        prefix: list[Any] = []
        if inner and not divergent:
            prefix, state = self.enter_divergent(stmt, state, scope)
        ext = stmt.extent.value if isinstance(stmt.extent, tirx.IntImm) else None
        repeats = ext is None or ext > 1  # one iteration carries nothing to the next
        loop = inner_scope.loops[-1].loop

        def enter(entry: State) -> State:
            # which iteration of this loop a pending access is compared with
            if loop is None:
                return entry
            return self._stepped(entry, loop, entering=True)

        body, head, out, count = self.fixpoint(stmt.body, enter(state), inner_scope, inner, repeats)
        trial = self.hoisting_trial(stmt, state, scope, inner, count > (0, 0))
        if trial is not None:
            barrier, hoisted_state = trial
            hoisted = self.fixpoint(stmt.body, enter(hoisted_state), inner_scope, inner, repeats)
            if hoisted[3] < count:
                # one barrier before the loop instead of some inside it (or weaker waits:
                # copies issued before the loop and read in its first iteration wait there,
                # not in every iteration)
                prefix.append(barrier)
                body, head, out, _ = hoisted
        new_stmt = stmt if body.same_as(stmt.body) else rebuild(stmt, {"body": body})
        after = out if ext is not None and ext >= 1 else merge(head, out)
        if loop is not None:
            after = self._stepped(after, loop, entering=False)
        return [*prefix, new_stmt], after

    def _stepped(self, state: State, loop: Any, entering: bool) -> State:
        """``state`` with every instance moved by ``inst.entering(loop)`` or
        ``inst.leaving(loop)`` (instances that meet are joined); the moves are remembered
        (an outer loop's rounds and hoisting trials move the same instances through the
        same loop)."""
        steps = self._steps
        out: State = {}
        for inst, record in state.items():
            key = (inst, loop, entering)
            moved = steps.get(key)
            if moved is None:
                moved = steps[key] = inst.entering(loop) if entering else inst.leaving(loop)
            old = out.get(moved)
            out[moved] = record if old is None or old is record else join(record, old)
        return out

    def hoisting_trial(
        self, loop: Any, state: State, scope: AccessScope, divergent: bool, body_synced: bool
    ) -> tuple[Barrier, State] | None:
        """The barrier worth trying before ``loop`` instead of inside it, with the state
        after it; None when there is none to try: the loop is thread-divergent, its
        body needed no synchronisation (``body_synced`` False: the pass only inserts, so a
        barrier before the loop cannot cost less) or nothing pending conflicts with it."""
        if divergent or not body_synced:
            return None
        barrier, after = self.barrier_before(self.all_accesses(loop, scope), state, strict=False)
        return None if barrier is None else (barrier, after)

    def fixpoint(
        self,
        body: Any,
        entry: State,
        scope: AccessScope,
        divergent: bool,
        repeats: bool = True,
    ) -> tuple[Any, State, State, tuple[int, int]]:
        """Transform a loop body with the state at the loop head joined to a fixed point.

        Returns the new body, the head state, the state at the end of the body and the
        cost of the synchronisation placed in the body (:meth:`sync_cost`). An access
        carried over the back edge is one iteration older (``Instance.around``): that is
        what lets a multibuffered access of iteration k-1 (slot ``(k-1) % N``) pass a
        write of iteration k (slot ``k % N``) without a barrier. It is sound because an
        access still pending after FAR further iterations becomes "FAR or more
        iterations back" (``k' >= k + FAR``), which includes iteration k+N reusing the
        slot, so that is only ever excused when a barrier inside the body (the RAW barrier
        of a multibuffered loop) already separates the two.
        """
        head = entry
        loop = scope.loops[-1].loop if scope.loops else None
        rounds = _MAX_FIXPOINT_ROUNDS if repeats else 1
        for _ in range(rounds):
            items, out = self.visit(body, head, scope, divergent)
            joined = merge(head, state_around(out, loop, self._moved)) if repeats else head
            if joined == head:
                new_body = self.sequence(items, body)
                return new_body, head, out, self.sync_cost(new_body, body)
            head = joined
        raise TilewaveError(f"{PASS_NAME}: loop analysis did not converge in {self.func_name}")

    def visit_while(
        self, stmt: Any, state: State, scope: AccessScope, divergent: bool
    ) -> tuple[list[Any], State]:
        """A ``While`` runs zero or more times: its condition at the head, accesses carried
        over the back edge at any distance; barriers as for a ``For`` (hoisted when that
        saves barriers inside)."""
        wait = mbarrier_wait_loop(stmt)
        if wait is not None:
            # `while not ready: mbarrier.try_wait(...)` runs its wait until the phase is seen
            items, after = self.visit_leaf(wait, state, scope, divergent)
            return [*items[:-1], stmt], after
        inner = divergent or self.is_divergent(stmt.condition, scope)
        prefix: list[Any] = []
        if inner and not divergent:
            prefix, state = self.enter_divergent(stmt, state, scope)
        cond_accesses = self.accesses(tirx.Evaluate(stmt.condition), scope, owner=stmt)
        barrier, state = self.barrier_before(cond_accesses, state)
        if barrier is not None:
            if divergent:
                raise self.divergent_error(stmt)
            prefix.append(barrier)
        self._loop_depth += 1
        loop_divergent = inner and not divergent
        self._divergent_loops += loop_divergent
        try:
            return self._visit_while(stmt, state, scope, inner, prefix)
        finally:
            self._loop_depth -= 1
            self._divergent_loops -= loop_divergent

    def _visit_while(
        self, stmt: Any, state: State, scope: AccessScope, inner: bool, prefix: list[Any]
    ) -> tuple[list[Any], State]:
        body, out, count = self.while_fixpoint(stmt, state, scope, inner)
        trial = self.hoisting_trial(stmt, state, scope, inner, count > 0)
        if trial is not None:
            barrier, hoisted_state = trial
            hoisted = self.while_fixpoint(stmt, hoisted_state, scope, inner)
            if hoisted[2] < count:
                prefix.append(barrier)
                body, out, _ = hoisted
        new_stmt = stmt if body.same_as(stmt.body) else rebuild(stmt, {"body": body})
        return [*prefix, new_stmt], out

    def while_fixpoint(
        self, stmt: Any, entry: State, scope: AccessScope, divergent: bool
    ) -> tuple[Any, State, int]:
        """The fixed point of a ``While`` whose entry state needs no barrier before the
        condition. Returns the new body, the state after the condition at the head (the
        exit state: zero or more iterations) and the number of barriers placed in the body.
        A condition that conflicts with the body gets its barrier at the end of the body."""
        cond = tirx.Evaluate(stmt.condition)
        cond_accesses = self.accesses(cond, scope, owner=stmt)
        head = entry
        for _ in range(_MAX_FIXPOINT_ROUNDS):
            _, after_cond = self.visit_leaf(cond, head, scope, divergent, owner=stmt)
            items, out = self.visit(stmt.body, after_cond, scope.inside_while(), divergent)
            back_edge = state_around_while(out, len(scope.loops))
            tail, back = self.barrier_before(cond_accesses, back_edge)
            if tail is not None:
                if divergent:
                    raise self.divergent_error(stmt)
                items.append(tail)
            joined = merge(head, back)
            if joined == head:
                new_body = self.sequence(items, stmt.body)
                return new_body, after_cond, self.sync_cost(new_body, stmt.body)[0]
            head = joined
        raise TilewaveError(f"{PASS_NAME}: loop analysis did not converge in {self.func_name}")

    # -- materialising -------------------------------------------------------------------
    def place(self, body: Any) -> Any:
        """``body`` (the function's) with the barriers it needs."""
        items, _ = self.visit(body, {}, AccessScope(), False)
        return self.sequence(items, body)

    def sequence(self, items: list[Any], original: Any = None) -> Any:
        """Turn items into one statement, expanding barrier placeholders; ``original``
        comes back unchanged when the items are exactly its statements."""
        # (exact class tests: TIR node classes have no subclasses, and `isinstance` on
        # them goes through an ABC check, per item of lists of thousands)
        old = statements_of(original) if type(original) is tirx.SeqStmt else (original,)
        if len(old) == len(items) and all(
            type(i) is not Barrier and i.same_as(o) for i, o in zip(items, old, strict=True)
        ):
            return original
        out: list[Any] = []
        for item in items:
            kind = type(item)
            if kind is tirx.SeqStmt:
                out.extend(statements_of(item))
                continue
            if kind is not Barrier:
                out.append(item)
                continue
            for domain, count in item.unit_waits:
                out.append(_unit_wait(domain, count))
            if item.fence_init:
                out.append(tirx.Evaluate(T.ptx.fence.mbarrier_init.release.cluster()))
            if item.named is not None:
                out.append(named_sync(*item.named))
                continue
            if item.commit:
                out.append(call_op("tilewave.commit_async_ops"))
            if item.wait is not None:
                out.append(call_op("tilewave.wait_async_ops", item.wait))
            if not self.split:
                out.append(call_op("tilewave.lds_barrier"))
                continue
            if item.wait is not None:
                out.append(call_op("tilewave.barrier_signal", WORKGROUP_BARRIER))
            else:
                at = len(out)
                while at > 0 and not touches_shared_or_sync(out[at - 1]):
                    at -= 1
                out.insert(at, call_op("tilewave.barrier_signal", WORKGROUP_BARRIER))
            out.append(call_op("tilewave.barrier_wait", WORKGROUP_BARRIER))
        if len(out) == 1:
            return out[0]
        return seq_stmt(out)



def _unit_wait(domain: str, count: int) -> Any:
    """The wait of an async unit's groups (wgmma, bulk TMA stores)."""
    if domain == "wgmma":
        return tirx.Evaluate(T.ptx.wgmma.wait_group.sync.aligned(count))
    return tirx.Evaluate(T.ptx.cp.async_.bulk.wait_group.read(count))


def _sync_actions(stmt: Any) -> list[SyncAction]:
    """The synchronisation actions of the statements under ``stmt``, in program order
    (expressions are not entered: every synchronisation is an ``Evaluate`` statement)."""
    found: list[SyncAction] = []
    stack = [stmt]
    while stack:
        node = stack.pop()
        if type(node) is tirx.Evaluate:
            action = sync_action(node)
            if action is not None:
                found.append(action)
        else:
            stack.extend(reversed(nested_statements(node)))
    return found


def _action_cost(action: SyncAction | None) -> tuple[int, int]:
    """One synchronisation action's share of :meth:`_Placer.sync_cost`: (1 for a barrier or
    a split-barrier wait, how much an async wait holds back)."""
    if action is None:
        return (0, 0)
    barrier = int(action.is_full_barrier or action.kind is SyncKind.WAIT)
    strength = max(MAX_NEWER_GROUPS - action.arg, 0) if action.kind is SyncKind.ASYNC_WAIT else 0
    return (barrier, strength)


def _func_name(func: tirx.PrimFunc) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else "<prim_func>"


def _barrier_style(target: TargetInfo, barrier_style: str | None) -> bool:
    style = barrier_style or target.barrier_style
    if style not in ("basic", "split"):
        raise PassOptionError(
            f"{PASS_NAME}: barrier_style must be 'basic' or 'split', got {barrier_style!r}"
        )
    if style == "split" and not target.has_split_barrier:
        raise PassOptionError(
            f"{PASS_NAME}: target {target.name} has no split barrier; use "
            "barrier_style='basic' (or leave it unset)"
        )
    return style == "split"


@without_cyclic_gc
def insert_shared_barriers(
    func: tirx.PrimFunc, target: Any, barrier_style: str | None = None
) -> tirx.PrimFunc:
    """Insert the barriers ``func`` needs between conflicting shared-memory accesses.

    Args:
        func: the kernel, threads bound with ``T.thread_binding``.
        target: a tilewave target name, ``tvm.target.Target`` or ``TargetInfo``.
        barrier_style: ``"basic"`` or ``"split"``; default: the target's preferred style
            (split on gfx1200/gfx1201, basic elsewhere).

    Raises:
        DivergentBarrierError: a barrier is needed inside thread-divergent code.
        MalformedKernelError: two accesses of one statement race (no barrier fits between).
        PassOptionError: unknown ``barrier_style`` or split asked of a target without it.
        UnclassifiedOpError: an unknown op takes a shared buffer's address.
    """
    info = get_target(target)
    split = _barrier_style(info, barrier_style)
    original = func.body  # (each `func.body` is a new Python wrapper: compare with same_as)
    expect_repeated_walks(original)  # (a dozen per-kernel analyses walk it)
    start = commit_copy_runs(original, _func_name(func)) if info.is_cuda else original
    body = _Placer(func, info, split).place(start)
    if not start.same_as(original) and not waits_on_groups(body):
        # commits were added (so the kernel had none), but no wait reads their groups
        body = _Placer(func, info, split).place(original)
    if body.same_as(original):
        return func
    return rebuild(func, {"body": body})


def InsertSharedBarriers(target: Any, barrier_style: str | None = None) -> tvm.transform.Pass:
    """The :func:`insert_shared_barriers` rewrite as a ``tvm.transform.Pass`` over a module."""
    info = get_target(target)
    _barrier_style(info, barrier_style)

    def run(func: tirx.PrimFunc, _mod: Any, _ctx: Any) -> tirx.PrimFunc:
        return insert_shared_barriers(func, info, barrier_style)

    return tirx.transform.prim_func_pass(run, opt_level=0, name=f"tilewave.{PASS_NAME}")
