"""Small promises of the command line: -q does not silence what was asked
for, an engine list names engines, help names its values in words, the
fabricator's files are readable as open() would make them."""

from __future__ import annotations

import os
import re
import stat

import pytest

from dspark.cli.errors import EXIT_OK, EXIT_USAGE
from dspark.cli.main import COMMANDS


def test_quiet_does_not_silence_explain_or_families(dspark):
    explained = dspark("explain", "PAY006", "-q")
    assert explained.exit_code == EXIT_OK and explained.stdout.startswith("PAY006 (")
    listed = dspark("families", "-q")
    assert listed.exit_code == EXIT_OK and "k3_dspark" in listed.stdout


@pytest.mark.parametrize("value", [",", "", "tokenspeed,", " , "])
@pytest.mark.parametrize("command", ["check", "families"])
def test_an_engine_list_without_a_name_is_refused(dspark, tiny_draft, command, value):
    args = (command, tiny_draft()) if command == "check" else (command,)
    run = dspark(*args, "--engine", value)
    assert run.exit_code == EXIT_USAGE
    assert "empty engine name" in run.stderr


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "version"])
def test_help_names_no_python_type_or_parser(dspark, command):
    page = dspark(command, "--help").stdout
    assert not re.findall(r"<(named_path|named|local_path|str|int|int range|path|float)>", page), page


def test_the_fabricator_writes_weights_as_open_would(tmp_path):
    from dspark.examples.fabricate import write_draft

    previous = os.umask(0o022)
    try:
        one = write_draft(tmp_path / "one")
        sharded = write_draft(tmp_path / "sharded", shards=2)
    finally:
        os.umask(previous)
    weights = [*one.glob("*.safetensors"), *sharded.glob("*.safetensors")]
    assert len(weights) == 3
    assert {stat.S_IMODE(path.stat().st_mode) for path in weights} == {0o644}


def test_a_5000_digit_integer_is_named_without_pythons_advice(dspark, tiny_draft):
    draft = tiny_draft()
    config = re.sub(r'"num_hidden_layers": \d+', '"num_hidden_layers": 1' + "0" * 4999, (draft / "config.json").read_text())
    (draft / "config.json").write_text(config)
    run = dspark("check", draft, "--format", "json")
    [finding] = [f for f in run.json()["findings"] if f["code"] == "CFG002"]
    assert "5,000 digits" in finding["message"] and "set_int_max_str_digits" not in finding["message"]

