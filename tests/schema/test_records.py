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
