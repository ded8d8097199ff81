"""What racecheck reports: findings, grouped by statement pair, and their text form."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ERROR_KINDS", "Finding", "Report", "statement_text"]

# the printer declares the buffers and variables a statement uses before it
_DECLARATION = re.compile(r"^\w+ = T\.(Buffer\(.*\)|\w+\(\))$")

#: finding kinds that make a kernel fail the check (``uninitialised`` is a warning)
ERROR_KINDS = frozenset(
    {"RAW", "WAR", "WAW", "PROXY", "deadlock", "barrier-count", "barrier-divergent",
     "out-of-bounds", "step-limit"}
)


def statement_text(stmt: Any, limit: int = 100) -> str:
    """One line of TVMScript for ``stmt`` with its source line when the span has one."""
    if stmt is None:
        return "<none>"
    try:
        text = stmt.script()
    except Exception:  # printing is best effort; a report must never fail on it
        text = str(stmt)
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.lstrip().startswith(("#", "@", "def "))
             and not _DECLARATION.match(ln.strip())]
    flat = " ".join(lines[:3])
    if len(flat) > limit:
        flat = flat[: limit - 3] + "..."
    span = getattr(stmt, "span", None)
    line = getattr(span, "line", None) if span is not None else None
    return f"{flat}  (line {line})" if line else flat


@dataclass
class Finding:
    """One reported problem, aggregated over every byte and thread pair that shows it.

    Attributes:
        kind: ``RAW``/``WAR``/``WAW`` (a data race), ``PROXY`` (generic write not fenced
            before an async-proxy access), ``deadlock``, ``barrier-count``,
            ``barrier-divergent`` (an aligned barrier generation completed from several
            instructions),
            ``out-of-bounds``, ``uninitialised``, ``step-limit``.
        message: one sentence saying what happened.
        statements: the statements involved (earlier first), as TVMScript text.
        buffer: the storage's buffer name (races, bounds, uninitialised reads).
        byte_range: ``(first, last)`` byte offsets involved in that storage.
        threads: one example pair (or list) of actors, described.
        count: how many byte-level events were merged into this finding.
        schedule: the schedule that showed it.
    """

    kind: str
    message: str
    statements: tuple[str, ...] = ()
    buffer: str = ""
    byte_range: tuple[int, int] | None = None
    threads: tuple[str, ...] = ()
    count: int = 1
    schedule: str = ""

    @property
    def is_error(self) -> bool:
        """Whether this finding fails the check."""
        return self.kind in ERROR_KINDS

    def format(self) -> str:
        """Multi-line text of the finding."""
        head = f"[{self.kind}] {self.message}"
        lines = [head]
        if self.buffer:
            rng = f" bytes {self.byte_range[0]}..{self.byte_range[1]}" if self.byte_range else ""
            lines.append(f"    buffer: {self.buffer}{rng} ({self.count} byte events)")
        for i, text in enumerate(self.statements):
            lines.append(f"    {'first' if i == 0 else 'then '}: {text}")
        if self.threads:
            lines.append(f"    by: {'; '.join(self.threads)}")
        if self.schedule:
            lines.append(f"    schedule: {self.schedule}")
        return "\n".join(lines)


@dataclass
class Report:
    """The result of :func:`tilewave.racecheck`: every finding of every schedule run.

    Attributes:
        kernel: the PrimFunc's name.
        target: the target name.
        findings: deduplicated findings (errors and warnings).
        schedules: the schedules that ran.
        blocks: how many blocks ran under each schedule.
        threads: threads per block.
        steps: instructions executed (summed over schedules and blocks).
    """

    kernel: str
    target: str
    findings: list[Finding] = field(default_factory=list)
    schedules: tuple[str, ...] = ()
    blocks: int = 1
    threads: int = 0
    steps: int = 0

    @property
    def errors(self) -> list[Finding]:
        """Findings that fail the check."""
        return [f for f in self.findings if f.is_error]

    @property
    def ok(self) -> bool:
        """True when no race, deadlock or bounds error was found."""
        return not self.errors

    def kinds(self) -> set[str]:
        """The kinds of every finding."""
        return {f.kind for f in self.findings}

    def format(self) -> str:
        """The whole report as text (what ``tilewave racecheck`` prints)."""
        verdict = "clean" if self.ok else f"{len(self.errors)} error(s)"
        head = (f"racecheck {self.kernel} ({self.target}): {verdict}; {self.threads} threads x "
                f"{self.blocks} block(s), schedules {', '.join(self.schedules)}, "
                f"{self.steps} steps")
        return "\n".join([head] + [f.format() for f in self.findings])
