"""The shared-memory elements an async copy writes, read from its destination operand.

A ``cp.async`` (``tirx.ptx.cp_async_ca*``/``cp_async_cg*``: operands ``dst, src, cp_size``)
or a non-tensor ``cp.async.bulk`` global->shared copy (``tirx.ptx.cp_async_bulk_g2s_*``:
``dst, src, size, ...``) writes ``size`` bytes starting at its destination address. When
that address is ``T.address_of(S[i...])`` (possibly wrapped in
``T.cuda.cvta_generic_to_shared``) or ``T.tvm_access_ptr(T.type_annotation(dtype),
S.data, offset, extent, rw)`` with ``dtype`` the element type of ``S``, and the byte
count is a constant, the written region is the ``ceil(size / element_bytes)`` elements
from that start in row-major order. It is returned as indices over a variable ``cp_elem``
in ``[0, n)`` made for that call (one per call and buffer, however often it is asked);
:mod:`tilewave.analysis.shared_access` adds it to the access as a ``LoopRange`` with no
``For`` (an independent "loop" over the copied elements), so the region proofs treat it
like any other bounded index variable.

An AMD LDS DMA (``llvm.amdgcn.global.load.lds(src, dst, size, offset, aux)`` through
``T.call_llvm_intrin``) writes ``size`` bytes per lane, lane ``l`` at the wave's LDS address
+ ``offset`` + ``l * size``; the wave's address is one lane's ``dst``. Each thread is taken
to write the whole span a wave can write from its own ``dst``: ``offset + 64 * size`` bytes
(64: the wave64 of the gfx9 targets that have LDS DMA). That over-approximates every lane's
slot (sound) and keeps the copies of different pipeline stages apart.

Anything else (TMA tensor copies, whose box is in a tensor map; a byte count that is not a
constant) returns ``None``: the whole buffer.
"""

from __future__ import annotations

import functools
from typing import Any

import tvm
from tvm import ir, tirx

from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import ffi_list
from tilewave.kernel_memory import kernel_table, node_fact, remember

__all__ = ["COPY_OPERANDS", "LDS_DMA_LANES", "MATRIX_ROW_OPS", "copy_region"]

_PTX = "tirx.ptx."
#: op-name prefix -> (destination operand, byte-count operand)
COPY_OPERANDS: dict[str, tuple[int, int]] = {
    _PTX + "cp_async_ca": (0, 2),
    _PTX + "cp_async_cg": (0, 2),
    _PTX + "cp_async_bulk_g2s_cta": (0, 2),
    _PTX + "cp_async_bulk_g2s_cluster": (0, 2),
}
_UNWRAP = frozenset({"tirx.cuda.cvta_generic_to_shared"})


#: warp-collective matrix loads/stores: each lane gives one 16-byte row address
#: (``ldmatrix``/``stmatrix`` ``.x1``/``.x2`` use only lanes 0-7/0-15; counting every lane
#: over-approximates, which is sound)
MATRIX_ROW_OPS: tuple[str, ...] = (_PTX + "ldmatrix", _PTX + "stmatrix")
_MATRIX_ROW_BYTES = 16
_ADDRESS_OPS = frozenset({"tirx.address_of", "tirx.tvm_access_ptr", *_UNWRAP})


_TMA_LOAD = _PTX + "cp_async_bulk_tensor_g2s"
_LDS_DMA = "llvm.amdgcn.global.load.lds"
#: lanes of the widest wave issuing an LDS DMA (gfx9 wave64)
LDS_DMA_LANES = 64


def _tile_stride(expr: Any) -> int | None:
    """The largest constant that multiplies a non-constant term of ``expr``."""
    if isinstance(expr, tirx.Mul):
        for x, y in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(y, tirx.IntImm) and not isinstance(x, tirx.IntImm):
                return abs(int(y.value))
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        found = [v for v in (_tile_stride(expr.a), _tile_stride(expr.b)) if v is not None]
        return max(found) if found else None
    return None


def _addressed_tile_bytes(address: Any) -> int | None:
    """The bytes of the tile a TMA load writes when its box is not known here (the tensor
    map lives on the host): the stride between the tiles its destination index steps
    through (``A_s[stage * 8192]``: 8192 elements), bounded by the buffer's end."""
    start = _start(address)
    if start is None or start[1] is None:
        return None
    buffer, indices = start
    elem_bytes, shape = _layout(buffer)
    if None in shape or elem_bytes is None or len(indices) != len(shape):
        return None
    flat: Any = None
    for idx, ext in zip(indices, shape, strict=True):
        flat = idx if flat is None else flat * ext + idx
    stride = _tile_stride(flat)
    return None if stride is None else stride * elem_bytes


def _operands_of(call: ir.expr.Call) -> tuple[Any, Any] | None:
    """``(destination address, byte count)`` operands of a copy or matrix-row op."""
    name = callee_name(call)
    for prefix, (dst, size) in COPY_OPERANDS.items():
        if name.startswith(prefix) and len(call.args) > max(dst, size):
            return call.args[dst], call.args[size]
    if name.startswith(_TMA_LOAD) and call.args:
        tile = _addressed_tile_bytes(call.args[0])
        if tile is not None:
            return call.args[0], tirx.IntImm("int32", tile)
        return None
    if name == _LDS_DMA and len(call.args) >= 5:
        # call_llvm_intrin's first argument is the intrinsic: (id, src, dst, size, offset, aux)
        size, offset = call.args[3], call.args[4]
        if isinstance(size, tirx.IntImm) and isinstance(offset, tirx.IntImm):
            span = int(offset.value) + LDS_DMA_LANES * int(size.value)
            return call.args[2], tirx.IntImm("int32", span)
        return None
    if name.startswith(MATRIX_ROW_OPS):
        for arg in ffi_list(call.args):
            if isinstance(arg, ir.expr.Call) and callee_name(arg) in _ADDRESS_OPS:
                return arg, tirx.IntImm("int32", _MATRIX_ROW_BYTES)
    return None


def _layout(buffer: Any) -> tuple[int | None, list[int | None]]:
    """Bytes per element of ``buffer`` and its shape (``None`` for an extent that is not
    a constant), remembered per buffer node (every copy into a tile asks)."""
    return node_fact(_LAYOUTS, buffer, _layout_of, _REGIONS_LIMIT)


def _layout_of(buffer: Any) -> tuple[int | None, list[int | None]]:
    shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in buffer.ty.shape]
    return _element_bytes(str(buffer.ty.dtype)), shape


#: _layout's answers by buffer handle, with the buffer
_LAYOUTS: dict[int, tuple[tuple[int | None, list[int | None]], Any]] = kernel_table()


@functools.cache  # (a handful of dtypes; parsing one costs tens of microseconds)
def _element_bytes(dtype: str) -> int | None:
    dt = tvm.DataType(dtype)
    bits = dt.bits * dt.lanes
    return bits // 8 if bits % 8 == 0 and bits > 0 else None


def _start(address: Any) -> tuple[Any, tuple[Any, ...] | None] | None:
    """``(buffer, start indices)`` of a destination address, or ``(buffer, None)`` for a
    flat element offset given as ``((offset,),)``; ``None`` when not understood."""
    while isinstance(address, ir.expr.Call) and callee_name(address) in _UNWRAP:
        address = address.args[0]
    if not isinstance(address, ir.expr.Call):
        return None
    name = callee_name(address)
    if name == "tirx.address_of" and len(address.args) == 1:
        load = address.args[0]
        if type(load).__name__ == "TensorLoad":
            return load.source, tuple(load.indices)
        return None
    if name == "tirx.tvm_access_ptr" and len(address.args) == 5:
        ptype, data, offset = address.args[0], address.args[1], address.args[2]
        if not (isinstance(data, ir.expr.Call) and callee_name(data) == "tirx.buffer_data"):
            return None
        buffer = data.args[0]
        if str(getattr(ptype, "ty", "")) != str(buffer.ty.dtype):
            return None
        return buffer, ((offset,),)
    return None


def _flat_to_indices(shape: list[int], flat: Any) -> tuple[Any, ...]:
    """Row-major indices of element ``flat`` of a buffer of constant ``shape``."""
    out = []
    stride = 1
    for dim in reversed(range(len(shape))):
        quotient = flat if stride == 1 else tirx.floordiv(flat, stride)
        out.append(quotient if dim == 0 else tirx.floormod(quotient, shape[dim]))
        stride *= shape[dim]
    return tuple(reversed(out))


def copy_region(call: ir.expr.Call, buffer: Any) -> tuple[tuple[Any, ...], Any, int] | None:
    """The elements of ``buffer`` that the async copy ``call`` writes (or that one lane's
    row of an ``ldmatrix``/``stmatrix`` reads or writes).

    Returns ``(indices, var, count)``: the indices over ``var`` (made for this call), which
    ranges over ``[0, count)``; ``None`` when the region is not known (treat as the whole
    buffer). Remembered per call and buffer node (the commit and barrier passes both ask).
    """
    key = (hash(call), hash(buffer))
    found = _REGIONS.get(key)
    if found is None:
        # (the nodes kept alive with the answer: their handles cannot come to name others)
        found = remember(_REGIONS, key, (_region_of(call, buffer), call, buffer), _REGIONS_LIMIT)
    return found[0]


#: copy_region's answers by (call handle, buffer handle), with the nodes
_REGIONS: dict[tuple[int, int], tuple[Any, Any, Any]] = kernel_table()
_REGIONS_LIMIT = 100_000


def _region_of(call: ir.expr.Call, buffer: Any) -> tuple[tuple[Any, ...], Any, int] | None:
    operands = _operands_of(call)
    if operands is None:
        return None
    dst, size = operands
    start = _start(dst)
    if start is None or not start[0].same_as(buffer) or not isinstance(size, tirx.IntImm):
        return None
    elem_bytes, shape = _layout(buffer)
    if elem_bytes is None or None in shape or int(size.value) <= 0:
        return None
    count = -(-int(size.value) // elem_bytes)
    var = tirx.Var("cp_elem", "int32")
    _, indices = start
    if len(indices) == 1 and isinstance(indices[0], tuple):
        flat = indices[0][0]
    elif len(indices) == len(shape):
        flat = indices[-1]
        stride = shape[-1]
        for idx, ext in zip(reversed(indices[:-1]), reversed(shape[:-1]), strict=True):
            flat = flat + idx * stride
            stride *= ext
    else:
        return None
    return _flat_to_indices(shape, flat + var), var, count
