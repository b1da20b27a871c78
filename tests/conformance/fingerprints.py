"""Write (or check) each engine's fingerprint table from the released wheels.

    python tests/conformance/fingerprints.py [--check] [ENGINE ...]

For every engine, the functions its profiles cite (`Source.qualname`,
schema/engines/citations.py) are hashed in the wheel of each release dspark
models (converters/fingerprints.py: the source of each definition, read with
`ast` from the archive, never imported), and the table is written to
`schema/engines/<engine>/fingerprints.py`, which `--runtime` and `doctor`
compare an installed engine with. The wheels come from the conformance cache
(environments.wheel downloads one that is not there). `--check` writes
nothing and exits 1 when a committed table is not the one the wheels give.
"""

from __future__ import annotations

import argparse
import sys
import types
import zipfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from environments import REPOSITORY, cache_root, wheel  # noqa: E402

from dspark.converters.fingerprints import hashes_in  # noqa: E402
from dspark.schema.engines import engine_names, release_profiles  # noqa: E402
from dspark.schema.engines import fingerprint_tables as tables  # noqa: E402
from dspark.schema.engines.citations import cited_functions  # noqa: E402


def table_file(engine: str) -> Path:
    return REPOSITORY / "schema" / "engines" / engine / "fingerprints.py"


def cached_wheel(engine: str, version: str) -> Path | None:
    """The release's wheel if the cache holds it (no download)."""
    found = sorted((cache_root() / "wheels" / f"{engine}-{version}").glob("*.whl"))
    return found[0] if found else None


def wheel_reader(path: Path) -> Callable[[str], str | None]:
    archive = zipfile.ZipFile(path)
    names = set(archive.namelist())

    def read(member: str) -> str | None:
        return archive.read(member).decode("utf-8", errors="replace") if member in names else None

    return read


def table(engine: str, find_wheel: Callable[[str, str], Path | None] = wheel) -> dict[str, dict[str, str | None]]:
    """release -> {function: fingerprint or None}, newest release first."""
    functions = cited_functions(engine)
    rows = {}
    for profile in release_profiles(engine):
        path = find_wheel(engine, profile.revision)
        if path is None:
            raise FileNotFoundError(f"{engine}=={profile.revision}: no wheel")
        rows[profile.revision] = hashes_in(wheel_reader(path), functions)
    return rows


def lists(engine: str, find_wheel: Callable[[str, str], Path | None] = wheel) -> dict[str, dict]:
    """release -> the lists converters/engine_lists.py reads in its wheel
    (the draft architectures it registers, the targets that capture)."""
    import tempfile

    from dspark.converters.engine_lists import FOLDERS, read_engine_lists

    rows = {}
    for profile in release_profiles(engine):
        path = find_wheel(engine, profile.revision)
        if path is None:
            raise FileNotFoundError(f"{engine}=={profile.revision}: no wheel")
        with tempfile.TemporaryDirectory() as site, zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if member.endswith(".py") and member.startswith(tuple(f + "/" for f in FOLDERS[engine])):
                    archive.extract(member, site)
            read = read_engine_lists(engine, Path(site) / engine).to_dict()
        rows[profile.revision] = {key: read[key] for key in ("drafts", "eagle3_targets", "dflash_targets")}
    return rows


def _literal(value, indent: int) -> list[str]:
    """`value` (dicts of str keys, lists of names, scalars) as Python lines,
    one key or name a line, so a release's change reads as a diff does."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = ["{"]
        for key, item in value.items():
            inner = _literal(item, indent + 4)
            lines.append(f"{pad}    {key!r}: {inner[0]}")
            lines += inner[1:]
            lines[-1] += ","
        return lines + [f"{pad}}}"] if len(lines) > 1 else ["{}"]
    if isinstance(value, list):
        return (["["] + [f"{pad}    {name!r}," for name in value] + [f"{pad}]"]) if value else ["[]"]
    return [repr(value)]


def _assignment(name: str, annotation: str, value) -> list[str]:
    lines = _literal(value, 0)
    return [f"{name}: {annotation} = {lines[0]}", *lines[1:]]


def render(engine: str, rows: dict[str, dict[str, str | None]], listed: dict[str, dict] | None = None) -> str:
    """The table module: the newest release whole, each older one as its
    delta over its newer neighbour (schema/engines/fingerprint_tables.py);
    checked to give `rows` and `listed` back before it is written."""
    newest, row, older = tables.deltas(rows, tables.changed_fingerprints)
    lines = [
        f'"""Fingerprints of the {engine} functions dspark\'s rules cite, in each',
        "release it models: `path::Qualified.name` -> a hash of the definition's",
        "source (converters/fingerprints.py), None where the release has no such",
        "definition. `--runtime` and `doctor` compare an installed engine with it.",
        "",
        "Stored as the profiles are (releases.py): the newest release whole, each",
        "older one as the fingerprints that differ from its newer neighbour's;",
        "schema/engines/fingerprint_tables.py gives each release's whole table.",
        "",
        "Generated from the released wheels by `python tests/conformance/fingerprints.py`:",
        "do not edit.",
        "",
        "Why this module is long: it is generated data, one row per cited function",
        'and per registered class, whole for the newest release."""',
        "",
        f"NEWEST = {newest!r}",
        "",
        *_assignment("FINGERPRINTS", "dict[str, str | None]", row),
        "",
        "# Each older release, newest first: what differs from the release above it.",
        *_assignment("OLDER_FINGERPRINTS", "dict[str, dict[str, str | None]]", older),
    ]
    module = {"NEWEST": newest, "FINGERPRINTS": row, "OLDER_FINGERPRINTS": older}
    if listed is not None:
        _, newest_lists, older_lists = tables.deltas(listed, tables.changed_lists)
        lines += ["", "# What each release registers and which targets capture, read in its wheel as",
                  "# converters/engine_lists.py reads an installed engine (None: not read for this engine):",
                  "# the newest release's lists, then what each older release lacks or adds over",
                  "# the release above it.",
                  *_assignment("LISTS", "dict[str, list[str] | None]", newest_lists),
                  "",
                  *_assignment("OLDER_LISTS", "dict[str, dict[str, dict[str, list[str] | None]]]", older_lists)]
        module.update(LISTS=newest_lists, OLDER_LISTS=older_lists)
    table_module = types.SimpleNamespace(**module)
    if tables.fingerprints_of(table_module) != rows or (
            listed is not None and tables.lists_of(table_module) != listed):
        raise AssertionError(f"{engine}: the deltas do not give the releases' tables back")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engines", nargs="*", default=list(engine_names()))
    parser.add_argument("--check", action="store_true", help="compare with the committed tables, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for engine in args.engines:
        text = render(engine, table(engine), lists(engine))
        if args.check:
            if table_file(engine).read_text(encoding="utf-8") != text:
                stale.append(engine)
        else:
            table_file(engine).write_text(text, encoding="utf-8")
            print(f"wrote {table_file(engine).relative_to(REPOSITORY)}")
    if stale:
        print(f"stale: {', '.join(stale)} (run python tests/conformance/fingerprints.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
