"""The registry of serving-engine profiles: one module per engine, one line
here. `--engine NAME[@REV]` picks one; the default is TokenSpeed as a deploy
should assume it today."""

from __future__ import annotations

from dspark.schema.engines import tokenspeed
from dspark.schema.engines.base import EngineProfile, FamilyLoader, Source
from dspark.schema.errors import UsageError

PROFILES: tuple[EngineProfile, ...] = tokenspeed.PROFILES
DEFAULT_ENGINE: EngineProfile = tokenspeed.CURRENT


def engine_by_spec(spec: str | None) -> EngineProfile:
    """`tokenspeed`, `tokenspeed@current`, `tokenspeed@main`, ..."""
    if spec is None or spec == "":
        return DEFAULT_ENGINE
    name, _, revision = spec.partition("@")
    revision = revision or "current"
    for profile in PROFILES:
        if profile.name == name and profile.revision == revision:
            return profile
    known = ", ".join(p.spec for p in PROFILES)
    raise UsageError(f"--engine {spec!r} is not an engine dspark models.", hint=f"Known: {known}.")


__all__ = ["DEFAULT_ENGINE", "PROFILES", "EngineProfile", "FamilyLoader", "Source", "engine_by_spec"]
