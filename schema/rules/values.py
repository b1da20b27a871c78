"""The config as the engine's config class will see it.

TokenSpeed's K3 DSpark config class fills absent fields with defaults and
runs `int()`, `float()`, `str().lower()` over what is there
(configs/kimi_k3_dspark_config.py@4b9766f6:85-127): `"7168"` becomes 7168,
`"VANILLA"` becomes `vanilla`. Such a draft loads, so these are warnings
(ENG003) that say what the engine will do, and the rules after this judge
the coerced values. A value `int()` refuses stays as it is, for the schema
to reject.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from dspark.schema.engines import FamilyLoader
from dspark.schema.findings import Finding

# Compiled on first use (by `re`): most values are numbers already.
_INTEGER_TEXT = r"\s*[+-]?\d+\s*"


def engine_view(
    config: Mapping[str, Any],
    loader: FamilyLoader | None,
    integer_fields: tuple[str, ...],
    config_file: str,
) -> tuple[dict[str, Any], list[Finding]]:
    """The config after the engine's defaults and coercions, and one
    ENG003 warning listing what was filled in or coerced."""
    view = dict(config)
    if loader is None:
        return view, []
    notes: list[str] = []
    for flag, reading in loader.flag_sources.items():
        # The value the engine reads for a flag it looks up elsewhere than
        # (or besides) the top level: the rules judge that one.
        value, _ = reading.read(view)
        if value is not None:
            view[flag] = value
    defaults = loader.config_defaults.get(str(config.get("model_type")), {})
    filled = [name for name in defaults if name not in view]
    for name in filled:
        view[name] = defaults[name]
    if filled:
        notes.append("absent, so the engine assumes " + ", ".join(f"{n} = {defaults[n]!r}" for n in filled))
    if loader.coerces_values:
        for name in integer_fields:
            value = view.get(name)
            coerced = _as_engine_int(value)
            if coerced is not None and coerced is not value:
                notes.append(f"{name} = {value!r} is read as int({value!r}) = {coerced}")
                view[name] = coerced
    for name in loader.float_coerced_fields:
        value = view.get(name)
        if isinstance(value, str):
            try:
                coerced = float(value)
            except ValueError:
                continue  # float() raises in the engine too: the schema reports it
            notes.append(f"{name} = {value!r} is read as float({value!r}) = {coerced!r}")
            view[name] = coerced
    for name in loader.bool_coerced_fields:
        value = view.get(name)
        if value is not None and not isinstance(value, bool):
            notes.append(f"{name} = {value!r} is read as bool({value!r}) = {bool(value)}")
            view[name] = bool(value)
    for path in loader.int_coerced_fields:
        note = _coerce_path(view, path)
        if note:
            notes.append(note)
    if loader.coerces_values:
        for name in loader.lowercased_fields:
            value = view.get(name)
            if isinstance(value, str) and value != value.lower():
                notes.append(f"{name} = {value!r} is read as {value.lower()!r}")
                view[name] = value.lower()
    for name in loader.ignored_fields:
        # Never read, so no value there can break the load: not judged.
        view.pop(name, None)
    if not notes:
        return view, []
    return view, [Finding(
        "ENG003",
        f"{config_file}: the engine loads this config only by coercing or ignoring values: "
        + "; ".join(notes) + ". Write the values the engine uses, so other loaders agree.",
        file=config_file,
        detail={"notes": notes, "defaults_filled": filled},
    )]


def _coerce_path(view: dict[str, Any], path: str) -> str | None:
    """int() over `path` in `view` (copying the nested section it sits in),
    as the engine's code does where it reads it; a note when that changed
    a value, None when nothing changed or int() would raise (the rules
    after this judge what is there)."""
    section, _, name = path.rpartition(".")
    holder = view.get(section) if section else view
    if not isinstance(holder, dict) or name not in holder:
        return None
    value = holder[name]
    if isinstance(value, list):
        coerced = [_as_engine_int(item) for item in value]
        if any(item is None for item in coerced) or all(type(a) is int for a in value):
            return None
    else:
        coerced = _as_engine_int(value)
        if coerced is None or coerced is value:
            return None
    if section:
        view[section] = holder = dict(holder)
    holder[name] = coerced
    return f"{path} = {value!r} is read as int() of each: {coerced}" if isinstance(value, list) else \
        f"{path} = {value!r} is read as int({value!r}) = {coerced}"


def _as_engine_int(value: Any) -> int | None:
    """What `int(value)` gives where the engine would call it, for values
    that are not already plain integers; None when it raises."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str) and re.fullmatch(_INTEGER_TEXT, value):
        return int(value)
    return None
