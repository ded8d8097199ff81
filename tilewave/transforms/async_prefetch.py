"""``PrefetchAsyncCopies``: turn a multibuffered copy-then-compute loop into a pipeline.

After :mod:`tilewave.transforms.multibuffer` gives each of ``N`` consecutive iterations of
a loop its own copy of the shared tiles, a loop of the plain form

.. code-block:: python

    for kt in range(K):
        copy tile kt -> S[kt % N]      # cp.async statements only
        compute on S[kt % N]

still waits for every copy in the iteration that issued it: nothing overlaps. This pass
issues each copy ``N - 1`` iterations ahead (software pipelining with tilewave's own
prefetch; TVM's ``software_pipeline_stage`` annotations are not needed):

.. code-block:: python

    for p in range(N - 1):              # prologue: the first N - 1 tiles
        copy tile p -> S[p % N]
        commit_async_ops()              # one cp.async group per tile
    for kt in range(K):
        if kt + N - 1 < K:
            copy tile kt + N - 1 -> S[(kt + N - 1) % N]
        commit_async_ops()              # unconditional: group counts stay uniform
        compute on S[kt % N]

The copy issued in iteration ``kt`` writes the slot iteration ``kt - 1`` read, and the
computation reads the slot filled ``N - 1`` iterations earlier, so with ``N`` slots no
iteration overwrites a tile still to be read. InsertSharedBarriers then places one
``cp.async.wait_group N - 2`` and one barrier per iteration (the usual hand schedule).

Which loops: a serial loop with constant bounds whose body starts with statements that
only issue ``cp.async`` copies into shared buffers the multibuffer pass grew (the
``tilewave.multi_buffer_count`` annotation, at least 2) with the loop's slot. Other loops
are left alone.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from tilewave.analysis.shared_access import AccessKind, statement_accesses
from tilewave.ir.ops import call_op
from tilewave.ir.walker import TIRMutator, TIRVisitor, ffi_list, rebuild, substitute

__all__ = ["PrefetchAsyncCopies", "prefetch_async_copies"]

PASS_NAME = "PrefetchAsyncCopies"
_COUNT_ATTR = "tilewave.multi_buffer_count"


class _GrownBuffers(TIRVisitor):
    """Shared buffers the multibuffer pass grew, with their slot count."""

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}

    def visit_AllocBuffer(self, node: Any) -> None:
        annotations = getattr(node, "annotations", None) or {}
        if _COUNT_ATTR in annotations:
            self.counts[node.buffer] = int(annotations[_COUNT_ATTR])
        self.generic_visit(node)


def _copy_only(stmt: Any, func_name: str | None) -> list[Any] | None:
    """The shared buffers a statement writes by cp.async, if that is all it does to shared
    memory (``None`` otherwise)."""
    buffers: list[Any] = []
    found_copy = False
    leaves: list[Any] = []

    def collect(node: Any) -> None:
        if isinstance(node, tirx.SeqStmt):
            for child in ffi_list(node.seq):
                collect(child)
        elif isinstance(node, (tirx.For, tirx.AttrStmt)) and isinstance(
            getattr(node, "body", None), tirx.Stmt
        ):
            collect(node.body)
        elif isinstance(node, tirx.IfThenElse):
            leaves.append(tirx.Evaluate(node.condition))
            collect(node.then_case)
            if node.else_case is not None:
                collect(node.else_case)
        else:
            leaves.append(node)

    collect(stmt)
    for leaf in leaves:
        if isinstance(leaf, (tirx.While,)) or (
            hasattr(leaf, "body") and isinstance(leaf.body, tirx.Stmt)
        ):
            return None
        for access in statement_accesses(leaf, (), func_name):
            if access.kind is not AccessKind.ASYNC_WRITE or not access.async_group:
                return None
            found_copy = True
            if not any(access.buffer.same_as(b) for b in buffers):
                buffers.append(access.buffer)
    return buffers if found_copy else None


class _Pipeliner(TIRMutator):
    def __init__(self, counts: dict[Any, int], func_name: str | None) -> None:
        self._counts = counts
        self._func_name = func_name
        self.pipelined = 0

    def visit_For(self, node: tirx.For) -> Any:
        node = self.generic_visit(node)
        if node.kind != tirx.ForKind.SERIAL or not isinstance(node.body, tirx.SeqStmt):
            return node
        if not (isinstance(node.min, tirx.IntImm) and isinstance(node.extent, tirx.IntImm)):
            return node
        step = node.step if node.step is not None else tirx.IntImm("int32", 1)
        if not isinstance(step, tirx.IntImm) or step.value <= 0:
            return node
        body = ffi_list(node.body.seq)
        copies: list[Any] = []
        stages: set[int] = set()
        for stmt in body:
            buffers = _copy_only(stmt, self._func_name)
            if buffers is None:
                break
            counts = [self._count(b) for b in buffers]
            if None in counts:
                break
            copies.append(stmt)
            stages.update(c for c in counts if c is not None)
        rest = body[len(copies) :]
        if not copies or not rest or len(stages) != 1:
            return node
        count = stages.pop()
        extent = int(node.extent.value)
        if count < 2 or extent < 2:
            return node
        self.pipelined += 1
        return self._pipeline(node, copies, rest, count - 1, int(step.value))

    def _count(self, buffer: Any) -> int | None:
        for grown, count in self._counts.items():
            if grown.same_as(buffer):
                return count
        return None

    def _pipeline(
        self, loop: tirx.For, copies: list[Any], rest: list[Any], ahead: int, step: int
    ) -> Any:
        var, lo, extent = loop.loop_var, int(loop.min.value), int(loop.extent.value)
        dtype = var.ty
        end = tirx.IntImm(dtype, lo + extent * step)
        prologue_var = tirx.Var(f"{var.name}_prefetch", dtype)
        first = tirx.IntImm(dtype, lo) + prologue_var * tirx.IntImm(dtype, step)
        # one commit group per tile, so `wait_group N - 2` retires exactly the oldest one
        commit = call_op("tilewave.commit_async_ops")
        prologue_body = tirx.SeqStmt([*(substitute(c, {var: first}) for c in copies), commit])
        prologue = tirx.For(
            prologue_var,
            tirx.IntImm(dtype, 0),
            tirx.IntImm(dtype, min(ahead, extent)),
            tirx.ForKind.SERIAL,
            prologue_body,
        )
        later = var + tirx.IntImm(dtype, ahead * step)
        prefetch = tirx.IfThenElse(
            later < end, _seq([substitute(c, {var: later}) for c in copies]), None
        )
        # the commit stays unconditional: every iteration closes one (maybe empty) group
        steady = rebuild(loop, {"body": tirx.SeqStmt([prefetch, commit, *rest])})
        return tirx.SeqStmt([prologue, steady])


def _seq(items: list[Any]) -> Any:
    return items[0] if len(items) == 1 else tirx.SeqStmt(items)


def prefetch_async_copies(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Pipeline every multibuffered copy-then-compute loop of ``func`` (see the module
    docs); returns ``func`` itself when no loop qualifies."""
    finder = _GrownBuffers()
    finder.visit(func.body)
    if not finder.counts:
        return func
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    pipeliner = _Pipeliner(finder.counts, str(symbol) if symbol is not None else None)
    body = pipeliner.visit(func.body)
    if not pipeliner.pipelined:
        return func
    return rebuild(func, {"body": body})


def PrefetchAsyncCopies() -> tvm.transform.Pass:
    """:func:`prefetch_async_copies` as a ``tvm.transform.Pass``."""

    def run(func: tirx.PrimFunc, _mod: Any, _ctx: Any) -> tirx.PrimFunc:
        return prefetch_async_copies(func)

    return tirx.transform.prim_func_pass(run, opt_level=0, name=f"tilewave.{PASS_NAME}")
