"""Value ranges and known-zero low bits of integer TIR expressions.

Instruction selection asks two questions: is ``a + b`` an OR (the bits of ``b`` fit under
the known-zero low bits of ``a``, both non-negative) and is an index a multiple of the
vector width (so a 16-byte access is aligned). Variables get their range from the launch
and loop extents the selector records.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import ir, tirx

__all__ = ["Facts", "KnownBits"]

_MAX_TZ = 32


@dataclass(frozen=True)
class Facts:
    """What is known of an integer expression: ``lo <= value <= hi`` (None: unbounded) and
    the value is a multiple of ``2**tz``."""

    lo: int | None
    hi: int | None
    tz: int

    @property
    def non_negative(self) -> bool:
        """The value is known to be >= 0."""
        return self.lo is not None and self.lo >= 0


def _tz_of(value: int) -> int:
    if value == 0:
        return _MAX_TZ
    return (value & -value).bit_length() - 1


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


class KnownBits:
    """Ranges of variables, and :meth:`facts` for expressions over them."""

    def __init__(self) -> None:
        self.ranges: dict[object, tuple[int, int | None]] = {}
        self.lets: dict[object, object] = {}

    def bind(self, var: ir.expr.Var, lo: int, hi: int | None) -> None:
        """Record ``lo <= var <= hi`` (``hi`` None: no upper bound)."""
        self.ranges[var] = (lo, hi)

    def let(self, var: ir.expr.Var, value: object) -> None:
        """Record ``var = value`` (a let binding): ``var`` has the facts of ``value``."""
        self.lets[var] = value

    def facts(self, expr: object) -> Facts:
        """Range and trailing-zero facts of ``expr`` (unknown parts give wide facts)."""
        if isinstance(expr, tirx.IntImm):
            return Facts(expr.value, expr.value, _tz_of(expr.value))
        if isinstance(expr, ir.expr.Var) and expr in self.lets:
            return self.facts(self.lets[expr])
        if isinstance(expr, ir.expr.Var):
            lo_hi = self.ranges.get(expr)
            return Facts(*lo_hi, 0) if lo_hi else Facts(None, None, 0)
        if isinstance(expr, tirx.Add | tirx.Sub | tirx.Mul):
            fa, fb = self.facts(expr.a), self.facts(expr.b)
            if isinstance(expr, tirx.Add):
                return Facts(_add(fa.lo, fb.lo), _add(fa.hi, fb.hi), min(fa.tz, fb.tz))
            if isinstance(expr, tirx.Sub):
                neg_hi = None if fb.hi is None else -fb.hi
                neg_lo = None if fb.lo is None else -fb.lo
                return Facts(_add(fa.lo, neg_hi), _add(fa.hi, neg_lo), min(fa.tz, fb.tz))
            tz = min(fa.tz + fb.tz, _MAX_TZ)
            if fa.non_negative and fb.non_negative:
                hi = None if fa.hi is None or fb.hi is None else fa.hi * fb.hi
                return Facts(fa.lo * fb.lo, hi, tz)
            return Facts(None, None, tz)
        if isinstance(expr, tirx.FloorMod):
            fb = self.facts(expr.b)
            if fb.lo is not None and fb.lo == fb.hi and fb.lo > 0:
                fa = self.facts(expr.a)
                return Facts(0, fb.lo - 1, min(fa.tz, fb.tz))
        if isinstance(expr, tirx.FloorDiv):
            fa, fb = self.facts(expr.a), self.facts(expr.b)
            if fa.non_negative and fa.hi is not None and fb.lo is not None and fb.lo > 0:
                return Facts(0, fa.hi // fb.lo, 0)
        return Facts(None, None, 0)

    def disjoint(self, a: object, b: object) -> bool:
        """``a + b == a | b``: both non-negative and ``b`` fits in ``a``'s zero low bits."""
        fa, fb = self.facts(a), self.facts(b)
        if not (fa.non_negative and fb.non_negative) or fb.hi is None:
            return False
        return fb.hi < (1 << min(fa.tz, 31)) and fa.tz > 0
