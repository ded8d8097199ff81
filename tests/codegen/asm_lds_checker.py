"""A dataflow check over AMDGCN assembly: is any barrier reached while the wave's LDS
traffic may still be in flight?

Written from the ISA documents (CDNA3 "S_WAITCNT", RDNA4 "S_WAIT_*CNT"), independently of
tilewave's wait placement (:mod:`tilewave.codegen.amd_barrier_waits`) and of the assembly
backend's waitcnt pass, so it can judge both. It reads final assembly text (LLVM's or
tilewave's), splits it into basic blocks at labels and branches, and runs a forward
dataflow to a fixed point. The state per counter is the list of outstanding operations,
newest first, each a set of kinds it may be (``lds``, ``dma``, ``smem``, ``vmem``):

* an LDS instruction (``ds_*``) issues an ``lds`` op on ``lgkmcnt`` (gfx9) / ``dscnt``
  (gfx12); a scalar load an ``smem`` op on ``lgkmcnt`` / ``kmcnt``; an LDS DMA
  (``buffer_load_* ... lds``, ``global_load_lds_*``) a ``dma`` op on ``vmcnt`` /
  ``loadcnt``; other vector memory a ``vmem`` op on ``vmcnt`` (gfx9) / ``loadcnt`` or
  ``storecnt`` (gfx12); a FLAT access counts on both ``vmcnt`` and ``lgkmcnt``;
* a wait ``cnt(n)`` keeps the ``n`` newest ops of an in-order counter; ``lgkmcnt(n > 0)``
  with a scalar load outstanding tells nothing (scalar loads return out of order);
* at a join the lists are merged position by position (a union of kinds).

Findings:

* ``barrier``: ``s_barrier`` / ``s_barrier_signal`` reachable with an ``lds`` or ``dma``
  op possibly outstanding;
* ``redundant``: a wait that waits for nothing on any path (every counter it names is
  already at or below its count);
* ``back-to-back``: two adjacent waits one instruction could express (gfx9: any two
  ``s_waitcnt``; gfx12: the same counter, or ``loadcnt``/``storecnt`` with ``dscnt``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: an outstanding-op list longer than this folds its oldest positions together
_CAP = 64

_BRANCH = re.compile(r"^s_(?:c)?branch\w*$")
_LABEL = re.compile(r"^([.\w$]+):")
_GFX9_WAIT = re.compile(r"(vm|lgkm|exp)cnt\((\d+)\)")
_GFX12_WAIT = re.compile(r"^s_wait_(\w+?)cnt(?:_(\w+?)cnt)?$")


@dataclass(frozen=True)
class Finding:
    """One problem: its kind, the line number (1-based) and the instruction text."""

    kind: str
    line: int
    text: str
    detail: str = ""


@dataclass
class Instruction:
    """One instruction of the assembly, with its 1-based line number."""

    line: int
    opcode: str
    operands: str


State = dict[str, tuple[frozenset[str], ...]]


def _join(a: State | None, b: State) -> State:
    if a is None:
        return dict(b)
    out: State = {}
    for counter in set(a) | set(b):
        x, y = a.get(counter, ()), b.get(counter, ())
        n = max(len(x), len(y))
        out[counter] = tuple(
            (x[i] if i < len(x) else frozenset()) | (y[i] if i < len(y) else frozenset())
            for i in range(n)
        )
    return out


def _issue(state: State, counter: str, kind: str) -> None:
    ops = (frozenset({kind}), *state.get(counter, ()))
    if len(ops) > _CAP:
        ops = (*ops[: _CAP - 1], ops[_CAP - 1] | ops[_CAP])
    state[counter] = ops


def _wait(state: State, counter: str, count: int) -> bool:
    """Apply ``counter <= count``; True when it may have waited for something."""
    ops = state.get(counter, ())
    if len(ops) <= count:
        return False
    if count > 0 and any("smem" in kinds for kinds in ops):
        return True  # out-of-order scalar loads: which ones finished is unknown
    state[counter] = ops[:count]
    return True


@dataclass
class Dialect:
    """The counters of one ISA generation and how its instructions use them."""

    gfx12: bool

    def issues(self, ins: Instruction) -> list[tuple[str, str]]:
        """``(counter, kind)`` for each counter ``ins`` increments."""
        op, args = ins.opcode, ins.operands
        lds_dma = (op.startswith("buffer_load") and re.search(r"\blds\b", args)) or \
            op.startswith("global_load_lds")
        if self.gfx12:
            if op.startswith("ds_"):
                return [("ds", "lds")]
            if op.startswith(("s_load", "s_buffer_load")):
                return [("km", "smem")]
            if lds_dma:
                return [("load", "dma")]
            if op.startswith(("global_load", "buffer_load", "flat_load", "scratch_load")):
                return [("load", "vmem")] + ([("ds", "lds")] if op.startswith("flat") else [])
            if op.startswith(("global_store", "buffer_store", "flat_store", "scratch_store",
                              "global_atomic", "buffer_atomic", "flat_atomic")):
                return [("store", "vmem")] + ([("ds", "lds")] if op.startswith("flat") else [])
            return []
        if op.startswith("ds_"):
            return [("lgkm", "lds")]
        if op.startswith(("s_load", "s_buffer_load", "s_store", "s_memtime", "s_sendmsg")):
            return [("lgkm", "smem")]
        if lds_dma:
            return [("vm", "dma")]
        if op.startswith("flat_"):
            return [("vm", "vmem"), ("lgkm", "lds")]
        if op.startswith(("global_", "buffer_", "scratch_")):
            return [("vm", "vmem")]
        return []

    def waits(self, ins: Instruction) -> dict[str, int] | None:
        """The counts a wait instruction asks for, or ``None`` if ``ins`` is not one."""
        op, args = ins.opcode, ins.operands
        if not self.gfx12:
            if op != "s_waitcnt":
                return None
            fields = {m.group(1): int(m.group(2)) for m in _GFX9_WAIT.finditer(args)}
            if not fields and args.strip():
                imm = int(args.split()[0], 0)  # a raw simm16
                fields = {"vm": (imm & 0xF) | (((imm >> 14) & 3) << 4), "lgkm": (imm >> 8) & 0xF}
                fields = {k: v for k, v in fields.items() if v < (63 if k == "vm" else 15)}
            return {k: v for k, v in fields.items() if k != "exp"}
        m = _GFX12_WAIT.match(op)
        if m is None or op == "s_wait_alu" or op == "s_wait_event":
            return None
        imm = int(args.split(",")[0].strip(), 0) if args.strip() else 0
        first, second = m.group(1), m.group(2)
        if second is None:
            return {first: imm}
        # packed forms (s_wait_loadcnt_dscnt): the first counter in [13:8], dscnt in [5:0]
        return {first: (imm >> 8) & 0x3F, second: imm & 0x3F}

    def mergeable(self, a: dict[str, int], b: dict[str, int]) -> bool:
        """Whether one wait instruction could express both ``a`` and ``b``."""
        if not self.gfx12:
            return True
        names = set(a) | set(b)
        return len(names) == 1 or names in ({"load", "ds"}, {"store", "ds"})


def parse(asm: str) -> list[Instruction | str]:
    """The kernel bodies of ``asm``: instructions and label names, in order.

    Functions that are not kernels (the ``__truncsfhf2`` helper TVM links in) are left out:
    their entry state is the caller's. Without ``.amdhsa_kernel`` directives (a snippet)
    every function counts as a kernel.
    """
    kernels = set(re.findall(r"^\s*\.amdhsa_kernel\s+(\S+)", asm, re.M))
    functions = set(re.findall(r"^\s*\.type\s+([^,\s]+)\s*,\s*@function", asm, re.M))
    items: list[Instruction | str] = []
    keep = True
    for number, raw in enumerate(asm.splitlines(), start=1):
        line = raw.split(";")[0].split("//")[0].strip()
        if not line:
            continue
        label = _LABEL.match(line)
        if label:
            name = label.group(1)
            if name in functions:
                keep = not kernels or name in kernels
            if keep:
                items.append(name)
            continue
        if line.startswith(".") or not keep:
            continue  # directives, or code of a non-kernel function
        opcode, _, operands = line.partition(" ")
        items.append(Instruction(number, opcode, operands.strip()))
    return items


@dataclass
class _Block:
    instructions: list[Instruction] = field(default_factory=list)
    successors: list[int] = field(default_factory=list)


def _blocks(items: list[Instruction | str]) -> list[_Block]:
    blocks: list[_Block] = [_Block()]
    labels: dict[str, int] = {}
    for item in items:
        if isinstance(item, str):
            if blocks[-1].instructions:
                blocks.append(_Block())
            labels[item] = len(blocks) - 1
            continue
        blocks[-1].instructions.append(item)
        if _BRANCH.match(item.opcode) or item.opcode == "s_endpgm":
            blocks.append(_Block())
    for i, block in enumerate(blocks):
        last = block.instructions[-1] if block.instructions else None
        if last is not None and _BRANCH.match(last.opcode):
            target = last.operands.split(",")[0].strip()
            if target in labels:
                block.successors.append(labels[target])
            if last.opcode != "s_branch" and i + 1 < len(blocks):
                block.successors.append(i + 1)
        elif last is None or last.opcode != "s_endpgm":
            if i + 1 < len(blocks):
                block.successors.append(i + 1)
    return blocks


def _is_barrier(ins: Instruction) -> bool:
    return ins.opcode in ("s_barrier", "s_barrier_signal", "s_barrier_signal_isfirst")


def check(asm: str, target: str) -> list[Finding]:
    """All findings in ``asm`` (one or more kernels) for ``target`` (``gfx942``...)."""
    dialect = Dialect(gfx12=target.startswith("gfx12"))
    blocks = _blocks(parse(asm))
    entry: list[State | None] = [None] * len(blocks)
    entry[0] = {}
    # kernels after the first start empty too: a block no branch reaches is an entry
    reached = {s for b in blocks for s in b.successors}
    for i in range(len(blocks)):
        if i not in reached:
            entry[i] = {}
    for _ in range(200):
        changed = False
        for i, block in enumerate(blocks):
            if entry[i] is None:
                continue
            out = _run(block, dict(entry[i]), dialect, None)
            for s in block.successors:
                joined = _join(entry[s], out)
                if joined != entry[s]:
                    entry[s] = joined
                    changed = True
        if not changed:
            break
    findings: list[Finding] = []
    for i, block in enumerate(blocks):
        if entry[i] is not None:
            _run(block, dict(entry[i]), dialect, findings)
    return findings


def _run(block: _Block, state: State, dialect: Dialect, findings: list[Finding] | None) -> State:
    previous_wait: dict[str, int] | None = None
    for ins in block.instructions:
        wait = dialect.waits(ins)
        if wait is not None:
            waited = False
            for counter, count in wait.items():
                waited |= _wait(state, counter, count)
            if findings is not None:
                if not waited:
                    findings.append(Finding("redundant", ins.line, f"{ins.opcode} {ins.operands}",
                                            "every counter it names is already there"))
                if previous_wait is not None and dialect.mergeable(previous_wait, wait):
                    findings.append(Finding("back-to-back", ins.line,
                                            f"{ins.opcode} {ins.operands}",
                                            "follows another wait it could merge with"))
            previous_wait = wait
            continue
        previous_wait = None
        if _is_barrier(ins) and findings is not None:
            pending = sorted({k for ops in state.values() for kinds in ops for k in kinds}
                             & {"lds", "dma"})
            if pending:
                findings.append(Finding("barrier", ins.line, f"{ins.opcode} {ins.operands}",
                                        f"{', '.join(pending)} op(s) may be outstanding"))
        for counter, kind in dialect.issues(ins):
            _issue(state, counter, kind)
    return state
