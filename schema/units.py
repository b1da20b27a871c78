"""Sizes as people read them: binary units, the same in every report."""

from __future__ import annotations


def human_bytes(count: int) -> str:
    """`6144` -> `6.00 KiB`; GiB for what a GPU or a disk holds, never GB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    return f"{count} B"
