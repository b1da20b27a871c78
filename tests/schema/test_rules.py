"""The contract rules on their own: a config and an inventory in, findings
out. (Every code is also tested end to end on fabricated checkpoints in
tests/converters/test_check.py.)"""

from __future__ import annotations

from collections import Counter

import pytest

from dspark.examples.fabricate import SCALES, draft_config, tensor_shapes
from dspark.schema.engines import engine_by_spec
from dspark.schema.findings import FINDING_CODES, Finding, Severity
from dspark.schema.inventory import PayloadStats, TensorEntry
from dspark.schema.rules import STREAM_ENV_VAR, TargetFacts, check_contract, payload_findings

TINY = SCALES["tiny"]


def inventory(shapes: dict, *, dtype: str = "BF16", prefix: str = "model.") -> list[TensorEntry]:
    return [TensorEntry(name, prefix + name, dtype, shape, "model.safetensors") for name, shape in shapes.items()]


def check(config: dict | None = None, entries=None, **options):
    config = draft_config(TINY) if config is None else config
    entries = inventory(tensor_shapes(TINY)) if entries is None else entries
    return check_contract(config, entries, **options)


def codes(result) -> Counter:
    return Counter(f.code for f in result.findings if f.severity is not Severity.INFO)


def test_the_reference_draft_passes_with_notes_only():
    result = check()
    assert codes(result) == Counter()
    notes = sorted(f.code for f in result.findings)
    assert notes == ["INV005", "INV005", "INV005", "STR002"]
    assert result.family.name == "k3_dspark"
    assert result.resolved.fc_norm is True and result.resolved.fc_norm_shipped == 5


def test_finding_severity_comes_from_the_code_table():
    assert Finding("FCN006", "x").severity is Severity.WARNING
    assert Finding("STR002", "x").severity is Severity.INFO
    with pytest.raises(ValueError, match="unknown finding code"):
        Finding("XYZ999", "x")
    assert set(Finding("CFG001", "x", file="config.json").to_dict()) == {
        "code", "severity", "message", "file", "tensor", "detail",
    }


def test_a_missing_dimension_takes_the_engine_default():
    # KimiK3DSparkConfig fills an absent hidden_size with 7168: the draft is
    # judged at that width, and the shapes no longer fit.
    config = draft_config(TINY)
    del config["hidden_size"]
    result = check(config)
    assert codes(result)["ENG003"] == 1 and codes(result)["INV003"] > 0
    assert "hidden_size = 7168" in next(f.message for f in result.findings if f.code == "ENG003")


def test_a_float_count_is_coerced_like_the_engine_does():
    config = draft_config(TINY)
    config["num_hidden_layers"] = 2.0
    assert codes(check(config)) == Counter({"ENG003": 1})
    config["num_hidden_layers"] = "2"
    assert codes(check(config)) == Counter({"ENG003": 1})
    config["num_hidden_layers"] = "two"
    assert codes(check(config)) == Counter({"CFG003": 1})


def test_a_negative_mask_token_is_reported_once():
    config = draft_config(TINY)
    config["mask_token_id"] = -1
    assert codes(check(config)) == Counter({"CFG008": 1})


def test_a_nested_mask_token_out_of_range_is_named_where_it_sits():
    # The drafter serves dflash_config's mask token (it must agree with the
    # validated top-level one, OVR001) and it must be a token of the vocabulary.
    config = draft_config(TINY)
    config["dflash_config"] = {"mask_token_id": TINY.vocab_size, "target_layer_ids": [1, 4, 7, 9, 11]}
    result = check(config)
    assert codes(result) == Counter({"CFG008": 1, "OVR001": 1})
    assert "dflash_config.mask_token_id" in next(f.message for f in result.findings if f.code == "CFG008")


def test_a_k3_mask_token_only_in_dflash_config_is_refused():
    config = draft_config(TINY)
    config["dflash_config"] = {"mask_token_id": config.pop("mask_token_id")}
    result = check(config)
    assert codes(result) == Counter({"CFG008": 1})
    assert "at the top level" in next(f.message for f in result.findings if f.code == "CFG008")


def test_fc_norm_weights_with_a_non_canonical_index_are_flagged():
    shapes = tensor_shapes(TINY)
    shapes["fc_norm.01.weight"] = shapes.pop("fc_norm.1.weight")
    result = check(entries=inventory(shapes))
    assert codes(result) == Counter({"FCN003": 2})  # fc_norm.01 names no tap; tap 1 has no weight


# --------------------------------------------------------------------------
# aux_hidden_stream


def stream_of(declared=None, nested=None, environ=None, target=None, engine=None):
    config = draft_config(TINY, stream=declared)
    if nested is not None:
        config["dflash_config"] = {"aux_hidden_stream": nested}
    result = check(config, environ=environ or {}, target=target, engine=engine)
    return result.resolved, result.findings


def test_stream_defaults_to_prefix_when_undeclared():
    resolved, findings = stream_of()
    assert (resolved.stream, resolved.stream_source) == ("prefix", "default (not declared)")
    note = next(f for f in findings if f.code == "STR002")
    assert note.detail == {"stream": "prefix", "source": "default (not declared)"}


@pytest.mark.parametrize("declared", ["attn_res", "ATTN_RES", "Attn_Res"])
def test_stream_is_case_insensitive(declared):
    resolved, _ = stream_of(declared)
    assert resolved.stream == "attn_res"
    assert resolved.stream_source == "config.json: aux_hidden_stream"


def test_dflash_config_stream_wins_over_the_top_level_on_the_1031_drafter():
    resolved, findings = stream_of("attn_res", nested="Prefix", engine=engine_by_spec("tokenspeed@pr1031"))
    assert resolved.stream == "prefix"
    assert resolved.stream_source == "config.json: dflash_config.aux_hidden_stream"
    assert not [f for f in findings if f.code == "STR005"]


def test_the_0_1_1_release_serves_the_top_level_stream_over_the_nested_one():
    resolved, findings = stream_of("attn_res", nested="Prefix")  # the default engine: tokenspeed@0.1.1
    assert (resolved.stream, resolved.stream_source) == ("attn_res", "config.json: aux_hidden_stream")
    assert {f.code for f in findings if f.severity is Severity.WARNING} == {"STR005", "STR008"}


def test_the_engine_ignores_the_stream_environment_variable():
    resolved, findings = stream_of("prefix", environ={STREAM_ENV_VAR: "ATTN_RES"})
    assert resolved.stream == "prefix"
    warning = next(f for f in findings if f.code == "STR004")
    assert warning.detail == {"env": STREAM_ENV_VAR, "value": "ATTN_RES", "served": "prefix"}
    assert "does not read it" in warning.message
    _, findings = stream_of("prefix", environ={STREAM_ENV_VAR: ""})
    assert {f.code for f in findings} == {"STR002", "INV005"}
    resolved, findings = stream_of("prefix", environ={STREAM_ENV_VAR: "residual"})
    assert resolved.stream == "prefix"
    assert [f.code for f in findings if f.severity is Severity.ERROR] == []


def test_attn_res_needs_a_target_with_positive_block_size():
    def target(**fields):
        base = {"model_type": "kimi_k3", "hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 96}
        return TargetFacts.from_config({**base, **fields}, "t")

    assert "STR005" in {f.code for f in stream_of("attn_res")[1]}
    # The K3 target's setter refuses a falsy block size
    # (models/kimi_k3.py@4b9766f6:2660-2680).
    for block in (None, 0):
        findings = stream_of("attn_res", target=target(attn_res_block_size=block))[1]
        assert [f.code for f in findings if f.severity is not Severity.INFO] == ["STR006"], block
    for block in (8, 12):
        findings = stream_of("attn_res", target=target(attn_res_block_size=block))[1]
        assert [f.code for f in findings if f.severity is not Severity.INFO] == []
    # absent: the K3 target config class defaults it to 12
    findings = stream_of("attn_res", target=target())[1]
    assert [f.code for f in findings if f.severity is not Severity.INFO] == []
    # a target that is not Kimi-K3 has no AttnRes capture at all
    qwen = TargetFacts.from_config({"model_type": "qwen3", "hidden_size": 40, "num_hidden_layers": 12,
                                    "vocab_size": 96, "attn_res_block_size": 8}, "t")
    findings = stream_of("attn_res", target=qwen)[1]
    # (its tap 11 is past what a non-K3 target captures, N-2: TGT005, tested elsewhere)
    assert [f.code for f in findings if f.severity is not Severity.INFO and f.code != "TGT005"] == ["STR006"]
    # a prefix draft does not care
    findings = stream_of("prefix", target=target(attn_res_block_size=0))[1]
    assert [f.code for f in findings if f.severity is not Severity.INFO] == []


def test_an_invalid_stream_resolves_to_nothing():
    resolved, findings = stream_of("residual")
    assert resolved.stream is None
    assert [f.code for f in findings if f.code.startswith("STR")] == ["STR001"]


# --------------------------------------------------------------------------
# --target


def test_target_facts_read_text_config_first():
    facts = TargetFacts.from_config(
        {"hidden_size": 1, "model_type": "llava",
         "text_config": {"hidden_size": 7168, "num_hidden_layers": 93},
         "vocab_size": 163840},
        "mm/config.json",
    )
    assert (facts.hidden_size, facts.num_hidden_layers, facts.vocab_size) == (7168, 93, 163840)


def test_a_kimi_k3_target_is_read_from_its_text_config_alone():
    # KimiK3Config builds the language model from text_config; its fields
    # default there, never to the wrapper's (configs/kimi_k3_config.py@f4d8ec6e:183, 390-420).
    facts = TargetFacts.from_config(
        {"hidden_size": 1, "model_type": "kimi_k3", "attn_res_block_size": 0,
         "text_config": {"hidden_size": 7168, "num_hidden_layers": 93, "vocab_size": 163840}},
        "k3/config.json",
    )
    assert (facts.hidden_size, facts.num_hidden_layers, facts.vocab_size) == (7168, 93, 163840)
    assert not facts.attn_res_declared and facts.effective_attn_res_block_size() == 12
    assert facts.can_supply_attn_res()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        pytest.param({"hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 96}, Counter(), id="match"),
        pytest.param({"hidden_size": 41, "num_hidden_layers": 12, "vocab_size": 96}, Counter({"TGT002": 1}), id="hidden"),
        pytest.param({"hidden_size": 40, "num_hidden_layers": 13, "vocab_size": 96}, Counter({"TGT003": 1}), id="layers"),
        pytest.param({"hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 97}, Counter({"TGT004": 1}), id="vocab"),
        pytest.param(
            {"hidden_size": 40, "num_hidden_layers": 10, "vocab_size": 96},
            Counter({"TGT003": 1, "TGT005": 1}),
            id="taps-outside",
        ),
        pytest.param({"num_hidden_layers": 12}, Counter({"TGT001": 2}), id="fields-missing"),
        pytest.param({"hidden_size": "40", "num_hidden_layers": 12, "vocab_size": 96}, Counter({"TGT001": 1}), id="not-int"),
    ],
)
def test_target_rules(target, expected):
    assert codes(check(target=TargetFacts.from_config(target, "target/config.json"))) == expected


@pytest.mark.parametrize(("model_type", "outside"), [
    ("kimi_k3", None),       # models/kimi_k3.py@4b9766f6:2627-2648: [0, N-1], in place
    ("deepseek_v3", [11]),   # models/deepseek_v3.py@4b9766f6:1697-1715: [0, N-2]
    ("kimi_k25", [11]),      # kimi_k25.py@4b9766f6:285-297 hands it to DeepseekV3
])
def test_the_target_model_decides_which_dflash_taps_it_captures(model_type, outside):
    """The draft's taps [1, 4, 7, 9, 11] on a 12-layer target: the K3 model
    captures a layer's output in place, the others entering the next layer,
    which a last layer has none of."""
    target = TargetFacts.from_config({"model_type": model_type, "hidden_size": 40, "num_hidden_layers": 12,
                                      "vocab_size": 96}, "target/config.json")
    found = [f for f in check(target=target).findings if f.code == "TGT005"]
    assert [f.detail["outside"] for f in found] == ([outside] if outside else [])


# --------------------------------------------------------------------------
# payload statistics


def test_payload_findings_by_role():
    entry = {n: TensorEntry(n, n, "BF16", s, "m.safetensors") for n, s in tensor_shapes(TINY).items()}
    expected = check().expected
    clean = PayloadStats(0, False, False)
    scanned = [
        (entry["final_norm.weight"], PayloadStats(0, True, False)),  # zero norm
        (entry["layers.0.mlp.up_proj.weight"], PayloadStats(0, True, False)),  # zero matrix: PAY004
        (entry["fc_norm.2.weight"], PayloadStats(0, False, True)),  # identity fc_norm
        (entry["context_norm.weight"], PayloadStats(0, False, True)),  # ones in another norm: fine
        (entry["context_proj.weight"], PayloadStats(3, False, False)),
        (entry["markov_head.markov_w1.weight"], PayloadStats(0, True, False)),  # zero matrix: PAY004
        (entry["embed_tokens.weight"], PayloadStats(0, True, False)),  # skipped by the loader: not judged
        (entry["confidence_head.proj.bias"], PayloadStats(0, True, False)),  # skipped, and not a matrix
        (entry["layers.1.input_layernorm.weight"], clean),
    ]
    found = [(f.code, f.tensor) for f in payload_findings(scanned, expected)]
    assert found == [
        ("PAY002", "final_norm.weight"),
        ("PAY004", "layers.0.mlp.up_proj.weight"),
        ("FCN006", "fc_norm.2.weight"),
        ("PAY001", "context_proj.weight"),
        ("PAY004", "markov_head.markov_w1.weight"),
    ]


def test_an_empty_matrix_is_not_all_zeros():
    entry = TensorEntry("layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight", "BF16", (0, 32), "m.safetensors")
    assert payload_findings([(entry, PayloadStats(0, True, False))], check().expected) == []


def test_every_code_has_a_title_and_a_known_severity():
    for code, spec in FINDING_CODES.items():
        assert spec.code == code and spec.title and isinstance(spec.severity, Severity)


def test_a_target_with_a_larger_vocabulary_is_a_warning_and_a_smaller_one_an_error():
    """The engine never compares the two: every id of a smaller draft
    vocabulary is a target id (the draft loads and serves), a larger one
    lets the draft propose ids the target does not have."""
    pr1031 = engine_by_spec("tokenspeed@pr1031")
    larger = check(target=TargetFacts.from_config({"hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 128},
                                                  "target/config.json"), engine=pr1031)
    [finding] = [f for f in larger.findings if f.code == "TGT004"]
    assert finding.severity == Severity.WARNING
    smaller = check(target=TargetFacts.from_config({"hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 95},
                                                   "target/config.json"), engine=pr1031)
    [finding] = [f for f in smaller.findings if f.code == "TGT004"]
    assert finding.severity == Severity.ERROR
    # TokenSpeed 0.1.1 compares the two at startup (validate_k3_dspark_config): both stop the server
    released = check(target=TargetFacts.from_config({"hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 128},
                                                    "target/config.json"))
    [finding] = [f for f in released.findings if f.code == "TGT004"]
    assert finding.severity == Severity.ERROR and "refuses to start" in finding.message
