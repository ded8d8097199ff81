"""Shared-memory layout for kernels whose shared tiles are reached through their address.

Hopper kernels hand shared tiles to the copy engine and the tensor cores by address
(``T.address_of(A_s[i])`` as a TMA destination, a wgmma matrix descriptor, an mbarrier).
Three TVM passes of the default list get such tiles wrong, because they size and place a
buffer from its syntactic loads and stores only:

* ``s_tir.CompactBufferAllocation`` shrinks a buffer to the elements its ``address_of``
  expressions name (a 4-stage ring addressed at ``A_s[s * 8192]`` keeps 3 stages and one
  element);
* ``tirx.StorageRewrite`` lets a later buffer reuse a buffer's memory after its last
  syntactic use, although a TMA copy or a wgmma may still be reading it;
* ``s_tir.MergeSharedMemoryAllocations`` fails ("buffer_byte_offsets") on dynamic shared
  buffers that are only addressed, and aligns buffers to 64 bytes where a 128B-swizzled
  TMA / wgmma tile needs 1024.

This module replaces them for such kernels:

* :func:`keep_addressed_shared` wraps a TVM pass so that shared buffers whose address is
  taken keep their declared size and their memory: around the pass each gets a use of its
  whole address right after its allocation and at the end of its scope;
* :func:`plan_dynamic_shared` lays every ``shared.dyn`` buffer of a kernel out in one
  ``uint8`` buffer (``buf_dyn_shmem``), in allocation order, without reuse; an addressed
  buffer is aligned to the largest swizzle atom that fits in it (:func:`address_alignment`,
  1024 bytes for any tile of at least 1 KiB), every buffer to at least its declared
  alignment (TVM's default is 64 bytes). Kernels without an
  addressed dynamic buffer are left to TVM's ``MergeSharedMemoryAllocations``
  (:func:`PlanSharedLayout` delegates).

Example::

    mod = tilewave.transforms.shared_layout.PlanSharedLayout()(mod)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import ir, s_tir, tirx

from tilewave.analysis.shared_buffers import shared_buffers_addressed
from tilewave.analysis.storage_identity import allocation_bytes
from tilewave.errors import MalformedKernelError, where
from tilewave.ir.walker import (
    TIRMutator,
    TIRVisitor,
    ffi_list,
    post_order_visit,
    rebuild,
    rebuild_seq,
    replace_nodes,
)

__all__ = [
    "CompactBufferAllocation",
    "PlanSharedLayout",
    "SharedSlot",
    "StorageRewrite",
    "address_alignment",
    "check_addressed_kept",
    "keep_addressed_shared",
    "plan_dynamic_shared",
    "shared_layout",
]

#: the largest alignment an addressed tile needs: one 128B-swizzle atom (8 rows x 128 B)
SWIZZLE_ATOM_BYTES = 1024
#: alignment of buffers only reached by loads and stores (one 16-byte vector access)
PLAIN_ALIGNMENT = 16
MERGED_NAME = "buf_dyn_shmem"
_DYN = "shared.dyn"


def address_alignment(size_bytes: int) -> int:
    """Alignment of an addressed shared buffer of ``size_bytes``: the largest power of two
    not above it, between 16 and 1024 (a 32B/64B/128B swizzle atom is 256/512/1024 bytes
    and a swizzled tile holds at least one)."""
    align = PLAIN_ALIGNMENT
    while align * 2 <= min(size_bytes, SWIZZLE_ATOM_BYTES):
        align *= 2
    return align


def _func_name(func: tirx.PrimFunc) -> str | None:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else None


def _data_of(buffer: ir.expr.Var) -> ir.expr.Call:
    return tirx.buffer_data(buffer)


def _is_marker(stmt: Any, names: frozenset[str]) -> bool:
    # TVM's passes may rebuild a buffer's Var, so markers are recognised by form and name:
    # a bare ``T.evaluate(buf.data)`` is a no-op no kernel needs.
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.expr.Call):
        return False
    call = stmt.value
    if not isinstance(call.op, ir.Op) or call.op.name != "tirx.buffer_data":
        return False
    return getattr(call.args[0], "name", None) in names


def _pin(body: Any, buffers: list[ir.expr.Var]) -> Any:
    """``body`` with ``T.evaluate(buf.data)`` after each allocation of a pinned buffer and
    at the end of the sequence it opens (the walk runs in C++ and calls Python only at
    sequences)."""
    handles = {hash(b) for b in buffers}

    def pinned(stmt: Any) -> bool:
        return type(stmt) is tirx.AllocBuffer and hash(stmt.buffer) in handles

    def rewrite(seq: tirx.SeqStmt) -> Any:
        items = ffi_list(seq.seq)
        if not any(pinned(s) for s in items):
            return None  # nothing pinned here: walk the children
        out: list[Any] = []
        tail: list[Any] = []
        for stmt in items:
            out.append(_pin(stmt, buffers))
            if pinned(stmt):
                out.append(tirx.Evaluate(_data_of(stmt.buffer)))
                tail.append(tirx.Evaluate(_data_of(stmt.buffer)))
        return tirx.SeqStmt(out + tail[::-1])

    return replace_nodes(body, tirx.SeqStmt, rewrite)


def _unpin(body: Any, buffers: list[ir.expr.Var]) -> Any:
    """``body`` without the markers :func:`_pin` added."""
    names = frozenset(b.name for b in buffers)
    out = _without_markers(body, names)
    left: list[Any] = []
    post_order_visit(out, lambda s: _is_marker(s, names) and left.append(s), (tirx.Evaluate,))
    if left:  # a marker outside a sequence (a TVM pass folded one): the general rewrite
        out = _Unpin(names).visit(out)
    return out


def _without_markers(body: Any, names: frozenset[str]) -> Any:
    # sequences are rebuilt as TIRMutator rebuilds them (nested sequences flattened, one
    # statement left: that statement); the walk between them runs in C++
    def rewrite(seq: tirx.SeqStmt) -> Any:
        items = ffi_list(seq.seq)
        kept = [_without_markers(s, names) for s in items if not _is_marker(s, names)]
        if len(kept) == len(items) and all(a is b for a, b in zip(kept, items, strict=True)):
            return seq
        return rebuild_seq(kept, seq)

    return replace_nodes(body, tirx.SeqStmt, rewrite)


class _Unpin(TIRMutator):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def visit_Evaluate(self, node: tirx.Evaluate) -> Any:
        return None if _is_marker(node, self.names) else node


def _addressed(func: tirx.PrimFunc) -> list[ir.expr.Var]:
    return shared_buffers_addressed(func.body)


def _allocated_bytes(body: Any) -> dict[str, int | None]:
    """Bytes of each buffer ``body`` allocates, by name (``None``: not a constant)."""
    sizes: dict[str, int | None] = {}

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AllocBuffer):
            buffer = node.buffer
            size = allocation_bytes(buffer)
            name = buffer.name
            sizes[name] = size if name not in sizes else None  # two of one name: unknown

    post_order_visit(body, visit, types=(tirx.AllocBuffer,))
    return sizes


def check_addressed_kept(
    before: tirx.PrimFunc, after: tirx.PrimFunc, pinned: list[ir.expr.Var], pass_name: str
) -> None:
    """Raise if ``pass_name`` shrank a shared buffer whose address the kernel takes.

    Raises:
        MalformedKernelError: naming the buffer, both sizes and how to disable the pass.
    """
    old, new = _allocated_bytes(before.body), _allocated_bytes(after.body)
    for buffer in pinned:
        was, now = old.get(buffer.name), new.get(buffer.name)
        if was is not None and now is not None and now < was:
            raise MalformedKernelError(
                f"{pass_name} shrank shared buffer '{buffer.name}' {where(_func_name(before))} "
                f"from {was} to {now} bytes, although the kernel takes its address (an async "
                "copy, a matrix descriptor or an mbarrier may use bytes TVM's pass does not "
                "see); its async ops would read or write past the new end. Disable the pass "
                f"for this kernel: PassContext(disabled_pass=[\"{pass_name}\"])."
            )


def keep_addressed_shared(
    tvm_pass: Callable[[], tvm.transform.Pass], name: str
) -> tvm.transform.Pass:
    """``tvm_pass`` as a module pass named ``name`` that leaves addressed shared buffers'
    size and memory alone.

    Around the wrapped pass, every shared buffer whose address a statement takes gets
    ``T.evaluate(buf.data)`` right after its allocation and at the end of the allocation's
    scope: a use of the whole buffer that lives as long as the buffer. TVM's passes then
    neither shrink it (CompactBufferAllocation) nor reuse its memory
    (StorageRewrite); the markers are removed afterwards, and a buffer the pass shrank all
    the same is an error (:func:`check_addressed_kept`).
    """

    def transform(mod: ir.IRModule, _ctx: tvm.transform.PassContext) -> ir.IRModule:
        pinned: dict[Any, list[ir.expr.Var]] = {}
        staged = {}
        for gvar, func in mod.functions.items():
            if isinstance(func, tirx.PrimFunc):
                buffers = _addressed(func)
                if buffers:
                    pinned[gvar.name_hint] = buffers
                    staged[gvar] = func.with_body(_pin(func.body, buffers))
        if not pinned:
            return tvm_pass()(mod)
        mod = tvm.IRModule({**dict(mod.functions.items()), **staged}, attrs=mod.attrs)
        originals = {gvar.name_hint: func for gvar, func in staged.items()}
        mod = tvm_pass()(mod)
        updates = {}
        for gvar, func in mod.functions.items():
            if isinstance(func, tirx.PrimFunc) and gvar.name_hint in pinned:
                buffers = pinned[gvar.name_hint]
                check_addressed_kept(originals[gvar.name_hint], func, buffers, name)
                updates[gvar] = func.with_body(_unpin(func.body, buffers))
        return tvm.IRModule({**dict(mod.functions.items()), **updates}, attrs=mod.attrs)

    return tvm.transform.module_pass(transform, opt_level=0, name=name)


def CompactBufferAllocation() -> tvm.transform.Pass:
    """TVM's ``s_tir.CompactBufferAllocation`` that keeps addressed shared buffers whole.

    It keeps TVM's pass name, so ``disabled_pass=["s_tir.CompactBufferAllocation"]`` still
    disables it.
    """
    return keep_addressed_shared(
        s_tir.transform.CompactBufferAllocation, "s_tir.CompactBufferAllocation"
    )


def StorageRewrite() -> tvm.transform.Pass:
    """TVM's ``tirx.StorageRewrite`` that never reuses an addressed shared buffer's memory
    (under TVM's pass name, like :func:`CompactBufferAllocation`)."""
    return keep_addressed_shared(tirx.transform.StorageRewrite, "tirx.StorageRewrite")


# ---------------------------------------------------------------- dynamic shared layout


@dataclass(frozen=True)
class SharedSlot:
    """Where :func:`plan_dynamic_shared` put one ``shared.dyn`` buffer.

    Attributes:
        name: the buffer's name.
        offset: byte offset in ``buf_dyn_shmem``.
        size: bytes.
        alignment: the alignment ``offset`` satisfies.
        addressed: whether a statement takes the buffer's address.
    """

    name: str
    offset: int
    size: int
    alignment: int
    addressed: bool


class _DynAllocs(TIRVisitor):
    def __init__(self) -> None:
        self.allocs: list[tirx.AllocBuffer] = []

    def visit_AllocBuffer(self, node: tirx.AllocBuffer) -> None:
        if str(node.buffer.ty.storage_scope) == _DYN:
            self.allocs.append(node)
        self.generic_visit(node)


def _int(value: Any, what: str, func_name: str | None, stmt: Any) -> int:
    if not isinstance(value, tirx.IntImm):
        raise MalformedKernelError(
            f"plan_dynamic_shared: {what} must be a constant {where(func_name, stmt)}; "
            "give dynamic shared buffers constant shapes."
        )
    return int(value.value)


def shared_layout(func: tirx.PrimFunc) -> list[SharedSlot]:
    """The layout :func:`plan_dynamic_shared` gives ``func``'s ``shared.dyn`` buffers.

    Raises:
        MalformedKernelError: a buffer with a non-constant or multi-dimensional shape.
    """
    finder = _DynAllocs()
    finder.visit(func.body)
    addressed = _addressed(func)
    name = _func_name(func)
    slots, cursor = [], 0
    for alloc in finder.allocs:
        ty = alloc.buffer.ty
        if len(ty.shape) != 1:
            raise MalformedKernelError(
                f"plan_dynamic_shared: buffer '{alloc.buffer.name}' is not flat "
                f"{where(name, alloc)}; run the layout after tirx.FlattenBuffer."
            )
        elems = _int(ty.shape[0], f"the extent of '{alloc.buffer.name}'", name, alloc)
        size = elems * tvm.DataType(ty.dtype).bits * tvm.DataType(ty.dtype).lanes // 8
        is_addressed = any(alloc.buffer.same_as(b) for b in addressed)
        align = address_alignment(size) if is_addressed else PLAIN_ALIGNMENT
        align = max(align, int(ty.data_alignment))
        offset = -(-cursor // align) * align
        slots.append(SharedSlot(alloc.buffer.name, offset, size, align, is_addressed))
        cursor = offset + size
    return slots


def _shift(index: Any, offset: int) -> Any:
    if offset == 0:
        return index
    if isinstance(index, tirx.Ramp):
        return tirx.Ramp(index.base + offset, index.stride, index.lanes)
    return index + offset


class _Relocate(TIRMutator):
    """Points every access of a planned buffer at its view of the merged buffer."""

    def __init__(self, views: dict[Any, tuple[ir.expr.Var, int]], merged: ir.expr.Var,
                 first: tirx.AllocBuffer, func_name: str | None) -> None:
        self.views = views  # old buffer -> (view, element offset)
        self.merged = merged
        self.first = first
        self.func_name = func_name

    def _view(self, buffer: Any) -> tuple[ir.expr.Var, int] | None:
        for old, entry in self.views.items():
            if buffer.same_as(old):
                return entry
        return None

    def visit_SeqStmt(self, node: tirx.SeqStmt) -> Any:
        items: list[Any] = []
        for stmt in ffi_list(node.seq):
            if isinstance(stmt, tirx.AllocBuffer) and self._view(stmt.buffer) is not None:
                if stmt.same_as(self.first):
                    items.append(tirx.AllocBuffer(self.merged))
                    data = _data_of(self.merged)
                    items.extend(
                        tirx.DeclBuffer(view, data=data) for view, _ in self.views.values()
                    )
                continue
            new = self.visit(stmt)
            if new is not None:
                items.append(new)
        if not items:
            return tirx.Evaluate(0)
        return tirx.SeqStmt(items) if len(items) != 1 else items[0]

    def visit_TensorLoad(self, node: Any) -> Any:
        indices = [self.visit(index) for index in node.indices]
        entry = self._view(node.source)
        if entry is None:
            if all(a.same_as(b) for a, b in zip(indices, node.indices, strict=True)):
                return node
            return rebuild(node, {"indices": indices})
        view, offset = entry
        return rebuild(node, {"source": view, "indices": [_shift(indices[0], offset)]})

    def visit_BufferStore(self, node: tirx.BufferStore) -> Any:
        value = self.visit(node.value)
        indices = [self.visit(index) for index in node.indices]
        entry = self._view(node.buffer)
        if entry is None:
            if value.same_as(node.value) and all(
                a.same_as(b) for a, b in zip(indices, node.indices, strict=True)
            ):
                return node
            return rebuild(node, {"value": value, "indices": indices})
        view, offset = entry
        return rebuild(
            node, {"buffer": view, "value": value, "indices": [_shift(indices[0], offset)]}
        )

    def visit_Call(self, node: ir.expr.Call) -> Any:
        if isinstance(node.op, ir.Op) and node.op.name == "tirx.buffer_data":
            entry = self._view(node.args[0])
            if entry is not None:
                view, offset = entry
                if offset == 0:
                    return _data_of(view)
                return tirx.address_of(tirx.BufferLoad(view, [tirx.IntImm("int32", offset)]))
        return self.generic_visit(node)

    def visit_Var(self, node: ir.expr.Var) -> Any:
        if self._view(node) is not None:
            raise MalformedKernelError(
                f"plan_dynamic_shared: dynamic shared buffer '{node.name}' is used "
                f"as a plain value {where(self.func_name)}; only loads, stores, "
                "T.address_of(buf[i]) and buf.data can be relocated."
            )
        return node


class _ScopeCheck(TIRVisitor):
    """Finds dynamic allocations outside the scope of the first one (pre-order)."""

    def __init__(self, first: tirx.AllocBuffer) -> None:
        self.first = first
        self.in_scope = False
        self.outside: list[str] = []

    def visit_SeqStmt(self, node: tirx.SeqStmt) -> None:
        saved = self.in_scope
        for stmt in ffi_list(node.seq):
            self.visit(stmt)
            self.in_scope |= stmt.same_as(self.first)
        self.in_scope = saved

    def visit_AllocBuffer(self, node: tirx.AllocBuffer) -> None:
        is_dyn = str(node.buffer.ty.storage_scope) == _DYN
        if is_dyn and not node.same_as(self.first) and not self.in_scope:
            self.outside.append(node.buffer.name)


def _itemsize(ty: Any) -> int:
    dtype = tvm.DataType(ty.dtype)
    return dtype.bits * dtype.lanes // 8


def plan_dynamic_shared(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its ``shared.dyn`` buffers laid out in one ``uint8`` buffer
    (:func:`shared_layout`), or ``func`` itself when none of them is addressed.

    Raises:
        MalformedKernelError: a buffer that is not flat or not constant-sized, used as a
            plain value, or allocated outside the scope of the first one.
    """
    finder = _DynAllocs()
    finder.visit(func.body)
    allocs = finder.allocs
    if not allocs or not any(slot.addressed for slot in shared_layout(func)):
        return func
    slots = shared_layout(func)
    scope = _ScopeCheck(allocs[0])
    scope.visit(func.body)
    if scope.outside:
        raise MalformedKernelError(
            f"plan_dynamic_shared: dynamic shared buffer(s) {', '.join(scope.outside)} are "
            f"allocated outside the scope of '{allocs[0].buffer.name}' "
            f"{where(_func_name(func))}; allocate dynamic shared buffers together at the "
            "kernel's top level."
        )
    total = -(-max(s.offset + s.size for s in slots) // PLAIN_ALIGNMENT) * PLAIN_ALIGNMENT
    merged = tirx.decl_buffer(
        (total,), "uint8", MERGED_NAME, scope=_DYN,
        data_alignment=max(s.alignment for s in slots),
    )
    views: dict[Any, tuple[ir.expr.Var, int]] = {}
    for alloc, slot in zip(allocs, slots, strict=True):
        itemsize = _itemsize(alloc.buffer.ty)
        view = tirx.decl_buffer(
            (total // itemsize,), alloc.buffer.ty.dtype, alloc.buffer.name, scope=_DYN
        )
        views[alloc.buffer] = (view, slot.offset // itemsize)
    return func.with_body(_Relocate(views, merged, allocs[0], _func_name(func)).visit(func.body))


def PlanSharedLayout() -> tvm.transform.Pass:
    """``s_tir.MergeSharedMemoryAllocations``, with :func:`plan_dynamic_shared` for kernels
    that address a dynamic shared buffer (TVM's pass runs on the others)."""

    def transform(mod: ir.IRModule, ctx: tvm.transform.PassContext) -> ir.IRModule:
        planned, rest = {}, {}
        for gvar, func in mod.functions.items():
            new = plan_dynamic_shared(func) if isinstance(func, tirx.PrimFunc) else func
            (rest if new.same_as(func) else planned)[gvar] = new
        if not planned:
            return s_tir.transform.MergeSharedMemoryAllocations()(mod)
        merged = s_tir.transform.MergeSharedMemoryAllocations()(
            tvm.IRModule(rest, attrs=mod.attrs)
        ) if any(isinstance(f, tirx.PrimFunc) for f in rest.values()) else None
        functions = dict(merged.functions.items()) if merged is not None else rest
        return tvm.IRModule({**functions, **planned}, attrs=mod.attrs)

    return tvm.transform.module_pass(transform, opt_level=0, name="tilewave.PlanSharedLayout")
