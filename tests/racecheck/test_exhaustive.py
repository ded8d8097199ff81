"""racecheck against exhaustive interleaving on tiny kernels (hypothesis).

A tiny kernel is 2-4 threads running a few statements on a 4-slot shared buffer: stores,
loads, block barriers (some only in one thread: a deadlock), and at most one ``cp.async``
with its commit and wait. The oracle below knows nothing of vector clocks: it explores every
interleaving of the threads' statements and of the async copy's write (which may land at
any moment between its issue and the ``wait_group`` that retires its group), and calls the
kernel racy when some reachable state has two conflicting accesses of different actors
enabled at once, and deadlocked when some reachable state has nothing enabled while a
thread has not finished. racecheck must give the same two verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.racecheck import racecheck

SLOTS = 4
RACES = {"RAW", "WAR", "WAW"}


@dataclass(frozen=True)
class Tiny:
    """A tiny kernel: thread count and statements (tuples, see the module docstring)."""

    threads: int
    stmts: tuple[tuple, ...]


# ---------------------------------------------------------------- TVMScript of a tiny kernel
def _slot(f: tuple, n: int) -> str:
    kind = f[0]
    if kind == "c":
        return str(f[1])
    return {"tx": "tx", "next": f"(tx + 1) % {n}", "rev": f"{n - 1} - tx"}[kind]


def _slot_of(f: tuple, thread: int, n: int) -> int:
    kind = f[0]
    if kind == "c":
        return f[1]
    return {"tx": thread, "next": (thread + 1) % n, "rev": n - 1 - thread}[kind]


def to_script(tiny: Tiny) -> str:
    n = tiny.threads
    body = []
    for i, stmt in enumerate(tiny.stmts):
        kind = stmt[0]
        if kind == "st":
            body.append(f"S[{_slot(stmt[1], n)}] = A[tx]")
        elif kind == "ld":
            body.append(f"B[{i * n} + tx] = S[{_slot(stmt[1], n)}]")
        elif kind == "bar":
            body.append('T.tvm_storage_sync("shared")')
        elif kind == "if_st":
            body.append(f"if tx == {stmt[1]}:\n            S[{_slot(stmt[2], n)}] = A[tx]")
        elif kind == "if_bar":
            body.append(f'if tx == {stmt[1]}:\n            T.tvm_storage_sync("shared")')
        elif kind == "cp":
            body.append(f"T.ptx.cp.async_.ca.shared.global_(T.address_of(S[{_slot(stmt[1], n)}]),"
                        " T.address_of(A[tx]), 4)")
        elif kind == "commit":
            body.append('T.ptx["cp.async.commit_group"]()')
        elif kind == "wait":
            body.append(f'T.ptx["cp.async.wait_group"]({stmt[1]})')
    lines = "\n        ".join(body) if body else "T.evaluate(0)"
    outputs = max(1, len(tiny.stmts)) * n
    return f'''
@T.prim_func
def tiny(A: T.Buffer(({n},), "float32"), B: T.Buffer(({outputs},), "float32")):
    for tx in T.thread_binding({n}, thread="threadIdx.x"):
        S = T.alloc_buffer(({SLOTS},), "float32", scope="shared")
        {lines}
'''


# ---------------------------------------------------------------- the interleaving oracle
def _thread_program(tiny: Tiny, thread: int) -> list[tuple]:
    """The statements ``thread`` executes, as events."""
    out = []
    n = tiny.threads
    for stmt in tiny.stmts:
        kind = stmt[0]
        if kind in ("st", "ld", "cp"):
            out.append((kind, _slot_of(stmt[1], thread, n)))
        elif kind == "if_st" and stmt[1] == thread:
            out.append(("st", _slot_of(stmt[2], thread, n)))
        elif kind == "bar" or (kind == "if_bar" and stmt[1] == thread):
            out.append(("bar",))
        elif kind in ("commit", "wait"):
            out.append(stmt)
    return out


def oracle(tiny: Tiny) -> tuple[bool, bool]:
    """(racy, deadlocked) over every interleaving."""
    n = tiny.threads
    programs = [_thread_program(tiny, t) for t in range(n)]
    # state: (pcs, waiting-at-barrier flags, per thread: commits, copies ((slot, group, done)...))
    start = (tuple([0] * n), tuple([False] * n), tuple((0, ()) for _ in range(n)))
    seen = set()
    stack = [start]
    racy = deadlocked = False
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        pcs, waiting, asyncs = state
        accesses = []  # (actor, slot, write)
        moves = []
        for t in range(n):
            commits, copies = asyncs[t]
            for i, (slot, _group, done) in enumerate(copies):
                if not done:
                    accesses.append((("unit", t), slot, True))
                    landed = (*copies[:i], (slot, _group, True), *copies[i + 1:])
                    moves.append((pcs, waiting, _set(asyncs, t, (commits, landed))))
            if waiting[t] or pcs[t] >= len(programs[t]):
                continue
            event = programs[t][pcs[t]]
            step = _set(pcs, t, pcs[t] + 1)
            kind = event[0]
            if kind in ("st", "ld"):
                accesses.append((("thread", t), event[1], kind == "st"))
                moves.append((step, waiting, asyncs))
            elif kind == "cp":
                copy = (event[1], commits, False)
                moves.append((step, waiting, _set(asyncs, t, (commits, (*copies, copy)))))
            elif kind == "commit":
                moves.append((step, waiting, _set(asyncs, t, (commits + 1, copies))))
            elif kind == "wait":
                limit = commits - event[1]
                if all(done for _s, group, done in copies if group < limit):
                    moves.append((step, waiting, asyncs))
            elif kind == "bar":
                arrived = _set(waiting, t, True)
                if all(arrived):  # the last arrival releases everyone
                    moves.append((tuple(p + 1 for p in pcs), tuple([False] * n), asyncs))
                else:
                    moves.append((pcs, arrived, asyncs))
        for i, (actor_a, slot_a, write_a) in enumerate(accesses):
            for actor_b, slot_b, write_b in accesses[i + 1:]:
                if actor_a != actor_b and slot_a == slot_b and (write_a or write_b):
                    racy = True
        finished = all(pcs[t] >= len(programs[t]) for t in range(n))
        if not moves and not finished:
            deadlocked = True
        stack.extend(moves)
    return racy, deadlocked


def _set(items: tuple, index: int, value: object) -> tuple:
    return (*items[:index], value, *items[index + 1:])


# ---------------------------------------------------------------- hypothesis strategies
def _slots(n: int) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.just("c"), st.integers(0, SLOTS - 1)),
        st.sampled_from([("tx",), ("next",), ("rev",)]),
    )


@st.composite
def tiny_kernels(draw: st.DrawFn) -> Tiny:
    n = draw(st.integers(2, 4))
    plain = st.one_of(
        st.tuples(st.just("st"), _slots(n)),
        st.tuples(st.just("ld"), _slots(n)),
        st.just(("bar",)),
        st.tuples(st.just("if_st"), st.integers(0, n - 1), _slots(n)),
    )
    stmts = draw(st.lists(plain, min_size=1, max_size=5))
    if draw(st.booleans()):  # one async copy, maybe committed, maybe waited for
        at = draw(st.integers(0, len(stmts)))
        tail = [("cp", draw(_slots(n)))]
        if draw(st.booleans()):
            tail.append(("commit",))
        if draw(st.booleans()):
            tail.append(("wait", draw(st.integers(0, 1))))
        if draw(st.booleans()):
            tail.append(("bar",))
        stmts[at:at] = tail
    if draw(st.integers(0, 9)) == 0:  # now and then a barrier one thread reaches alone
        stmts.insert(draw(st.integers(0, len(stmts))), ("if_bar", draw(st.integers(0, n - 1))))
    return Tiny(n, tuple(stmts))


def verdict(tiny: Tiny) -> tuple[bool, bool]:
    func = tvm.script.from_source(to_script(tiny))
    report = racecheck(func, "sm_90a", schedules=["lockstep"])
    return bool(report.kinds() & RACES), "deadlock" in report.kinds()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_kernels())
def test_racecheck_agrees_with_every_interleaving(tiny: Tiny) -> None:
    assert verdict(tiny) == oracle(tiny), to_script(tiny)


def test_oracle_sees_the_classic_cases() -> None:
    # the oracle itself: a missing barrier races, a barrier orders, a lone barrier deadlocks
    rev = ("rev",)
    assert oracle(Tiny(2, (("st", ("tx",)), ("ld", rev)))) == (True, False)
    assert oracle(Tiny(2, (("st", ("tx",)), ("bar",), ("ld", rev)))) == (False, False)
    assert oracle(Tiny(2, (("if_bar", 0),))) == (False, True)
    copy = (("cp", ("tx",)), ("wait", 0), ("commit",), ("bar",), ("ld", rev))
    assert oracle(Tiny(2, copy)) == (True, False)  # wait before commit: the copy is not waited
    fixed = (("cp", ("tx",)), ("commit",), ("wait", 0), ("bar",), ("ld", rev))
    assert oracle(Tiny(2, fixed)) == (False, False)
