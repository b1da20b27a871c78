"""Small value helpers the rules share."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dspark.schema.engines.base import FamilyLoader
from dspark.schema.families import DraftFamily
from dspark.schema.families.base import MAX_TAPS, is_int

__all__ = ["bounded_taps", "default_tap_count", "is_int", "shape_text", "tap_ids", "tap_width_fields"]


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def tap_ids(family: DraftFamily, loader: FamilyLoader | None, config: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The tap ids the engine's target captures and the path it read them
    from: the loader's reading (`FamilyLoader.taps`), else where the
    family's trainers write them."""
    if loader is not None and loader.taps is not None:
        return loader.taps.target_ids(config)
    return family.tap_ids(config)


def default_tap_count(family: DraftFamily, loader: FamilyLoader | None) -> int | None:
    """How many taps the engine assumes when it reads no list (None: a list
    is required)."""
    if loader is not None and loader.taps is not None:
        return loader.taps.default_count
    return family.default_tap_count


def bounded_taps(family: DraftFamily, config: Mapping[str, Any],
                 loader: FamilyLoader | None = None) -> tuple[Any, str | None]:
    """The tap ids the engine reads and where they sit; a list longer than
    any draft taps is reported by the schema (maxItems) and judged no
    further, so no rule or message grows with a length the input made up."""
    layer_ids, path = tap_ids(family, loader, config)
    if isinstance(layer_ids, list) and len(layer_ids) > MAX_TAPS:
        return None, path
    return layer_ids, path


def tap_width_fields(family: DraftFamily, loader: FamilyLoader | None) -> tuple[str, str | None]:
    """The draft field each tap's width is read from as the engine builds
    fc (the target's hidden_size must equal it), and its fallback when
    absent: the loader's, else the family's."""
    if loader is not None and loader.target_width_field is not None:
        return loader.target_width_field, loader.target_width_fallback
    return family.target_width_field, family.target_width_fallback
