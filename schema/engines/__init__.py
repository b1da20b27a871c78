"""The registry of serving engines: one package per engine
(`schema/engines/<name>/`), one line here. An engine's package is imported
only when it is asked for: `engine_by_spec("vllm")` imports the vLLM
profiles and nothing else, so `dspark check` pays only for the engines it
judges with.

Each engine package exports `PROFILES` (every revision it models) and
`DEFAULT` (the profile a bare `NAME` means). `--engine NAME[@REV]` picks
one; `--engine a,b` or `--engine all` several (`engine_specs`). Without
`--engine` the default is TokenSpeed as a deploy should assume it today.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

from dspark.schema.engines.base import EngineProfile, FamilyLoader, Source
from dspark.schema.errors import UsageError

# name -> the package holding its profiles, in the order `all` lists them.
ENGINES: dict[str, str] = {
    "tokenspeed": "dspark.schema.engines.tokenspeed",
    "vllm": "dspark.schema.engines.vllm",
    "sglang": "dspark.schema.engines.sglang",
}
DEFAULT_ENGINE_NAME = "tokenspeed"
ALL = "all"


def _package(name: str) -> ModuleType:
    return importlib.import_module(ENGINES[name])


def engine_names() -> tuple[str, ...]:
    """Every engine dspark models, without importing any of them."""
    return tuple(ENGINES)


def profiles_of(name: str) -> tuple[EngineProfile, ...]:
    """Every revision modelled of one engine."""
    return tuple(_package(name).PROFILES)


def release_profiles(name: str) -> tuple[EngineProfile, ...]:
    """The profiles of an engine's releases (a version such as `0.33.0`, not
    a git snapshot such as `pr1031`), newest first."""
    def numbers(revision: str) -> tuple[int, ...]:
        return tuple(int(part) for part in revision.split("."))

    releases = [p for p in profiles_of(name) if re.fullmatch(r"\d+(\.\d+)*", p.revision)]
    return tuple(sorted(releases, key=lambda p: numbers(p.revision), reverse=True))


def all_profiles() -> tuple[EngineProfile, ...]:
    """Every revision of every engine (imports them all: `dspark families`)."""
    return tuple(profile for name in ENGINES for profile in profiles_of(name))


def default_engine() -> EngineProfile:
    return _package(DEFAULT_ENGINE_NAME).DEFAULT


def _choices() -> str:
    return (", ".join(ENGINES) + f", {ALL} (every engine), NAME@{ALL} (every release of one), or NAME@REVISION "
            "(`dspark families` lists them)")


def engine_by_spec(spec: str | None) -> EngineProfile:
    """`tokenspeed`, `tokenspeed@current`, `tokenspeed@main`, ...; None or
    "" the default engine. An unknown engine or revision is a UsageError
    naming the choices (exit 2)."""
    if spec is None or spec.strip() == "":
        return default_engine()
    name, at, revision = spec.strip().partition("@")
    name = name.strip().lower()
    if name not in ENGINES:
        raise UsageError(f"--engine {spec!r} is not an engine dspark models.", hint=f"Choices: {_choices()}.")
    package = _package(name)
    if not at:
        return package.DEFAULT
    revision = revision.strip()
    if revision.lower() == ALL:
        raise UsageError(f"--engine {spec!r} names every release of {name}, and this command judges with one.",
                         hint=f"Name one release ({', '.join(p.spec for p in release_profiles(name))}), or use "
                              f"{name}@{ALL} with check, inspect or gate.")
    for profile in package.PROFILES:
        if profile.revision == revision:
            return profile
    known = ", ".join(p.spec for p in package.PROFILES)
    raise UsageError(f"--engine {spec!r}: dspark models no revision {revision!r} of {name}.",
                     hint=f"Known revisions: {known} ({name} alone means {package.DEFAULT.spec}).")


def _every_release(item: str) -> list[EngineProfile]:
    """`vllm@all`: every release of one engine dspark models, newest first
    (TokenSpeed's git snapshots are not releases: name them one by one)."""
    name = item.rpartition("@")[0].strip().lower()
    if name not in ENGINES:
        raise UsageError(f"--engine {item!r} is not an engine dspark models.", hint=f"Choices: {_choices()}.")
    return list(release_profiles(name))


def engine_specs(specs: Any) -> tuple[EngineProfile, ...]:
    """Several engines at once: `tokenspeed,vllm`, `all` (the default
    revision of every engine), `vllm@all` (every release of one engine, one
    verdict row each: what an upgrade changes), a list of such strings (a policy file's), or
    None (the default engine); a profile, or a list of profiles, as they
    are. Repeats are dropped, the order kept."""
    if specs is None:
        return (default_engine(),)
    if isinstance(specs, EngineProfile):
        return (specs,)
    if isinstance(specs, (list, tuple)) and specs and all(isinstance(p, EngineProfile) for p in specs):
        return tuple(specs)
    parts = [specs] if isinstance(specs, str) else list(specs)
    items = [item.strip() for part in parts for item in str(part).split(",")]
    items = [item for item in items if item]
    if not items:
        return (default_engine(),)
    profiles: list[EngineProfile] = []
    for item in items:
        chosen = ([_package(name).DEFAULT for name in ENGINES] if item.lower() == ALL
                  else _every_release(item) if item.lower().endswith("@" + ALL) else [engine_by_spec(item)])
        profiles += [p for p in chosen if not any(p is q for q in profiles)]
    return tuple(profiles)


def __getattr__(name: str) -> Any:
    # DEFAULT_ENGINE and PROFILES stay importable for callers written before
    # engines were lazy; each imports what it names on first use.
    if name == "DEFAULT_ENGINE":
        return default_engine()
    if name == "PROFILES":
        return all_profiles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALL",
    "DEFAULT_ENGINE_NAME",
    "ENGINES",
    "EngineProfile",
    "FamilyLoader",
    "Source",
    "all_profiles",
    "default_engine",
    "engine_by_spec",
    "engine_names",
    "engine_specs",
    "profiles_of",
    "release_profiles",
]
