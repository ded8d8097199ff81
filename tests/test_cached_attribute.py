"""``cached_attribute``: computed once per instance, then read from the instance."""

from __future__ import annotations

from tilewave.cached_attribute import cached_attribute


class Counted:
    def __init__(self, base: int) -> None:
        self.base = base
        self.calls = 0

    @cached_attribute
    def doubled(self) -> int:
        """Twice the base."""
        self.calls += 1
        return 2 * self.base


def test_computed_once_per_instance() -> None:
    first, second = Counted(3), Counted(5)
    assert (first.doubled, first.doubled, second.doubled) == (6, 6, 10)
    assert (first.calls, second.calls) == (1, 1)
    assert first.__dict__["doubled"] == 6  # later reads never reach the descriptor


def test_the_class_attribute_is_the_descriptor_with_its_docstring() -> None:
    assert isinstance(Counted.doubled, cached_attribute)
    assert Counted.doubled.__doc__ == "Twice the base."
