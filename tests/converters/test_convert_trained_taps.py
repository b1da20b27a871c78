"""The layers a draft was trained on survive `dspark convert --engine`:
convert writes the tap ids in the target engine's numbering, records the
trained layers in its manifest, and `check` of the output judges what the
engine captures against those layers, not against the ids convert wrote.

SpecForge writes EAGLE-3 ids under `eagle_config` as layer outputs (it
captures through SGLang); vLLM reads the top-level list as hidden_states
indices, one higher (tap_origin.py's module docstring has the citations).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import convert_checkpoint
from dspark.converters.convert_plan import ConvertOptions
from dspark.examples.fabricate import target_config, write_eagle3_draft

pytest.importorskip("torch")

TRAINED = [1, 3, 5]


def specforge_draft(folder: Path) -> Path:
    """An EAGLE-3 draft as SpecForge writes its taps: eagle_config's list only."""
    def taps_under_eagle_config(config: dict) -> None:
        config.pop("eagle_aux_hidden_state_layer_ids", None)
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(TRAINED)}

    return write_eagle3_draft(folder, config_edit=taps_under_eagle_config)


@pytest.fixture
def target(tmp_path) -> Path:
    path = tmp_path / "target.json"
    path.write_text(json.dumps(target_config("eagle3_llama", "tiny")))
    return path


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tokenspeed"])
def test_the_engine_captures_the_trained_layers_after_convert(tmp_path, target, engine):
    source = specforge_draft(tmp_path / "src")
    out = tmp_path / "out"
    convert_checkpoint(source, out, ConvertOptions(engine=engine))
    report = check_checkpoint(out, target=target, engine=engine)
    assert report.passed(strict=False), [f.message for f in report.findings]
    assert report.resolved.tap_layers == TRAINED
    manifest = json.loads((out / "dspark-manifest.json").read_text())
    assert manifest["trained_taps"]["layers"] == TRAINED
    assert manifest["trained_taps"]["path"] == "eagle_config.eagle_aux_hidden_state_layer_ids"


def test_vllm_gets_hidden_states_ids_one_higher_and_convert_says_so(tmp_path):
    out = tmp_path / "out"
    report = convert_checkpoint(specforge_draft(tmp_path / "src"), out, ConvertOptions(engine="vllm"))
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]
    assert any(change.startswith("eagle_aux_hidden_state_layer_ids: [1, 3, 5] -> [2, 4, 6]")
               for change in report.plan.config_changes), report.plan.config_changes


def test_a_converted_folder_whose_ids_were_edited_back_is_served_wrong(tmp_path, target):
    out = tmp_path / "out"
    convert_checkpoint(specforge_draft(tmp_path / "src"), out, ConvertOptions(engine="vllm"))
    config = json.loads((out / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = list(TRAINED)  # what convert used to write
    (out / "config.json").write_text(json.dumps(config))
    report = check_checkpoint(out, target=target, engine="vllm")
    tap006 = [f for f in report.findings if f.code == "TAP006"]
    assert tap006 and tap006[0].detail["trained_layers"] == TRAINED
    assert tap006[0].detail["captured_layers"] == [0, 2, 4]
    assert not report.passed()
