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
VALU writes VGPR                       MFMA reads it                2 (*)
MFMA writes VGPR                       non-MFMA reads/writes it;    8 (*)
                                       MFMA reads it as A/B (or
                                       overwrites it from another C)
SALU writes M0                         ``buffer_load ... lds``      1
=====================================  ==========================  ===========

(*) Checked against LLVM's GCNHazardRecognizer by compiling probe kernels with TVM's
LLVM 22 and triton's LLVM (tests/codegen/amdgcn/test_amdgcn_mfma_hazards.py): LLVM puts 2
wait states between a VALU write and an MFMA reading it (gfx942 and gfx950), 7 (gfx942) /
8 (gfx950) between a 16x16x16 f16/bf16 MFMA (4 passes) and a VALU, VMEM or MFMA-A/B read of
its result, and none between MFMAs chained through the same accumulator (C == D). One
table serves both targets, so the MFMA result rule uses gfx950's 8 (one more than gfx942
needs). The selector only emits MFMAs whose C is D itself or an inline constant, so
LLVM's SrcC write-after-read rule never applies.
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


def _mfma_result_consumer(ins: Instr) -> Units:
    unit = _unit(ins)
    if unit == "mfma":
        # D = A*B + C chained through the same registers (C is D) is interlocked; A/B reads
        # and a D overwritten from an inline-constant C are not.
        a, b, c = ins.uses[:3]
        chained = isinstance(c, PReg) and ins.defs and c == ins.defs[0]
        return _regs([a, b], "v") | (set() if chained else _regs(ins.defs, "v"))
    if unit in ("salu", "branch", "wait", "barrier", "smem", "misc"):
        return set()
    return _regs(ins.uses, "v") | _regs(ins.defs, "v")


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
        lambda c: _mfma_result_consumer(c),
        8,
    ),
    HazardRule(
        "salu-write-m0-lds-dma",
        lambda p: _regs(p.defs, "m0") if _unit(p) == "salu" else set(),
        lambda c: {("m0", 0)} if c.opcode.endswith("_lds") else set(),
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
    """Return ``program`` (physical registers) with ``s_nop`` inserted before each hazard.

    Instructions are visited in layout order and each shortfall is measured on the body with
    the ``s_nop`` already inserted before it, so one ``s_nop`` after a producer serves every
    later consumer instead of each consumer adding its own.
    """
    body = list(program.body)
    preds = _predecessors(body)
    pos = 0
    while pos < len(body):
        ins = body[pos]
        missing = _shortfall(body, preds, pos) if isinstance(ins, Instr) else 0
        if missing > 0:
            nops = []
            while missing > 0:
                n = min(missing, 8)
                nops.append(Instr("s_nop", uses=[Imm.of_int(n - 1)], comment="hazard"))
                missing -= n
            body[pos:pos] = nops
            preds = _predecessors(body)
            pos += len(nops)
        pos += 1
    return replace(program, body=body)
