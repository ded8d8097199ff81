"""What InsertSharedBarriers knows between two statements: the pending access instances.

Since the last barrier, each shared access that may still race is *pending*, as an
:class:`Instance` (the access plus how many iterations of each loop separate it from the
statement being visited) with a :class:`Pending` record (has its async copy landed, which
split barriers were signalled after it, which commit group it is in). A :data:`State` maps
instances to records; the pass joins states where control flow meets (:func:`merge`) and
moves them over loop back edges (:func:`state_around`). A :class:`Barrier` is the
placeholder for a barrier the pass decided to insert.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tilewave.analysis.footprint import loops_read
from tilewave.analysis.shared_access import (
    ANY,
    FAR,
    AccessKind,
    SharedAccess,
    SyncAction,
    SyncKind,
)

__all__ = [
    "GROUP_DOMAINS",
    "MAX_NEWER_GROUPS",
    "OPEN_GROUP",
    "Barrier",
    "Instance",
    "Pending",
    "State",
    "amd_async_domain",
    "committed",
    "join",
    "merge",
    "remap",
    "retired",
    "state_around",
    "state_around_while",
]


#: a pending cp.async copy not yet committed to a group (``Pending.group``)
OPEN_GROUP = -1
#: async units with commit/wait groups
GROUP_DOMAINS = frozenset({"cp.async", "wgmma", "bulk"})
#: committed groups counted after a copy's own; more are counted as this many (a smaller
#: count only ever makes the pass wait for more, so the cap is sound)
MAX_NEWER_GROUPS = 8


@dataclass(frozen=True)
class Pending:
    """What is known about one pending access instance since the last barrier."""

    landed: bool  # an async write whose copy is known complete (always True for others)
    signalled: frozenset[int]  # split barriers signalled after it
    #: for a cp.async copy not landed: OPEN_GROUP, or how many committed groups are newer
    #: than the copy's group (``wait_group N`` retires it when that count is >= N)
    group: int = 0
    #: how the async access completes (``SharedAccess.async_domain``; None: sync or a
    #: copy retired by a full ``wait_async_ops(0)``)
    domain: str | None = None
    #: the mbarrier a TMA load completes on
    barrier: Any = None

    @property
    def grouped(self) -> bool:
        """Retired through its unit's commit/wait groups."""
        return self.domain in GROUP_DOMAINS


class Instance:
    """An access in one iteration context relative to the statement being visited.

    ``carried``: loops enclosing the access whose back edge was taken since it ran, with the
    iteration distance (exact below :data:`FAR`, FAR for that many or more, :data:`ANY` for a new
    instance); loops not
    listed are still in the access's iteration. ``positions``: loops *not* enclosing the
    access entered since it ran, with how many iterations of them have completed (the
    statement being visited then runs in iteration ``min + position * step``; FAR: unknown).
    ``finished``: loops around the access that have exited since, with the access's
    distance from their last iteration (its loop variable is then ``last - d * step``).
    Keeping instances of one access apart by distance lets a pipelined copy from two
    iterations back be retired by a ``wait_group`` that a copy from the last iteration
    does not satisfy.

    Instances are interned: one live object per access and context, found through weak
    references in the access's memo (weak, so an access and its instances never form a
    reference cycle). States are dicts of instances, merged and moved at every loop round,
    so equality is identity and hashing is the interpreter's own, with no Python-level
    ``__hash__`` call. Instances are immutable.
    """

    __slots__ = ("__weakref__", "_iterations", "access", "carried", "finished", "positions")

    access: SharedAccess
    carried: tuple[tuple[Any, int], ...]
    positions: tuple[tuple[Any, int], ...]
    finished: tuple[tuple[Any, int], ...]

    def __new__(
        cls,
        access: SharedAccess,
        carried: tuple[tuple[Any, int], ...] = (),
        positions: tuple[tuple[Any, int], ...] = (),
        finished: tuple[tuple[Any, int], ...] = (),
    ) -> Instance:
        table = access.memo.get("instances")
        if table is None:
            table = access.memo["instances"] = {}
        key = (carried, positions, finished)
        ref = table.get(key)
        found: Instance | None = None if ref is None else ref()
        if found is None:
            found = object.__new__(cls)
            init = object.__setattr__
            init(found, "access", access)
            init(found, "carried", carried)
            init(found, "positions", positions)
            init(found, "finished", finished)
            init(found, "_iterations", None)
            table[key] = weakref.ref(found)
        return found

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Instance is immutable (cannot set {name!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Instance, (self.access, self.carried, self.positions, self.finished))

    def __repr__(self) -> str:
        return (
            f"Instance({self.access.describe()}, carried={self.carried}, "
            f"positions={self.positions}, finished={self.finished})"
        )

    def iterations(self) -> dict[Any, frozenset[int]]:
        """Iteration distances from the access to the statement now being visited (made
        once per instance: callers must not change the dict)."""
        out = self._iterations
        if out is None:
            out = {lp.loop: frozenset({0}) for lp in self.access.loops if lp.loop is not None}
            out.update((k, frozenset({d})) for k, d in self.carried)
            object.__setattr__(self, "_iterations", out)
        return out

    def position_map(self) -> dict[Any, int]:
        """Completed iterations of loops entered since the access (FAR: that many or more,
        ANY: unknown)."""
        return dict(self.positions)

    def around(self, loop: Any) -> Instance:
        """The instance after the back edge of ``loop``: one iteration further; loops
        inside it start a new instance (any distance)."""
        return self._around(loop, _one_more, _one_more)

    def around_plain(self, loop: Any) -> Instance:
        """:meth:`around` for an instance whose record is plain (a synchronous access, or a
        copy that has landed, with no split barrier signalled since), which states do not
        need to keep apart by how many iterations of ``loop`` ago it ran.

        A proof reads a loop's relation only through the variables of the two accesses.
        When this access does not read ``loop``'s variable, "``d`` iterations back" only
        bounds the later access's iteration (it runs in iteration ``d`` or later), so
        distance 1 covers every larger one; an access ``loop`` does not enclose, pending
        since before ``loop`` was entered, is at position 0 in the state at the loop head,
        and "any iteration" covers every later position. Plain instances of one access are
        pending together (only a barrier retires them, and it retires all), so the state
        loses nothing, and the loop's fixed point no longer takes a round per distance up
        to FAR (nor do later statements compare against each distance)."""
        if loop in self.access.loop_set and hash(loop) in loops_read(self.access):
            return self.around(loop)
        return self._around(loop, _at_least_one, _anywhere)

    def _around(
        self, loop: Any, distance: Callable[[int], int], position: Callable[[int], int]
    ) -> Instance:
        """The instance after the back edge of ``loop``, with ``distance`` giving the new
        distance of a loop around the access and ``position`` the new position of a loop
        entered after it; ``self`` when nothing changes."""
        if loop not in self.access.loop_set:
            if not any(k == loop for k, _ in self.positions):
                return self
            positions = tuple((k, position(d) if k == loop else d) for k, d in self.positions)
            if positions == self.positions:
                return self
            return Instance(self.access, self.carried, positions, self.finished)
        loops = [lp.loop for lp in self.access.loops]
        at = loops.index(loop)
        now = dict(self.carried)
        now[loop] = distance(now.get(loop, 0))
        for inner in loops[at + 1 :]:
            if inner is not None:
                now[inner] = ANY
        carried = _canonical_carried(self.access, now)
        if carried == self.carried:
            return self
        return Instance(self.access, carried, self.positions, self.finished)

    def around_while(self, depth: int) -> Instance:
        """After the back edge of a ``While`` inside ``depth`` serial loops: loops inside
        the ``While`` start a new instance; the enclosing loops stay in the same iteration."""
        now = dict(self.carried)
        for lp in self.access.loops[depth:]:
            if lp.loop is not None:
                now[lp.loop] = ANY
        carried = _canonical_carried(self.access, now)
        return Instance(self.access, carried, self.positions, self.finished)

    def entering(self, loop: Any) -> Instance:
        """The instance seen from the first iteration of ``loop``, which it does not sit in."""
        if loop in self.access.loop_set:
            return self
        kept = tuple((k, d) for k, d in self.positions if k != loop)
        return Instance(self.access, self.carried, (*kept, (loop, 0)), self.finished)

    def leaving(self, loop: Any) -> Instance:
        """The instance after ``loop`` exits: its iteration count no longer matters; if the
        access sits in ``loop``, its distance from the last iteration is kept."""
        if loop not in self.access.loop_set:
            if not any(k == loop for k, _ in self.positions):
                return self
            positions = tuple((k, d) for k, d in self.positions if k != loop)
            return Instance(self.access, self.carried, positions, self.finished)
        positions = tuple((k, d) for k, d in self.positions if k != loop)
        distance = dict(self.carried).get(loop, 0)
        carried = tuple((k, d) for k, d in self.carried if k != loop)
        finished = (*(f for f in self.finished if f[0] != loop), (loop, distance))
        return Instance(self.access, carried, positions, finished)


def _one_more(distance: int) -> int:
    return min(distance + 1, FAR)


def _at_least_one(_distance: int) -> int:
    return 1


def _anywhere(_position: int) -> int:
    return ANY


def _canonical_carried(
    access: SharedAccess, distances: dict[Any, int]
) -> tuple[tuple[Any, int], ...]:
    """``Instance.carried`` in the access's loop order, distance-0 loops left out."""
    order = [lp.loop for lp in access.loops if lp.loop is not None]
    return tuple((k, distances[k]) for k in order if distances.get(k, 0) != 0)


State = dict[Instance, Pending]


@dataclass(frozen=True)
class Barrier:
    """Placeholder for a barrier the pass decided to insert before the next statement.

    ``wait``: the ``wait_async_ops`` count to issue first (``None``: no wait); ``commit``:
    close the open cp.async group before waiting; ``unit_waits``: ``(domain, N)`` waits of
    other async units (wgmma, bulk TMA stores) to issue first."""

    wait: int | None = None
    commit: bool = False
    unit_waits: tuple[tuple[str, int], ...] = ()
    #: an mbarrier initialised before: ``fence.mbarrier_init`` first, so the
    #: initialisation is visible to the other threads and the async proxy
    fence_init: bool = False
    #: ``(id, threads)``: a named barrier over a warp role instead of a block barrier
    named: tuple[int, int] | None = None


def join(p: Pending, q: Pending | None) -> Pending:
    """One entry for two ways one access instance may be pending (``p`` itself when ``q``
    is equal: loop rounds join each record with itself, and a new record costs more than
    the comparison)."""
    if q is None or q is p or q == p:
        return p
    return Pending(
        p.landed and q.landed,
        p.signalled & q.signalled,
        min(p.group, q.group),
        p.domain,
        p.barrier,
    )


def merge(a: State, b: State) -> State:
    out = dict(a)
    for inst, p in b.items():
        old = out.get(inst)
        out[inst] = p if old is None or old is p else join(p, old)  # (join's cheap cases)
    return out


def remap(state: State, move: Callable[[Instance, Pending], Instance]) -> State:
    """``state`` with every instance moved by ``move`` (instances that meet are joined)."""
    out: State = {}
    for inst, p in state.items():
        moved = move(inst, p)
        old = out.get(moved)
        out[moved] = p if old is None or old is p else join(p, old)
    return out


def state_around(
    state: State, loop: Any, moved: dict[tuple[Instance, Any, bool], Instance]
) -> State:
    """``state`` at the end of an iteration of ``loop``, seen from the start of the next
    (plain records through :meth:`Instance.around_plain`). ``moved``: the moved instances by
    (instance, loop, plain), filled in here (fixed-point rounds move the same instances
    around the same loop again)."""
    if loop is None:
        return state  # accesses in an unidentified loop are compared at any distance
    moving = [i for i in state if loop in i.access.loop_set or i.positions]
    if not moving:
        return state
    out = dict(state)
    for inst in moving:
        del out[inst]
    for inst in moving:
        record = state[inst]
        plain = record.landed and not record.signalled
        new = moved.get((inst, loop, plain))
        if new is None:
            new = inst.around_plain(loop) if plain else inst.around(loop)
            moved[(inst, loop, plain)] = new
        old = out.get(new)
        out[new] = record if old is None or old is record else join(record, old)
    return out


def state_around_while(state: State, depth: int) -> State:
    """``state`` at the end of an iteration of a ``While`` inside ``depth`` serial loops,
    seen from the start of the next."""
    return remap(state, lambda inst, _: inst.around_while(depth))


def amd_async_domain(access: SharedAccess) -> str | None:
    """How an async copy completes on AMD: an LDS DMA counts on the vector-memory counter
    (``wait_async_ops(N)`` is ``vmcnt(N)`` / ``loadcnt N``), which the pass tracks like
    cp.async groups of one copy each (:meth:`_Placer.visit_leaf` commits at issue).

    ``vmcnt(N)`` waits until at most ``N`` of the wave's vector-memory operations are
    outstanding, loads complete in issue order, and the other loads and stores issued after
    a copy only add to that count; so counting the copies issued after it alone, ``N`` is
    never too large."""
    return "cp.async" if access.kind is AccessKind.ASYNC_WRITE else None


def committed(p: Pending, domain: str = "cp.async") -> Pending:
    """``p`` after this thread's ``commit_group`` of ``domain``."""
    if p.landed or p.domain != domain:
        return p
    return replace(p, group=0 if p.group == OPEN_GROUP else min(p.group + 1, MAX_NEWER_GROUPS))


def retired(
    p: Pending, action: SyncAction, implied: Mapping[Any, set[Any]] | None = None
) -> bool:
    """Whether the wait ``action`` completes the pending async access for its thread;
    ``implied``: :func:`tilewave.analysis.hopper_ops.mbarrier_implications`."""
    if p.landed:
        return True
    if p.grouped:
        return (
            action.groups
            and action.domain == p.domain
            and p.group != OPEN_GROUP
            and action.retires_group(p.group)
        )
    if p.domain == "mbarrier":
        return action.kind is SyncKind.MBAR_WAIT and (
            action.barrier.same_as(p.barrier)
            or p.barrier in (implied or {}).get(action.barrier, ())
        )
    return action.completes_async and action.domain == "cp.async"
