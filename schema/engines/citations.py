"""Every `Source` an engine profile cites, found by walking it: what
`dspark families` prints, and the functions whose fingerprints
(converters/fingerprints.py) tell an installed release."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

from dspark.schema.engines.base import EngineProfile, Source


def _walk(value: Any, seen: set[int]) -> Iterator[Source]:
    if isinstance(value, Source):
        yield value
        return
    if id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
        return
    seen.add(id(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _walk(getattr(value, field.name), seen)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _walk(item, seen)
    elif isinstance(value, (tuple, list, frozenset, set)):
        for item in value:
            yield from _walk(item, seen)


def profile_sources(profile: EngineProfile) -> list[Source]:
    """Every Source a profile holds (its loaders built), each once, in the
    order met."""
    found: dict[Source, None] = {}
    for source in _walk(profile, set()):
        found.setdefault(source, None)
    return list(found)
