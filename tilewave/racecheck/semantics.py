"""What each call does when racecheck executes it: one handler per op, in one table.

PTX ops (``tirx.ptx.*``) have their operands named by TVM's own PTX instruction table
(``tvm.backend.cuda.ptx.table``): the call's trailing string arguments are the modifier
tokens and a predicate marker, the rest are operands in table order. Handlers read operand
values, touch shared memory through :meth:`BlockRun.touch` and drive the synchronisation
objects of :mod:`tilewave.racecheck.sync`.

Ops not in the table are looked up in tilewave's op classification
(:func:`tilewave.ir.intrinsics.classify_call`): ops that touch no memory evaluate to 0;
an op that touches shared memory or synchronises and has no handler here is an error
(racecheck would otherwise miss what it does).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import ir, tirx

from tilewave.errors import MalformedKernelError, UnclassifiedOpError, where
from tilewave.ir.intrinsics import OpEffect, callee_name, classify_call
from tilewave.racecheck.evaluate import int_value, is_string
from tilewave.racecheck.memory import np_dtype
from tilewave.racecheck.operands import Access, Blocked
from tilewave.racecheck.shadow import ASYNC

__all__ = ["OP_TABLE", "dispatch"]

Handler = Callable[[Any, ir.expr.Call, np.ndarray], Any]
OP_TABLE: dict[str, Handler] = {}
_PTX = "tirx.ptx."


def handles(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for the op ``names``."""
    def register(func: Handler) -> Handler:
        for name in names:
            OP_TABLE[name] = func
        return func
    return register


@functools.cache
def _ptx_entry(name: str) -> Any:
    from tvm.backend.cuda.ptx import table

    return table.TABLE.get(name[len(_PTX):]) if name.startswith(_PTX) else None


def operands(call: ir.expr.Call) -> dict[str, list[Any]]:
    """A PTX call's operands by the table's operand names (each a list of its registers)."""
    from tvm.backend.cuda.ptx import table

    entry = _ptx_entry(call.op.name)
    args = list(call.args)
    nslots = len(entry.slots)
    tokens = [a.value for a in args[len(args) - nslots - 1: len(args) - 1]]
    mods = table.mods(entry, tokens)
    out: dict[str, list[Any]] = {}
    for slot, first, lanes in table.operand_layout(entry, mods):
        out[slot.name] = args[first: first + lanes]
    out["__mods__"] = [mods]
    return out


def modifiers(call: ir.expr.Call) -> dict[str, str]:
    """A PTX call's modifier tokens by slot name."""
    return operands(call)["__mods__"][0]


def dispatch(run: Any, call: ir.expr.Call, name: str, threads: np.ndarray) -> Any:
    """Execute ``call`` for ``threads`` in ``run``; returns its value (0 for void ops)."""
    handler = OP_TABLE.get(name)
    if handler is None and name in ("tirx.call_extern", "tirx.call_llvm_intrin",
                                    "tirx.call_llvm_pure_intrin", "tirx.call_pure_extern"):
        handler = OP_TABLE.get(callee_name(call))
    if handler is None:
        handler = _by_family(name)
    if handler is not None:
        return handler(run, call, threads)
    effect = classify_call(call)
    if effect is None or (effect & ~(OpEffect.NONE) != OpEffect.NONE and effect not in (
            OpEffect.NONE,)):
        raise UnclassifiedOpError(
            f"racecheck: no execution rule for op '{callee_name(call)}' "
            f"{where(run.name, run.current_stmt())}; racecheck executes the ops tilewave "
            "emits (barriers, mbarriers, cp.async, TMA, wgmma, ldmatrix/stmatrix, fences). "
            "Lower the kernel with tilewave first, or model the op in tilewave/racecheck/"
            "semantics.py.")
    return np.zeros(threads.size, dtype=np.int64)


def _by_family(name: str) -> Handler | None:
    if not name.startswith(_PTX):
        return None
    short = name[len(_PTX):]
    for prefix, handler in _FAMILIES:
        if short.startswith(prefix):
            return handler
    return None


# ---------------------------------------------------------------- small helpers
def _value(run: Any, node: Any, threads: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(run.ev(node, threads)), threads.shape)


def _const(run: Any, node: Any, threads: np.ndarray, what: str) -> int:
    value = int_value(node)
    if value is not None:
        return value
    values = np.unique(_value(run, node, threads))
    if values.size != 1:
        raise MalformedKernelError(
            f"racecheck: {what} differs between threads {where(run.name, run.current_stmt())};"
            " it must be the same for every thread executing the op.")
    return int(values[0])


def _pointer(run: Any, node: Any, threads: np.ndarray) -> tuple[Any, np.ndarray]:
    values = node.values if isinstance(node, _Pointer) else _value(run, node, threads)
    return run.resolve(values, node)


def _write_register(run: Any, node: Any, threads: np.ndarray, value: Any) -> None:
    """Store ``value`` into a register operand (``acc[0]`` or a scalar buffer)."""
    if type(node).__name__ != "TensorLoad":
        return  # an rvalue passed where PTX writes: nothing to update
    access = run.element(node.source, node.indices, threads)
    run.store(access, threads, value, run.current_stmt())


def _mbar_key(run: Any, node: Any, threads: np.ndarray) -> tuple[tuple[int, int], Any, int]:
    storage, offs = _pointer(run, node, threads)
    offsets = np.unique(offs)
    if offsets.size != 1:
        raise MalformedKernelError(
            f"racecheck: threads of one group use different mbarriers "
            f"{where(run.name, run.current_stmt())}; racecheck runs them separately only when "
            "they are at different statements.")
    return (storage.sid, int(offsets[0])), storage, int(offsets[0])


def per_address(operand: str) -> Callable[[Handler], Handler]:
    """Run a handler once per distinct value of its ``operand`` among the threads.

    Threads at one program counter can be in different loop iterations, so one statement can
    name a different mbarrier in different threads; each group is handled on its own, and
    the threads that block carry their own reason (which mbarrier they wait on).
    """
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run_groups(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:

            values = _value(run, operands(call)[operand][0], threads)
            distinct = np.unique(values)
            if distinct.size == 1:
                return handler(run, call, threads)
            waiting: list[np.ndarray] = []
            reasons: dict[int, str] = {}
            for value in distinct.tolist():
                group = threads[values == value]
                try:
                    handler(run, call, group)
                except Blocked as blocked:
                    waiting.append(blocked.threads)
                    reasons.update({t: blocked.reason_of(t) for t in blocked.threads.tolist()})
            if waiting:
                stuck = np.concatenate(waiting)
                raise Blocked(stuck, reasons[int(stuck[0])], reasons)
            return 0
        return run_groups
    return wrap


def _mbar_touch(run: Any, storage: Any, offset: int, threads: np.ndarray, write: bool,
                atomic: bool) -> None:
    if storage.is_shared:
        offs = np.full(threads.size, offset, dtype=np.int64)
        run.touch(storage, threads, offs, 8, write, atomic=atomic)


def _require_mbarrier(run: Any, key: tuple[int, int], storage: Any, threads: np.ndarray) -> None:
    if key not in run.mbarriers.by_address:

        run._report(("mbarrier-uninit", run.instr_index), _finding(
            run, "deadlock", f"mbarrier in '{storage.name}' used before mbarrier.init",
            threads))
        raise Blocked(threads, f"uninitialised mbarrier in '{storage.name}'")


def _finding(run: Any, kind: str, message: str, threads: np.ndarray) -> Any:
    from tilewave.racecheck.findings import Finding, statement_text

    return Finding(kind, message, statements=(statement_text(run.current_stmt()),),
                   threads=(f"threads {threads[:6].tolist()}",), schedule=run.schedule.name)


# ---------------------------------------------------------------- block / named barriers
@handles("tirx.tvm_storage_sync", "tirx.cuda.cta_sync", "tirx.cuda.syncthreads_and",
         "tirx.cuda.syncthreads_or", "tilewave.lds_barrier", "llvm.amdgcn.s.barrier")
def _block_barrier(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    if call.op.name == "tirx.tvm_storage_sync" and call.args and is_string(call.args[0]) and \
            not call.args[0].value.startswith("shared"):
        return 0  # global / warp syncs do not order shared memory across the block
    # __syncthreads() is bar.sync 0, an aligned barrier; AMD's s_barrier has no such rule
    _hardware_barrier(run, threads, 0, run.n, sync=True, aligned=run.target.is_cuda)
    return 0


def _hardware_barrier(run: Any, threads: np.ndarray, bar_id: int, count: int,
                      sync: bool, aligned: bool) -> None:

    completed = run.barriers.arrive(bar_id, count, threads, sync, run.instr_index, aligned)
    released = set()
    for waiters, _gen in completed:
        released.update(waiters.tolist())
        mine = waiters[~np.isin(waiters, threads)]
        run.release(mine)
    if not sync:
        return
    stuck = threads[~np.isin(threads, np.asarray(sorted(released), dtype=np.int64))]
    if stuck.size:
        # threads released by their own arrival advance normally; the rest wait
        raise Blocked(stuck, f"barrier {bar_id} (count {count})")


@handles(_PTX + "bar_sync", _PTX + "barrier_sync", _PTX + "bar_sync_count",
         _PTX + "barrier_sync_count", _PTX + "bar_arrive", _PTX + "barrier_arrive")
def _named_barrier(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    ops = operands(call)
    bar_id = _const(run, ops["a"][0], threads, "the barrier id")
    count = _const(run, ops["b"][0], threads, "the thread count") if "b" in ops else run.n
    if count % 32 and count != run.n:
        run._report(("barrier-count-warp", run.instr_index), _finding(
            run, "barrier-count", f"barrier {bar_id} counts {count} threads, not a multiple "
            "of the warp size (PTX ISA: bar's thread count must be)", threads))
    # bar.sync / bar.arrive are barrier.sync.aligned / barrier.arrive.aligned (PTX ISA, bar)
    aligned = call.op.name.startswith(_PTX + "bar_") or bool(modifiers(call).get("aligned"))
    _hardware_barrier(run, threads, bar_id, count, sync="arrive" not in call.op.name,
                      aligned=aligned)
    return 0


# ---------------------------------------------------------------- split barriers
@handles("tilewave.barrier_signal", "llvm.amdgcn.s.barrier.signal")
def _split_signal(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    bar_id = _split_id(run, call, threads)
    if run.split.signal(bar_id, threads, run.instr_index):
        run.wake_split(bar_id)
    return 0


@handles("tilewave.barrier_wait", "llvm.amdgcn.s.barrier.wait")
def _split_wait(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:

    bar_id = _split_id(run, call, threads)
    _released, waiting, unsignalled = run.split.wait(bar_id, threads)
    if unsignalled.size:
        run._report(("split-unsignalled", run.instr_index), _finding(
            run, "deadlock", f"split barrier {bar_id} waited on without a signal first",
            unsignalled))
        waiting = np.concatenate([waiting, unsignalled])
    if waiting.size:
        raise Blocked(waiting, f"split barrier {bar_id}")
    return 0


def _split_id(run: Any, call: ir.expr.Call, threads: np.ndarray) -> int:
    args = [a for a in call.args if not is_string(a)]
    if call.op.name.startswith("tirx.call_llvm"):
        args = args[1:] if args and isinstance(args[0], tirx.IntImm) and len(args) > 1 else args
    return _const(run, args[-1], threads, "the barrier id") if args else -1


# ---------------------------------------------------------------- mbarriers
@handles(_PTX + "mbarrier_init")
@per_address("addr")
def _mbarrier_init(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    ops = operands(call)
    key, storage, offset = _mbar_key(run, ops["addr"][0], threads)
    count = _const(run, ops["count"][0], threads, "the arrival count")
    _mbar_touch(run, storage, offset, threads, write=True, atomic=False)
    run.mbarriers.init(key, count, run.instr_index)
    return 0


@per_address("addr")
def _mbarrier_arrive(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    ops = operands(call)
    key, storage, offset = _mbar_key(run, ops["addr"][0], threads)
    _require_mbarrier(run, key, storage, threads)
    _mbar_touch(run, storage, offset, threads, write=True, atomic=True)
    name = call.op.name
    tx = 0
    count = 1
    if "tx_count" in ops:
        tx = _const(run, ops["tx_count"][0], threads, "the transaction count")
    elif "count" in ops and "expect_tx" in name:
        tx = _const(run, ops["count"][0], threads, "the transaction count")
    elif "count" in ops:
        count = _const(run, ops["count"][0], threads, "the arrival count")
    if "expect_tx" in name and "arrive" not in name:
        run.mbarriers.expect_tx(key, tx)
        return 0
    tokens = run.mbarriers.arrive(key, threads, count=count, tx=tx)
    if "state" in ops and ops["state"] and type(ops["state"][0]).__name__ == "TensorLoad":
        _write_register(run, ops["state"][0], threads, np.asarray(tokens, dtype=np.int64))
    return 0


@per_address("addr")
def _mbarrier_wait(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:

    ops = operands(call)
    key, storage, offset = _mbar_key(run, ops["addr"][0], threads)
    _require_mbarrier(run, key, storage, threads)
    _mbar_touch(run, storage, offset, threads, write=True, atomic=True)
    if "phase" in ops:
        done = run.mbarriers.parity_done(key, _value(run, ops["phase"][0], threads))
    else:
        done = run.mbarriers.phase_done(key, _value(run, ops["state"][0], threads))
    done = np.broadcast_to(done, threads.shape)
    if not done.all():
        # try_wait / test_wait loops spin until the phase completes: block until it does
        raise Blocked(threads, f"mbarrier@{key} phase wait (in '{storage.name}')")
    run.mbarriers.acquire_latest(key, threads)
    _write_register(run, ops["wait_complete"][0], threads, np.ones(threads.size, np.int64))
    return 1


@handles(_PTX + "fence_mbarrier_init", _PTX + "wgmma_fence", "tirx.cuda.wgmma_noop_barrier",
         _PTX + "fence", _PTX + "bar_warp_sync", _PTX + "setmaxnreg",
         # LDS operations complete at issue in this model, so their counter waits add nothing
         "llvm.amdgcn.s.wait.dscnt")
def _no_effect(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    return 0


# ---------------------------------------------------------------- proxy fence
@handles(_PTX + "fence_proxy", "tilewave.fence_proxy_async")
def _fence_proxy(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    if call.op.name.startswith(_PTX) and modifiers(call).get("proxykind") != "async":
        return 0
    run.clocks.fence_proxy(threads)
    return 0


# ---------------------------------------------------------------- cp.async (generic proxy)
def _cp_async(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    ops = operands(call)
    size = _const(run, ops["cp_size"][0], threads, "the copy size")
    _async_copy(run, threads, ops["dst_mem"][0], ops["src_mem"][0], size, call)
    return 0


def _async_copy(run: Any, threads: np.ndarray, dst_node: Any, src_node: Any, size: int,
                call: Any) -> None:
    """One async global->shared copy per thread, performed by its cp.async unit."""
    dst, dst_off = _pointer(run, dst_node, threads)
    src, src_off = _pointer(run, src_node, threads)
    units = run.actors.cp_async(threads)
    for thread, unit in zip(threads.tolist(), units.tolist(), strict=True):
        run.clocks.inherit(unit, np.asarray([thread]))
    stmt = run.current_stmt()

    ok = run.in_bounds(Access(dst, dst_off, np.dtype(np.uint8)), threads, size, stmt)
    run.in_bounds(Access(src, src_off, np.dtype(np.uint8)), threads, size, stmt)
    if dst.is_shared:
        run.touch(dst, threads, dst_off[:, None], size, True, actors=units, ok=ok[:, None])
    for i, thread in enumerate(threads.tolist()):
        if ok[i]:
            run.memory.copy_bytes(dst, int(dst_off[i]), src, int(src_off[i]), size, thread)
    run.cp_async.issued_by(threads)


def _commit_and_wait(groups: str, commits: tuple[str, ...], waits: tuple[str, ...]) -> None:
    """Register ``commit_group`` / ``wait_group n`` for the run's ``groups`` (an AsyncGroups
    attribute: ``cp_async``, ``bulk``, ``wgmma``)."""

    def commit(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
        getattr(run, groups).commit(threads)
        return 0

    def wait(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
        keep = _const(run, call.args[0], threads, "the group count")
        getattr(run, groups).wait(threads, keep)
        return 0

    handles(*commits)(commit)
    handles(*waits)(wait)


_commit_and_wait("cp_async", (_PTX + "cp_async_commit_group", "tilewave.commit_async_ops"),
                 (_PTX + "cp_async_wait_group", "tilewave.wait_async_ops"))
_commit_and_wait("bulk", (_PTX + "cp_async_bulk_commit_group",),
                 (_PTX + "cp_async_bulk_wait_group",))
_commit_and_wait("wgmma", (_PTX + "wgmma_commit_group",), (_PTX + "wgmma_wait_group",))


@handles(_PTX + "cp_async_wait_all")
def _cp_wait_all(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    run.cp_async.wait(threads, 0, include_open=True)
    return 0


@handles("llvm.amdgcn.global.load.lds")
def _lds_dma(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    """gfx9 LDS DMA: lane ``l`` of a wave copies ``size`` bytes to the wave-uniform LDS base
    + offset + ``l * size`` (CDNA3 ISA, "buffer/global load to LDS"); done at ``vmcnt``."""
    args = list(call.args)[1:]  # after the intrinsic id
    size = _const(run, args[2], threads, "the copy size")
    offset = _const(run, args[3], threads, "the LDS offset")
    wave = run.target.wave_size
    dst, base = _pointer(run, args[1], threads)
    lanes = threads % wave
    first = {}
    for thread, b in zip((threads // wave).tolist(), base.tolist(), strict=True):
        first.setdefault(thread, b)  # M0 holds one base per wave: lane 0's view of it
    wave_base = np.asarray([first[w] for w in (threads // wave).tolist()], dtype=np.int64)
    dst_ptr = dst.base() + wave_base + offset + lanes * size
    _async_copy(run, threads, _Pointer(dst_ptr), args[0], size, call)
    return 0


class _Pointer:
    """A pointer operand whose per-thread values are already known (not a TIR expression)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values


@handles("llvm.amdgcn.s.waitcnt")
def _amd_waitcnt(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    imm = _const(run, call.args[-1], threads, "the waitcnt immediate")
    vmcnt = (imm & 0xF) | ((imm >> 14) & 0x3) << 4  # gfx9 encoding (CDNA3 ISA, S_WAITCNT)
    run.cp_async.wait(threads, vmcnt)
    return 0


@handles("llvm.amdgcn.s.wait.loadcnt")
def _amd_loadcnt(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    run.cp_async.wait(threads, _const(run, call.args[-1], threads, "the load count"))
    return 0


# ---------------------------------------------------------------- bulk copies / TMA
def _bulk_range(run: Any, threads: np.ndarray, node: Any,
                nbytes: int | None) -> tuple[Any, np.ndarray, int]:
    storage, offs = _pointer(run, node, threads)
    size = storage.nbytes - int(offs.max()) if nbytes is None else nbytes
    return storage, offs, size


def _tensor_map_bytes(run: Any, node: Any) -> int | None:
    """The box size given for the tensor-map parameter that ``node`` refers to."""
    from tilewave.ir.walker import post_order_visit

    found: list[int] = []

    def visit(item: Any) -> None:
        name = getattr(item, "name", None) if isinstance(item, ir.expr.Var) else None
        if name is not None and str(name) in run.tensor_map_bytes:
            found.append(run.tensor_map_bytes[str(name)])

    post_order_visit(node, visit)
    return found[0] if found else None


def _issue_bulk(run: Any, threads: np.ndarray, storage: Any, offset: np.ndarray, size: int,
                write: bool) -> np.ndarray:
    """Each of ``threads`` issues one bulk copy of ``size`` bytes at its ``offset``."""
    units = np.asarray(run.actors.bulk(threads), dtype=np.int64)
    for thread, unit in zip(threads.tolist(), units.tolist(), strict=True):
        run.clocks.inherit(unit, np.asarray([thread]))
    if storage.is_shared and size > 0:
        run.touch(storage, threads, np.asarray(offset, dtype=np.int64).reshape(-1, 1), size,
                  write, actors=units, proxy=ASYNC)
    return units


@per_address("mbar")
def _bulk_load(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    """TMA / bulk global->shared: async-proxy writes that complete on the mbarrier."""
    ops = operands(call)
    if "size" in ops:
        nbytes: int | None = _const(run, ops["size"][0], threads, "the copy size")
    else:
        nbytes = _tensor_map_bytes(run, ops["tmap"][0])
        if nbytes is None:
            raise MalformedKernelError(
                f"racecheck: a TMA load {where(run.name, run.current_stmt())} copies a box "
                "whose size lives in its host-side tensor map. Pass it: racecheck(..., "
                "tensor_map_bytes={'<tensor-map parameter>': box_bytes}).")
    storage, offset, size = _bulk_range(run, threads, ops["dst_mem"][0], nbytes)
    units = _issue_bulk(run, threads, storage, offset, size, write=True)
    key, mstorage, _moff = _mbar_key(run, ops["mbar"][0], threads)
    _require_mbarrier(run, key, mstorage, threads)
    for unit in units:
        run.mbarriers.complete_tx(key, unit, size)
    return 0


def _bulk_store(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    """TMA / bulk shared->global: async-proxy reads until the bulk group's wait."""
    ops = operands(call)
    if "size" in ops:
        nbytes: int | None = _const(run, ops["size"][0], threads, "the copy size")
    else:
        nbytes = _tensor_map_bytes(run, ops["tmap"][0])
    storage, offset, size = _bulk_range(run, threads, ops["src_mem"][0], nbytes)
    _issue_bulk(run, threads, storage, offset, size, write=False)
    run.bulk.issued_by(threads)
    return 0


# ---------------------------------------------------------------- wgmma (async proxy)
_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1,
                  "b1": 1}
_SWIZZLE_BYTES = {0: 0, 1: 128, 2: 64, 3: 32}  # descriptor layout_type -> swizzle width


def _descriptor_bytes(desc: int, rows: int, k_bytes: int) -> tuple[int, np.ndarray] | None:
    """Shared-window byte addresses a K-major wgmma operand reads (PTX ISA "Matrix
    Descriptor Format": start address, LBO and SBO in 16-byte units, layout type)."""
    start = (desc & 0x3FFF) << 4
    if start == 0:
        return None
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    swizzle = _SWIZZLE_BYTES[(desc >> 62) & 0x3]
    groups = np.arange(max(1, rows // 8))[:, None, None, None]
    row = np.arange(8)[None, :, None, None]
    chunk = np.arange(max(1, k_bytes // 16))[None, None, :, None]
    byte = np.arange(16)[None, None, None, :]
    if swizzle == 0:
        addr = start + groups * sbo + chunk * lbo + row * 16 + byte
    else:
        logical = start + groups * sbo + row * swizzle + chunk * 16
        bits = (swizzle // 16) - 1  # XOR the 16-byte chunk index with the row (Swizzle<b,4,3>)
        addr = (logical ^ (((logical >> 7) & bits) << 4)) + byte
    return start, np.unique(addr.ravel())


def _wgmma(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    ops = operands(call)
    mods = ops["__mods__"][0]
    shape = mods.get("shape", "m64n8k16")
    n = int(shape.split("n")[1].split("k")[0])
    k = int(shape.split("k")[1])
    elem = _ELEMENT_BYTES.get(mods.get("atype", "f16"), 2)
    groups = threads // 128
    for group in np.unique(groups).tolist():
        members = threads[groups == group]
        unit = int(run.actors.wgmma(group))
        run.clocks.inherit(unit, members)
        for name, rows in (("a_desc", 64), ("b_desc", n)):
            if name not in ops:
                continue
            desc = int(_value(run, ops[name][0], members[:1])[0]) & ((1 << 64) - 1)
            _wgmma_read(run, unit, members, desc, rows, k * elem)
    run.wgmma.issued_by(threads)
    return 0


def _wgmma_read(run: Any, unit: int, members: np.ndarray, desc: int, rows: int,
                k_bytes: int) -> None:
    decoded = _descriptor_bytes(desc, rows, k_bytes)
    if decoded is None:
        # not a descriptor racecheck can decode: assume the operand may be anywhere in shared
        for _base, sid in run.windows:
            storage = run.memory.storages[sid]
            run.touch(storage, members[:1], np.asarray([[0]]), storage.nbytes, False,
                      actors=np.asarray([unit]), proxy=ASYNC)
        return
    _, addresses = decoded
    storage, offsets = run.resolve(addresses, None)

    providers = np.full(offsets.size, members[0])
    ok = run.in_bounds(Access(storage, offsets, np.dtype(np.uint8)), providers, 1,
                       run.current_stmt())
    actors = np.full(offsets.size, unit, dtype=np.int64)
    run.touch(storage, providers, offsets[:, None], 1, False, actors=actors, proxy=ASYNC,
              ok=ok[:, None])


@handles("tirx.cuda.wgmma_encode_matrix_descriptor")
def _encode_descriptor(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    desc_ptr, addr, ldo, sdo, swizzle = call.args[:5]
    storage, offs = _pointer(run, addr, threads)
    window = run.shared_window(storage) + offs
    layout = {0: 0, 1: 3, 2: 2, 3: 1}[_const(run, swizzle, threads, "the swizzle mode")]
    value = ((window >> 4) & 0x3FFF) | ((_value(run, ldo, threads) & 0x3FFF) << 16) | (
        (_value(run, sdo, threads) & 0x3FFF) << 32) | (layout << 62)
    dst, dst_off = _pointer(run, desc_ptr, threads)

    run.store(Access(dst, dst_off, np.dtype(np.int64)), threads, value, run.current_stmt())
    return 0


# ---------------------------------------------------------------- ldmatrix / stmatrix / mma
def _matrix_rows(run: Any, call: ir.expr.Call, threads: np.ndarray) -> tuple[Any, np.ndarray,
                                                                             np.ndarray, int]:
    ops = operands(call)
    mods = ops["__mods__"][0]
    count = {"x1": 1, "x2": 2, "x4": 4}.get(mods.get("num", "x1"), 1)
    lanes = threads % 32
    providers = threads[lanes < 8 * count]  # lane i gives the address of row i (PTX ISA)
    storage, offs = _pointer(run, ops["p"][0], threads)
    return storage, providers, offs[lanes < 8 * count], 16


def _ldmatrix(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    storage, providers, offs, width = _matrix_rows(run, call, threads)

    ok = run.in_bounds(Access(storage, offs, np.dtype(np.uint8)), providers, width,
                       run.current_stmt())
    if storage.is_shared:
        run.touch(storage, providers, offs[:, None], width, False, ok=ok[:, None])
    for reg in operands(call)["r"]:
        _write_register(run, reg, threads, np.zeros(threads.size))
    return 0


def _stmatrix(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    storage, providers, offs, width = _matrix_rows(run, call, threads)

    ok = run.in_bounds(Access(storage, offs, np.dtype(np.uint8)), providers, width,
                       run.current_stmt())
    if storage.is_shared:
        run.touch(storage, providers, offs[:, None], width, True, ok=ok[:, None])
    return 0


def _registers_only(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    """mma.sync and other register-to-register PTX: written registers become 0."""
    ops = operands(call)
    entry = _ptx_entry(call.op.name)
    for slot in entry.operands:
        if slot.rw == "w":
            for reg in ops.get(slot.name, []):
                _write_register(run, reg, threads, np.zeros(threads.size))
    return 0


# ---------------------------------------------------------------- pointers and atomics
@handles("tirx.address_of")
def _address_of(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    load = call.args[0]
    indices = list(load.indices) or [tirx.IntImm("int32", 0)]
    access = run.element(load.source, indices, threads)
    return access.storage.base() + access.offsets


@handles("tirx.buffer_data")
def _buffer_data(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    return run.ev(call.args[0], threads)


@handles("tirx.cuda.cvta_generic_to_shared")
def _cvta(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    storage, offs = _pointer(run, call.args[0], threads)
    if not storage.is_shared:
        return storage.base() + offs
    return run.shared_window(storage) + offs


@handles("tirx.tvm_access_ptr")
def _access_ptr(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    dtype = np_dtype(str(call.args[0].ty))
    base = _value(run, call.args[1], threads)
    return base + _value(run, call.args[2], threads) * dtype.itemsize


@handles("tirx.if_then_else")
def _if_then_else(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    cond = np.broadcast_to(np.asarray(run.ev(call.args[0], threads), dtype=bool), threads.shape)
    out = np.zeros(threads.shape, dtype=np.float64 if "float" in str(call.ty) else np.int64)
    if cond.any():
        out[cond] = np.broadcast_to(run.ev(call.args[1], threads[cond]), (int(cond.sum()),))
    if (~cond).any():
        out[~cond] = np.broadcast_to(run.ev(call.args[2], threads[~cond]),
                                     (int((~cond).sum()),))
    return out


@handles("tirx.cuda.__shfl_xor_sync", "tirx.cuda.__shfl_sync", "tirx.cuda.__shfl_down_sync",
         "tirx.cuda.__shfl_up_sync")
def _shuffle(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    """Warp shuffles: each lane reads a value of another lane of its warp (CUDA semantics)."""
    value = np.broadcast_to(np.asarray(run.ev(call.args[1], threads)), threads.shape)
    arg = np.broadcast_to(np.asarray(run.ev(call.args[2], threads)), threads.shape)
    width = _const(run, call.args[3], threads, "the shuffle width") if len(call.args) > 3 else 32
    lane = threads % width
    base = threads - lane
    kind = call.op.name.rsplit(".", 1)[-1]
    source = {"__shfl_xor_sync": lane ^ arg, "__shfl_sync": arg % width,
              "__shfl_down_sync": np.where(lane + arg < width, lane + arg, lane),
              "__shfl_up_sync": np.where(lane - arg >= 0, lane - arg, lane)}[kind] + base
    position = {t: i for i, t in enumerate(threads.tolist())}
    pick = np.asarray([position.get(s, i) for i, s in enumerate(source.tolist())])
    return value[pick]


@handles("tirx.likely", "tirx.reinterpret")
def _passthrough(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    return run.ev(call.args[0], threads)


@handles("tirx.atomic_add", "tirx.cuda.atomic_add")
def _atomic_add(run: Any, call: ir.expr.Call, threads: np.ndarray) -> Any:
    storage, offs = _pointer(run, call.args[0], threads)
    dtype = np_dtype(str(call.ty)) if str(call.ty) != "void" else np.dtype(np.int32)

    access = Access(storage, offs, dtype)
    ok = run.in_bounds(access, threads, dtype.itemsize, run.current_stmt())
    if storage.is_shared:
        run.touch(storage, threads, offs[:, None], dtype.itemsize, True, atomic=True,
                  ok=ok[:, None])
    old = run.memory.load(storage, threads, np.where(ok, offs, 0), dtype)
    value = np.broadcast_to(run.ev(call.args[1], threads), threads.shape)
    for i in range(threads.size):  # one after the other, as the hardware serialises them
        if ok[i]:
            cur = run.memory.load(storage, threads[i:i + 1], offs[i:i + 1], dtype)
            run.memory.store(storage, threads[i:i + 1], offs[i:i + 1], cur + value[i], dtype)
    return old


_FAMILIES: tuple[tuple[str, Handler], ...] = (
    ("mbarrier_arrive", _mbarrier_arrive),
    ("mbarrier_expect_tx", _mbarrier_arrive),
    ("mbarrier_try_wait", _mbarrier_wait),
    ("mbarrier_test_wait", _mbarrier_wait),
    ("cp_async_ca", _cp_async),
    ("cp_async_cg", _cp_async),
    ("cp_async_bulk_tensor_g2s", _bulk_load),
    ("cp_async_bulk_g2s", _bulk_load),
    ("cp_async_bulk_tensor_s2g", _bulk_store),
    ("cp_async_bulk_s2g", _bulk_store),
    ("wgmma_", _wgmma),
    ("ldmatrix", _ldmatrix),
    ("stmatrix", _stmatrix),
    ("mma", _registers_only),
    ("mov", _registers_only),
    ("cvt", _registers_only),
)
