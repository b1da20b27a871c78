"""Every dimension has a bound a real model stays under, and a finding code
that floods the report is grouped into one finding."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources

import pytest

from dspark.schema.families import FAMILIES, K3_DSPARK, MAX_DIMENSION, MAX_LAYERS, MAX_TAPS, dims_within_bounds
from dspark.schema.findings import GROUP_THRESHOLD, GROUPED_COUNT, Finding, Severity, count_by_severity, group_findings
from dspark.schema.rules import check_contract
from dspark.examples.fabricate import SCALES, draft_config

INTEGER_FIELDS = {
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "head_dim", "vocab_size",
    "draft_vocab_size", "target_hidden_size", "target_num_hidden_layers", "num_target_layers", "markov_rank",
    "max_position_embeddings", "mask_token_id",
}


def schema(family) -> dict:
    return json.loads(resources.files("dspark.schema.families").joinpath(family.schema_file).read_text(encoding="utf-8"))


def resolved_property(document: dict, spec: dict) -> dict:
    # A nullable field: judge its non-null alternative.
    if "anyOf" in spec and not any(alt.get("type") == "array" for alt in spec["anyOf"]):
        spec = next(alt for alt in spec["anyOf"] if alt.get("type") != "null")
    while "$ref" in spec:
        spec = document["$defs"][spec["$ref"].rsplit("/", 1)[-1]]
    return spec


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_integer_field_of_the_schema_has_a_maximum(family) -> None:
    document = schema(family)
    for name, spec in document["properties"].items():
        if name in INTEGER_FIELDS:
            resolved = resolved_property(document, spec)
            assert isinstance(resolved.get("maximum"), int), name
            assert resolved.get("description"), f"{name}: the bound says why"
    tap_field = next(f for f in ("target_layer_ids", "eagle_aux_hidden_state_layer_ids") if f in document["properties"])
    taps = resolved_property(document, document["properties"][tap_field])
    for alternative in taps.get("anyOf", [taps]):
        if alternative.get("type") == "array":
            assert alternative["maxItems"] == MAX_TAPS


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_rules_guard_never_refuses_what_the_schema_accepts(family) -> None:
    """The guard in `expected_tensors` is a backstop: every value the schema
    allows expands."""
    document = schema(family)
    limits = {"N": MAX_LAYERS, "S": MAX_TAPS}
    for symbol, source in family.dims.items():
        if isinstance(source, str):
            maximum = resolved_property(document, document["properties"][source])["maximum"]
            assert maximum <= limits.get(symbol, MAX_DIMENSION), (symbol, source)


def test_dims_past_their_bound_are_left_out() -> None:
    dims = {"N": MAX_LAYERS + 1, "S": MAX_TAPS, "h": MAX_DIMENSION + 1, "vocab": 163840}
    assert dims_within_bounds(dims) == {"S": MAX_TAPS, "vocab": 163840}


@pytest.mark.parametrize("symbol", ["N", "S", "h"])
def test_expected_tensors_never_expands_past_a_bound(symbol: str) -> None:
    dims = K3_DSPARK.resolve_dims(draft_config(SCALES["tiny"]))
    dims[symbol] = 10**12
    expected, unresolved = K3_DSPARK.expected_tensors(dims, {"fc_norm": True})
    assert len(expected) < 100
    assert unresolved  # the rules over that dimension: not expanded, so not judged


@pytest.mark.parametrize(
    "field, bound",
    [("num_hidden_layers", 1024), ("num_target_layers", 64), ("vocab_size", 2**24), ("hidden_size", 2**18)],
)
def test_a_value_past_its_bound_is_a_cfg003_naming_the_field(field: str, bound: int) -> None:
    config = draft_config(SCALES["tiny"])
    config[field] = bound + 1
    findings = check_contract(config, []).findings
    [finding] = [f for f in findings if f.code == "CFG003"]
    assert finding.detail == {"field": field, "validator": "maximum"}
    assert f"{field}: {bound + 1} is greater than the maximum of {bound}" in finding.message
    config[field] = bound
    assert not [f for f in check_contract(config, []).findings if f.code == "CFG003"]


def unexpected(count: int) -> list[Finding]:
    return [Finding("INV002", f"stray.{n} has no destination", file="model.safetensors", tensor=f"stray.{n}")
            for n in range(count)]


def test_a_few_findings_of_a_code_are_kept_as_they_are() -> None:
    findings = unexpected(GROUP_THRESHOLD)
    assert group_findings(findings) == findings


def test_more_findings_of_a_code_become_one_that_counts_them() -> None:
    before = [Finding("STR002", "stream")]
    after = [Finding("INV007", "float32")]
    grouped = group_findings(before + unexpected(100_000) + after)
    assert [f.code for f in grouped] == ["STR002", "INV002", "INV007"]
    finding = grouped[1]
    assert finding.severity.value == "error"
    assert finding.detail[GROUPED_COUNT] == 100_000
    assert finding.detail["examples"] == [f"stray.{n}" for n in range(5)]
    assert finding.message.startswith(
        "100,000 findings: unexpected tensor (the serving loader has no destination): "
        "stray.0, stray.1, stray.2, stray.3, stray.4 and 99,995 more. The first: stray.0 has no destination"
    )
    assert count_by_severity(grouped) == {"error": 100_000, "warning": 1, "info": 1}


def test_grouping_is_per_code() -> None:
    findings = unexpected(30) + [Finding("INV001", f"missing.{n}", tensor=f"missing.{n}") for n in range(3)]
    assert Counter(f.code for f in group_findings(findings)) == Counter({"INV002": 1, "INV001": 3})


def test_an_error_is_never_grouped_into_a_warning_of_the_same_code() -> None:
    """IDX005 is a warning for identical copies and an error for copies that
    differ or were not compared: grouped, the errors stay errors."""
    warnings = [Finding("IDX005", f"same.{n}", tensor=f"same.{n}", severity=Severity.WARNING) for n in range(25)]
    errors = [Finding("IDX005", f"not compared.{n}", tensor=f"big.{n}") for n in range(3)]
    grouped = group_findings(warnings[:10] + errors + warnings[10:])
    assert [(f.code, f.severity.value) for f in grouped] == [("IDX005", "warning")] + [("IDX005", "error")] * 3
    assert grouped[0].detail[GROUPED_COUNT] == 25
    assert count_by_severity(grouped) == {"error": 3, "warning": 25, "info": 0}
