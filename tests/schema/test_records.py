"""`@record` behaves as the `@dataclass` it replaces: the same equality,
hash, repr, immutability and dataclass helpers, without the per-class
compiled methods (docs/check.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from dspark.schema.records import record


def pair(frozen: bool = True):
    """The same class twice: as a dataclass and as a record."""

    def body():
        class Entry:
            name: str
            shape: tuple = ()
            note: str = field(default="", compare=False)
            secret: str = field(default="", repr=False)
            extra: dict = field(default_factory=dict, hash=False)

        return Entry

    return dataclass(frozen=frozen)(body()), record(frozen=frozen)(body())


@pytest.mark.parametrize("frozen", [True, False])
def test_a_record_compares_and_shows_itself_as_the_dataclass_does(frozen):
    for cls in pair(frozen):
        a = cls("w", (1, 2), note="x", secret="s")
        assert a == cls("w", (1, 2), note="other", secret="s")  # note is not compared
        assert a != cls("w", (1, 3))
        assert a != ("w", (1, 2))
        assert a.__eq__(object()) is NotImplemented
        assert repr(a) == "pair.<locals>.body.<locals>.Entry(name='w', shape=(1, 2), note='x', extra={})"
        assert dataclasses.is_dataclass(a) and [f.name for f in dataclasses.fields(a)] == [
            "name", "shape", "note", "secret", "extra"]
        assert dataclasses.replace(a, name="v").name == "v"
        assert dataclasses.asdict(a)["secret"] == "s"


def test_a_frozen_record_hashes_and_refuses_changes_as_the_dataclass_does():
    for cls in pair(frozen=True):
        a, b = cls("w", (1,), note="x", extra={"k": 1}), cls("w", (1,), note="y", extra={"k": 2})
        assert hash(a) == hash(b) == hash(("w", (1,), ""))  # extra (hash=False) and note (compare=False) left out
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
            a.name = "v"
        with pytest.raises(dataclasses.FrozenInstanceError):
            del a.shape
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.other = 1


def test_a_mutable_record_is_unhashable_as_the_dataclass_is():
    for cls in pair(frozen=False):
        a = cls("w")
        a.name = "v"
        assert a.name == "v"
        with pytest.raises(TypeError, match="unhashable"):
            hash(a)


def test_a_record_that_holds_itself_shows_dots_as_the_dataclass_does():
    for cls in pair(frozen=False):
        a = cls("w")
        a.shape = (a,)
        assert repr(a).endswith("Entry(name='w', shape=(...,), note='', extra={})")


def test_a_record_refuses_a_class_with_its_own_eq_hash_or_repr():
    class Shown:
        name: str

        def __repr__(self) -> str:
            return "mine"

    with pytest.raises(TypeError, match="use @dataclass"):
        record(Shown)


def twins(**options):
    """The same class with every kind of field, as a dataclass and as a record."""

    def body():
        class Row:
            """A row."""

            name: str
            size: int = field(default=0, metadata={"unit": "bytes"})
            tags: list = field(default_factory=list, repr=False)
            cached: dict = field(default_factory=dict, init=False, compare=False)
            fixed: int = field(default=7, init=False)
            late: str = field(default="", kw_only=True)

            def __post_init__(self):
                self.cached["seen"] = self.name

        return Row

    return dataclass(frozen=False, **options)(body()), record(frozen=False, **options)(body())


@pytest.mark.parametrize("options", [{}, {"kw_only": True}])
def test_a_records_fields_are_the_dataclasses(options):
    made, recorded = (dataclasses.fields(cls) for cls in twins(**options))
    attributes = ("name", "type", "default", "default_factory", "init", "repr", "hash", "compare", "metadata",
                  "kw_only")
    assert [[getattr(f, a) for a in attributes] for f in made] == [[getattr(f, a) for a in attributes] for f in recorded]
    dataclass_cls, record_cls = twins(**options)
    assert record_cls.__match_args__ == dataclass_cls.__match_args__
    assert record_cls.fixed == dataclass_cls.fixed == 7 and "tags" not in vars(record_cls)


def test_a_record_is_built_as_the_dataclass_is():
    for cls in twins():
        a = cls("w", 3, [1], late="z")
        assert (a.name, a.size, a.tags, a.cached, a.fixed, a.late) == ("w", 3, [1], {"seen": "w"}, 7, "z")
        b = cls(name="v")
        assert (b.size, b.tags, b.late) == (0, [], "") and b.tags is not cls("u").tags
        assert dataclasses.asdict(dataclasses.replace(a, size=4)) == {
            "name": "w", "size": 4, "tags": [1], "cached": {"seen": "w"}, "fixed": 7, "late": "z"}
        assert dataclasses.astuple(b) == ("v", 0, [], {"seen": "v"}, 7, "")
        for bad in (lambda: cls(), lambda: cls("w", 1, [], 2), lambda: cls("w", name="v"), lambda: cls("w", x=1),
                    lambda: cls("w", cached={}), lambda: cls("w", fixed=1)):
            with pytest.raises(TypeError):
                bad()
    kw_dataclass, kw_record = twins(kw_only=True)
    for cls in (kw_dataclass, kw_record):
        with pytest.raises(TypeError):
            cls("w")
        assert cls(name="w").name == "w"


def test_a_record_refuses_what_the_dataclass_refuses_and_what_it_does_not_handle():
    from typing import ClassVar

    class Mutable:
        items: list = []

    class Ordered:
        a: int = 0
        b: int

    class Shared:
        count: ClassVar[int] = 0

    class Slotted:
        __slots__ = ("a",)
        a: int

    for cls, error in ((Mutable, ValueError), (Ordered, TypeError), (Shared, TypeError), (Slotted, TypeError)):
        with pytest.raises(error):
            record(cls)


def test_a_record_extends_a_record_of_its_kind_only():
    @record
    class Base:
        """A base."""

        name: str

    @record
    class Child(Base):
        """A child."""

        size: int = 0

    child = Child("w", 2)
    assert [f.name for f in dataclasses.fields(child)] == ["name", "size"] and child == Child("w", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        child.name = "v"
    with pytest.raises(TypeError, match="non-frozen"):
        record(frozen=False)(type("Loose", (Base,), {"__annotations__": {"x": "int"}}))
    with pytest.raises(TypeError, match="cannot extend the dataclass"):
        record(type("OnDataclass", (dataclass(type("Plain", (), {"__annotations__": {"a": "int"}})),), {}))


def test_a_plain_subclass_of_a_frozen_record_may_add_attributes_but_not_assign_fields():
    for cls in pair(frozen=True):
        sub = type("Sub", (cls,), {})("w")
        sub.other = 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            sub.name = "v"
