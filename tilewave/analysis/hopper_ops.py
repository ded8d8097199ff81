"""Operands of Hopper's asynchronous machinery, read off TIR calls.

* mbarriers: which shared mbarrier an ``mbarrier.*`` op or a TMA load's ``complete_tx``
  names (:func:`mbarrier_operand`), and whether the op arrives on it or waits for a phase
  (:func:`mbarrier_role`);
* wgmma matrix descriptors: which shared tile a descriptor built by
  ``T.cuda.wgmma.encode_matrix_descriptor`` points at (:func:`descriptor_sources`), and the
  elements a ``wgmma`` reads through it (:func:`descriptor_region`).

These are per-call facts; what they order is decided by the passes and the verifier.
mbarriers are identified by their *buffer* (``full``, ``empty``): an arrive on ``empty[i]``
and a wait on ``empty[j]`` are taken to be the same ring of phases. tilewave trusts the
program's protocol to pair the elements (a stage's TMA completes on that stage's
``full`` element, its consumers wait on that element); ``tilewave.racecheck`` executes
the protocol and reports the kernels where it does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tvm
from tvm import ir, tirx

from tilewave.analysis.shared_buffers import is_shared_buffer
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import ffi_list, post_order_visit

__all__ = [
    "DescriptorSource",
    "descriptor_region",
    "descriptor_sources",
    "mbarrier_element",
    "mbarrier_implications",
    "mbarrier_operand",
    "mbarrier_role",
    "mbarrier_wait_loop",
    "ring_buffers",
    "tma_load_destination",
    "wgmma_descriptor_operands",
]

_PTX = "tirx.ptx."
_ADDRESS_UNWRAP = frozenset({"tirx.cuda.cvta_generic_to_shared"})
_WAIT_PREFIXES = (_PTX + "mbarrier_try_wait", _PTX + "mbarrier_test_wait")
#: loads through the async proxy that complete on an mbarrier: TMA (tensor) and plain bulk
_TMA_LOAD_PREFIX = (_PTX + "cp_async_bulk_tensor_g2s", _PTX + "cp_async_bulk_g2s")
#: swizzle code of ``encode_matrix_descriptor`` -> (row bytes, swizzle atom bytes)
_SWIZZLE_ROWS = {3: (128, 1024), 2: (64, 512), 1: (32, 256)}


def _addressed(arg: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(buffer, indices)`` of ``address_of(S[...])`` or ``S.data`` (its first element),
    through address conversions."""
    while isinstance(arg, ir.expr.Call) and callee_name(arg) in _ADDRESS_UNWRAP:
        arg = arg.args[0]
    if isinstance(arg, ir.expr.Call) and callee_name(arg) == "tirx.address_of":
        load = arg.args[0]
        if type(load).__name__ == "TensorLoad":
            return load.source, tuple(load.indices)
    if isinstance(arg, ir.expr.Call) and callee_name(arg) == "tirx.buffer_data":
        buffer = arg.args[0]
        return buffer, tuple(tirx.IntImm("int32", 0) for _ in buffer.ty.shape)
    return None


def mbarrier_role(call: Any) -> str | None:
    """``"arrive"``, ``"wait"`` or ``None`` for an mbarrier op (``init``, ``expect_tx``
    without arrive and the rest order nothing)."""
    name = callee_name(call)
    if name.startswith(_WAIT_PREFIXES) or name == "tirx.cuda.mbarrier_wait":
        return "wait"
    if name.startswith(_PTX + "mbarrier_arrive"):
        return "arrive"
    return None


def mbarrier_element(call: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(buffer, indices)`` of the shared mbarrier an mbarrier op or TMA load names."""
    name = callee_name(call)
    args = list(call.args)
    if name.startswith(_TMA_LOAD_PREFIX):
        args = args[1:]  # the first address is the destination tile
    for arg in args:
        found = _addressed(arg)
        if found is not None and is_shared_buffer(found[0]):
            return found
    return None


def mbarrier_wait_loop(stmt: Any) -> Any:
    """The wait statement of a ``while`` that only polls an mbarrier (the
    ``while ready == 0: mbarrier.try_wait.parity(ready, ...)`` form), else ``None``: the
    loop runs its wait until the phase is observed, so it acts as that wait."""
    body = stmt.body
    if not isinstance(body, tirx.Evaluate) or not isinstance(body.value, ir.expr.Call):
        return None
    return body if mbarrier_role(body.value) == "wait" else None


def mbarrier_implications(body: Any) -> dict[Any, set[Any]]:
    """mbarrier ``X`` -> the mbarriers waited on before an arrive on ``X`` in the same loop
    body. Whoever observes a phase of ``X`` is ordered after those waits too: in a
    full/empty ring, a producer that waits on ``empty`` knows the tile it loaded into that
    stage (completing on ``full``) has landed, since the consumers waited on ``full``
    before arriving on ``empty``."""
    implied: dict[Any, set[Any]] = {}
    if not _uses_mbarriers(body):
        return implied

    def actions(stmt: Any) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []

        def check(node: Any) -> None:
            if isinstance(node, ir.expr.Call) and mbarrier_role(node) is not None:
                barrier = mbarrier_operand(node)
                if barrier is not None:
                    out.append((mbarrier_role(node), barrier))

        post_order_visit(stmt, check, (ir.expr.Call,))
        return out

    def visit(node: Any) -> None:
        if isinstance(node, tirx.For):
            seen: set[Any] = set()
            for role, barrier in actions(node.body):
                if role == "wait":
                    seen.add(barrier)
                else:
                    implied.setdefault(barrier, set()).update(seen)

    post_order_visit(body, visit, (tirx.For,))
    return implied


def _uses_mbarriers(body: Any) -> bool:
    found = False

    def check(node: Any) -> None:
        nonlocal found
        found = found or mbarrier_role(node) is not None

    post_order_visit(body, check, (ir.expr.Call,))
    return found


def _branch_mbarriers(branch: Any) -> tuple[set[Any], set[Any]]:
    """``(waited, arrived)`` mbarriers of a branch (a TMA load's ``complete_tx`` counts as
    an arrival on its mbarrier)."""
    waited: set[Any] = set()
    arrived: set[Any] = set()

    def check(node: Any) -> None:
        if not isinstance(node, ir.expr.Call):
            return
        role = mbarrier_role(node)
        if role is not None or callee_name(node).startswith(_TMA_LOAD_PREFIX):
            barrier = mbarrier_operand(node)
            if barrier is not None:
                (waited if role == "wait" else arrived).add(barrier)

    post_order_visit(branch, check, (ir.expr.Call,))
    return waited, arrived


def ring_buffers(then_case: Any, else_case: Any, accesses: list[Any]) -> set[Any]:
    """Shared buffers two concurrent branches hand to each other through a ring of
    mbarriers: one branch's TMA loads of the buffer complete on an mbarrier the other
    waits on, and each branch arrives on an mbarrier the other waits on (the full/empty
    rings of warp-specialised kernels). ``accesses``: both branches' shared accesses. The
    pairing of ring elements and stages is the program's protocol: trusted here, executed
    by ``tilewave.racecheck``."""
    if else_case is None:
        return set()
    w_then, a_then = _branch_mbarriers(then_case)
    w_else, a_else = _branch_mbarriers(else_case)
    if not (a_then & w_else and a_else & w_then):
        return set()
    handed = (a_then & w_else) | (a_else & w_then)
    return {
        a.buffer
        for a in accesses
        if getattr(a, "completes_on", None) is not None and a.completes_on in handed
    }


def mbarrier_operand(call: Any) -> Any:
    """The shared mbarrier buffer an mbarrier op or TMA load names (``None``: none)."""
    found = mbarrier_element(call)
    return None if found is None else found[0]


def tma_load_destination(call: Any) -> Any:
    """The shared buffer a TMA load writes (its first operand), or ``None``."""
    if not callee_name(call).startswith(_TMA_LOAD_PREFIX) or not call.args:
        return None
    found = _addressed(call.args[0])
    return found[0] if found is not None else None


class DescriptorSource:
    """One ``encode_matrix_descriptor`` into a local descriptor: the shared tile's first
    element and the swizzle code."""

    def __init__(self, buffer: Any, indices: tuple[Any, ...], swizzle: int | None) -> None:
        self.buffer = buffer
        self.indices = indices
        self.swizzle = swizzle


def descriptor_sources(body: Any) -> dict[Any, list[DescriptorSource]]:
    """Local descriptor buffer -> every shared tile address encoded into it in ``body``."""
    found: dict[Any, list[DescriptorSource]] = {}

    def check(node: Any) -> None:
        if not (
            isinstance(node, ir.expr.Call)
            and callee_name(node) == "tirx.cuda.wgmma_encode_matrix_descriptor"
        ):
            return
        args = ffi_list(node.args)
        target = _descriptor_buffer(args[0]) if args else None
        source = _addressed(args[1]) if len(args) > 1 else None
        if target is None or source is None:
            return
        swizzle = args[4] if len(args) > 4 else None
        code = int(swizzle.value) if isinstance(swizzle, tirx.IntImm) else None
        found.setdefault(target, []).append(DescriptorSource(source[0], source[1], code))

    post_order_visit(body, check, (ir.expr.Call,))
    return found


def _descriptor_buffer(arg: Any) -> Any:
    """The local buffer behind a descriptor operand (``desc.data``, ``desc[0]``)."""
    if type(arg).__name__ == "TensorLoad":
        return arg.source
    if isinstance(arg, ir.expr.Call) and callee_name(arg) == "tirx.buffer_data":
        return arg.args[0]
    if isinstance(arg, ir.expr.Var):
        return arg
    return getattr(arg, "source", None)


def wgmma_descriptor_operands(
    call: Any, sources: Mapping[Any, list[DescriptorSource]]
) -> list[tuple[DescriptorSource, int]]:
    """``(source, rows)`` for each shared operand a ``wgmma`` reads through a descriptor:
    A has M rows, B has N rows (from the ``mMnNkK`` shape)."""
    shape = next(
        (
            a.value
            for a in ffi_list(call.args)
            if isinstance(a, ir.expr.StringImm)
            and a.value.startswith("m")
            and "n" in a.value
            and "k" in a.value
        ),
        None,
    )
    if shape is None:
        return []
    m = int(shape[1 : shape.index("n")])
    n = int(shape[shape.index("n") + 1 : shape.index("k")])
    descriptors = []
    for arg in ffi_list(call.args):
        buffer = _descriptor_buffer(arg) if type(arg).__name__ == "TensorLoad" else None
        if buffer is None:
            continue
        for key, found in sources.items():
            if key.same_as(buffer):
                descriptors.append(found)
    rows = [m, n] if len(descriptors) == 2 else [n]  # register A: only B is in shared
    out = []
    for found, count in zip(descriptors, rows, strict=False):
        out.extend((source, count) for source in found)
    return out


def descriptor_region(
    source: DescriptorSource, rows: int
) -> tuple[tuple[Any, ...], Any, int] | None:
    """The elements a wgmma reads through ``source``: ``rows`` rows of the swizzle's row
    width from the swizzle atom that holds the encoded address (an address inside a row,
    the ``k`` offset of a later ``k`` step, still reads whole rows of that atom).
    Returns ``(indices, var, count)`` like ``copy_region``; ``None``: not known."""
    if source.swizzle not in _SWIZZLE_ROWS:
        return None
    row_bytes, atom_bytes = _SWIZZLE_ROWS[source.swizzle]
    buffer = source.buffer
    dtype = tvm.DataType(str(buffer.ty.dtype))
    elem = dtype.bits * dtype.lanes // 8
    shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in buffer.ty.shape]
    if elem <= 0 or None in shape or len(source.indices) != len(shape):
        return None
    flat: Any = None
    for idx, ext in zip(source.indices, shape, strict=True):
        flat = idx if flat is None else flat * ext + idx
    atom = atom_bytes // elem
    start = tirx.floordiv(flat, atom) * atom
    var = tirx.Var("wgmma_elem", "int32")
    count = rows * row_bytes // elem
    indices = []
    stride = 1
    linear = start + var
    for dim in reversed(range(len(shape))):
        quotient = linear if stride == 1 else tirx.floordiv(linear, stride)
        indices.append(quotient if dim == 0 else tirx.floormod(quotient, shape[dim]))
        stride *= shape[dim]
    return tuple(reversed(indices)), var, count
