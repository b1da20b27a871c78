"""SGLang 0.5.23's verdicts, one case at a time: each draft is real
(safetensors written by the safetensors library) and each assertion is what
SGLang's own config and loader code does with it, cited beside the case as
`sglang/srt/<path>:<lines>@sglang==0.5.23`. Where TokenSpeed disagrees the
case says so: a folder is served right on one engine and wrong on the
other."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import write_draft
from dspark.examples.fabricate_eagle3 import write_eagle3_draft
from dspark.examples.fabricate_gqa import GQA_SCALES, gqa_config, gqa_tensor_shapes
from dspark.examples.fabricate_parts import make_tensors, write_safetensors
from dspark.schema.engines import engine_by_spec, engine_specs
from dspark.schema.errors import UsageError
from dspark.schema.findings import Severity

TAPS = [1, 5, 8]  # the defaults of the fabricator's 12-layer target: [1, N//2-1, N-4]
TRAINED = [2, 6, 9]  # a list the target's defaults never give


def errors(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.ERROR)


def warnings(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.WARNING)


def sglang(path, **kwargs):
    return check_checkpoint(path, engine="sglang", **kwargs)


def in_eagle_config(ids):
    """SpecForge's layout: the list under eagle_config only."""

    def edit(config):
        config.pop("eagle_aux_hidden_state_layer_ids", None)
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}

    return edit


def llama(folder: Path, *, ids=TRAINED, edit=None, **kwargs) -> Path:
    def config_edit(config):
        in_eagle_config(ids)(config)
        if edit:
            edit(config)

    return write_eagle3_draft(folder, config_edit=config_edit, **kwargs)


def mla(folder: Path, **kwargs) -> Path:
    return write_eagle3_draft(folder, scale="tiny-mla", **kwargs)


def gqa(folder: Path, *, variant="dflash", edit=None, tensor_edit=None) -> Path:
    config = gqa_config(GQA_SCALES["tiny"], variant=variant)
    tensors = make_tensors(gqa_tensor_shapes(config), dtype="bfloat16", seed=0)
    if edit:
        edit(config)
    if tensor_edit:
        tensor_edit(tensors)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder, tensors)
    return folder


def target(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def edit_config(folder: Path, edit) -> Path:
    """Change a written draft's config.json (its tensors stay as written)."""
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def rename(tensors: dict, old: str, new: str) -> None:
    for name in [n for n in tensors if old in n]:
        tensors[name.replace(old, new)] = tensors.pop(name)


# The profile ---------------------------------------------------------------


def test_sglang_names_its_release_and_serves_no_k3_dspark():
    profile = engine_by_spec("sglang")
    assert profile is engine_by_spec("sglang@0.5.23")
    assert profile.spec == "sglang@0.5.23"
    assert sorted(profile.loaders) == ["dflash2", "dflash_gqa", "eagle3_llama", "eagle3_mla"]
    assert [p.name for p in engine_specs("tokenspeed,sglang")] == ["tokenspeed", "sglang"]
    with pytest.raises(UsageError):
        engine_by_spec("sglang@0.5.19")  # releases before 0.5.20 are not modelled


def test_every_rule_cites_the_wheel():
    profile = engine_by_spec("sglang")
    for loader in profile.loaders.values():
        for source in loader.sources.values():
            assert source.commit == "sglang==0.5.23" and source.path.startswith("sglang/srt/")
            assert source.cite().startswith("sglang/srt/") and "@sglang==0.5.23:" in source.cite()


def test_a_k3_dspark_draft_is_not_served(tmp_path):
    # No K3DSparkModel and no k3_dspark config anywhere in sglang/srt: the
    # registry finds no class (models/registry.py:93-114).
    report = sglang(write_draft(tmp_path / "k3"))
    assert errors(report) == Counter({"ENG006": 1})
    assert "sglang@0.5.23 does not serve k3_dspark" in report.errors[0].message


# EAGLE-3 Llama ---------------------------------------------------------------


def test_a_specforge_llama_draft_passes(tmp_path):
    # eagle_config's list feeds both the draft's fc (llama_eagle3.py:156-161)
    # and the target's capture (spec_aux_hidden_state.py:185-196).
    assert sglang(llama(tmp_path / "d")).passed(strict=True)


def test_a_top_level_tap_list_is_read_by_nothing(tmp_path):
    # The target reads eagle_config's list only and captures its defaults
    # without it (spec_aux_hidden_state.py:185-196; models/llama.py:929-941):
    # a draft trained on another list is served other layers. TokenSpeed's
    # target reads the top-level list (execution/factory.py@f4d8ec6e:44-75).
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=TRAINED)
    report = sglang(draft)
    assert errors(report) == Counter({"TAP006": 1})
    assert "is not read by SGLang" in report.errors[0].message
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"
    assert check_checkpoint(draft, engine="tokenspeed").passed()


def test_a_top_level_list_that_is_the_defaults_only_warns(tmp_path):
    report = sglang(write_eagle3_draft(tmp_path / "d", tap_ids=TAPS))
    assert not errors(report) and warnings(report) == Counter({"TAP002": 1})
    assert "12-layer target" in report.warnings[0].message


def test_num_aux_hidden_states_sizes_fc_over_the_list(tmp_path):
    # num_aux_hidden_states wins over eagle_config's list (llama_eagle3.py:156-161):
    # fc is built for 4 taps while the target captures 3.
    report = sglang(llama(tmp_path / "d", edit=lambda c: c.update(num_aux_hidden_states=4)))
    assert errors(report)["TAP001"] == 1


def test_an_absent_draft_vocab_size_is_refused_at_startup(tmp_path):
    # `config.draft_vocab_size is None` on a config class without the field
    # raises AttributeError (llama_eagle3.py:303-308).
    report = sglang(llama(tmp_path / "d", edit=lambda c: c.pop("draft_vocab_size")))
    assert errors(report)["CFG003"] == 1
    assert "draft_vocab_size is absent" in report.errors[0].message


def test_a_null_draft_vocab_size_serves_the_targets_head(tmp_path):
    # draft_vocab_size null -> load_lm_head_from_target, replaced by the
    # target's head (llama_eagle3.py:300-314; eagle_worker_v2.py:355-361):
    # a shipped head of its own is never served.
    def edit(config):
        config["draft_vocab_size"] = None

    report = sglang(edit_config(llama(tmp_path / "d"), edit))
    assert warnings(report)["LMH001"] == 1 and errors(report)["VOC002"] == 1


def test_an_activation_other_than_silu_is_refused(tmp_path):
    # LlamaMLP raises unless hidden_act is silu (models/llama.py:116-119);
    # TokenSpeed serves it with SiLU (models/llama_eagle3.py@f4d8ec6e:150-188).
    report = sglang(llama(tmp_path / "d", edit=lambda c: c.update(hidden_act="gelu")))
    assert errors(report) == Counter({"CFG003": 1})
    assert "silu only" in report.errors[0].message


@pytest.mark.parametrize("fc_norm", [None, False])
def test_use_aux_norm_declares_fc_norm(tmp_path, fc_norm):
    # `config.fc_norm or config.use_aux_norm` (llama_eagle3.py:184-196).
    def edit(config):
        config["fc_norm"] = fc_norm
        config["use_aux_norm"] = True

    assert sglang(edit_config(llama(tmp_path / "d", fc_norm=True), edit)).passed(strict=True)


def test_legacy_aux_norm_names_load_as_fc_norm(tmp_path):
    # aux_norm_low/mid/high -> fc_norm.0/1/2 (llama_eagle3.py:337-348).
    def tensors(t):
        for old, new in (("fc_norm.0.", "aux_norm_low."), ("fc_norm.1.", "aux_norm_mid."),
                         ("fc_norm.2.", "aux_norm_high.")):
            rename(t, old, new)

    draft = llama(tmp_path / "d", fc_norm=True, tensor_edit=tensors)
    assert sglang(draft).passed(strict=True)
    assert "SRV001" in errors(check_checkpoint(draft, engine="tokenspeed"))


def test_model_prefixed_names_are_found_but_not_a_model_prefixed_head(tmp_path):
    # A name is looked up as it is, else with `model.` added
    # (llama_eagle3.py:358-378): `model.midlayer.*` finds the body, but the head
    # is not under `model.`, so `model.lm_head.weight` is dropped and the
    # draft's own head served uninitialised.
    def body(t):
        for name in [n for n in t if n != "lm_head.weight"]:
            t["model." + name] = t.pop(name)

    assert sglang(llama(tmp_path / "a", tensor_edit=body)).passed(strict=True)

    def everything(t):
        body(t)
        t["model.lm_head.weight"] = t.pop("lm_head.weight")

    report = sglang(llama(tmp_path / "b", tensor_edit=everything))
    assert errors(report) == Counter({"SRV001": 1})
    assert "model.lm_head.weight" in report.errors[0].message


def test_norm_before_fc_is_read_from_eagle_config(tmp_path):
    # eagle_config.get("norm_before_fc", config.norm_before_fc) (llama_eagle3.py:169-182).
    def edit(config):
        del config["norm_before_fc"]
        config["eagle_config"]["norm_before_fc"] = True

    draft = edit_config(llama(tmp_path / "d", norm_before_fc=True), edit)
    assert sglang(draft).passed(strict=True)
    # TokenSpeed reads the flag at the top level only (models/llama_eagle3.py@f4d8ec6e:480-488)
    assert not check_checkpoint(draft, engine="tokenspeed").passed()


def test_norm_before_residual_is_never_read(tmp_path):
    # No SGLang model reads norm_before_residual (llama_eagle3.py:88-119).
    report = sglang(llama(tmp_path / "d", edit=lambda c: c.update(norm_before_residual=True)))
    assert errors(report) == Counter({"ENG001": 1})


def test_capture_switched_off_in_eagle_config(tmp_path):
    # eagle_config.use_aux_hidden_state false: the target captures nothing
    # (spec_aux_hidden_state.py:185-191).
    def edit(config):
        config["eagle_config"]["use_aux_hidden_state"] = False

    report = sglang(llama(tmp_path / "d", edit=edit))
    assert errors(report) == Counter({"ENG001": 1})
    assert "use_aux_hidden_state" in report.errors[0].message


def test_fc_is_built_from_target_hidden_size(tmp_path):
    # fc, fc_norm are target_hidden_size per tap (llama_eagle3.py:151-196);
    # with its own head and the widths apart the draft keeps its own
    # embedding (models/llama.py:910-916), which must then be shipped.
    # TokenSpeed builds fc from hidden_size and refuses the width.
    import torch

    hidden, wide = 32, 48

    def edit(config):
        config["target_hidden_size"] = wide

    def tensors(t):
        t["fc.weight"] = torch.zeros(hidden, 3 * wide, dtype=torch.bfloat16)
        t["embed_tokens.weight"] = torch.zeros(96, hidden, dtype=torch.bfloat16)

    draft = llama(tmp_path / "d", edit=edit, tensor_edit=tensors)
    assert sglang(draft).passed()
    assert not check_checkpoint(draft, engine="tokenspeed").passed()

    def no_embedding(t):
        t["fc.weight"] = torch.zeros(hidden, 3 * wide, dtype=torch.bfloat16)
        t.pop("embed_tokens.weight", None)

    report = sglang(llama(tmp_path / "e", edit=edit, tensor_edit=no_embedding))
    assert errors(report) == Counter({"INV001": 1})
    assert "embed_tokens.weight" in report.errors[0].message


def test_biases_have_no_destination_but_o_proj(tmp_path):
    # qkv_proj is rebuilt without bias (llama_eagle3.py:67-75): shipped q/k/v
    # biases find no parameter and are dropped without a word.
    import torch

    def tensors(t):
        for part, rows in (("q", 40), ("k", 20), ("v", 20)):
            t[f"midlayer.self_attn.{part}_proj.bias"] = torch.zeros(rows, dtype=torch.bfloat16)

    report = sglang(llama(tmp_path / "d", tensor_edit=tensors))
    assert errors(report)["INV002"] == 3


# EAGLE-3 MLA -------------------------------------------------------------------


def test_a_torchspec_mla_draft_passes_in_both_layer_namings(tmp_path):
    # ^layers.0. -> midlayer. (kimi_k25_eagle3.py:445-450).
    assert sglang(mla(tmp_path / "a", tap_ids=TRAINED)).passed(strict=True)
    assert sglang(mla(tmp_path / "b", tap_ids=TRAINED, layout="layers.0")).passed(strict=True)


def test_model_prefixed_mla_names_are_logged_and_dropped(tmp_path):
    # Every name but lm_head.* gets `model.` added, so `model.x` looks up
    # model.model.x and is skipped with a warning (kimi_k25_eagle3.py:445-450, 494-496).
    def tensors(t):
        for name in [n for n in t if n.startswith("midlayer.")]:
            t["model." + name] = t.pop(name)

    report = sglang(mla(tmp_path / "d", tap_ids=TRAINED, tensor_edit=tensors))
    assert errors(report) == Counter({"SRV001": 1})


def test_a_pre_fused_q_kv_a_projection_is_dropped(tmp_path):
    # Its name holds kv_a_proj_with_mqa: held back as half of a pair that
    # never completes (kimi_k25_eagle3.py:467-492).
    report = sglang(mla(tmp_path / "d", tap_ids=TRAINED, defect="fused-qkv-a"))
    assert errors(report)["INV002"] == 1
    assert "drops it without a word" in next(f.message for f in report.errors if f.code == "INV002")


def test_norm_before_fc_is_not_built_for_mla(tmp_path):
    report = sglang(mla(tmp_path / "d", tap_ids=TRAINED, norm_before_fc=True,
                        tensor_edit=lambda t: None))
    assert errors(report)["ENG001"] >= 1


def test_mla_is_one_layer(tmp_path):
    # kimi_k25_eagle3.py:243-244
    report = sglang(mla(tmp_path / "d", tap_ids=TRAINED, defect="one-layer"))
    assert errors(report)["CFG003"] == 1


def test_the_mla_draft_counts_a_top_level_list_the_target_ignores(tmp_path):
    # The draft falls back to the top-level list (kimi_k25_eagle3.py:48-59);
    # the target does not (spec_aux_hidden_state.py:185-196): four taps
    # against the three defaults.
    def edit(config):
        config.pop("eagle_config")
        config["eagle_aux_hidden_state_layer_ids"] = [1, 3, 5, 8]

    import torch

    def tensors(t):
        t["fc.weight"] = torch.zeros(32, 4 * 32, dtype=torch.bfloat16)

    report = sglang(mla(tmp_path / "d", tap_ids=TRAINED, config_edit=edit, tensor_edit=tensors))
    assert errors(report)["TAP001"] == 1


# GQA DFlash and dense DSpark -----------------------------------------------------


def test_a_dflash_and_a_dspark_draft_pass(tmp_path):
    assert sglang(gqa(tmp_path / "a")).passed(strict=True)
    assert sglang(gqa(tmp_path / "b", variant="dspark")).passed(strict=True)
    # Qwen3DSparkModel is DSparkDraftModel under another name (models/dspark.py:977-995)
    assert sglang(gqa(tmp_path / "c", variant="dspark",
                      edit=lambda c: c.update(architectures=["Qwen3DSparkModel"]))).passed(strict=True)


def test_torchspec_native_names_are_dropped_without_a_word(tmp_path):
    # No destination for context_proj/context_norm/final_norm: "Ignore
    # unexpected weights" (models/dflash.py:942-946), so fc, hidden_norm and
    # norm are served uninitialised.
    def tensors(t):
        rename(t, "fc.", "context_proj.")
        rename(t, "hidden_norm.", "context_norm.")
        t["final_norm.weight"] = t.pop("norm.weight")

    report = sglang(gqa(tmp_path / "d", tensor_edit=tensors))
    assert errors(report) == Counter({"SRV001": 1})
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"


def test_fc_norm_is_dropped(tmp_path):
    # SGLang's DFlash model has no fc_norm (models/dflash.py:778-792).
    import torch

    def tensors(t):
        for i in range(3):
            t[f"fc_norm.{i}.weight"] = torch.ones(40, dtype=torch.bfloat16)

    report = sglang(gqa(tmp_path / "d", edit=lambda c: c.update(fc_norm=True), tensor_edit=tensors))
    assert "ENG001" in errors(report)


def test_num_target_layers_is_the_targets_depth(tmp_path):
    # A draft's own list is checked against num_target_layers, read as the
    # target's layer count (models/dflash.py:766-776; dflash_utils.py:556-585).
    report = sglang(gqa(tmp_path / "d", edit=lambda c: c.update(num_target_layers=3)))
    assert errors(report)["CFG003"] == 1
    assert "target's layer count" in report.errors[0].message


def test_a_dspark_draft_needs_its_mask_token_a_dflash_one_takes_the_tokenizers(tmp_path):
    # dspark_config.py:112-121 refuses a DSpark draft without one; the DFLASH
    # worker falls back to the tokenizer's <|MASK|> (dflash_worker_v2.py:1391-1471)
    no_mask = lambda c: c["dflash_config"].pop("mask_token_id")  # noqa: E731
    report = sglang(gqa(tmp_path / "d", variant="dspark", edit=no_mask))
    assert errors(report)["CFG003"] == 1
    assert report.engine_verdicts()[0]["outcome"] == "refused"
    dflash = sglang(gqa(tmp_path / "e", edit=no_mask))
    assert not errors(dflash) and warnings(dflash) == Counter({"CFG008": 1})
    assert "CFG008" in errors(check_checkpoint(tmp_path / "e", engine="tokenspeed"))


def test_a_markov_rank_only_in_dflash_config_is_refused(tmp_path):
    # The DSpark config reads {**dflash_config, **dspark_config} before the
    # top level (dspark_components/dspark_config.py:206-256), but
    # build_markov_head reads the top-level attribute only and raises for a
    # rank <= 0 (models/dspark.py:385-391, 537@sglang==0.5.23; SGLang's own
    # DSparkDraftModel raises on this draft). TokenSpeed refuses it too
    # (models/dspark.py@f4d8ec6e:75-85).
    def edit(config):
        config["dflash_config"].update(markov_rank=config.pop("markov_rank"),
                                       markov_head_type=config.pop("markov_head_type"))

    draft = gqa(tmp_path / "d", variant="dspark", edit=edit)
    report = sglang(draft)
    assert errors(report)["CFG003"] == 1
    assert "build_markov_head" in next(f for f in report.findings if f.code == "CFG003").message
    assert "CFG003" in errors(check_checkpoint(draft, engine="tokenspeed"))

    both = gqa(tmp_path / "b", variant="dspark",
               edit=lambda c: c["dflash_config"].update(markov_rank=c["markov_rank"]))
    assert sglang(both).passed(strict=True)


@pytest.mark.parametrize("field, value", [("markov_rank", 0), ("markov_head_type", "lstm")])
def test_a_markov_head_sglang_cannot_build_is_refused(tmp_path, field, value):
    # models/dspark.py:385-405; dspark_config.py:264-275
    report = sglang(gqa(tmp_path / "d", variant="dspark", edit=lambda c: c.update({field: value})))
    assert errors(report)["CFG003"] == 1


def test_the_stream_is_the_targets(tmp_path):
    # Nothing reads aux_hidden_stream; a Kimi-K3 target whose config sets
    # attn_res_block_size feeds the AttnRes mixture (models/kimi_k3.py:2765,
    # 2871-2905), any other the prefix stream.
    spec = GQA_SCALES["tiny"]
    sizes = {"hidden_size": spec.hidden_size, "num_hidden_layers": spec.target_num_hidden_layers,
             "vocab_size": spec.vocab_size}
    k3 = target(tmp_path / "k3", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
                                   "text_config": {"model_type": "kimi_k3", "attn_res_block_size": 4, **sizes}})
    qwen3 = target(tmp_path / "q3", {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **sizes})
    draft = gqa(tmp_path / "d", variant="dspark")
    report = sglang(draft, target=k3)
    assert errors(report) == Counter({"ENG001": 1})
    assert "feeds the attn_res stream" in report.errors[0].message
    assert sglang(draft, target=qwen3).passed()


def test_a_qwen2_target_cannot_host_a_dflash_draft(tmp_path):
    # Qwen2ForCausalLM has no set_dflash_layers_to_capture
    # (attention_backend_setup.py:62-73).
    spec = GQA_SCALES["tiny"]
    qwen2 = target(tmp_path / "q2", {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                                     "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size,
                                     "num_hidden_layers": spec.target_num_hidden_layers})
    report = sglang(gqa(tmp_path / "d"), target=qwen2)
    assert "TGT007" in errors(report)


def test_a_text_config_is_taken_by_every_config_class(tmp_path):
    # get_hf_text_config turns a text_config object into a config
    # (utils/hf_transformers/common.py:561-572); TokenSpeed refuses the key on
    # a plain Llama config (utils/hf_transformers_utils.py@f4d8ec6e:138-143).
    complete = {"num_attention_heads": 4, "hidden_size": 32, "num_hidden_layers": 1, "vocab_size": 96}
    draft = llama(tmp_path / "d", edit=lambda c: c.update(text_config=complete))
    assert sglang(draft).passed(strict=True)
    assert "CFG011" in errors(check_checkpoint(draft, engine="tokenspeed"))


def test_a_text_config_without_the_shape_fields_stops_sglang(tmp_path):
    # SGLang then reads the draft's shapes from the text_config alone:
    # head_dim else hidden_size // num_attention_heads, hidden_size,
    # num_hidden_layers, vocab_size (configs/model_config.py:1341-1348, 1566,
    # 1581, 1605@sglang==0.5.23): a text_config copied with num_attention_heads
    # only raises AttributeError at startup (SGLang's own ModelConfig on it).
    draft = llama(tmp_path / "d", edit=lambda c: c.update(text_config={"num_attention_heads": 4}))
    report = sglang(draft)
    assert "CFG011" in errors(report)
    finding = next(f for f in report.findings if f.code == "CFG011")
    assert finding.detail["missing"] == ["hidden_size", "num_hidden_layers", "vocab_size"]


def test_an_mla_draft_under_a_llama_config_loads_on_sglang(tmp_path):
    # Nothing on SGLang's load path reads model_type: get_config builds the
    # class it names, which keeps the MLA keys (utils/hf_transformers/
    # config.py:336-380), and ModelConfig picks MLA by the architecture
    # (configs/model_config.py:1384-1398@sglang==0.5.23); SGLang's own loader
    # fills every parameter of this draft: the five MLA fields are read as
    # attributes (configs/model_config.py:1398-1401, models/kimi_k25_eagle3.py:
    # 95-99), the rope from rope_parameters (80-88), n_routed_experts never.
    # TokenSpeed's DeepseekV3 loader reads n_routed_experts, which LlamaConfig lacks.
    draft = mla(tmp_path / "d", config_edit=lambda c: c.update(model_type="llama"))
    assert sglang(draft).passed(strict=True)
    assert "n_routed_experts" in " ".join(f.message for f in check_checkpoint(draft, engine="tokenspeed").errors)
    unknown = mla(tmp_path / "u", config_edit=lambda c: c.update(model_type="dflash"))
    assert "SRV001" in errors(sglang(unknown))


@pytest.mark.parametrize("model_type", ["llama", "qwen3", "gemma"])
@pytest.mark.parametrize("field", ["q_lora_rank", "kv_lora_rank", "qk_rope_head_dim"])
def test_an_mla_draft_under_a_config_class_without_mla_fields_needs_them_written(tmp_path, model_type, field):
    # LlamaConfig, Qwen3Config, GemmaConfig (transformers 5.19.0) neither define nor default them:
    # ModelConfig reads the dims as attributes (configs/model_config.py:1392, 1398-1401) and the layer
    # all five (models/kimi_k25_eagle3.py:95-99): AttributeError at startup.
    def edit(config):
        config["model_type"] = model_type
        config.pop(field)

    report = sglang(mla(tmp_path / "d", config_edit=edit))
    assert errors(report) == Counter({"CFG003": 1}) and report.errors[0].detail["field"] == field
    assert f"{field} is absent" in report.errors[0].message
    # DeepseekV3Config (kimi_k2 too) fills each.
    assert sglang(mla(tmp_path / "k", config_edit=lambda c: c.pop(field))).errors[0].detail.get("field") != field


def test_an_mla_draft_under_a_llama_config_takes_llamas_layer_count(tmp_path):
    # LlamaConfig's num_hidden_layers = 32 (transformers 5.19.0); the draft raises for it (kimi_k25_eagle3.py:243-244).
    draft = mla(tmp_path / "d", config_edit=lambda c: (c.update(model_type="llama"), c.pop("num_hidden_layers")))
    report = sglang(draft)
    assert set(errors(report)) == {"CFG003", "INV001"}  # and 31 of the 32 layers never written
    assert "num_hidden_layers = 32" in next(f.message for f in report.errors if f.code == "CFG003")


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3", "gemma"])
def test_a_gqa_draft_under_another_config_class_that_keeps_its_fields_loads_on_sglang(tmp_path, model_type):
    # SGLang's own loader fills every parameter of these drafts under each of
    # these config classes (utils/hf_transformers/config.py:336-380@sglang==0.5.23
    # builds the class; nothing on the load path reads model_type).
    assert sglang(llama(tmp_path / "e", edit=lambda c: c.update(model_type=model_type))).passed(strict=True)
    assert sglang(gqa(tmp_path / "g", edit=lambda c: c.update(model_type=model_type))).passed(strict=True)


def test_a_gqa_draft_under_deepseek_v2_config_is_not_servable_as_it_is(tmp_path):
    # DeepseekV2Config drops head_dim, and SGLang's own loader then fails on
    # the q/k/v weights (a shape error at load).
    assert "SRV001" in errors(sglang(llama(tmp_path / "e", edit=lambda c: c.update(model_type="deepseek_v2"))))


def test_a_shard_the_index_does_not_name_is_served_wrong_not_refused_on_sglang(tmp_path):
    # SGLang reads only the files the index names (model_loader/
    # weight_utils.py:757-808@sglang==0.5.23) and never checks that every
    # parameter was loaded (model_loader/loader.py:1028-1066): SGLang's own
    # loader starts on this draft with the stray file's parameters unloaded.
    from safetensors.torch import load_file, save_file

    draft = llama(tmp_path / "d")
    tensors = load_file(draft / "model.safetensors")
    (draft / "model.safetensors").unlink()
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[:3]}, draft / "model-1.safetensors")
    save_file({n: tensors[n] for n in names[3:]}, draft / "model-2.safetensors")
    (draft / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: "model-1.safetensors" for n in names[:3]}}))
    report = sglang(draft)
    assert "IDX004" in errors(report)
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"


def test_a_null_nested_tap_list_hides_the_top_level_one_on_sglang(tmp_path):
    # parse_dflash_draft_config takes dflash_config's key when it is there,
    # null included (speculative/dflash_utils.py:657-659@sglang==0.5.23);
    # the draft then derives its taps over its own 2 layers and raises
    # (models/dflash.py:749-758; dflash_utils.py:373-379), as SGLang's own
    # DFlashDraftModel does on this draft.
    def edit(config):
        config["target_layer_ids"] = config["dflash_config"]["target_layer_ids"]
        config["dflash_config"]["target_layer_ids"] = None
        config["dflash_config"].pop("num_target_layers", None)
        config.pop("num_target_layers", None)

    report = sglang(gqa(tmp_path / "d", edit=edit))
    assert errors(report)["CFG003"] == 1
    assert "below 4" in next(f for f in report.findings if f.code == "CFG003").message

    def deep(config):
        edit(config)
        config["dflash_config"]["num_target_layers"] = 12

    assert "CFG003" not in errors(sglang(gqa(tmp_path / "e", edit=deep)))


def test_a_markov_head_name_the_dspark_head_lacks_is_refused_on_sglang(tmp_path):
    # DSparkDraftModel.load_weights raises ValueError for a markov_head.*
    # name its head has no parameter for (models/dspark.py:646-656@
    # sglang==0.5.23; SGLang's own loader on this draft), while the DFlash
    # loader drops it: the same name on a DFlash draft is served wrong.
    import torch

    extra = lambda t: t.update({"markov_head.extra.weight": torch.zeros(4, dtype=torch.bfloat16)})  # noqa: E731
    report = sglang(gqa(tmp_path / "d", variant="dspark", tensor_edit=extra))
    assert report.engine_verdicts()[0]["outcome"] == "refused"
    assert errors(report)["INV002"] == 1
    as_dflash = sglang(gqa(tmp_path / "f", variant="dspark", tensor_edit=extra,
                           edit=lambda c: c.update(architectures=["DFlashDraftModel"])))
    assert as_dflash.engine_verdicts()[0]["outcome"] == "served_wrong"


# Convert for SGLang --------------------------------------------------------------


def test_convert_for_sglang_writes_the_tap_list_where_its_target_reads_it(tmp_path):
    # TorchSpec writes the Llama list at the top level, which SGLang's target
    # never reads (spec_aux_hidden_state.py:185-196): converting for SGLang
    # writes it under eagle_config too, and the output then passes there and
    # on TokenSpeed alike.
    from dspark.converters.convert import ConvertOptions, convert_checkpoint

    source = write_eagle3_draft(tmp_path / "src", tap_ids=TRAINED)
    assert not sglang(source).passed()
    out = tmp_path / "out"
    convert_checkpoint(source, out, ConvertOptions(engine="sglang"))
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == TRAINED
    assert config["eagle_aux_hidden_state_layer_ids"] == TRAINED
    assert sglang(out).passed(strict=True)
    assert check_checkpoint(out, engine="tokenspeed").passed()


def test_a_dflash_draft_without_taps_gets_the_derived_ones(tmp_path):
    # No list: one tap per draft layer over [1, N-3] (dflash_utils.py:348-385;
    # models/dflash.py:749-776), N the declared num_target_layers (the
    # draft's own layer count without one, which raises below 4: see
    # test_a_null_nested_tap_list_hides_the_top_level_one_on_sglang);
    # TokenSpeed derives none and refuses it.
    def edit(config):
        config["dflash_config"].pop("target_layer_ids")
        config["dflash_config"]["num_target_layers"] = 12

    import torch

    draft = gqa(tmp_path / "d", edit=edit,
                tensor_edit=lambda t: t.update({"fc.weight": torch.zeros(40, 2 * 40, dtype=torch.bfloat16)}))
    report = sglang(draft)
    assert report.passed(strict=True)
    assert "TAP003" in [f.code for f in report.findings]
    assert "CFG005" in errors(check_checkpoint(draft, engine="tokenspeed"))


def test_a_kimi_k3_target_cannot_host_an_eagle3_draft(tmp_path):
    # Kimi-K3 has no set_eagle3_layers_to_capture: the engine stops
    # (attention_backend_setup.py:51-61); TokenSpeed serves it, one-based.
    k3 = target(tmp_path / "k3", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
                                   "text_config": {"model_type": "kimi_k3", "hidden_size": 32, "vocab_size": 96,
                                                   "num_hidden_layers": 12}})
    report = sglang(llama(tmp_path / "d"), target=k3)
    assert errors(report) == Counter({"TGT007": 1})
    assert "set_eagle3_layers_to_capture" in report.errors[0].message
    assert "TGT007" not in errors(check_checkpoint(tmp_path / "d", engine="tokenspeed", target=k3))


def test_a_llama_target_hosts_an_eagle3_draft(tmp_path):
    llama_target = target(tmp_path / "t", {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                           "hidden_size": 32, "vocab_size": 96, "num_hidden_layers": 12})
    assert sglang(llama(tmp_path / "d"), target=llama_target).passed(strict=True)


def test_an_eagle3_llama_draft_of_two_layers_is_built_with_both(tmp_path):
    # LlamaForCausalLMEagle3 builds num_hidden_layers layers, layer 0 reading
    # [embedding, hidden] and the rest the hidden state alone
    # (llama_eagle3.py:46-86, 198-204); TokenSpeed refuses more than one
    # (models/llama_eagle3.py@f4d8ec6e:612-613).
    two = lambda c: c.update(num_hidden_layers=2)  # noqa: E731
    report = sglang(edit_config(llama(tmp_path / "a"), two))
    assert errors(report)["INV001"] > 0  # layer 1 served uninitialised
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"
    # the fabricator ships layers.1.* for a two-layer config
    draft = llama(tmp_path / "b", edit=two)
    assert sglang(draft).passed(strict=True)
    assert "CFG003" in errors(check_checkpoint(draft, engine="tokenspeed"))


def test_a_gated_markov_head_needs_its_gate(tmp_path):
    # GatedMarkovHead adds gate_proj (models/dspark.py:310-315): a draft
    # without it is served an untrained gate. TokenSpeed builds vanilla only.
    import torch

    gated = lambda c: c.update(markov_head_type="gated")  # noqa: E731
    report = sglang(gqa(tmp_path / "a", variant="dspark", edit=gated))
    assert errors(report) == Counter({"INV001": 2})
    rank, hidden = 6, 40

    def gate(t):
        t["markov_head.gate_proj.weight"] = torch.zeros(rank, hidden + rank, dtype=torch.bfloat16)
        t["markov_head.gate_proj.bias"] = torch.zeros(rank, dtype=torch.bfloat16)

    assert sglang(gqa(tmp_path / "b", variant="dspark", edit=gated, tensor_edit=gate)).passed(strict=True)


def test_torchspecs_vllm_export_of_a_kimi_k2_draft_is_served_the_defaults(tmp_path):
    # The export nulls eagle_config and writes the (+1) list at the top level
    # (tools/convert_to_hf.py@6f21829:146-159): SGLang's MLA draft counts it
    # (kimi_k25_eagle3.py:48-59) but its target reads eagle_config's only and
    # captures its defaults (spec_aux_hidden_state.py:185-196): not one layer
    # late (no SRV001), the layers it was trained on (the list 1 lower) only
    # on the one target depth whose defaults they are. Converting for SGLang
    # writes them where its target reads them.
    from dspark.converters.convert import ConvertOptions, convert_checkpoint

    def vllm_kimi(config):
        config.update(model_type="kimi_k2", _torchspec_version="0.1.0", eagle_config=None,
                      eagle_aux_hidden_state_layer_ids=[2, 6, 10])

    source = write_eagle3_draft(tmp_path / "vllm", scale="tiny-mla", layout="layers.0", config_edit=vllm_kimi)
    report = sglang(source)
    assert not errors(report) and warnings(report) == Counter({"TAP002": 1})
    assert "[1, 5, 9]" in report.warnings[0].message and "13-layer target" in report.warnings[0].message
    out = tmp_path / "served"
    convert_checkpoint(source, out, ConvertOptions(engine="sglang"))
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 5, 9]
    assert sglang(out).passed(strict=True)


def test_a_folder_holding_only_a_pt_state_dict_is_read(tmp_path):
    # *.safetensors, else *.bin, else *.pt (model_loader/loader.py:480-548);
    # TokenSpeed never reads a .pt (SRV001).
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    draft = llama(tmp_path / "d")
    tensors = load_file(draft / "model.safetensors")
    (draft / "model.safetensors").unlink()
    torch.save(tensors, draft / "pytorch_model.pt")
    assert sglang(draft).passed()
    assert "SRV001" in errors(check_checkpoint(draft, engine="tokenspeed"))


def test_a_deepseek_target_takes_ids_not_starting_at_1_as_they_are(tmp_path):
    # DeepseekV2ForCausalLM adds 1 only when the first id is 1, else captures
    # the ids as they are (models/deepseek_v2.py:3458-3473): [2, 6, 10] on an
    # 11-layer target captures the residual entering layers 2, 6 and 10,
    # which exist; TokenSpeed adds 1 and never reaches layer 11.
    kimi = target(tmp_path / "t", {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
                                   "hidden_size": 32, "num_hidden_layers": 11, "vocab_size": 96})
    draft = mla(tmp_path / "d", tap_ids=[2, 6, 10])
    report = sglang(draft, target=kimi)
    assert "TGT005" not in errors(report)
    assert report.resolved.tap_layers == [1, 5, 9]
    # ...one layer below the layers a list in eagle_config names as its
    # trainer numbers them (id k: the output of layer k): served wrong
    assert errors(report) == Counter({"TAP006": 1})
    assert "TGT005" in errors(check_checkpoint(draft, engine="tokenspeed", target=kimi))


def test_the_fabricator_writes_sglangs_tap_layout(tmp_path):
    # engine="sglang": the list also under eagle_config, where SGLang's
    # target reads it (spec_aux_hidden_state.py:185-196).
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=TRAINED, engine="sglang")
    config = json.loads((draft / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == TRAINED
    assert sglang(draft).passed(strict=True)
    assert check_checkpoint(draft, engine="tokenspeed").passed()


def test_the_fabricate_command_writes_sglangs_tap_layout(tmp_path, capsys):
    from dspark.examples.fabricate import main

    main([str(tmp_path / "d"), "--family", "eagle3_mla", "--engine", "sglang"])
    assert sglang(tmp_path / "d").passed(strict=True)
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "e"), "--family", "eagle3_llama", "--engine", "sglang@9"])
    assert stop.value.code == 2 and "sglang@9" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_torchspecs_dflash_tap_count_in_num_target_layers_is_refused_and_converted(tmp_path):
    # TorchSpec writes num_target_layers as the number of taps
    # (torchspec/config/dflash_draft_config.json@6f21829:13); SGLang reads it
    # as the target's depth and refuses the ids past it (models/dflash.py:766-776).
    # Converting for SGLang writes the target's depth there.
    from dspark.converters.convert import ConvertOptions, convert_checkpoint

    def torchspec(config):
        config["num_target_layers"] = 3  # three taps [1, 4, 7] of a 10-layer target

    source = gqa(tmp_path / "src", edit=torchspec)
    assert errors(sglang(source)) == Counter({"CFG003": 1})
    assert check_checkpoint(source, engine="tokenspeed").passed()
    out = tmp_path / "out"
    convert_checkpoint(source, out, ConvertOptions(engine="sglang"))
    assert json.loads((out / "config.json").read_text())["num_target_layers"] == 10
    assert sglang(out).passed(strict=True)


def test_a_target_vocabulary_padded_otherwise_is_still_attached(tmp_path):
    # set_embed swaps the whole parameter for the target's
    # (models/llama.py:910-918): no shape to refuse; TokenSpeed rebuilds the
    # draft's at its own padded size and refuses the target's
    # (models/llama_eagle3.py@f4d8ec6e:727-751).
    wider = target(tmp_path / "t", {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                    "hidden_size": 32, "vocab_size": 160, "num_hidden_layers": 12})
    draft = llama(tmp_path / "d")
    report = sglang(draft, target=wider)
    assert not errors(report) and warnings(report)["TGT004"] == 1
    assert "TGT004" in errors(check_checkpoint(draft, engine="tokenspeed", target=wider))


@pytest.mark.parametrize("edit, code", [
    pytest.param(lambda c: c.update(layer_types=["sliding_attention", "full_attention"]), "SWA001", id="no-window"),
    pytest.param(lambda c: c.update(layer_types=["full_attention"]), "CFG003", id="one-type-short"),
])
def test_sliding_layers_need_a_window_sglang_can_read(tmp_path, edit, code):
    # a Qwen3 config keeps sliding_window only with use_sliding_window, and a
    # sliding layer without one stops the engine (dflash_utils.py:400-417;
    # models/dflash.py:166-191)
    assert code in errors(sglang(gqa(tmp_path / "d", edit=edit)))


def test_a_sliding_layer_with_its_window_loads(tmp_path):
    def edit(config):
        config.update(layer_types=["sliding_attention", "full_attention"], sliding_window=512, use_sliding_window=True)

    assert sglang(gqa(tmp_path / "d", edit=edit)).passed(strict=True)


def test_taps_out_of_order_are_served_wrong_and_repeated_ones_refused(tmp_path):
    # the target captures in layer order (models/qwen3.py:524-533): an
    # unsorted list feeds fc's blocks other layers; a repeated id is captured
    # once, so fc gets fewer features and the first request fails
    # (models/dflash.py:821-833).
    unsorted = sglang(gqa(tmp_path / "a", edit=lambda c: c["dflash_config"].update(target_layer_ids=[4, 1, 7])))
    assert unsorted.engine_verdicts()[0]["outcome"] == "served_wrong"
    repeated = sglang(gqa(tmp_path / "b", edit=lambda c: c["dflash_config"].update(target_layer_ids=[1, 4, 4])))
    assert repeated.engine_verdicts()[0]["outcome"] == "refused"


def test_a_missing_fc_norm_weight_is_served_as_initialised(tmp_path):
    # fc_norm.2 never loaded keeps its initial ones (no check after load:
    # model_loader/loader.py:1028-1066)
    report = sglang(llama(tmp_path / "d", fc_norm=True, tensor_edit=lambda t: t.pop("fc_norm.2.weight")))
    assert errors(report)["FCN003"] == 1
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"


def test_attention_bias_is_not_built_for_the_first_layers_qkv(tmp_path):
    # qkv_proj rebuilt with bias=False (llama_eagle3.py:66-75)
    report = sglang(llama(tmp_path / "d", edit=lambda c: c.update(attention_bias=True)))
    assert errors(report) == Counter({"ENG001": 1})
    assert report.engine_verdicts()[0]["outcome"] == "served_wrong"


def test_input_norm_spans_the_taps_at_target_hidden_size(tmp_path):
    # input_norm is RMSNorm(target_hidden_size x taps) (llama_eagle3.py:151-182)
    import torch

    hidden, wide = 32, 48

    def tensors(t):
        t["fc.weight"] = torch.zeros(hidden, 3 * wide, dtype=torch.bfloat16)
        t["input_norm.weight"] = torch.ones(3 * wide, dtype=torch.bfloat16)

    draft = llama(tmp_path / "d", norm_before_fc=True, edit=lambda c: c.update(target_hidden_size=wide),
                  tensor_edit=tensors)
    assert sglang(draft).passed()


def test_a_markov_head_type_declared_only_in_dflash_config_is_built_vanilla(tmp_path):
    # dspark_config.py@0.5.23:194-212 reads the nested type; build_markov_head reads the top level only
    # (models/dspark.py::build_markov_head@0.5.23:385-405), vanilla when absent
    import json as _json

    from dspark.examples.fabricate import fabricate

    draft = fabricate(tmp_path / "d", family="dflash_gqa", variant="dspark", engine="sglang")
    config = _json.loads((draft / "config.json").read_text())
    config.pop("markov_head_type")
    config["dflash_config"]["markov_head_type"] = "gated"
    (draft / "config.json").write_text(_json.dumps(config))
    report = check_checkpoint(draft, engine="sglang@0.5.23")
    [finding] = [f for f in report.errors if f.code == "ENG001"]
    assert "builds a vanilla head" in finding.message and not report.passed()
    config["dflash_config"]["markov_head_type"] = "vanilla"  # the same head either way
    (draft / "config.json").write_text(_json.dumps(config))
    assert "ENG001" not in {f.code for f in check_checkpoint(draft, engine="sglang@0.5.23").errors}


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
def test_a_muse_glimmer_target_captures_a_dflash_draft_one_layer_early_but_not_a_dflash2_one(tmp_path, version):
    # Muse Glimmer captures the stream entering layer k for an id k
    # (models/muse_glimmer.py::MuseGlimmerModel.forward:420-423); the runner
    # maps only DFlash2 (and Muse assistant) ids up by one first
    # (spec_aux_hidden_state.py::_map_muse_target_layer_ids:22-29).
    from dspark.examples.fabricate import fabricate

    config = {"model_type": "muse_glimmer", "hidden_size": 40, "num_hidden_layers": 12, "vocab_size": 96}
    muse = target(tmp_path / "muse", {"architectures": ["MuseGlimmerForCausalLM"], **config})
    qwen3 = target(tmp_path / "qwen3", {"architectures": ["Qwen3ForCausalLM"], **config, "model_type": "qwen3"})
    engine = f"sglang@{version}"
    dflash = fabricate(tmp_path / "dflash", family="dflash_gqa", engine="sglang")
    assert check_checkpoint(dflash, engine=engine, target=qwen3).passed()
    early = check_checkpoint(dflash, engine=engine, target=muse)
    assert errors(early) == Counter({"TAP006": 1}) and early.resolved.tap_layers == [0, 3, 6]
    dflash2 = fabricate(tmp_path / "dflash2", family="dflash2", engine="sglang")
    served = check_checkpoint(dflash2, engine=engine, target=muse)
    assert served.passed() and served.resolved.tap_layers == [1, 4, 7]
