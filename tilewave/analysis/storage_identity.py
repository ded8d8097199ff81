"""Which shared storage a buffer lives in, and where: the barrier pass's storage identity.

Two shared buffers are the same memory more often than their names suggest:

* ``T.decl_buffer(shape, dtype, data=S.data)`` declares a view over ``S``'s bytes (with its
  own element type and ``elem_offset``); TVM's ``StorageRewrite`` (which runs before the
  barrier stage) turns buffers whose lifetimes do not overlap into such views;
* every ``shared.dyn`` allocation ends up in one dynamic shared block: TVM's
  ``MergeSharedMemoryAllocations`` (after the barrier stage) places them at offsets it
  chooses and reuses memory between buffers whose uses do not overlap; under
  ``tirx.merge_static_smem`` it merges static ``shared`` buffers the same way.

:func:`storage_map` resolves every shared buffer of a function to a
:class:`BufferStorage`: its *root* allocation, the byte offset of its data in the root and
its element size. :func:`storage_relation` says what two buffers share:

* ``SAME``: one root, both byte offsets known, byte spans (offset, shape and element size)
  that may meet; :func:`unit_index` then writes an access's
  index in units common to both element sizes, and the element-level proof of
  :func:`tilewave.analysis.shared_access.may_conflict` compares the two;
* ``UNKNOWN``: memory that may overlap at an unknown offset (two ``shared.dyn`` roots that
  TVM's merge will place and whose uses do not overlap, a view whose data pointer is not
  read): may conflict;
* ``DISTINCT``: separate allocations no later pass places together (static ``shared``
  roots; ``shared.dyn`` roots that tilewave's own layout places apart, see
  :func:`dynamic_shared_placed_apart`; two pooled roots allocated in one statement list
  whose *lifetimes* overlap: TVM's merge records a use at the statement of the
  allocation's list that contains it (a loop or branch as a whole) and reuses memory only
  between buffers whose first-to-last used statements do not overlap, so buffers used by
  one common statement, or interleaved, get separate bytes).

The hazard verifier models storage again, independently (:mod:`.storage_model`).
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import tvm
from tvm import ir, tirx

from tilewave.analysis.shared_buffers import (
    SHARED_SCOPES,
    addresses_dynamic_shared,
    buffer_scope,
)
from tilewave.ir.intrinsics import op_name
from tilewave.ir.walker import ffi_list, post_order_visit, walk_nodes

__all__ = [
    "MERGE_STATIC_CONFIG",
    "BufferStorage",
    "StorageMap",
    "StorageRelation",
    "address_start",
    "allocation_bytes",
    "common_unit",
    "dynamic_shared_placed_apart",
    "storage_map",
    "storage_relation",
    "unit_index",
]

#: TVM's switch that makes ``MergeSharedMemoryAllocations`` merge static shared buffers too
MERGE_STATIC_CONFIG = "tirx.merge_static_smem"
_DYN = "shared.dyn"


class StorageRelation(enum.Enum):
    """How the memory of two shared buffers relates."""

    #: never the same bytes
    DISTINCT = "distinct"
    #: one allocation, byte offsets known: compare byte ranges
    SAME = "same"
    #: may overlap at an unknown offset
    UNKNOWN = "unknown"


@dataclass(frozen=True, eq=False)
class BufferStorage:
    """Where one shared buffer's elements are.

    Attributes:
        buffer: the buffer (a ``Var`` typed ``BufferType``).
        root: the allocation whose bytes it uses (a buffer ``Var``), ``None`` when its data
            pointer could not be read (may be any shared memory).
        base: byte offset of the buffer's data pointer in ``root`` (``None``: unknown).
        itemsize: bytes per element (1 for sub-byte types).
        pool: the merged block the root goes to after the barrier stage (``"shared.dyn"``,
            or ``"shared"`` under ``tirx.merge_static_smem``), ``None`` when no later pass
            moves it.
    """

    buffer: ir.expr.Var
    root: ir.expr.Var | None
    base: int | None
    itemsize: int
    pool: str | None = None
    #: for a pooled root (and its views): ``(statement list, first, last)``, the node
    #: handle of the ``SeqStmt`` allocating the root and the first and last of its items
    #: that use it; ``None`` when unknown
    lifetime: tuple[int, int, int] | None = None
    #: the root allocation's size in bytes (``None``: not constant)
    root_bytes: int | None = None

    @property
    def byte_span(self) -> tuple[int, int] | None:
        """``[first, end)`` bytes of ``root`` the buffer's elements can occupy (its
        ``elem_offset`` and constant shape/strides, accesses in bounds); ``None`` when not
        constant."""
        offset = self.elem_offset
        ty = self.buffer.ty
        shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in ty.shape]
        if self.base is None or offset is None or None in shape or 0 in shape:
            return None
        strides = list(ty.strides) or _row_major(list(ty.shape))
        steps = [int(s.value) if isinstance(s, tirx.IntImm) else None for s in strides]
        if None in steps or len(steps) != len(shape) or min(steps, default=0) < 0:
            return None
        last = offset + sum((n - 1) * step for n, step in zip(shape, steps, strict=True))
        return self.base + offset * self.itemsize, self.base + (last + 1) * self.itemsize

    @property
    def elem_offset(self) -> int | None:
        """The buffer's constant ``elem_offset`` (``None`` when symbolic)."""
        offset = self.buffer.ty.elem_offset
        return int(offset.value) if isinstance(offset, tirx.IntImm) else None

    def start_unit(self, start: tuple[Any, ...], unit: int) -> Any | None:
        """The first ``unit``-sized slot of the root at an address into the buffer:
        ``start`` is the indices of ``T.address_of(buffer[start])``, ``()`` the data
        pointer itself (``buffer.data``)."""
        if start:
            return unit_index(self, start, unit)
        return None if self.base is None else tirx.IntImm("int32", self.base // unit)

    def flat_index(self, indices: tuple[Any, ...]) -> Any | None:
        """The element offset from the data pointer of ``self.buffer[indices]`` (row-major
        or by the buffer's strides, ``elem_offset`` included); ``None`` when not constant-
        shaped or when an index is a vector."""
        ty = self.buffer.ty
        offset = self.elem_offset
        if offset is None or any(isinstance(i, tirx.Ramp) for i in indices):
            return None
        strides = list(ty.strides) or _row_major(list(ty.shape))
        if len(strides) != len(indices):
            return None
        flat: Any = None
        for index, stride in zip(indices, strides, strict=True):
            term = index if _is_one(stride) else index * stride
            flat = term if flat is None else flat + term
        if flat is None:
            return None
        return flat + offset if offset else flat


def _is_one(expr: Any) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr.value) == 1


def _row_major(shape: list[Any]) -> list[Any]:
    strides: list[Any] = []
    running: Any = tirx.IntImm("int32", 1)
    for extent in reversed(shape):
        strides.append(running)
        running = running * extent
    return strides[::-1]


def allocation_bytes(buffer: ir.expr.Var) -> int | None:
    """Bytes of ``buffer``'s allocation (``None``: a shape that is not constant)."""
    count = 1
    for extent in buffer.ty.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        count *= int(extent.value)
    return count * _itemsize(buffer)


def address_start(call: Any, buffer: ir.expr.Var) -> tuple[Any, ...] | None:
    """Where a call that takes ``buffer``'s address points into it: the indices of its
    ``T.address_of(buffer[...])``, ``()`` for ``buffer.data``, ``None`` when it does
    neither (or does it more than once)."""
    found: list[tuple[Any, ...]] = []

    def check(node: Any) -> None:
        if not isinstance(node, ir.expr.Call) or not isinstance(node.op, ir.Op):
            return
        args = node.args
        if op_name(node.op) == "tirx.buffer_data" and args and args[0].same_as(buffer):
            found.append(())
        elif (
            op_name(node.op) == "tirx.address_of"
            and args
            and type(args[0]).__name__ == "TensorLoad"
            and args[0].source.same_as(buffer)
        ):
            found.append(tuple(args[0].indices))

    post_order_visit(call, check)
    return found[0] if len(found) == 1 else None


def _itemsize(buffer: ir.expr.Var) -> int:
    dtype = tvm.DataType(str(buffer.ty.dtype))
    return max(1, dtype.bits * dtype.lanes // 8)


@dataclass(frozen=True)
class StorageMap:
    """Every shared buffer of one function with its :class:`BufferStorage`.

    Buffers the map does not know (declared outside the function body) are their own root.
    """

    storages: Mapping[Any, BufferStorage]
    #: the pool of a buffer the map does not know (``shared.dyn`` merged by TVM, or none)
    unknown_pool: Callable[[ir.expr.Var], str | None] = lambda buffer: None

    @functools.cached_property
    def _by_handle(self) -> dict[int, BufferStorage]:
        # TIR nodes hash by handle; a lookup keyed by the node itself would compare a new
        # Python wrapper of the same buffer with ``==``, which builds an ``EQ`` expression
        return {hash(buffer): storage for buffer, storage in self.storages.items()}

    def of(self, buffer: ir.expr.Var) -> BufferStorage:
        """The storage of ``buffer``."""
        found = self._by_handle.get(hash(buffer))
        if found is not None:
            return found
        return BufferStorage(buffer, buffer, 0, _itemsize(buffer), self.unknown_pool(buffer))


def _pool_of(buffer: ir.expr.Var, merge_static: bool) -> str | None:
    scope = buffer_scope(buffer)
    if scope == _DYN or (merge_static and scope in SHARED_SCOPES):
        return scope if scope == _DYN else "shared"
    return None


def dynamic_shared_placed_apart(func: tirx.PrimFunc) -> bool:
    """True when the pipeline lays ``func``'s ``shared.dyn`` buffers out with tilewave's own
    planner (:func:`tilewave.transforms.shared_layout.plan_dynamic_shared`: in allocation
    order, without reuse), which it does when a statement takes the address of one of them;
    otherwise TVM's ``MergeSharedMemoryAllocations`` places them and may reuse memory."""
    return addresses_dynamic_shared(func.body)


def _data_source(data: Any) -> tuple[ir.expr.Var, Any] | None:
    """``(buffer, element indices)`` a data pointer expression points at: ``S.data`` is
    ``(S, None)`` (the data pointer itself), ``T.address_of(S[i])`` is ``(S, (i,))``."""
    if not isinstance(data, ir.expr.Call) or not isinstance(data.op, ir.Op):
        return None
    name = op_name(data.op)
    if name == "tirx.buffer_data" and data.args:
        return data.args[0], None
    if name == "tirx.address_of" and data.args and type(data.args[0]).__name__ == "TensorLoad":
        load = data.args[0]
        return load.source, tuple(load.indices)
    return None


def _constant(expr: Any) -> int | None:
    simplified = tvm.sym.analyzer.Analyzer().simplify(expr)
    return int(simplified.value) if isinstance(simplified, tirx.IntImm) else None


def storage_map(func: tirx.PrimFunc, config: Mapping[str, Any] | None = None) -> StorageMap:
    """The storage of every shared buffer allocated or declared in ``func``.

    Args:
        func: the kernel.
        config: the ``PassContext`` config the pipeline runs under (default: the current
            one); ``tirx.merge_static_smem`` puts static shared buffers in one pool.
    """
    if config is None:
        config = dict(tvm.transform.PassContext.current().config)
    merge_static = bool(config.get(MERGE_STATIC_CONFIG, False))
    storages: dict[Any, BufferStorage] = {}
    apart: list[bool] = []  # decided on the first pooled buffer (a walk of the whole body)

    def pool(buffer: ir.expr.Var) -> str | None:
        found = _pool_of(buffer, merge_static)
        if found is None:
            return None
        if not apart:
            # tilewave's planner lays such a kernel out by itself (TVM's merge never sees it)
            apart.append(dynamic_shared_placed_apart(func))
        return None if apart[0] else found

    def resolve(node: Any) -> None:
        if isinstance(node, tirx.AllocBuffer):
            buffer = node.buffer
            if buffer_scope(buffer) in SHARED_SCOPES:
                storages[buffer] = BufferStorage(
                    buffer, buffer, 0, _itemsize(buffer), pool(buffer),
                    root_bytes=allocation_bytes(buffer),
                )
        elif isinstance(node, tirx.DeclBuffer) and buffer_scope(node.buffer) in SHARED_SCOPES:
            storages[node.buffer] = _view(node, storages, pool)

    # a view's source is declared before it
    post_order_visit(func.body, resolve, (tirx.AllocBuffer, tirx.DeclBuffer))
    lifetimes = _pool_lifetimes(func.body, storages)
    if lifetimes:
        storages = {
            buffer: replace(storage, lifetime=lifetimes.get(hash(storage.root)))
            if storage.root is not None
            else storage
            for buffer, storage in storages.items()
        }
    return StorageMap(storages, pool)


def _pool_lifetimes(
    body: Any, storages: Mapping[Any, BufferStorage]
) -> dict[int, tuple[int, int, int]]:
    """Root handle -> ``(SeqStmt handle, first, last)`` for every pooled root allocated in a
    statement list: the items of that list that name the root or one of its views."""
    roots = {
        hash(s.root)
        for s in storages.values()
        if s.pool is not None and s.root is not None and s.root.same_as(s.buffer)
    }
    root_of = {
        hash(buffer): hash(s.root)
        for buffer, s in storages.items()
        if s.root is not None and hash(s.root) in roots
    }
    found: dict[int, tuple[int, int, int]] = {}
    if not roots:
        return found  # no pooled allocation: no statement list to look at

    def on_list(seq: Any) -> None:
        items = ffi_list(seq.seq)
        here = {
            hash(item.buffer)
            for item in items
            if isinstance(item, tirx.AllocBuffer) and hash(item.buffer) in roots
        }
        if not here:
            return
        for index, item in enumerate(items):
            if isinstance(item, tirx.AllocBuffer):
                continue
            named: set[int] = set()

            def mention(var: Any, named: set[int] = named) -> None:
                root = root_of.get(hash(var))
                if root in here:
                    named.add(root)

            walk_nodes(item, {ir.expr.Var: mention})
            for root in named:
                _, first, last = found.get(root, (hash(seq), index, index))
                found[root] = (hash(seq), min(first, index), max(last, index))

    post_order_visit(body, on_list, (tirx.SeqStmt,))
    return found


def _live_together(a: BufferStorage, b: BufferStorage) -> bool:
    """Whether two pooled roots are allocated in one list and used by overlapping spans of
    its items (then TVM's merge gives them separate bytes)."""
    if a.lifetime is None or b.lifetime is None or a.lifetime[0] != b.lifetime[0]:
        return False
    return a.lifetime[1] <= b.lifetime[2] and b.lifetime[1] <= a.lifetime[2]


def _view(
    node: tirx.DeclBuffer,
    storages: Mapping[Any, BufferStorage],
    pool: Callable[[ir.expr.Var], str | None],
) -> BufferStorage:
    buffer = node.buffer
    size = _itemsize(buffer)
    if node.data is None:
        return BufferStorage(buffer, buffer, 0, size, pool(buffer))
    source = _data_source(node.data)
    if source is None or source[0] not in storages:
        return BufferStorage(buffer, None, None, size, pool(buffer))
    under, indices = source
    parent = storages[under]
    base = parent.base
    if base is not None and indices is not None:
        flat = parent.flat_index(indices)
        offset = _constant(flat) if flat is not None else None
        base = None if offset is None else base + offset * parent.itemsize
    return BufferStorage(
        buffer, parent.root, base, size, parent.pool, parent.lifetime, parent.root_bytes
    )


def storage_relation(a: BufferStorage, b: BufferStorage) -> StorageRelation:
    """How the memory of two buffers relates (see the module doc)."""
    if a.root is None or b.root is None:
        return StorageRelation.UNKNOWN
    if a.root.same_as(b.root):
        if a.base is None or b.base is None:
            return StorageRelation.UNKNOWN
        span_a, span_b = a.byte_span, b.byte_span
        if span_a is not None and span_b is not None and (
            span_a[1] <= span_b[0] or span_b[1] <= span_a[0]
        ):
            return StorageRelation.DISTINCT  # views of disjoint parts of one allocation
        return StorageRelation.SAME
    if a.pool is not None and a.pool == b.pool and not _live_together(a, b):
        return StorageRelation.UNKNOWN
    return StorageRelation.DISTINCT


def common_unit(a: BufferStorage, b: BufferStorage) -> int:
    """The largest number of bytes that divides both element sizes and both byte offsets:
    accesses of both buffers are whole units of it."""
    return math.gcd(a.itemsize, b.itemsize, a.base or 0, b.base or 0)


def unit_index(storage: BufferStorage, indices: tuple[Any, ...], unit: int) -> Any | None:
    """The first ``unit``-sized slot of the root that ``storage.buffer[indices]`` covers (it
    covers ``storage.itemsize // unit`` consecutive slots); ``None`` when not expressible."""
    flat = storage.flat_index(indices)
    if flat is None or storage.base is None:
        return None
    scale = storage.itemsize // unit
    start = flat * scale if scale != 1 else flat
    shift = storage.base // unit
    return start + shift if shift else start
