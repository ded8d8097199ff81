"""The hazard verifier's own model of shared storage (written apart from the barrier pass's
:mod:`tilewave.analysis.storage_identity`, so the two do not share a blind spot).

Every shared access is placed at **absolute byte addresses** of an allocation:

* an ``AllocBuffer`` of a shared scope is an allocation; its element ``i`` is at bytes
  ``[i * size, (i + 1) * size)``;
* a ``DeclBuffer`` whose data is ``X.data`` or ``T.address_of(X[j])`` lies in ``X``'s
  allocation at ``X``'s byte address (plus ``j``'s bytes), element size from its own dtype;
  any other data pointer is an unknown place in shared memory;
* ``shared.dyn`` allocations all share the dynamic shared block: a kernel that takes the
  address of one is laid out by tilewave in allocation order without reuse (separate
  memory), any other by TVM's ``MergeSharedMemoryAllocations`` after the barrier stage, at
  offsets not known here (any two may overlap). ``tirx.merge_static_smem`` merges static
  shared buffers too.

Two accesses of different buffers in one allocation become accesses of the allocation's
bytes (each element covers ``size`` consecutive bytes) and are judged as two accesses of one
buffer by :func:`tilewave.analysis.shared_access.may_conflict`.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import ir, tirx

from tilewave.analysis.shared_access import AccessKind, SharedAccess, may_conflict
from tilewave.analysis.shared_buffers import (
    SHARED_SCOPES,
    addresses_dynamic_shared,
    buffer_scope,
)
from tilewave.analysis.uniform_writes import stores_alike
from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import TIRVisitor, ffi_list

__all__ = ["SharedMemoryModel"]


@dataclass(frozen=True, eq=False)
class _Placement:
    """Where a buffer's element 0 is: ``(allocation, byte)``; ``allocation`` None: unknown."""

    allocation: Any
    byte: int | None
    size: int
    block: str | None


def _element_bytes(buffer: Any) -> int:
    dtype = tvm.DataType(str(buffer.ty.dtype))
    return max(1, (dtype.bits * dtype.lanes + 7) // 8)


def _allocation_bytes(allocation: Any) -> int | None:
    """Bytes of an allocation with a constant shape."""
    if allocation is None:
        return None
    total = _element_bytes(allocation)
    for extent in allocation.ty.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        total *= int(extent.value)
    return total


def _linear_offset(buffer: Any, indices: list[Any]) -> Any | None:
    """``buffer[indices]``'s element offset from its data pointer, or None."""
    ty = buffer.ty
    if not isinstance(ty.elem_offset, tirx.IntImm) or any(
        isinstance(i, tirx.Ramp) for i in indices
    ):
        return None
    dims = list(ty.shape)
    if ty.strides:
        strides = list(ty.strides)
    else:
        strides, step = [], 1
        for extent in reversed(dims):
            if not isinstance(extent, tirx.IntImm):
                step = None
            strides.insert(0, step)
            step = step * int(extent.value) if step is not None else None
    if len(strides) != len(indices) or any(s is None for s in strides):
        return None
    total: Any = tirx.IntImm("int32", int(ty.elem_offset.value))
    for index, stride in zip(indices, strides, strict=True):
        total = index * stride + total
    return total


class _Placements(TIRVisitor):
    def __init__(self, merge_static: bool) -> None:
        self.found: dict[Any, _Placement] = {}
        self.merge_static = merge_static

    def block(self, buffer: Any) -> str | None:
        scope = buffer_scope(buffer)
        if scope == "shared.dyn":
            return "dynamic"
        return "dynamic" if self.merge_static and scope in SHARED_SCOPES else None

    def visit_AllocBuffer(self, node: Any) -> None:
        if buffer_scope(node.buffer) in SHARED_SCOPES:
            self.found[node.buffer] = _Placement(
                node.buffer, 0, _element_bytes(node.buffer), self.block(node.buffer)
            )
        self.generic_visit(node)

    def visit_DeclBuffer(self, node: Any) -> None:
        buffer = node.buffer
        if buffer_scope(buffer) in SHARED_SCOPES:
            size = _element_bytes(buffer)
            self.found[buffer] = self._placed(node.data, size) or _Placement(
                None, None, size, self.block(buffer)
            )
        self.generic_visit(node)

    def _placed(self, data: Any, size: int) -> _Placement | None:
        if data is None or not isinstance(data, ir.expr.Call) or not isinstance(data.op, ir.Op):
            return None
        if op_name(data.op) == "tirx.buffer_data":
            parent = self.found.get(data.args[0])
            return None if parent is None else _Placement(
                parent.allocation, parent.byte, size, parent.block
            )
        if op_name(data.op) == "tirx.address_of" and type(data.args[0]).__name__ == "TensorLoad":
            load = data.args[0]
            parent = self.found.get(load.source)
            offset = _linear_offset(load.source, list(load.indices))
            if parent is None or offset is None or parent.byte is None:
                return None
            value = tvm.sym.analyzer.Analyzer().simplify(tvm.runtime.convert(offset))
            if not isinstance(value, tirx.IntImm):
                return None
            byte = parent.byte + int(value.value) * parent.size
            return _Placement(parent.allocation, byte, size, parent.block)
        return None


class _Lifetimes(TIRVisitor):
    """For pooled allocations: the statement list allocating each and the positions, in
    that list, of the items using it (directly or through a view). TVM's merge attributes a
    use to the item of the allocation's list that contains it and reuses memory only
    between allocations whose used spans do not overlap."""

    def __init__(self, placements: Mapping[Any, _Placement]) -> None:
        # by node handle: a dict keyed by the buffer itself compares a new Python wrapper
        # of the same variable with ``==``, which builds an ``EQ`` expression
        self.placements = {hash(buffer): p for buffer, p in placements.items()}
        #: allocation handle -> (the SeqStmt allocating it, positions of its items using it)
        self.uses: dict[int, tuple[Any, list[int]]] = {}
        self._path: list[tuple[Any, int]] = []  # enclosing (SeqStmt, item position)

    def visit_SeqStmt(self, node: Any) -> None:
        for position, item in enumerate(ffi_list(node.seq)):
            if isinstance(item, tirx.AllocBuffer):
                placement = self.placements.get(hash(item.buffer))
                if placement is not None and placement.block is not None:
                    self.uses.setdefault(hash(placement.allocation), (node, []))
                continue
            self._path.append((node, position))
            self.visit(item)
            self._path.pop()

    def visit_Var(self, node: Any) -> None:
        placement = self.placements.get(hash(node))
        if placement is None or placement.allocation is None:
            return
        entry = self.uses.get(hash(placement.allocation))
        if entry is None:
            return
        seq, positions = entry
        for owner, position in self._path:
            if owner.same_as(seq):
                positions.append(position)
                return

    def live_together(self, a: Any, b: Any) -> bool:
        """Whether allocations ``a`` and ``b`` sit in one list with overlapping used spans."""
        ua, ub = self.uses.get(hash(a)), self.uses.get(hash(b))
        if ua is None or ub is None or not ua[0].same_as(ub[0]) or not ua[1] or not ub[1]:
            return False
        return min(ua[1]) <= max(ub[1]) and min(ub[1]) <= max(ua[1])


#: :meth:`SharedMemoryModel._buffer_relation`: the buffers alone do not decide
_COMPARE_BYTES = object()


def _apart(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and (a[1] <= b[0] or b[1] <= a[0])


class SharedMemoryModel:
    """The verifier's picture of one function's shared memory (see the module doc).

    Args:
        func: the kernel.
        config: the ``PassContext`` config (default: the current one).
    """

    def __init__(self, func: tirx.PrimFunc, config: Mapping[str, Any] | None = None) -> None:
        if config is None:
            config = dict(tvm.transform.PassContext.current().config)
        walker = _Placements(bool(config.get("tirx.merge_static_smem", False)))
        walker.visit(func.body)
        self._placements = {hash(buffer): p for buffer, p in walker.found.items()}
        self._lifetimes = _Lifetimes(walker.found)
        if any(p.block is not None for p in walker.found.values()):
            self._lifetimes.visit(func.body)  # (no pooled allocation: no lifetime matters)
        #: tilewave lays dynamic shared memory out without reuse when one buffer is addressed
        self._dynamic_apart = addresses_dynamic_shared(func.body)
        self._bytes: weakref.WeakKeyDictionary[SharedAccess, SharedAccess | None] = (
            weakref.WeakKeyDictionary()
        )
        #: :meth:`_buffer_relation` by the two buffers' node handles (the verifier asks
        #: about the same buffers for every pair of their accesses)
        self._pairs: dict[tuple[int, int], bool | object] = {}

    def _placement(self, buffer: Any) -> _Placement:
        found = self._placements.get(hash(buffer))
        if found is None:  # declared outside the body: a memory of its own
            return _Placement(buffer, 0, _element_bytes(buffer), None)
        return found

    def overlap_unknown(self, a: SharedAccess, b: SharedAccess) -> bool | None:
        """For accesses of two buffers: True when their bytes may meet at an unknown place,
        False when they are separate memory, None when both sit at known bytes of one
        allocation (compare them with :meth:`conflict`)."""
        pa, pb = self._placement(a.buffer), self._placement(b.buffer)
        if pa.allocation is None or pb.allocation is None:
            return True
        if not pa.allocation.same_as(pb.allocation):
            together = pa.block is not None and pa.block == pb.block
            if together and self._lifetimes.live_together(pa.allocation, pb.allocation):
                return False  # both in use at once: TVM's merge keeps their bytes apart
            return together and not (pa.block == "dynamic" and self._dynamic_apart)
        return True if pa.byte is None or pb.byte is None else None

    def conflict(
        self,
        a: SharedAccess,
        b: SharedAccess,
        thread_extents: Mapping[Any, int],
        iterations: Mapping[Any, frozenset[int]] | None = None,
        positions: Mapping[Any, int] | None = None,
        finished: Mapping[Any, int] | None = None,
    ) -> bool:
        """Whether two different threads may touch common bytes through accesses of two
        *different* buffers with one of them writing (same-buffer pairs: False; they are
        ``may_conflict``'s)."""
        if a.buffer.same_as(b.buffer) or not (a.kind.writes or b.kind.writes):
            return False
        if a.kind is AccessKind.ATOMIC and b.kind is AccessKind.ATOMIC:
            return False
        if stores_alike(a, b, thread_extents):
            return False
        pair = (hash(a.buffer), hash(b.buffer))
        relation = self._pairs.get(pair)
        if relation is None:
            relation = self._pairs[pair] = self._buffer_relation(a, b)
        if relation is not _COMPARE_BYTES:
            return relation
        bytes_a, bytes_b = self._as_bytes(a), self._as_bytes(b)
        if bytes_a is None or bytes_b is None:
            return True
        return may_conflict(bytes_a, bytes_b, thread_extents, iterations, positions, finished)

    def _buffer_relation(self, a: SharedAccess, b: SharedAccess) -> bool | object:
        """What the two accesses' buffers alone decide: True (may overlap), False (apart)
        or :data:`_COMPARE_BYTES` (known bytes of one allocation: compare the accesses)."""
        unknown = self.overlap_unknown(a, b)
        if unknown is not None:
            return unknown
        if _apart(self._extent(a.buffer), self._extent(b.buffer)):
            return False  # two views of disjoint parts of one allocation
        return _COMPARE_BYTES

    def _extent(self, buffer: Any) -> tuple[int, int] | None:
        """Bytes of its allocation that ``buffer``'s in-bounds elements lie in: from the
        byte of element 0 to the last element's end (``None``: not constant)."""
        place = self._placement(buffer)
        if any(not isinstance(s, tirx.IntImm) or int(s.value) < 0 for s in buffer.ty.strides):
            return None  # the corners need not be the lowest and highest elements
        first = _linear_offset(buffer, [tirx.IntImm("int32", 0) for _ in buffer.ty.shape])
        last = _linear_offset(
            buffer,
            [
                tirx.IntImm("int32", int(n.value) - 1) if isinstance(n, tirx.IntImm) else n
                for n in buffer.ty.shape
            ],
        )
        if place.byte is None or first is None or last is None:
            return None
        low = tvm.sym.analyzer.Analyzer().simplify(tvm.runtime.convert(first))
        high = tvm.sym.analyzer.Analyzer().simplify(tvm.runtime.convert(last))
        if not (isinstance(low, tirx.IntImm) and isinstance(high, tirx.IntImm)):
            return None
        lo, hi = sorted((int(low.value), int(high.value)))
        return place.byte + lo * place.size, place.byte + (hi + 1) * place.size

    def _as_bytes(self, access: SharedAccess) -> SharedAccess | None:
        """``access`` as an access of its allocation's bytes (cached per access)."""
        if access in self._bytes:
            return self._bytes[access]
        place = self._placement(access.buffer)
        # an element covers `size` bytes; a pointer (no indices) reaches from its address to
        # at most the allocation's end
        elements, reach = access.indices, place.size
        if elements is None and access.start is not None:
            elements, reach = access.start, _allocation_bytes(place.allocation)
        found = None
        if elements is not None and place.byte is not None and reach is not None:
            offset = (
                _linear_offset(access.buffer, list(elements))
                if elements
                else tirx.IntImm("int32", 0)  # the data pointer: element 0's address
            )
            if offset is not None:
                first = offset * place.size + place.byte  # its first byte
                found = access.spread_over(place.allocation, first, reach)
        self._bytes[access] = found
        return found
