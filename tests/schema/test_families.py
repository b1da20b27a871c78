"""The draft families as data: name stripping, dimension expressions,
recognition, and the inventory each family derives from a config."""

from __future__ import annotations

import pytest

from dspark.examples.fabricate import SCALES, draft_config, tensor_shapes
from dspark.schema.families import (
    DFLASH_GQA,
    FAMILIES,
    K3_DSPARK,
    evaluate_dim,
    family_by_name,
    family_for_config,
    strip_wrappers,
)


@pytest.mark.parametrize(
    ("stored", "served"),
    [
        pytest.param("layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight", id="plain"),
        pytest.param("model.final_norm.weight", "final_norm.weight", id="model"),
        pytest.param("draft_model.model.context_proj.weight", "context_proj.weight", id="draft_model-model"),
        pytest.param("_orig_mod.model.fc_norm.0.weight", "fc_norm.0.weight", id="compiled"),
        pytest.param(
            "draft_model.model.layers.0._fsdp_wrapped_module.mlp.up_proj.weight",
            "layers.0.mlp.up_proj.weight",
            id="fsdp-infix",
        ),
        pytest.param(
            "model.layers.3._checkpoint_wrapped_module._orig_mod.self_attn.o_proj.weight",
            "layers.3.self_attn.o_proj.weight",
            id="checkpoint-and-compile-infix",
        ),
        pytest.param("_fsdp_wrapped_module.draft_model.norm.weight", "norm.weight", id="fsdp-leading"),
        pytest.param(
            "model_state.model.draft_model.context_proj.weight", "context_proj.weight", id="torchspec-dcp",
        ),
        pytest.param("model_state.model.draft_model.d2t", "d2t", id="torchspec-vocab-map"),
        pytest.param("module._orig_mod.draft_model.final_norm.weight", "final_norm.weight", id="ddp-compiled"),
        pytest.param(
            "_checkpoint_wrapped_module.layers.1.mlp.down_proj.weight", "layers.1.mlp.down_proj.weight",
            id="checkpoint-leading",
        ),
        pytest.param("markov_head.markov_w1.weight", "markov_head.markov_w1.weight", id="no-wrapper"),
        pytest.param("model_statex.weight", "model_statex.weight", id="not-a-segment"),
        pytest.param("mymodel.x.weight", "mymodel.x.weight", id="not-a-wrapper"),
    ],
)
def test_strip_wrappers(stored, served):
    assert strip_wrappers(stored) == served


DIMS = {"h": 7168, "nh": 64, "qk_nope": 128, "qk_rope": 64, "S": 5, "th": 7168, "kv_lora": 512}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("h", 7168),
        ("S*th", 35840),
        ("nh*(qk_nope+qk_rope)", 12288),
        ("kv_lora+qk_rope", 576),
        ("2*h-1", 14335),
        ("(h)", 7168),
    ],
)
def test_evaluate_dim(expression, value):
    assert evaluate_dim(expression, DIMS) == value


def test_evaluate_dim_unknown_name_is_a_key_error():
    with pytest.raises(KeyError):
        evaluate_dim("h*unknown", DIMS)


@pytest.mark.parametrize("expression", ["h/2", "h**2", "__import__('os')", "h.real", "'7168'", "h if S else th", "1.5*h"])
def test_evaluate_dim_refuses_anything_but_arithmetic(expression):
    with pytest.raises(ValueError, match="unsupported dimension expression"):
        evaluate_dim(expression, DIMS)


def test_every_rule_shape_is_a_valid_expression():
    for family in FAMILIES:
        known = set(family.dims)
        for rule in family.tensors:
            for expression in rule.shape:
                dims = {symbol: 3 for symbol in known}
                assert isinstance(evaluate_dim(expression, dims), int), (family.name, rule.name, expression)


@pytest.mark.parametrize(
    ("config", "family"),
    [
        pytest.param({"model_type": "k3_dspark"}, "k3_dspark", id="k3-model_type-only"),
        pytest.param({"architectures": ["K3DSparkModel"]}, "k3_dspark", id="k3-architectures-only"),
        pytest.param({"architectures": ["DFlashDraftModel"], "model_type": "qwen3"}, "dflash_gqa", id="gqa-arch"),
        pytest.param({"model_type": "dspark"}, "dflash_gqa", id="gqa-model_type"),
        # architectures is looked at first
        pytest.param({"architectures": ["DSparkDraftModel"], "model_type": "k3_dspark"}, "dflash_gqa", id="arch-wins"),
        pytest.param({"architectures": "K3DSparkModel", "model_type": "dflash"}, "dflash_gqa", id="arch-not-a-list"),
        pytest.param({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, None, id="not-a-draft"),
        pytest.param({}, None, id="empty"),
    ],
)
def test_family_for_config(config, family):
    found = family_for_config(config)
    assert (found.name if found else None) == family


def test_family_by_name():
    assert family_by_name("k3_dspark") is K3_DSPARK
    assert family_by_name("dflash_gqa") is DFLASH_GQA
    assert family_by_name("nope") is None


@pytest.mark.parametrize("scale", sorted(SCALES))
@pytest.mark.parametrize("fc_norm", [True, False], ids=["fc_norm", "no-fc_norm"])
def test_k3_inventory_matches_the_fabricated_draft(scale, fc_norm):
    spec = SCALES[scale]
    config = draft_config(spec, fc_norm=fc_norm)
    expected, unresolved = K3_DSPARK.expected_tensors(K3_DSPARK.resolve_dims(config), {"fc_norm": fc_norm})
    assert unresolved == []
    assert {name: e.shape for name, e in expected.items()} == tensor_shapes(spec, fc_norm=fc_norm, skipped=False)


def test_k3_full_size_inventory_counts():
    config = draft_config(SCALES["k3"], fc_norm=True)
    expected, _ = K3_DSPARK.expected_tensors(K3_DSPARK.resolve_dims(config), {"fc_norm": True})
    # 65 served tensors in the reference checkpoint, 5 fc_norm weights on top
    assert len(expected) == 70
    assert sum(1 for e in expected.values() if e.role == "fc_norm") == 5
    assert expected["context_proj.weight"].shape == (7168, 5 * 7168)
    assert expected["layers.4.self_attn.q_b_proj.weight"].shape == (64 * (128 + 64), 1536)
    assert expected["layers.4.self_attn.kv_a_proj_with_mqa.weight"].shape == (512 + 64, 7168)
    assert len(tensor_shapes(SCALES["k3"], fc_norm=True)) == 73  # with embed + confidence head


def test_resolve_dims_leaves_out_what_is_missing_or_not_an_integer():
    config = draft_config(SCALES["tiny"])
    config["hidden_size"] = True  # a bool is not a size
    config["intermediate_size"] = 48.0
    del config["num_hidden_layers"]
    dims = K3_DSPARK.resolve_dims(config)
    assert "h" not in dims and "inter" not in dims and "N" not in dims
    assert dims["th"] == 40 and dims["S"] == 5


def test_rules_needing_an_unknown_dimension_are_reported_unresolved():
    config = draft_config(SCALES["tiny"])
    del config["num_hidden_layers"]
    expected, unresolved = K3_DSPARK.expected_tensors(K3_DSPARK.resolve_dims(config), {"fc_norm": True})
    assert "layers.{n}.mlp.up_proj.weight" in unresolved
    assert not any(name.startswith("layers.") for name in expected)
    assert "context_proj.weight" in expected


def test_fc_norm_index_takes_canonical_tap_indices_only():
    assert K3_DSPARK.fc_norm_index("fc_norm.0.weight") == 0
    assert K3_DSPARK.fc_norm_index("fc_norm.12.weight") == 12
    for name in ("fc_norm.01.weight", "fc_norm.weight", "fc_norm.-1.weight", "fc_norm.1.bias", "x.fc_norm.1.weight",
                 "fc_norm..weight", "fc_norm.+1.weight", "fc_norm.1 .weight", "fc_norm.\u0663.weight",
                 "fc_norm.1.weightx", "fc_norm.1.x.weight"):
        assert K3_DSPARK.fc_norm_index(name) is None, name


def test_skipped_and_training_only_names():
    assert K3_DSPARK.is_skipped("embed_tokens.weight")
    assert K3_DSPARK.is_skipped("lm_head.weight")
    assert K3_DSPARK.is_skipped("confidence_head.proj.bias")
    assert not K3_DSPARK.is_skipped("context_proj.weight")
    assert K3_DSPARK.is_training_only("t2d") and K3_DSPARK.is_training_only("d2t.weight")
    assert not K3_DSPARK.is_training_only("t2dx")


# --------------------------------------------------------------------------
# The GQA family


def gqa_config(**overrides) -> dict:
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 128,
        "rms_norm_eps": 1e-6,
        "target_hidden_size": 80,
        "target_num_hidden_layers": 24,
        "dflash_config": {"target_layer_ids": [1, 11, 22], "mask_token_id": 127},
    }
    config.update(overrides)
    return config


def test_gqa_family_is_recognised_and_derives_its_inventory():
    config = gqa_config()
    family = family_for_config(config)
    assert family is DFLASH_GQA
    dims = family.resolve_dims(config)
    # model_type qwen3 without head_dim: TokenSpeed's Qwen3Config assumes 128
    assert dims["hd"] == 128 and dims["S"] == 3
    assert DFLASH_GQA.resolve_dims(gqa_config(model_type="llama"))["hd"] == 16  # hidden // heads
    dims = family.resolve_dims(gqa_config(head_dim=16))
    expected, unresolved = family.expected_tensors(dims, {"fc_norm": False})
    assert unresolved == []
    shapes = {name: e.shape for name, e in expected.items()}
    # fc takes taps x the draft's own hidden_size; target_hidden_size is never read
    assert shapes["fc.weight"] == (64, 3 * 64)
    assert shapes["hidden_norm.weight"] == (64,) and shapes["norm.weight"] == (64,)
    assert shapes["layers.1.self_attn.q_proj.weight"] == (4 * 16, 64)
    assert shapes["layers.1.self_attn.k_proj.weight"] == (2 * 16, 64)
    assert shapes["layers.1.self_attn.v_proj.weight"] == (2 * 16, 64)
    assert shapes["layers.1.self_attn.o_proj.weight"] == (64, 4 * 16)
    assert shapes["layers.0.self_attn.q_norm.weight"] == (16,)
    assert shapes["layers.0.mlp.down_proj.weight"] == (64, 96)
    assert not any(name.startswith("fc_norm.") for name in shapes)
    assert len(shapes) == 3 + 2 * 11


def test_gqa_explicit_head_dim_and_fc_norm():
    family = DFLASH_GQA
    dims = family.resolve_dims(gqa_config(head_dim=32))
    expected, _ = family.expected_tensors(dims, {"fc_norm": True})
    assert expected["layers.0.self_attn.q_proj.weight"].shape == (4 * 32, 64)
    assert [n for n in expected if n.startswith("fc_norm.")] == ["fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight"]
    assert expected["fc_norm.2.weight"].shape == (64,)


def test_gqa_served_names_rename_the_training_module():
    assert DFLASH_GQA.served_name("draft_model.context_proj.weight") == "fc.weight"
    assert DFLASH_GQA.served_name("model.context_norm.weight") == "hidden_norm.weight"
    assert DFLASH_GQA.served_name("final_norm.weight") == "norm.weight"
    assert DFLASH_GQA.served_name("model.layers.0.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    # K3 keeps the training names
    assert K3_DSPARK.served_name("draft_model.context_proj.weight") == "context_proj.weight"


def test_optimizer_and_scheduler_state_is_told_by_its_first_name_part():
    from dspark.schema.rules.inventory import is_training_state

    for name in ("optimizer.state.0.exp_avg", "optim.x", "optim_state.state.1.exp_avg_sq", "optimizer_state.a",
                 "opt_state.a", "lr_scheduler.last_epoch", "scheduler.step"):
        assert is_training_state(name), name
    for name in ("optimizer", "optimizers.a", "model.optimizer.a", "xoptim.a", "optim_statex.a", "scheduler_.a",
                 "fc.weight", "optimizer.d2t"):  # d2t: a name the EAGLE-3 loaders act on wherever it sits
        assert not is_training_state(name), name
