"""`record`: a dataclass that costs almost nothing to define.

Python's `dataclass` compiles each method it generates with a separate
`exec()` when the class is defined: six for a frozen dataclass
(`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`,
`__delattr__`), and reads each field's annotation (as text, under
`from __future__ import annotations`) for `ClassVar` and `InitVar`: about
0.3 ms a class. A header-only `dspark check` defines about forty such
classes before it reads a byte, and those were the largest part of its
start-up beyond its libraries' import (docs/check.md).

`@record` (or `@record(frozen=False)`, `@record(kw_only=True)`) is
`@dataclass(...)` with the same behaviour, built from functions written
once here rather than compiled per class: the fields are the
`dataclasses.Field` objects `dataclass` would make (so
`dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work as on
any dataclass), and the class gets a shared `__init__` (the same
positional and keyword parameters, defaults, `default_factory`,
`init=False`, `kw_only` and `__post_init__`), shared `__eq__`,
`__hash__` and `__repr__` (comparing, hashing and showing the fields
`dataclass` would, in the same form) and, frozen, shared
`__setattr__`/`__delattr__` that raise `FrozenInstanceError` as the
generated ones do.

What it does not do, and refuses where it would matter: `ClassVar`,
`InitVar` and `KW_ONLY` annotations, `__slots__`, a class's own
`__init__`/`__eq__`/`__hash__`/`__repr__`, and being subclassed by a
`@dataclass` (use `@dataclass` for those). Building an instance runs a
loop over the fields in Python (about 1 us more than the compiled
`__init__`), which a check does a few thousand times at most.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)

_MISSING = dataclasses.MISSING
# How `__init__` fills a field when the caller did not pass it.
_REQUIRED, _DEFAULT, _FACTORY = "required", "default", "factory"


class _InitPlan:
    """What a record class's `__init__` takes and how it fills each field,
    worked out once when the class is defined."""

    __slots__ = ("name", "positional", "accepted", "fields", "post_init")

    def __init__(self, cls: type, fields: tuple[dataclasses.Field, ...]) -> None:
        self.name = cls.__qualname__
        self.positional = tuple(f.name for f in fields if f.init and not f.kw_only)
        self.accepted = frozenset(f.name for f in fields if f.init)
        filled = []
        for f in fields:
            if f.default_factory is not _MISSING:
                filled.append((f.name, _FACTORY, f.default_factory))
            elif not f.init:
                # dataclass leaves such a field unset: a read finds the
                # class attribute holding its default (or fails, as there).
                continue
            elif f.default is not _MISSING:
                filled.append((f.name, _DEFAULT, f.default))
            else:
                filled.append((f.name, _REQUIRED, None))
        self.fields = tuple(filled)
        self.post_init = hasattr(cls, "__post_init__")


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    plan: _InitPlan = self.__record_init__
    positional = plan.positional
    if len(args) > len(positional):
        raise TypeError(
            f"{plan.name}.__init__() takes {len(positional) + 1} positional arguments but {len(args) + 1} were given"
        )
    given = dict(zip(positional, args))
    for name in kwargs:
        if name not in plan.accepted:
            raise TypeError(f"{plan.name}.__init__() got an unexpected keyword argument {name!r}")
        if name in given:
            raise TypeError(f"{plan.name}.__init__() got multiple values for argument {name!r}")
    given.update(kwargs)
    # Written straight into the instance's dict, as a frozen dataclass's
    # __init__ does with object.__setattr__ (a record has no __slots__).
    state = self.__dict__
    missing = []
    for name, how, default in plan.fields:
        if name in given:
            state[name] = given[name]
        elif how is _DEFAULT:
            state[name] = default
        elif how is _FACTORY:
            state[name] = default()
        else:
            missing.append(name)
    if missing:
        names = ", ".join(repr(name) for name in missing)
        raise TypeError(f"{plan.name}.__init__() missing {len(missing)} required argument(s): {names}")
    if plan.post_init:
        self.__post_init__()


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    # As dataclass's: the class itself refuses every name; a plain subclass
    # may add attributes of its own but not assign a field.
    if type(self) is self.__record_frozen_class__ or name in self.__dataclass_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _frozen_delattr(self: Any, name: str) -> None:
    if type(self) is self.__record_frozen_class__ or name in self.__dataclass_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


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


_GENERATED = ("__init__", "__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__")
_UNSUPPORTED_ANNOTATIONS = ("ClassVar", "InitVar", "KW_ONLY")


def _unsupported(annotation: Any) -> str | None:
    """`ClassVar`, `InitVar` or `KW_ONLY` when the annotation is one (as
    text or as the object), which `dataclass` would treat apart."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None) or repr(annotation)
    head = text.split("[", 1)[0].strip().rsplit(".", 1)[-1]
    return head if head in _UNSUPPORTED_ANNOTATIONS else None


def _collect_fields(cls: type, kw_only: bool) -> tuple[dataclasses.Field, ...]:
    """The class's fields as `dataclass` makes them: its bases' first, then
    one per annotation in order, a `field(...)` default taken as the field,
    a mutable default refused."""
    fields: dict[str, dataclasses.Field] = {}
    for base in reversed(cls.__mro__[1:]):
        fields.update(base.__dict__.get("__dataclass_fields__", {}))
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        kind = _unsupported(annotation)
        if kind is not None:
            raise TypeError(f"{cls.__qualname__}.{name}: @record does not handle {kind}; use @dataclass")
        default = cls.__dict__.get(name, _MISSING)
        if isinstance(default, dataclasses.Field):
            made = default
            # As dataclass: the class attribute is the default, or none.
            if made.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, made.default)
        else:
            made = dataclasses.field(default=default)
        made.name, made.type = name, annotation
        # What `dataclasses.fields` selects a field by (its other kinds are
        # ClassVar and InitVar pseudo-fields, refused above).
        made._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
        if made.kw_only is _MISSING:
            made.kw_only = kw_only
        if made.default is not _MISSING and made.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(made.default)} for field {name} is not allowed: "
                             "use default_factory")
        fields[name] = made
    seen_default = None
    for made in fields.values():
        if not made.init or made.kw_only:
            continue
        if made.default is not _MISSING or made.default_factory is not _MISSING:
            seen_default = made.name
        elif seen_default is not None:
            raise TypeError(f"non-default argument {made.name!r} follows default argument")
    cls.__dataclass_fields__ = fields
    return tuple(fields.values())


def _build(cls: T, frozen: bool, kw_only: bool) -> T:
    own = cls.__dict__
    mine = [name for name in _GENERATED if name in own and not (name == "__hash__" and own[name] is None)]
    if mine:
        raise TypeError(f"{cls.__qualname__}: @record generates {', '.join(mine)}; use @dataclass")
    if "__slots__" in own:
        raise TypeError(f"{cls.__qualname__}: @record keeps fields in the instance dict; use @dataclass for slots")
    for base in cls.__mro__[1:]:
        if "__dataclass_fields__" not in base.__dict__:
            continue
        if "__record_init__" not in base.__dict__:
            raise TypeError(f"{cls.__qualname__}: @record cannot extend the dataclass {base.__qualname__}")
        if base.__dict__["__record_frozen__"] != frozen:
            state = "frozen" if frozen else "non-frozen"
            raise TypeError(f"{cls.__qualname__}: cannot inherit a {state} record from {base.__qualname__}")
    fields = _collect_fields(cls, kw_only)
    if not own.get("__doc__"):
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields if f.init)})"
    if "__match_args__" not in own:
        cls.__match_args__ = tuple(f.name for f in fields if f.init and not f.kw_only)
    cls.__record_init__ = _InitPlan(cls, fields)
    cls.__record_frozen__ = frozen
    cls.__record_compare__ = tuple(f.name for f in fields if f.compare)
    cls.__record_repr__ = tuple(f.name for f in fields if f.repr)
    # dataclass(eq=True, frozen=True) hashes the compared fields (a field's
    # own `hash=` wins); a mutable one is unhashable.
    cls.__record_hash__ = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    cls.__init__ = _init
    cls.__eq__ = _eq
    cls.__hash__ = _hash if frozen else None
    cls.__repr__ = _repr
    if frozen:
        cls.__record_frozen_class__ = cls
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
    return cls


def record(cls: T | None = None, /, *, frozen: bool = True, kw_only: bool = False) -> T | Callable[[T], T]:
    """`@dataclass(frozen=True)` (by default; `frozen=False`, `kw_only=True`
    as there) whose methods are shared functions rather than code compiled
    per class."""

    def wrap(cls: T) -> T:
        return _build(cls, frozen, kw_only)

    return wrap if cls is None else wrap(cls)


__all__ = ["record"]
