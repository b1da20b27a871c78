"""The recorded fingerprint tables are the ones the released wheels give,
and every cited function is where its citation says. Both need the wheels
in the conformance cache; without them they skip."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fingerprints as generator  # noqa: E402

from dspark.converters.fingerprints import find_definition, parse_source  # noqa: E402
from dspark.schema.engines import engine_names, release_profiles  # noqa: E402
from dspark.schema.engines.citations import engine_sources, installed_path  # noqa: E402


def _wheel_or_skip(engine: str, version: str) -> Path:
    path = generator.cached_wheel(engine, version)
    if path is None:
        pytest.skip(f"no {engine}=={version} wheel in the conformance cache")
    return path


@pytest.mark.parametrize("engine", engine_names())
def test_the_recorded_table_is_the_one_the_wheels_give(engine):
    find = lambda name, version: _wheel_or_skip(name, version)  # noqa: E731
    rows, listed = generator.table(engine, find), generator.lists(engine, find)
    committed = generator.table_file(engine).read_text(encoding="utf-8")
    assert committed == generator.render(engine, rows, listed), (
        f"schema/engines/{engine}/fingerprints.py is stale: run python tests/conformance/fingerprints.py")


def test_the_table_tells_the_releases_apart():
    from dspark.converters.engine_install import recorded_fingerprints

    RELEASES = recorded_fingerprints("vllm")

    # each release differs from its neighbour in some cited function (else
    # --runtime could not tell a build of one from the other)
    releases = list(RELEASES)
    for newer, older in zip(releases, releases[1:]):
        assert any(RELEASES[newer][f] != RELEASES[older][f] for f in RELEASES[newer]), (newer, older)


@pytest.mark.parametrize("engine", engine_names())
def test_every_qualified_name_holds_the_lines_it_cites(engine):
    """A citation `path::Q@name==V:lines` of a release: Q is defined in V's
    wheel, and its definition holds the first cited line."""
    versions = {p.revision for p in release_profiles(engine)}
    checked = 0
    for source in engine_sources(engine):
        pinned = re.fullmatch(rf"{engine}==([\w.]+)", source.commit.split(" ")[0])
        if not source.qualname or not pinned or pinned.group(1) not in versions:
            continue
        read = generator.wheel_reader(_wheel_or_skip(engine, pinned.group(1)))
        text = read(installed_path(source.path))
        assert text is not None, source.cite()
        node = find_definition(parse_source(text), source.qualname)
        assert node is not None, f"{source.cite()}: no {source.qualname}"
        first = re.match(r"\s*(\d+)", source.lines)
        if first:
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            assert start <= int(first.group(1)) <= node.end_lineno, source.cite()
        checked += 1
    assert checked


@pytest.mark.parametrize("engine", engine_names())
def test_a_table_differing_from_the_wheels_in_any_release_reads_as_stale(engine):
    """The staleness check compares the committed text with what the wheels
    render: the deltas must carry a change of any release, the oldest one
    included, into that text (here the committed rows stand in for the wheels)."""
    from dspark.converters.engine_install import recorded_fingerprints
    from dspark.converters.engine_lists import KEYS, recorded_lists

    rows = {release: dict(row) for release, row in recorded_fingerprints(engine).items()}
    listed = {release: {key: sorted(names) if names is not None else None
                        for key, names in recorded_lists(engine, release).items()} for release in rows}
    committed = generator.table_file(engine).read_text(encoding="utf-8")
    assert generator.render(engine, rows, listed) == committed
    for release in rows:
        function = next(iter(rows[release]))
        edited = {r: {**row, function: "0" * 16} if r == release else row for r, row in rows.items()}
        assert generator.render(engine, edited, listed) != committed, release
        key = KEYS[0]
        relisted = {r: {**lists, key: [*(lists[key] or []), "ANewClass"]} if r == release else lists
                    for r, lists in listed.items()}
        assert generator.render(engine, rows, relisted) != committed, release
