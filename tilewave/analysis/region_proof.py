"""Proofs that two shared accesses made by *different threads* never touch one element.

:func:`tilewave.analysis.shared_access.may_conflict` first tries cheap interval and
ownership rules; when they fail it asks :func:`prove_no_overlap`, which states the
question to TVM's arithmetic analyzer (``tvm.sym.analyzer``; its Z3 fallback when the
wheel has one) and accepts only what the analyzer proves:

* the second access is renamed: its thread indices become fresh ``t'`` and its loop
  variables fresh ``k'`` (ranges kept), except loops the caller says run in the *same*
  iteration (``k' = k``) or in the *next* one (``k' = k + step``);
* both accesses' path conditions (enclosing ``if``s, ``Bind`` values already
  substituted) and the loop ranges become constraints;
* the goal is ``t == t'`` (one thread: program order) or some index differs.

Anything the analyzer cannot read (loads, opaque calls, ``Let``) makes an index
unanalysable (no proof) and a condition dropped (fewer constraints: still sound).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tvm import ir, tirx
from tvm.sym.analyzer import Analyzer, ProofStrength

from tilewave.analysis.index_enumeration import ANY, FAR, enumerate_no_overlap
from tilewave.analysis.interval_bounds import apart_with_loops_fixed
from tilewave.ir.walker import TIRMutator, post_order_visit, substitute

if TYPE_CHECKING:
    from tilewave.analysis.access_model import LoopRange, SharedAccess

__all__ = ["ANY", "FAR", "common_loops", "prove_no_overlap"]

#: the most the Z3 fallback may spend on one query; unproven means "may conflict"
Z3_TIMEOUT_MS = 200



class _MaskToMod(TIRMutator):
    """``x & (2**n - 1)`` is ``floormod(x, 2**n)`` in two's complement; the analyzer and Z3
    reason about the latter (multibuffer slots ``(k - 1) & 1``)."""

    def visit_BitwiseAnd(self, node: Any) -> Any:
        node = self.generic_visit(node)
        if not isinstance(node, tirx.BitwiseAnd):
            return node
        for x, mask in ((node.a, node.b), (node.b, node.a)):
            if isinstance(mask, tirx.IntImm) and int(mask.value) >= 0:
                m = int(mask.value) + 1
                if m & (m - 1) == 0:
                    return tirx.floormod(x, tirx.IntImm(str(mask.ty), m))
        return node


def _free_vars(exprs: Sequence[Any]) -> list[ir.expr.Var]:
    found: list[ir.expr.Var] = []

    def check(node: Any) -> None:
        if isinstance(node, ir.expr.Var) and not any(node.same_as(v) for v in found):
            found.append(node)

    for expr in exprs:
        post_order_visit(expr, check)
    return found


def common_loops(a: SharedAccess, b: SharedAccess) -> list[tuple[LoopRange, LoopRange]]:
    """The aligned loops enclosing both accesses (same ``For`` statement), outermost first.

    Only these can relate the two accesses' loop variables; see ``LoopRange.aligned``.
    """
    pairs = []
    for la, lb in zip(a.loops, b.loops, strict=False):
        if la.loop is None or lb.loop is None or not la.loop.same_as(lb.loop):
            break
        if la.aligned:
            pairs.append((la, lb))
    return pairs


def _fresh(var: Any) -> ir.expr.Var:
    """A new variable standing for ``var`` as the second thread sees it."""
    return tirx.Var(f"{var.name}_b", var.ty)


def _bind_range(an: Analyzer, var: Any, lo: int, extent: int) -> None:
    an.bind(var, ir.Range(lo, lo + extent))


def _loop_constraints(loop: LoopRange, var: Any, rename: Mapping[Any, Any]) -> list[Any]:
    if loop.bounds is None:
        return []
    lo, ext = (substitute(e, rename) for e in loop.bounds)
    return [tirx.And(lo <= var, var < lo + ext)]


def _prove_one(
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    distances: Mapping[Any, int],
    same_thread_ordered: bool,
    positions: Mapping[Any, int],
    finished: Mapping[Any, int],
) -> bool:
    an = Analyzer()
    if an.is_z3_enabled:
        an.set_z3_timeout_ms(Z3_TIMEOUT_MS)
    rename: dict[Any, Any] = {}
    constraints: list[Any] = []
    same_thread: list[Any] = []
    for t, ext in thread_extents.items():
        fresh = _fresh(t)
        rename[t] = fresh
        if ext > 0:
            _bind_range(an, t, 0, ext)
            _bind_range(an, fresh, 0, ext)
        else:
            constraints += [t >= 0, fresh >= 0]
        if ext != 1:
            same_thread.append(tirx.EQ(t, fresh))
    for loop in a.loops:
        if loop.min is not None and loop.extent is not None and loop.extent > 0:
            _bind_range(an, loop.var, loop.min, loop.extent)
            back = finished.get(loop.loop, ANY) if loop.loop is not None else ANY
            if back < ANY and loop.step is not None and loop.step > 0:
                # the loop has exited: a ran `back` iterations before its last one
                last = loop.min + (loop.extent - 1) * loop.step
                if back < FAR:
                    constraints.append(tirx.EQ(loop.var, last - back * loop.step))
                else:
                    constraints.append(loop.var <= last - FAR * loop.step)
        else:
            constraints += _loop_constraints(loop, loop.var, {})
    for loop in b.loops:
        dist = distances.get(loop.loop, ANY) if loop.loop is not None else ANY
        if dist == 0:
            continue  # the same iteration: k' = k
        if 0 < dist < FAR and loop.step is not None:
            shifted = loop.var + dist * loop.step
            rename[loop.var] = shifted
            constraints += _loop_constraints(loop, shifted, rename)
            continue
        pos = positions.get(loop.loop, ANY) if loop.loop is not None else ANY
        if pos < FAR and loop.step is not None and loop.bounds is not None:
            # b runs in iteration `pos` of a loop entered after a: its variable is known,
            # and that iteration exists (a loop of `n <= 1` iterations has no iteration 1)
            rename[loop.var] = loop.bounds[0] + pos * loop.step
            constraints += _loop_constraints(loop, rename[loop.var], rename)
            continue
        fresh = _fresh(loop.var)
        rename[loop.var] = fresh
        if loop.step is not None and loop.step > 0:
            if dist == FAR:  # FAR or more iterations after a's
                constraints.append(fresh >= loop.var + FAR * loop.step)
            elif pos == FAR and loop.bounds is not None:  # iteration FAR or later
                constraints.append(fresh >= loop.bounds[0] + FAR * loop.step)
        if loop.min is not None and loop.extent is not None and loop.extent > 0:
            _bind_range(an, fresh, loop.min, loop.extent)
        else:
            constraints += _loop_constraints(loop, fresh, rename)
    ib, cb = list(b.resolved_indices), list(b.path_conditions)
    for var in _free_vars(ib + cb):
        if not any(var.same_as(k) for k in rename) and not _is_a_loop_var(var, a, distances):
            # anything else (block index, parameter, unknown) may differ per thread
            rename[var] = _fresh(var)
    ib = [substitute(e, rename) for e in ib]
    cb = [substitute(e, rename) for e in cb]
    differ = [tirx.NE(ia, x) for ia, x in zip(a.resolved_indices, ib, strict=True)]
    goal_parts = differ + ([_all(same_thread)] if same_thread_ordered and same_thread else [])
    if same_thread_ordered and not same_thread:
        return True  # one thread only: nothing runs concurrently with it
    goal = _MaskToMod().visit(_any(goal_parts))
    with contextlib.ExitStack() as stack:
        for cond in [*constraints, *a.path_conditions, *cb]:
            stack.enter_context(an.constraint_scope(_MaskToMod().visit(cond)))
        return bool(an.can_prove(goal, ProofStrength.SYMBOLIC_BOUND))


def _is_a_loop_var(var: Any, a: SharedAccess, distances: Mapping[Any, int]) -> bool:
    """A loop variable of ``a`` kept as is in ``b`` (same or next iteration)."""
    return any(
        var.same_as(lp.var) and any(lp.loop is not None and lp.loop.same_as(k) for k in distances)
        for lp in a.loops
    )


def _all(parts: list[Any]) -> Any:
    out = parts[0]
    for part in parts[1:]:
        out = tirx.And(out, part)
    return out


def _any(parts: list[Any]) -> Any:
    out = parts[0]
    for part in parts[1:]:
        out = tirx.Or(out, part)
    return out


def prove_no_overlap(
    a: SharedAccess,
    b: SharedAccess,
    thread_extents: Mapping[Any, int],
    iterations: Mapping[Any, frozenset[int]] | None,
    same_thread_ordered: bool,
    positions: Mapping[Any, int] | None = None,
    finished: Mapping[Any, int] | None = None,
) -> bool:
    """True when it is proven that ``a`` and the later ``b``, made by two different threads,
    touch no common element.

    Args:
        a, b: accesses to one buffer with the same number of indices.
        thread_extents: thread-index variables and extents (0: unknown).
        iterations: for loops enclosing both (keyed by the ``For`` statement), the possible
            distances in iterations from ``a`` to ``b``: exactly ``d`` for ``d <`` :data:`FAR`,
            :data:`FAR` (that many or more) or :data:`ANY` (unknown); a loop not listed is ANY.
        same_thread_ordered: accesses of one thread are ordered (not true of async copies),
            so only pairs of distinct threads count.
        positions: loops around ``b`` only, entered after ``a``: completed iterations
            before ``b``'s (``b``'s loop variable is then ``min + position * step``).
        finished: loops around ``a`` only, exited before ``b``: ``a``'s distance from
            their last iteration.
    """
    if a.resolved_indices is None or b.resolved_indices is None:
        return False
    if not (a.indices_analysable and b.indices_analysable):
        return False
    common = common_loops(a, b)
    # finite index spaces are decided exactly (bit arithmetic such as XOR swizzles and
    # masks included, which the analyzer cannot read); the analyzer handles the rest
    aligned = {
        la.loop: v for la, _ in common for k, v in (iterations or {}).items() if k.same_as(la.loop)
    }
    # cheapest first: index ranges with the related loops at their values
    if apart_with_loops_fixed(
        a, b, thread_extents, common, aligned, positions or {}, finished or {}
    ):
        return True
    verdict = enumerate_no_overlap(
        a, b, thread_extents, aligned, same_thread_ordered, positions, finished
    )
    if verdict is not None:
        return verdict
    options = [
        sorted((iterations or {}).get(la.loop, frozenset({ANY}))) if iterations else [ANY]
        for la, _ in common
    ]
    for combo in itertools.product(*options):
        distances = {la.loop: d for (la, _), d in zip(common, combo, strict=True) if d != ANY}
        if not _prove_one(
            a, b, thread_extents, distances, same_thread_ordered, positions or {}, finished or {}
        ):
            return False
    return True
