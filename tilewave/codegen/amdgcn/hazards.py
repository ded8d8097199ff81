"""Hazard mitigation for gfx94x/gfx95x: ``s_nop`` only where a hazard exists.

Some dependencies are not interlocked by the hardware: the consumer must come a number of
*wait states* after the producer (every instruction in between counts one, ``s_nop N``
counts N+1). Each :class:`HazardRule` names a producer, a consumer, the registers that must
overlap for the hazard to exist, and the wait states required (AMD Instinct MI300 ISA,
"Manually Inserted Wait States"; LLVM's GCNHazardRecognizer). For every instruction the
pass looks back along all control-flow paths (including loop back edges) and inserts the
shortest ``s_nop`` that covers the largest shortfall.

Rules implemented (the hazards tilewave's selector can create):

=====================================  ==========================  ===========
producer                               consumer                    wait states
=====================================  ==========================  ===========
VALU writes VGPR                       ``v_readfirstlane/readlane``  1
                                       reads it
VALU writes SGPR                       VMEM reads that SGPR         5
transcendental VALU (``v_rcp``...)     non-trans VALU reads result  1
``buffer_store`` of > 64 bits          VALU overwrites its data     1
VALU writes VGPR                       MFMA reads it                2
MFMA writes VGPR                       non-MFMA reads/writes it     18 (*)
SALU writes M0                         ``buffer_load ... lds``      1
=====================================  ==========================  ===========

(*) 18 is the largest gfx940 requirement for reading an XDL result (32x32, 16 passes);
the 16x16 MFMAs tilewave emits need fewer. It is safe, not minimal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tilewave.codegen.amdgcn.isa import op_info
from tilewave.codegen.amdgcn.kir import Imm, Instr, Label, PReg, Program, Sym

__all__ = ["HAZARD_RULES", "HazardRule", "mitigate_hazards"]

Units = set[tuple[str, int]]


def _regs(ops: list, cls: str | None = None) -> Units:
    out: Units = set()
    for op in ops:
        if isinstance(op, PReg) and (cls is None or op.cls == cls):
            out.update(op.units())
        elif isinstance(op, Sym) and op.name == "m0" and cls in (None, "m0"):
            out.add(("m0", 0))
    return out


def _unit(ins: Instr) -> str:
    return op_info(ins.opcode).unit


def _is_valu(ins: Instr) -> bool:
    return _unit(ins) == "valu"


@dataclass(frozen=True)
class HazardRule:
    """``consumer`` needs ``wait_states`` after ``producer`` when their registers overlap.

    ``written(producer)`` and ``read(consumer)`` return the register units involved (an
    empty set means the instruction is not a producer/consumer of this rule).
    """

    name: str
    written: Callable[[Instr], Units]
    read: Callable[[Instr], Units]
    wait_states: int


def _store_data(ins: Instr) -> Units:
    info = op_info(ins.opcode)
    if (
        info.unit == "vmem"
        and info.is_store
        and ins.uses
        and isinstance(ins.uses[0], PReg)
        and ins.uses[0].width > 2
    ):
        return set(ins.uses[0].units())
    return set()


HAZARD_RULES: tuple[HazardRule, ...] = (
    HazardRule(
        "valu-write-vgpr-readlane",
        lambda p: _regs(p.defs, "v") if _is_valu(p) else set(),
        lambda c: (
            _regs(c.uses, "v") if c.opcode in ("v_readfirstlane_b32", "v_readlane_b32") else set()
        ),
        1,
    ),
    HazardRule(
        "valu-write-sgpr-vmem-read",
        lambda p: _regs(p.defs, "s") if _is_valu(p) else set(),
        lambda c: _regs(c.uses, "s") if _unit(c) == "vmem" else set(),
        5,
    ),
    HazardRule(
        "trans-forwarding",
        lambda p: _regs(p.defs, "v") if op_info(p.opcode).trans else set(),
        lambda c: _regs(c.uses, "v") if _is_valu(c) and not op_info(c.opcode).trans else set(),
        1,
    ),
    HazardRule(
        "vmem-store-data-overwrite",
        _store_data,
        lambda c: _regs(c.defs, "v") if _is_valu(c) else set(),
        1,
    ),
    HazardRule(
        "valu-write-vgpr-mfma-read",
        lambda p: _regs(p.defs, "v") if _is_valu(p) else set(),
        lambda c: _regs(c.uses, "v") if _unit(c) == "mfma" else set(),
        2,
    ),
    HazardRule(
        "mfma-result-read",
        lambda p: _regs(p.defs, "v") if _unit(p) == "mfma" else set(),
        lambda c: (
            (_regs(c.uses, "v") | _regs(c.defs, "v"))
            if _unit(c) not in ("mfma", "salu", "branch", "wait", "barrier", "smem", "misc")
            else set()
        ),
        18,
    ),
    HazardRule(
        "salu-write-m0-lds-dma",
        lambda p: _regs(p.defs, "m0") if _unit(p) == "salu" else set(),
        lambda c: {("m0", 0)} if c.opcode == "buffer_load_dword_lds" else set(),
        1,
    ),
)


def _wait_states(ins: Instr) -> int:
    if ins.opcode == "s_nop":
        return int(ins.uses[0].signed) + 1 if ins.uses else 1
    return 1


def _predecessors(body: list[Instr | Label]) -> list[list[int]]:
    """For each position, the positions control can come from."""
    label_at = {ins.name: i for i, ins in enumerate(body) if isinstance(ins, Label)}
    preds: list[list[int]] = [[] for _ in body]
    for i, ins in enumerate(body):
        if i + 1 < len(body) and not (isinstance(ins, Instr) and ins.is_unconditional):
            preds[i + 1].append(i)
        if isinstance(ins, Instr) and ins.target is not None:
            preds[label_at[ins.target]].append(i)
    return preds


def _shortfall(body: list[Instr | Label], preds: list[list[int]], pos: int) -> int:
    """Wait states missing before ``body[pos]`` over all rules and paths."""
    consumer = body[pos]
    assert isinstance(consumer, Instr)
    worst = 0
    for rule in HAZARD_RULES:
        reads = rule.read(consumer)
        if not reads:
            continue
        best: dict[int, int] = {}
        stack = [(pos, 0)]
        while stack:
            at, acc = stack.pop()
            for p in preds[at]:
                ins = body[p]
                if isinstance(ins, Label):
                    if best.get(p, 1 << 30) > acc:
                        best[p] = acc
                        stack.append((p, acc))
                    continue
                if rule.written(ins) & reads:
                    worst = max(worst, rule.wait_states - acc)
                    continue
                nxt = acc + _wait_states(ins)
                if nxt < rule.wait_states and best.get(p, 1 << 30) > nxt:
                    best[p] = nxt
                    stack.append((p, nxt))
    return worst


def mitigate_hazards(program: Program) -> Program:
    """Return ``program`` (physical registers) with ``s_nop`` inserted before each hazard."""
    body = list(program.body)
    while True:
        preds = _predecessors(body)
        inserted = False
        out: list[Instr | Label] = []
        for pos, ins in enumerate(body):
            if isinstance(ins, Instr):
                missing = _shortfall(body, preds, pos)
                while missing > 0:
                    n = min(missing, 8)
                    out.append(Instr("s_nop", uses=[Imm.of_int(n - 1)], comment="hazard"))
                    missing -= n
                    inserted = True
            out.append(ins)
        body = out
        if not inserted:
            break
    return replace(program, body=body)
