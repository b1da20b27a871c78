"""Which layers a draft was trained on: the tap numbering inferred from
what the folder says of its origin (TAP004, and why), both readings when
nothing says (TAP005), and an engine that reads the same list in another
numbering served wrong (TAP006). Real folders, written by the
fabricators."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.schema.engines import default_engine
from dspark.schema.engines.base import HIDDEN_STATES, Source, TapNumbering
from dspark.schema.findings import Severity

pytest.importorskip("torch")
from dspark.examples.fabricate import write_eagle3_draft  # noqa: E402

TAPS = [1, 9, 17]


def codes(report, severity: Severity) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is severity)


def finding(report, code: str):
    [found] = [f for f in report.findings if f.code == code]
    return found


def test_native_midlayer_names_are_read_as_layer_outputs(tmp_path):
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tap_ids=TAPS))
    note = finding(report, "TAP004")
    assert note.severity is Severity.INFO and "midlayer" in note.message
    assert note.detail["layers"] == TAPS and report.passed()


def test_ids_under_eagle_config_are_read_as_layer_outputs(tmp_path):
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tap_ids=TAPS))
    assert "eagle_config" in finding(report, "TAP004").detail["why"]


def test_a_torchspec_run_config_names_its_inference_engine(tmp_path):
    run = tmp_path / "run"
    draft = write_eagle3_draft(run / "checkpoints" / "hf", tap_ids=TAPS, layout="layers.0")
    (run / "config.yaml").write_text("inference:\n  inference_engine_type: vllm\n")
    note = finding(check_checkpoint(draft), "TAP004")
    assert "TorchSpec run's config.yaml (inference engine vllm)" in note.message
    assert note.detail["layers"] == TAPS


def test_when_nothing_says_both_readings_are_given(tmp_path):
    # layers.0.* names alone: speculators' layout, or an export for vLLM
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=TAPS, layout="layers.0")
    report = check_checkpoint(draft)
    warning = finding(report, "TAP005")
    assert warning.severity is Severity.WARNING and not [f for f in report.findings if f.code == "TAP004"]
    assert warning.detail["layers_if_layer_output"] == [1, 9, 17]
    assert warning.detail["layers_if_hidden_states"] == [0, 8, 16]
    assert "1, 9, 17" in warning.message and "0, 8, 16" in warning.message
    assert report.passed()  # a warning: the verdict does not guess


def _hidden_states_twin():
    """TokenSpeed's profile with the EAGLE-3 Llama ids read as hidden_states indices."""
    base = default_engine()
    loader = base.loader_for("eagle3_llama")
    numbering = TapNumbering(HIDDEN_STATES, "id k is hidden_states[k]", Source("fake.py", "1", "v1"))
    loaders = {**base.loaders, "eagle3_llama": dataclasses.replace(
        loader, taps=dataclasses.replace(loader.taps, numbering=numbering))}
    return dataclasses.replace(base, name="fake", revision="1", loaders=loaders)


def test_an_engine_numbering_the_trained_list_otherwise_serves_it_wrong(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=TAPS)
    report = check_checkpoint(draft, engine=[default_engine(), _hidden_states_twin()])
    rows = {row["engine"]: row for row in report.engine_verdicts()}
    assert rows["tokenspeed@0.1.1"]["outcome"] == "pass"
    assert rows["fake@1"]["outcome"] == "served_wrong" and rows["fake@1"]["why"][0]["code"] == "TAP006"
    served_wrong = finding(report, "TAP006")
    assert served_wrong.detail == {"engine": "fake@1", "trained_layers": [1, 9, 17], "captured_layers": [0, 8, 16],
                                   "numbering": "layer_output", "engine_numbering": "hidden_states",
                                   "engines": ["fake@1"]}
    # the engines disagree on the layers: one finding says which reads what
    assert "fake@1 taps the outputs of target layers 0, 8, 16" in finding(report, "TAP007").message


def test_a_draft_without_a_list_says_nothing_of_numbering(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=None,
                               config_edit=lambda c: c.pop("eagle_aux_hidden_state_layer_ids", None))
    report = check_checkpoint(draft)
    assert not {"TAP004", "TAP005", "TAP006"} & set(codes(report, Severity.INFO) | codes(report, Severity.WARNING))




def test_the_names_spelled_twice_agree():
    from dspark.converters.layouts import speculators, tap_origin, torchspec

    assert (tap_origin.RUN_CONFIG, tap_origin.SPECULATORS) == (torchspec.RUN_CONFIG, speculators.TRAINER)


def test_a_check_of_an_engine_layout_folder_loads_no_trainer_layout(tmp_path):
    import subprocess
    import sys

    draft = write_eagle3_draft(tmp_path / "d", tap_ids=TAPS)
    code = ("import sys; from dspark.converters.check import check_checkpoint; "
            f"check_checkpoint({str(draft)!r}); "
            "print(sorted(m for m in sys.modules if m.startswith('dspark.converters.layouts.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "speculators" not in loaded and "torchspec" not in loaded and "omegaconf" not in loaded


def test_the_vllm_export_is_judged_in_each_engines_numbering(tmp_path):
    # tools/convert_to_hf.py@6f21829:146-159 adds 1 to a kimi_k2 draft's ids
    # for vLLM: an engine reading them as layer outputs (TokenSpeed) taps one
    # layer late and convert takes the 1 off (SRV001); an engine reading them
    # as hidden_states indices serves them as they are.
    def vllm_kimi(config):
        config.update(model_type="kimi_k2", _torchspec_version="0.1.0", eagle_config=None,
                      eagle_aux_hidden_state_layer_ids=[2, 6, 10])

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", layout="layers.0", config_edit=vllm_kimi)
    base = default_engine()
    loader = base.loader_for("eagle3_mla")
    numbering = TapNumbering(HIDDEN_STATES, "id k is hidden_states[k]", Source("fake.py", "1", "v1"))
    fake = dataclasses.replace(base, name="fake", revision="1", loaders={
        **base.loaders, "eagle3_mla": dataclasses.replace(loader, taps=dataclasses.replace(
            loader.taps, numbering=numbering))})
    report = check_checkpoint(draft, engine=[base, fake])
    rows = {r.engine: r for r in report.engine_reports}
    assert "SRV001" in {f.code for f in rows["tokenspeed@0.1.1"].findings}
    assert "SRV001" not in {f.code for f in rows["fake@1"].findings}
    assert rows["tokenspeed@0.1.1"].resolved.target_layer_ids == [1, 5, 9]
    assert rows["fake@1"].resolved.target_layer_ids == [2, 6, 10]
    # both capture the layers it was trained on: the outputs of 1, 5, 9
    assert rows["tokenspeed@0.1.1"].resolved.tap_layers == rows["fake@1"].resolved.tap_layers == [1, 5, 9]
    assert not [f for f in report.findings if f.code in ("TAP006", "TAP007")]
    assert finding(report, "TAP004").detail["numbering"] == "hidden_states"
