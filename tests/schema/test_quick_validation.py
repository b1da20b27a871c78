"""`certainly_valid` proves a config valid only where jsonschema finds
nothing wrong: checked on every fabricated config (each family, scale,
engine layout and defect) and on thousands of one-field changes of them.
A check of a valid config then never imports jsonschema (docs/check.md)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from dspark.examples.fabricate import FABRICATORS, plan_draft, shape_tensors
from dspark.schema.engines import engine_names
from dspark.schema.families import family_for_config
from dspark.schema.rules.config import _validator, load_config_schema
from dspark.schema.rules.quick_validation import certainly_valid

# Values a config field may be changed to: every JSON type, the integer
# that is a float, bool against int, strings a stream field takes.
VALUES = [None, True, False, 0, 1, -1, 2, 2.0, 1.5, -2.5, 10**20, 1e-5, float("nan"), float("inf"), "", "prefix",
          "PREFIX", "attn_res", "x", "1", [], [1], [1.0], [True], ["a"], [1, 2, 3], list(range(100)), {}, {"a": 1}]


def _configs():
    """(id, config, good) for every family at every scale and engine
    layout, and with each defect that leaves a config object."""
    for family, fab in FABRICATORS.items():
        layouts = [None, *engine_names()] if "engine" in fab.options else [None]
        for scale in sorted(set(fab.scales)):
            for engine in layouts:
                plan = plan_draft(family, scale, engine=engine)
                yield f"{family}-{scale}-{engine}", fab.config(plan.scale, plan.options), True
        for defect in fab.defects:
            plan = plan_draft(family, "tiny", defect)
            config = fab.config(plan.scale, plan.options)
            fab.defects[defect].apply(config, shape_tensors(fab.specs(plan.scale, config, plan.options)))
            if isinstance(config, dict) and _schema_file(config) is not None:
                yield f"{family}-{defect}", config, False


def _errors(config, schema_file: str) -> list:
    return list(_validator(schema_file).iter_errors(config))


def _schema_file(config) -> str | None:
    try:
        return family_for_config(config).schema_file
    except Exception:  # noqa: BLE001 - a defect that breaks recognition has no schema to judge by
        return None


def _changed(config: dict):
    """Each one-field change: a field (or a nested object's field, or a
    list's first item) replaced by each of VALUES, or removed."""
    for key, value in config.items():
        without = dict(config)
        del without[key]
        yield without
        for replacement in VALUES:
            yield {**config, key: replacement}
        if isinstance(value, list) and value:
            for replacement in VALUES:
                yield {**config, key: [replacement, *value[1:]]}
        if isinstance(value, dict):
            for inner in _changed(value):
                yield {**config, key: inner}


CONFIGS = list(_configs())


def test_every_good_fabricated_config_is_proved_valid():
    """The point of the quick path: a good draft's config needs no jsonschema."""
    good = [(name, config) for name, config, is_good in CONFIGS if is_good]
    assert len(good) >= 8
    for name, config in good:
        schema_file = _schema_file(config)
        assert _errors(config, schema_file) == [], name
        assert certainly_valid(config, load_config_schema(schema_file)), name


@pytest.mark.parametrize("name,config,good", CONFIGS, ids=[name for name, _, _ in CONFIGS])
def test_a_config_proved_valid_is_one_jsonschema_finds_nothing_in(name, config, good):
    schema_file = _schema_file(config)
    schema = load_config_schema(schema_file)
    if certainly_valid(config, schema):
        assert _errors(config, schema_file) == [], name


def test_no_one_field_change_is_proved_valid_when_jsonschema_finds_a_fault():
    proved = valid = wrong = 0
    seen = set()
    for name, config, good in CONFIGS:
        if not good:
            continue
        schema_file = _schema_file(config)
        schema = load_config_schema(schema_file)
        for changed in _changed(config):
            key = (schema_file, json.dumps(changed, sort_keys=True, default=repr))
            if key in seen:
                continue
            seen.add(key)
            quick, errors = certainly_valid(changed, schema), _errors(copy.deepcopy(changed), schema_file)
            wrong += quick and bool(errors)
            valid += not errors
            proved += quick
    assert wrong == 0
    # ... and it proves most valid ones (the rest go to jsonschema: 1 for
    # 1.0 in an enum, NaN against a bound).
    assert len(seen) > 7000 and proved >= 0.9 * valid, (proved, valid)


def test_what_it_does_not_model_it_does_not_prove():
    assert not certainly_valid(1, {"type": "integer", "multipleOf": 2})  # a keyword it does not know
    assert not certainly_valid(1, {"$ref": "other.json#/x"})
    assert not certainly_valid(1.0, {"enum": [1]})  # jsonschema: equal; here: not proved
    assert not certainly_valid(True, {"const": 1})
    assert not certainly_valid(float("nan"), {"type": "number", "minimum": 0})
    assert not certainly_valid(2.0, {"type": "integer"})  # dspark's integer: a JSON integer
    assert not certainly_valid([], False)
    assert certainly_valid([1, 2], {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 2})
    assert not certainly_valid([1, 2, 3], {"type": "array", "items": {"type": "integer"}, "maxItems": 2})


def test_a_check_of_a_valid_config_does_not_import_jsonschema(tmp_path):
    from dspark.examples.fabricate import write_draft

    good, bad = write_draft(tmp_path / "good"), write_draft(tmp_path / "bad")
    config = json.loads((bad / "config.json").read_text())
    config["mla_use_nope"] = True  # CFG003: the engine implements only false
    (bad / "config.json").write_text(json.dumps(config))
    probe = ("import sys\nfrom dspark.cli.main import run\ncode = run(['check', sys.argv[1], '-q'])\n"
             "sys.stderr.write(f'{code} {\"jsonschema\" in sys.modules}\\n')")
    said = [subprocess.run([sys.executable, "-c", probe, str(folder)], capture_output=True, text=True,
                           timeout=120).stderr.split()[-2:] for folder in (good, bad)]
    assert said == [["0", "False"], ["1", "True"]]
