"""Small value helpers the rules share."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dspark.schema.families import DraftFamily
from dspark.schema.families.base import MAX_TAPS, is_int

__all__ = ["bounded_taps", "is_int", "shape_text"]


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def bounded_taps(family: DraftFamily, config: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The family's tap ids and where they sit; a list longer than any draft
    taps is reported by the schema (maxItems) and judged no further, so no
    rule or message grows with a length the input made up."""
    layer_ids, path = family.tap_ids(config)
    if isinstance(layer_ids, list) and len(layer_ids) > MAX_TAPS:
        return None, path
    return layer_ids, path
