"""Codes and exits that had no test of their own: an unknown family is a
verdict for check and convert (ENG007, exit 1: a gate must not read it as a
usage error), exit 2 for smoke (nothing to run), and TAP003 (an EAGLE-3 draft that names
no taps and is served the target's three defaults)."""

from __future__ import annotations

import json

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_USAGE
from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import write_draft
from dspark.examples.fabricate_eagle3 import write_eagle3_draft
from dspark.schema.findings import FINDING_CODES, Severity


def unknown_family(folder):
    draft = write_draft(folder)
    config = json.loads((draft / "config.json").read_text())
    config.update(model_type="mystery_draft", architectures=["MysteryDraftModel"])
    (draft / "config.json").write_text(json.dumps(config))
    return draft


@pytest.mark.parametrize("command", ["check", "convert"])
def test_an_unknown_family_fails_unjudged_for_check_and_convert(dspark, tmp_path, command):
    draft = unknown_family(tmp_path / "draft")
    args = [draft, tmp_path / "out"] if command == "convert" else [draft]
    run = dspark(command, *args)
    assert run.exit_code == EXIT_CHECK_FAILED, run.stdout + run.stderr
    text = " ".join((run.stdout + run.stderr).split())
    assert "does not model this draft family" in text
    assert "ENG007" in text or command == "convert"  # convert's human error line carries no code
    assert "'mystery_draft'" in text and "MysteryDraftModel" in text and "k3_dspark (K3DSparkModel)" in text
    assert not (tmp_path / "out").exists()


def test_an_unknown_family_is_not_judged_in_every_engine_row(tmp_path):
    report = check_checkpoint(unknown_family(tmp_path / "draft"), engine="all")
    rows = report.to_dict()["engine_verdicts"]
    assert {row["outcome"] for row in rows} == {"not_judged"} and len(rows) == 3
    assert all(row["why"][0]["code"] == "ENG007" for row in rows)


def test_an_eagle3_draft_without_tap_ids_is_told_the_defaults_it_gets(tmp_path):
    def no_taps(config: dict) -> None:
        config.pop("eagle_aux_hidden_state_layer_ids", None)

    draft = write_eagle3_draft(tmp_path / "draft", config_edit=no_taps)
    report = check_checkpoint(draft)
    [note] = [f for f in report.findings if f.code == "TAP003"]
    assert note.severity is Severity.INFO is FINDING_CODES["TAP003"].severity
    assert "no tap ids" in note.message and note.detail["target_ids"] is None
    assert report.passed()


def test_an_unknown_family_is_exit_2_for_smoke_too(dspark, tmp_path):
    pytest.importorskip("torch")
    draft = unknown_family(tmp_path / "draft")
    run = dspark("smoke", draft, "--device", "cpu")
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert "k3_dspark (K3DSparkModel)" in " ".join(run.stderr.split())
