"""`record`: a dataclass that costs less to define.

Python 3.11's `dataclass` compiles each method it generates with a
separate `exec()` when the class is defined: six for a frozen dataclass
(`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`,
`__delattr__`). A header-only `dspark check` defines about forty such
classes before it reads a byte, and those compilations were the largest
part of its start-up beyond its libraries' import (docs/check.md).

`@record` (or `@record(frozen=False)`, `@record(kw_only=True)`, ...) is
`@dataclass(...)` with the same behaviour: it lets `dataclass` generate
`__init__` (and a frozen class's `__setattr__`/`__delattr__`), and gives
the class `__eq__`, `__hash__` and `__repr__` that do what the generated
ones do (compare, hash and show the fields `dataclass` would, in the same
form) without compiling code per class. `dataclasses.fields`, `replace`
and `asdict` work as on any dataclass.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)


def _values(self: Any, names: tuple[str, ...]) -> tuple:
    return tuple([getattr(self, name) for name in names])


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        names = self.__record_compare__
        return _values(self, names) == _values(other, names)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(_values(self, self.__record_hash__))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_repr__)
    return f"{self.__class__.__qualname__}({shown})"


def _finish(cls: T, frozen: bool) -> T:
    own = cls.__dict__
    if any(name in own for name in ("__eq__", "__hash__", "__repr__")):
        raise TypeError(f"{cls.__qualname__}: @record generates __eq__, __hash__ and __repr__; use @dataclass")
    fields = dataclasses.fields(cls)
    cls.__record_compare__ = tuple(f.name for f in fields if f.compare)
    cls.__record_repr__ = tuple(f.name for f in fields if f.repr)
    # dataclass(eq=True, frozen=True) hashes the compared fields (a field's
    # own `hash=` wins); a mutable one is unhashable.
    cls.__record_hash__ = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    cls.__eq__ = _eq
    cls.__hash__ = _hash if frozen else None
    cls.__repr__ = _repr
    return cls


def record(cls: T | None = None, /, *, frozen: bool = True, **options: Any) -> T | Callable[[T], T]:
    """`@dataclass(frozen=True)` (by default) without its per-class
    compiled `__eq__`, `__hash__` and `__repr__`. `options` go to
    `dataclass` as they are (`kw_only`, ...)."""

    def wrap(cls: T) -> T:
        return _finish(dataclasses.dataclass(cls, frozen=frozen, eq=False, repr=False, **options), frozen)

    return wrap if cls is None else wrap(cls)


__all__ = ["record"]
