"""An engine's recorded fingerprints and lists (schema/engines/<engine>/
fingerprints.py), stored as its profiles are (releases.py): the newest
release whole, each older one as what differs from its newer neighbour.
Most cited functions do not change from one release to the next, so a
table of whole rows would repeat them once per release.

`fingerprints_of(module)` and `lists_of(module)` give every release's
whole rows back; `deltas(rows, ...)` is their inverse, used by the
generator (tests/conformance/fingerprints.py).
Opens no file and imports nothing but the table asked for.
"""

from __future__ import annotations

from typing import Any, Mapping

Rows = dict[str, dict[str, Any]]  # release -> its row, newest first

# The two sides of a listed names' change, from the older release's side.
LACKS = "lacks"  # names its newer neighbour lists that this release does not
ADDS = "adds"  # names this release lists that its newer neighbour does not
# A list recorded on one side only (None: not read for that release) is
# written whole.
WHOLE = "is"


def changed_fingerprints(newer: Mapping[str, Any], older: Mapping[str, Any]) -> dict[str, Any]:
    """The functions whose fingerprint differs in `older` (every release
    records the same functions: a release without one records None)."""
    if list(newer) != list(older):
        raise ValueError("releases recording different functions cannot be stored as a delta")
    return {function: value for function, value in older.items() if newer[function] != value}


def with_fingerprints(newer: Mapping[str, Any], changed: Mapping[str, Any]) -> dict[str, Any]:
    return {function: changed.get(function, value) for function, value in newer.items()}


def changed_lists(newer: Mapping[str, Any], older: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """key -> how `older`'s list differs from `newer`'s (names kept sorted)."""
    if list(newer) != list(older):
        raise ValueError("releases recording different lists cannot be stored as a delta")
    found: dict[str, dict[str, Any]] = {}
    for key, names in older.items():
        had = newer[key]
        if names == had:
            continue
        if names is None or had is None or names != sorted(names) or had != sorted(had):
            found[key] = {WHOLE: names}
        else:
            found[key] = {LACKS: sorted(set(had) - set(names)), ADDS: sorted(set(names) - set(had))}
    return found


def with_lists(newer: Mapping[str, Any], changed: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    row = {}
    for key, names in newer.items():
        change = changed.get(key)
        if change is None:
            row[key] = names
        elif WHOLE in change:
            row[key] = change[WHOLE]
        else:
            row[key] = sorted((set(names) - set(change[LACKS])) | set(change[ADDS]))
    return row


def deltas(rows: Rows, changed) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(newest release, its whole row, each older release's changes over
    its newer neighbour), with `changed` one of the two *changed_* above."""
    releases = list(rows)
    newest = releases[0]
    return newest, dict(rows[newest]), {older: changed(rows[newer], rows[older])
                                        for newer, older in zip(releases, releases[1:])}


def whole(newest: str, row: Mapping[str, Any], older: Mapping[str, Any], apply) -> Rows:
    """Every release's whole row from a newest row and the older deltas."""
    rows = {newest: dict(row)}
    for release, changes in older.items():
        rows[release] = apply(rows[list(rows)[-1]], changes)
    return rows


def fingerprints_of(module) -> Rows:
    """release -> {function: fingerprint or None}, newest first."""
    return whole(module.NEWEST, module.FINGERPRINTS, module.OLDER_FINGERPRINTS, with_fingerprints)


def lists_of(module) -> Rows:
    """release -> {list: names or None}, newest first ({} where none were recorded)."""
    if not hasattr(module, "LISTS"):
        return {}
    return whole(module.NEWEST, module.LISTS, module.OLDER_LISTS, with_lists)
