"""The registry of serving-engine profiles: one module per engine, one line
here. `--engine NAME[@REV]` picks one; the default is TokenSpeed as a deploy
should assume it today."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dspark.schema.engines.base import EngineProfile, FamilyLoader, Source
from dspark.schema.errors import UsageError

# --- lazy registry -----------------------------------------------------------
# Engine name -> its module (a module or a package; the full name, which
# tests/test_project.py reads as an import), which defines PROFILES (every
# revision dspark models) and CURRENT (the revision `NAME` alone means). A
# module is imported when a profile of its engine is asked for, so a check
# for one engine loads that engine's profiles only. `PROFILES` (every
# engine's, for `dspark families` and the tests) and `DEFAULT_ENGINE`
# import on first use. A new engine (vllm, sglang) is one line here.
ENGINE_MODULES: dict[str, str] = {
    "tokenspeed": "dspark.schema.engines.tokenspeed",
}
DEFAULT_ENGINE_NAME = "tokenspeed"

if TYPE_CHECKING:
    PROFILES: tuple[EngineProfile, ...]
    DEFAULT_ENGINE: EngineProfile


def engine_module(name: str) -> Any:
    """The module of engine `name` (a key of ENGINE_MODULES), imported now."""
    return importlib.import_module(ENGINE_MODULES[name])


def default_engine() -> EngineProfile:
    return engine_module(DEFAULT_ENGINE_NAME).CURRENT


def all_profiles() -> tuple[EngineProfile, ...]:
    return tuple(profile for name in ENGINE_MODULES for profile in engine_module(name).PROFILES)


def __getattr__(name: str) -> Any:
    # PEP 562: the module-level names that need engine modules load them on
    # first use and are kept in the module's dict afterwards.
    if name == "PROFILES":
        value: Any = all_profiles()
    elif name == "DEFAULT_ENGINE":
        value = default_engine()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
# -----------------------------------------------------------------------------


def engine_by_spec(spec: str | None) -> EngineProfile:
    """`tokenspeed`, `tokenspeed@current`, `tokenspeed@main`, ..."""
    if spec is None or spec == "":
        return default_engine()
    name, _, revision = spec.partition("@")
    revision = revision or "current"
    if name in ENGINE_MODULES:
        for profile in engine_module(name).PROFILES:
            if profile.name == name and profile.revision == revision:
                return profile
    known = ", ".join(p.spec for p in all_profiles())
    raise UsageError(f"--engine {spec!r} is not an engine dspark models.", hint=f"Known: {known}.")


__all__ = [
    "DEFAULT_ENGINE",
    "DEFAULT_ENGINE_NAME",
    "ENGINE_MODULES",
    "PROFILES",
    "EngineProfile",
    "FamilyLoader",
    "Source",
    "all_profiles",
    "default_engine",
    "engine_by_spec",
    "engine_module",
]
