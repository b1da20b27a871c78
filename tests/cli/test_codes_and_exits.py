"""Codes and exits that had no test of their own: an unknown family is
exit 2 for check, convert and smoke alike, and TAP003 (an EAGLE-3 draft that names
no taps and is served the target's three defaults)."""

from __future__ import annotations

import json

import pytest

from dspark.cli.errors import EXIT_USAGE
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
def test_an_unknown_family_is_exit_2_for_check_and_convert(dspark, tmp_path, command):
    draft = unknown_family(tmp_path / "draft")
    args = [draft, tmp_path / "out"] if command == "convert" else [draft]
    run = dspark(command, *args)
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    text = " ".join(run.stderr.split())
    assert "'mystery_draft'" in text and "MysteryDraftModel" in text and "k3_dspark (K3DSparkModel)" in text
    assert not (tmp_path / "out").exists()


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
