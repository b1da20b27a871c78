"""Only strict JSON gets in: NaN, Infinity and duplicate keys are refused
wherever dspark reads JSON (config.json, --target, --config, safetensors
headers), with the file and the field named."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.converters.json_input import JsonInputError, loads_strict
from dspark.converters.readers.safetensors_io import read_header
from dspark.examples.fabricate import SCALES
from dspark.schema.errors import CheckpointError, UsageError


@pytest.mark.parametrize(
    "text, field, literal",
    [
        pytest.param('{"rms_norm_eps": NaN}', "rms_norm_eps", "NaN", id="NaN"),
        pytest.param('{"rope_theta": Infinity}', "rope_theta", "Infinity", id="Infinity"),
        pytest.param('{"a": 1, "rope_parameters": {"factor": -Infinity}}', "rope_parameters.factor", "-Infinity", id="nested"),
        pytest.param('{"target_layer_ids": [1, 2, 1e999]}', "target_layer_ids[2]", "1e999", id="overflow"),
        pytest.param("NaN", "(top level)", "NaN", id="top-level"),
    ],
)
def test_nonfinite_numbers_are_refused_naming_the_field(text: str, field: str, literal: str) -> None:
    with pytest.raises(JsonInputError) as refused:
        loads_strict(text)
    assert (refused.value.reason, refused.value.field, refused.value.literal) == ("nonfinite", field, literal)
    assert str(refused.value).startswith(f"{field} is {literal}")


def test_strict_json_still_reads_json() -> None:
    text = '{"a": 1e-5, "b": [1, 2.5, -0.0, 1e300], "c": {"d": null, "e": "NaN"}}'
    assert loads_strict(text) == json.loads(text)


def test_a_duplicate_key_is_refused_at_any_depth() -> None:
    with pytest.raises(JsonInputError) as refused:
        loads_strict('{"a": {"b": 1, "b": 2}}')
    assert (refused.value.reason, refused.value.field) == ("duplicate_key", "b")


def test_an_integer_too_long_to_convert_is_invalid_json_not_a_crash() -> None:
    with pytest.raises(JsonInputError) as refused:
        loads_strict('{"n": ' + "9" * 5000 + "}")
    assert refused.value.reason == "not_json"


def nan_config(draft: Path, field: str = "rms_norm_eps", value: float = math.nan) -> None:
    config = json.loads((draft / "config.json").read_text())
    config[field] = value
    # what Python's json.dump writes for a float that is not finite
    (draft / "config.json").write_text(json.dumps(config, indent=2))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["NaN", "Infinity", "-Infinity"])
def test_a_draft_config_with_a_nonfinite_value_fails_with_cfg010(tiny_draft, value: float) -> None:
    draft = tiny_draft()
    nan_config(draft, "rms_norm_eps", value)
    report = check_checkpoint(draft)
    assert not report.passed()
    [finding] = report.errors
    assert finding.code == "CFG010" and finding.file == "config.json"
    assert finding.detail["field"] == "rms_norm_eps"
    assert finding.message.startswith("config.json: rms_norm_eps is ")


def test_a_target_config_with_nan_is_refused_naming_file_and_field(tiny_draft, tmp_path: Path) -> None:
    spec = SCALES["tiny"]
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "hidden_size": spec.target_hidden_size, "num_hidden_layers": spec.target_num_hidden_layers,
        "vocab_size": spec.vocab_size, "text_config": {"rms_norm_eps": math.nan},
    }))
    with pytest.raises(UsageError) as refused:
        check_checkpoint(tiny_draft(), target=target)
    assert "target/config.json" in refused.value.message
    assert "text_config.rms_norm_eps is NaN" in refused.value.message


def test_convert_refuses_a_nan_config_and_writes_nothing(tiny_draft, tmp_path: Path) -> None:
    from dspark.converters.convert import ConvertOptions, convert_checkpoint

    draft = tiny_draft()
    config = tmp_path / "override.json"
    config.write_text((draft / "config.json").read_text().replace('"rope_theta": 50000.0', '"rope_theta": Infinity'))
    assert "Infinity" in config.read_text()
    with pytest.raises(CheckpointError) as refused:
        convert_checkpoint(draft, tmp_path / "out", ConvertOptions(config_path=config))
    assert refused.value.code == "CFG010"
    assert "rope_theta is Infinity" in refused.value.message
    assert not (tmp_path / "out").exists()


def test_convert_never_writes_nan_into_a_config(tmp_path: Path) -> None:
    from dspark.converters.writers.atomic import write_json

    with pytest.raises(ValueError):
        write_json(tmp_path / "config.json", {"rms_norm_eps": math.nan})
    assert not (tmp_path / "config.json").exists()


def test_a_safetensors_header_with_nan_is_corrupt(tmp_path: Path) -> None:
    raw = b'{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}'
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    with pytest.raises(CheckpointError) as refused:
        read_header(path)
    assert refused.value.code == "STF001" and refused.value.detail["reason"] == "nonfinite"
    assert "w.shape[0] is NaN" in refused.value.message


def test_a_shard_index_with_nan_is_idx001_naming_the_field(tiny_draft) -> None:
    draft = tiny_draft(shards=2)
    index = draft / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    document["metadata"]["total_size"] = math.nan
    index.write_text(json.dumps(document))
    report = check_checkpoint(draft)
    [finding] = [f for f in report.findings if f.code == "IDX001"]
    assert "metadata.total_size is NaN" in finding.message
    assert not report.passed()
