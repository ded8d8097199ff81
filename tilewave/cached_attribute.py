"""``cached_attribute``: ``functools.cached_property`` without its lock.

On Python 3.11 ``functools.cached_property`` takes a lock shared by every instance of the
class on each first computation. The analyses compute a few such attributes for every
shared access they meet (its resolved indices, footprint, memory, loops): thousands per
kernel, where the lock was ~4% of a pass. The analyses run on one thread, so they need
no lock; the value is stored in the instance's ``__dict__`` under the attribute's name,
and later reads find it there without calling the descriptor (as with
``cached_property``, which Python 3.12 also made lock-free).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

__all__ = ["cached_attribute"]

_Owner = TypeVar("_Owner")
_Value = TypeVar("_Value")


class cached_attribute(Generic[_Owner, _Value]):
    """A read-only attribute computed once per instance by the decorated method."""

    def __init__(self, func: Callable[[_Owner], _Value]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(
        self, instance: None, owner: type | None = None
    ) -> cached_attribute[_Owner, _Value]: ...

    @overload
    def __get__(self, instance: _Owner, owner: type | None = None) -> _Value: ...

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)
        return value
