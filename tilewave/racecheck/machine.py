"""The executor: every thread of one block, run over a flattened program.

Threads are grouped by program counter; each step the schedule picks one group of
runnable threads and the executor runs that group's instruction for all of them at once,
with per-thread values in NumPy arrays. Shared-memory accesses are checked against the
shadow memory as they happen; synchronisation calls update the vector clocks and may block
threads until a barrier or mbarrier phase releases them. When no thread can run and some
have not finished, the block is deadlocked.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tvm import ir, tirx

from tilewave.errors import MalformedKernelError, where
from tilewave.racecheck.clocks import Actors, Clocks
from tilewave.racecheck.evaluate import (
    BINARY,
    CALL_BINARY,
    CALL_UNARY,
    canonical,
    cast_to,
    pair,
    unsupported,
)
from tilewave.racecheck.findings import Finding, statement_text
from tilewave.racecheck.memory import OFFSET_BITS, Memory, Storage, np_dtype
from tilewave.racecheck.operands import Access, Blocked
from tilewave.racecheck.program import Program
from tilewave.racecheck.schedule import Schedule
from tilewave.racecheck.shadow import GENERIC, Conflicts, Shadow
from tilewave.racecheck.sync import AsyncGroups, HardwareBarriers, MBarriers, SplitBarriers

__all__ = ["Access", "BlockRun", "Blocked"]

RUNNABLE, BLOCKED, DONE = 0, 1, 2
_SHARED_WINDOW_ALIGN = 1024


class BlockRun:
    """One block of ``program`` under one schedule.

    Args:
        program: the flattened kernel.
        globals_: parameter buffer var -> its global storage (shared across blocks).
        scalars: scalar parameter var -> value.
        memory: the memory holding the global storages.
        block_index: this block's index per ``blockIdx`` tag.
        schedule: picks which runnable threads run next.
        target: the :class:`tilewave.TargetInfo`.
        options: ``tensor_map_bytes`` and ``max_steps``.
    """

    def __init__(self, program: Program, globals_: dict[Any, int], scalars: dict[Any, int],
                 memory: Memory, block_index: dict[str, int], schedule: Schedule,
                 target: Any, tensor_map_bytes: dict[str, int], max_steps: int,
                 max_seconds: float = float("inf")) -> None:
        from tilewave.racecheck import semantics  # the op table needs BlockRun

        self.program = program
        self.name = program.name
        self.n = program.launch.num_threads
        self.memory = memory
        self.target = target
        self.schedule = schedule
        self.block_index = block_index
        self.tensor_map_bytes = tensor_map_bytes
        self.max_steps = max_steps
        self.max_seconds = max_seconds
        self.actors = Actors(self.n)
        self.clocks = Clocks(self.actors)
        self.env: dict[Any, np.ndarray] = {}
        for var, pointer in globals_.items():
            self.env[var] = np.full(self.n, pointer, dtype=np.int64)
        for var, value in scalars.items():
            self.env[var] = np.full(self.n, value, dtype=np.int64)
        self.shadows: dict[int, Shadow] = {}
        self.windows: list[tuple[int, int]] = []  # (shared window base, storage id)
        self._next_window = _SHARED_WINDOW_ALIGN
        self.pc = np.zeros(self.n, dtype=np.int64)
        self.state = np.zeros(self.n, dtype=np.int8)
        self.blocked_reason: dict[int, str] = {}
        self.barriers = HardwareBarriers(self.clocks, self.n)
        self.split = SplitBarriers(self.clocks, self.n)
        self.mbarriers = MBarriers(self.clocks)
        self.mbarriers.on_complete = self._wake_mbarrier
        per_op = not target.is_cuda  # AMD: vmcnt counts operations, not groups
        self.cp_async = AsyncGroups(self.clocks, self.n, self.actors.cp_async, auto_commit=per_op)
        self.bulk = AsyncGroups(self.clocks, self.n, self.actors.bulk)
        self.wgmma = AsyncGroups(self.clocks, self.n, self._wgmma_unit_of)
        self.findings: dict[tuple, Finding] = {}
        self.steps = 0
        self.instr_index = 0
        self.ops = semantics.OP_TABLE
        self.semantics = semantics

    # ------------------------------------------------------------------ running
    def run(self) -> list[Finding]:
        """Run the block to completion or deadlock; return its findings."""
        instrs = self.program.instrs
        deadline = time.monotonic() + self.max_seconds
        while True:
            runnable = np.nonzero(self.state == RUNNABLE)[0]
            if runnable.size == 0:
                break
            if self.steps >= self.max_steps or (self.steps % 256 == 0
                                                and time.monotonic() > deadline):
                stmt = instrs[int(self.pc[runnable[0]])].stmt
                self._report(("step-limit",), Finding(
                    "step-limit", f"stopped after {self.steps} steps: the kernel may loop "
                    "forever (raise max_steps / max_seconds if it does not)",
                    statements=(statement_text(stmt),), schedule=self.schedule.name))
                return list(self.findings.values())
            threads = self.schedule.pick(runnable, self.pc[runnable])
            pc = int(self.pc[threads[0]])
            self.instr_index = pc
            self.steps += 1
            try:
                self._execute(instrs[pc], threads)
            except Blocked as blocked:
                self.state[blocked.threads] = BLOCKED
                for t in blocked.threads.tolist():
                    self.blocked_reason[t] = blocked.reason_of(t)
        self._finish()
        return list(self.findings.values())

    def _execute(self, instr: Any, threads: np.ndarray) -> None:
        kind = instr.kind
        if kind == "exec":
            try:
                self.exec_stmt(instr.stmt, threads)
            except Blocked as blocked:
                self.pc[threads[~np.isin(threads, blocked.threads)]] += 1
                raise
            self.pc[threads] += 1
        elif kind == "assign":
            self.set_var(instr.var, threads, self.ev(instr.expr, threads))
            self.pc[threads] += 1
        elif kind == "branch":
            cond = np.broadcast_to(np.asarray(self.ev(instr.expr, threads), dtype=bool),
                                   threads.shape)
            self.pc[threads[cond]] += 1
            self.pc[threads[~cond]] = instr.target
        elif kind == "jump":
            self.pc[threads] = instr.target
        elif kind == "bind":
            self.set_var(instr.var, threads, self._axis_value(instr.tag, threads))
            self.pc[threads] += 1
        elif kind == "end":
            self.state[threads] = DONE

    def _axis_value(self, tag: str, threads: np.ndarray) -> np.ndarray:
        if tag.startswith("blockIdx"):
            return np.full(threads.size, self.block_index.get(tag, 0), dtype=np.int64)
        ext = self.program.launch.threads
        x, y = ext.get("threadIdx.x", 1), ext.get("threadIdx.y", 1)
        if tag == "threadIdx.x":
            return threads % x
        if tag == "threadIdx.y":
            return (threads // x) % y
        return threads // (x * y)

    def release(self, threads: np.ndarray) -> None:
        """Blocked ``threads`` passed their barrier: advance them past it."""
        if threads.size == 0:
            return
        self.pc[threads] += 1
        self.state[threads] = RUNNABLE
        for t in threads.tolist():
            self.blocked_reason.pop(t, None)

    def _wake_mbarrier(self, key: tuple[int, int]) -> None:
        # waiters re-run their try_wait, which now sees the new phase
        tag = f"mbarrier@{key}"
        waiting = [t for t, why in self.blocked_reason.items() if why.startswith(tag)]
        for t in waiting:
            self.state[t] = RUNNABLE
            del self.blocked_reason[t]

    def wake_split(self, bar_id: int) -> None:
        """A split-barrier generation completed: its waiters re-run their wait."""
        tag = f"split barrier {bar_id}"
        for t in [t for t, why in self.blocked_reason.items() if why.startswith(tag)]:
            self.state[t] = RUNNABLE
            del self.blocked_reason[t]

    def _finish(self) -> None:
        blocked = np.nonzero(self.state == BLOCKED)[0]
        if blocked.size:
            by_reason: dict[tuple[str, int], list[int]] = {}
            for t in blocked.tolist():
                by_reason.setdefault((self.blocked_reason.get(t, "?"), int(self.pc[t])),
                                     []).append(t)
            done = int((self.state == DONE).sum())
            for (reason, pc), threads in by_reason.items():
                stmt = self.program.instrs[pc].stmt
                self._report(("deadlock", reason, pc), Finding(
                    "deadlock",
                    f"{len(threads)} thread(s) wait forever at {reason} ({done} threads "
                    "finished, the rest wait elsewhere)",
                    statements=(statement_text(stmt),),
                    threads=(_thread_list(threads),), count=len(threads),
                    schedule=self.schedule.name))
        for bar_id, had, got, pc in self.barriers.count_mismatches:
            self._report(("barrier-count", bar_id, pc), Finding(
                "barrier-count", f"barrier {bar_id} used with thread count {got} while a "
                f"generation expecting {had} was open",
                statements=(statement_text(self.program.instrs[pc].stmt),),
                schedule=self.schedule.name))
        for bar_id, pcs, waiters in self.barriers.divergent:
            self._report(("barrier-divergent", bar_id, pcs), Finding(
                "barrier-divergent", f"one generation of barrier {bar_id} was completed by "
                f"aligned syncs at {len(pcs)} different instructions (bar.sync and "
                "__syncthreads() are aligned: PTX requires every thread to execute the same "
                "barrier instruction; use barrier.sync without .aligned, or bar.arrive on all "
                "sides but one)",
                statements=tuple(statement_text(self.program.instrs[pc].stmt) for pc in pcs),
                threads=(_thread_list(list(waiters)),), count=len(waiters),
                schedule=self.schedule.name))

    # ------------------------------------------------------------------ variables
    def set_var(self, var: Any, threads: np.ndarray, value: Any) -> None:
        """Assign ``value`` (per thread) to ``var`` for ``threads``."""
        value = np.asarray(value)
        slot = self.env.get(var)
        shape = (self.n, *value.shape[1:]) if value.ndim > 1 else (self.n,)
        if slot is None or slot.shape != shape or slot.dtype != value.dtype:
            fresh = np.zeros(shape, dtype=value.dtype if value.dtype != object else np.int64)
            if slot is not None and slot.shape == shape:
                fresh[...] = slot
            self.env[var] = slot = fresh
        slot[threads] = value

    # ------------------------------------------------------------------ statements
    def exec_stmt(self, stmt: Any, threads: np.ndarray) -> None:
        """Execute one leaf statement for ``threads``."""
        kind = type(stmt).__name__
        if kind == "BufferStore":
            value = self.ev(stmt.value, threads)
            access = self.element(stmt.buffer, stmt.indices, threads)
            self.store(access, threads, value, stmt)
        elif kind == "Evaluate":
            if isinstance(stmt.value, ir.expr.Call):
                self.call(stmt.value, threads)
        elif kind == "AllocBuffer":
            self._alloc(stmt.buffer, threads)
        elif kind == "DeclBuffer" and stmt.data is not None:
            self.set_var(stmt.buffer, threads, self.ev(stmt.data, threads))

    def _alloc(self, buffer: Any, threads: np.ndarray) -> None:
        if buffer in self.env:
            return  # an allocation runs once per block (loops re-executing it keep it)
        ty = buffer.ty
        dtype = np_dtype(str(ty.dtype))
        count = 1
        for dim in ty.shape:
            if not isinstance(dim, tirx.IntImm):
                raise MalformedKernelError(
                    f"racecheck: buffer '{buffer.name}' has the non-constant shape "
                    f"{list(ty.shape)} {where(self.name)}; allocate it with a constant shape.")
            count *= int(dim.value)
        storage = self.memory.allocate(buffer.name, str(ty.storage_scope), count * dtype.itemsize)
        if storage.is_shared:
            self.shadows[storage.sid] = Shadow(storage.nbytes, self.n)
            self.windows.append((self._next_window, storage.sid))
            size = -(-storage.nbytes // _SHARED_WINDOW_ALIGN) * _SHARED_WINDOW_ALIGN
            self._next_window += max(size, _SHARED_WINDOW_ALIGN)
        self.env[buffer] = np.full(self.n, storage.base(), dtype=np.int64)

    # ------------------------------------------------------------------ addresses
    def resolve(self, pointer: np.ndarray, node: Any) -> tuple[Storage, np.ndarray]:
        """The storage and byte offsets of pointer values (generic or shared-window)."""
        pointer = np.atleast_1d(np.asarray(pointer, dtype=np.int64))
        sid = pointer >> OFFSET_BITS
        if (sid == 0).all() and self.windows:
            bases = np.asarray([w[0] for w in self.windows])
            slot = np.searchsorted(bases, pointer, side="right") - 1
            if (slot >= 0).all() and np.unique(slot).size == 1:
                base, real = self.windows[int(slot[0])]
                return self.memory.storages[real], pointer - base
        if np.unique(sid).size != 1 or self.memory.storage_of(int(sid[0])) is None:
            raise MalformedKernelError(
                f"racecheck: a pointer operand does not point into one allocation "
                f"{where(self.name, node)}; racecheck follows pointers made by address_of, "
                "buffer.data, tvm_access_ptr and cvta only.")
        storage = self.memory.storages[int(sid[0])]
        return storage, pointer - storage.base()

    def shared_window(self, storage: Storage) -> int:
        """The 32-bit shared-window address of byte 0 of a shared storage (for cvta)."""
        for base, sid in self.windows:
            if sid == storage.sid:
                return base
        return 0

    def element(self, buffer: Any, indices: Any, threads: np.ndarray) -> Access:
        """Resolve ``buffer[indices]`` for ``threads``."""
        ty = buffer.ty
        dtype = np_dtype(str(ty.dtype).split("x")[0]) if "x" in str(ty.dtype) else np_dtype(
            str(ty.dtype))
        flat: Any = 0
        idx = [self.ev(i, threads) for i in indices]
        if len(ty.strides):
            for value, stride in zip(idx, ty.strides, strict=True):
                a, b = pair(value, self.ev(stride, threads))
                flat = flat + a * b
        else:
            for value, dim in zip(idx, ty.shape, strict=True):
                a, b = pair(np.asarray(flat), np.asarray(value))
                flat = a * int(dim) + b if isinstance(dim, tirx.IntImm) else \
                    a * self.ev(dim, threads) + b
        offset = self.ev(ty.elem_offset, threads)
        flat, offset = pair(np.asarray(flat), np.asarray(offset))
        elems = np.broadcast_to(flat + offset, threads.shape + np.asarray(flat).shape[1:])
        if buffer not in self.env:
            raise MalformedKernelError(
                f"racecheck: buffer '{buffer.name}' is used before it is allocated "
                f"{where(self.name)}.")
        storage, base = self.resolve(self.env[buffer][threads], buffer)
        base = base.reshape(base.shape + (1,) * (elems.ndim - 1))
        return Access(storage, base + elems.astype(np.int64) * dtype.itemsize, dtype)

    # ------------------------------------------------------------------ memory traffic
    def in_bounds(self, access: Access, threads: np.ndarray, width: int, stmt: Any) -> np.ndarray:
        """Mask of in-bounds accesses; reports the others."""
        offs = access.offsets
        ok = (offs >= 0) & (offs + width <= access.storage.nbytes)
        if not ok.all():
            bad = ~ok if ok.ndim == 1 else ~ok.all(axis=1)
            where_bad = threads[bad] if bad.shape == threads.shape else threads
            self._report(("oob", self.instr_index), Finding(
                "out-of-bounds",
                f"access to '{access.storage.name}' outside its {access.storage.nbytes} bytes",
                statements=(statement_text(stmt),), buffer=access.storage.name,
                byte_range=(int(offs[~ok].min()), int(offs[~ok].max())),
                threads=(_thread_list(where_bad.tolist()),), count=int((~ok).sum()),
                schedule=self.schedule.name))
        return ok

    def load(self, access: Access, threads: np.ndarray, stmt: Any) -> np.ndarray:
        """Read ``access`` for ``threads`` (checking races and initialisation)."""
        ok = self.in_bounds(access, threads, access.dtype.itemsize, stmt)
        offsets = np.where(ok, access.offsets, 0)
        if access.storage.is_shared:
            self.touch(access.storage, threads, offsets, access.dtype.itemsize, False, ok=ok)
        values = self.memory.load(access.storage, threads, offsets, access.dtype)
        return np.where(ok, canonical(values, str(access.dtype)), 0)

    def store(self, access: Access, threads: np.ndarray, value: Any, stmt: Any) -> None:
        """Write ``value`` to ``access`` for ``threads``."""
        ok = self.in_bounds(access, threads, access.dtype.itemsize, stmt)
        value = np.broadcast_to(np.asarray(value), access.offsets.shape)
        if not ok.all():
            keep = ok if ok.ndim == 1 else ok.all(axis=1)
            threads, value = threads[keep], value[keep]
            access = Access(access.storage, access.offsets[keep], access.dtype)
        if access.storage.is_shared:
            self.touch(access.storage, threads, access.offsets, access.dtype.itemsize, True)
        self.memory.store(access.storage, threads, access.offsets, value, access.dtype)

    def touch(self, storage: Storage, threads: np.ndarray, offsets: np.ndarray, width: int,
              write: bool, actors: np.ndarray | None = None, proxy: int = GENERIC,
              atomic: bool = False, ok: np.ndarray | None = None) -> None:
        """Check and record that ``threads`` (or ``actors``) access ``width`` bytes at each
        of ``offsets`` of a shared storage."""
        offs = offsets.reshape(offsets.shape[0], -1)
        who = threads if actors is None else actors
        bytes_ = (offs[:, :, None] + np.arange(width)).reshape(offs.shape[0], -1)
        owners = np.broadcast_to(np.asarray(who)[:, None], bytes_.shape)
        if ok is not None:
            keep = np.broadcast_to(ok.reshape(ok.shape[0], -1)[:, :, None],
                                   (*offs.shape, width)).reshape(bytes_.shape)
            bytes_, owners = bytes_[keep], owners[keep]
        bytes_, owners = bytes_.ravel(), owners.ravel().astype(np.int64)
        if not write and storage.written is not None:
            fresh = ~storage.written[bytes_]
            if fresh.any():
                self._report(("uninit", self.instr_index, storage.sid), Finding(
                    "uninitialised", f"read of shared '{storage.name}' bytes nothing wrote",
                    statements=(statement_text(self.program.instrs[self.instr_index].stmt),),
                    buffer=storage.name,
                    byte_range=(int(bytes_[fresh].min()), int(bytes_[fresh].max())),
                    threads=(self.actors.describe(int(owners[fresh][0])),),
                    count=int(fresh.sum()), schedule=self.schedule.name))
        if write and storage.written is not None:
            storage.written[bytes_] = True
        conflicts = self.shadows[storage.sid].access(
            self.clocks, bytes_, owners, self.instr_index, write, proxy, atomic)
        for conflict in conflicts:
            self._report_conflict(storage, conflict)

    def _report_conflict(self, storage: Storage, c: Conflicts) -> None:
        for prior in np.unique(c.prior_instr).tolist():
            sel = c.prior_instr == prior
            key = (c.kind, prior, self.instr_index, storage.sid)
            old = self.findings.get(key)
            lo, hi = int(c.byte[sel].min()), int(c.byte[sel].max())
            if old is not None:
                old.count += int(sel.sum())
                a, b = old.byte_range or (lo, hi)
                old.byte_range = (min(a, lo), max(b, hi))
                continue
            first, then = int(c.prior_actor[sel][0]), int(c.actor[sel][0])
            what = {"RAW": "read after an unordered write", "WAR": "write after an unordered "
                    "read", "WAW": "write after an unordered write",
                    "PROXY": "async-proxy access to a generic-proxy write with no "
                    "fence.proxy.async between them"}[c.kind]
            self.findings[key] = Finding(
                c.kind, f"{what} on shared '{storage.name}'",
                statements=(statement_text(self.program.instrs[prior].stmt),
                            statement_text(self.program.instrs[self.instr_index].stmt)),
                buffer=storage.name, byte_range=(lo, hi),
                threads=(self.actors.describe(first), self.actors.describe(then)),
                count=int(sel.sum()), schedule=self.schedule.name)

    def _report(self, key: tuple, finding: Finding) -> None:
        if key not in self.findings:
            self.findings[key] = finding
        else:
            self.findings[key].count += finding.count

    # ------------------------------------------------------------------ expressions
    def ev(self, node: Any, threads: np.ndarray) -> Any:
        """Evaluate ``node`` for ``threads``."""
        if isinstance(node, (int, np.integer)):
            return np.int64(node)
        kind = type(node).__name__
        if kind == "IntImm":
            if str(node.ty) == "bool":
                return np.bool_(node.value)
            return np.int64(node.value)
        if kind == "FloatImm":
            return np.float64(node.value)
        if kind == "Var":
            value = self.env.get(node)
            if value is None:
                raise MalformedKernelError(
                    f"racecheck: variable '{node.name}' has no value {where(self.name)}; pass "
                    "it in args= when it is a kernel parameter.")
            return value[threads]
        op = BINARY.get(kind)
        if op is not None:
            a, b = pair(self.ev(node.a, threads), self.ev(node.b, threads))
            return op(a, b)
        if kind == "TensorLoad":
            access = self.element(node.source, node.indices, threads)
            return self.load(access, threads, self.program.instrs[self.instr_index].stmt)
        if kind == "Cast":
            return cast_to(self.ev(node.value, threads), str(node.ty))
        if kind == "Not":
            return np.logical_not(self.ev(node.a, threads))
        if kind == "Select":
            cond, yes = pair(self.ev(node.condition, threads), self.ev(node.true_value, threads))
            cond, no = pair(cond, self.ev(node.false_value, threads))
            return np.where(cond, yes, no)
        if kind == "Ramp":
            base = np.asarray(self.ev(node.base, threads))
            stride = self.ev(node.stride, threads)
            lanes = np.arange(int(node.lanes))
            base = np.broadcast_to(base, threads.shape)
            return base[:, None] + np.asarray(stride).reshape(-1, 1) * lanes
        if kind == "Broadcast":
            value = np.broadcast_to(np.asarray(self.ev(node.value, threads)), threads.shape)
            return np.repeat(value[:, None], int(node.lanes), axis=1)
        if kind == "Let":
            self.set_var(node.var, threads, np.broadcast_to(self.ev(node.value, threads),
                                                            threads.shape))
            return self.ev(node.body, threads)
        if kind == "Call":
            return self.call(node, threads)
        if kind == "StringImm":
            return node.value
        raise unsupported(self.name, node, f"a {kind} expression")

    def call(self, call: ir.expr.Call, threads: np.ndarray) -> Any:
        """Evaluate or execute a call for ``threads``."""
        name = call.op.name if isinstance(call.op, ir.Op) else str(call.op)
        if name in CALL_BINARY:
            a, b = pair(self.ev(call.args[0], threads), self.ev(call.args[1], threads))
            return BINARY[CALL_BINARY[name]](a, b)
        if name in CALL_UNARY:
            return CALL_UNARY[name](self.ev(call.args[0], threads))
        return self.semantics.dispatch(self, call, name, threads)

    # ------------------------------------------------------------------ helpers for ops
    def _wgmma_unit_of(self, threads: np.ndarray) -> np.ndarray:
        return self.actors.wgmma(np.asarray(threads) // 128)

    def current_stmt(self) -> Any:
        """The statement being executed (for error messages)."""
        return self.program.instrs[self.instr_index].stmt


def _thread_list(threads: list[int]) -> str:
    if len(threads) <= 6:
        return "threads " + ", ".join(map(str, threads))
    return f"threads {threads[0]}, {threads[1]}, ... {threads[-1]} ({len(threads)})"
