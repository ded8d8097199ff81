"""``tilewave.racecheck``: set up memory for a kernel and run its blocks under schedules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import tvm
from tvm import tirx

from tilewave.errors import PassOptionError, where
from tilewave.racecheck.findings import Finding, Report
from tilewave.racecheck.machine import BlockRun
from tilewave.racecheck.memory import Memory, np_dtype
from tilewave.racecheck.program import Program, compile_program
from tilewave.racecheck.schedule import DEFAULT_SCHEDULES, make_schedule
from tilewave.targets import get_target

__all__ = ["racecheck"]

DEFAULT_MAX_STEPS = 1_000_000
DEFAULT_MAX_SECONDS = 300.0


def _pick_func(func_or_mod: Any, func_name: str | None) -> tuple[tirx.PrimFunc, str]:
    if isinstance(func_or_mod, tirx.PrimFunc):
        symbol = func_or_mod.attrs.get("global_symbol") if func_or_mod.attrs else None
        return func_or_mod, str(symbol) if symbol is not None else "<anonymous>"
    if isinstance(func_or_mod, tvm.IRModule):
        funcs = {gv.name_hint: f for gv, f in func_or_mod.functions.items()
                 if isinstance(f, tirx.PrimFunc)}
        if func_name is not None and func_name in funcs:
            return funcs[func_name], func_name
        if func_name is None and len(funcs) == 1:
            name, func = next(iter(funcs.items()))
            return func, name
        raise PassOptionError(
            f"racecheck: the module has the PrimFuncs {sorted(funcs)}; pass func_name= to "
            "pick the kernel to check.")
    raise PassOptionError(
        f"racecheck: expected a tvm.tirx.PrimFunc or tvm.IRModule, got "
        f"{type(func_or_mod).__name__}.")


def _global_bytes(param: Any, array: Any, rng: np.random.Generator, func_name: str) -> bytes:
    ty = param.ty
    dtype = np_dtype(str(ty.dtype))
    count = 1
    for dim in ty.shape:
        if not isinstance(dim, tirx.IntImm):
            if array is None:
                raise PassOptionError(
                    f"racecheck: parameter '{param.name}' has a symbolic shape "
                    f"{list(ty.shape)} {where(func_name)}; pass its array in args=.")
            break
        count *= int(dim.value)
    if array is not None:
        return np.ascontiguousarray(np.asarray(array).astype(dtype)).tobytes()
    if dtype.kind == "f":
        values = rng.standard_normal(count).astype(dtype)
    elif dtype.kind in "iu":
        values = rng.integers(0, 4, count).astype(dtype)
    else:
        values = np.zeros(count, dtype=dtype)
    return values.tobytes()


def _views_of_params(func: tirx.PrimFunc) -> dict[Any, list[Any]]:
    """Buffers a lowered kernel declares over its pointer parameters (``decl_buffer(data=p)``)."""
    from tilewave.ir.walker import post_order_visit

    params = set(func.params)
    views: dict[Any, list[Any]] = {}

    def visit(node: Any) -> None:
        if type(node).__name__ == "DeclBuffer" and node.data is not None and node.data in params:
            views.setdefault(node.data, []).append(node.buffer)

    post_order_visit(func.body, visit)
    return views


def _view_bytes(buffer: Any) -> int:
    ty = buffer.ty
    count = 1
    for dim in ty.shape:
        count *= int(dim.value) if isinstance(dim, tirx.IntImm) else 1
    offset = int(ty.elem_offset.value) if isinstance(ty.elem_offset, tirx.IntImm) else 0
    return (count + offset) * np_dtype(str(ty.dtype)).itemsize


def _block_indices(program: Program, blocks: int) -> list[dict[str, int]]:
    extents = program.launch.blocks
    tags = [t for t in ("blockIdx.x", "blockIdx.y", "blockIdx.z") if t in extents]
    total = program.launch.num_blocks
    out = []
    for linear in range(min(blocks, total)):
        index, rest = {}, linear
        for tag in tags:
            index[tag] = rest % extents[tag]
            rest //= extents[tag]
        out.append(index)
    return out


def racecheck(
    func_or_mod: Any,
    target: Any = "sm_90a",
    args: Mapping[str, Any] | None = None,
    blocks: int = 1,
    schedules: Iterable[str] = DEFAULT_SCHEDULES,
    *,
    func_name: str | None = None,
    tensor_map_bytes: Mapping[str, int] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    seed: int = 0,
) -> Report:
    """Execute ``blocks`` thread blocks of a lowered kernel and report races and deadlocks.

    Args:
        func_or_mod: a ``PrimFunc`` or an ``IRModule`` (with ``func_name`` when it holds
            several PrimFuncs). Run it after tilewave's passes (and ``LowerTilewaveOps``
            to check the target's instructions).
        target: anything :func:`tilewave.get_target` accepts; it decides how
            ``wait_async_ops`` counts (cp.async groups on CUDA, operations on AMD).
        args: kernel parameter name -> NumPy array (buffers) or int (scalars); buffers not
            given are filled with seeded random values.
        blocks: how many blocks of the grid to run (in ``blockIdx`` order).
        schedules: schedule names (``"lockstep"``, ``"reverse"``, ``"warps"``,
            ``"random:<seed>"``); each runs the blocks from fresh memory.
        tensor_map_bytes: TMA tensor-map parameter name -> box size in bytes; without it a
            TMA copy is taken to cover its shared buffer from its address to the end.
        max_steps, max_seconds: stop a block after this many instruction steps or seconds
            and report ``step-limit`` (a guard against kernels that loop forever).
        seed: seed of the default argument values.

    Returns:
        a :class:`tilewave.racecheck.Report`; ``report.ok`` is False when a race, deadlock
        or bounds error was found, ``print(report.format())`` shows them.

    Raises:
        PassOptionError: a bad option (unknown schedule, missing argument, no kernel).
        MalformedKernelError: a statement or pointer racecheck cannot execute.
        UnclassifiedOpError: an op that touches shared memory without an execution rule.

    Example::

        report = tilewave.racecheck(tilewave.lower(func, "sm_90a"), "sm_90a")
        assert report.ok, report.format()
    """
    func, name = _pick_func(func_or_mod, func_name)
    info = get_target(target)
    if blocks < 1:
        raise PassOptionError(f"racecheck: blocks={blocks}; run at least one block.")
    names = list(schedules)
    plans = [make_schedule(s) for s in names]
    program = compile_program(func, name)
    args = dict(args or {})
    report = Report(name, info.name, schedules=tuple(names), threads=program.launch.num_threads)
    seen: set[tuple] = set()
    for schedule in plans:
        rng = np.random.default_rng(seed)
        memory = Memory(program.launch.num_threads)
        globals_: dict[Any, int] = {}
        scalars: dict[Any, int] = {}
        for param in func.params:
            kind = type(param.ty).__name__
            if kind == "BufferType":
                data = _global_bytes(param, args.get(param.name), rng, name)
                storage = memory.allocate(param.name, "global", len(data),
                                          np.frombuffer(data, dtype=np.uint8))
                globals_[param] = storage.base()
            elif kind == "PointerType":
                views = _views_of_params(func).get(param, [])
                data = _global_bytes(views[0], args.get(param.name), rng, name) if views else b""
                size = max([len(data)] + [_view_bytes(v) for v in views])
                init = np.zeros(size, dtype=np.uint8)
                init[: len(data)] = np.frombuffer(data, dtype=np.uint8)
                storage = memory.allocate(param.name, "global", size, init)
                globals_[param] = storage.base()
            elif param.name in args:
                scalars[param] = int(args[param.name])
        indices = _block_indices(program, blocks)
        report.blocks = len(indices)
        for index in indices:
            run = BlockRun(program, globals_, scalars, memory, index, schedule, info,
                           dict(tensor_map_bytes or {}), max_steps, max_seconds)
            for finding in run.run():
                _merge(report, finding, seen)
            report.steps += run.steps
    return report


def _merge(report: Report, finding: Finding, seen: set[tuple]) -> None:
    key = (finding.kind, finding.statements, finding.buffer)
    if key in seen:
        return
    seen.add(key)
    report.findings.append(finding)
