"""Facts about the gfx9 (CDNA3: gfx942, gfx950) opcodes the backend emits.

One table answers what the later stages ask about an opcode: its execution unit (the
hazard rules and the waitcnt model key on it), which wait counter its result arrives
through, its VALU encoding (VOP2 takes a literal only in src0 and needs a VGPR src1;
VOP3 takes no literal on gfx9), whether its sources commute, and whether it is a
transcendental (gfx940's trans-forwarding hazard).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tilewave.errors import MalformedKernelError

__all__ = ["OpInfo", "op_info"]

Unit = Literal["salu", "valu", "smem", "vmem", "ds", "mfma", "branch", "wait", "barrier", "misc"]
Encoding = Literal["vop1", "vop2", "vop3", "none"]


@dataclass(frozen=True)
class OpInfo:
    """What the backend knows about one opcode."""

    unit: Unit
    encoding: Encoding = "none"
    commutes: bool = False
    trans: bool = False
    is_store: bool = False

    @property
    def counter(self) -> Literal["vm", "lgkm"] | None:
        """The wait counter tracking this instruction's completion."""
        if self.unit == "vmem":
            return "vm"
        if self.unit in ("smem", "ds"):
            return "lgkm"
        return None


_SALU = (
    "s_mov_b32 s_mov_b64 s_add_u32 s_sub_u32 s_add_i32 s_sub_i32 s_mul_i32 s_lshl_b32 "
    "s_lshr_b32 s_ashr_i32 s_and_b32 s_or_b32 s_xor_b32 s_and_b64 s_or_b64 s_andn2_b64 "
    "s_and_saveexec_b64 s_cselect_b32 s_min_i32 s_max_i32 s_min_u32 s_max_u32 s_nop "
    "s_lshl_add_u32 s_mul_hi_u32 s_mul_hi_i32 s_not_b32 s_addc_u32"
).split()
_SCMP = [f"s_cmp_{c}_{t}" for c in ("eq", "lg", "lt", "le", "gt", "ge") for t in ("i32", "u32")]
_VOP2 = {  # opcode: commutes
    "v_add_u32": True,
    "v_sub_u32": False,
    "v_subrev_u32": False,
    "v_and_b32": True,
    "v_or_b32": True,
    "v_xor_b32": True,
    "v_lshlrev_b32": False,
    "v_lshrrev_b32": False,
    "v_ashrrev_i32": False,
    "v_add_f32": True,
    "v_sub_f32": False,
    "v_mul_f32": True,
    "v_max_f32": True,
    "v_min_f32": True,
    "v_add_f16": True,
    "v_sub_f16": False,
    "v_mul_f16": True,
    "v_max_f16": True,
    "v_min_f16": True,
    "v_max_i32": True,
    "v_min_i32": True,
    "v_max_u32": True,
    "v_min_u32": True,
    "v_cndmask_b32": False,
    "v_mul_u32_u24": True,
    # VOP2 with a 32-bit literal K after the operands (fmamk: a * K + b, fmaak: a * b + K)
    "v_fmamk_f32": False,
    "v_fmaak_f32": False,
}
_VOP1 = (
    "v_mov_b32 v_mov_b64 v_cvt_f32_f16 v_cvt_f16_f32 v_cvt_f32_i32 v_cvt_i32_f32 v_cvt_f32_u32 "
    "v_cvt_u32_f32 v_readfirstlane_b32 v_rndne_f32 v_not_b32 v_cvt_f64_f32 v_cvt_f32_f64 "
    "v_cvt_f64_i32 v_cvt_i32_f64"
).split()
_TRANS = ("v_rcp_f32 v_exp_f32 v_log_f32 v_sqrt_f32 v_rsq_f32 v_rcp_f16 v_exp_f16").split()
_VOP3 = (
    "v_mul_lo_u32 v_lshl_add_u32 v_lshl_or_b32 v_add3_u32 v_or3_b32 v_fma_f32 v_fma_f16 "
    "v_bfe_u32 v_mad_u32_u24 v_cndmask_b32_e64 v_mbcnt_lo_u32_b32 v_mbcnt_hi_u32_b32 "
    "v_readlane_b32 v_writelane_b32 v_pk_fma_f16 v_bfe_i32 v_mul_hi_u32 v_mul_hi_i32 "
    "v_ldexp_f32 v_div_scale_f32 v_div_fmas_f32 v_div_fixup_f32 v_add_f64 v_mul_f64 "
    "v_fma_f64 v_max_f64 v_min_f64 v_pk_fma_f32 v_pk_add_f32 v_pk_mul_f32"
).split()
# kernel-IR names of v_fma_f32 with a negated source (render.py prints the '-')
_VOP3 += ["v_fma_f32_nega", "v_fma_f32_negc"]
_VCMP = [
    f"v_cmp_{c}_{t}_e64"
    for c in ("eq", "ne", "lt", "le", "gt", "ge", "ngt", "nlt")
    for t in ("i32", "u32", "f32", "f16")
] + ["v_cmp_class_f32_e64"]

_TABLE: dict[str, OpInfo] = {}
_TABLE.update({op: OpInfo("salu") for op in _SALU + _SCMP})
_TABLE.update({op: OpInfo("valu", "vop2", c) for op, c in _VOP2.items()})
_TABLE.update({op: OpInfo("valu", "vop1") for op in _VOP1})
_TABLE.update({op: OpInfo("valu", "vop1", trans=True) for op in _TRANS})
_TABLE.update({op: OpInfo("valu", "vop3") for op in _VOP3 + _VCMP})
_TABLE.update({op: OpInfo("smem") for op in ("s_load_dword", "s_load_dwordx2", "s_load_dwordx4")})
_TABLE.update(
    {
        op: OpInfo("vmem")
        for op in (
            "buffer_load_dword",
            "buffer_load_dwordx2",
            "buffer_load_dwordx4",
            "buffer_load_ushort",
            "buffer_load_ubyte",
            "buffer_load_sbyte",
            *(f"global_load_{w}" for w in ("dword", "dwordx2", "dwordx3", "dwordx4", "ushort",
                                           "ubyte", "sbyte")),
        )
    }
)
_TABLE.update(
    {
        op: OpInfo("vmem", is_store=True)
        for op in (
            "buffer_store_dword",
            "buffer_store_dwordx2",
            "buffer_store_dwordx4",
            "buffer_store_short",
            "buffer_store_byte",
            *(f"global_store_{w}" for w in ("dword", "dwordx2", "dwordx4", "short", "byte",
                                            "short_d16_hi")),
            # LDS DMA (gather-to-LDS): the data goes to LDS (M0 + lane offset), not to a
            # VGPR. dword on gfx942 and gfx950, dwordx4 on gfx950 only.
            "buffer_load_dword_lds",
            "buffer_load_dwordx4_lds",
        )
    }
)
_TABLE.update(
    {op: OpInfo("ds") for op in ("ds_read_b32", "ds_read_b64", "ds_read_b128", "ds_read_u16",
                                 "ds_read_u8", "ds_read_i8", "ds_read2_b32", "ds_read2st64_b32",
                                 "ds_read2_b64", "ds_read2st64_b64")}
)
_TABLE.update(
    {
        op: OpInfo("ds", is_store=True)
        for op in ("ds_write_b32", "ds_write_b64", "ds_write_b128", "ds_write_b16",
                   "ds_write_b16_d16_hi",
                   "ds_write_b8")
    }
)
_TABLE.update(
    {op: OpInfo("mfma", "vop3") for op in ("v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16_bf16")}
)
_TABLE.update(
    {
        op: OpInfo("branch")
        for op in (
            "s_branch",
            "s_cbranch_scc0",
            "s_cbranch_scc1",
            "s_cbranch_execz",
            "s_cbranch_vccz",
            "s_endpgm",
        )
    }
)
_TABLE["s_waitcnt"] = OpInfo("wait")
_TABLE["s_barrier"] = OpInfo("barrier")
_TABLE["s_setprio"] = OpInfo("misc")


def op_info(opcode: str) -> OpInfo:
    """The :class:`OpInfo` of ``opcode``.

    Raises:
        MalformedKernelError: an opcode the backend's tables do not describe (a bug in a
            template table or a hand-built program).
    """
    try:
        return _TABLE[opcode]
    except KeyError:
        raise MalformedKernelError(
            f"AMDGCN backend: opcode '{opcode}' is not in tilewave/codegen/amdgcn/isa.py; "
            "add it there with its unit and encoding before emitting it."
        ) from None


def valu_operands_ok(opcode: str, srcs: list[object]) -> bool:
    """Whether ``srcs`` are encodable for VALU ``opcode`` on gfx9 as they are.

    VOP2 needs a VGPR in src1 and takes a literal only in src0; VOP3 takes no literal; every
    encoding reads at most one SGPR or literal (the constant bus).
    """
    from tilewave.codegen.amdgcn.kir import Imm, reg_class

    info = op_info(opcode)
    bus = 0
    for i, op in enumerate(srcs):
        literal = isinstance(op, Imm) and not op.is_inline
        if literal and (info.encoding == "vop3" or i != 0):
            return False
        if info.encoding == "vop2" and i == 1 and reg_class(op) != "v":
            return False
        if literal or reg_class(op) == "s":
            bus += 1
    return bus <= 1
