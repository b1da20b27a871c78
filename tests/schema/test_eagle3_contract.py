"""EAGLE-3 drafts as TokenSpeed's loaders treat them (main, f4d8ec6e).

Every case is a real checkpoint: tiny drafts with real tensors written by
the safetensors library, and full-size ones (TorchSpec's draft configs,
Llama-3-8B, Kimi-K2.5) as real safetensors headers over a sparse payload,
which is all `check` reads. The comment beside each case cites the engine
code that decides it (LE3 = models/llama_eagle3.py, DS3 =
models/deepseek_v3.py, FAC = execution/factory.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import convert_checkpoint
from dspark.converters.convert_plan import ConvertOptions
from dspark.examples.fabricate import (
    EAGLE3_DEFECTS,
    EAGLE3_SCALES,
    eagle3_config,
    eagle3_tensor_specs,
    write_eagle3_draft,
    write_header_only,
)
from dspark.schema.errors import CheckpointError
from dspark.schema.findings import Severity

torch = pytest.importorskip("torch")


TAP_IDS = "eagle_aux_hidden_state_layer_ids"


def errors(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.ERROR)


def warnings(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.WARNING)


# TorchSpec's draft configs (configs/draft_models/*.json at 6f21829), the
# fields that decide the contract, as tools/convert_to_hf.py exports them:
# it adds draft_vocab_size (= vocab_size unless the run pruned the vocabulary).
_TORCHSPEC_LLAMA = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
                    "head_dim": 128, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
                    "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16"}
_TORCHSPEC_MLA = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "num_hidden_layers": 1, "hidden_act": "silu",
                  "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                  "v_head_dim": 128, "torch_dtype": "bfloat16"}
TORCHSPEC_CONFIGS = {
    "qwen3_8b_eagle3": {**_TORCHSPEC_LLAMA, "hidden_size": 4096, "intermediate_size": 12288,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936,
                        "draft_vocab_size": 32000, "rope_theta": 1000000, "rope_scaling": None},
    "kimi_k25_eagle3": {**_TORCHSPEC_LLAMA, "hidden_size": 7168, "intermediate_size": 12288,
                        "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 163840,
                        "draft_vocab_size": 163840, "rope_theta": 50000.0,
                        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                                         "beta_fast": 32.0, "beta_slow": 1.0}},
    "minimax_m25_eagle3": {**_TORCHSPEC_LLAMA, "hidden_size": 3072, "intermediate_size": 9216,
                           "num_attention_heads": 48, "num_key_value_heads": 48, "vocab_size": 200064,
                           "draft_vocab_size": 200064, "rope_theta": 5000000},
    "qwen3_8b_eagle3_mla": {**_TORCHSPEC_MLA, "model_type": "deepseek_v3", "hidden_size": 4096,
                            "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 32,
                            "vocab_size": 151936, "draft_vocab_size": 151936, "tie_word_embeddings": False,
                            "rms_norm_eps": 1e-6,
                            "rope_scaling": {"type": "yarn", "factor": 64.0,
                                             "original_max_position_embeddings": 4096}},
    "kimi_k25_eagle3_mla": {**_TORCHSPEC_MLA, "model_type": "kimi_k2", "hidden_size": 7168,
                            "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64,
                            "vocab_size": 163840, "draft_vocab_size": 163840, "rms_norm_eps": 1e-5,
                            "rope_scaling": {"type": "yarn", "factor": 64.0,
                                             "original_max_position_embeddings": 4096},
                            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57],
                                             "use_aux_hidden_state": True}},
}


def header_only(folder: Path, config: dict, *, prefix: str = "", edit=None) -> Path:
    specs = eagle3_tensor_specs(config)
    if edit:
        edit(specs)
    return write_header_only(folder, config, specs, prefix=prefix)


def _vllm(specs):
    for name in [n for n in specs if n.startswith("midlayer.")]:
        specs["layers.0." + name[len("midlayer."):]] = specs.pop(name)


@pytest.mark.parametrize("name", sorted(TORCHSPEC_CONFIGS))
@pytest.mark.parametrize("layout", ["native", "vllm"])
def test_torchspec_draft_configs_with_their_weights_pass(tmp_path, name, layout):
    config = TORCHSPEC_CONFIGS[name]
    draft = header_only(tmp_path / name, config, edit=_vllm if layout == "vllm" else None)
    report = check_checkpoint(draft)
    assert report.family == ("eagle3_mla" if name.endswith("_mla") else "eagle3_llama")
    # Header-only fixtures leave the payload a hole, which check flags (PAY006).
    unexpected = [f.message for f in report.findings if f.severity is not Severity.INFO and f.code != "PAY006"]
    assert report.passed() and not unexpected, unexpected


def test_the_pruned_qwen3_draft_ships_its_head_and_d2t(tmp_path):
    specs = eagle3_tensor_specs(TORCHSPEC_CONFIGS["qwen3_8b_eagle3"])
    assert specs["lm_head.weight"] == ((32000, 4096), "BF16") and specs["d2t"] == ((32000,), "I64")


@pytest.mark.parametrize("scale", ["llama3-8b", "kimi-k25-mla"])
@pytest.mark.parametrize("fc_norm", [False, True])
def test_full_size_drafts_pass_header_only(tmp_path, scale, fc_norm):
    config = eagle3_config(EAGLE3_SCALES[scale], fc_norm=fc_norm, tap_ids=[2, 16, 29])
    report = check_checkpoint(header_only(tmp_path / "d", config))
    # the payload of a header-only fixture is a hole (PAY006), nothing else
    assert report.passed() and {f.code for f in report.warnings} <= {"PAY006"}
    assert report.resolved.target_layer_ids == [2, 16, 29]


# Every defect the fabricator knows, on a tiny draft with real tensors ----------


@pytest.mark.parametrize("defect", sorted(EAGLE3_DEFECTS))
def test_each_defect_is_reported_with_its_code(tmp_path, defect):
    scale = "tiny-mla" if defect == "fused-qkv-a" else "tiny-llama"
    spec = EAGLE3_DEFECTS[defect]
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, defect=defect), deep=spec.deep)
    assert spec.code in errors(report), [f.message for f in report.findings]


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize("fc_norm", [False, True])
def test_good_tiny_drafts_pass_deep(tmp_path, scale, fc_norm):
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, fc_norm=fc_norm), deep=True)
    assert report.passed(strict=True)


# Names: what each loader maps, and what it drops ----------------------------------


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_vllm_layers_0_names_are_mapped_to_midlayer(tmp_path, scale):
    # LE3:687-689 and DS3:2368 map a leading "layers.0." to "midlayer.".
    assert check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, layout="layers.0")).passed(strict=True)


def _both_layer_names(scale_by):
    def edit(tensors):
        for name in [n for n in tensors if n.startswith("midlayer.")]:
            tensors["layers.0." + name[len("midlayer."):]] = tensors[name] * scale_by
    return edit


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize("scale_by, served", [(1, True), (3, False)], ids=["same-bytes", "other-bytes"])
def test_midlayer_and_layers_0_both_shipped_load_into_one_parameter(tmp_path, scale, scale_by, served):
    """LE3:688-689 and DS3:2368 map `layers.0.` to `midlayer.`: both copies
    load into one parameter, the one read last kept. The same bytes serve
    the same values (INV006 a warning); other bytes, an error."""
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=_both_layer_names(scale_by))
    report = check_checkpoint(draft)
    assert report.passed() is served, [(f.code, f.message) for f in report.errors]
    kind = Severity.WARNING if served else Severity.ERROR
    duplicates = [f for f in report.findings if f.code == "INV006"]
    assert duplicates and all(f.severity is kind for f in duplicates)
    assert all(f.detail["comparison"] == ("identical" if served else "different") for f in duplicates)
    if served:  # convert writes one copy of each
        from dspark.converters.convert import convert_checkpoint

        converted = convert_checkpoint(draft, tmp_path / "out")
        assert len(converted.plan.dropped) == len(duplicates)
        assert check_checkpoint(tmp_path / "out", deep=True).passed(strict=True)


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_copies_under_one_parameter_that_round_alike_serve_the_same(tmp_path, scale):
    """An fp32 `layers.0.X` that differs from the bf16 `midlayer.X` only
    below the last bit of bf16 and fp16, the dtypes a draft is served in
    (configs/model_config.py@f4d8ec6e:766-795): both load the same
    parameter values, INV006 a warning, and convert writes one copy."""
    def fp32_copies(tensors):
        for name in [n for n in tensors if n.startswith("midlayer.")]:
            tensors["layers.0." + name[len("midlayer."):]] = tensors[name].float() * (1 + 2 ** -20)

    draft = write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=fp32_copies)
    report = check_checkpoint(draft)
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    duplicates = [f for f in report.findings if f.code == "INV006"]
    assert duplicates and all(f.detail["comparison"] == "identical as served" for f in duplicates)
    from dspark.converters.convert import convert_checkpoint

    converted = convert_checkpoint(draft, tmp_path / "out")
    assert converted.plan.dropped and all("the same as served" in d.reason for d in converted.plan.dropped)
    assert check_checkpoint(tmp_path / "out", deep=True).passed(strict=True)


def _prefix(tensors, names, prefix="model."):
    for name in [n for n in list(tensors) if any(n.startswith(p) for p in names)]:
        tensors[prefix + name] = tensors.pop(name)


def test_llama_accepts_a_model_prefix_on_body_names(tmp_path):
    # LE3:712-719: a name is looked up as it is, then with "model." added.
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=lambda t: _prefix(t, ("midlayer.", "fc.", "norm.")))
    assert check_checkpoint(draft).passed(strict=True)


@pytest.mark.parametrize(
    ("names", "layout"),
    [
        pytest.param(("layers.0.",), "layers.0", id="model.layers.0"),  # never mapped (LE3:688)
        pytest.param(("lm_head.",), "midlayer", id="model.lm_head"),  # the head is not under model.
    ],
)
def test_llama_drops_what_a_model_prefix_hides_and_convert_fixes_it(tmp_path, names, layout):
    draft = write_eagle3_draft(tmp_path / "d", layout=layout, tensor_edit=None)
    tensors_file = draft / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tensors_file))
    _prefix(tensors, names)
    save_file(tensors, str(tensors_file))
    report = check_checkpoint(draft)
    assert errors(report) == Counter({"SRV001": 1})
    assert report.verdicts() == {"served": False, "contents": True}


def test_mla_accepts_no_model_prefix(tmp_path):
    # DS3:2370-2371 prefixes "model." itself: a stored one becomes model.model.*
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla",
                               tensor_edit=lambda t: _prefix(t, ("midlayer.", "fc.", "norm.")))
    report = check_checkpoint(draft)
    assert errors(report) == Counter({"SRV001": 1})
    assert "model.midlayer" in report.errors[0].message


def test_mla_drops_language_model_from_names_it_does_not_find(tmp_path):
    """DS3:1724-1737 (get_param): a name not found is looked up again with
    `language_model.` removed, so `language_model.`-prefixed weights load."""
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tensor_edit=lambda t: _prefix(
        t, ("midlayer.", "fc.", "norm.", "embed_tokens."), prefix="language_model."))
    report = check_checkpoint(draft)
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings if f.severity is not Severity.INFO]
    # ...which the Llama loader does not do (LE3:712-719): its weights are dropped
    llama = write_eagle3_draft(tmp_path / "l", tensor_edit=lambda t: _prefix(
        t, ("midlayer.", "fc.", "norm."), prefix="language_model."))
    assert not check_checkpoint(llama).passed()


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_any_name_holding_d2t_is_the_hot_token_map(tmp_path, scale):
    """LE3:691-695 and DS3:2358-2362 take any name containing `d2t` for the
    map (and skip any containing `t2d`), before the `model.` prefix."""
    def rename(tensors):
        tensors["model.d2t"] = tensors.pop("d2t")
        tensors["model.t2d"] = torch.zeros(40, dtype=torch.bool)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=rename), deep=True)
    assert report.passed(), [(f.code, f.message) for f in report.errors]


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_optimizer_state_saved_beside_the_weights_is_dropped_not_lost(tmp_path, scale):
    """LE3:713 and DS3:1736 drop a name without a destination; optimizer
    state is one, and no weight goes with it: a note, and convert leaves
    it behind."""
    def add_state(tensors):
        tensors["optimizer.state.0.exp_avg"] = torch.zeros(8)
        tensors["lr_scheduler.last_epoch"] = torch.zeros(1)
        tensors["optim_state.state.1.exp_avg_sq"] = torch.zeros(8)  # TorchSpec's name

    draft = write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=add_state)
    report = check_checkpoint(draft)
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    assert {f.tensor for f in report.findings if f.code == "INV005" and f.detail.get("training_state")} == {
        "optimizer.state.0.exp_avg", "lr_scheduler.last_epoch", "optim_state.state.1.exp_avg_sq"}
    from dspark.converters.convert import convert_checkpoint

    converted = convert_checkpoint(draft, tmp_path / "out")
    assert {d.served_name for d in converted.plan.dropped} >= {"optimizer.state.0.exp_avg", "lr_scheduler.last_epoch"}
    assert check_checkpoint(tmp_path / "out").passed(strict=True)


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize("name", ["optimizer.state.d2t.exp_avg", "optimizer.state.lm_head.weight.exp_avg"])
def test_optimizer_state_named_after_what_a_loader_acts_on_is_not_harmless(tmp_path, scale, name):
    """Any name holding `d2t` overwrites the token map (LE3:691-695,
    DS3:2358-2362); one holding `lm_head` stops the MLA draft loading the
    target's head (DS3:2370-2373). Such state is not dropped harmlessly."""
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale,
                                                 tensor_edit=lambda t: t.__setitem__(name, torch.zeros(40))))
    if "d2t" in name or scale == "tiny-mla":
        assert not report.passed(), [(f.code, f.message) for f in report.findings]
    assert not any(f.detail.get("training_state") for f in report.findings)


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_copies_in_two_dtypes_with_the_same_values_load_the_same(tmp_path, scale):
    """A bf16 weight beside its exact fp32 copy, a d2t beside its int32 copy:
    the engine casts both into one parameter, with the same values."""
    def edit(tensors):
        tensors["layers.0.mlp.down_proj.weight"] = tensors["midlayer.mlp.down_proj.weight"].float()
        tensors["d2t_int32"] = tensors["d2t"].to(torch.int32)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=edit))
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    assert sorted(f.detail["comparison"] for f in report.findings if f.code == "INV006") == ["identical"] * 2


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize("name", ["language_model.d2t", "d2t_backup"])
def test_a_second_name_for_d2t_loads_as_the_map(tmp_path, scale, name):
    """LE3:691 / DS3:2358: `language_model.d2t` is the map; an identical
    `d2t_backup` loads over it with the same values (INV006 a warning)."""
    def edit(tensors):
        if name == "d2t_backup":
            tensors[name] = tensors["d2t"].clone()
        else:
            tensors[name] = tensors.pop("d2t")

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=edit), deep=True)
    assert report.passed(), [(f.code, f.message) for f in report.errors]


@pytest.mark.parametrize("top, served", [(None, False), (5e5, True), (1e4, False)])
def test_llama_eagle3_on_a_qwen_config_takes_rope_theta_from_the_top(tmp_path, top, served):
    """models/llama.py@f4d8ec6e:154 reads config.rope_theta, 10000 on the
    engine's Qwen3Config when absent: a theta only in rope_parameters is
    not served."""
    def edit(config):
        config.update(model_type="qwen3", rope_parameters={"rope_type": "default", "rope_theta": 5e5})
        config.pop("rope_theta", None)
        if top is not None:
            config["rope_theta"] = top

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", config_edit=edit))
    assert report.passed() is served, [(f.code, f.message) for f in report.errors]


def test_llama_loads_pre_fused_qkv_and_gate_up(tmp_path):
    # LE3:678-711: a fused name holds none of ".q_proj"/".up_proj" and is split by size.
    def fuse(t):
        p = "midlayer."
        t[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [t.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"]).contiguous()
        t[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [t.pop(p + "mlp.gate_proj.weight"), t.pop(p + "mlp.up_proj.weight")]).contiguous()

    assert check_checkpoint(write_eagle3_draft(tmp_path / "d", tensor_edit=fuse)).passed(strict=True)


def test_mla_drops_a_pre_fused_gate_up(tmp_path):
    # DS3:1740-1744, 1798-1819: "up_proj" matches, the name becomes gate_gate_up_proj, skipped.
    def fuse(t):
        p = "midlayer.mlp."
        t[p + "gate_up_proj.weight"] = torch.cat([t.pop(p + "gate_proj.weight"), t.pop(p + "up_proj.weight")])

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tensor_edit=fuse))
    assert errors(report) == Counter({"INV002": 1, "INV001": 2})
    fused = next(f for f in report.errors if f.code == "INV002")
    assert fused.tensor == "midlayer.mlp.gate_up_proj.weight" and "gate_gate_up_proj" in fused.message


def test_mla_refuses_a_pre_fused_q_kv_a_projection(tmp_path):
    # DS3:1828-1861: renamed to fused_qfused_..., get_param None, None.weight_loader.
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-mla", defect="fused-qkv-a"))
    fused = next(f for f in report.errors if f.code == "INV002")
    assert "AttributeError" in fused.message


def test_unknown_names_are_dropped_silently_by_llama_and_logged_by_mla(tmp_path):
    def add(t):
        t["fc.bias"] = torch.zeros(32, dtype=torch.bfloat16)

    llama = check_checkpoint(write_eagle3_draft(tmp_path / "l", tensor_edit=add))
    mla = check_checkpoint(write_eagle3_draft(tmp_path / "m", scale="tiny-mla", tensor_edit=add))
    assert "without a word" in next(f.message for f in llama.errors if f.code == "INV002")
    assert "logs it" in next(f.message for f in mla.errors if f.code == "INV002")  # DS3:1736


def test_t2d_is_skipped_and_mla_skips_rotary_inv_freq(tmp_path):
    def add(t):
        t["t2d"] = torch.ones(96, dtype=torch.bool)
        t["midlayer.self_attn.rotary_emb.inv_freq"] = torch.ones(2, dtype=torch.float32)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tensor_edit=add))
    assert report.passed()
    assert {f.tensor for f in report.findings if f.code == "INV005"} == {
        "t2d", "midlayer.self_attn.rotary_emb.inv_freq"}


def test_the_old_mla_architecture_name_is_not_registered(tmp_path):
    # registry.py@f4d8ec6e:102-118 knows only Eagle3DeepseekV2ForCausalLM.
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla",
                               config_edit=lambda c: c.update(architectures=["DeepSeekForCausalLMEagle3"]))
    report = check_checkpoint(draft)
    assert report.family == "eagle3_mla" and errors(report) == Counter({"ENG002": 1})
    assert "Eagle3DeepseekV2ForCausalLM" in report.errors[0].message


TOKENSPEED_PROFILES = ["tokenspeed", "tokenspeed@main", "tokenspeed@pr1031", "tokenspeed@pr1016"]


def _llama_typed_mla(folder: Path, *drop: str, **fields) -> Path:
    def edit(config):
        config.update(model_type="llama", **fields)
        for name in drop:
            config.pop(name)

    return write_eagle3_draft(folder, scale="tiny-mla", config_edit=edit)


@pytest.mark.parametrize("engine", TOKENSPEED_PROFILES)
def test_an_mla_draft_typed_llama_parses_but_fails_to_load_without_n_routed_experts(tmp_path, engine):
    # llama is no registered class: AutoConfig builds LlamaConfig
    # (utils/hf_transformers_utils.py@f4d8ec6e:340-347, @5f1e48b5:244-253), which keeps the MLA fields
    # (transformers 5.12.0), so ModelConfig reads them (configs/model_config.py@f4d8ec6e:206-217). But
    # DS3:1763-1773 (@5f1e48b5:1723-1733) reads self.config.n_routed_experts, which LlamaConfig lacks.
    report = check_checkpoint(_llama_typed_mla(tmp_path / "d"), engine=engine)
    assert errors(report) == Counter({"CFG003": 1})
    assert report.errors[0].detail["field"] == "n_routed_experts" and "AttributeError" in report.errors[0].message


@pytest.mark.parametrize("engine", TOKENSPEED_PROFILES)
def test_an_mla_draft_typed_llama_with_n_routed_experts_is_served(tmp_path, engine):
    # Every field the draft reads is then an attribute of LlamaConfig, as written.
    assert check_checkpoint(_llama_typed_mla(tmp_path / "d", n_routed_experts=8), engine=engine).passed(strict=True)


@pytest.mark.parametrize(("engine", "written_type"), [("tokenspeed", "deepseek_v3"), ("vllm", "kimi_k2")])
def test_convert_writes_an_mla_config_class_for_a_draft_typed_llama(tmp_path, engine, written_type):
    """LlamaConfig defaults none of the MLA fields (nor TokenSpeed's
    n_routed_experts): convert writes an MLA config class, so the converted
    draft loads where the original fails. For vLLM not deepseek_v3, which its
    draft config override turns into an MTP model it then refuses
    (config/speculative.py@vllm==0.33.0:749-763)."""
    source = _llama_typed_mla(tmp_path / "d")
    convert_checkpoint(source, tmp_path / "out", ConvertOptions(engine=engine))
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == written_type
    assert check_checkpoint(tmp_path / "out", engine=engine).passed(strict=True)


def test_an_mla_draft_typed_llama_without_an_mla_field_is_refused(tmp_path):
    # configure_mla_attention reads the four dims as attributes (configs/model_config.py@f4d8ec6e:214-217);
    # q_lora_rank is getattr(config, "q_lora_rank", None) (DS3:2003, 2014-2027), as if null.
    report = check_checkpoint(_llama_typed_mla(tmp_path / "kv", "kv_lora_rank", "v_head_dim", n_routed_experts=8))
    assert errors(report) == Counter({"CFG003": 1})
    assert "kv_lora_rank, v_head_dim are absent" in report.errors[0].message
    report = check_checkpoint(_llama_typed_mla(tmp_path / "q", "q_lora_rank", n_routed_experts=8))
    assert errors(report) == Counter({"CFG003": 1}) and "q_lora_rank is absent" in report.errors[0].message
    # LlamaConfig's 32 layers: DS3:2282-2283 refuses them (and 31 would never be written).
    report = check_checkpoint(_llama_typed_mla(tmp_path / "n", "num_hidden_layers", n_routed_experts=8))
    assert set(errors(report)) == {"CFG003", "INV001"}
    assert "num_hidden_layers = 32" in next(f.message for f in report.errors if f.code == "CFG003")


@pytest.mark.parametrize("experts", [0, None])
def test_n_routed_experts_that_is_not_a_positive_count_fails_the_load(tmp_path, experts):
    # The expert loader built at DS3:1763-1773 raises for None or 0 (layers/moe/loader.py@f4d8ec6e:62-70, 464-467).
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=lambda c: c.update(n_routed_experts=experts))
    report = check_checkpoint(draft)
    assert errors(report) == Counter({"CFG003": 1}) and report.errors[0].detail["field"] == "n_routed_experts"


def test_an_mla_draft_without_q_lora_rank_is_refused(tmp_path):
    # DS3:2014-2027: only the fused q/kv-a projection is widened to 2H.
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=lambda c: c.update(q_lora_rank=None))
    assert "q_lora_rank is null" in " ".join(f.message for f in check_checkpoint(draft).errors)


def test_an_absent_layer_count_takes_the_config_class_default(tmp_path):
    # transformers' LlamaConfig fills num_hidden_layers = 32; LE3:612-613 refuses it.
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.pop("num_hidden_layers"))
    report = check_checkpoint(draft)
    assert warnings(report) == Counter({"ENG003": 1}) and "num_hidden_layers = 32" in report.errors[0].message


# Features -----------------------------------------------------------------------


def test_llama_norm_before_fc_loads(tmp_path):
    # LE3:480-488: input_norm [H*T].
    assert check_checkpoint(write_eagle3_draft(tmp_path / "d", norm_before_fc=True)).passed(strict=True)


def test_an_input_norm_of_the_wrong_width_is_refused(tmp_path):
    def narrow(t):
        t["input_norm.weight"] = t["input_norm.weight"][:-1].contiguous()

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", norm_before_fc=True, tensor_edit=narrow))
    assert [(f.code, f.tensor) for f in report.errors] == [("INV003", "input_norm.weight")]


@pytest.mark.parametrize("ship", [False, True])
def test_mla_does_not_implement_norm_before_fc(tmp_path, ship):
    # DS3:2110-2186: Eagle3MlaModel has no input_norm.
    def add(t):
        if ship:
            t["input_norm.weight"] = torch.ones(96, dtype=torch.bfloat16)

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tensor_edit=add,
                               config_edit=lambda c: c.update(norm_before_fc=not ship))
    report = check_checkpoint(draft)
    assert errors(report) == Counter({"ENG001": 1}) and "no input_norm" in report.errors[0].message


def test_mla_fc_norm_is_hidden_size_wide_and_fc_reads_the_target_width(tmp_path):
    # DS3:2142-2155 (fc [H, Ht*T]) and 2166-2175 (fc_norm [H], not Ht).
    config_edit = lambda c: c.update(target_hidden_size=40)  # noqa: E731
    good = write_eagle3_draft(tmp_path / "g", scale="tiny-mla", config_edit=config_edit)
    assert check_checkpoint(good).passed(strict=True)

    def target_wide_norms(t):
        for i in range(3):
            t[f"fc_norm.{i}.weight"] = torch.ones(40, dtype=torch.bfloat16)

    bad = write_eagle3_draft(tmp_path / "b", scale="tiny-mla", fc_norm=True, config_edit=config_edit,
                             tensor_edit=target_wide_norms)
    # target-wide weights do not load; hidden-wide ones load and meet 40-wide taps at the first request
    assert set(errors(check_checkpoint(bad))) == {"FCN004", "ENG001"}
    loads = write_eagle3_draft(tmp_path / "l", scale="tiny-mla", fc_norm=True, config_edit=config_edit)
    [finding] = check_checkpoint(loads).errors
    assert finding.code == "ENG001" and "fc_norm" in finding.message


def test_llama_fc_is_hidden_size_per_tap_whatever_target_hidden_size_says(tmp_path):
    # LE3:468-470 builds fc from hidden_size; target_hidden_size only stops sharing (LE3:729-733).
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(target_hidden_size=40))
    assert "target_hidden_size = 40" in " ".join(f.message for f in check_checkpoint(draft).errors)
    # on a target as wide as hidden_size the taps fit and the draft ships its own embedding and head
    for width, served in ((32, True), (40, False)):
        target = tmp_path / f"t{width}"
        target.mkdir()
        (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                        "hidden_size": width, "num_hidden_layers": 12,
                                                        "vocab_size": 96}))
        report = check_checkpoint(draft, target=target)
        assert report.passed() is served, [(f.code, f.message) for f in report.errors]
        [width_finding] = [f for f in report.findings if f.code == "CFG003"]
        assert (width_finding.severity is Severity.WARNING) is served


# The head and d2t -----------------------------------------------------------------------


def test_llama_without_draft_vocab_size_serves_the_targets_head(tmp_path):
    # LE3:620-622, 752-754: load_lm_head_from_target is not cleared by a shipped head.
    def full_vocab(c):
        c.pop("draft_vocab_size")

    def ship_head(t):
        t["lm_head.weight"] = torch.zeros(96, 32, dtype=torch.bfloat16)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", config_edit=full_vocab, tensor_edit=ship_head))
    assert errors(report) == Counter() and warnings(report) == Counter({"LMH001": 1})
    assert "replaces the shipped lm_head" in report.warnings[0].message


def test_mla_without_draft_vocab_size_keeps_a_shipped_head(tmp_path):
    # DS3:2300-2301, 2370-2373: a shipped lm_head clears load_lm_head_from_target.
    def full_vocab(c):
        c.pop("draft_vocab_size")

    def ship_head(t):
        t["lm_head.weight"] = torch.zeros(96, 32, dtype=torch.bfloat16)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=full_vocab,
                                                 tensor_edit=ship_head))
    assert report.passed(strict=True)


def test_mla_with_a_null_draft_vocab_size_needs_its_own_head(tmp_path):
    # DS3:2300: hasattr, not `is None`: the key alone stops the target's head.
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=lambda c: c.update(draft_vocab_size=None))
    assert [(f.code, f.tensor) for f in check_checkpoint(draft).errors] == [("INV001", "lm_head.weight")]


def tied_draft(tmp_path, *, head, embedding, scale="tiny-llama"):
    """A draft with tie_word_embeddings: true whose lm_head is `head(t)` and
    whose embed_tokens is `embedding(t)`, or not shipped when `embedding` is
    None (`t`: the fabricated tensors)."""
    def tie(c):
        c.update(tie_word_embeddings=True)
        c.pop("draft_vocab_size")

    def ship(t):
        if embedding is None:
            t.pop("embed_tokens.weight", None)
        else:
            t["embed_tokens.weight"] = embedding(t)
        t["lm_head.weight"] = head(t)

    return write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=tie, tensor_edit=ship)


def random_table(t):
    return torch.randn(96, 32, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_tied_draft_saved_with_both_names_serves_its_head(tmp_path, scale):
    """LE3:618-619, DS3:2294-2295: with tie_word_embeddings the head is the
    embedding module, and a shipped lm_head has no destination. A model
    trained tied saves one tensor under both names: the served head is the
    trained one, and the copy a warning."""
    draft = tied_draft(tmp_path, head=random_table, embedding=random_table, scale=scale)
    report = check_checkpoint(draft)
    assert errors(report) == Counter() and warnings(report) == Counter({"LMH001": 1})
    assert "as a tied model saves them" in report.warnings[0].message


@pytest.mark.parametrize("embedding, why", [
    (lambda t: random_table(t) * 2, "it differs from the embedding"),
    (lambda t: torch.zeros(96, 16, dtype=torch.bfloat16), "so it is not the tied embedding"),
    (None, "no embed_tokens is shipped"),
], ids=["another-embedding", "another-shape", "no-embedding"])
@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_head_of_its_own_beside_tied_embeddings_is_dropped(tmp_path, embedding, why, scale):
    """A head that is not the embedding was trained as a head of its own;
    the engine drops it and serves the embedding (the target's, where it
    attaches it): LMH002, and convert refuses to write it as it is."""
    draft = tied_draft(tmp_path, head=random_table, embedding=embedding, scale=scale)
    report = check_checkpoint(draft)
    [dropped] = [f for f in report.errors if f.code == "LMH002"]
    assert dropped.tensor == "lm_head.weight"
    assert why in dropped.message and "set tie_word_embeddings: false" in dropped.message
    with pytest.raises(CheckpointError, match="LMH002"):
        convert_checkpoint(draft, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_tied_head_too_large_to_compare_header_only_waits_for_deep(tmp_path, monkeypatch):
    from dspark.converters.readers import copies

    monkeypatch.setattr(copies, "COMPARE_LIMIT_HEADER_ONLY", 16)
    draft = tied_draft(tmp_path, head=random_table, embedding=random_table)
    header_only = check_checkpoint(draft)
    # dropped either way; a genuinely tied draft does not fail for its size
    assert header_only.errors == [] and [f.code for f in header_only.warnings] == ["LMH002"]
    assert "`dspark check --deep` compares them" in header_only.warnings[0].message
    deep = check_checkpoint(draft, deep=True)
    assert errors(deep) == Counter() and warnings(deep) == Counter({"LMH001": 1})
    # converting reads every payload, compares them, and leaves the copy behind
    report = convert_checkpoint(draft, tmp_path / "out")
    assert [d.stored_name for d in report.plan.dropped] == ["lm_head.weight"]
    assert check_checkpoint(tmp_path / "out", deep=True).passed(strict=True)


def test_a_head_of_the_wrong_height_is_refused(tmp_path):
    def tall(t):
        t["lm_head.weight"] = torch.zeros(41, 32, dtype=torch.bfloat16)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tensor_edit=tall))
    assert [(f.code, f.tensor) for f in report.errors] == [("INV003", "lm_head.weight")]


def test_a_shipped_embedding_must_have_vocab_size_rows(tmp_path):
    def short(t):
        t["embed_tokens.weight"] = t["embed_tokens.weight"][:-1].contiguous()

    def drop(t):
        del t["embed_tokens.weight"]

    bad = check_checkpoint(write_eagle3_draft(tmp_path / "b", tensor_edit=short))
    assert [(f.code, f.tensor) for f in bad.errors] == [("INV003", "embed_tokens.weight")]
    assert check_checkpoint(write_eagle3_draft(tmp_path / "g", tensor_edit=drop)).passed(strict=True)


def test_d2t_is_checked_only_on_the_payload_for_its_range(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", defect="d2t-past-vocab")
    assert check_checkpoint(draft).passed(strict=True)  # header-only: the values are not read
    [finding] = [f for f in check_checkpoint(draft, deep=True).errors]
    assert finding.code == "VOC003" and finding.detail["max"] == 96


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_d2t_longer_than_the_head_loads_its_extra_entries_unread(tmp_path, scale):
    """hot_token_id = d2t + arange is indexed only by the head's argmax
    (LE3:691-695; DS3:2358-2362): a longer table serves correctly, a
    shorter one indexes past its end."""
    def longer(t):
        t["d2t"] = torch.cat([t["d2t"], torch.zeros(3, dtype=t["d2t"].dtype)])

    def shorter(t):
        t["d2t"] = t["d2t"][:-1].contiguous()

    report = check_checkpoint(write_eagle3_draft(tmp_path / "long", scale=scale, tensor_edit=longer), deep=True)
    assert report.passed() and warnings(report) == Counter({"VOC002": 1})
    report = check_checkpoint(write_eagle3_draft(tmp_path / "short", scale=scale, tensor_edit=shorter))
    assert errors(report) == Counter({"VOC002": 1})


# Taps ---------------------------------------------------------------------------------


def _taps(config: dict, **fields) -> dict:
    config.update(fields)
    return config


@pytest.mark.parametrize(
    ("scale", "fields", "code"),
    [
        # LE3:462-466 counts the top level; FAC:44-75 reads eagle_config first.
        pytest.param("tiny-llama", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}}, None,
                     id="llama-ids-only-in-eagle-config-3"),
        # two lists of one count: the target's is the one SpecForge trains on (a warning, below)
        pytest.param("tiny-llama", {"eagle_aux_hidden_state_layer_ids": [1, 4, 7],
                                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 5, 8]}}, None,
                     id="llama-two-lists"),
        # DS3:2112-2119: eagle_config present without ids -> T = 3, top level
        # ignored, by the trainers too: a warning (test below).
        pytest.param("tiny-mla", {"eagle_aux_hidden_state_layer_ids": [2, 4, 7], "eagle_config": {}}, None,
                     id="mla-top-level-ignored"),
        pytest.param("tiny-mla", {"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}, None, id="mla-top-level-only"),
        pytest.param("tiny-mla", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, "TAP001",
                     id="mla-empty-list"),
    ],
)
def test_the_draft_and_the_target_read_tap_ids_differently(tmp_path, scale, fields, code):
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=lambda c: _taps(c, **fields),
                               tensor_edit=None)
    found = set(errors(check_checkpoint(draft))) & {"TAP001", "TAP002"}
    assert found == ({code} if code else set())


def test_a_llama_null_tap_list_is_refused(tmp_path):
    # LE3:463: len(None) raises.
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(eagle_aux_hidden_state_layer_ids=None))
    assert "CFG003" in errors(check_checkpoint(draft))


def test_taps_the_target_never_captures(tmp_path):
    # transformer_model.py@f4d8ec6e:219-264, DS3:1591-1593: ids -1..N-2 only, the rest silently dropped.
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 32, "num_hidden_layers": 12, "vocab_size": 96}))
    ok = write_eagle3_draft(tmp_path / "ok", tap_ids=[-1, 5, 10])
    assert check_checkpoint(ok, target=target).passed(strict=True)
    bad = write_eagle3_draft(tmp_path / "bad", tap_ids=[1, 5, 11])
    [tap] = [f for f in check_checkpoint(bad, target=target).errors if f.code == "TGT005"]
    assert tap.detail["outside"] == [11] and "never captures" in tap.message


def test_a_rotary_inv_freq_buffer_is_skipped_not_refused(tmp_path):
    # llama_eagle3.py@f4d8ec6e:705-719 drops a name with no parameter; the
    # recomputed rotary buffer is harmless there.
    import torch

    def add(tensors):
        tensors["midlayer.self_attn.rotary_emb.inv_freq"] = torch.ones(16)

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tensor_edit=add))
    assert report.passed(strict=True)
    assert "midlayer.self_attn.rotary_emb.inv_freq" in {f.tensor for f in report.findings if f.code == "INV005"}


def test_norm_before_residual_is_not_read_by_the_engine(tmp_path):
    # No TokenSpeed model reads norm_before_residual (speculators writes it):
    # a draft trained with it on is served the other arithmetic.
    def on(config):
        config["norm_before_residual"] = True

    report = check_checkpoint(write_eagle3_draft(tmp_path / "on", config_edit=on))
    assert [f.code for f in report.errors] == ["ENG001"]
    assert "norm_before_residual" in report.errors[0].message

    def off(config):
        config["norm_before_residual"] = False

    assert check_checkpoint(write_eagle3_draft(tmp_path / "off", config_edit=off)).passed(strict=True)


def test_an_mla_draft_wider_taps_without_its_own_embedding_and_head_fails(tmp_path):
    # deepseek_v3.py@f4d8ec6e:2408-2413: with target_hidden_size != hidden_size
    # nothing of the target's is attached; an absent embedding or head stays
    # uninitialised.
    def wide(config):
        config["target_hidden_size"] = config["hidden_size"] + 8
        config.pop("draft_vocab_size", None)

    def strip(tensors):
        for name in [n for n in tensors if n.startswith(("embed_tokens.", "lm_head.", "d2t"))]:
            tensors.pop(name)

    def widen_fc(tensors):
        strip(tensors)

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=wide, tensor_edit=widen_fc)
    report = check_checkpoint(draft)
    missing = {f.tensor for f in report.errors if f.code == "INV001"}
    assert {"embed_tokens.weight", "lm_head.weight"} <= missing, [(f.code, f.tensor) for f in report.errors]


def test_a_llama_tap_at_the_target_layer_count_is_its_final_residual(tmp_path):
    # transformer_model.py@f4d8ec6e:251-264: id N captures the residual after
    # the last layer on BaseTransformerModel targets (Llama); N-1 is the id never captured.
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 32,
                                                    "num_hidden_layers": 12, "vocab_size": 96}))
    assert check_checkpoint(write_eagle3_draft(tmp_path / "n", tap_ids=[1, 5, 12]), target=target).passed(strict=True)
    # a DeepseekV3 target captures layers only (deepseek_v3.py@f4d8ec6e:1591-1593)
    (target / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 32,
                                                    "num_hidden_layers": 12, "vocab_size": 96}))
    llama = check_checkpoint(write_eagle3_draft(tmp_path / "deepseek", tap_ids=[1, 5, 12]), target=target)
    assert "TGT005" in errors(llama)
    # the MLA target (DeepseekV3) has no such capture: DS3:1591-1593
    mla = write_eagle3_draft(tmp_path / "m", scale="tiny-mla", tap_ids=[1, 5, 12])
    assert "TGT005" in errors(check_checkpoint(mla, target=target))
    # the target captures, whatever the draft: an MLA draft on a Llama target gets id N
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 32,
                                                    "num_hidden_layers": 12, "vocab_size": 96}))
    assert "TGT005" not in errors(check_checkpoint(mla, target=target))


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_norm_output_only_in_eagle_config_is_not_served(tmp_path, scale):
    """LE3:509 and DS3:2186 read getattr(config, "norm_output", False): the
    top level only."""
    nested = write_eagle3_draft(tmp_path / "n", scale=scale, config_edit=lambda c: c.setdefault(
        "eagle_config", {}).update(norm_output=True))
    assert [(f.code, f.detail.get("feature")) for f in check_checkpoint(nested).errors] == [("ENG001", "norm_output")]
    # TorchSpec's marker: the engines' meaning of the key (a bare midlayer.*
    # folder is SpecForge's, whose norm_output means another thing: ENG008,
    # tests/converters/test_norm_output.py)
    top = write_eagle3_draft(tmp_path / "t", scale=scale,
                             config_edit=lambda c: c.update(norm_output=True, _torchspec_version="0.1.0"))
    assert check_checkpoint(top).passed()


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Qwen2ForCausalLM", "Qwen3MoeForCausalLM"])
@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_qwen_target_captures_no_taps(tmp_path, architecture, scale):
    """models/qwen3.py@f4d8ec6e:367-401 (and qwen2, qwen3_moe): the forward
    never reads layers_to_capture and returns (hidden_states, None)."""
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": [architecture], "hidden_size": 32,
                                                    "num_hidden_layers": 12, "vocab_size": 96}))
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, tap_ids=[1, 5, 9]), target=target)
    assert [f.code for f in report.errors] == ["TGT006"]


def test_an_mla_draft_without_target_hidden_size_is_built_at_hidden_size(tmp_path):
    """getattr(config, "target_hidden_size", config.hidden_size) (DS3:2142-2143):
    without the field, fc is built for taps x hidden_size, so a wider target fails."""
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 48,
                                                    "num_hidden_layers": 12, "vocab_size": 96}))
    draft = write_eagle3_draft(tmp_path / "m", scale="tiny-mla", config_edit=lambda c: c.pop("target_hidden_size", None))
    [width] = [f for f in check_checkpoint(draft, target=target).errors if f.code == "TGT002"]
    assert width.detail["field"] == "hidden_size" and width.detail["target"] == 48


def test_a_llama_draft_trained_with_another_activation_is_served_with_silu(tmp_path):
    """LlamaMLP builds SiluAndMul whatever hidden_act says (LE3:150-188)."""
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(hidden_act="gelu"))
    [finding] = check_checkpoint(draft).errors
    assert finding.code == "ENG001" and "hidden_act" in finding.message
    assert "retrain with hidden_act = 'silu'" in finding.message
    for same in ("silu", "swish"):  # transformers' ACT2FN: one function under two names
        draft = write_eagle3_draft(tmp_path / same, config_edit=lambda c: c.update(hidden_act=same))
        assert check_checkpoint(draft).passed(strict=True), same


def test_one_tap_of_the_drafts_own_width_is_never_projected(tmp_path):
    """The forward applies fc only when the captured state is wider than the
    embedding (LE3:539; DS3:2205): one tap of hidden_size goes in raw."""
    for scale in ("tiny-llama", "tiny-mla"):
        draft = write_eagle3_draft(tmp_path / scale, scale=scale, tap_ids=[7])
        [finding] = [f for f in check_checkpoint(draft).errors if f.code == "ENG001"]
        assert "never applies fc" in finding.message


@pytest.mark.parametrize("scale, rope, passes", [
    ("tiny-mla", {"rope_type": "linear", "factor": 2.0}, False),
    ("tiny-mla", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}, True),
    ("tiny-mla", {"rope_type": "YaRN", "factor": 2.0, "original_max_position_embeddings": 64}, False),
    ("tiny-llama", {"rope_type": "linear", "factor": 2.0}, True),
], ids=["mla-linear", "mla-yarn", "mla-YaRN-as-written", "llama-linear"])
def test_the_mla_layer_keeps_only_yarn_rope_scaling(tmp_path, scale, rope, passes):
    """DS3:1950-1969 drops every other rope type with a log line, comparing
    the type as written; the Llama EAGLE-3 layer builds what it is given.
    Beside rope_scaling, a YaRN rope_parameters changes nothing:
    transformers' DeepseekV3Config keeps rope_scaling's type."""
    yarn_parameters = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}
    draft = write_eagle3_draft(tmp_path / "d", scale=scale,
                               config_edit=lambda c: c.update(rope_scaling=rope, rope_parameters=yarn_parameters))
    report = check_checkpoint(draft)
    assert ("ENG001" not in errors(report)) == passes, [f.message for f in report.errors]


def test_a_llama_eagle3_layer_has_no_sliding_window(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(
        layer_types=["sliding_attention"], use_sliding_window=True, sliding_window=64))
    [finding] = [f for f in check_checkpoint(draft).errors if f.code == "ENG001"]
    assert "sliding" in finding.message


def target_of(tmp_path, layers: int) -> Path:
    target = tmp_path / f"target-{layers}.json"
    target.write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 32,
                                  "num_hidden_layers": layers, "vocab_size": 96}))
    return target


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_an_unread_tap_list_is_judged_by_the_targets_defaults(tmp_path, scale):
    """FAC:66-75: with eagle_config present and no ids in it, the target
    reads no list and captures its defaults, [1, N//2-1, N-4]
    (causal_lm.py:137-140, DS3:1688-1693). So does SpecForge, which writes
    this shape (model_providers.py@a6b6b02:188-204): the top-level list is
    read by nothing, a warning. On a target whose defaults are the list
    ([1, 7, 12]: 16 layers), a note."""
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=lambda c: _taps(
        c, eagle_aux_hidden_state_layer_ids=[1, 7, 12], eagle_config={}))
    alone = check_checkpoint(draft)
    [unread] = [f for f in alone.findings if f.code == "TAP002"]
    assert unread.severity is Severity.WARNING and "on a 16-layer target" in unread.message
    assert "SpecForge, which writes this config shape, trains on those same defaults" in unread.message
    on_16 = check_checkpoint(draft, target=target_of(tmp_path, 16))
    [served] = [f for f in on_16.findings if f.code == "TAP002"]
    assert served.severity is Severity.INFO and on_16.passed(strict=True)
    on_20 = check_checkpoint(draft, target=target_of(tmp_path, 20))
    [other] = [f for f in on_20.findings if f.code == "TAP002"]
    assert other.severity is Severity.WARNING and "[1, 9, 16] on this 20-layer target" in other.message


def test_a_vllm_export_whose_shifted_list_the_target_never_reads_is_served_as_it_is(tmp_path):
    """TorchSpec's --vllm export shifts the top-level list; with an
    eagle_config holding none the target reads no list (FAC:66-75) and
    captures its defaults: no layer is captured late, and the unshifted
    list is what the defaults are compared with."""
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", layout="layers.0", config_edit=lambda c: _taps(
        c, model_type="kimi_k2", _torchspec_version="0.1.0", eagle_config={},
        eagle_aux_hidden_state_layer_ids=[2, 8, 13]))
    report = check_checkpoint(draft, target=target_of(tmp_path, 16))
    assert "SRV001" not in {f.code for f in report.findings}
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings if f.severity is not Severity.INFO]


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_two_different_tap_lists_warn_in_both_families_alike(tmp_path, scale):
    """The target captures eagle_config's list (FAC:66-75); a different
    top-level list is read by nothing that picks layers (the Llama draft
    takes only its length). SpecForge, which writes eagle_config, trains on
    eagle_config's list too (model_providers.py@a6b6b02:188-204): a
    warning, since a draft another trainer taught the top-level list would
    be fed other layers."""
    def both(config):
        config["eagle_config"] = {TAP_IDS: [1, 7, 12]}
        config[TAP_IDS] = [2, 8, 13]

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=both))
    assert errors(report) == Counter() and warnings(report)["TAP002"] == 1



def test_a_null_target_hidden_size_only_stops_the_sharing(tmp_path):
    """LE3:727-733: `hasattr` and `!=`: null differs from hidden_size, so the
    target's embedding and head are not attached; fc stays hidden_size per
    tap. With its own embedding shipped the draft is served as shipped."""
    null = lambda c: c.update(target_hidden_size=None)  # noqa: E731
    assert check_checkpoint(write_eagle3_draft(tmp_path / "g", config_edit=null)).passed(strict=True)

    def drop(t):
        del t["embed_tokens.weight"]

    report = check_checkpoint(write_eagle3_draft(tmp_path / "b", config_edit=null, tensor_edit=drop))
    assert [(f.code, f.tensor) for f in report.errors] == [("INV001", "embed_tokens.weight")]


@pytest.mark.parametrize("scale, target_vocab, code_severity", [
    ("tiny-llama", 128, Severity.WARNING),  # 96 and 128 both pad to 128 rows: the target's embedding fits
    ("tiny-llama", 152, Severity.ERROR),    # 192 rows against the draft's 128: refused at load
    ("tiny-mla", 152, Severity.WARNING),    # the MLA draft keeps the embedding it ships
])
def test_a_smaller_draft_vocabulary_against_the_shared_target_embedding(tmp_path, scale, target_vocab, code_severity):
    """EAGLE-3 drafters attach the target's embedding; its rows are padded to
    64 (models/llama_eagle3.py@f4d8ec6e:727-751, deepseek_v3.py@f4d8ec6e:2408-2426)."""
    draft = write_eagle3_draft(tmp_path / "d", scale=scale)  # vocab_size 96
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 32, "num_hidden_layers": 12,
                                                    "vocab_size": target_vocab}))
    [finding] = [f for f in check_checkpoint(draft, target=target).findings if f.code == "TGT004"]
    assert finding.severity == code_severity
    if code_severity is Severity.ERROR:
        assert "192 padded rows do not fit the draft's 128" in finding.message


def test_an_mla_draft_without_its_own_embedding_cannot_take_a_target_embedding_of_another_size(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla",
                               tensor_edit=lambda t: t.pop("embed_tokens.weight"))
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 32, "num_hidden_layers": 12, "vocab_size": 152}))
    [finding] = [f for f in check_checkpoint(draft, target=target).errors if f.code == "TGT004"]
    assert "ship the draft's own embed_tokens.weight" in finding.message
    # with target_hidden_size differing, nothing of the target's is attached: the missing embedding is INV001
    draft_apart = write_eagle3_draft(tmp_path / "d2", scale="tiny-mla",
                                     config_edit=lambda c: c.update(target_hidden_size=40),
                                     tensor_edit=lambda t: t.pop("embed_tokens.weight"))
    assert "TGT004" not in {f.code for f in check_checkpoint(draft_apart, target=target).errors}


def _no_tap_list(config):
    config.pop(TAP_IDS, None)
    if isinstance(config.get("eagle_config"), dict):
        config["eagle_config"].pop(TAP_IDS, None)


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize(("layers", "captured"), [(4, [1, 2]), (5, [2]), (6, [2, 3]), (7, None), (12, None)])
def test_default_taps_that_name_one_layer_twice_leave_fc_short(tmp_path, scale, layers, captured):
    # causal_lm.py@f4d8ec6e:137-140 / DS3:1691-1693: [2, N//2, N-3]; each
    # layer is captured once (transformer_model.py@f4d8ec6e:219-221, DS3:1593).
    target = tmp_path / "t"
    target.mkdir()
    arch = "LlamaForCausalLM" if scale == "tiny-llama" else "DeepseekV3ForCausalLM"
    (target / "config.json").write_text(json.dumps({"architectures": [arch], "hidden_size": 32,
                                                    "num_hidden_layers": layers, "vocab_size": 96}))
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=_no_tap_list)
    report = check_checkpoint(draft, target=target)
    short = [f for f in report.errors if f.code == "TAP001"]
    if captured is None:
        assert not short and report.passed(), [(f.code, f.message) for f in report.errors]
    else:
        [finding] = short
        assert finding.detail["captured_layers"] == captured
        assert f"gets {len(captured)}" in finding.message
    # a list that names three distinct layers of the same target passes
    listed = write_eagle3_draft(tmp_path / "l", scale=scale, tap_ids=[0, 1, 2])
    assert not [f for f in check_checkpoint(listed, target=target).errors if f.code == "TAP001"]


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_kimi_k3_target_reads_eagle3_tap_ids_one_based(tmp_path, scale):
    # models/kimi_k3.py@f4d8ec6e:2580-2599: ids taken unchanged as one-based
    # completed layers, [1, N], refused otherwise; :2555 captures layer id-1.
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "text_config": {"model_type": "kimi_linear", "hidden_size": 32, "num_hidden_layers": 12, "vocab_size": 96}}))

    def judged(name, ids):
        return check_checkpoint(write_eagle3_draft(tmp_path / name, scale=scale, tap_ids=ids), target=target)

    served = judged("served", [1, 6, 12])  # 12 = N: the last completed layer
    assert served.passed() and not served.passed(strict=True)
    [one_based] = [f for f in served.findings if f.code == "TGT008"]
    assert one_based.detail["captured_layers"] == [0, 5, 11]
    assert "13 is past the target's 12 layers" in one_based.message  # no list to offer: N + 1 does not exist
    lower = [f for f in judged("lower", [1, 6, 11]).findings if f.code == "TGT008"]
    assert "[2, 7, 12]" in lower[0].message
    for name, ids, outside in (("zero", [0, 6, 11], [0]), ("minus-one", [-1, 6, 11], [-1])):
        [refused] = [f for f in judged(name, ids).errors if f.code == "TGT005"]
        assert refused.detail["outside"] == outside and "refuses the draft at startup" in refused.message
    # with no list the defaults name the same layers on every target: no TGT008
    no_list = write_eagle3_draft(tmp_path / "none", scale=scale, config_edit=_no_tap_list)
    assert "TGT008" not in {f.code for f in check_checkpoint(no_list, target=target).findings}
    # ...unless they are not ascending ids in [1, N]: four layers give [2, 2, 1], refused at startup
    (target / "config.json").write_text(json.dumps({
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "text_config": {"model_type": "kimi_linear", "hidden_size": 32, "num_hidden_layers": 4, "vocab_size": 96}}))
    [refused] = [f for f in check_checkpoint(no_list, target=target).errors if f.code == "TAP001"]
    assert "refuses the draft at startup" in refused.message and refused.detail["default_layers"] == [2, 2, 1]
