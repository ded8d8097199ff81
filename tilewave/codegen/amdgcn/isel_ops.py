"""Instruction sequences for the operations beyond one-instruction arithmetic.

A mixin of the selector (:class:`tilewave.codegen.amdgcn.isel._Selector`): transcendental
functions, IEEE float division, ``Select`` / ``if_then_else``, absolute values and integer
division by constants. The float sequences are the ones LLVM's AMDGPU backend emits for the
same TIR (``tilewave.build(kernel, "gfx942")`` shows them), so results agree with TVM's own
ROCm code:

==============  ================================================================================
``exp``         ``x * log2(e)`` split into a rounded integer ``k`` and an extra-precise rest,
                ``v_exp_f32`` of the rest, ``v_ldexp_f32`` by ``k``; 0 below -103.28, +inf
                above 88.72 (LLVM's ``lowerFEXP``, without the fma contraction LLVM applies
                to ``ph - k``, which loses accuracy)
``exp2``        inputs below -126 raised by 64 and the result scaled by 2^-64 (denormal results)
``log2``        inputs below 2^-126 scaled by 2^32 and 32 subtracted (denormal inputs)
``log``         ``log2`` times ln 2 in two parts (an FMA-split product), infinities kept
``sqrt``        ``v_sqrt_f32`` then one correction step on the neighbouring floats (correctly
                rounded), inputs below 2^-32 scaled by 2^32
``rsqrt``       ``v_rsq_f32`` (1 ulp) with inputs below 2^-126 scaled by 2^24
``a / b``       ``v_div_scale`` / ``v_rcp`` / Newton-Raphson FMAs / ``v_div_fmas`` /
                ``v_div_fixup``: correctly rounded, IEEE special cases included
``x // c``      multiply-high by a magic constant and shift (Granlund-Montgomery); non-negative
                dividends use the unsigned form, others the signed one with the floor fix-up
==============  ================================================================================
"""

from __future__ import annotations

from tvm import ir

from tilewave.codegen.amdgcn.kir import Imm, Operand, Sub, Sym, VReg, reg_class
from tilewave.codegen.amdgcn.selected import Value

__all__ = ["OpSelection", "signed_magic", "unsigned_magic"]

_LOG2E = 0x3FB8AA3B  # log2(e) as float32
_LOG2E_LO = 0x32A5705F  # log2(e) - float32(log2(e))
_LN2 = 0x3F317217
_LN2_LO = 0x3377D1CF
_EXP_UNDERFLOW = 0xC2CE8ED0  # -103.27893: exp(x) rounds to 0 below
_EXP_OVERFLOW = 0x42B17218  # 88.72284: exp(x) rounds to +inf above
_INF = 0x7F800000
_SMALLEST_NORMAL = 0x00800000  # 2^-126
_FINITE_CLASSES = 0x1F8  # v_cmp_class mask: -normal .. +normal (no NaN, no infinity)
_SQRT_SPECIAL = 0x260  # v_cmp_class mask: -0, +0, +inf (sqrt returns its input)


def unsigned_magic(divisor: int) -> tuple[int, int]:
    """(multiplier, shift) with ``x // divisor == mulhi_u32(x, multiplier) >> shift`` for
    every ``0 <= x < 2**31`` (Granlund-Montgomery with a 31-bit dividend)."""
    bits = (divisor - 1).bit_length()  # ceil(log2(divisor))
    multiplier = -(-(1 << (31 + bits)) // divisor)  # ceil(2^(31+l) / d) < 2^32
    return multiplier, bits - 1


def signed_magic(divisor: int) -> tuple[int, int]:
    """(multiplier as signed 32-bit, shift) for truncating signed division by ``divisor`` >= 2
    (Hacker's Delight, figure 10-1)."""
    two31 = 1 << 31
    anc = two31 - 1 - (two31 % divisor)
    p = 31
    q1, r1 = divmod(two31, anc)
    q2, r2 = divmod(two31, divisor)
    while True:
        p += 1
        q1, r1 = 2 * q1, 2 * r1
        if r1 >= anc:
            q1, r1 = q1 + 1, r1 - anc
        q2, r2 = 2 * q2, 2 * r2
        if r2 >= divisor:
            q2, r2 = q2 + 1, r2 - divisor
        delta = divisor - r2
        if not (q1 < delta or (q1 == delta and r1 == 0)):
            break
    multiplier = (q2 + 1) & 0xFFFFFFFF
    return multiplier - (1 << 32) if multiplier & 0x80000000 else multiplier, p - 32


class OpSelection:
    """Multi-instruction operations, mixed into the selector (which supplies ``emit``,
    ``valu``, ``vreg``, ``lane_mask``, ``error``, ``values`` and ``loops``)."""

    # -- constants ---------------------------------------------------------------------------
    def constant(self, bits: int, cls: str = "v", register: bool = False) -> Operand:
        """A register holding the 32-bit pattern ``bits``, materialised once per scope and
        before the outermost enclosing loop (so loops do not re-create it). An inline
        constant is returned as the immediate unless ``register`` asks for a register."""
        imm = Imm.of_int(bits)
        if imm.is_inline and not register:
            return imm
        key = ir.expr.StringImm(f"constant:{cls}:{bits & 0xFFFFFFFF:#x}")
        known = self.values.lookup(key)
        if known is not None:
            return known
        frame = self.loops.hoist_target(set())
        out = self.vreg(cls)
        saved = self.sink
        if frame is not None:
            self.sink = frame.preheader
        try:
            self.emit("v_mov_b32" if cls == "v" else "s_mov_b32", [out], [imm])
        finally:
            self.sink = saved
        self.values.record(key, out, None if frame is None else frame.scope_depth)
        return out

    def cmp_mask(self, opcode: str, a: Operand, b: Operand) -> VReg:
        """A lane mask from a VOP3 compare ``opcode`` (``v_cmp_*_e64``) of ``a`` and ``b``."""
        out = self.vreg("s", 2, 2)
        self.emit(opcode, [out], self.legal_valu(opcode, [a, b]))
        return out

    def cndmask(self, false: Operand, true: Operand, mask: Operand) -> Operand:
        """``mask ? true : false`` per lane (``v_cndmask_b32_e64``)."""
        out = self.vreg("v")
        srcs = [false, true]
        # the mask (an SGPR pair) takes the constant bus: other scalars go to VGPRs
        srcs = [s if reg_class(s) == "v" or (isinstance(s, Imm) and s.is_inline)
                else self.to_vgpr(s) for s in srcs]
        self.emit("v_cndmask_b32_e64", [out], [*srcs, mask])
        return out

    # -- select ------------------------------------------------------------------------------
    def select_value(self, cond: object, true: Value, false: Value, dtype: str) -> Value:
        """``cond ? true : false`` per lane: both sides are already computed (the selector
        evaluates both; global loads out of bounds read 0), the condition becomes a lane
        mask and each 32-bit half one ``v_cndmask_b32``."""

        mask = self.lane_mask(cond)
        if dtype == "float64":
            t, f = (self.f64_register(v.op) for v in (true, false))
            out = VReg("v", 2, 2)
            for half in range(2):
                self.emit("v_cndmask_b32_e64", [Sub(out, half)],
                          [Sub(f, half), Sub(t, half), mask])
            return Value(out, dtype)
        return Value(self.cndmask(self.f16_operand(false.op), self.f16_operand(true.op), mask),
                     dtype)

    # -- float functions ------------------------------------------------------------------
    def float_function(self, name: str, x: Value, dtype: str) -> Value:
        """``tirx.<name>(x)`` for the float functions the backend knows."""

        if dtype == "float16" and name != "fabs":
            wide = self.cast(x, "float32", None)
            return self.cast(self.float_function(name, wide, "float32"), "float16", None)
        if dtype not in ("float32", "float16"):
            raise self.error(f"{name} of a {dtype} value",
                             "Compute transcendental functions in float32 (cast around it).")
        handler = {
            "exp": self.exp_f32, "exp2": self.exp2_f32, "log": self.log_f32,
            "log2": self.log2_f32, "sqrt": self.sqrt_f32, "rsqrt": self.rsqrt_f32,
            "fabs": self.fabs,
        }[name]
        return Value(handler(self.to_vgpr(x.op), dtype), dtype)

    def fabs(self, x: Operand, dtype: str) -> Operand:
        """Clear the sign bit."""
        mask = 0x7FFF if dtype == "float16" else 0x7FFFFFFF
        return self.valu("v_and_b32", [Imm.of_int(mask), x])

    def exp_f32(self, x: Operand, dtype: str = "float32") -> Operand:
        """``e**x`` as LLVM's accurate ``lowerFEXP`` computes it."""
        log2e = self.constant(_LOG2E, "s")
        ph = self.valu("v_mul_f32", [Imm.of_int(_LOG2E), x])
        pl = self.valu("v_fma_f32_negc", [x, log2e, ph])  # the rounding error of ph
        k = self.valu("v_rndne_f32", [ph])
        pl = self.valu("v_fma_f32", [x, self.constant(_LOG2E_LO, "s"), pl])
        # ph - k is exact (k is ph rounded to an integer). LLVM contracts ph's multiply into
        # this subtraction (fma(x, log2e, -k)) under TVM's fast fp-contract, which counts
        # ph's rounding error twice (up to ~2e-6 relative error, measured on the simulator)
        rest = self.valu("v_sub_f32", [ph, k])
        rest = self.valu("v_add_f32", [rest, pl])
        k_int = self.valu("v_cvt_i32_f32", [k])
        r = self.valu("v_exp_f32", [rest])
        r = self.valu("v_ldexp_f32", [r, k_int])
        keep = self.cmp_mask("v_cmp_ngt_f32_e64", self.constant(_EXP_UNDERFLOW, "s"), x)
        r = self.cndmask(Imm.of_int(0), r, keep)
        finite = self.cmp_mask("v_cmp_nlt_f32_e64", self.constant(_EXP_OVERFLOW, "s"), x)
        return self.cndmask(self.constant(_INF), r, finite)

    def exp2_f32(self, x: Operand, dtype: str = "float32") -> Operand:
        """``2**x``: tiny results (x < -126) computed as 2**(x + 64) * 2**-64."""
        tiny = self.cmp_mask("v_cmp_gt_f32_e64", self.constant(0xC2FC0000, "s"), x)  # -126
        bias = self.cndmask(Imm.of_int(0), self.constant(0x42800000), tiny)  # 64.0
        r = self.valu("v_exp_f32", [self.valu("v_add_f32", [x, bias])])
        scale = self.cndmask(Imm.of_int(0), self.constant(-64 & 0xFFFFFFFF), tiny)
        return self.valu("v_ldexp_f32", [r, scale])

    def _log2_scaled(self, x: Operand) -> tuple[Operand, VReg]:
        """(v_log_f32 of ``x``, denormal inputs scaled by 2**32; the mask of those lanes)."""
        tiny = self.cmp_mask("v_cmp_gt_f32_e64", self.constant(_SMALLEST_NORMAL, "s"), x)
        shift = self.cndmask(Imm.of_int(0), Imm.of_int(32), tiny)
        return self.valu("v_log_f32", [self.valu("v_ldexp_f32", [x, shift])]), tiny

    def log2_f32(self, x: Operand, dtype: str = "float32") -> Operand:
        """``log2(x)``."""
        y, tiny = self._log2_scaled(x)
        sub = self.cndmask(Imm.of_int(0), self.constant(0x42000000), tiny)  # 32.0
        return self.valu("v_sub_f32", [y, sub])

    def log_f32(self, x: Operand, dtype: str = "float32") -> Operand:
        """``ln(x)`` = log2(x) * ln 2, the product carried in two parts."""
        y, tiny = self._log2_scaled(x)
        sub = self.cndmask(Imm.of_int(0), self.constant(0x41B17218), tiny)  # 32 * ln 2
        ln2 = self.constant(_LN2, "s")
        hi = self.valu("v_mul_f32", [Imm.of_int(_LN2), y])
        lo = self.valu("v_fma_f32_negc", [y, ln2, hi])
        lo = self.valu("v_fma_f32", [y, self.constant(_LN2_LO), lo])
        r = self.valu("v_fma_f32", [y, ln2, lo])
        finite = self.cmp_mask("v_cmp_class_f32_e64", y, self.constant(_FINITE_CLASSES))
        r = self.cndmask(y, r, finite)
        return self.valu("v_sub_f32", [r, sub])

    def sqrt_f32(self, x: Operand, dtype: str = "float32") -> Operand:
        """Correctly rounded ``sqrt(x)``."""
        tiny = self.cmp_mask("v_cmp_gt_f32_e64", self.constant(0x0F800000, "s"), x)  # 2^-32
        up = self.valu("v_mul_f32", [Imm.of_int(0x4F800000), x])  # x * 2^32
        xs = self.cndmask(x, up, tiny)
        s = self.valu("v_sqrt_f32", [xs])
        below = self.valu("v_add_u32", [Imm.of_int(-1), s])  # the neighbouring floats
        above = self.valu("v_add_u32", [Imm.of_int(1), s])
        r_below = self.valu("v_fma_f32_nega", [below, s, xs])
        r_above = self.valu("v_fma_f32_nega", [above, s, xs])
        s = self.cndmask(s, below, self.cmp_mask("v_cmp_ge_f32_e64", Imm.of_int(0), r_below))
        s = self.cndmask(s, above, self.cmp_mask("v_cmp_lt_f32_e64", Imm.of_int(0), r_above))
        down = self.valu("v_mul_f32", [Imm.of_int(0x37800000), s])  # * 2^-16
        s = self.cndmask(s, down, tiny)
        special = self.cmp_mask("v_cmp_class_f32_e64", xs, self.constant(_SQRT_SPECIAL))
        return self.cndmask(s, xs, special)

    def rsqrt_f32(self, x: Operand, dtype: str = "float32") -> Operand:
        """``1 / sqrt(x)`` by ``v_rsq_f32`` (1 ulp), denormal inputs scaled by 2**24."""
        tiny = self.cmp_mask("v_cmp_gt_f32_e64", self.constant(_SMALLEST_NORMAL, "s"), x)
        up = self.valu("v_mul_f32", [Imm.of_int(0x4B800000), x])  # x * 2^24
        r = self.valu("v_rsq_f32", [self.cndmask(x, up, tiny)])
        scaled = self.valu("v_mul_f32", [Imm.of_int(0x45800000), r])  # * 2^12
        return self.cndmask(r, scaled, tiny)

    def fdiv(self, num: Value, den: Value, dtype: str) -> Value:
        """IEEE ``num / den`` (float16: through float32, rounded once more at the end)."""

        if dtype == "float16":
            wide = [self.cast(v, "float32", None) for v in (num, den)]
            return self.cast(self.fdiv(*wide, "float32"), "float16", None)
        if dtype != "float32":
            raise self.error(f"division of {dtype} values", "Divide float32 values.")
        n, d = self.to_vgpr(num.op), self.to_vgpr(den.op)
        vcc = Sym("vcc")
        # v_div_fmas reads VCC (set by the second v_div_scale): 6 VALU ops apart, more than
        # the 4 wait states gfx9 needs between a VALU writing VCC and v_div_fmas
        d_scaled = self.vreg("v")
        self.emit("v_div_scale_f32", [d_scaled, vcc], [d, d, n])
        r = self.valu("v_rcp_f32", [d_scaled])
        n_scaled = self.vreg("v")
        self.emit("v_div_scale_f32", [n_scaled, vcc], [n, d, n])
        err = self.valu("v_fma_f32_nega", [d_scaled, r, Imm.of_float(1.0, "float32")])
        r = self.valu("v_fma_f32", [err, r, r])
        q = self.valu("v_mul_f32", [n_scaled, r])
        err = self.valu("v_fma_f32_nega", [d_scaled, q, n_scaled])
        q = self.valu("v_fma_f32", [err, r, q])
        err = self.valu("v_fma_f32_nega", [d_scaled, q, n_scaled])
        q = self.valu("v_div_fmas_f32", [err, r, q])
        return Value(self.valu("v_div_fixup_f32", [q, d, n]), dtype)

    # -- integers ---------------------------------------------------------------------------
    def int_abs(self, x: Value) -> Value:
        """``|x|`` as ``max(x, 0 - x)``."""

        negated = self.apply("sub", [Value(Imm.of_int(0), x.dtype), x], x.dtype)
        return self.apply("max", [x, negated], x.dtype)

    def divide_by_constant(self, kind: str, x: Value, divisor: int, non_negative: bool,
                           dtype: str) -> Value:
        """``floordiv``/``floormod``/``truncdiv``/``truncmod`` of ``x`` by a constant that is
        not a power of two (``divisor`` >= 3): a multiply-high and shifts, no division."""

        def op(kind_: str, a: Value, b: Value | int) -> Value:
            if isinstance(b, int):
                b = Value(Imm.of_int(b), dtype)
            return self.apply(kind_, [a, b], dtype)

        if non_negative:  # floor and truncation agree: the unsigned form
            # x // c and x % c of one x share the quotient (index math: i // 3, i % 3)
            key = ir.expr.StringImm(f"quotient {x.op!r} / {divisor}")
            q = self.values.lookup(key)
            if q is None:
                multiplier, shift = unsigned_magic(divisor)
                q = self.mul_high(x, multiplier, signed=False, dtype=dtype)
                q = op("lshr", q, shift) if shift else q
                self.values.record(key, q)
            is_mod = kind in ("floormod", "truncmod")
            return op("sub", x, op("mul", q, divisor)) if is_mod else q
        multiplier, shift = signed_magic(divisor)
        q = self.mul_high(x, multiplier, signed=True, dtype=dtype)
        if multiplier < 0:
            q = op("add", q, x)
        q = op("ashr", q, shift) if shift else q
        q = op("add", q, op("lshr", x, 31))  # truncate toward zero for negative x
        if kind == "truncdiv":
            return q
        rem = op("sub", x, op("mul", q, divisor))
        if kind == "truncmod":
            return rem
        fix = op("ashr", rem, 31)  # -1 where the remainder is negative
        if kind == "floordiv":
            return op("add", q, fix)
        return op("add", rem, op("and", fix, divisor))

    def mul_high(self, x: Value, multiplier: int, signed: bool, dtype: str) -> Value:
        """The high 32 bits of ``x * multiplier`` (SALU when ``x`` is uniform)."""

        suffix = "i32" if signed else "u32"
        m = Imm.of_int(multiplier)
        if x.uniform:
            out = self.vreg("s")
            self.emit(f"s_mul_hi_{suffix}", [out], [self.to_sgpr(x.op), m])
            return Value(out, dtype)
        return Value(self.valu(f"v_mul_hi_{suffix}", [x.op, self.constant(m.bits, "s")]), dtype)

    def f64_register(self, op: Operand) -> Operand:
        """A float64 operand as a VGPR pair (constants materialised)."""
        if isinstance(op, Imm):
            raise self.error("a float64 constant in a select", "Select between registers.")
        return op
