"""Instruction selection: a device PrimFunc → kernel IR over virtual registers.

The selector walks the TIR once. Each expression becomes a :class:`Value` (an operand and
its dtype); a value in an SGPR or an immediate is *uniform* (the same in every lane), one
in a VGPR is per-lane. Uniformity follows the sources: ``blockIdx``, scalar arguments and
serial-loop counters are uniform (SGPRs), ``threadIdx`` and every buffer load are per-lane
(VGPRs). An operation whose operands are all uniform runs on the SALU, anything else on
the VALU — the opcode comes from the small template tables below, never from if-chains.

Memory: global buffers are addressed by ``global_*`` instructions with the argument's base
address in an SGPR pair, a 32-bit per-lane offset and a signed 13-bit constant
(:mod:`.global_memory`); buffers a ``Select`` arm loads and LDS DMA sources keep a buffer
resource descriptor (MUBUF: a uniform byte offset in ``soffset``, a per-lane one in
``vaddr``, constants in the offset field), whose range check makes a speculative load safe.
Shared buffers get a static LDS offset; ``ds_*`` instructions fold the constant part of the
address into their 16-bit offset field. ``T.vectorized`` loops of width 2/4 over 32-bit
data become ``dwordx2/x4`` (``ds_*_b64/b128``) accesses when the index is provably aligned.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Sequence

import tvm_ffi
from tvm import ir, tirx

from tilewave.codegen.amdgcn.global_memory import (
    GlobalMemory,
    base_pair,
    buffers_needing_srd,
    place_late_prologue,
)
from tilewave.codegen.amdgcn.global_memory import scale_term as _scale
from tilewave.codegen.amdgcn.global_memory import sum_terms as _sum
from tilewave.codegen.amdgcn.isa import op_info
from tilewave.codegen.amdgcn.isel_ops import OpSelection
from tilewave.codegen.amdgcn.kir import (
    Imm,
    Instr,
    KernelArg,
    Label,
    Operand,
    Program,
    Sub,
    Sym,
    VReg,
    reg_class,
)
from tilewave.codegen.amdgcn.known_bits import KnownBits
from tilewave.codegen.amdgcn.scalarize import NotScalarizable, lane_of
from tilewave.codegen.amdgcn.selected import ELEM_BYTES as _ELEM_BYTES
from tilewave.codegen.amdgcn.selected import SelectedBuffer, Value
from tilewave.codegen.amdgcn.unroll import partially_unrolled, should_unroll, unrolled_copies
from tilewave.codegen.amdgcn.value_reuse import (
    LoopFrame,
    LoopNest,
    ValueTable,
    element,
    loaded_buffers,
    overlaps,
    pure_free_vars,
    written_buffers,
)
from tilewave.errors import MalformedKernelError, SharedMemoryLimitError, TargetFeatureError, where
from tilewave.ir.intrinsics import callee_name
from tilewave.ir.walker import ffi_list, substitute
from tilewave.targets import TargetInfo

__all__ = ["Value", "select"]

SRD_WORD3 = 0x00020000  # gfx9 buffer descriptor dword 3: DATA_FORMAT = 32 bits
MAX_BUFFER_OFFSET = 4095  # MUBUF 12-bit unsigned offset field
MAX_DS_OFFSET = 65535  # DS 16-bit unsigned offset field

# uint16: TVM's lowering stores bfloat16 buffers as uint16 (BF16 storage legalisation)
# 8/16-bit integers live in 32-bit registers sign- (int8) or zero-extended (uint8, uint16)
_NARROW_INTS = {"int8": 8, "uint8": 8, "uint16": 16}
_INT_TYPES = ("int32", "uint32", *_NARROW_INTS)
_FLOAT_TYPES = ("float32", "float16")
_FLOAT_FUNCTIONS = frozenset({"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "fabs"})

# Integer ops: kind -> (SALU opcode, VALU opcode, VALU operands reversed?)
_INT_OPS: dict[str, tuple[str, str, bool]] = {
    "add": ("s_add_u32", "v_add_u32", False),
    "sub": ("s_sub_u32", "v_sub_u32", False),
    "mul": ("s_mul_i32", "v_mul_lo_u32", False),
    # both factors known in [0, 2^24): the VOP2 24-bit multiply (a literal factor is free)
    "mul24": ("s_mul_i32", "v_mul_u32_u24", False),
    "and": ("s_and_b32", "v_and_b32", False),
    "or": ("s_or_b32", "v_or_b32", False),
    "xor": ("s_xor_b32", "v_xor_b32", False),
    "shl": ("s_lshl_b32", "v_lshlrev_b32", True),
    "lshr": ("s_lshr_b32", "v_lshrrev_b32", True),
    "ashr": ("s_ashr_i32", "v_ashrrev_i32", True),
    "min": ("s_min_i32", "v_min_i32", False),
    "max": ("s_max_i32", "v_max_i32", False),
}
# Float ops: (kind, dtype) -> VALU opcode (floats always run on the VALU).
_FLOAT_OPS: dict[tuple[str, str], str] = {
    (k, t): f"v_{k}_{t.replace('float', 'f')}"
    for k in ("add", "sub", "mul", "max", "min", "fma")
    for t in (*_FLOAT_TYPES, "float64")
    if (k, t) != ("sub", "float64")  # no v_sub_f64: a + (-b)
}
_CMP = {tirx.LT: "lt", tirx.LE: "le", tirx.GT: "gt", tirx.GE: "ge", tirx.EQ: "eq", tirx.NE: "ne"}
_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_CONVERT = {  # (from, to) -> VALU opcode
    ("float16", "float32"): "v_cvt_f32_f16",
    ("float32", "float16"): "v_cvt_f16_f32",
    ("int32", "float32"): "v_cvt_f32_i32",
    ("float32", "int32"): "v_cvt_i32_f32",
    ("uint32", "float32"): "v_cvt_f32_u32",
    ("float32", "uint32"): "v_cvt_u32_f32",
    ("float32", "float64"): "v_cvt_f64_f32",
    ("float64", "float32"): "v_cvt_f32_f64",
    ("int32", "float64"): "v_cvt_f64_i32",
    ("float64", "int32"): "v_cvt_i32_f64",
}
_TIR_BINARY = {
    tirx.Add: "add",
    tirx.Sub: "sub",
    tirx.Mul: "mul",
    tirx.Min: "min",
    tirx.Max: "max",
    tirx.FloorDiv: "floordiv",
    tirx.FloorMod: "floormod",
    tirx.LShift: "shl",
    tirx.RShift: "ashr",
    tirx.BitwiseAnd: "and",
    tirx.BitwiseOr: "or",
    tirx.BitwiseXor: "xor",
    tirx.Div: "truncdiv",  # integers; float division is "fdiv"
    tirx.Mod: "truncmod",
}
_TIR_CALL_BINARY = {
    "tirx.bitwise_and": "and",
    "tirx.bitwise_or": "or",
    "tirx.bitwise_xor": "xor",
    "tirx.shift_left": "shl",
    "tirx.shift_right": "ashr",
}
_GLOBAL_LOAD = {
    1: "buffer_load_ubyte",
    2: "buffer_load_ushort",
    4: "buffer_load_dword",
    8: "buffer_load_dwordx2",
    16: "buffer_load_dwordx4",
}
_GLOBAL_STORE = {
    1: "buffer_store_byte",
    2: "buffer_store_short",
    4: "buffer_store_dword",
    8: "buffer_store_dwordx2",
    16: "buffer_store_dwordx4",
}
_DS_READ = {1: "ds_read_u8", 2: "ds_read_u16", 4: "ds_read_b32", 8: "ds_read_b64",
            16: "ds_read_b128"}
_DS_WRITE = {1: "ds_write_b8", 2: "ds_write_b16", 4: "ds_write_b32", 8: "ds_write_b64",
             16: "ds_write_b128"}
_SIGNED_LOAD = {"buffer_load_ubyte": "buffer_load_sbyte", "ds_read_u8": "ds_read_i8"}
_MFMA = {
    "llvm.amdgcn.mfma.f32.16x16x16f16": ("v_mfma_f32_16x16x16_f16", "float16"),
    "llvm.amdgcn.mfma.f32.16x16x16bf16.1k": ("v_mfma_f32_16x16x16_bf16", "bfloat16"),
}
_MFMA_NAMES = {dtype: opcode for opcode, dtype in _MFMA.values()}
_LDS_DMA = {4: "buffer_load_dword_lds", 16: "buffer_load_dwordx4_lds"}


_DIVISIONS = ("floordiv", "floormod", "truncdiv", "truncmod")


def _select_parts(expr: object) -> tuple[object, object, object] | None:
    """(condition, true value, false value) of a ``Select`` or ``if_then_else``, else None."""
    if isinstance(expr, tirx.Select):
        return expr.condition, expr.true_value, expr.false_value
    if (isinstance(expr, ir.expr.Call) and isinstance(expr.op, ir.Op)
            and str(expr.op.name) in ("prim.if_then_else", "tirx.if_then_else")):
        return tuple(expr.args)  # type: ignore[return-value]
    return None


def _conjuncts(cond: object) -> list[object]:
    """The operands of a tree of ``and``."""
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _bound(cond: object) -> tuple[object, str, int] | None:
    """(x, "lo" or "hi", c) when ``cond`` is ``c <= x`` / ``x < c`` (or an equivalent form)
    of an int32 ``x`` and a constant ``c`` (lo inclusive, hi exclusive)."""
    forms = {  # (type, constant on the left?) -> (side, adjustment)
        (tirx.LE, True): ("lo", 0), (tirx.LT, True): ("lo", 1),
        (tirx.GE, False): ("lo", 0), (tirx.GT, False): ("lo", 1),
        (tirx.LT, False): ("hi", 0), (tirx.LE, False): ("hi", 1),
        (tirx.GT, True): ("hi", 0), (tirx.GE, True): ("hi", 1),
    }
    if not isinstance(cond, tuple(_CMP)) or isinstance(cond, tirx.EQ | tirx.NE):
        return None
    left = _const(cond.a) is not None
    c = _const(cond.a) if left else _const(cond.b)
    x = cond.b if left else cond.a
    if c is None or _const(x) is not None or str(x.ty) != "int32":
        return None
    side, adjust = forms[(type(cond), left)]
    return x, side, c + adjust


def _ranges(conds: list[object]) -> tuple[list[tuple[object, int, int]], list[object]]:
    """Pairs ``lo <= x`` and ``x < hi`` of the same ``x`` among ``conds`` as (x, lo, hi)
    (lo < hi), and the conditions left over."""
    ranges, used = [], set()
    for i, a in enumerate(conds):
        ba = _bound(a)
        for j in range(i + 1, len(conds)):
            bb = _bound(conds[j])
            if ba is None or bb is None or i in used or j in used or ba[1] == bb[1]:
                continue
            if not tvm_ffi.structural_equal(ba[0], bb[0]):
                continue
            lo, hi = (ba[2], bb[2]) if ba[1] == "lo" else (bb[2], ba[2])
            if lo < hi:
                ranges.append((ba[0], lo, hi))
                used |= {i, j}
    return ranges, [c for k, c in enumerate(conds) if k not in used]


def _is_abs(cond: object, true: object, false: object) -> bool:
    """``x if 0 <= x else 0 - x`` (TVM's integer ``abs``)."""
    return (isinstance(cond, tirx.LE) and _const(cond.a) == 0
            and isinstance(false, tirx.Sub) and _const(false.a) == 0
            and tvm_ffi.structural_equal(cond.b, true)
            and tvm_ffi.structural_equal(false.b, true))


def _short(expr: object, limit: int = 80) -> str:
    """``expr`` as one line of TVMScript, cut to ``limit`` characters."""
    text = " ".join(str(expr).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _dim(extent: object) -> int | object:
    """A buffer dimension: an int when constant, else the (symbolic) expression."""
    return int(extent.value) if isinstance(extent, tirx.IntImm) else extent


def _vars_bound(expr: object, env: dict[object, object]) -> bool:
    """Every variable of ``expr`` has a value in ``env``."""
    from tilewave.ir.walker import post_order_visit

    unbound = []
    post_order_visit(expr, lambda n: unbound.append(n)
                     if isinstance(n, ir.expr.Var) and n not in env else None)
    return not unbound


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _const(expr: object) -> int | None:
    return expr.value if isinstance(expr, tirx.IntImm) else None


def split_constant(expr: object) -> tuple[object | None, int]:
    """Split an integer expression into (non-constant part or None, constant addend)."""
    if isinstance(expr, tirx.IntImm):
        return None, expr.value
    if isinstance(expr, tirx.Add):
        ra, ca = split_constant(expr.a)
        rb, cb = split_constant(expr.b)
        if ra is None:
            return rb, ca + cb
        if rb is None:
            return ra, ca + cb
        return tirx.Add(ra, rb), ca + cb
    if isinstance(expr, tirx.Sub) and isinstance(expr.b, tirx.IntImm):
        ra, ca = split_constant(expr.a)
        return ra, ca - expr.b.value
    if isinstance(expr, tirx.Mul) and isinstance(expr.b, tirx.IntImm):
        # (x + c) * k = x * k + c * k: the constant reaches the offset field
        ra, ca = split_constant(expr.a)
        if ca and ra is not None:
            return tirx.Mul(ra, expr.b), ca * expr.b.value
    return expr, 0


class _Selector(OpSelection, GlobalMemory):
    def __init__(self, func: tirx.PrimFunc, info: TargetInfo) -> None:
        self.func = func
        self.info = info
        name = (
            func.attrs["global_symbol"]
            if func.attrs and "global_symbol" in func.attrs
            else "kernel"
        )
        self.name = str(name)
        self.prog = Program(self.name)
        self.env: dict[object, Value] = {}
        self.buffers: dict[object, SelectedBuffer] = {}
        self.bits = KnownBits()
        self.labels = itertools.count()
        self.kernarg = VReg("s", 2, 2, fixed=0, name="kernarg")
        self.wg_ids: dict[str, VReg] = {}
        self.tid: VReg | None = None
        self.workgroup = [1, 1, 1]
        self.lane: tuple[object, int] | None = None
        self.stmt: object = None
        self.pointers: dict[object, int] = {}  # handle parameter -> kernarg offset
        self.vector_locals: set[object] = set()  # local buffers accessed with a Ramp index
        self.values = ValueTable()  # pure expressions already in a register
        self.lazy: dict[object, object] = {}  # let variables with a pure value, computed at use
        self.loops = LoopNest()  # enclosing serial loops (for loop-invariant hoisting)
        self.sink: list[Instr | Label] | None = None  # where emit() appends (None: the body)
        self.unrolling = 0  # depth of unrolled loops being selected (wide loads pay off there)
        # code found necessary during selection, placed after the instruction it names
        self.late_prologue: list[tuple[Instr, Instr]] = []
        self.windows: dict[tuple[int, int], VReg] = {}  # (buffer, 4 KiB window) -> base pair
        self.mubuf = buffers_needing_srd(func.body, _select_parts, _address_of)
        # local elements last set to a constant not yet moved into their register: straight-
        # line reads use the constant (`acc = 0; acc += x` is one add of 0 and x); control
        # flow (a rolled loop, a branch) moves it into the register first
        self.constant_locals: dict[Operand, Value] = {}

    # -- emission helpers -------------------------------------------------------------
    def emit(
        self,
        opcode: str,
        defs: Sequence[Operand] = (),
        uses: Sequence[Operand] = (),
        mods: str = "",
        target: str | None = None,
        comment: str = "",
    ) -> None:
        out = self.prog.body if self.sink is None else self.sink
        out.append(Instr(opcode, list(defs), list(uses), mods, target, comment))

    def last_emitted(self) -> Instr:
        out = self.prog.body if self.sink is None else self.sink
        last = out[-1]
        assert isinstance(last, Instr)
        return last

    def label(self, stem: str) -> str:
        return f".L{self.name}_{stem}{next(self.labels)}"

    def error(self, message: str, fix: str) -> MalformedKernelError:
        return MalformedKernelError(
            f"AMDGCN backend {where(self.name, self.stmt)}: {message}. {fix}"
        )

    def unsupported(self, expr: object) -> MalformedKernelError:
        """The error for an expression the selector has no instructions for, naming it."""
        if isinstance(expr, ir.expr.Call):
            op = callee_name(expr) or str(getattr(expr.op, "name", expr.op))
            what = f"op {op} ({expr.ty}) in `{_short(expr)}`"
        else:
            what = f"{type(expr).__name__} ({expr.ty}) in `{_short(expr)}`"
        return self.error(
            f"{what} is not supported",
            "docs/amdgcn.md lists the operations the backend selects; rewrite the expression "
            "with those or compute it before the kernel",
        )

    def vreg(self, cls: str = "v", width: int = 1, align: int = 1) -> VReg:
        return VReg(cls, width, align)  # type: ignore[arg-type]

    def to_vgpr(self, op: Operand) -> Operand:
        if reg_class(op) == "v":
            return op
        out = self.vreg("v")
        self.emit("v_mov_b32", [out], [op])
        return out

    def to_sgpr(self, op: Operand) -> Operand:
        if reg_class(op) == "s":
            return op
        if reg_class(op) == "v":
            raise self.error(
                "a per-thread value is used where a uniform one is needed",
                "Make loop bounds and branch conditions of loops uniform.",
            )
        out = self.vreg("s")
        self.emit("s_mov_b32", [out], [op])
        return out

    def legal_valu(self, opcode: str, srcs: list[Operand]) -> list[Operand]:
        """Make ``srcs`` encodable: VOP2 src1 in a VGPR, literals only in VOP1/VOP2 src0,
        at most one SGPR-or-literal (the gfx9 constant bus)."""
        info = op_info(opcode)
        srcs = list(srcs)
        if (
            info.encoding == "vop2"
            and info.commutes
            and reg_class(srcs[1]) != "v"
            and reg_class(srcs[0]) == "v"
        ):
            srcs[0], srcs[1] = srcs[1], srcs[0]
        bus_used = False
        out = []
        for i, op in enumerate(srcs):
            literal = isinstance(op, Imm) and not op.is_inline
            scalar = reg_class(op) == "s" or literal
            if isinstance(op, Imm) and op.is_inline:
                out.append(op)
                continue
            need_vgpr = (
                (info.encoding == "vop2" and i == 1 and reg_class(op) != "v")
                or (literal and (info.encoding == "vop3" or i != 0))
                or (scalar and bus_used)
            )
            if need_vgpr:
                op = self.to_vgpr(op)
            elif scalar:
                bus_used = True
            out.append(op)
        return out

    def valu(self, opcode: str, srcs: list[Operand], dst: Operand | None = None) -> Operand:
        out = dst or self.vreg("v")
        self.emit(opcode, [out], self.legal_valu(opcode, srcs))
        return out

    # -- prologue ------------------------------------------------------------------------
    def prologue(self) -> None:
        offset = 0
        buffer_params: list[tuple[object, int]] = []
        for param in self.func.params:
            ty = param.ty
            if isinstance(ty, tirx.buffer.BufferType | ir.PointerType):
                offset = (offset + 7) // 8 * 8
                if isinstance(ty, ir.PointerType):
                    self.pointers[param] = offset
                else:
                    buffer_params.append((param, offset))
                self.prog.args.append(KernelArg(param.name, offset, 8, "global_buffer"))
                offset += 8
            else:
                dtype = str(ty)
                if dtype not in ("int32", "float32"):
                    raise self.error(
                        f"scalar argument '{param.name}' has type {dtype}",
                        "Pass int32 or float32 scalars.",
                    )
                offset = (offset + 3) // 4 * 4
                reg = VReg("s", name=param.name)
                self.emit(
                    "s_load_dword",
                    [reg],
                    [self.kernarg, Imm.of_int(offset)],
                    comment=f"{param.name}",
                )
                self.env[param] = Value(reg, dtype)
                self.prog.args.append(KernelArg(param.name, offset, 4, "by_value"))
                offset += 4
        for param, kernarg_offset in buffer_params:  # after the scalars their shapes may use
            self.buffers[param] = self.global_buffer(param, param.ty, kernarg_offset)

    def global_buffer(self, var: object, ty: object, kernarg_offset: int) -> SelectedBuffer:
        """A global buffer: its base address loaded from the pointer at ``kernarg_offset``
        (and, for the buffers :func:`buffers_needing_srd` names, a buffer resource descriptor
        around it).

        ``num_records`` is the buffer's size in bytes: a constant, or computed on the SALU
        when the shape uses scalar kernel arguments (``T.Buffer((n,))``).
        """
        buf = SelectedBuffer("global", str(ty.dtype), tuple(_dim(d) for d in ty.shape))
        self._check_dtype(buf.dtype, var.name)
        size: object = tirx.IntImm("int32", buf.elem_bytes)
        for dim in buf.shape:
            size = size * (tirx.IntImm("int32", dim) if isinstance(dim, int) else dim)
        if not self.expr_is_uniform(size) or not _vars_bound(size, self.env):
            raise self.error(
                f"buffer '{var.name}' has shape {list(ty.shape)}, which uses a variable that "
                "is not a scalar kernel argument",
                "Make every symbolic dimension an int32 parameter of the PrimFunc.",
            )
        if var not in self.mubuf:
            buf.base = base_pair(var.name)
        else:
            buf.srd = VReg("s", 4, 4, name=f"srd_{var.name}")
            buf.base = Sub(buf.srd, 0, 2)
        self.emit("s_load_dwordx2", [buf.base], [self.kernarg, Imm.of_int(kernarg_offset)],
                  comment=f"{var.name}: base address")
        buf.base_load = self.last_emitted()
        if buf.srd is None:
            return buf
        records = self.expr(size).op
        # words 2-3 (num_records, format) equal to an earlier SRD's: one 64-bit copy
        records_key = records.bits if isinstance(records, Imm) else repr(records)
        tail = ir.expr.StringImm(f"srd words 2-3: {records_key}")
        earlier = self.values.lookup(tail)
        if earlier is not None:
            self.emit("s_mov_b64", [Sub(buf.srd, 2, 2)], [Sub(earlier, 2, 2)],
                      comment="num_records, format")
        else:
            self.emit("s_mov_b32", [Sub(buf.srd, 2)], [records], comment="num_records (bytes)")
            self.emit("s_mov_b32", [Sub(buf.srd, 3)], [Imm.of_int(SRD_WORD3)])
            self.values.record(tail, buf.srd)
        return buf

    def _check_dtype(self, dtype: str, what: object) -> None:
        if dtype not in _ELEM_BYTES:
            raise self.error(
                f"buffer {what} has dtype {dtype}",
                "The AMDGCN backend handles float32, float16, bfloat16 (uint16 storage) and int32.",
            )

    def scan_launch(self) -> None:
        tags: dict[str, int | None] = {}

        def record(tag: str, extent: object, node: object) -> None:
            value = _const(extent)
            if value is None and tag.startswith("threadIdx"):
                self.stmt = node
                raise self.error(
                    f"{tag} has the symbolic extent {extent}",
                    "The workgroup size is fixed in the code object: bind threadIdx to a "
                    "constant extent (a symbolic blockIdx extent is fine).",
                )
            tags[tag] = value

        def visit(node: object) -> None:
            if isinstance(node, tirx.For) and node.thread_binding is not None:
                record(str(node.thread_binding.thread_tag), node.extent, node)
            if isinstance(node, tirx.BufferStore | ir.expr.TensorLoad):
                buf = node.buffer if isinstance(node, tirx.BufferStore) else node.source
                if str(buf.ty.storage_scope) == "local" and any(
                    isinstance(i, tirx.Ramp) for i in node.indices
                ):
                    self.vector_locals.add(buf)
            if isinstance(node, tirx.AttrStmt) and str(node.attr_key) == "thread_extent":
                record(str(node.node.thread_tag), node.value, node)

        from tilewave.ir.walker import post_order_visit

        post_order_visit(self.func.body, visit)
        sgpr = 2  # after the kernarg pointer s[0:1]
        for axis in "xyz":
            if f"blockIdx.{axis}" in tags:
                self.wg_ids[axis] = VReg("s", fixed=sgpr, name=f"wg_id_{axis}")
                sgpr += 1
        for i, axis in enumerate("xyz"):
            self.workgroup[i] = tags.get(f"threadIdx.{axis}") or 1
        dims = max((i for i, axis in enumerate("xyz") if f"threadIdx.{axis}" in tags), default=0)
        self.prog.workgroup_ids = tuple(a in self.wg_ids for a in "xyz")  # type: ignore[assignment]
        self.prog.workgroup_size = tuple(self.workgroup)  # type: ignore[assignment]
        self.prog.workitem_dims = dims
        if any(f"threadIdx.{a}" in tags for a in "xyz"):
            self.tid = VReg("v", fixed=0, name="workitem_id")
        total = self.workgroup[0] * self.workgroup[1] * self.workgroup[2]
        if total > self.info.max_threads_per_block:
            raise self.error(
                f"workgroup of {total} threads",
                f"{self.info.name} allows at most {self.info.max_threads_per_block}.",
            )

    def bind_thread(self, var: object, tag: str, extent: object) -> None:
        if var in self.env:
            return  # a second launch_thread of the same axis
        count = _const(extent)  # None: a grid size known only at launch
        self.bits.bind(var, 0, None if count is None else count - 1)
        kind, axis = tag.split(".")
        if kind == "blockIdx":
            self.env[var] = Value(self.wg_ids[axis], "int32")
            return
        if kind != "threadIdx":
            raise self.error(f"thread binding '{tag}'", "Use blockIdx.* / threadIdx.* bindings.")
        index = "xyz".index(axis)
        assert self.tid is not None
        if self.prog.workitem_dims == 0:
            self.env[var] = Value(self.tid, "int32")
            return
        # CDNA3 packs the workitem ids into v0: x in bits 0-9, y in 10-19, z in 20-29.
        out = self.valu("v_bfe_u32", [self.tid, Imm.of_int(10 * index), Imm.of_int(10)])
        self.env[var] = Value(out, "int32")

    # -- statements ----------------------------------------------------------------------
    def stmt_(self, node: object) -> None:
        handler: Callable[[object], None] | None = getattr(self, f"s_{type(node).__name__}", None)
        if handler is None:
            self.stmt = node
            raise self.error(
                f"statement kind {type(node).__name__} is not supported",
                "Lower it first or rewrite the kernel without it.",
            )
        prev = self.stmt
        if not isinstance(node, tirx.SeqStmt):
            self.stmt = node
        handler(node)
        self.stmt = prev

    def s_SeqStmt(self, node: tirx.SeqStmt) -> None:
        for child in ffi_list(node.seq):
            self.stmt_(child)

    def s_AttrStmt(self, node: tirx.AttrStmt) -> None:
        if str(node.attr_key) == "thread_extent":
            self.bind_thread(node.node.var, str(node.node.thread_tag), node.value)
        self.stmt_(node.body)

    def s_DeclBuffer(self, node: object) -> None:
        data = node.data
        if data is not None and data in self.pointers:
            self.buffers[node.buffer] = self.global_buffer(node.buffer, node.buffer.ty,
                                                           self.pointers[data])
            return
        raise self.error(f"buffer declaration '{node.buffer.name}' over {data}",
                         "Declare buffers over the kernel's pointer arguments only.")

    def s_Bind(self, node: object) -> None:
        self.bits.let(node.var, node.value)
        free = pure_free_vars(node.value)
        if free is not None:
            # computed where it is used (once per scope, hoisted like any pure expression),
            # so an address can split it into per-lane and uniform terms
            self.lazy[node.var] = node.value
            self.loops.define(node.var, self.loops.level(free))
            return
        self.loops.define(node.var, len(self.loops.frames) - 1)
        value = self.expr(node.value)
        if isinstance(value.op, VReg) and any(
            value.op in (b.regs or []) for b in self.buffers.values()
        ):
            value = Value(self.valu("v_mov_b32", [value.op]), value.dtype)
        self.env[node.var] = value

    def s_AllocBuffer(self, node: object) -> None:
        var = node.buffer
        ty = var.ty
        dtype = str(ty.dtype)
        self._check_dtype(dtype, var.name)
        if not all(isinstance(d, tirx.IntImm) for d in ty.shape):
            raise self.error(
                f"{ty.storage_scope} buffer '{var.name}' has the symbolic shape {list(ty.shape)}",
                "Give LDS and local buffers a constant shape (a maximum tile size).",
            )
        buf = SelectedBuffer(str(ty.storage_scope), dtype, tuple(int(d) for d in ty.shape))
        if buf.scope.startswith("shared"):
            buf.lds_offset = (self.prog.lds_bytes + 15) // 16 * 16
            self.prog.lds_bytes = buf.lds_offset + buf.numel * buf.elem_bytes
            if self.prog.lds_bytes > self.info.shared_memory_bytes:
                raise SharedMemoryLimitError(
                    f"AMDGCN backend {where(self.name, node)}: {self.prog.lds_bytes} bytes of "
                    f"LDS exceed {self.info.name}'s {self.info.shared_memory_bytes}; "
                    "use smaller shared tiles."
                )
        elif buf.scope == "local":
            if buf.numel > 256:
                raise self.error(
                    f"local buffer '{var.name}' has {buf.numel} elements",
                    "Local buffers live in VGPRs; keep them at most 256 elements.",
                )
            if var in self.vector_locals:
                # read/written as a vector (an MFMA fragment): one even-aligned range, so a
                # slice of it is a legal VGPR tuple and the accumulator chains in place
                whole = VReg("v", buf.numel, 2, name=var.name)
                buf.regs = [Sub(whole, i) for i in range(buf.numel)]
            elif buf.elem_bytes == 8:
                buf.regs = [VReg("v", 2, 2) for _ in range(buf.numel)]
            else:
                buf.regs = [self.vreg("v") for _ in range(buf.numel)]
        else:
            raise self.error(
                f"buffer '{var.name}' has scope {buf.scope}",
                "Allocate 'shared' or 'local' buffers inside the kernel.",
            )
        self.buffers[var] = buf

    def s_For(self, node: tirx.For) -> None:
        if node.thread_binding is not None:
            self.bind_thread(node.loop_var, str(node.thread_binding.thread_tag), node.extent)
            self.stmt_(node.body)
            return
        kind = int(node.kind)
        if kind == int(tirx.ForKind.VECTORIZED):
            self.vector_loop(node)
            self.forget_written(node)
            return
        if kind == int(tirx.ForKind.PARALLEL):
            raise self.error("a parallel loop inside a kernel", "Bind it to threadIdx instead.")
        if node.step is not None and _const(node.step) != 1:
            raise self.error("a loop with a step other than 1", "Normalise the loop first.")
        if should_unroll(node):
            # straight-line copies: what one computes (fresh lets, no loop variable left)
            # dominates the next, so the value table stays open across them
            self.unrolling += 1
            try:
                for copy in unrolled_copies(node):
                    self.stmt_(copy)
            finally:
                self.unrolling -= 1
            return
        partial = partially_unrolled(node)
        if partial is not None:
            self.unrolling += 1
            try:
                self.rolled_loop(partial)
            finally:
                self.unrolling -= 1
            return
        self.rolled_loop(node)

    def rolled_loop(self, node: tirx.For) -> None:
        """A serial loop as a loop: an SGPR counter, the body once, a backward branch."""
        self.settle_constant_locals()
        lo, ext = _const(node.min), _const(node.extent)
        if lo is not None and ext is not None:
            self.bits.bind(node.loop_var, lo, lo + ext - 1)
            if ext <= 0:
                return
        start = self.expr(node.min)
        count = self.expr(node.extent)
        if not (start.uniform and count.uniform):
            raise self.error(
                "a loop whose bounds differ between threads",
                "Make the loop bounds uniform (they set an SGPR counter).",
            )
        counter = self.vreg("s")
        self.emit("s_mov_b32", [counter], [start.op], comment=f"loop {node.loop_var.name}")
        end = self.sbinop("add", start, count).op
        head, done = self.label("loop"), self.label("loop_end")
        preheader_at = len(self.prog.body)  # hoisted code runs even when the body does not
        if ext is None:  # unknown trip count: skip the body when it is empty
            self.emit("s_cmp_ge_i32", [], [counter, end])
            self.emit("s_cbranch_scc1", target=done)
        self.prog.body.append(Label(head))
        self.env[node.loop_var] = Value(counter, "int32")
        self.forget_written(node.body)  # a later iteration sees the body's own stores
        with self.loops.loop(node.loop_var, self.values.depth) as frame, self.values.scope():
            self.stmt_(node.body)
            self.settle_constant_locals()  # the next iteration reads the registers
        self.emit("s_add_u32", [counter], [counter, Imm.of_int(1)])
        self.emit("s_cmp_lt_i32", [], [counter, end])
        self.emit("s_cbranch_scc1", target=head)
        self.prog.body.append(Label(done))
        self.prog.body[preheader_at:preheader_at] = frame.preheader

    def settle_constant_locals(self) -> None:
        """Move the constants local elements hold into their registers (before control flow)."""
        for slot, value in self.constant_locals.items():
            self.copy(slot, value)
        self.constant_locals.clear()

    def s_IfThenElse(self, node: tirx.IfThenElse) -> None:
        self.settle_constant_locals()
        cond = node.condition
        if isinstance(cond, tuple(_CMP)) and self.expr_is_uniform(cond):
            else_l, end_l = self.label("else"), self.label("endif")
            self.scalar_compare(cond, negate=True)
            self.emit("s_cbranch_scc1", target=else_l)
            self.branch(node.then_case)
            if node.else_case is not None:
                self.emit("s_branch", target=end_l)
            self.prog.body.append(Label(else_l))
            if node.else_case is not None:
                self.branch(node.else_case)
                self.prog.body.append(Label(end_l))
            return
        mask = self.lane_mask(cond)
        saved = self.vreg("s", 2, 2)
        else_l, end_l = self.label("else"), self.label("endif")
        self.emit("s_and_saveexec_b64", [saved], [mask], comment="divergent if")
        self.emit("s_cbranch_execz", target=else_l)
        self.branch(node.then_case)
        self.prog.body.append(Label(else_l))
        if node.else_case is not None:
            self.emit("s_andn2_b64", [Sym("exec")], [saved, Sym("exec")])
            self.emit("s_cbranch_execz", target=end_l)
            self.branch(node.else_case)
            self.prog.body.append(Label(end_l))
        self.emit("s_or_b64", [Sym("exec")], [Sym("exec"), saved])

    def cached_load(self, buf: SelectedBuffer, expr: ir.expr.TensorLoad) -> Value:
        """A global/shared load, reused until the location may change. In unrolled code a
        4-byte element of a global buffer is loaded with the three next to it (one
        ``dwordx4`` of the aligned group ``flat - flat % 4``) when the rest of the index is
        a multiple of 4: the unrolled copies' neighbouring loads then find their values."""
        flat = self.canonical(self.flat_index(buf, expr.indices))
        reads = frozenset({element(expr.source, expr.indices)})
        rest, const = split_constant(flat)

        def key(offset: int) -> object:  # the element at rest + offset
            return tvm_ffi.convert([expr.source, ir.expr.StringImm("") if rest is None else rest,
                                    tirx.IntImm("int32", offset)])

        known = self.values.lookup(key(const))
        if known is not None:
            return known
        if not (self.unrolling and buf.scope == "global" and buf.elem_bytes == 4
                and (rest is None or self.bits.facts(rest).tz >= 2)
                and (buf.srd is not None or _whole_groups(buf))):
            value = self.load(buf, expr.source, expr.indices)
            self.values.record(key(const), value, reads=reads)
            return value
        first = const - const % 4
        group = VReg("v", 4, 2)
        base = tirx.IntImm("int32", first) if rest is None else rest + first
        self.memory_op(buf, expr.source, base, group, 16, store=False)
        whole = frozenset({(expr.source, None)})
        for i in range(4):
            self.values.record(key(first + i), Value(Sub(group, i), buf.dtype), reads=whole)
        return Value(Sub(group, const % 4), buf.dtype)

    def canonical(self, expr: object) -> object:
        """``expr`` with pure let variables replaced by their values (the value table's key:
        ``A[i]`` under ``let i = x + 1`` is the same load as ``A[x + 1]``)."""
        if not self.lazy:
            return expr
        for _ in range(8):  # lets of lets
            replaced = substitute(expr, self.lazy)
            if replaced.same_as(expr):
                break
            expr = replaced
        return expr

    def forget_written(self, stmt: object) -> None:
        """Forget reused values that read a buffer ``stmt`` may write (LDS: any barrier)."""
        written, barrier = written_buffers(stmt)
        self.values.forget(lambda loc: any(overlaps(loc, w) for w in written) or (
            barrier and loc[0] in self.buffers
            and self.buffers[loc[0]].scope.startswith("shared")))

    def branch(self, stmt: object) -> None:
        """Select one side of an ``if``: values computed there are not reused after it."""
        with self.values.scope():
            self.stmt_(stmt)
            self.settle_constant_locals()  # before the join

    def s_Evaluate(self, node: tirx.Evaluate) -> None:
        self.evaluate(node)
        self.forget_written(node)  # barriers (other waves' LDS writes), LDS DMA targets

    def evaluate(self, node: tirx.Evaluate) -> None:
        """An op call as a statement: barriers, waits, LDS DMA."""
        call = node.value
        if not isinstance(call, ir.expr.Call) or not isinstance(call.op, ir.Op):
            raise self.error(
                "an expression statement that is not an op call",
                "Only barriers and tilewave ops may stand alone.",
            )
        name = str(call.op.name)
        if name == "tirx.tvm_storage_sync":
            scope = str(call.args[0].value)
            if scope == "warp":
                return  # a wave executes in lockstep: nothing to wait for
            if not scope.startswith("shared"):
                raise self.error(
                    f"tvm_storage_sync('{scope}')",
                    "Only 'shared' (and 'warp') syncs map to s_barrier.",
                )
            self.emit("s_barrier")
        elif name == "tilewave.lds_barrier":
            self.emit("s_barrier")
        elif name in ("tilewave.barrier_signal", "tilewave.barrier_wait"):
            raise TargetFeatureError(
                f"AMDGCN backend {where(self.name, node)}: {name} needs a split barrier, which "
                f"{self.info.name} does not have; lower barriers with the 'basic' style."
            )
        elif name == "tilewave.wait_async_ops":
            count = _const(call.args[0])
            if count is None or not 0 <= count <= 63:
                raise self.error(
                    "wait_async_ops needs a constant count in [0, 63]", "Pass an integer literal."
                )
            self.emit("s_waitcnt", mods=f"vmcnt({count})", comment="wait_async_ops")
        elif name == "tilewave.fence_proxy_async":
            return  # AMD has a single memory proxy: nothing to order
        elif name == "tirx.call_llvm_intrin":
            self.llvm_statement(call)
        else:
            raise self.error(
                f"op {name} as a statement is not supported", "Use tilewave barrier ops or stores."
            )

    def llvm_statement(self, call: ir.expr.Call) -> None:
        """The intrinsics tilewave's ROCm op lowering produces (``LowerTilewaveOps``)."""
        name = callee_name(call)
        if name == "llvm.amdgcn.s.barrier":
            self.emit("s_barrier")
        elif name == "llvm.amdgcn.global.load.lds":
            self.lds_dma(call)
        elif name == "llvm.amdgcn.s.waitcnt" and _const(call.args[-1]) is not None:
            self.emit("s_waitcnt", mods=_decode_waitcnt(_const(call.args[-1])),
                      comment="wait_async_ops")
        else:
            raise self.error(f"LLVM intrinsic {name} as a statement",
                             "The AMDGCN backend knows llvm.amdgcn.s.barrier, s.waitcnt and "
                             "global.load.lds.")

    def lds_dma(self, call: ir.expr.Call) -> None:
        """``call_llvm_intrin("void", "llvm.amdgcn.global.load.lds", T.address_of(G[i]),
        T.address_of(S[base]), size, 0, 0)``: each lane copies ``size`` bytes from its own
        ``G[i]`` to LDS at ``&S[base] + lane * size`` (``base`` is the same for the whole
        wave, as LLVM's intrinsic requires) — one ``buffer_load_* ... lds`` with M0 holding
        the wave's LDS address. The copy completes on ``vmcnt``: wait with
        ``T.tilewave.wait_async_ops(0)`` before a barrier and the LDS reads.
        """
        args = list(call.args)[1:]
        size = _const(args[2]) if len(args) == 5 else None
        if size not in _LDS_DMA or any(_const(x) != 0 for x in args[3:]):
            raise self.error(
                "llvm.amdgcn.global.load.lds needs (src, dst, size, 0, 0) with size 4 or 16",
                "Copy 4 (dword) or 16 (dwordx4) bytes per lane, with offset 0 and aux 0.",
            )
        if size > self.info.lds_dma_max_bytes:
            raise TargetFeatureError(
                f"AMDGCN backend {where(self.name, self.stmt)}: a {size}-byte LDS DMA "
                f"(buffer_load ... lds) does not exist on {self.info.name} (widest: "
                f"{self.info.lds_dma_max_bytes} bytes); copy 4 bytes per lane or target gfx950."
            )
        src, dst = (_address_of(x) for x in args[:2])
        if src is None or dst is None:
            raise self.error(
                "global.load.lds operands are not T.address_of(buffer element)",
                "Pass T.address_of(G[i]) (global) and T.address_of(S[base]) (shared).",
            )
        gbuf, sbuf = self.buffer(src.source), self.buffer(dst.source)
        if gbuf.scope != "global" or not sbuf.scope.startswith("shared"):
            raise self.error(
                f"global.load.lds from {gbuf.scope} '{src.source.name}' to {sbuf.scope} "
                f"'{dst.source.name}'",
                "Copy from a global buffer argument into a shared buffer.",
            )
        # LDS address = M0 + instruction offset + lane * size: the global offset must not
        # use the instruction's offset field, so it all goes to voffset/soffset.
        vaddr, soffset, _ = self.global_address(gbuf, self.flat_index(gbuf, src.indices),
                                                offset_field=False)
        lds = self.expr((self.flat_index(sbuf, dst.indices)) * sbuf.elem_bytes + sbuf.lds_offset)
        if not lds.uniform:
            # the wave's LDS base, as LLVM's lowering of the intrinsic takes it
            wave = self.vreg("s")
            self.emit("v_readfirstlane_b32", [wave], [lds.op])
            lds = Value(wave, "int32")
        self.emit("s_mov_b32", [Sym("m0")], [lds.op], comment="LDS DMA destination")
        assert gbuf.srd is not None
        mods = ("offen " if vaddr != Sym("off") else "") + "offset:0"
        self.emit(_LDS_DMA[size], [], [vaddr, gbuf.srd, soffset], mods, comment=src.source.name)

    def s_BufferStore(self, node: tirx.BufferStore) -> None:
        if _intrin_name_of(node.value) in _MFMA:
            self.mfma(node)
        elif any(isinstance(i, tirx.Ramp) for i in node.indices):
            self.ramp_store(node)
        else:
            buf = self.buffer(node.buffer)
            value = self.expr(node.value, hint=self.local_slot(buf, node.indices))
            self.store(buf, node.buffer, node.indices, value)
        self.forget_written(node)  # after the value: it may reuse a load of the same buffer

    # -- vector loops ----------------------------------------------------------------------
    def ramp_store(self, node: tirx.BufferStore) -> None:
        """``B[Ramp(base, 1, w)] = vector value`` as left by TVM's VectorizeLoop: rewrite it
        into the equivalent ``T.vectorized`` loop and select that."""
        ramp = node.indices[-1]
        if len(node.indices) != 1 or not isinstance(ramp, tirx.Ramp) or _const(ramp.stride) != 1:
            raise self.error("a vector store whose index is not one unit-stride ramp",
                             "Vectorize the innermost, contiguous dimension only.")
        width = int(ramp.lanes)
        lane = tirx.Var("vec_lane", "int32")
        try:
            value = lane_of(node.value, lane)
        except NotScalarizable as err:
            raise self.error(f"a vector store of {err.kind}",
                             "Vectorize elementwise arithmetic, casts and loads only; keep "
                             "this part in a scalar loop.") from None
        store = tirx.BufferStore(node.buffer, value, [ramp.base + lane])
        loop = tirx.For(lane, tirx.IntImm("int32", 0), tirx.IntImm("int32", width),
                        tirx.ForKind.VECTORIZED, store)
        self.vector_loop(loop)

    def vector_loop(self, node: tirx.For) -> None:
        width = _const(node.extent)
        body = node.body
        var = node.loop_var
        if width not in (2, 4) or _const(node.min) != 0 or not isinstance(body, tirx.BufferStore):
            raise self.error(
                "a vectorized loop that is not `for v in T.vectorized(2|4): B[..] = ...`",
                "Vectorize one store of width 2 or 4.",
            )
        self.bits.bind(var, 0, width - 1)
        buf = self.buffer(body.buffer)
        lanes = self.vexpr(body.value, var, width)
        base = self.vector_base(buf, body.indices, var, width)
        if base is None or buf.scope == "local":
            for i in range(width):
                idx = [substitute(x, {var: tirx.IntImm("int32", i)}) for x in body.indices]
                self.store(buf, body.buffer, idx, lanes[i])
            return
        first = lanes[0].op
        if (
            isinstance(first, Sub)
            and first.width == 1
            and first.reg.width == width
            and all(
                isinstance(v.op, Sub) and v.op.reg is first.reg and v.op.index == i
                for i, v in enumerate(lanes)
            )
        ):
            data: Operand = first.reg
        else:
            data = VReg("v", width, 2)
            for i, v in enumerate(lanes):
                self.emit("v_mov_b32", [Sub(data, i)], [v.op])
        self.memory_op(buf, body.buffer, base, data, width * buf.elem_bytes, store=True)

    def vector_base(
        self, buf: SelectedBuffer, indices: object, var: object, width: int
    ) -> object | None:
        """The flat index at lane 0 if lanes are contiguous and aligned, else None."""
        if buf.elem_bytes != 4:
            return None
        flat = self.flat_index(buf, indices)
        base = substitute(flat, {var: tirx.IntImm("int32", 0)})
        step = substitute(flat, {var: tirx.IntImm("int32", 1)})
        diff_rest, diff_const = split_constant(tirx.Sub(step, base))
        rest_a, const_a = split_constant(step)
        rest_b, const_b = split_constant(base)
        if (rest_a is None) != (rest_b is None) or const_a - const_b != 1:
            return None
        if (
            rest_a is not None
            and not rest_a.same_as(rest_b)
            and not tvm_ffi.structural_equal(rest_a, rest_b)
        ):
            return None
        del diff_rest, diff_const
        if self.bits.facts(base).tz < width.bit_length() - 1:
            return None
        if buf.scope != "global" and buf.lds_offset % (width * 4):
            return None
        return base

    def vexpr(self, expr: object, var: object, width: int) -> list[Value]:
        if isinstance(expr, ir.expr.TensorLoad):
            buf = self.buffer(expr.source)
            base = self.vector_base(buf, expr.indices, var, width)
            if base is not None and buf.scope != "local":
                reg = VReg("v", width, 2)
                self.memory_op(buf, expr.source, base, reg, width * 4, store=False)
                return [Value(Sub(reg, i), buf.dtype) for i in range(width)]
        plan = self.plan(expr)
        if plan is None:
            return [
                self.expr(substitute(expr, {var: tirx.IntImm("int32", i)})) for i in range(width)
            ]
        kind, children, dtype = plan
        lanes = [self.vexpr(c, var, width) for c in children]
        return [self.apply(kind, [lv[i] for lv in lanes], dtype) for i in range(width)]

    # -- expressions ---------------------------------------------------------------------
    def expr_is_uniform(self, expr: object) -> bool:
        uniform = True

        def visit(node: object) -> None:
            nonlocal uniform
            if isinstance(node, ir.expr.Var) and node in self.env and not self.env[node].uniform:
                uniform = False
            if isinstance(node, ir.expr.Var) and node in self.lazy:
                uniform = uniform and self.expr_is_uniform(self.lazy[node])
            if isinstance(node, ir.expr.TensorLoad):
                uniform = False

        from tilewave.ir.walker import post_order_visit

        post_order_visit(expr, visit)
        return uniform

    def plan(self, expr: object) -> tuple[str, list[object], str] | None:
        """How to compute ``expr``: (operation kind, operand expressions, result dtype)."""
        dtype = str(expr.ty) if hasattr(expr, "ty") else ""
        cls = type(expr)
        if cls in _TIR_BINARY:
            kind = _TIR_BINARY[cls]
            a, b = expr.a, expr.b
            if kind == "ashr" and dtype in ("uint32", "uint8", "uint16"):
                kind = "lshr"
            if kind == "truncdiv" and dtype not in _INT_TYPES:
                kind = "fdiv"
            if kind in ("floordiv", "floormod", "truncdiv", "truncmod") and (
                dtype.startswith("uint") or self.bits.facts(a).non_negative
            ):
                kind += ":nn"  # a non-negative dividend: floor and truncation agree
            if dtype in _FLOAT_TYPES and kind == "add":
                for mul, other in ((a, b), (b, a)):
                    if isinstance(mul, tirx.Mul):  # contract a*b+c into one FMA
                        return "fma", [mul.a, mul.b, other], dtype
            if dtype in _FLOAT_TYPES and kind == "sub" and isinstance(b, tirx.Mul):
                for k, x in ((b.a, b.b), (b.b, b.a)):
                    if isinstance(k, tirx.FloatImm):  # a - k*x → fma(-k, x, a), as LLVM
                        return "fma", [tirx.FloatImm(str(k.ty), -k.value), x, a], dtype
            if kind == "add" and dtype in _INT_TYPES and self.expr_is_uniform(expr):
                if self.bits.disjoint(a, b) or self.bits.disjoint(b, a):
                    return "or", [a, b], dtype
            if kind == "mul" and dtype == "int32" and self.fits_u24(a) and self.fits_u24(b):
                return "mul24", [a, b], dtype
            return kind, [a, b], dtype
        if isinstance(expr, ir.expr.Call) and isinstance(expr.op, ir.Op):
            name = str(expr.op.name)
            if name in _TIR_CALL_BINARY:
                return _TIR_CALL_BINARY[name], list(expr.args), dtype
            if name == "tirx.fma":
                return "fma", list(expr.args), dtype
            short = name.split(".", 1)[-1]  # tirx.exp, prim.log2
            if name.startswith(("tirx.", "prim.")) and short in _FLOAT_FUNCTIONS:
                return f"fn:{short}", list(expr.args), dtype
            if name == "tirx.reinterpret":
                return "reinterpret", list(expr.args), dtype
        if isinstance(expr, tirx.BitwiseNot):
            return "not", [expr.a], dtype
        if isinstance(expr, tirx.Cast):
            return "cast", [expr.value], dtype
        return None

    def expr(self, expr: object, hint: Operand | None = None) -> Value:
        if isinstance(expr, tirx.IntImm):
            return Value(Imm.of_int(expr.value), str(expr.ty))
        if isinstance(expr, tirx.FloatImm):
            dtype = str(expr.ty)
            if dtype == "float64":  # inline constants mean the same value in f64 operands
                return Value(Imm.of_float(expr.value, "float32"), dtype)
            return Value(Imm.of_float(expr.value, dtype), dtype)
        if isinstance(expr, ir.expr.Var):
            if self.lane is not None and expr.same_as(self.lane[0]):
                return Value(Imm.of_int(self.lane[1]), "int32")
            if expr in self.lazy:
                return self.expr(self.lazy[expr])
            if expr not in self.env:
                raise self.error(
                    f"variable '{expr.name}' has no value here",
                    "Bind it with a loop, a thread binding or a let.",
                )
            return self.env[expr]
        if isinstance(expr, ir.expr.TensorLoad):
            buf = self.buffer(expr.source)
            if buf.scope == "local" or self.lane is not None:
                return self.load(buf, expr.source, expr.indices)
            return self.cached_load(buf, expr)
        if (
            isinstance(expr, ir.expr.Call)
            and isinstance(expr.op, ir.Op)
            and str(expr.op.name) == "tirx.call_llvm_pure_intrin"
        ):
            return self.llvm_intrin(expr, hint)
        select = _select_parts(expr)
        if select is not None:
            return self.into(self.select(*select, str(expr.ty)), hint)
        plan = self.plan(expr)
        if plan is None:
            raise self.unsupported(expr)
        kind, children, dtype = plan
        free = pure_free_vars(expr) if hint is None and self.lane is None else None
        if free is None:
            reads = loaded_buffers(expr) if hint is None and self.lane is None else None
            if reads is None:
                return self.apply(kind, [self.expr(c) for c in children], dtype, hint)
            key = self.canonical(expr)  # over loaded values: reused until a store
            known = self.values.lookup(key)
            if known is None:
                known = self.apply(kind, [self.expr(c) for c in children], dtype)
                self.values.record(key, known, reads=reads)
            return known
        known = self.values.lookup(expr)
        if known is not None:
            return known
        args = [self.expr(c) for c in children]
        frame = self.loops.hoist_target(free)
        value = self.apply_in(frame, kind, args, dtype)
        self.values.record(expr, value, None if frame is None else frame.scope_depth)
        return value

    def select(self, cond: object, true: object, false: object, dtype: str) -> Value:
        """``Select`` / ``if_then_else`` (both sides evaluated; integer abs recognised)."""
        if _is_abs(cond, true, false) and dtype in _INT_TYPES:
            return self.int_abs(self.expr(true))
        return self.select_value(cond, self.expr(true), self.expr(false), dtype)

    def apply_in(self, frame: LoopFrame | None, kind: str, args: list[Value], dtype: str
                 ) -> Value:
        """:meth:`apply`, emitting into ``frame``'s preheader (None: here)."""
        if frame is None:
            return self.apply(kind, args, dtype)
        saved, self.sink = self.sink, frame.preheader
        try:
            return self.apply(kind, args, dtype)
        finally:
            self.sink = saved

    def apply(self, kind: str, args: list[Value], dtype: str, hint: Operand | None = None) -> Value:
        if kind == "cast":
            return self.cast(args[0], dtype, hint)
        if kind == "reinterpret":  # same bits, another type (bfloat16 legalisation)
            return self.into(Value(args[0].op, dtype), hint)
        if kind.startswith("fn:"):
            return self.into(self.float_function(kind[3:], args[0], dtype), hint)
        if kind == "fdiv":
            return self.into(self.fdiv(args[0], args[1], dtype), hint)
        if dtype in (*_FLOAT_TYPES, "float64"):
            return self.float_op(kind, args, dtype, hint)
        if dtype not in _INT_TYPES and dtype != "bool":
            raise self.error(f"integer op on dtype {dtype}", "Use int32 index arithmetic.")
        if kind == "not":
            return self.apply("xor", [args[0], Value(Imm.of_int(-1), dtype)], dtype, hint)
        a, b = args
        base_kind, _, non_negative = kind.partition(":")
        if isinstance(a.op, Imm) and isinstance(b.op, Imm):
            folded = _fold(base_kind, a.op.signed, b.op.signed)
            return self.into(Value(Imm.of_int(folded), dtype), hint)
        if base_kind in _DIVISIONS:
            return self.into(self.divide(base_kind, a, b, bool(non_negative), dtype), hint)
        kind, a, b = self.strength_reduce(kind, a, b)
        if a.uniform and b.uniform:
            if dtype in _NARROW_INTS:
                raise self.error(f"uniform {dtype} arithmetic",
                                 "Compute uniform values in int32 and cast.")
            return self.into(self.sbinop(kind, a, b), hint)
        _, vop, reverse = _INT_OPS[kind]
        srcs = [b.op, a.op] if reverse else [a.op, b.op]
        if dtype in _NARROW_INTS and kind not in ("and", "or", "min", "max", "lshr", "ashr"):
            return self.narrow(Value(self.valu(vop, srcs), dtype), dtype, hint)
        return Value(self.valu(vop, srcs, hint), dtype)

    def float_op(self, kind: str, args: list[Value], dtype: str, hint: Operand | None) -> Value:
        """One float VALU instruction (f16, f32, f64)."""
        if kind not in ("add", "sub", "mul", "max", "min", "fma"):
            raise self.error(f"{kind} of {dtype} values", "Use +, -, *, /, min, max or fma.")
        if dtype == "float64":
            args = [Value(self.f64_operand(a.op), dtype) for a in args]
            if kind == "sub":  # no v_sub_f64: a + (-b), negating b's sign bit
                negated = VReg("v", 2, 2)
                self.emit("v_mov_b32", [Sub(negated, 0)], [Sub(args[1].op, 0)])
                self.emit("v_xor_b32", [Sub(negated, 1)],
                          [Imm.of_int(0x80000000), Sub(args[1].op, 1)])
                kind, args = "add", [args[0], Value(negated, dtype)]
            out = hint if hint is not None else VReg("v", 2, 2)
            self.emit(_FLOAT_OPS[(kind, dtype)], [out], [a.op for a in args])
            return Value(out, dtype)
        if kind == "fma" and dtype == "float32":
            folded = self.fma_literal([a.op for a in args], hint)
            if folded is not None:
                return Value(folded, dtype)
        opcode = _FLOAT_OPS[(kind, dtype)]
        if dtype == "float16":
            args = [Value(self.f16_operand(a.op), a.dtype) for a in args]
        return Value(self.valu(opcode, [a.op for a in args], hint), dtype)

    def fma_literal(self, srcs: list[Operand], hint: Operand | None) -> Operand | None:
        """``a * b + c`` with a literal constant as one VOP2 instruction carrying it
        (``v_fmamk_f32 d, x, K, y``: K a multiplicand; ``v_fmaak_f32 d, x, y, K``: K the
        addend) instead of a ``v_mov`` of the literal and a VOP3 ``v_fma_f32``. The other
        sources: a VGPR where VOP2 needs one (the second), an inline constant or a VGPR for
        the first (the literal already uses gfx9's one constant-bus read). None when no
        operand is a literal."""
        a, b, c = srcs
        literal = [isinstance(x, Imm) and not x.is_inline for x in srcs]
        if literal[0] and not literal[1]:
            a, b, literal = b, a, [literal[1], literal[0], literal[2]]
        if literal[1]:
            opcode, operands = "v_fmamk_f32", [a, b, c]  # d = a * K + c
            x, y = a, c
        elif literal[2]:
            opcode, operands = "v_fmaak_f32", [a, b, c]  # d = a * b + K
            x, y = a, b
        else:
            return None
        if reg_class(y) != "v" and reg_class(x) == "v" and opcode == "v_fmaak_f32":
            x, y = y, x  # the multiplicands commute
        if reg_class(y) != "v":
            y = self.to_vgpr(y)  # fmamk's addend: still one instruction fewer than two moves
        if reg_class(x) == "s" or (isinstance(x, Imm) and not x.is_inline):
            x = self.to_vgpr(x)
        operands = [x, operands[1], y] if opcode == "v_fmamk_f32" else [x, y, operands[2]]
        out = hint or self.vreg("v")
        self.emit(opcode, [out], operands)
        return out

    def f64_operand(self, op: Operand) -> Operand:
        """A float64 source: an inline constant as is, other constants in a VGPR pair."""
        if not isinstance(op, Imm) or op.is_inline:
            return op
        raise self.error("a float64 constant that is not 0, +-0.5, +-1, +-2 or +-4",
                         "Pass it as a float64 buffer element or compute it in float32.")

    def narrow(self, value: Value, dtype: str, hint: Operand | None = None) -> Value:
        """Re-extend an 8/16-bit integer computed in 32 bits (sign for int8, zero else)."""
        bits = _NARROW_INTS[dtype]
        if dtype.startswith("uint"):
            return Value(self.valu("v_and_b32", [Imm.of_int((1 << bits) - 1), value.op], hint),
                         dtype)
        return Value(self.valu("v_bfe_i32", [value.op, Imm.of_int(0), Imm.of_int(bits)], hint),
                     dtype)

    def divide(self, kind: str, a: Value, b: Value, non_negative: bool, dtype: str) -> Value:
        """Integer ``floordiv``/``floormod``/``truncdiv``/``truncmod`` by a positive constant."""
        c = b.op.signed if isinstance(b.op, Imm) else None
        if c is None or c <= 0:
            raise self.error(
                f"{kind} by a non-constant or non-positive divisor",
                "Divide integers only by positive constants (or precompute the quotient).",
            )
        floor = kind.startswith("floor") or non_negative
        is_div = kind.endswith("div")
        if c == 1:
            return a if is_div else Value(Imm.of_int(0), dtype)
        if _is_pow2(c) and floor:
            shift = Value(Imm.of_int(c.bit_length() - 1), "int32")
            if is_div:
                return self.apply("lshr" if non_negative else "ashr", [a, shift], dtype)
            return self.apply("and", [a, Value(Imm.of_int(c - 1), "int32")], dtype)
        if _is_pow2(c):  # truncation of a maybe-negative value: bias negatives by c - 1
            k = c.bit_length() - 1
            sign = self.apply("ashr", [a, Value(Imm.of_int(31), "int32")], dtype)
            bias = self.apply("lshr", [sign, Value(Imm.of_int(32 - k), "int32")], dtype)
            q = self.apply("ashr", [self.apply("add", [a, bias], dtype),
                                    Value(Imm.of_int(k), "int32")], dtype)
            if is_div:
                return q
            low = self.apply("shl", [q, Value(Imm.of_int(k), "int32")], dtype)
            return self.apply("sub", [a, low], dtype)
        return self.divide_by_constant(kind, a, c, non_negative, dtype)

    def fits_u24(self, expr: object) -> bool:
        """``expr`` is known to lie in [0, 2^24) and is not a power-of-two constant (those
        become shifts)."""
        facts = self.bits.facts(expr)
        if isinstance(expr, tirx.IntImm) and _is_pow2(expr.value):
            return False
        return facts.non_negative and facts.hi is not None and facts.hi < (1 << 24)

    def strength_reduce(self, kind: str, a: Value, b: Value) -> tuple[str, Value, Value]:
        """Multiplication by a power of two → shift (divisions: :meth:`divide`)."""
        if kind == "mul24" and (a.uniform and b.uniform):
            kind = "mul"  # the SALU multiply is exact for any 32-bit factors
        if kind == "mul" and isinstance(a.op, Imm):
            a, b = b, a
        c = b.op.signed if isinstance(b.op, Imm) else None
        if kind == "mul" and c is not None and _is_pow2(c):
            return "shl", a, Value(Imm.of_int(c.bit_length() - 1), "int32")
        return kind, a, b

    def sbinop(self, kind: str, a: Value, b: Value) -> Value:
        if isinstance(a.op, Imm) and isinstance(b.op, Imm):
            return Value(Imm.of_int(_fold(kind, a.op.signed, b.op.signed)), a.dtype)
        if kind == "add" and isinstance(b.op, Imm) and b.op.bits == 0:
            return a
        sop = _INT_OPS[kind][0]
        out = self.vreg("s")
        self.emit(sop, [out], [a.op, b.op])
        return Value(out, a.dtype)

    def into(self, value: Value, hint: Operand | None) -> Value:
        if hint is None:
            return value
        self.emit("v_mov_b32", [hint], [value.op])
        return Value(hint, value.dtype)

    def f16_operand(self, op: Operand) -> Operand:
        # f16 VALU ops take 16-bit literals awkwardly on gfx9: materialise non-inline ones.
        if isinstance(op, Imm) and not op.is_inline:
            return self.to_vgpr(op)
        return op

    def cast(self, value: Value, dtype: str, hint: Operand | None) -> Value:
        src = value.dtype
        if src == dtype:
            return self.into(value, hint)
        if src in _INT_TYPES and dtype in _INT_TYPES:
            if isinstance(value.op, Imm):
                bits = _NARROW_INTS.get(dtype, 32)
                v = value.op.signed & ((1 << bits) - 1)
                if dtype == "int8" and v & 0x80:
                    v -= 0x100
                return self.into(Value(Imm.of_int(v), dtype), hint)
            if dtype in _NARROW_INTS:
                return self.narrow(Value(self.to_vgpr(value.op), dtype), dtype, hint)
            return self.into(Value(value.op, dtype), hint)  # 32 bits: the same bits
        if isinstance(value.op, Imm) and src in _INT_TYPES and dtype in _FLOAT_TYPES:
            return self.into(Value(Imm.of_float(float(value.op.signed), dtype), dtype), hint)
        if src in _NARROW_INTS:  # extended to 32 bits already
            return self.cast(Value(value.op, "int32"), dtype, hint)
        if dtype in _NARROW_INTS:
            return self.cast(self.cast(value, "int32", None), dtype, hint)
        opcode = _CONVERT.get((src, dtype))
        if opcode is None:
            via = "float32" if "float16" in (src, dtype) else None
            if via is not None and (src, via) in _CONVERT and (via, dtype) in _CONVERT:
                return self.cast(self.cast(value, via, None), dtype, hint)
            raise self.error(f"cast from {src} to {dtype}",
                             "docs/amdgcn.md lists the casts the backend selects.")
        if dtype == "float64":
            out = hint if hint is not None else VReg("v", 2, 2)
            self.emit(opcode, [out], [self.to_vgpr(value.op)])
            return Value(out, dtype)
        return Value(self.valu(opcode, [value.op], hint), dtype)

    def scalar_compare(self, cond: object, negate: bool) -> None:
        cmp = _CMP[type(cond)]
        if negate:
            cmp = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}[cmp]
        a, b = self.expr(cond.a), self.expr(cond.b)
        if str(cond.a.ty) not in _INT_TYPES:
            raise self.error("a uniform float comparison", "Compare integers in branches.")
        if isinstance(a.op, Imm) and not isinstance(b.op, Imm):
            a, b, cmp = b, a, _SWAPPED[cmp]
        self.emit(f"s_cmp_{cmp.replace('ne', 'lg')}_i32", [], [self.to_sgpr(a.op), b.op])

    def lane_mask(self, cond: object) -> VReg:
        """A 64-bit lane mask (SGPR pair) that holds ``cond`` per lane."""
        if isinstance(cond, tirx.And):
            ranges, others = _ranges(_conjuncts(cond))
            if ranges and not all(self.expr_is_uniform(x) for x, _, _ in ranges):
                masks = [self.range_mask(*r) for r in ranges]
                masks += [self.lane_mask(c) for c in others]
                out = masks[0]
                for m in masks[1:]:
                    combined = self.vreg("s", 2, 2)
                    self.emit("s_and_b64", [combined], [out, m])
                    out = combined
                return out
        if isinstance(cond, tirx.And | tirx.Or):
            ma, mb = self.lane_mask(cond.a), self.lane_mask(cond.b)
            out = self.vreg("s", 2, 2)
            self.emit("s_and_b64" if isinstance(cond, tirx.And) else "s_or_b64", [out], [ma, mb])
            return out
        if not isinstance(cond, tuple(_CMP)):
            raise self.error(
                f"condition {type(cond).__name__}", "Use comparisons joined by `and`/`or`."
            )
        cmp = _CMP[type(cond)]
        a, b = self.expr(cond.a), self.expr(cond.b)
        dtype = a.dtype if a.dtype != "bool" else "int32"
        suffix = {"int32": "i32", "uint32": "u32", "float32": "f32", "float16": "f16"}[dtype]
        if reg_class(a.op) != "v" and reg_class(b.op) == "v":
            a, b, cmp = b, a, _SWAPPED[cmp]
        out = self.vreg("s", 2, 2)
        opcode = f"v_cmp_{cmp}_{suffix}_e64"
        self.emit(opcode, [out], self.legal_valu(opcode, [a.op, b.op]))
        return out

    def range_mask(self, x: object, lo: int, hi: int) -> VReg:
        """``lo <= x < hi`` as one unsigned compare: ``x - lo <u hi - lo`` (x below lo wraps
        to a large unsigned value)."""
        terms, const = self.index_terms(x)
        known = self.values.lookup(self.canonical(x))  # x in a register (another bound)
        if known is None and lo and len(terms) == 2 and Imm.of_int(const - lo).is_inline:
            # (a + b) - lo as two adds (never an OR of disjoint bits): the peephole makes
            # them one v_add3_u32 (by * 16 + ty - 1: one instruction, not an OR and a sub)
            a, b = (self.expr(t) for t in terms)
            total = self.apply("add", [a, b], "int32")
            value = self.apply("add", [total, Value(Imm.of_int(const - lo), "int32")], "int32")
        else:
            value = known if known is not None else self.expr(x)
            if lo:
                value = self.apply("sub", [value, Value(Imm.of_int(lo), "int32")], "int32")
        width = Imm.of_int(hi - lo)
        bound = width if width.is_inline else self.constant(width.bits, "s")
        return self.cmp_mask("v_cmp_gt_u32_e64", bound, value.op)

    def llvm_intrin(self, call: ir.expr.Call, hint: Operand | None) -> Value:
        name = callee_name(call)
        if name not in _MFMA:
            raise self.error(
                f"LLVM intrinsic {name or call.args[0]}", f"The backend knows {', '.join(_MFMA)}."
            )
        raise self.error(
            f"{name} used inside an expression",
            "Store the MFMA result straight into a local accumulator: "
            "acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin('float32x4', ...).",
        )

    # -- matrix cores ----------------------------------------------------------------------
    def mfma(self, node: tirx.BufferStore) -> None:
        """``acc[T.Ramp(c, 1, 4)] = call_llvm_pure_intrin("float32x4", "llvm.amdgcn.mfma...",
        a, b, acc[T.Ramp(c, 1, 4)], 0, 0, 0)``: one ``v_mfma`` whose D and C are the same
        four registers of ``acc`` (the accumulator chains without copies)."""
        call = node.value
        name = callee_name(call)
        opcode, in_dtype = _MFMA[name]
        args = list(call.args)[1:]
        if len(args) != 6 or any(_const(x) != 0 for x in args[3:]):
            raise self.error(
                f"{name} with operands {', '.join(str(x) for x in args[3:])} after a, b, c",
                "Pass a, b, c and then cbsz=0, abid=0, blgp=0 (no broadcast modifiers).",
            )
        dst = self.accumulator(node.buffer, node.indices, "destination")
        a = self.mfma_fragment(args[0], in_dtype, "A")
        b = self.mfma_fragment(args[1], in_dtype, "B")
        c = self.mfma_accumulator_in(args[2], dst)
        self.emit(opcode, [dst], [a, b, c], comment=name)

    def accumulator(self, var: object, indices: object, what: str) -> Sub:
        """Four consecutive elements of a float32 local buffer, as a VGPR tuple."""
        buf = self.buffer(var)
        indices = list(indices)
        ramp = indices[0] if len(indices) == 1 else None
        base = _const(ramp.base) if isinstance(ramp, tirx.Ramp) else None
        if (
            buf.scope != "local"
            or buf.dtype != "float32"
            or base is None
            or _const(ramp.stride) != 1
            or int(ramp.lanes) != 4
            or base % 4
            or base + 4 > buf.numel
        ):
            raise self.error(
                f"MFMA {what} '{var.name}' is not four float32 elements of a local buffer at a "
                "constant multiple of 4",
                "Use acc[T.Ramp(4 * i, 1, 4)] of a T.alloc_buffer((4 * n,), 'float32', "
                "scope='local').",
            )
        assert buf.regs is not None
        first = buf.regs[base]
        assert isinstance(first, Sub)
        return Sub(first.reg, base, 4)

    def mfma_accumulator_in(self, expr: object, dst: Sub) -> Operand:
        """The C operand: ``dst`` itself or an inline constant (0 for a fresh tile).

        Another slice or a literal is first copied into ``dst``: with C always D (or an
        inline constant), no VALU can overwrite a C the MFMA is still reading, a hazard
        the hazard table then need not model.
        """
        source: list[Operand]
        if isinstance(expr, tirx.Broadcast) and isinstance(expr.value, tirx.FloatImm):
            value = Imm.of_float(expr.value.value, "float32")
            if value.is_inline:
                return value
            source = [value] * 4
        elif isinstance(expr, ir.expr.TensorLoad):
            c = self.accumulator(expr.source, expr.indices, "accumulator input")
            if c == dst:
                return dst
            source = [Sub(c.reg, c.index + i) for i in range(4)]
        else:
            raise self.error(
                f"MFMA accumulator input {type(expr).__name__}",
                "Pass the accumulator (acc[T.Ramp(0, 1, 4)]) or T.Broadcast(T.float32(0), 4).",
            )
        for i, op in enumerate(source):
            self.emit("v_mov_b32", [Sub(dst.reg, dst.index + i)], [op])
        return dst

    def mfma_fragment(self, expr: object, dtype: str, which: str) -> Operand:
        """An A/B operand: four 16-bit values loaded as one 8-byte access into a 2-VGPR tuple."""
        expr = _bf16_storage_load(expr)
        ramp = None
        if isinstance(expr, ir.expr.TensorLoad):
            indices = list(expr.indices)
            ramp = indices[-1] if indices and isinstance(indices[-1], tirx.Ramp) else None
        if ramp is None or _const(ramp.stride) != 1 or int(ramp.lanes) != 4:
            raise self.error(
                f"MFMA operand {which} is not a contiguous 4-element load",
                f"Pass {which} as X[..., T.Ramp(k, 1, 4)] of a {dtype} global or shared buffer.",
            )
        buf = self.buffer(expr.source)
        storage = ("bfloat16", "uint16") if dtype == "bfloat16" else (dtype,)
        if buf.dtype not in storage or buf.scope == "local":
            raise self.error(
                f"MFMA operand {which} reads {buf.scope} {buf.dtype} buffer '{expr.source.name}'",
                f"{_MFMA_NAMES[dtype]} takes {dtype} fragments from global or shared memory.",
            )
        flat = self.flat_index(buf, [*indices[:-1], ramp.base])
        if self.bits.facts(flat).tz < 2:
            raise self.error(
                f"MFMA operand {which} index {flat} is not provably a multiple of 4",
                "Fragments are read as one 8-byte access; make the K offset a multiple of 4.",
            )
        regs = VReg("v", 2, 2)
        self.memory_op(buf, expr.source, flat, regs, 8, store=False)
        return regs

    # -- memory --------------------------------------------------------------------------
    def buffer(self, var: object) -> SelectedBuffer:
        if var not in self.buffers:
            raise self.error(
                f"buffer '{var.name}' is not a kernel argument or allocation",
                "Declare buffers as PrimFunc parameters or with T.alloc_buffer.",
            )
        return self.buffers[var]

    def flat_index(self, buf: SelectedBuffer, indices: object) -> object:
        indices = list(indices)
        if len(indices) != len(buf.shape):
            raise self.error(
                "an access with the wrong number of indices", "Index every dimension of the buffer."
            )
        flat: object = indices[0]
        for dim, idx in zip(buf.shape[1:], indices[1:], strict=True):
            flat = flat * (tirx.IntImm("int32", dim) if isinstance(dim, int) else dim) + idx
        return flat

    def local_slot(self, buf: SelectedBuffer, indices: object) -> Operand | None:
        if buf.scope != "local":
            return None
        flat = self.flat_index(buf, indices)
        rest, const = split_constant(flat)
        if rest is not None:
            if self.lane is not None:
                return None
            raise self.error(
                "a local buffer indexed by a variable",
                "Index local buffers with constants (unroll the loop).",
            )
        if not 0 <= const < buf.numel:
            raise self.error(f"local index {const} out of bounds {buf.numel}", "Fix the index.")
        assert buf.regs is not None
        return buf.regs[const]

    def load(self, buf: SelectedBuffer, var: object, indices: object) -> Value:
        if buf.scope == "local":
            slot = self.local_slot(buf, indices)
            assert slot is not None
            return self.constant_locals.get(slot, Value(slot, buf.dtype))
        out = VReg("v", 2, 2) if buf.elem_bytes == 8 else self.vreg("v")
        self.memory_op(buf, var, self.flat_index(buf, indices), out, buf.elem_bytes, store=False)
        return Value(out, buf.dtype)

    def store(self, buf: SelectedBuffer, var: object, indices: object, value: Value) -> None:
        if value.dtype != buf.dtype:
            raise self.error(
                f"storing a {value.dtype} value into {buf.dtype} buffer '{var.name}'",
                "Cast the value to the buffer's dtype.",
            )
        if buf.scope == "local":
            slot = self.local_slot(buf, indices)
            assert slot is not None
            if (isinstance(value.op, Imm) and buf.dtype in ("float32", "int32")
                    and var not in self.vector_locals):  # MFMA reads those registers directly
                self.constant_locals[slot] = value
                return
            self.constant_locals.pop(slot, None)
            if value.op is not slot:
                self.copy(slot, value)
            return
        data = self.to_vgpr(self.f16_operand(value.op))
        if buf.elem_bytes == 8 and not isinstance(data, VReg | Sub):
            pair = VReg("v", 2, 2)
            self.copy(pair, value)
            data = pair
        self.memory_op(buf, var, self.flat_index(buf, indices), data, buf.elem_bytes, store=True)

    def copy(self, dst: Operand, value: Value) -> None:
        """``dst = value`` (a VGPR pair for float64)."""
        if value.dtype != "float64":
            self.emit("v_mov_b32", [dst], [self.f16_operand(value.op)])
            return
        if isinstance(value.op, Imm):  # an inline constant: its f64 bits, half by half
            bits = struct.unpack("<Q", struct.pack("<d", value.op.float_value()))[0]
            halves: list[Operand] = [Imm.of_int(bits & 0xFFFFFFFF), Imm.of_int(bits >> 32)]
        else:
            halves = [Sub(value.op, 0), Sub(value.op, 1)]
        for i, half in enumerate(halves):
            self.emit("v_mov_b32", [Sub(dst, i)], [half])

    def byte_offset(self, buf: SelectedBuffer, flat: object) -> tuple[Value | None, int]:
        """(per-access byte offset or None, constant byte offset) of element ``flat`` of an
        LDS buffer. The constant goes to the ``ds_*`` offset field, which is added unsigned:
        when the rest may be negative the constant stays in the register part."""
        terms, const = self.index_terms(flat)
        if terms and const and not self.non_negative(terms):
            terms, const = [*terms, tirx.IntImm("int32", const)], 0
        offset = self.scaled(terms, buf.elem_bytes) if terms else None
        return offset, const * buf.elem_bytes

    def index_terms(self, flat: object) -> tuple[list[object], int]:
        """The non-constant summands of ``flat`` (lets looked through) and its constant."""
        rest, const = split_constant(flat)
        terms = []
        for term in _add_terms(rest, self.lazy) if rest is not None else []:
            part, extra = split_constant(term)
            const += extra
            if part is not None:
                terms.append(part)
        return terms, const

    def scaled(self, terms: list[object], elem_bytes: int) -> Value:
        """The byte offset ``sum(terms) * elem_bytes``, the scale folded into each term."""
        total = _sum([_scale(term, elem_bytes) for term in terms])
        assert total is not None
        return self.expr(total)

    def global_address(self, buf: SelectedBuffer, flat: object, offset_field: bool
                       ) -> tuple[Operand, Operand, int]:
        """(vaddr, soffset, instruction offset) addressing element ``flat`` of ``buf``.

        Per-lane terms of the index go to ``vaddr``; uniform terms to ``soffset`` when their
        sum is known to be non-negative (the hardware adds ``soffset`` unsigned), so a loop
        counter's part of an address stays on the SALU and the per-lane part can be hoisted
        out of the loop. The constant goes to the offset field if it fits and
        ``offset_field`` allows.

        Every part is added as an unsigned 32-bit number and the bounds check compares the
        sum with ``num_records``, so a part that may be negative (``bx * 64 + tx - 1`` at
        ``tx = 0``: ``vaddr`` would be ``0xFFFFFFFC``) would turn a valid access into an
        out-of-range one (loads read 0, stores are dropped). Only parts provably
        non-negative are split; otherwise the whole index goes to ``vaddr``, where it is
        the element's own (non-negative, for any valid access) offset.
        """
        terms, const = self.index_terms(flat)
        lane_terms: list[object] = []
        uniform_terms: list[object] = []
        for term in terms:
            (uniform_terms if self.expr_is_uniform(term) else lane_terms).append(term)
        const_bytes = const * buf.elem_bytes
        if (offset_field and const_bytes > MAX_BUFFER_OFFSET and self.non_negative(lane_terms)
                and self.non_negative(uniform_terms)):
            # the 4 KiB window in soffset (one SGPR shared by every access in it), the rest
            # in the offset field: no per-access VGPR address (unrolled tiles stay small)
            window = const_bytes - const_bytes % (MAX_BUFFER_OFFSET + 1)
            uniform_terms.append(tirx.IntImm("int32", window // buf.elem_bytes))
            const_bytes -= window
            const = const_bytes // buf.elem_bytes
        extra = tirx.IntImm("int32", const)
        if const and not (offset_field and 0 <= const_bytes <= MAX_BUFFER_OFFSET):
            if uniform_terms and self.non_negative([*uniform_terms, extra]):
                uniform_terms.append(extra)  # an SALU add, the sum still non-negative
            elif lane_terms:
                lane_terms.append(extra)
            else:
                uniform_terms.append(extra)
            const_bytes = 0
        if lane_terms and not (self.non_negative(lane_terms)
                               and self.non_negative(uniform_terms)):
            # one signed index, whole, in vaddr
            lane_terms = [*lane_terms, *uniform_terms] + ([extra] if const_bytes else [])
            uniform_terms, const_bytes = [], 0
        elif not lane_terms and const_bytes and not self.non_negative(uniform_terms):
            uniform_terms, const_bytes = [*uniform_terms, extra], 0
        vaddr: Operand = Sym("off")
        if lane_terms:
            vaddr = self.to_vgpr(self.scaled(lane_terms, buf.elem_bytes).op)
        soffset: Operand = Imm.of_int(0)
        if uniform_terms:
            op = self.scaled(uniform_terms, buf.elem_bytes).op
            if isinstance(op, Imm):
                soffset = op if op.is_inline else self.constant(op.bits, "s")
            else:
                soffset = self.to_sgpr(op)
        return vaddr, soffset, const_bytes

    def non_negative(self, terms: list[object]) -> bool:
        """The sum of ``terms`` (an empty sum is 0) is provably >= 0."""
        total = _sum(terms)
        return total is None or self.bits.facts(total).non_negative

    def memory_op(
        self, buf: SelectedBuffer, var: object, flat: object, data: Operand, size: int, store: bool
    ) -> None:
        if buf.scope == "global" and buf.srd is None:
            self.global_op(buf, flat, data, size, store, var)
        elif buf.scope == "global":
            self.buffer_op(buf, flat, data, size, store, var)
        else:
            offset, const = self.byte_offset(buf, flat)
            self.ds_op(buf, offset, const + buf.lds_offset, data, size, store)

    def buffer_op(
        self, buf: SelectedBuffer, flat: object, data: Operand, size: int, store: bool, var: object
    ) -> None:
        vaddr, soffset, const = self.global_address(buf, flat, offset_field=True)
        assert buf.srd is not None
        mods = ("offen " if vaddr != Sym("off") else "") + f"offset:{const}"
        table = _GLOBAL_STORE if store else _GLOBAL_LOAD
        opcode = table[size]
        if buf.dtype == "int8" and not store:
            opcode = _SIGNED_LOAD[opcode]
        if store:
            self.emit(opcode, [], [data, vaddr, buf.srd, soffset], mods, comment=var.name)
        else:
            self.emit(opcode, [data], [vaddr, buf.srd, soffset], mods, comment=var.name)

    def ds_op(
        self,
        buf: SelectedBuffer,
        offset: Value | None,
        const: int,
        data: Operand,
        size: int,
        store: bool,
    ) -> None:
        if offset is None:
            addr: Operand = self.to_vgpr(Imm.of_int(0))
        else:
            addr = self.to_vgpr(offset.op)
        if const < 0 or const > MAX_DS_OFFSET:
            addr = self.valu("v_add_u32", [Imm.of_int(const), addr])
            const = 0
        mods = f"offset:{const}" if const else ""
        if store:
            self.emit(_DS_WRITE[size], [], [addr, data], mods)
        else:
            opcode = _DS_READ[size]
            self.emit(_SIGNED_LOAD[opcode] if buf.dtype == "int8" else opcode, [data], [addr],
                      mods)


def _whole_groups(buf: SelectedBuffer) -> bool:
    """A constant element count that is a multiple of 4: an aligned group of four around an
    element inside the buffer lies inside it (no bounds check protects a global load)."""
    return all(isinstance(d, int) for d in buf.shape) and buf.numel % 4 == 0


def _add_terms(expr: object, lets: dict[object, object]) -> list[object]:
    """The summands of a tree of ``+``, looking through the let variables in ``lets``."""
    if isinstance(expr, ir.expr.Var) and expr in lets:
        return _add_terms(lets[expr], lets)
    if isinstance(expr, tirx.Add):
        return _add_terms(expr.a, lets) + _add_terms(expr.b, lets)
    return [expr]


def _bf16_storage_load(expr: object) -> object:
    """Undo TVM's bfloat16 legalisation of an MFMA operand.

    ``BF16ComputeLegalize`` widens a ``bfloat16x4`` load of a (now ``uint16``) buffer to
    ``reinterpret("float32x4", Cast("uint32x4", X[ramp]) << 16)``; the MFMA wants the raw
    16-bit values, so the load itself is returned. Anything else is returned unchanged.
    """
    if not (isinstance(expr, ir.expr.Call) and str(expr.op.name) == "tirx.reinterpret"):
        return expr
    shifted = expr.args[0]
    if not isinstance(shifted, tirx.LShift):
        return expr
    widened, amount = shifted.a, shifted.b
    amount = amount.value if isinstance(amount, tirx.Broadcast) else amount
    if isinstance(widened, tirx.Cast) and _const(amount) == 16:
        load = widened.value
        if isinstance(load, ir.expr.TensorLoad) and str(load.ty).startswith("uint16"):
            return load
    return expr


def _address_of(expr: object) -> ir.expr.TensorLoad | None:
    """The element ``T.address_of(X[i])`` points to, or None."""
    if (
        isinstance(expr, ir.expr.Call)
        and str(expr.op.name) == "tirx.address_of"
        and isinstance(expr.args[0], ir.expr.TensorLoad)
    ):
        return expr.args[0]
    return None


def _intrin_name_of(expr: object) -> str:
    """The LLVM intrinsic ``expr`` calls, or "" when it is not a ``call_llvm_(pure_)intrin``."""
    if (
        isinstance(expr, ir.expr.Call)
        and isinstance(expr.op, ir.Op)
        and str(expr.op.name) in ("tirx.call_llvm_pure_intrin", "tirx.call_llvm_intrin")
    ):
        return callee_name(expr)
    return ""


def _decode_waitcnt(simm16: int) -> str:
    # gfx9 S_WAITCNT fields: vmcnt [3:0] and [15:14], expcnt [6:4], lgkmcnt [11:8].
    vm = (simm16 & 0xF) | ((simm16 >> 14) & 0x3) << 4
    lgkm = (simm16 >> 8) & 0xF
    parts = [f"vmcnt({vm})"] if vm < 63 else []
    parts += [f"lgkmcnt({lgkm})"] if lgkm < 15 else []
    return " ".join(parts) or "vmcnt(63)"


def _fold(kind: str, a: int, b: int) -> int:
    ops: dict[str, Callable[[int, int], int]] = {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "mul24": lambda x, y: x * y,
        "and": lambda x, y: x & y,
        "or": lambda x, y: x | y,
        "xor": lambda x, y: x ^ y,
        "shl": lambda x, y: x << y,
        "ashr": lambda x, y: x >> y,
        "lshr": lambda x, y: (x & 0xFFFFFFFF) >> y,
        "min": min,
        "max": max,
        "floordiv": lambda x, y: x // y,
        "floormod": lambda x, y: x % y,
    }
    return ops[kind](a, b)


def select(func: tirx.PrimFunc, info: TargetInfo) -> Program:
    """Select instructions for ``func`` (a kernel with thread bindings) on target ``info``.

    Returns:
        the kernel IR over virtual registers, ending in ``s_endpgm``.

    Raises:
        MalformedKernelError: a construct the backend does not handle (message says which
            and what to write instead).
        TargetFeatureError: an op needing a feature ``info`` lacks (split barriers on gfx9).
        SharedMemoryLimitError: more static LDS than the target has.
    """
    sel = _Selector(func, info)
    sel.scan_launch()
    sel.prologue()
    sel.stmt_(func.body)
    sel.emit("s_endpgm")
    place_late_prologue(sel.prog.body, sel.late_prologue)
    return sel.prog
