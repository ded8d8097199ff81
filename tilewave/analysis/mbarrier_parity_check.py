"""The hazard verifier's check of mbarrier phase parities (``try_wait.parity``).

An mbarrier counts phases. A phase completes when its pending arrival count reaches zero
(the count given to ``mbarrier.init``; each ``arrive`` takes one or its ``count``) and its
transaction count too (``expect_tx`` adds the TMA bytes, the copies' ``complete_tx``
subtract them). ``try_wait.parity p`` returns once the phase with parity ``p`` has
completed, i.e. as soon as the *current* phase's parity differs from ``p``; a fresh
mbarrier is in phase 0, so a wait on parity 1 returns at once (PTX ISA, "mbarrier").

What this module proves, without running the kernel, by following every thread's
sequence of mbarrier operations through constant-bound loops and conditions on thread
indices and loop counters (the mbarrier *elements* ``full[kt % S]`` and parities are
evaluated for every thread and iteration):

1. **Consecutive waits alternate.** A thread's ``n``-th wait on one mbarrier element must
   wait on parity ``(n + d) % 2``, where ``d`` is 0 when its first wait is on parity 0
   and -1 when it is on parity 1 (the "stage starts free" idiom of empty barriers). By
   induction, the ``n``-th wait then returns only after ``n + d + 1`` completed phases.
   A wait that repeats its previous wait's parity observes the phase that wait already
   saw, or the next one, depending on timing: nothing tells which. ``k % 2`` on a ring of
   4 stages (``full[k % 4]``) is caught here.
2. **A barrier carrying TMA bytes is first waited on parity 0.** A first wait on parity 1
   returns on the fresh mbarrier before any byte of phase 0 lands (``k % 2`` on a ring of
   3 stages waits parity 1 first on ``full[1]``; a consumer waiting ``(k // S + 1) % 2``).
3. **A wait after the thread's own arrival waits for that arrival's phase.** Phases are
   filled in arrival order (each arriving thread arrives once per phase, the protocol
   the count rule below also assumes): a thread's ``a``-th arrival on an element belongs
   to phase ``a - 1``, so a later wait of that thread on the element must need at least
   ``a`` completed phases. One that needs fewer returns on an older phase without
   waiting for the other arrivers (a producer that releases and then re-waits a stage
   with parity ``(k // S + 1) % 2``).
4. **Enough phases complete.** The phases an element can complete are at most its
   arrivals (summed over every thread and iteration, weighted by the ``arrive`` count)
   divided by its init count; a wait that needs more never returns.

The check stays silent (reports nothing for the function, or for one mbarrier) when it
cannot follow the sequence: a loop bound or a condition around mbarrier operations that is
not a constant or a function of thread indices and loop counters, a ``while`` around them
that is not a polling wait loop, an element index or parity it cannot evaluate, an init
count that is not a constant, ``arrive.drop`` / ``.noComplete`` / multicast / remote
arrivals, waits on a state token instead of a parity, or a block that is not whole warps.
It does not decide *which* phase a wait should observe beyond these rules: the pairing of
a wait with the producer's iteration is the program's protocol (``tilewave.racecheck``
executes it).

This module is the verifier's own model: it reads only per-call operand facts
(:mod:`tilewave.analysis.hopper_ops`) and the verifier's thread evaluator
(:mod:`tilewave.analysis.named_barrier_order`), nothing of the passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import ir, tirx

from tilewave.analysis.hazard_report import HazardKind, SharedHazard
from tilewave.analysis.hopper_ops import mbarrier_element, mbarrier_role, mbarrier_wait_loop
from tilewave.analysis.local_scalars import ScalarForwarder, single_assignment_scalars
from tilewave.analysis.named_barrier_order import (
    _evaluate,
    _Unknown,
    block_thread_values,
    thread_tags,
)
from tilewave.analysis.shared_access import collect_thread_extents, statement_accesses
from tilewave.arrays import distinct
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import ffi_list, post_order_visit

__all__ = [
    "MbarrierParityFinding",
    "MbarrierParityHazard",
    "mbarrier_parity_findings",
    "mbarrier_parity_hazards",
]

_PTX = "tirx.ptx."
#: ops that change the expected count or arrive on another CTA: not modelled (silent)
_UNMODELLED = ("drop", "no_complete", "multicast")
#: scalars defined through other scalars are forwarded this many levels deep
_FORWARD_DEPTH = 4
#: at most this many (statement, iteration) steps are followed; more: silent
_MAX_STEPS = 200_000


@dataclass(frozen=True)
class MbarrierParityFinding:
    """One wait whose parity is provably wrong.

    Attributes:
        buffer: the mbarrier buffer's name.
        element: the mbarrier element (flat index) the wait names.
        wait: the wait statement (a ``try_wait.parity`` / ``mbarrier_wait`` ``Evaluate``).
        earlier: the statement the wait is judged against (the thread's previous wait on
            the element, or an arrival on it), or ``None``.
        message: what is wrong and the fix.
    """

    buffer: str
    element: int
    wait: Any
    earlier: Any
    message: str

    def accesses(self) -> tuple[Any, Any]:
        """``(earlier, wait)`` as the verifier's ``SharedAccess`` objects of the mbarrier
        (the earlier one is the wait itself when there is none)."""
        second = _barrier_access(self.wait)
        first = _barrier_access(self.earlier) if self.earlier is not None else second
        return first or second, second


@dataclass(frozen=True)
class MbarrierParityHazard(SharedHazard):
    """A :class:`SharedHazard` from a wrong parity: ``second`` is the wait (the mbarrier
    access of its statement), ``first`` what it is judged against; ``kind`` is RAW (what
    the wait should order before the waiter's reads is not ordered).

    Attributes:
        reason: the finding's message (which thread, element, iteration; the fix).
    """

    reason: str = ""

    def __str__(self) -> str:
        return f"wrong mbarrier parity on {self.buffer}: {self.reason}"


def mbarrier_parity_hazards(func: Any) -> list[MbarrierParityHazard]:
    """:func:`mbarrier_parity_findings` as the verifier's hazards."""
    out = []
    for finding in mbarrier_parity_findings(func):
        first, second = finding.accesses()
        out.append(
            MbarrierParityHazard(finding.buffer, HazardKind.RAW, first, second, finding.message)
        )
    return out


def _barrier_access(stmt: Any) -> Any:
    found = [a for a in statement_accesses(stmt) if a.mbarrier_access is not None]
    return found[0] if found else None


@dataclass
class _Element:
    """What the threads did to one mbarrier element (arrays indexed by linear thread)."""

    arrivals: np.ndarray
    #: per thread: arrive operations (its a-th arrival belongs to phase a - 1)
    arrive_ops: np.ndarray
    waits: np.ndarray
    offset: np.ndarray
    stopped: np.ndarray
    needed: np.ndarray
    #: per thread: index (in ``_Walk.stmts``) of the wait that set ``needed`` / the last wait
    need_stmt: np.ndarray
    last_wait: np.ndarray
    arrive_stmt: Any = None


class _Walk:
    """Follows every thread's mbarrier operations through the statement tree."""

    def __init__(
        self, threads: int, env: dict[Any, Any], tx_barriers: set[Any], scalars: dict[Any, Any]
    ) -> None:
        self.threads = threads
        self.forward = ScalarForwarder(scalars)
        self._forwarded: dict[Any, Any] = {}
        self.env = env
        self.tx_barriers = tx_barriers
        #: serial loop variables around the statement being followed (for messages)
        self.loops: list[Any] = []
        #: wait statements, indexed by ``_Element.need_stmt`` / ``last_wait``
        self.stmts: list[Any] = [None]
        self.inits: dict[tuple[Any, int], int | None] = {}
        self.elements: dict[tuple[Any, int], _Element] = {}
        self.unmodelled: set[Any] = set()
        self.findings: list[MbarrierParityFinding] = []
        self._reported: set[tuple[Any, str]] = set()
        self._relevant: dict[Any, bool] = {}
        self.steps = 0

    # -- control flow --------------------------------------------------------------------
    def relevant(self, stmt: Any) -> bool:
        """Whether ``stmt`` holds an mbarrier operation or a TMA load."""
        key = stmt  # TIR nodes hash and compare by identity of the node, not the wrapper
        if key not in self._relevant:
            found = False

            def check(node: Any) -> None:
                nonlocal found
                if isinstance(node, ir.expr.Call) and _is_mbarrier_call(node):
                    found = True

            post_order_visit(stmt, check)
            self._relevant[key] = found
        return self._relevant[key]

    def run(self, stmt: Any, mask: np.ndarray) -> None:
        """Follow ``stmt`` for the threads in ``mask``."""
        if not mask.any() or not self.relevant(stmt):
            if isinstance(stmt, tirx.Bind):
                self.bind(stmt)
            return
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _Unknown
        if isinstance(stmt, tirx.SeqStmt):
            for item in ffi_list(stmt.seq):
                self.run(item, mask)
        elif isinstance(stmt, tirx.Bind):
            self.bind(stmt)
        elif isinstance(stmt, tirx.IfThenElse):
            cond = self.value(stmt.condition).astype(bool)
            self.run(stmt.then_case, mask & cond)
            if stmt.else_case is not None:
                self.run(stmt.else_case, mask & ~cond)
        elif isinstance(stmt, tirx.For):
            self.run_for(stmt, mask)
        elif isinstance(stmt, tirx.While):
            wait = mbarrier_wait_loop(stmt)
            if wait is None:
                raise _Unknown  # a loop of unknown trip count around mbarrier operations
            self.operation(wait, mask)
        elif isinstance(stmt, tirx.Evaluate):
            self.operation(stmt, mask)
        elif hasattr(stmt, "body"):
            self.run(stmt.body, mask)
        else:
            raise _Unknown  # an mbarrier operation inside an expression of another statement

    def run_for(self, stmt: Any, mask: np.ndarray) -> None:
        if stmt.kind == tirx.ForKind.THREAD_BINDING:
            self.run(stmt.body, mask)
            return
        start, extent = self.value(stmt.min), self.value(stmt.extent)
        if np.ndim(start) or np.ndim(extent):
            raise _Unknown  # a thread-dependent trip count
        self.loops.append(stmt.loop_var)
        for i in range(int(start), int(start) + int(extent)):
            self.env[stmt.loop_var] = np.int64(i)
            self.run(stmt.body, mask)
        self.loops.pop()
        self.env.pop(stmt.loop_var, None)

    def bind(self, stmt: Any) -> None:
        try:
            self.env[stmt.var] = self.value(stmt.value)
        except _Unknown:
            self.env.pop(stmt.var, None)

    def value(self, expr: Any) -> Any:
        """``expr`` for every thread (an array) or a scalar; ``_Unknown`` if not modelled.
        Loads of single-assignment local scalars (``wg = tx // 128``) are their values."""
        if expr not in self._forwarded:
            seen = expr
            for _ in range(_FORWARD_DEPTH):
                seen = self.forward.visit(seen)
            self._forwarded[expr] = seen
        return _evaluate(self._forwarded[expr], self.env)

    def per_thread(self, expr: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.value(expr), dtype=np.int64), (self.threads,))

    # -- mbarrier operations -------------------------------------------------------------
    def operation(self, stmt: Any, mask: np.ndarray) -> None:
        call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
        if not isinstance(call, ir.expr.Call) or not _is_mbarrier_call(call):
            raise _Unknown  # an mbarrier operation nested in another expression
        found = mbarrier_element(call)
        name = callee_name(call)
        if found is None:
            if mbarrier_role(call) is not None or "init" in name:
                raise _Unknown  # an mbarrier this module cannot name
            return
        buffer, indices = found
        if any(word in name for word in _UNMODELLED):
            self.unmodelled.add(buffer)
            return
        try:
            element = self.flat_element(buffer, indices)
        except _Unknown:
            self.unmodelled.add(buffer)
            return
        for value in distinct(element[mask]):
            key = (buffer, int(value))
            self.apply(stmt, call, name, key, mask & (element == value))

    def flat_element(self, buffer: Any, indices: tuple[Any, ...]) -> np.ndarray:
        shape = [s.value if isinstance(s, tirx.IntImm) else None for s in buffer.ty.shape]
        if None in shape or len(shape) != len(indices):
            raise _Unknown
        flat = np.zeros(self.threads, dtype=np.int64)
        for index, extent in zip(indices, shape, strict=True):
            flat = flat * extent + self.per_thread(index)
        return flat

    def apply(self, stmt: Any, call: Any, name: str, key: tuple[Any, int], mask: Any) -> None:
        if name.startswith(_PTX + "mbarrier_init"):
            count = _operand(call, "count")
            if key in self.inits:
                self.unmodelled.add(key[0])  # initialised again: its phases restart
            self.inits[key] = int(count.value) if isinstance(count, tirx.IntImm) else None
            return
        state = self.element(key)
        if name.startswith(_PTX + "mbarrier_arrive"):
            # the `count` of an `arrive.expect_tx` form is its transaction count
            count = None if "expect_tx" in name else _operand(call, "count")
            if count is not None and not isinstance(count, tirx.IntImm):
                self.unmodelled.add(key[0])
                return
            state.arrivals[mask] += 1 if count is None else int(count.value)
            state.arrive_ops[mask] += 1
            state.arrive_stmt = state.arrive_stmt or stmt
            return
        if mbarrier_role(call) == "wait":
            parity = _operand(call, "phase") if name.startswith(_PTX) else call.args[1]
            if parity is None:
                self.unmodelled.add(key[0])  # a wait on a state token, not a parity
                return
            try:
                values = self.per_thread(parity) % 2
            except _Unknown:
                self.unmodelled.add(key[0])
                return
            self.wait(stmt, key, state, mask, values)

    def element(self, key: tuple[Any, int]) -> _Element:
        if key not in self.elements:
            n = self.threads
            self.elements[key] = _Element(
                arrivals=np.zeros(n, np.int64),
                arrive_ops=np.zeros(n, np.int64),
                waits=np.zeros(n, np.int64),
                offset=np.zeros(n, np.int64),
                stopped=np.zeros(n, bool),
                needed=np.zeros(n, np.int64),
                need_stmt=np.zeros(n, np.int64),
                last_wait=np.zeros(n, np.int64),
            )
        return self.elements[key]

    def wait(
        self, stmt: Any, key: tuple[Any, int], state: _Element, mask: Any, parity: np.ndarray
    ) -> None:
        self.stmts.append(stmt)
        index = len(self.stmts) - 1
        live = mask & ~state.stopped
        first = live & (state.waits == 0)
        state.offset[first] = -parity[first]
        if first.any() and key[0] in self.tx_barriers and (parity[first] == 1).any():
            thread = int(np.flatnonzero(first & (parity == 1))[0])
            self.report(
                stmt, key, state.arrive_stmt, "first-wait",
                f"thread {thread}'s first wait on {_name(key)} waits parity 1, which a "
                "fresh mbarrier has already completed (it starts in phase 0): the wait "
                f"returns before the TMA bytes of phase 0 land{self.where()}. Wait on "
                "parity 0 first: (k // stages) % 2 for a ring of stages",
            )
            state.stopped |= first & (parity == 1)
        later = live & (state.waits > 0)
        expected = (state.waits + state.offset) % 2
        wrong = later & (parity != expected)
        if wrong.any():
            thread = int(np.flatnonzero(wrong)[0])
            count = int(state.waits[thread])
            self.report(
                stmt, key, self.stmts[int(state.last_wait[thread])], "alternation",
                f"thread {thread}'s wait number {count + 1} on {_name(key)} waits parity "
                f"{int(parity[thread])}, the parity of its previous wait on that element"
                f"{self.where()}: it observes the phase that wait already saw or the next "
                "one, depending on timing. Each wait on an element must wait the next "
                "phase: parity (k // stages) % 2 for a ring of stages (+ 1 for a stage "
                "that starts free)",
            )
            state.stopped |= wrong
        counted = mask & ~state.stopped
        needed = state.waits + state.offset + 1
        behind = counted & (needed < state.arrive_ops)
        if behind.any():
            thread = int(np.flatnonzero(behind)[0])
            self.report(
                stmt, key, state.arrive_stmt, "own-arrival",
                f"thread {thread} arrived {int(state.arrive_ops[thread])} time(s) on "
                f"{_name(key)} and then waits parity {int(parity[thread])}, which needs only "
                f"{int(needed[thread])} completed phase(s){self.where()}: the wait returns "
                "without waiting for the phase its own arrival belongs to (the other "
                "arrivers of that phase may not be done). Wait the phase of the arrival: "
                "parity (k // stages) % 2",
            )
            state.stopped |= behind
            counted &= ~behind
        state.needed[counted] = needed[counted]
        state.need_stmt[counted] = index
        state.waits[mask] += 1
        state.last_wait[mask] = index

    def where(self) -> str:
        loops = [f"{var.name} = {int(self.env[var])}" for var in self.loops]
        return f" (at {', '.join(loops)})" if loops else ""

    def report(self, stmt: Any, key: tuple[Any, int], earlier: Any, rule: str, text: str) -> None:
        if (stmt, rule) in self._reported or key[0] in self.unmodelled:
            return
        self._reported.add((stmt, rule))
        self.findings.append(
            MbarrierParityFinding(str(key[0].name), key[1], stmt, earlier, text)
        )

    def completions(self) -> None:
        """Rule 3: waits that need more phases than the arrivals can complete."""
        for key, state in self.elements.items():
            count = self.inits.get(key)
            if count is None or count <= 0 or key[0] in self.unmodelled:
                continue
            if not state.arrivals.any():
                continue  # phases from expect_tx / complete_tx alone: not counted here
            phases = int(state.arrivals.sum()) // count
            short = state.needed > phases
            if not short.any():
                continue
            thread = int(np.flatnonzero(short)[0])
            stmt = self.stmts[int(state.need_stmt[thread])]
            self.report(
                stmt, key, state.arrive_stmt, "count",
                f"thread {thread} waits on {_name(key)} for {int(state.needed[thread])} "
                f"completed phases, but its arrivals ({int(state.arrivals.sum())}, init "
                f"count {count}) complete at most {phases}: the wait never returns. Check "
                "the parity (each wait on an element waits the next phase) and that every "
                "phase gets its arrivals",
            )


def _name(key: tuple[Any, int]) -> str:
    return f"{key[0].name}[{key[1]}]"


def _is_mbarrier_call(call: Any) -> bool:
    name = callee_name(call)
    return name.startswith(
        (_PTX + "mbarrier_", _PTX + "cp_async_bulk_tensor_g2s", _PTX + "cp_async_bulk_g2s",
         "tirx.cuda.mbarrier_wait")
    )


def _operand(call: Any, operand: str) -> Any:
    """The argument of a ``tirx.ptx`` call bound to the PTX table's operand ``operand``
    (operands with a fixed literal take no argument); ``None`` if it has none."""
    from tvm.backend.cuda.ptx import table

    entry = table.TABLE.get(callee_name(call)[len(_PTX) :])
    if entry is None:
        return None
    names = [slot.name for slot in entry.operands if slot.literal is None]
    if operand not in names or names.index(operand) >= len(call.args):
        return None
    return call.args[names.index(operand)]


def _transaction_barriers(body: Any) -> set[Any]:
    """mbarrier buffers whose phases carry TMA transaction bytes (``expect_tx``, TMA loads
    completing on them, ``complete_tx``)."""
    found: set[Any] = set()

    def check(node: Any) -> None:
        if not isinstance(node, ir.expr.Call):
            return
        name = callee_name(node)
        tma = name.startswith((_PTX + "cp_async_bulk_tensor_g2s", _PTX + "cp_async_bulk_g2s"))
        if tma or "expect_tx" in name or "complete_tx" in name:
            element = mbarrier_element(node)
            if element is not None:
                found.add(element[0])

    post_order_visit(body, check, (ir.expr.Call,))
    return found


def mbarrier_parity_findings(func: Any) -> list[MbarrierParityFinding]:
    """Waits of ``func`` whose ``try_wait.parity`` is provably wrong (rules in the module
    docstring); empty when there are none or when the check cannot follow the kernel.

    Args:
        func: a ``tvm.tirx.PrimFunc`` whose threads are bound with ``T.thread_binding``.
    """
    block = block_thread_values(thread_tags(func), collect_thread_extents(func))
    if block is None:
        return []
    threads, env = block
    scalars = single_assignment_scalars(func)
    walk = _Walk(threads, dict(env), _transaction_barriers(func.body), scalars)
    try:
        walk.run(func.body, np.ones(threads, dtype=bool))
    except _Unknown:
        return []
    walk.completions()
    return [f for f in walk.findings if f.wait is not None]
