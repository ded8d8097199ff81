"""Kernel descriptor (``.amdhsa_kernel``) and ``amdhsa.kernels`` metadata from the allocated
program.

Register counts come from the allocation: ``next_free_vgpr``/``next_free_sgpr`` are one
past the highest register used; the metadata's ``.vgpr_count``/``.sgpr_count`` round them
(SGPRs plus the hardware's reserved VCC/XNACK mask) up to the target's granule — the same
numbers the assembler encodes as granule blocks in ``compute_pgm_rsrc1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewave.codegen.amdgcn.kir import Program
from tilewave.targets import TargetInfo

__all__ = ["KernelResources", "descriptor_text", "metadata_yaml", "resources"]

# YAML 1.1 reads these bare words as booleans, and LLVM's metadata parser does so even when
# quoted: an argument named `n` is rejected as "invalid HSA metadata".
_YAML_BOOLEANS = {"y", "n", "yes", "no", "on", "off", "true", "false"}


@dataclass(frozen=True)
class KernelResources:
    """What the kernel descriptor and the metadata state about one kernel."""

    next_free_vgpr: int
    next_free_sgpr: int
    accum_offset: int
    vgpr_count: int
    sgpr_count: int
    lds_bytes: int
    workgroup_size: int
    wave_size: int

    @property
    def vgpr_blocks(self) -> int:
        """``GRANULATED_WORKITEM_VGPR_COUNT`` the assembler should encode."""
        return self.vgpr_count // 8 - 1

    @property
    def sgpr_blocks(self) -> int:
        """``GRANULATED_WAVEFRONT_SGPR_COUNT`` the assembler should encode."""
        return self.sgpr_count // 8 - 1


def _round_up(value: int, granule: int) -> int:
    return (max(value, 1) + granule - 1) // granule * granule


def resources(program: Program, next_free: dict[str, int], info: TargetInfo) -> KernelResources:
    """The resource numbers of ``program`` allocated with ``next_free`` registers."""
    user_sgprs = 2 + sum(program.workgroup_ids)  # kernarg pointer + enabled workgroup ids
    nvgpr = max(next_free.get("v", 0), 1)
    nsgpr = max(next_free.get("s", 0), user_sgprs)
    wg = program.workgroup_size
    return KernelResources(
        next_free_vgpr=nvgpr,
        next_free_sgpr=nsgpr,
        accum_offset=max(4, (nvgpr + 3) // 4 * 4),
        vgpr_count=_round_up(nvgpr, info.vgpr_granule),
        sgpr_count=_round_up(nsgpr + info.sgpr_reserved, info.sgpr_granule),
        lds_bytes=program.lds_bytes,
        workgroup_size=wg[0] * wg[1] * wg[2],
        wave_size=info.wave_size,
    )


def descriptor_text(program: Program, res: KernelResources) -> str:
    """The ``.amdhsa_kernel`` block."""
    ids = program.workgroup_ids
    lines = [
        f".amdhsa_kernel {program.name}",
        "  .amdhsa_user_sgpr_kernarg_segment_ptr 1",
        f"  .amdhsa_next_free_vgpr {res.next_free_vgpr}",
        f"  .amdhsa_next_free_sgpr {res.next_free_sgpr}",
        f"  .amdhsa_accum_offset {res.accum_offset}",
        "  .amdhsa_reserve_vcc 1",
        f"  .amdhsa_group_segment_fixed_size {res.lds_bytes}",
        "  .amdhsa_private_segment_fixed_size 0",
        f"  .amdhsa_kernarg_size {program.kernarg_bytes}",
        f"  .amdhsa_system_sgpr_workgroup_id_x {int(ids[0])}",
        f"  .amdhsa_system_sgpr_workgroup_id_y {int(ids[1])}",
        f"  .amdhsa_system_sgpr_workgroup_id_z {int(ids[2])}",
        f"  .amdhsa_system_vgpr_workitem_id {program.workitem_dims}",
        "  .amdhsa_float_denorm_mode_32 3",
        "  .amdhsa_float_denorm_mode_16_64 3",
        ".end_amdhsa_kernel",
    ]
    return "\n".join(lines)


def _yaml_name(name: str) -> str:
    return f"{name}_arg" if name.lower() in _YAML_BOOLEANS else name


def metadata_yaml(program: Program, res: KernelResources) -> str:
    """The ``.amdgpu_metadata`` block (code object v5 ``amdhsa.kernels``)."""
    lines = [
        ".amdgpu_metadata",
        "---",
        "amdhsa.version:",
        "  - 1",
        "  - 2",
        "amdhsa.kernels:",
        f"  - .name: {program.name}",
        f"    .symbol: {program.name}.kd",
    ]
    if program.args:
        lines.append("    .args:")
    for arg in program.args:
        lines += [
            f"      - .name: {_yaml_name(arg.name)}",
            f"        .offset: {arg.offset}",
            f"        .size: {arg.size}",
            f"        .value_kind: {arg.value_kind}",
        ]
        if arg.value_kind == "global_buffer":
            lines.append("        .address_space: global")
    lines += [
        f"    .group_segment_fixed_size: {res.lds_bytes}",
        "    .kernarg_segment_align: 8",
        f"    .kernarg_segment_size: {program.kernarg_bytes}",
        f"    .max_flat_workgroup_size: {res.workgroup_size}",
        "    .private_segment_fixed_size: 0",
        f"    .sgpr_count: {res.sgpr_count}",
        "    .sgpr_spill_count: 0",
        f"    .vgpr_count: {res.vgpr_count}",
        "    .vgpr_spill_count: 0",
        f"    .wavefront_size: {res.wave_size}",
        "...",
        ".end_amdgpu_metadata",
    ]
    return "\n".join(lines)
