"""Which modelled release an installed engine's distribution version is
judged as (vLLM, SGLang): a modelled release is itself; a post-release or
local build (`0.33.0.post1`, `0.33.0+cu130`) is its base release; any other
is the same engine's nearest modelled release (engine_install.py says so,
RUN004), never another engine's profile."""

from __future__ import annotations

from typing import Mapping


def release_numbers(version: str) -> tuple[int, ...] | None:
    """The release segment of a version (`0.33.0` of `0.33.0.post1`,
    `0.33.0+cu130`, `0.33.0rc1`): the numbers before anything else."""
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = ""
        for character in part:
            if not character.isdigit():
                break
            digits += character
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) < len(part):
            break
    return tuple(numbers) or None


def nearest_release(version: str | None, versions: Mapping[str, str]) -> tuple[str | None, bool]:
    """The modelled release an installed `version` is judged as, and
    whether it is that release (a post-release or local build of it): never
    another engine's. The nearest older release, else the nearest newer."""
    if version in versions:
        return version, True
    numbers = release_numbers(version or "")
    modelled = sorted((release_numbers(v), v) for v in versions if release_numbers(v))
    if numbers is None or not modelled:
        return (modelled[-1][1] if modelled else None), False
    for known, name in modelled:
        if known == numbers:
            return name, True
    older = [name for known, name in modelled if known < numbers]
    return (older[-1] if older else modelled[0][1]), False
