"""The fingerprint tables are stored as deltas between neighbouring
releases and read back whole (schema/engines/fingerprint_tables.py)."""

from __future__ import annotations

import importlib
import types

import pytest

from dspark.converters.engine_install import recorded_fingerprints
from dspark.converters.engine_lists import recorded_lists
from dspark.schema.engines import engine_names, release_profiles
from dspark.schema.engines import fingerprint_tables as tables

ROWS = {
    "0.3.0": {"a.py::f": "1", "a.py::g": "2", "b.py::h": None},
    "0.2.0": {"a.py::f": "1", "a.py::g": "9", "b.py::h": None},
    "0.1.0": {"a.py::f": "1", "a.py::g": "9", "b.py::h": "5"},
}
LISTS = {
    "0.3.0": {"drafts": ["A", "B", "C"], "targets": ["T"], "other": None},
    "0.2.0": {"drafts": ["A", "C", "D"], "targets": ["T"], "other": None},
    "0.1.0": {"drafts": ["A", "C", "D"], "targets": None, "other": ["X"]},
}


def _module(rows, lists) -> types.SimpleNamespace:
    newest, row, older = tables.deltas(rows, tables.changed_fingerprints)
    _, newest_lists, older_lists = tables.deltas(lists, tables.changed_lists)
    return types.SimpleNamespace(NEWEST=newest, FINGERPRINTS=row, OLDER_FINGERPRINTS=older,
                                 LISTS=newest_lists, OLDER_LISTS=older_lists)


def test_each_older_release_holds_only_what_differs_from_its_newer_neighbour():
    module = _module(ROWS, LISTS)
    assert module.NEWEST == "0.3.0" and module.FINGERPRINTS == ROWS["0.3.0"]
    assert module.OLDER_FINGERPRINTS == {"0.2.0": {"a.py::g": "9"}, "0.1.0": {"b.py::h": "5"}}
    assert module.OLDER_LISTS == {
        "0.2.0": {"drafts": {tables.LACKS: ["B"], tables.ADDS: ["D"]}},
        "0.1.0": {"targets": {tables.WHOLE: None}, "other": {tables.WHOLE: ["X"]}},
    }


def test_the_deltas_give_every_release_whole_back_in_order():
    module = _module(ROWS, LISTS)
    assert tables.fingerprints_of(module) == ROWS
    assert list(tables.fingerprints_of(module)) == list(ROWS)
    assert tables.lists_of(module) == LISTS


def test_a_change_in_one_release_reaches_only_that_release_and_the_ones_below_it_that_say_nothing():
    module = _module(ROWS, LISTS)
    module.OLDER_FINGERPRINTS["0.2.0"]["a.py::f"] = "7"
    whole = tables.fingerprints_of(module)
    assert whole["0.3.0"]["a.py::f"] == "1"
    # 0.1.0 records no change of f over 0.2.0: it reads 0.2.0's
    assert whole["0.2.0"]["a.py::f"] == whole["0.1.0"]["a.py::f"] == "7"


def test_releases_recording_different_functions_are_refused():
    with pytest.raises(ValueError):
        tables.deltas({"0.2.0": {"f": "1"}, "0.1.0": {"g": "1"}}, tables.changed_fingerprints)


@pytest.mark.parametrize("engine", engine_names())
def test_every_modelled_release_has_its_whole_table(engine):
    recorded = recorded_fingerprints(engine)
    assert list(recorded) == [profile.revision for profile in release_profiles(engine)]
    functions = list(recorded[next(iter(recorded))])
    assert functions and all(list(row) == functions for row in recorded.values())
    module = importlib.import_module(f"dspark.schema.engines.{engine}.fingerprints")
    # stored as deltas: no older release repeats a fingerprint of its newer neighbour
    releases = list(recorded)
    for newer, older in zip(releases, releases[1:]):
        assert all(recorded[newer][f] != value for f, value in module.OLDER_FINGERPRINTS[older].items())
        assert recorded_lists(engine, older) is not None
