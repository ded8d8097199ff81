"""A reference interpreter for one GPU thread block of a TIR PrimFunc (test helper).

Each thread of the block runs as a Python generator that pauses at every barrier
(``T.tvm_storage_sync("shared")``, ``T.tilewave.lds_barrier()``, ``T.cuda.cta_sync()``); a
scheduler runs every thread up to its next barrier, one thread after the other, in an
order the caller picks (``"forward"``, ``"reverse"`` or a seeded random shuffle per phase).
That is a legal GPU interleaving, so a missing barrier shows up as a wrong result for some
order, while a correctly synchronised kernel gives the same result for every order.

The subset covered is what tilewave's tests generate: serial/unrolled loops, one
``threadIdx.x`` binding (``blockIdx`` loops run block after block), ``if``, stores and loads
on global / shared / local buffers, ``Bind``, integer and float arithmetic, ``address_of`` /
``tvm_access_ptr`` / ``S.data`` pointers and ``cp.async`` (modelled as an immediate copy;
waits and commits are no-ops). Anything else raises :class:`UnsupportedTIR`.

Import it from a test by name (tests/conftest.py puts tests/ on ``sys.path``)::

    import tir_interpreter as interp
    outputs = interp.run_block(func, {"A": a, "B": b}, order="reverse")
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import ir, tirx

__all__ = ["BARRIER_OPS", "Pointer", "UnsupportedTIR", "run_block"]

#: Ops that make every thread of the block wait for the others.
BARRIER_OPS = frozenset(
    {"tirx.tvm_storage_sync", "tilewave.lds_barrier", "tirx.cuda.cta_sync", "tirx.ptx.bar_sync"}
)
_NO_OPS = frozenset(
    {
        "tirx.ptx.cp_async_commit_group",
        "tirx.ptx.cp_async_wait_group",
        "tirx.ptx.cp_async_wait_all",
        "tilewave.wait_async_ops",
        "tilewave.fence_proxy_async",
        "tirx.ptx.fence_proxy",
    }
)
_BARRIER = object()


class UnsupportedTIR(Exception):
    """The interpreter met a node or op outside the subset it implements."""


@dataclass(frozen=True)
class Pointer:
    """An address: a buffer and a flat element offset into it."""

    buffer: ir.expr.Var
    offset: int


def _flat(buffer: ir.expr.Var, indices: list[int]) -> int:
    shape = [int(d) for d in buffer.ty.shape]
    if len(indices) != len(shape):
        raise UnsupportedTIR(f"{len(indices)} indices into {buffer.name}{shape}")
    flat = 0
    for index, dim in zip(indices, shape, strict=True):
        if not 0 <= index < dim:
            raise IndexError(f"{buffer.name}: index {indices} out of bounds for shape {shape}")
        flat = flat * dim + index
    return flat


def _np_dtype(dtype: str) -> Any:
    return np.dtype("bool" if dtype == "bool" else dtype)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "FloorDiv": lambda a, b: a // b,
    "FloorMod": lambda a, b: a % b,
    "Min": min,
    "Max": max,
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
    "And": lambda a, b: bool(a) and bool(b),
    "Or": lambda a, b: bool(a) or bool(b),
    "BitwiseAnd": lambda a, b: a & b,
    "BitwiseOr": lambda a, b: a | b,
    "BitwiseXor": lambda a, b: a ^ b,
    "LShift": lambda a, b: a << b,
    "RShift": lambda a, b: a >> b,
}
_CALL_BINARY = {
    "tirx.bitwise_and": "BitwiseAnd",
    "tirx.bitwise_or": "BitwiseOr",
    "tirx.bitwise_xor": "BitwiseXor",
    "tirx.shift_left": "LShift",
    "tirx.shift_right": "RShift",
}


class _Block:
    """Memory of one thread block: the global arrays and the block's shared buffers."""

    def __init__(self, global_arrays: dict[ir.expr.Var, np.ndarray]) -> None:
        self.arrays: dict[ir.expr.Var, np.ndarray] = dict(global_arrays)


class _Thread:
    """One thread's interpretation: its variables and local buffers, over block memory."""

    def __init__(self, block: _Block, env: dict[ir.expr.Var, Any]) -> None:
        self.block = block
        self.env = dict(env)
        self.local: dict[ir.expr.Var, np.ndarray] = {}

    # --- memory -----------------------------------------------------------------------
    def _array(self, buffer: ir.expr.Var) -> np.ndarray:
        if buffer in self.local:
            return self.local[buffer]
        if buffer in self.block.arrays:
            return self.block.arrays[buffer]
        raise UnsupportedTIR(f"buffer {buffer.name} used before allocation")

    def _allocate(self, buffer: ir.expr.Var) -> None:
        size = 1
        for dim in buffer.ty.shape:
            size *= int(self.eval(dim))
        scope = str(buffer.ty.storage_scope)
        # NaN-filled so that a read of never-written shared memory cannot look correct.
        fill = np.nan if "float" in str(buffer.ty.dtype) else -(2**30)
        array = np.full(size, fill, dtype=_np_dtype(str(buffer.ty.dtype)))
        if scope.startswith("shared"):
            self.block.arrays.setdefault(buffer, array)
        else:
            self.local[buffer] = array

    # --- expressions --------------------------------------------------------------------
    def eval(self, node: Any) -> Any:
        kind = type(node).__name__
        if isinstance(node, tirx.IntImm):
            return bool(node.value) if str(node.ty) == "bool" else int(node.value)
        if isinstance(node, tirx.FloatImm):
            return _np_dtype(str(node.ty)).type(node.value)
        if isinstance(node, ir.expr.Var):
            if node not in self.env:
                raise UnsupportedTIR(f"unbound variable {node.name}")
            return self.env[node]
        if kind in _BINARY:
            a, b = self.eval(node.a), self.eval(node.b)
            return _BINARY[kind](a, b)
        if kind == "Div":
            a, b = self.eval(node.a), self.eval(node.b)
            return _trunc_div(a, b) if isinstance(a, int) else a / b
        if kind == "Mod":
            a, b = self.eval(node.a), self.eval(node.b)
            return int(math.fmod(a, b)) if isinstance(a, int) else np.fmod(a, b)
        if kind == "Not":
            return not self.eval(node.a)
        if kind == "Select":
            cond = self.eval(node.condition)
            return self.eval(node.true_value if cond else node.false_value)
        if kind == "Cast":
            return self._cast(self.eval(node.value), str(node.ty))
        if kind == "TensorLoad":
            indices = [int(self.eval(i)) for i in node.indices]
            return self._array(node.source)[_flat(node.source, indices)]
        if kind == "Call":
            return self._call(node)
        raise UnsupportedTIR(f"expression {kind}: {node}")

    @staticmethod
    def _cast(value: Any, dtype: str) -> Any:
        if dtype == "bool":
            return bool(value)
        if dtype.startswith(("int", "uint")):
            return int(value)
        return _np_dtype(dtype).type(value)

    def _pointer(self, node: Any) -> Pointer:
        value = self.eval(node)
        if not isinstance(value, Pointer):
            raise UnsupportedTIR(f"expected an address, got {node}")
        return value

    def _call(self, node: ir.expr.Call) -> Any:
        op = node.op.name if isinstance(node.op, ir.Op) else str(node.op)
        args = node.args
        if op in _CALL_BINARY:
            return _BINARY[_CALL_BINARY[op]](self.eval(args[0]), self.eval(args[1]))
        if op == "tirx.if_then_else":
            return self.eval(args[1] if self.eval(args[0]) else args[2])
        if op == "tirx.buffer_data":
            return Pointer(args[0], 0)
        if op == "tirx.address_of":
            load = args[0]
            indices = [int(self.eval(i)) for i in load.indices]
            return Pointer(load.source, _flat(load.source, indices))
        if op == "tirx.tvm_access_ptr":
            base = self._pointer(args[1])
            return Pointer(base.buffer, base.offset + int(self.eval(args[2])))
        if op in ("tirx.cuda.cvta_generic_to_shared", "tirx.reinterpret"):
            return self.eval(args[0])
        if op in ("tirx.ptx.cp_async_ca", "tirx.ptx.cp_async_cg", "tirx.s_tir.cp_async_raw"):
            return self._async_copy(op, args)
        if op in _NO_OPS or op == "tirx.type_annotation":
            return None
        raise UnsupportedTIR(f"op {op}")

    def _async_copy(self, op: str, args: Any) -> None:
        if op == "tirx.s_tir.cp_async_raw":
            dst, src, nbytes = self._pointer(args[0]), self._pointer(args[2]), args[4]
        else:
            dst, src, nbytes = self._pointer(args[0]), self._pointer(args[1]), args[2]
        bits = np.dtype(_np_dtype(str(dst.buffer.ty.dtype))).itemsize * 8
        count = int(self.eval(nbytes)) * 8 // bits
        source = self._array(src.buffer)[src.offset : src.offset + count]
        self._array(dst.buffer)[dst.offset : dst.offset + count] = source

    # --- statements ---------------------------------------------------------------------
    def run(self, stmt: Any) -> Generator[object, None, None]:
        kind = type(stmt).__name__
        if kind == "SeqStmt":
            for item in stmt.seq:
                yield from self.run(item)
        elif kind == "AllocBuffer":
            self._allocate(stmt.buffer)
        elif kind == "DeclBuffer":
            return
        elif kind == "Bind":
            self.env[stmt.var] = self.eval(stmt.value)
        elif kind == "BufferStore":
            value = self.eval(stmt.value)
            indices = [int(self.eval(i)) for i in stmt.indices]
            self._array(stmt.buffer)[_flat(stmt.buffer, indices)] = value
        elif kind == "Evaluate":
            call = stmt.value
            is_op = isinstance(call, ir.expr.Call) and isinstance(call.op, ir.Op)
            op = call.op.name if is_op else ""
            if op in BARRIER_OPS:
                yield _BARRIER
            else:
                self.eval(call)
        elif kind == "IfThenElse":
            if self.eval(stmt.condition):
                yield from self.run(stmt.then_case)
            elif stmt.else_case is not None:
                yield from self.run(stmt.else_case)
        elif kind == "AttrStmt":
            yield from self.run(stmt.body)
        elif kind == "While":
            while self.eval(stmt.condition):
                yield from self.run(stmt.body)
        elif kind == "For":
            yield from self._run_for(stmt)
        else:
            raise UnsupportedTIR(f"statement {kind}")

    def _run_for(self, loop: tirx.For) -> Generator[object, None, None]:
        if loop.kind == tirx.ForKind.THREAD_BINDING:
            raise UnsupportedTIR("a thread binding nested inside a thread")
        start, extent = int(self.eval(loop.min)), int(self.eval(loop.extent))
        step = int(self.eval(loop.step)) if loop.step is not None else 1
        for value in range(start, start + extent, step):
            self.env[loop.loop_var] = value
            yield from self.run(loop.body)


def _schedule(threads: list[Generator[object, None, None]], order: str | int) -> None:
    """Run every thread to its next barrier, phase after phase, in the given order."""
    rng = random.Random(order) if isinstance(order, int) else None
    live = list(range(len(threads)))
    while live:
        if rng is not None:
            rng.shuffle(live)
        elif order == "reverse":
            live.sort(reverse=True)
        else:
            live.sort()
        waiting, finished = [], []
        for tid in live:
            try:
                next(threads[tid])
                waiting.append(tid)
            except StopIteration:
                finished.append(tid)
        if waiting and finished:
            raise UnsupportedTIR(
                f"divergent barrier: threads {finished} finished while {waiting} wait"
            )
        live = waiting


def _thread_tag(loop: tirx.For) -> str:
    binding = loop.thread_binding
    return str(binding.thread_tag) if binding is not None else ""


class _Root(_Thread):
    """The code outside the thread loop: forks the threads at the ``threadIdx`` loop."""

    def __init__(self, block: _Block, env: dict[ir.expr.Var, Any], order: str | int) -> None:
        super().__init__(block, env)
        self.order = order

    def _run_for(self, loop: tirx.For) -> Generator[object, None, None]:
        if loop.kind != tirx.ForKind.THREAD_BINDING:
            yield from super()._run_for(loop)
            return
        tag = _thread_tag(loop)
        extent = int(self.eval(loop.extent))
        if tag.startswith("blockIdx"):
            for value in range(extent):
                self.env[loop.loop_var] = value
                self.block.arrays = {
                    b: a for b, a in self.block.arrays.items() if not _is_shared(b)
                }
                yield from self.run(loop.body)
            return
        if not tag.startswith("threadIdx.x"):
            raise UnsupportedTIR(f"thread binding {tag}")
        threads = []
        for tid in range(extent):
            thread = _Thread(self.block, {**self.env, loop.loop_var: tid})
            thread.local = {buffer: array.copy() for buffer, array in self.local.items()}
            threads.append(thread.run(loop.body))
        _schedule(threads, self.order)
        yield from ()


def _is_shared(buffer: ir.expr.Var) -> bool:
    return str(buffer.ty.storage_scope).startswith("shared")


def run_block(
    func: tirx.PrimFunc, arrays: Mapping[str, np.ndarray], order: str | int = "forward"
) -> dict[str, np.ndarray]:
    """Interpret ``func`` on ``arrays`` (by parameter name); return the arrays afterwards.

    Args:
        func: a PrimFunc whose parameters are buffers.
        arrays: one numpy array per parameter name; copied, not modified.
        order: the thread order within each barrier phase: ``"forward"``, ``"reverse"`` or
            an integer seed for a random order.
    """
    by_var: dict[ir.expr.Var, np.ndarray] = {}
    result: dict[str, np.ndarray] = {}
    for param in func.params:
        name = str(param.name)
        array = np.array(arrays[name], dtype=_np_dtype(str(param.ty.dtype)))
        result[name] = array
        by_var[param] = array.reshape(-1)
    root = _Root(_Block(by_var), {}, order)
    for _ in root.run(func.body):
        raise UnsupportedTIR("a barrier outside the thread loop")
    return result
