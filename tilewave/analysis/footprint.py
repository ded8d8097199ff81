"""Structural footprints of shared accesses: proof results shared between statements.

The disjointness proofs (:func:`tilewave.analysis.shared_access.may_conflict`'s interval and
thread-ownership facts, :mod:`tilewave.analysis.index_enumeration`,
:func:`tilewave.analysis.region_proof.prove_no_overlap`) read of an access only

* its resolved indices and path conditions (expressions),
* the shape of its buffer (enumeration flattens the indices with it),
* its loops: variable, constant bounds, step, alignment, bound expressions, ``For``
  statement, for the loops whose variable it reads (a loop it does not read, with a
  constant non-empty range, changes nothing they compare: the questions about such a
  loop's iteration distances are dropped before they reach a proof),

and the kernel's thread extents (the same in one analysis run). Two accesses that agree on
all of these get the same answers, whichever statements make them: a generated kernel
writes ``S[tx]`` hundreds of times, an unrolled one reads one tile element in many places,
and a loop-invariant access inside a loop is the same access outside it.
:func:`footprint_of` makes that a hashable key; expressions compare structurally with
their free variables by *identity* (``tvm_ffi.StructuralKey``: ``tx`` of one kernel is not
``tx`` of another), loops by node handle, which the footprint keeps alive (a handle in a
key never comes to stand for another node). :class:`FootprintCache` holds results under
such keys for one analysis run; what depends on the footprint alone (the loops it
reads, :func:`loops_read`; the interval screen's index trees, in ``Footprint.memo``) is
kept on the footprint itself, and so lasts as long as the footprint's entry in the intern tables
(:func:`tilewave.kernel_memory.forget_kernels` empties them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import tvm_ffi
from tvm import ir, tirx

from tilewave.ir.walker import ffi_list
from tilewave.kernel_memory import kernel_table

__all__ = ["Footprint", "FootprintCache", "footprint_of", "loops_read"]


@dataclass(frozen=True, eq=False)
class Footprint:
    """What the disjointness proofs read of one access (see the module docstring).

    Footprints are interned (:func:`footprint_of` makes one object per distinct value), so
    they compare and hash by identity: the caches look footprints up thousands of times
    with no Python-level ``__eq__`` or ``__hash__`` call. (Past the intern table's limit an
    equal footprint may be made again; caches then miss, results stay the same.)

    Attributes:
        exprs: indices, path conditions, buffer shape and loop bound expressions, compared
            structurally (free variables by identity).
        loops: per loop kept (see :func:`footprint_of`) ``(var handle, min, extent,
            step, aligned, For handle or None)``.
        refs: the loop variables and ``For`` statements named by handle (kept alive).
        loops_read: handles of the ``For`` statements among ``loops`` whose variable the
            footprint reads (see :func:`loops_read`).
    """

    exprs: Any
    loops: tuple[tuple[Any, ...], ...]
    refs: tuple[Any, ...] = field(repr=False)
    loops_read: frozenset[int] = field(default=frozenset(), repr=False)
    #: what analyses derived from the footprint alone, by name (lives as long as it)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)


def footprint_of(access: Any) -> Footprint | None:
    """The footprint of a :class:`~tilewave.analysis.shared_access.SharedAccess` (``None``
    when its indices are not known: an access through a pointer)."""
    indices = access.resolved_indices
    if indices is None:
        return None
    loops = access.loops
    conditions = access.path_conditions
    keys = tuple(map(_loop_key, loops))
    # The same expression nodes make the same footprint: looked up by node handles before
    # hashing the expressions structurally (``S[tx]`` of many statements is one ``tx``).
    handles = (
        tuple(map(_handle, indices)),
        tuple(map(_handle, conditions)),
        _handle(access.buffer),
        tuple(None if lp.bounds is None else tuple(map(_handle, lp.bounds)) for lp in loops),
        keys,
    )
    known = _BY_HANDLES.get(handles)
    if known is not None:
        return known[0]
    kept, read = _loops_that_matter(indices, conditions, loops)
    bounds = [list(lp.bounds) if lp.bounds is not None else [] for lp in kept]
    kept_keys = tuple(map(_loop_key, kept))
    # The same nodes in loops the access does not read (``S[tx]`` in many small loops):
    # the same footprint, found without hashing the expressions structurally.
    kept_handles = (*handles[:3], tuple(tuple(map(_handle, b)) for b in bounds), kept_keys)
    known = _BY_HANDLES.get(kept_handles)
    if known is not None:
        found = known[0]
    else:
        exprs = tvm_ffi.StructuralKey(
            [list(indices), list(conditions), ffi_list(access.buffer.ty.shape), bounds]
        )
        refs = tuple(lp.var for lp in kept) + tuple(lp.loop for lp in kept if lp.loop is not None)
        reads = frozenset(
            hash(lp.loop) for lp in kept if lp.loop is not None and hash(lp.var) in read
        )
        found = _interned(exprs, kept_keys, refs, reads)
    if len(_BY_HANDLES) >= _INTERNED_LIMIT:
        _BY_HANDLES.clear()
    # (the nodes named by handle are kept alive with the entry: a handle never comes to
    # stand for another node while its entry exists)
    alive = (indices, conditions, access.buffer, bounds, loops)
    _BY_HANDLES[handles] = _BY_HANDLES[kept_handles] = (found, alive)
    return found


def _loop_key(lp: Any) -> tuple[Any, ...]:
    return (
        hash(lp.var),
        lp.min,
        lp.extent,
        lp.step,
        lp.aligned,
        None if lp.loop is None else hash(lp.loop),
    )


def _loops_that_matter(
    indices: Any, conditions: Any, loops: Any
) -> tuple[tuple[Any, ...], frozenset[int]]:
    """The loops a footprint keeps: those whose variable an index, a path condition or a
    loop bound reads, and those whose range is not a known non-empty constant one. A loop
    left out runs its body at least once and changes no value the proofs compare, so a
    loop-invariant access shares its footprint with the same access in another loop or
    in none (a proof of an empty loop's body may hold vacuously: such a loop is kept).
    Also returns the handles of the variables read."""
    if not loops:
        return (), frozenset()
    exprs = [*indices, *conditions]
    exprs += [bound for lp in loops if lp.bounds is not None for bound in lp.bounds]
    read = frozenset(handle for expr in exprs for handle in _variables_read(expr))
    kept = tuple(
        lp
        for lp in loops
        if hash(lp.var) in read or lp.min is None or lp.extent is None or lp.extent <= 0
    )
    return kept, read


def _variables_read(expr: Any) -> tuple[int, ...] | frozenset[int]:
    """Handles of the free variables of ``expr`` (a variable and a constant, the commonest
    indices and bounds, without asking TVM)."""
    kind = type(expr)
    if kind is tirx.IntImm:
        return ()
    if kind is ir.expr.Var:
        return (hash(expr),)
    return frozenset(map(hash, ffi_list(tirx.analysis.undefined_vars(expr, []))))


def loops_read(access: Any) -> frozenset[int]:
    """Handles of the ``For`` statements around ``access`` whose variable its footprint
    reads: in an index, a path condition or a loop bound (the proofs see nothing else of
    a loop, so its iteration distances cannot change their answer about this access).
    Found when the footprint is made (empty without one: an access through a pointer has
    no indices to read a loop with)."""
    footprint = access.footprint
    return frozenset() if footprint is None else footprint.loops_read


#: a node's handle (``hash`` of a constant is its value: ``3`` of int32 and of int64 agree)
_handle: Callable[[Any], int] = tvm_ffi.Object.__hash__
#: footprints by the node handles of their expressions (see :func:`footprint_of`)
_BY_HANDLES: dict[tuple[Any, ...], tuple[Footprint, tuple[Any, ...]]] = kernel_table()


#: one object per distinct footprint: the caches then find a footprint by identity instead
#: of comparing expressions structurally on every lookup (a kernel asks about the same few
#: footprints thousands of times)
_INTERNED: dict[tuple[Any, Any], Footprint] = kernel_table()
_INTERNED_LIMIT = 100_000


def _interned(
    exprs: Any, loops: tuple[tuple[Any, ...], ...], refs: tuple[Any, ...], reads: frozenset[int]
) -> Footprint:
    """The footprint of this value (``reads``, its loops read, follows from the value)."""
    key = (exprs, loops)
    found = _INTERNED.get(key)
    if found is None:
        if len(_INTERNED) >= _INTERNED_LIMIT:
            _INTERNED.clear()
        found = _INTERNED[key] = Footprint(exprs, loops, refs, reads)
    return found


class FootprintCache:
    """Results keyed by footprints (and anything else hashable) within one analysis run:
    the run is the thread-extent map object it passes (each pass or verifier run collects
    its own), so nothing is shared between runs and a benchmark's repeated run costs what
    the first did. Only the ``runs`` most recent runs are kept (their index spaces can be
    large), each with at most ``limit`` entries (a run's entries are dropped at the
    limit). A run's entries keep its map alive, so its ``id`` stays the run's."""

    def __init__(self, limit: int = 50_000, runs: int = 4) -> None:
        #: id of a run's map -> (the map, that run's entries), oldest run first
        self._runs: dict[int, tuple[Mapping[Any, int], dict[Hashable, Any]]] = {}
        self._limit = limit
        self._max_runs = runs

    def lookup(self, key: Hashable, thread_extents: Mapping[Any, int]) -> tuple[bool, Any]:
        """``(True, result)`` stored under ``key`` in this run, else ``(False, None)``."""
        run = self._runs.get(id(thread_extents))
        if run is None or key not in run[1]:
            return (False, None)
        return (True, run[1][key])

    def put(self, key: Hashable, thread_extents: Mapping[Any, int], value: Any) -> Any:
        """Store ``value`` under ``key`` for this run; returns it."""
        run = self._runs.get(id(thread_extents))
        if run is None:
            while len(self._runs) >= self._max_runs:
                del self._runs[next(iter(self._runs))]  # the oldest run
            run = self._runs[id(thread_extents)] = (thread_extents, {})
        if len(run[1]) >= self._limit:
            run[1].clear()
        run[1][key] = value
        return value
