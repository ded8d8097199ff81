"""An instruction-level executor for the AMDGCN subset tilewave's backend emits — a test
oracle, independent of instruction selection.

It reads the final *assembly text* (not the kernel IR), sets up the registers the way the
HSA ABI does from the ``.amdhsa_*`` directives (``s[0:1]`` kernarg pointer, then enabled
workgroup ids; ``v0`` packed workitem ids), and runs each workgroup's waves with per-lane
VGPRs (64 lanes), SGPRs, EXEC/SCC, LDS and byte-addressed buffer memory behind buffer
resource descriptors (out-of-range loads read 0, stores are dropped).

Memory operations are *asynchronous* as on the hardware, per wave: an LDS or vector-memory
operation is queued on its counter when it issues and *takes effect* only when an
``s_waitcnt`` of the issuing wave retires it (vmcnt in order; lgkmcnt in order for LDS, but
a pending scalar load makes only ``lgkmcnt(0)`` trustworthy), or when the wave ends. A load
samples memory and fills its registers then; a store (``ds_write``, ``buffer_store``, LDS
DMA) changes memory then. ``s_barrier`` does not wait for anything: a wave that reaches it
with LDS operations still queued lets the other waves run past the barrier before those
operations land, so a kernel missing its ``s_waitcnt lgkmcnt(0)`` / ``vmcnt(0)`` before the
barrier computes a different result with more than one wave. Touching a register that an
unretired load writes raises :class:`SimulationError`.

Limits (also in docs/amdgcn.md): no timing and no hazard modelling (``s_nop`` is a no-op),
waves of a workgroup run one after another between barriers (a schedule the hardware may
pick, not every schedule), wave64 only, the opcodes listed in ``_VALU``/``_SALU``/the memory
handlers only, no scratch, no atomics, f16 arithmetic rounded through float32.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

LANES = 64


class SimulationError(Exception):
    """The program did something the hardware would not do predictably (or the simulator
    does not know the instruction)."""


@dataclass
class Inst:
    opcode: str
    operands: list[str]
    mods: dict[str, object]
    line: str


@dataclass
class Kernel:
    name: str
    code: list[Inst]
    labels: dict[str, int]
    directives: dict[str, int]


_MOD_RE = re.compile(r"\b(offen|lds|offset:(-?\d+)|vmcnt\((\d+)\)|lgkmcnt\((\d+)\)"
                     r"|offset([01]):(\d+))")
_SEL_RE = re.compile(r"\b(op_sel|op_sel_hi|neg_lo|neg_hi):\[([01,]+)\]")


def parse(asm: str) -> Kernel:
    """Parse the kernel body and the ``.amdhsa_kernel`` directives of ``asm``."""
    name = ""
    code: list[Inst] = []
    labels: dict[str, int] = {}
    directives: dict[str, int] = {}
    in_body = in_kd = False
    for raw in asm.splitlines():
        line = raw.split(";")[0].strip()
        if not line:
            continue
        if line.startswith(".amdhsa_kernel"):
            in_kd = True
            continue
        if line.startswith(".end_amdhsa_kernel"):
            in_kd = False
            continue
        if in_kd:
            key, value = line.split()
            directives[key] = int(value, 0)
            continue
        if line.startswith(".globl"):
            name = line.split()[1]
            continue
        if line == f"{name}:" and name:
            in_body = True
            continue
        if not in_body:
            continue
        if line.startswith(".size"):
            in_body = False
            continue
        if line.endswith(":"):
            labels[line[:-1]] = len(code)
            continue
        opcode, _, rest = line.partition(" ")
        mods: dict[str, object] = {k: [int(b) for b in v.split(",")]
                                   for k, v in _SEL_RE.findall(rest)}
        rest = _SEL_RE.sub("", rest)
        for m in _MOD_RE.finditer(rest):
            tok = m.group(1)
            if tok.startswith("offset:"):
                mods["offset"] = int(m.group(2))
            elif tok.startswith("vmcnt"):
                mods["vmcnt"] = int(m.group(3))
            elif tok.startswith("lgkmcnt"):
                mods["lgkmcnt"] = int(m.group(4))
            elif tok.startswith("offset"):  # ds_read2/ds_write2: offset0:N offset1:M
                mods[f"offset{m.group(5)}"] = int(m.group(6))
            else:
                mods[tok] = True
        rest = _MOD_RE.sub("", rest).strip()
        operands = [o.strip() for o in rest.split(",") if o.strip()]
        code.append(Inst(opcode, operands, mods, line))
    return Kernel(name, code, labels, directives)


_REG_RE = re.compile(r"^([vs])(?:(\d+)|\[(\d+):(\d+)\])$")
_INLINE_F = {"0.5": 0.5, "1.0": 1.0, "2.0": 2.0, "4.0": 4.0, "-0.5": -0.5, "-1.0": -1.0,
             "-2.0": -2.0, "-4.0": -4.0}


def _reg(text: str) -> tuple[str, int, int] | None:
    m = _REG_RE.match(text)
    if not m:
        return None
    if m.group(2) is not None:
        return m.group(1), int(m.group(2)), 1
    lo, hi = int(m.group(3)), int(m.group(4))
    return m.group(1), lo, hi - lo + 1


def _f32_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def _bits_f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.uint32).view(np.float32)


def _bits_f16(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, dtype=np.uint32) & 0xFFFF).astype(np.uint16).view(np.float16)


def _f16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float16).view(np.uint16).astype(np.uint32)


@dataclass
class Pending:
    counter: str
    smem: bool
    units: set[tuple[str, int]]
    apply: Callable[[], None]
    what: str


@dataclass
class Wave:
    index: int
    sgpr: np.ndarray = field(default_factory=lambda: np.zeros(112, dtype=np.uint32))
    vgpr: np.ndarray = field(default_factory=lambda: np.zeros((256, LANES), dtype=np.uint32))
    exec: int = (1 << LANES) - 1
    scc: int = 0
    vcc: int = 0
    m0: int = 0
    pc: int = 0
    done: bool = False
    pending: list[Pending] = field(default_factory=list)

    def exec_mask(self) -> np.ndarray:
        return np.array([(self.exec >> i) & 1 for i in range(LANES)], dtype=bool)


class Memory:
    """Byte-addressed global memory made of separately allocated buffers."""

    def __init__(self) -> None:
        self.regions: list[tuple[int, np.ndarray]] = []
        self.next = 0x10000

    def add(self, data: bytes | np.ndarray) -> int:
        arr = np.frombuffer(bytes(data), dtype=np.uint8).copy()
        base = self.next
        self.regions.append((base, arr))
        self.next = (base + len(arr) + 0xFFFF) // 0x10000 * 0x10000 + 0x10000
        return base

    def region(self, addr: int, size: int) -> tuple[np.ndarray, int]:
        for base, arr in self.regions:
            if base <= addr and addr + size <= base + len(arr):
                return arr, addr - base
        raise SimulationError(f"access to unmapped memory at {addr:#x} (+{size})")

    def read(self, addr: int, size: int) -> bytes:
        arr, off = self.region(addr, size)
        return arr[off:off + size].tobytes()

    def write(self, addr: int, data: bytes) -> None:
        arr, off = self.region(addr, len(data))
        arr[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)


class Simulator:
    """Runs one kernel over a grid of workgroups."""

    def __init__(self, asm: str) -> None:
        self.kernel = parse(asm)
        self.memory = Memory()
        self.lds = np.zeros(0, dtype=np.uint8)
        #: instructions executed, by opcode, summed over every wave run (branches taken or
        #: not, s_waitcnt, s_nop, s_barrier and s_endpgm included)
        self.executed: Counter[str] = Counter()
        self.waves_run = 0

    # -- operands ------------------------------------------------------------------------
    def sval(self, w: Wave, text: str, wide: bool = False) -> int:
        if text == "exec":
            return w.exec
        if text == "vcc":
            return w.vcc
        if text == "m0":
            return w.m0
        r = _reg(text)
        if r is not None:
            cls, idx, width = r
            if cls != "s":
                raise SimulationError(f"scalar operand {text} is a VGPR")
            self.check_pending(w, [("s", i) for i in range(idx, idx + width)])
            if wide or width == 2:
                return int(w.sgpr[idx]) | (int(w.sgpr[idx + 1]) << 32)
            return int(w.sgpr[idx])
        if text in _INLINE_F:
            return struct.unpack("<I", struct.pack("<f", _INLINE_F[text]))[0]
        value = int(text, 0)
        return value & ((1 << 64) - 1 if wide else 0xFFFFFFFF)

    def vsrc(self, w: Wave, text: str, kind: str = "b32") -> np.ndarray:
        """A source operand as 64 uint32 lanes (f16 values in the low 16 bits); ``-vN`` is
        the VOP3 negation modifier (the sign bit of the ``kind`` flipped)."""
        if text.startswith("-") and _reg(text[1:]) is not None:
            return self.vsrc(w, text[1:], kind) ^ np.uint32(0x8000 if kind == "f16"
                                                            else 0x80000000)
        r = _reg(text)
        if r is not None and r[0] == "v":
            self.check_pending(w, [("v", r[1])])
            return w.vgpr[r[1]].copy()
        if text in _INLINE_F:
            value = _INLINE_F[text]
            bits = (struct.unpack("<H", struct.pack("<e", value))[0] if kind == "f16"
                    else struct.unpack("<I", struct.pack("<f", value))[0])
            return np.full(LANES, bits, dtype=np.uint32)
        return np.full(LANES, self.sval(w, text), dtype=np.uint32)

    def vdst(self, w: Wave, text: str, values: np.ndarray) -> None:
        r = _reg(text)
        if r is None or r[0] != "v":
            raise SimulationError(f"VALU destination {text} is not a VGPR")
        self.check_pending(w, [("v", r[1])])
        mask = w.exec_mask()
        w.vgpr[r[1]][mask] = np.asarray(values, dtype=np.uint32)[mask]

    def sdst(self, w: Wave, text: str, value: int) -> None:
        if text == "exec":
            w.exec = value & ((1 << 64) - 1)
            return
        if text == "vcc":
            w.vcc = value & ((1 << 64) - 1)
            return
        if text == "m0":
            w.m0 = value & 0xFFFFFFFF
            return
        r = _reg(text)
        if r is None or r[0] != "s":
            raise SimulationError(f"SALU destination {text} is not an SGPR")
        self.check_pending(w, [("s", i) for i in range(r[1], r[1] + r[2])])
        for i in range(r[2]):
            w.sgpr[r[1] + i] = (value >> (32 * i)) & 0xFFFFFFFF

    def pair(self, w: Wave, text: str) -> np.ndarray:
        """A 64-bit VGPR pair (or SGPR pair / constant, broadcast) as 64 uint64 lanes."""
        r = _reg(text)
        if r is not None and r[0] == "s":
            return np.full(LANES, self.sval(w, text, wide=True), dtype=np.uint64)
        if r is None or r[2] != 2:
            value = self.sval(w, text, wide=True)
            return np.full(LANES, value, dtype=np.uint64)
        lo, hi = self.vsrc(w, f"v{r[1]}"), self.vsrc(w, f"v{r[1] + 1}")
        return lo.astype(np.uint64) | (hi.astype(np.uint64) << np.uint64(32))

    def set_pair(self, w: Wave, text: str, value: np.ndarray) -> None:
        r = _reg(text)
        assert r is not None and r[2] == 2
        value = np.asarray(value, dtype=np.uint64)
        self.vdst(w, f"v{r[1]}", (value & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        self.vdst(w, f"v{r[1] + 1}", (value >> np.uint64(32)).astype(np.uint32))

    def global_addresses(self, w: Wave, vaddr: str, saddr: str, offset: int) -> np.ndarray:
        """Per-lane byte addresses of a ``global_*`` access: ``v[a:b], off`` (64-bit
        addresses) or ``vN, s[a:b]`` (SGPR base + zero-extended 32-bit VGPR offset), plus
        the signed immediate offset."""
        if saddr == "off":
            return self.pair(w, vaddr).astype(np.int64) + offset
        base = self.sval(w, saddr, wide=True)
        return self.vsrc(w, vaddr).astype(np.int64) + base + offset

    def check_pending(self, w: Wave, units: list[tuple[str, int]]) -> None:
        for p in w.pending:
            hit = p.units.intersection(units)
            if hit:
                reg = "".join(f"{c}{i}" for c, i in sorted(hit)[:1])
                raise SimulationError(
                    f"wave {w.index} pc {w.pc} `{self.kernel.code[w.pc].line}` touches {reg} "
                    f"while `{p.what}` that writes it is still outstanding (missing s_waitcnt)"
                )

    # -- execution -----------------------------------------------------------------------
    def run(self, args: list[object], grid: tuple[int, int, int]) -> None:
        """Run the kernel with ``args`` (NumPy arrays are copied to and back from device
        memory, Python ints/floats are by-value arguments) over ``grid`` workgroups."""
        d = self.kernel.directives
        arrays: list[tuple[np.ndarray, int]] = []
        kernarg = bytearray(max(d.get(".amdhsa_kernarg_size", 0), 8))
        offset = 0
        for arg in args:
            if isinstance(arg, np.ndarray):
                offset = (offset + 7) // 8 * 8
                base = self.memory.add(arg.tobytes())
                arrays.append((arg, base))
                kernarg[offset:offset + 8] = struct.pack("<Q", base)
                offset += 8
            else:
                offset = (offset + 3) // 4 * 4
                fmt = "<i" if isinstance(arg, int) else "<f"
                kernarg[offset:offset + 4] = struct.pack(fmt, arg)
                offset += 4
        kernarg_addr = self.memory.add(bytes(kernarg))
        wg = self.workgroup_size()
        for gz in range(grid[2]):
            for gy in range(grid[1]):
                for gx in range(grid[0]):
                    self.run_workgroup(kernarg_addr, (gx, gy, gz), wg)
        for arr, base in arrays:
            data = self.memory.read(base, arr.nbytes)
            arr[...] = np.frombuffer(data, dtype=arr.dtype).reshape(arr.shape)

    def workgroup_size(self) -> tuple[int, int, int]:
        size = getattr(self, "wg_size", None)
        if size is None:
            raise SimulationError("set Simulator.wg_size = (x, y, z) before run()")
        return size

    def run_workgroup(self, kernarg: int, ids: tuple[int, int, int],
                      wg: tuple[int, int, int]) -> None:
        d = self.kernel.directives
        self.lds = np.zeros(d.get(".amdhsa_group_segment_fixed_size", 0) + 16, dtype=np.uint8)
        threads = [(x, y, z) for z in range(wg[2]) for y in range(wg[1]) for x in range(wg[0])]
        waves = []
        for wi in range(0, len(threads), LANES):
            w = Wave(wi // LANES)
            chunk = threads[wi:wi + LANES]
            w.exec = (1 << len(chunk)) - 1
            for lane, (x, y, z) in enumerate(chunk):
                w.vgpr[0][lane] = x | (y << 10) | (z << 20)
            w.sgpr[0] = kernarg & 0xFFFFFFFF
            w.sgpr[1] = kernarg >> 32
            s = 2
            for axis, gid in zip("xyz", ids, strict=True):
                if d.get(f".amdhsa_system_sgpr_workgroup_id_{axis}", 0):
                    w.sgpr[s] = gid
                    s += 1
            waves.append(w)
        self.waves_run += len(waves)
        while not all(w.done for w in waves):
            at_barrier = []
            for w in waves:
                if not w.done:
                    self.run_wave(w)
                    if not w.done:
                        at_barrier.append(w)
            if at_barrier and len(at_barrier) != len(waves):
                raise SimulationError("some waves ended while others wait at s_barrier")
            for w in at_barrier:
                w.pc += 1

    def run_wave(self, w: Wave, limit: int = 2_000_000) -> None:
        """Run ``w`` until it ends or reaches ``s_barrier``."""
        code = self.kernel.code
        for _ in range(limit):
            if w.pc >= len(code):
                raise SimulationError("ran past the end of the kernel without s_endpgm")
            ins = code[w.pc]
            op = ins.opcode
            self.executed[op] += 1
            if op == "s_endpgm":
                self.drain(w)  # the hardware completes a wave's outstanding stores
                w.done = True
                return
            if op == "s_barrier":
                # the barrier orders only what has completed: queued operations stay queued
                return
            jump = self.step(w, ins)
            w.pc = self.kernel.labels[jump] if jump else w.pc + 1
        raise SimulationError("instruction limit reached (infinite loop?)")

    def step(self, w: Wave, ins: Inst) -> str | None:
        op = ins.opcode
        if op in _BRANCH:
            return ins.operands[0] if _BRANCH[op](w) else None
        if op == "s_nop":
            return None
        if op == "s_waitcnt":
            self.waitcnt(w, ins.mods)
            return None
        handler = _HANDLERS.get(op)
        if handler is not None:
            handler(self, w, ins)
            return None
        if op in _SALU or op.startswith("s_cmp_") or op == "s_and_saveexec_b64":
            self.salu(w, ins)
            return None
        if op in _VALU or op.startswith("v_cmp_") or op in ("v_readfirstlane_b32",
                                                            "v_cndmask_b32_e64"):
            self.valu(w, ins)
            return None
        raise SimulationError(f"unsupported instruction `{ins.line}`")

    def waitcnt(self, w: Wave, mods: dict[str, object]) -> None:
        for counter in ("vm", "lgkm"):
            n = mods.get(f"{counter}cnt")
            if n is None:
                continue
            mine = [p for p in w.pending if p.counter == counter]
            if counter == "lgkm" and n > 0 and any(p.smem for p in mine):
                continue  # out-of-order scalar loads: nothing is known to be complete
            while len(mine) > int(n):
                p = mine.pop(0)
                w.pending.remove(p)
                p.apply()

    def drain(self, w: Wave) -> None:
        """Retire every queued operation of ``w`` in issue order."""
        while w.pending:
            w.pending.pop(0).apply()

    # -- scalar ALU ----------------------------------------------------------------------
    def salu(self, w: Wave, ins: Inst) -> None:
        op, o = ins.opcode, ins.operands
        if op.startswith("s_cmp_"):
            _, _, cond, ty = op.split("_")
            a, b = self.sval(w, o[0]), self.sval(w, o[1])
            if ty == "i32":
                a, b = _signed(a), _signed(b)
            w.scc = int(_CMPS[cond](a, b))
            return
        if op == "s_and_saveexec_b64":
            old = w.exec
            self.sdst(w, o[0], old)
            w.exec = old & self.sval(w, o[1], wide=True)
            w.scc = int(w.exec != 0)
            return
        fn, wide = _SALU[op]
        srcs = [self.sval(w, t, wide) for t in o[1:]]
        value = fn(w, *srcs)
        if op != "s_mov_b32" and op != "s_mov_b64" and op != "s_cselect_b32":
            w.scc = int(value != 0) if op not in ("s_add_u32", "s_sub_u32", "s_mul_i32",
                                                  "s_mul_hi_u32", "s_mul_hi_i32") \
                else w.scc
        self.sdst(w, o[0], value & ((1 << 64) - 1 if wide else 0xFFFFFFFF))

    # -- vector ALU ----------------------------------------------------------------------
    def valu(self, w: Wave, ins: Inst) -> None:
        op, o = ins.opcode, ins.operands
        if op == "v_readfirstlane_b32":
            src = self.vsrc(w, o[1])
            lanes = np.nonzero(w.exec_mask())[0]
            self.sdst(w, o[0], int(src[lanes[0]]) if len(lanes) else int(src[0]))
            return
        if op.startswith("v_cmp_"):
            _, _, cond, ty, _ = op.split("_")
            a, b = self.vsrc(w, o[1], ty), self.vsrc(w, o[2], ty)
            av, bv = _typed(a, ty), _typed(b, ty)
            if cond == "class":  # bit k of b: sNaN, qNaN, -inf, -norm, -denorm, -0, +0, ...
                result = ((b >> _fp_class(av).astype(np.uint32)) & 1).astype(bool)
            else:
                with np.errstate(invalid="ignore"):
                    result = _CMPS[cond](av, bv)
            result = result & w.exec_mask()
            self.sdst(w, o[0], sum(1 << i for i in range(LANES) if result[i]))
            return
        if op == "v_cndmask_b32_e64":
            f, t = self.vsrc(w, o[1]), self.vsrc(w, o[2])
            mask = self.sval(w, o[3], wide=True)
            sel = np.array([(mask >> i) & 1 for i in range(LANES)], dtype=bool)
            self.vdst(w, o[0], np.where(sel, t, f))
            return
        kind, fn = _VALU[op]
        srcs = [self.vsrc(w, t, kind) for t in o[1:]]
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are what the ops give
            self.vdst(w, o[0], fn(*srcs))

    # -- memory --------------------------------------------------------------------------
    def issue(self, w: Wave, counter: str, units: set[tuple[str, int]],
              apply: Callable[[], None], what: str, smem: bool = False) -> None:
        self.check_pending(w, sorted(units))
        w.pending.append(Pending(counter, smem, units, apply, what))


_CMPS: dict[str, Callable] = {
    "eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "ngt": lambda a, b: ~(a > b), "nlt": lambda a, b: ~(a < b),  # true on NaN
}


def _fp_class(x: np.ndarray) -> np.ndarray:
    """v_cmp_class's class index of each float: 0 sNaN (not distinguished: 1), 1 qNaN,
    2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf."""
    tiny = np.finfo(x.dtype).tiny
    neg = np.signbit(x)
    mag = np.abs(x)
    cls = np.where(mag == 0, 6, np.where(mag < tiny, 7, np.where(np.isinf(mag), 9, 8)))
    cls = np.where(neg, 11 - cls, cls)
    return np.where(np.isnan(x), 1, cls)


def _signed(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _typed(x: np.ndarray, ty: str) -> np.ndarray:
    if ty == "i32":
        return x.view(np.int32)
    if ty == "f32":
        return _bits_f32(x)
    if ty == "f16":
        return _bits_f16(x)
    return x


_BRANCH: dict[str, Callable[[Wave], bool]] = {
    "s_branch": lambda w: True,
    "s_cbranch_scc0": lambda w: w.scc == 0,
    "s_cbranch_scc1": lambda w: w.scc == 1,
    "s_cbranch_execz": lambda w: w.exec == 0,
}

_M32 = 0xFFFFFFFF
_SALU: dict[str, tuple[Callable, bool]] = {
    "s_mov_b32": (lambda w, a: a, False),
    "s_mov_b64": (lambda w, a: a, True),
    "s_add_u32": (lambda w, a, b: a + b, False),
    "s_sub_u32": (lambda w, a, b: a - b, False),
    "s_mul_i32": (lambda w, a, b: _signed(a) * _signed(b), False),
    "s_lshl_b32": (lambda w, a, b: a << (b & 31), False),
    "s_lshr_b32": (lambda w, a, b: a >> (b & 31), False),
    "s_ashr_i32": (lambda w, a, b: _signed(a) >> (b & 31), False),
    "s_and_b32": (lambda w, a, b: a & b, False),
    "s_or_b32": (lambda w, a, b: a | b, False),
    "s_xor_b32": (lambda w, a, b: a ^ b, False),
    "s_min_i32": (lambda w, a, b: min(_signed(a), _signed(b)), False),
    "s_max_i32": (lambda w, a, b: max(_signed(a), _signed(b)), False),
    "s_and_b64": (lambda w, a, b: a & b, True),
    "s_or_b64": (lambda w, a, b: a | b, True),
    "s_andn2_b64": (lambda w, a, b: a & ~b, True),
    "s_cselect_b32": (lambda w, a, b: a if w.scc else b, False),
    "s_mul_hi_u32": (lambda w, a, b: (a * b) >> 32, False),
    "s_mul_hi_i32": (lambda w, a, b: (_signed(a) * _signed(b)) >> 32, False),
    "s_not_b32": (lambda w, a: ~a, False),
}


def _u(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint64)


def _i(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32).astype(np.int64)


def _w(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x).astype(np.int64) & _M32).astype(np.uint32)


def _f32op(fn: Callable) -> tuple[str, Callable]:
    return "f32", lambda *s: _f32_bits(fn(*[_bits_f32(x) for x in s]))


def _f16op(fn: Callable) -> tuple[str, Callable]:
    return "f16", lambda *s: _f16_bits(
        fn(*[_bits_f16(x).astype(np.float32) for x in s]).astype(np.float16))


def _fma(a, b, c):
    # a fused multiply-add rounds once: compute in float64 and round to the result type
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(a.dtype)


_VALU: dict[str, tuple[str, Callable]] = {
    "v_mov_b32": ("b32", lambda a: a),
    "v_add_u32": ("b32", lambda a, b: _w(_u(a) + _u(b))),
    "v_sub_u32": ("b32", lambda a, b: _w(_i(a) - _i(b))),
    "v_subrev_u32": ("b32", lambda a, b: _w(_i(b) - _i(a))),
    "v_mul_lo_u32": ("b32", lambda a, b: _w(_u(a) * _u(b))),
    "v_and_b32": ("b32", lambda a, b: a & b),
    "v_or_b32": ("b32", lambda a, b: a | b),
    "v_xor_b32": ("b32", lambda a, b: a ^ b),
    "v_lshlrev_b32": ("b32", lambda s, a: _w(_u(a) << _u(s & 31))),
    "v_lshrrev_b32": ("b32", lambda s, a: a >> (s & 31)),
    "v_ashrrev_i32": ("b32", lambda s, a: _w(_i(a) >> _i(s & 31))),
    "v_lshl_add_u32": ("b32", lambda a, s, b: _w((_u(a) << _u(s & 31)) + _u(b))),
    "v_lshl_or_b32": ("b32", lambda a, s, b: _w((_u(a) << _u(s & 31)) | _u(b))),
    "v_add3_u32": ("b32", lambda a, b, c: _w(_u(a) + _u(b) + _u(c))),
    "v_or3_b32": ("b32", lambda a, b, c: a | b | c),
    "v_bfe_u32": ("b32", lambda a, o, n: (a >> (o & 31)) & ((1 << (n & 31)) - 1)),
    "v_min_i32": ("b32", lambda a, b: _w(np.minimum(_i(a), _i(b)))),
    "v_mul_u32_u24": ("b32", lambda a, b: _w((_u(a) & 0xFFFFFF) * (_u(b) & 0xFFFFFF))),
    "v_max_i32": ("b32", lambda a, b: _w(np.maximum(_i(a), _i(b)))),
    "v_add_f32": _f32op(lambda a, b: a + b),
    "v_sub_f32": _f32op(lambda a, b: a - b),
    "v_mul_f32": _f32op(lambda a, b: a * b),
    "v_max_f32": _f32op(np.maximum),
    "v_min_f32": _f32op(np.minimum),
    "v_fma_f32": ("f32", lambda a, b, c: _f32_bits(_fma(_bits_f32(a), _bits_f32(b),
                                                         _bits_f32(c)))),
    # VOP2 with a literal K: fmamk d = a * K + b, fmaak d = a * b + K
    "v_fmamk_f32": ("f32", lambda a, k, b: _f32_bits(_fma(_bits_f32(a), _bits_f32(k),
                                                           _bits_f32(b)))),
    "v_fmaak_f32": ("f32", lambda a, b, k: _f32_bits(_fma(_bits_f32(a), _bits_f32(b),
                                                           _bits_f32(k)))),
    "v_add_f16": _f16op(lambda a, b: a + b),
    "v_sub_f16": _f16op(lambda a, b: a - b),
    "v_mul_f16": _f16op(lambda a, b: a * b),
    "v_max_f16": _f16op(np.maximum),
    "v_min_f16": _f16op(np.minimum),
    "v_fma_f16": ("f16", lambda a, b, c: _f16_bits(_fma(
        _bits_f16(a).astype(np.float32), _bits_f16(b).astype(np.float32),
        _bits_f16(c).astype(np.float32)).astype(np.float16))),
    "v_cvt_f32_f16": ("f16", lambda a: _f32_bits(_bits_f16(a).astype(np.float32))),
    "v_cvt_f16_f32": ("f32", lambda a: _f16_bits(_bits_f32(a).astype(np.float16))),
    "v_cvt_f32_i32": ("b32", lambda a: _f32_bits(a.view(np.int32).astype(np.float32))),
    "v_cvt_i32_f32": ("f32", lambda a: _bits_f32(a).astype(np.int32).view(np.uint32)),
    "v_cvt_f32_u32": ("b32", lambda a: _f32_bits(a.astype(np.float32))),
    "v_cvt_u32_f32": ("f32", lambda a: np.clip(_bits_f32(a), 0, None).astype(np.uint32)),
    "v_not_b32": ("b32", lambda a: ~a),
    "v_bfe_i32": ("b32", lambda a, o, n: _w((_i(a) << (32 - (o & 31) - (n & 31))
                                              & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
                                             .astype(np.int64) >> (32 - (n & 31)))),
    "v_mul_hi_u32": ("b32", lambda a, b: _w((_u(a) * _u(b)) >> np.uint64(32))),
    "v_mul_hi_i32": ("b32", lambda a, b: _w((_i(a) * _i(b)) >> 32)),
    # transcendentals, correctly rounded here (the hardware's are within 1 ulp)
    "v_rndne_f32": _f32op(np.rint),
    "v_exp_f32": _f32op(lambda a: np.exp2(a.astype(np.float64)).astype(np.float32)),
    "v_log_f32": _f32op(lambda a: np.log2(a.astype(np.float64)).astype(np.float32)),
    "v_sqrt_f32": _f32op(lambda a: np.sqrt(a.astype(np.float64)).astype(np.float32)),
    "v_rsq_f32": _f32op(lambda a: (1 / np.sqrt(a.astype(np.float64))).astype(np.float32)),
    "v_rcp_f32": _f32op(lambda a: (1 / a.astype(np.float64)).astype(np.float32)),
    "v_ldexp_f32": ("b32", lambda a, e: _f32_bits(np.ldexp(_bits_f32(a), e.view(np.int32)))),
    "v_div_fixup_f32": ("f32", lambda q, d, n: _f32_bits(_div_fixup(
        _bits_f32(q), _bits_f32(d), _bits_f32(n)))),
}


def _div_fixup(q: np.ndarray, d: np.ndarray, n: np.ndarray) -> np.ndarray:
    # the IEEE special cases (0, inf, NaN operands); otherwise the quotient as computed
    special = (d == 0) | ~np.isfinite(d) | ~np.isfinite(n) | (n == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(special, n / d, q).astype(np.float32)


def _div_scale(sim: Simulator, w: Wave, ins: Inst) -> None:
    """v_div_scale_f32 D, VCC-like SDST, S0, S1, S2: S0 (the numerator or the denominator)
    scaled by 2^+-64 when the quotient would lose precision. Modelled for operands that need
    no scaling (normal magnitudes in [2^-96, 2^96]): D = S0, SDST = 0; outside that range the
    simulator refuses rather than guess."""
    dst, sdst, s0, s1, s2 = ins.operands
    a, d, n = (_bits_f32(sim.vsrc(w, t, "f32")) for t in (s0, s1, s2))
    mask = w.exec_mask()
    mags = np.abs(np.concatenate([d[mask], n[mask]]))
    finite = mags[np.isfinite(mags) & (mags != 0)]
    if finite.size and (finite.min() < 2.0 ** -96 or finite.max() > 2.0 ** 96):
        raise SimulationError(f"`{ins.line}`: operands needing v_div_scale scaling are not "
                              "modelled")
    sim.vdst(w, dst, _f32_bits(a))
    sim.sdst(w, sdst, 0)


def _div_fmas(sim: Simulator, w: Wave, ins: Inst) -> None:
    """v_div_fmas_f32 D, S0, S1, S2: fma(S0, S1, S2), scaled by 2^64 in lanes where VCC is
    set (the scale v_div_scale applied; always 0 in the modelled range)."""
    dst, *srcs = ins.operands
    a, b, c = (_bits_f32(sim.vsrc(w, t, "f32")) for t in srcs)
    if w.vcc & w.exec:
        raise SimulationError(f"`{ins.line}`: VCC set (scaled division) is not modelled")
    sim.vdst(w, dst, _f32_bits(_fma(a, b, c)))


def _f64_pair(sim: Simulator, w: Wave, text: str) -> np.ndarray:
    """A 64-bit VGPR pair (or an inline constant) as 64 float64 lanes."""
    neg = text.startswith("-") and _reg(text[1:]) is not None
    r = _reg(text[1:] if neg else text)
    if r is None:
        value = np.float64(_INLINE_F[text]) if text in _INLINE_F else np.float64(int(text, 0))
        return np.full(LANES, value)
    if r[0] != "v" or r[2] != 2:
        raise SimulationError(f"64-bit operand {text} is not a VGPR pair")
    sim.check_pending(w, [("v", r[1]), ("v", r[1] + 1)])
    bits = w.vgpr[r[1]].astype(np.uint64) | (w.vgpr[r[1] + 1].astype(np.uint64) << 32)
    value = bits.view(np.float64)
    return -value if neg else value


def _set_f64_pair(sim: Simulator, w: Wave, text: str, value: np.ndarray) -> None:
    r = _reg(text)
    if r is None or r[0] != "v" or r[2] != 2:
        raise SimulationError(f"64-bit destination {text} is not a VGPR pair")
    bits = np.asarray(value, dtype=np.float64).view(np.uint64)
    sim.vdst(w, f"v{r[1]}", (bits & 0xFFFFFFFF).astype(np.uint32))
    sim.vdst(w, f"v{r[1] + 1}", (bits >> np.uint64(32)).astype(np.uint32))


_F64 = {
    "v_add_f64": lambda a, b: a + b, "v_mul_f64": lambda a, b: a * b,
    "v_fma_f64": lambda a, b, c: a * b + c,  # float64 has no wider type: rounded twice
    "v_max_f64": np.maximum, "v_min_f64": np.minimum,
}


def _valu_f64(sim: Simulator, w: Wave, ins: Inst) -> None:
    """The f64 VALU subset and the conversions to and from f64."""
    op, (dst, *srcs) = ins.opcode, ins.operands
    if op in _F64:
        _set_f64_pair(sim, w, dst, _F64[op](*[_f64_pair(sim, w, t) for t in srcs]))
    elif op == "v_cvt_f64_f32":
        _set_f64_pair(sim, w, dst, _bits_f32(sim.vsrc(w, srcs[0], "f32")).astype(np.float64))
    elif op == "v_cvt_f64_i32":
        _set_f64_pair(sim, w, dst, sim.vsrc(w, srcs[0]).view(np.int32).astype(np.float64))
    elif op == "v_cvt_f32_f64":
        sim.vdst(w, dst, _f32_bits(_f64_pair(sim, w, srcs[0]).astype(np.float32)))
    elif op == "v_cvt_i32_f64":
        with np.errstate(invalid="ignore"):
            ints = np.trunc(_f64_pair(sim, w, srcs[0])).astype(np.int32)
        sim.vdst(w, dst, ints.view(np.uint32))
    else:
        raise SimulationError(f"unsupported instruction `{ins.line}`")


# -- memory handlers ---------------------------------------------------------------------
def _s_load(sim: Simulator, w: Wave, ins: Inst) -> None:
    dst = _reg(ins.operands[0])
    assert dst is not None
    base = sim.sval(w, ins.operands[1], wide=True)
    offset = sim.sval(w, ins.operands[2])
    data = sim.memory.read(base + offset, 4 * dst[2])
    words = struct.unpack(f"<{dst[2]}I", data)

    def apply() -> None:
        for i, word in enumerate(words):
            w.sgpr[dst[1] + i] = word

    sim.issue(w, "lgkm", {("s", dst[1] + i) for i in range(dst[2])}, apply, ins.line, smem=True)


_BUF_SIZE = {"dword": 4, "dwordx2": 8, "dwordx4": 16, "ushort": 2, "short": 2, "ubyte": 1,
             "sbyte": 1, "byte": 1}


def _buffer_addresses(sim: Simulator, w: Wave, ins: Inst, vaddr: str, srsrc: str,
                      soffset: str) -> tuple[np.ndarray, int, int]:
    srd = _reg(srsrc)
    if srd is None or srd[2] != 4:
        raise SimulationError(f"bad buffer resource {srsrc}")
    sim.check_pending(w, [("s", srd[1] + i) for i in range(4)])
    base = int(w.sgpr[srd[1]]) | ((int(w.sgpr[srd[1] + 1]) & 0xFFFF) << 32)
    num_records = int(w.sgpr[srd[1] + 2])
    offs = np.zeros(LANES, dtype=np.int64)
    if ins.mods.get("offen"):
        offs += sim.vsrc(w, vaddr).astype(np.int64)
    offs += sim.sval(w, soffset) + int(ins.mods.get("offset", 0))
    return offs, base, num_records


def _queue_lds_dma(
    sim: Simulator, w: Wave, ins: Inst, size: int, read: Callable[[int], bytes]
) -> None:
    """LDS DMA: lane l's ``size`` bytes (``read(l)``) land in LDS at M0 + offset + l * size,
    not in VGPRs; global memory is read and LDS written when vmcnt retires the load."""
    lds_base = w.m0 + int(ins.mods.get("offset", 0))
    lanes = [int(lane) for lane in np.nonzero(w.exec_mask())[0]]
    for lane in lanes:
        addr = lds_base + lane * size
        if addr + size > len(sim.lds):
            raise SimulationError(f"`{ins.line}`: LDS DMA address {addr} out of range")

    def apply() -> None:
        for lane in lanes:
            addr = lds_base + lane * size
            sim.lds[addr:addr + size] = np.frombuffer(read(lane), dtype=np.uint8)

    # several DMAs may be in flight (they retire in order): no pending check against LDS;
    # an LDS access of the wave that touches one of these dwords before the copy retires is
    # an error (other LDS stays usable: the wave's other stages of a pipeline)
    written = {unit for lane in lanes for unit in _lds_dwords(lds_base + lane * size, size)}
    w.pending.append(Pending("vm", False, written, apply, ins.line))


def _lds_dwords(addr: int, size: int) -> list[tuple[str, int]]:
    """The pending-check units of LDS bytes ``[addr, addr + size)``: one per dword."""
    return [("lds", d) for d in range(addr // 4, (addr + size - 1) // 4 + 1)]


def _buffer_load_lds(sim: Simulator, w: Wave, ins: Inst, size: int) -> None:
    """``buffer_load_* ... lds``: an LDS DMA through a buffer descriptor (out-of-range
    lanes read zeros)."""
    vaddr, srsrc, soffset = ins.operands
    offs, base, nrec = _buffer_addresses(sim, w, ins, vaddr, srsrc, soffset)

    def read(lane: int) -> bytes:
        off = int(offs[lane])
        return sim.memory.read(base + off, size) if 0 <= off and off + size <= nrec \
            else bytes(size)

    _queue_lds_dma(sim, w, ins, size, read)


def _global_load_lds(sim: Simulator, w: Wave, ins: Inst) -> None:
    """``global_load_lds_*`` (gfx940+): an LDS DMA with global addressing (``vN, s[a:b]``
    or ``v[a:b], off``); the immediate offset moves both the global and the LDS address."""
    vaddr, saddr = ins.operands[:2]
    size = _GLOBAL_SIZE[ins.opcode.removeprefix("global_load_lds_")]
    addrs = sim.global_addresses(w, vaddr, saddr, int(ins.mods.get("offset", 0)))
    _queue_lds_dma(sim, w, ins, size, lambda lane: sim.memory.read(int(addrs[lane]), size))


def _buffer_load(sim: Simulator, w: Wave, ins: Inst) -> None:
    size = _BUF_SIZE[ins.opcode.split("_")[-1]]
    if ins.mods.get("lds"):
        _buffer_load_lds(sim, w, ins, size)
        return
    dst, vaddr, srsrc, soffset = ins.operands
    offs, base, nrec = _buffer_addresses(sim, w, ins, vaddr, srsrc, soffset)
    mask = w.exec_mask()
    d = _reg(dst)
    assert d is not None

    def apply() -> None:  # memory is sampled when vmcnt retires the load
        values = np.zeros((max(size // 4, 1), LANES), dtype=np.uint32)
        for lane in np.nonzero(mask)[0]:
            off = int(offs[lane])
            if off + size <= nrec and off >= 0:
                data = sim.memory.read(base + off, size)
                if size == 1:  # sbyte sign-extends, ubyte zero-extends
                    fmt = "<b" if ins.opcode.endswith("sbyte") else "<B"
                    values[0][lane] = struct.unpack(fmt, data)[0] & 0xFFFFFFFF
                elif size == 2:
                    values[0][lane] = struct.unpack("<H", data)[0]
                else:
                    values[:, lane] = struct.unpack(f"<{size // 4}I", data)
        for i in range(values.shape[0]):
            w.vgpr[d[1] + i][mask] = values[i][mask]

    sim.issue(w, "vm", {("v", d[1] + i) for i in range(d[2])}, apply, ins.line)


def _buffer_store(sim: Simulator, w: Wave, ins: Inst) -> None:
    size = _BUF_SIZE[ins.opcode.split("_")[-1]]
    data_reg, vaddr, srsrc, soffset = ins.operands
    d = _reg(data_reg)
    assert d is not None
    sim.check_pending(w, [("v", d[1] + i) for i in range(d[2])])
    offs, base, nrec = _buffer_addresses(sim, w, ins, vaddr, srsrc, soffset)
    writes = []
    for lane in np.nonzero(w.exec_mask())[0]:
        off = int(offs[lane])
        if off + size <= nrec and off >= 0:
            if size == 1:
                payload = struct.pack("<B", int(w.vgpr[d[1]][lane]) & 0xFF)
            elif size == 2:
                payload = struct.pack("<H", int(w.vgpr[d[1]][lane]) & 0xFFFF)
            else:
                payload = struct.pack(f"<{size // 4}I",
                                      *[int(w.vgpr[d[1] + i][lane]) for i in range(size // 4)])
            writes.append((base + off, payload))

    def apply() -> None:  # the store reaches memory when vmcnt retires it
        for addr, payload in writes:
            sim.memory.write(addr, payload)

    sim.issue(w, "vm", set(), apply, ins.line)


_DS_SIZE = {"b32": 4, "b64": 8, "b128": 16, "u16": 2, "b16": 2, "i8": 1, "u8": 1, "b8": 1}


def _ds(sim: Simulator, w: Wave, ins: Inst) -> None:
    write = ins.opcode.startswith("ds_write")
    size = _DS_SIZE[ins.opcode.split("_")[-1]]
    if write:
        addr_reg, data_reg = ins.operands
    else:
        data_reg, addr_reg = ins.operands
    # the address adds in 32 bits (LLVM folds `-4 * tx + 508` as a negative VGPR + offset)
    addr = (sim.vsrc(w, addr_reg).astype(np.int64) + int(ins.mods.get("offset", 0))) % (1 << 32)
    d = _reg(data_reg)
    assert d is not None
    mask = w.exec_mask()
    lanes = np.nonzero(mask)[0]
    for lane in lanes:
        if addr[lane] < 0 or addr[lane] + size > len(sim.lds):
            raise SimulationError(f"`{ins.line}`: LDS address {addr[lane]} out of range")
    # bytes an LDS DMA of this wave still has to write
    sim.check_pending(w, sorted({u for lane in lanes for u in _lds_dwords(int(addr[lane]), size)}))
    if write:
        sim.check_pending(w, [("v", d[1] + i) for i in range(d[2])])
        words = w.vgpr[d[1]:d[1] + max(size // 4, 1)].copy()

        def apply() -> None:
            for lane in lanes:
                a = int(addr[lane])
                if size == 1:
                    sim.lds[a] = int(words[0][lane]) & 0xFF
                elif size == 2:
                    sim.lds[a:a + 2] = np.frombuffer(
                        struct.pack("<H", int(words[0][lane]) & 0xFFFF), dtype=np.uint8)
                else:
                    raw = struct.pack(f"<{size // 4}I", *[int(x) for x in words[:, lane]])
                    sim.lds[a:a + size] = np.frombuffer(raw, dtype=np.uint8)

        sim.issue(w, "lgkm", set(), apply, ins.line)
        return
    values = np.zeros((max(size // 4, 1), LANES), dtype=np.uint32)

    def apply_read() -> None:
        for lane in lanes:
            a = int(addr[lane])
            raw = sim.lds[a:a + size].tobytes()
            if size == 1:
                fmt = "<b" if ins.opcode.endswith("i8") else "<B"
                values[0][lane] = struct.unpack(fmt, raw)[0] & 0xFFFFFFFF
            elif size == 2:
                values[0][lane] = struct.unpack("<H", raw)[0]
            else:
                values[:, lane] = struct.unpack(f"<{size // 4}I", raw)
        for i in range(values.shape[0]):
            w.vgpr[d[1] + i][mask] = values[i][mask]

    sim.issue(w, "lgkm", {("v", d[1] + i) for i in range(d[2])}, apply_read, ins.line)


def _mfma_16x16x16(sim: Simulator, w: Wave, ins: Inst) -> None:
    """D = A*B + C for 16x16x16 (CDNA3 layout): lane l holds A[l%16][4*(l//16)+j],
    B[4*(l//16)+j][l%16] (j = 0..3, two halves per VGPR) and D[4*(l//16)+r][l%16]."""
    dst, a_reg, b_reg, c_reg = ins.operands
    half = ins.opcode.endswith("bf16")
    ra, rb, rc, rd = (_reg(x) for x in (a_reg, b_reg, c_reg, dst))
    assert ra and rb and rd
    if rc is None and c_reg != "0" and c_reg not in _INLINE_F:
        raise SimulationError(f"`{ins.line}`: C operand {c_reg} is not a register or inline float")

    def elems(r: tuple[str, int, int]) -> np.ndarray:
        sim.check_pending(w, [("v", r[1] + i) for i in range(r[2])])
        words = w.vgpr[r[1]:r[1] + 2]  # 2 VGPRs x 64 lanes, 4 halves per lane
        halves = np.stack([words[0] & 0xFFFF, words[0] >> 16, words[1] & 0xFFFF,
                           words[1] >> 16])  # [4, 64]
        if half:
            return (halves.astype(np.uint32) << 16).view(np.float32)
        return halves.astype(np.uint16).view(np.float16).astype(np.float32)

    a, b = elems(ra), elems(rb)
    if rc is None:  # an inline constant C, the same in every element
        c = np.full((4, LANES), _INLINE_F.get(c_reg, 0.0), np.float32)
    else:
        sim.check_pending(w, [("v", rc[1] + i) for i in range(4)])
        c = _bits_f32(w.vgpr[rc[1]:rc[1] + 4].copy())
    mat_a = np.zeros((16, 16), np.float32)
    mat_b = np.zeros((16, 16), np.float32)
    for lane in range(LANES):
        for j in range(4):
            k = 4 * (lane // 16) + j
            mat_a[lane % 16, k] = a[j, lane]
            mat_b[k, lane % 16] = b[j, lane]
    prod = mat_a.astype(np.float64) @ mat_b.astype(np.float64)
    out = np.zeros((4, LANES), np.float32)
    for lane in range(LANES):
        for r in range(4):
            row = 4 * (lane // 16) + r
            out[r, lane] = np.float32(prod[row, lane % 16] + c[r, lane])
    sim.check_pending(w, [("v", rd[1] + i) for i in range(4)])
    w.vgpr[rd[1]:rd[1] + 4] = _f32_bits(out)


def _v_mov_b64(sim: Simulator, w: Wave, ins: Inst) -> None:
    # the subset tilewave emits: an even-aligned VGPR pair set to the inline constant 0
    dst, src = ins.operands
    r = _reg(dst)
    if r is None or r[0] != "v" or r[2] != 2 or r[1] % 2 or src != "0":
        raise SimulationError(f"`{ins.line}`: only v_mov_b64 v[2n:2n+1], 0 is modelled")
    for i in range(2):
        sim.vdst(w, f"v{r[1] + i}", np.zeros(LANES, dtype=np.uint32))


def _packed_f32(sim: Simulator, w: Wave, ins: Inst) -> None:
    """v_pk_{add,mul,fma}_f32 on register pairs; op_sel picks each source's element for the
    low result, op_sel_hi for the high one (default: low from element 0, high from 1);
    neg_lo / neg_hi negate a source's element for the low / high result. A source that is
    not a pair (an SGPR or a constant) is read as the same value for both elements."""
    dst, *srcs = ins.operands
    mods = ins.mods
    sel = mods.get("op_sel", [0] * len(srcs))
    sel_hi = mods.get("op_sel_hi", [1] * len(srcs))
    halves = []
    for text in srcs:
        r = _reg(text)
        if r is not None and r[2] == 2:
            if r[0] == "v" and r[1] % 2:
                raise SimulationError(f"`{ins.line}`: VGPR pair {text} is not 64-bit aligned")
            halves.append([_bits_f32(sim.vsrc(w, f"{r[0]}{r[1] + i}")) if r[0] == "v" else
                           _bits_f32(np.full(LANES, sim.sval(w, f"s{r[1] + i}"), np.uint32))
                           for i in range(2)])
        else:
            value = _bits_f32(sim.vsrc(w, text))
            halves.append([value, value])
    fn = {"v_pk_add_f32": lambda a, b: a + b, "v_pk_mul_f32": lambda a, b: a * b,
          "v_pk_fma_f32": lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32)}
    negate = (mods.get("neg_lo", [0] * len(srcs)), mods.get("neg_hi", [0] * len(srcs)))
    r = _reg(dst)
    if r is None or r[0] != "v" or r[2] != 2 or r[1] % 2:
        raise SimulationError(f"`{ins.line}`: the destination is not an aligned VGPR pair")
    results = []
    for out, select in enumerate((sel, sel_hi)):
        args = [-h[select[i]] if negate[out][i] else h[select[i]]
                for i, h in enumerate(halves)]
        with np.errstate(all="ignore"):
            results.append(_f32_bits(fn[ins.opcode](*args)))
    for out, value in enumerate(results):  # both halves read before either is written
        sim.vdst(w, f"v{r[1] + out}", value)


_GLOBAL_SIZE = {"dword": 4, "dwordx2": 8, "dwordx3": 12, "dwordx4": 16, "ushort": 2,
                "short": 2, "byte": 1, "ubyte": 1, "sbyte": 1}


def _global_load(sim: Simulator, w: Wave, ins: Inst) -> None:
    """global_load_* (``ubyte``/``ushort`` zero-, ``sbyte`` sign-extended into 32 bits)."""
    dst, vaddr, saddr = ins.operands[:3]
    name = ins.opcode.removeprefix("global_load_")
    size = _GLOBAL_SIZE[name]
    addrs = sim.global_addresses(w, vaddr, saddr, int(ins.mods.get("offset", 0)))
    mask = w.exec_mask()
    d = _reg(dst)
    assert d is not None

    def apply() -> None:  # memory is sampled when vmcnt retires the load
        for lane in np.nonzero(mask)[0]:
            data = sim.memory.read(int(addrs[lane]), size)
            if size < 4:
                value = int.from_bytes(data, "little", signed=name == "sbyte")
                w.vgpr[d[1]][lane] = value & 0xFFFFFFFF
            else:
                for i, word in enumerate(struct.unpack(f"<{size // 4}I", data)):
                    w.vgpr[d[1] + i][lane] = word

    sim.issue(w, "vm", {("v", d[1] + i) for i in range(d[2])}, apply, ins.line)


def _global_store(sim: Simulator, w: Wave, ins: Inst) -> None:
    """global_store_* (``short_d16_hi``: the data register's high 16 bits)."""
    vaddr, data, saddr = ins.operands[:3]
    name = ins.opcode.removeprefix("global_store_")
    high = name.endswith("_d16_hi")
    size = _GLOBAL_SIZE[name.removesuffix("_d16_hi")]
    addrs = sim.global_addresses(w, vaddr, saddr, int(ins.mods.get("offset", 0)))
    d = _reg(data)
    assert d is not None
    sim.check_pending(w, [("v", d[1] + i) for i in range(d[2])])
    writes = []
    for lane in np.nonzero(w.exec_mask())[0]:
        words = [int(w.vgpr[d[1] + i][lane]) for i in range(max(size // 4, 1))]
        if size < 4:
            value = words[0] >> 16 if high else words[0]
            payload = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        else:
            payload = struct.pack(f"<{size // 4}I", *words)
        writes.append((int(addrs[lane]), payload))

    def apply() -> None:  # the store reaches memory when vmcnt retires it
        for addr, payload in writes:
            sim.memory.write(addr, payload)

    sim.issue(w, "vm", set(), apply, ins.line)


def _ds_read2(sim: Simulator, w: Wave, ins: Inst) -> None:
    """ds_read2_b32/b64 (offsets in elements) and ds_read2st64_b32 (in 64-element units)."""
    dst, addr_reg = ins.operands[:2]
    size = 8 if ins.opcode.endswith("b64") else 4
    unit = size * (64 if "st64" in ins.opcode else 1)
    base = sim.vsrc(w, addr_reg).astype(np.int64)
    d = _reg(dst)
    assert d is not None
    if d[0] != "v" or d[1] % 2:
        raise SimulationError(f"`{ins.line}`: the destination is not an aligned VGPR tuple")
    mask = w.exec_mask()
    words = size // 4
    offsets = [int(ins.mods.get(key, 0)) * unit for key in ("offset0", "offset1")]
    sim.check_pending(w, sorted({u for lane in np.nonzero(mask)[0] for offset in offsets
                                 for u in _lds_dwords(int(base[lane]) + offset, size)}))

    def apply() -> None:
        for half, offset in enumerate(offsets):
            for lane in np.nonzero(mask)[0]:
                a = int(base[lane]) + offset
                raw = sim.lds[a:a + size].tobytes()
                for i, word in enumerate(struct.unpack(f"<{words}I", raw)):
                    w.vgpr[d[1] + half * words + i][lane] = word

    sim.issue(w, "lgkm", {("v", d[1] + i) for i in range(d[2])}, apply, ins.line)


def _ds_write_hi(sim: Simulator, w: Wave, ins: Inst) -> None:
    """ds_write_b16_d16_hi: the high 16 bits of the data register."""
    addr_reg, data = ins.operands[:2]
    a = sim.vsrc(w, addr_reg).astype(np.int64) + int(ins.mods.get("offset", 0))
    values = sim.vsrc(w, data) >> 16
    lanes = np.nonzero(w.exec_mask())[0]
    sim.check_pending(w, sorted({u for lane in lanes for u in _lds_dwords(int(a[lane]), 2)}))

    def apply() -> None:
        for lane in lanes:
            sim.lds[int(a[lane]):int(a[lane]) + 2] = np.frombuffer(
                struct.pack("<H", int(values[lane]) & 0xFFFF), dtype=np.uint8)

    sim.issue(w, "lgkm", set(), apply, ins.line)


def _s_add_carry(sim: Simulator, w: Wave, ins: Inst) -> None:
    """s_add_u32 (SCC = carry out) and s_addc_u32 (adds SCC): 64-bit address arithmetic."""
    o = ins.operands
    total = sim.sval(w, o[1]) + sim.sval(w, o[2]) + (w.scc if ins.opcode == "s_addc_u32" else 0)
    w.scc = int(total >> 32)
    sim.sdst(w, o[0], total & 0xFFFFFFFF)


_HANDLERS: dict[str, Callable[[Simulator, Wave, Inst], None]] = {
    "v_mov_b64": _v_mov_b64,
    **{f"global_load_{s}": _global_load for s in ("dword", "dwordx2", "dwordx3", "dwordx4",
                                                   "ushort", "ubyte", "sbyte")},
    **{f"global_load_lds_{s}": _global_load_lds for s in ("dword", "dwordx3", "dwordx4")},
    **{f"global_store_{s}": _global_store for s in ("dword", "dwordx2", "dwordx4", "short",
                                                     "byte", "short_d16_hi")},
    "s_add_u32": _s_add_carry, "s_addc_u32": _s_add_carry,
    "ds_read2_b32": _ds_read2, "ds_read2_b64": _ds_read2, "ds_read2st64_b32": _ds_read2,
    "ds_read2st64_b64": _ds_read2,
    "ds_write_b16_d16_hi": _ds_write_hi,
    "v_pk_add_f32": _packed_f32, "v_pk_mul_f32": _packed_f32, "v_pk_fma_f32": _packed_f32,
    "v_div_scale_f32": _div_scale, "v_div_fmas_f32": _div_fmas,
    **{op: _valu_f64 for op in (*_F64, "v_cvt_f64_f32", "v_cvt_f64_i32", "v_cvt_f32_f64",
                                "v_cvt_i32_f64")},
    **{f"buffer_load_{s}": _buffer_load for s in ("ubyte", "sbyte")},
    "buffer_store_byte": _buffer_store,
    **{op: _ds for op in ("ds_read_i8", "ds_read_u8", "ds_write_b8")},
    "s_load_dword": _s_load, "s_load_dwordx2": _s_load, "s_load_dwordx4": _s_load,
    **{f"buffer_load_{s}": _buffer_load for s in ("dword", "dwordx2", "dwordx4", "ushort")},
    **{f"buffer_store_{s}": _buffer_store for s in ("dword", "dwordx2", "dwordx4", "short")},
    **{op: _ds for op in ("ds_read_b32", "ds_read_b64", "ds_read_b128", "ds_read_u16",
                          "ds_write_b32", "ds_write_b64", "ds_write_b128", "ds_write_b16")},
    "v_mfma_f32_16x16x16_f16": _mfma_16x16x16, "v_mfma_f32_16x16x16_bf16": _mfma_16x16x16,
}


def simulate(asm: str, args: list[object], grid: tuple[int, int, int],
             workgroup: tuple[int, int, int]) -> None:
    """Run ``asm`` on ``args`` (arrays updated in place) over ``grid`` x ``workgroup``."""
    sim = Simulator(asm)
    sim.wg_size = workgroup  # type: ignore[attr-defined]
    sim.run(args, grid)
