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
    elif getattr(value, "__closure__", None):
        # a config rule built by a function: the Sources it closes over
        for cell in value.__closure__:
            try:
                yield from _walk(cell.cell_contents, seen)
            except ValueError:  # an empty cell
                continue


def profile_sources(profile: EngineProfile) -> list[Source]:
    """Every Source a profile holds (its loaders built), each once, in the
    order met."""
    found: dict[Source, None] = {}
    for source in _walk(profile, set()):
        found.setdefault(source, None)
    return list(found)


def installed_path(path: str) -> str:
    """A cited path as it sits in the installed package: a git checkout's
    `python/tokenspeed/...` is the wheel's `tokenspeed/...`."""
    return path.removeprefix("python/")


def engine_sources(name: str) -> list[Source]:
    """Every Source one engine's profiles cite, and those of the facts its
    installed revision is told by (TokenSpeed's revisions.py)."""
    import importlib

    from dspark.schema.engines import profiles_of

    found: dict[Source, None] = {}
    for profile in profiles_of(name):
        for source in profile_sources(profile):
            found.setdefault(source, None)
    try:
        revisions = importlib.import_module(f"dspark.schema.engines.{name}.revisions")
    except ModuleNotFoundError:
        revisions = None
    if revisions is not None:
        for source in _walk(list(vars(revisions).values()), set()):
            found.setdefault(source, None)
    return list(found)


def cited_functions(name: str) -> list[str]:
    """`path::Qualified.name` (installed paths) of every function an
    engine's rules cite, sorted: the functions fingerprinted per release."""
    return sorted({f"{installed_path(source.path)}::{source.qualname}"
                   for source in engine_sources(name) if source.qualname})
