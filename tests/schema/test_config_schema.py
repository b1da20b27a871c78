"""The config JSON Schema files: valid draft 2020-12 schemas that accept the
reference config and refuse what the contract forbids."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from jsonschema import Draft202012Validator

from dspark.examples.fabricate import SCALES, draft_config
from dspark.schema.families import FAMILIES, K3_DSPARK
from dspark.schema.rules import schema_findings

SCHEMA_FILES = sorted(
    entry.name for entry in resources.files("dspark.schema.families").iterdir() if entry.name.endswith(".schema.json")
)


def load(name: str) -> dict:
    return json.loads(resources.files("dspark.schema.families").joinpath(name).read_text(encoding="utf-8"))


def test_every_family_has_a_shipped_schema_file():
    assert sorted({family.schema_file for family in FAMILIES}) == SCHEMA_FILES


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_schema_file_is_a_valid_draft_2020_12_schema(name):
    schema = load(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def k3_errors(config: dict) -> list[str]:
    """The fields dspark's config validation flags (CFG003 / STR001 / CFG008)."""
    return sorted(f.detail["field"] or "(top)" for f in schema_findings(config, K3_DSPARK, "config.json"))


def test_integers_must_be_json_integers():
    config = draft_config(SCALES["tiny"])
    config["num_hidden_layers"] = 2.0
    # JSON Schema itself counts 2.0 as an integer ...
    assert Draft202012Validator(load("k3_dspark.schema.json")).is_valid(config)
    # ... the serving code does not (range(2.0) raises), so dspark refuses it.
    assert k3_errors(config) == ["num_hidden_layers"]


@pytest.mark.parametrize("scale", sorted(SCALES))
def test_reference_configs_are_valid(scale):
    assert k3_errors(draft_config(SCALES[scale])) == []
    assert k3_errors(draft_config(SCALES[scale], fc_norm=False, stream=None)) == []


@pytest.mark.parametrize("stream", ["prefix", "attn_res", "PREFIX", "Attn_Res", "aTTn_rEs"])
def test_stream_is_case_insensitive(stream):
    config = draft_config(SCALES["tiny"], stream=stream)
    config["dflash_config"] = {"aux_hidden_stream": stream}
    assert k3_errors(config) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"aux_hidden_stream": "attn-res"}, "aux_hidden_stream", id="stream-hyphen"),
        pytest.param({"aux_hidden_stream": " prefix"}, "aux_hidden_stream", id="stream-space"),
        pytest.param({"aux_hidden_stream": ""}, "aux_hidden_stream", id="stream-empty"),
        pytest.param({"dflash_config": {"aux_hidden_stream": 1}}, "dflash_config.aux_hidden_stream", id="nested-stream"),
        pytest.param({"fc_norm": "true"}, "fc_norm", id="fc_norm-string"),
        pytest.param({"mla_use_nope": True}, "mla_use_nope", id="mla_use_nope"),
        pytest.param({"mla_use_output_gate": True}, "mla_use_output_gate", id="output-gate"),
        pytest.param({"hidden_size": 0}, "hidden_size", id="zero-width"),
        pytest.param({"num_hidden_layers": 2.0}, "num_hidden_layers", id="float-count"),
        pytest.param({"q_lora_rank": True}, "q_lora_rank", id="bool-rank"),
        pytest.param({"rms_norm_eps": 0}, "rms_norm_eps", id="eps-zero"),
        pytest.param({"hidden_act": "gelu"}, "hidden_act", id="act"),
        pytest.param({"markov_head_type": "gated"}, "markov_head_type", id="markov-head"),
        pytest.param({"mask_token_id": -1}, "mask_token_id", id="mask-negative"),
        pytest.param({"target_layer_ids": []}, "target_layer_ids", id="no-taps"),
        pytest.param({"target_layer_ids": [1, -4]}, "target_layer_ids.1", id="negative-tap"),
        pytest.param({"model_type": "dflash"}, "model_type", id="model_type"),
        pytest.param({"architectures": "K3DSparkModel"}, "architectures", id="architectures"),
    ],
)
def test_schema_refuses(change, field):
    config = draft_config(SCALES["tiny"])
    config.update(change)
    assert field in k3_errors(config)


@pytest.mark.parametrize("field", ["model_type", "hidden_size", "num_target_layers", "target_layer_ids", "markov_rank"])
def test_required_fields(field):
    config = draft_config(SCALES["tiny"])
    del config[field]
    assert k3_errors(config) == ["(top)"]
