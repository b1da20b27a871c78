"""Small value helpers the rules share."""

from __future__ import annotations

from typing import Any, Sequence


def is_int(value: Any) -> bool:
    """A JSON integer: `True` is not a layer count."""
    return isinstance(value, int) and not isinstance(value, bool)


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
