"""A folder or file name that is not UTF-8 comes out one way: each such
byte written `\\xff` on the page, in errors, in JSON and in annotations
(SARIF's URIs percent-encode it, as URIs do)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from dspark.cli.errors import EXIT_USAGE

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX file names are bytes")


@pytest.fixture
def odd_draft(tiny_draft, tmp_path):
    draft = tiny_draft()
    odd = tmp_path / os.fsdecode(b"dr\xffaft")
    shutil.move(draft, odd)
    return odd


def test_every_format_spells_the_byte_the_same(dspark, odd_draft, tmp_path):
    shown = str(tmp_path) + "/dr\\xffaft"
    human = dspark("check", odd_draft)
    assert human.stdout.splitlines()[0].split()[-1] == shown
    document = json.loads(dspark("check", odd_draft, "--format", "json").stdout)  # strict: no lone surrogates
    assert document["checkpoint"] == shown
    junit = dspark("check", odd_draft, "--format", "junit").stdout
    assert f'name="dspark check {shown}"' in junit
    for run in (human, junit):
        assert "\\udcff" not in str(run) and "%ED%B3%BF" not in str(run)


def test_annotations_and_errors_spell_it_so_too(dspark, odd_draft, tmp_path):
    (odd_draft / os.fsdecode(b"x\xfe.safetensors")).write_bytes((odd_draft / "model.safetensors").read_bytes())
    annotations = dspark("check", odd_draft, "--format", "github").stdout
    assert "x\\xfe.safetensors" in annotations and "%ED%B3" not in annotations
    empty = tmp_path / os.fsdecode(b"empty\xfe")
    empty.mkdir()
    run = dspark("check", empty)
    assert run.exit_code == EXIT_USAGE
    assert run.stderr.startswith(f"error: {tmp_path}/empty\\xfe: ")
