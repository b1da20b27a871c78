"""`norm_output`, one key with two meanings (converters/layouts/norm_output.py):
SpecForge's "logits through the final norm" (default true, the un-normed
state fed back) against the engines' "feed the post-norm state back"
(default false, logits always normed). Drafts are fabricated as SpecForge's
export names them (`midlayer.*`, no other trainer's sign)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.examples.fabricate import write_eagle3_draft  # noqa: E402
from dspark.schema.errors import CheckpointError  # noqa: E402

ENGINES = ("vllm@0.33.0", "sglang@0.5.23", "tokenspeed@0.1.1")
TAPS = [1, 3, 5]


def _draft(tmp_path, name, **keys):
    return write_eagle3_draft(tmp_path / name, tap_ids=TAPS, config_edit=lambda c: c.update(keys))


def _codes(report):
    return [f.code for f in report.errors]


@pytest.mark.parametrize("engine", ENGINES)
def test_specforge_norm_output_true_is_served_feeding_the_normed_state_back(tmp_path, engine):
    report = check_checkpoint(_draft(tmp_path, "true", norm_output=True), engine=engine)
    assert "ENG008" in _codes(report)
    finding = next(f for f in report.errors if f.code == "ENG008")
    assert finding.detail["served"] == "post-norm state fed back" and finding.detail["convertible"]
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"


@pytest.mark.parametrize("engine", ENGINES)
def test_specforge_norm_output_false_cannot_be_served_and_convert_refuses(tmp_path, engine):
    draft = _draft(tmp_path, "false", norm_output=False)
    report = check_checkpoint(draft, engine=engine)
    finding = next(f for f in report.errors if f.code == "ENG008")
    assert finding.detail["served"] == "logits through the final norm" and not finding.detail["convertible"]
    with pytest.raises(CheckpointError) as refused:
        convert_checkpoint(draft, tmp_path / "out", ConvertOptions(engine=engine))
    assert refused.value.code == "ENG008"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("declared", [True, None])
def test_convert_writes_norm_output_false_and_lists_it(tmp_path, engine, declared):
    keys = {} if declared is None else {"norm_output": declared}
    converted = convert_checkpoint(_draft(tmp_path, "src", **keys), tmp_path / "out", ConvertOptions(engine=engine))
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["norm_output"] is False
    before = "absent" if declared is None else "True"
    assert any(c.startswith(f"norm_output: {before} -> False") for c in converted.plan.config_changes)
    assert "ENG008" not in _codes(check_checkpoint(tmp_path / "out", engine=engine))


def test_absent_norm_output_means_the_same_to_both(tmp_path):
    report = check_checkpoint(_draft(tmp_path, "absent"), engine="sglang@0.5.23")
    assert "ENG008" not in [f.code for f in report.findings]


@pytest.mark.parametrize("sign", ["torchspec_marker", "speculators_key"])
def test_another_writers_sign_reads_the_engines_meaning(tmp_path, sign):
    keys = {"norm_output": True}
    keys.update({"_torchspec_version": "0.1"} if sign == "torchspec_marker" else {"norm_before_residual": False})
    report = check_checkpoint(_draft(tmp_path, sign, **keys), engine="sglang@0.5.23")
    assert "ENG008" not in [f.code for f in report.findings]


def test_layers0_names_are_not_specforge(tmp_path):
    draft = write_eagle3_draft(tmp_path / "l0", tap_ids=TAPS, layout="layers.0",
                               config_edit=lambda c: c.update(norm_output=True))
    assert "ENG008" not in [f.code for f in check_checkpoint(draft, engine="vllm@0.33.0").findings]
