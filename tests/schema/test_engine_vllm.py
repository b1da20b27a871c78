"""vLLM 0.33.0's verdict on real drafts (safetensors written by the
safetensors library): pass, refused at load, or served wrong. Each case
cites the line of the released wheel that decides it
(`vllm/<path>:<lines>@vllm==0.33.0`); where TokenSpeed decides otherwise the
case asserts both, so the two profiles cannot drift into each other."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, fabricate, make_tensors, tensor_shapes, write_safetensors
from dspark.examples.fabricate_eagle3 import (EAGLE3_QWEN3_DEFECTS, EAGLE3_SCALES, eagle3_target_config,
                                              write_eagle3_draft)
from dspark.schema.engines import engine_by_spec, engine_specs
from dspark.schema.errors import UsageError
from dspark.schema.findings import Severity
from draft_edits import without_qualname


torch = pytest.importorskip("torch")

VLLM = "vllm"
TINY = SCALES["tiny"]


def errors(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.ERROR)


def warnings(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.WARNING)


def message(report, code: str) -> str:
    [finding] = [f for f in report.findings if f.code == code and f.severity is not Severity.INFO]
    return finding.message


def edit_config(folder: Path, change) -> Path:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_k3(folder: Path, *, config_edit=None, tensor_edit=None, prefix: str = "", fc_norm: bool = False) -> Path:
    """A K3 DSpark draft in vLLM's layout: names as the model's, no prefix;
    its confidence head (8 wide here) training-only."""
    config = draft_config(TINY, fc_norm=fc_norm)
    config["enable_confidence_head"] = False
    tensors = make_tensors(tensor_shapes(TINY, fc_norm=fc_norm), dtype="bfloat16", seed=0)
    if config_edit:
        config_edit(config)
    if tensor_edit:
        tensor_edit(tensors)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder, {prefix + name: t for name, t in tensors.items()})
    return folder


# The profile --------------------------------------------------------------------------


def test_vllm_alone_is_the_released_0_33_0_and_other_revisions_are_refused():
    profile = engine_by_spec("vllm")
    assert profile.spec == "vllm@0.33.0"
    assert engine_by_spec("vllm@0.33.0") is profile
    assert set(profile.loaders) == {"k3_dspark", "dflash_gqa", "dflash2", "eagle3_llama", "eagle3_mla", "eagle3_qwen3",
                                    "peagle_llama", "peagle_qwen3"}
    with pytest.raises(UsageError):
        engine_by_spec("vllm@0.34.0")
    assert [p.name for p in engine_specs("tokenspeed,vllm")] == ["tokenspeed", "vllm"]


def test_every_vllm_rule_cites_the_released_wheel():
    profile = engine_by_spec("vllm")
    for loader in profile.loaders.values():
        for source in [*loader.sources.values(), loader.taps.source, loader.taps.numbering.source]:
            assert source.commit == "vllm==0.33.0"
            assert source.path.startswith("vllm/")
            assert source.cite().endswith(f"@vllm==0.33.0:{source.lines}")


# EAGLE-3 Llama --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["midlayer", "layers.0"])
def test_torchspecs_native_and_vllm_export_names_both_load(tmp_path, layout):
    # llama_eagle3.py:290-299: the mapper turns midlayer. into layers.0.; layers.0. is the model's own name.
    draft = write_eagle3_draft(tmp_path / "d", layout=layout)
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)


def test_a_model_prefix_is_refused_by_vllm(tmp_path):
    # llama_eagle3.py:443-444 prepends model. again (model.model.*), and
    # AutoWeightsLoader raises on a name without destination (utils.py:425-448).
    draft = write_eagle3_draft(tmp_path / "d",
                               tensor_edit=lambda t: t.update({"model." + k: t.pop(k) for k in list(t)}))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"SRV001": 1})
    assert "model.fc.weight" in message(report, "SRV001")


def test_d2t_at_the_targets_vocabulary_is_refused_by_vllm_and_read_by_tokenspeed(tmp_path):
    # llama_eagle3.py:338-345: draft_id_to_target_id exists only when draft_vocab_size differs from the
    # target's vocabulary; a shipped d2t then has no destination (utils.py:425-448).
    def full_vocab(config):
        config["draft_vocab_size"] = config["vocab_size"]

    def zero_map(tensors):
        tensors["d2t"] = torch.zeros(96, dtype=torch.int64)

    draft = write_eagle3_draft(tmp_path / "d", config_edit=full_vocab, tensor_edit=zero_map)
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV002": 1})
    assert "no destination for it" in message(report, "INV002")
    assert check_checkpoint(draft, engine="tokenspeed").passed()


def test_a_float32_d2t_is_cast_by_vllm_and_fails_tokenspeed_and_sglang(tmp_path):
    # llama_eagle3.py:340-343, 428-429 and deepseek_eagle3.py:309-312, 378-379: d2t is copied into an
    # int64 parameter (model_loader/weight_utils.py:1529-1543, `param.data.copy_`), exact for F32
    # integers. TokenSpeed adds it to an arange as stored (models/llama_eagle3.py@f4d8ec6e:691-695) and
    # SGLang indexes the head with it: a float table is VOC002 there.
    def float_map(tensors):
        tensors["d2t"] = tensors["d2t"].to(torch.float32)

    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=float_map)
    assert check_checkpoint(draft, engine=VLLM).passed()
    assert errors(check_checkpoint(draft, engine="tokenspeed"))["VOC002"] == 1
    assert errors(check_checkpoint(draft, engine="sglang"))["VOC002"] == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_float_d2t_with_a_fraction_is_truncated_by_vllm_and_fails(tmp_path, dtype):
    # The default loader's `param.data.copy_` into the int64 parameter (model_loader/weight_utils.py:1529-1543;
    # llama_eagle3.py:338-345, 424-429) truncates toward zero: 3.7 is served as 3, another target token.
    def fractional(tensors):
        table = tensors["d2t"].to(getattr(torch, dtype))
        table[7] += 0.7
        table[30] -= 0.5
        tensors["d2t"] = table

    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=fractional)
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"VOC002": 1})
    [finding] = [f for f in report.findings if f.code == "VOC002"]
    assert finding.detail["entry"] == 7 and finding.detail["non_integer_entries"] == 2
    assert finding.detail["served_as"] == int(finding.detail["value"])
    assert "entry 7 is" in finding.message and "truncating each entry toward zero" in finding.message
    assert "2 of the 40 entries the head can produce are not integers" in finding.message


def test_a_float_d2t_is_judged_only_on_the_entries_the_head_can_produce(tmp_path):
    # The head has 40 rows: an entry past them is never looked up, whatever it holds (a longer table warns).
    def longer(tensors):
        tensors["d2t"] = torch.cat([tensors["d2t"].to(torch.float32), torch.tensor([0.5, float("nan")])])

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tensor_edit=longer), engine=VLLM)
    assert report.passed() and warnings(report) == Counter({"VOC002": 1})

    def not_a_number(tensors):
        table = tensors["d2t"].to(torch.float32)
        table[0] = float("nan")
        tensors["d2t"] = table

    report = check_checkpoint(write_eagle3_draft(tmp_path / "n", tensor_edit=not_a_number), engine=VLLM)
    assert errors(report) == Counter({"VOC002": 1})
    assert "not a finite number" in message(report, "VOC002")
    assert report.findings and json.dumps([f.detail for f in report.findings], allow_nan=False)


@pytest.mark.parametrize("dtype, vocab_past_exact", [("float16", 2049), ("bfloat16", 257)])
def test_a_half_precision_d2t_is_exact_only_for_a_vocabulary_it_holds(tmp_path, dtype, vocab_past_exact):
    # F16 holds every integer only to 2048, BF16 to 256: vLLM copies a table of
    # them exactly at the tiny 96-token vocabulary, but the offsets of a larger
    # one may have been rounded when it was stored, which no reader can undo.
    def half_map(tensors):
        tensors["d2t"] = tensors["d2t"].to(getattr(torch, dtype))

    small = write_eagle3_draft(tmp_path / "s", tensor_edit=half_map)
    assert check_checkpoint(small, engine=VLLM).passed()
    assert errors(check_checkpoint(small, engine="tokenspeed"))["VOC002"] == 1
    large = write_eagle3_draft(tmp_path / "l", config_edit=lambda c: c.update(vocab_size=vocab_past_exact),
                               tensor_edit=half_map)
    report = check_checkpoint(large, engine=VLLM)
    assert errors(report)["VOC002"] == 1
    assert "holds every integer only up to" in message(report, "VOC002")


def test_a_float_d2t_that_cannot_be_read_is_a_warning_saying_so(tmp_path, monkeypatch):
    import dspark.converters.token_map as token_map_module

    def float_map(tensors):
        tensors["d2t"] = tensors["d2t"].to(torch.float32)

    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=float_map)
    monkeypatch.setattr(token_map_module, "READ_CAP_BYTES", 40 * 4 - 1)
    report = check_checkpoint(draft, engine=VLLM)
    assert report.passed() and not report.passed(strict=True)
    assert warnings(report) == Counter({"VOC002": 1})
    assert "could not be read" in message(report, "VOC002")


def test_a_float_d2t_past_the_vocabulary_is_voc003_under_deep(tmp_path):
    # The values as the engine uses them (the int64 copy) are judged by VOC003 too.
    def past(tensors):
        table = tensors["d2t"].to(torch.float32)
        table[39] += 10
        tensors["d2t"] = table

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tensor_edit=past), engine=VLLM, deep=True)
    assert errors(report) == Counter({"VOC003": 1})


def test_reading_a_float_d2t_header_only_never_imports_torch(tmp_path):
    def fractional(tensors):
        table = tensors["d2t"].to(torch.float32)
        table[3] += 0.25
        tensors["d2t"] = table

    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=fractional)
    probe = (
        "import sys\n"
        "from dspark.converters.check import check_checkpoint\n"
        f"report = check_checkpoint({str(draft)!r}, engine='vllm')\n"
        "assert [f.detail.get('entry') for f in report.findings if f.code == 'VOC002'] == [3], report.findings\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_a_float32_d2t_is_cast_by_vllms_mla_loader(tmp_path):
    # deepseek_eagle3.py:309-312, 378-379: the same int64 parameter and copy.
    def float_map(tensors):
        tensors["d2t"] = tensors["d2t"].to(torch.float32)

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tensor_edit=float_map)
    report = check_checkpoint(draft, engine=VLLM)
    assert report.passed(), errors(report)
    assert errors(check_checkpoint(draft, engine="tokenspeed"))["VOC002"] == 1


def test_norm_before_residual_is_served_by_vllm_and_not_by_tokenspeed(tmp_path):
    # llama_eagle3.py:101-104, 110-122: hidden_norm before the residual when norm_before_residual.
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(norm_before_residual=True))
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)
    assert errors(check_checkpoint(draft, engine="tokenspeed")) == Counter({"ENG001": 1})


def test_fc_norm_and_norm_before_fc_are_served(tmp_path):
    # llama_eagle3.py:184-188, 223-240, 405-416
    draft = write_eagle3_draft(tmp_path / "d", fc_norm=True, norm_before_fc=True)
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)


def test_fc_built_for_target_hidden_size_loads_in_vllm_only(tmp_path):
    # llama_eagle3.py:218-250: fc is target_hidden_size x taps wide (TokenSpeed builds hidden_size x taps).
    def wider_target(config):
        config["target_hidden_size"] = 40

    def wide_fc(tensors):
        tensors["fc.weight"] = torch.zeros(32, 3 * 40, dtype=torch.bfloat16).normal_()

    draft = write_eagle3_draft(tmp_path / "d", config_edit=wider_target, tensor_edit=wide_fc)
    assert check_checkpoint(draft, engine=VLLM).passed()
    assert not check_checkpoint(draft, engine="tokenspeed").passed()


def test_a_top_level_list_longer_than_three_leaves_fc_three_taps_wide(tmp_path):
    # llama_eagle3.py:209-216 counts num_aux_hidden_states or eagle_config's list (3 without either);
    # the runner captures the top-level list (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150).
    # (layers.0.* names: a list in vLLM's numbering or not, the names do not say; TAP005 warns.)
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=[1, 4, 7, 10], layout="layers.0")
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"TAP001": 1, "CTX001": 1})
    assert "builds fc for 3 taps" in message(report, "TAP001")
    fixed = write_eagle3_draft(tmp_path / "e", tap_ids=[1, 4, 7, 10], layout="layers.0",
                               config_edit=lambda c: c.update(num_aux_hidden_states=4))
    assert check_checkpoint(fixed, engine=VLLM).passed()


def test_a_list_out_of_order_is_captured_in_layer_order(tmp_path):
    # model_executor/models/interfaces.py:1616-1617: tuple(sorted(set(layers))).
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=[8, 1, 5])
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report)["ENG001"] == 1
    assert "[1, 5, 8] in layer order" in message(report, "ENG001")


def test_an_activation_other_than_silu_is_refused_at_startup(tmp_path):
    # model_executor/models/llama.py:112-115 raises "Unsupported activation" (TokenSpeed serves it as silu).
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(hidden_act="gelu"))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"CFG003": 1})
    assert "Unsupported activation" in message(report, "CFG003")


def test_a_bias_without_attention_bias_is_dropped_without_a_word(tmp_path):
    # utils.py:457-458: AutoWeightsLoader ignores unexpected ".bias" names instead of raising.
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=lambda t: t.update(
        {"midlayer.self_attn.q_proj.bias": torch.zeros(40, dtype=torch.bfloat16)}))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV002": 1})
    assert "drops it without a word" in message(report, "INV002")


# EAGLE-3 MLA ------------------------------------------------------------------------------


def test_a_list_only_in_eagle_config_is_not_read_by_the_default_runner(tmp_path):
    # eagle3_utils.py:113-150 (Model Runner V2, config/vllm.py:730-767) never reads
    # eagle_config.eagle_aux_hidden_state_layer_ids: the target captures (2, N//2, N-3).
    # (a list that is no target's defaults: tests/schema/test_vllm_unread_taps.py has those)
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tap_ids=[1, 5, 7])
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"TAP002": 1})
    assert "never eagle_config's list" in message(report, "TAP002")
    assert check_checkpoint(draft, engine="tokenspeed").passed()


def test_norm_before_fc_has_no_input_norm_in_the_mla_draft(tmp_path):
    # deepseek_eagle3.py:152-226 builds no input_norm; the shipped weight has no destination.
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", norm_before_fc=True)
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"ENG001": 1})
    assert "no input_norm" in message(report, "ENG001")


def test_a_null_q_lora_rank_is_refused_by_the_mla_mapper(tmp_path):
    # deepseek_eagle3.py:259-266 stacks kv_a_proj_with_mqa into fused_qkv_a_proj, which a layer
    # without q_lora_rank does not build (deepseek_v2.py:1051-1097).
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=lambda c: c.update(q_lora_rank=None))
    report = check_checkpoint(draft, engine=VLLM)
    assert any("fused_qkv_a_proj" in f.message for f in report.findings if f.code == "CFG003")


# K3 DSpark -----------------------------------------------------------------------------------


def test_a_k3_draft_in_vllms_layout_loads(tmp_path):
    # dspark_mla.py:437-452: names as the model's; embed_tokens and lm_head dropped (the target's).
    assert check_checkpoint(write_k3(tmp_path / "d"), engine=VLLM).passed(strict=True)


def test_a_k3_model_prefix_is_refused_by_vllm_and_stripped_by_tokenspeed(tmp_path):
    # dspark_mla.py:445 puts every stored name under model. as it is.
    draft = write_k3(tmp_path / "d", prefix="model.")
    assert errors(check_checkpoint(draft, engine=VLLM)) == Counter({"SRV001": 1})
    assert check_checkpoint(draft, engine="tokenspeed").passed(strict=True)


def test_k3_fc_norm_is_refused(tmp_path):
    # dspark_mla.py:134-208 builds no fc_norm; fc_norm.* has no destination (utils.py:425-448).
    draft = write_k3(tmp_path / "d", fc_norm=True)
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"ENG001": 1})
    assert check_checkpoint(draft, engine="tokenspeed").passed(strict=True)


def test_k3_attn_res_draft_is_served_the_prefix_stream(tmp_path):
    # kimi_k3/nvidia/model.py:1068-1106: the stream follows VLLM_KIMI_K3_AUX_ATTN_RES_STREAM, not the draft.
    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.update(aux_hidden_stream="attn_res"))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"ENG001": 1})
    assert "captures only prefix" in message(report, "ENG001")


def test_k3_without_architectures_is_refused(tmp_path):
    # registry.py:1426-1427 "No model architectures are specified"; K3DSparkConfig fills none.
    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.pop("architectures"))
    assert errors(check_checkpoint(draft, engine=VLLM)) == Counter({"ENG002": 1})
    assert check_checkpoint(draft, engine="tokenspeed").passed(strict=True)


def test_k3_missing_a_norm_fails_but_a_missing_projection_loads_uninitialised(tmp_path):
    # default_loader.py:525-572 checks what dspark_mla.py:530-534 returns, but counts every parameter of a
    # layer with a quant method as loaded: norms and markov_w1 are checked, linear weights are not.
    no_norm = write_k3(tmp_path / "a", tensor_edit=lambda t: t.pop("final_norm.weight"))
    assert "the serving loader fails" in message(check_checkpoint(no_norm, engine=VLLM), "INV001")
    no_proj = write_k3(tmp_path / "b", tensor_edit=lambda t: t.pop("layers.0.mlp.down_proj.weight"))
    assert "uninitialised" in message(check_checkpoint(no_proj, engine=VLLM), "INV001")


def test_k3_confidence_head_is_loaded_when_enabled(tmp_path):
    # dspark_mla.py:194-205, 459-464: with enable_confidence_head the head is built ([1, hidden_size]) and
    # loaded; TokenSpeed skips it as training-only.
    def wrong_width(tensors):
        tensors["confidence_head.proj.weight"] = torch.zeros(1, 8, dtype=torch.bfloat16).normal_()

    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.update(enable_confidence_head=True),
                     tensor_edit=wrong_width)
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV003": 1})
    assert "confidence_head.proj.weight" in message(report, "INV003")
    assert check_checkpoint(draft, engine="tokenspeed").passed(strict=True)
    # the fabricator's head is the width the config implies
    fixed = write_k3(tmp_path / "e", config_edit=lambda c: c.update(enable_confidence_head=True))
    assert check_checkpoint(fixed, engine=VLLM).passed(strict=True)


def test_k3_config_class_refusals(tmp_path):
    # transformers_utils/configs/k3_dspark.py:44-68
    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.update(mla_use_qk_norm=True, draft_vocab_size=40))
    report = check_checkpoint(draft, engine=VLLM)
    texts = [f.message for f in report.findings if f.code == "CFG003"]
    assert any("mla_use_qk_norm" in t for t in texts) and any("draft_vocab_size" in t for t in texts)


# GQA DFlash / Qwen3 DSpark ------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["dflash", "dspark"])
def test_gqa_drafts_load(tmp_path, variant):
    # qwen3_dflash.py:851-892; DSparkDraftModel + qwen3 -> Qwen3DSparkModel (speculative.py:1535-1542).
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="", variant=variant)
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)


def test_gqa_fc_norm_weights_are_refused(tmp_path):
    # qwen3_dflash.py:412-495 builds no fc_norm.
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="", defect="fc-norm-shipped")
    assert errors(check_checkpoint(draft, engine=VLLM)) == Counter({"ENG001": 1})


def test_gqa_fc_for_the_target_width_loads_in_vllm_only(tmp_path):
    # qwen3_dflash.py:84-93: fc is (target_hidden_size or hidden_size) x taps wide.
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="", defect="fc-target-width")
    assert check_checkpoint(draft, engine=VLLM).passed()
    assert errors(check_checkpoint(draft, engine="tokenspeed")) == Counter({"CTX001": 1})


def test_dspark_draft_model_needs_model_type_qwen3(tmp_path):
    # speculative.py:1535-1566: any other model_type makes it a DeepSeek-V4 DSpark stage.
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", prefix="", variant="dspark"),
                        lambda c: c.update(model_type="llama"))
    report = check_checkpoint(draft, engine=VLLM)
    assert any("DeepSeek-V4" in f.message for f in report.findings if f.code == "CFG003")


def test_dflash_sample_from_anchor_is_refused(tmp_path):
    # v1/worker/gpu/spec_decode/dflash/speculator.py:79-88
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", prefix=""),
                        lambda c: c["dflash_config"].update(sample_from_anchor=True))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"CFG003": 1})
    assert check_checkpoint(draft, engine="tokenspeed").passed()


def test_vllms_other_names_for_the_eagle3_class_are_recognised(tmp_path):
    # registry.py:698-704: Eagle3LlamaForCausalLM and LlamaForCausalLMEagle3 are one class.
    draft = edit_config(write_eagle3_draft(tmp_path / "d"),
                        lambda c: c.update(architectures=["Eagle3LlamaForCausalLM"]))
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)
    assert errors(check_checkpoint(draft, engine="tokenspeed"))["ENG002"] == 1


def test_a_dflash_draft_without_taps_gets_fc_for_num_hidden_layers(tmp_path):
    # qwen3_dflash.py:84-93: no list -> num_hidden_layers taps; the target captures its 3 defaults
    # (model_executor/models/interfaces.py:1751-1770).
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", prefix=""),
                        lambda c: c["dflash_config"].pop("target_layer_ids"))
    report = check_checkpoint(draft, engine=VLLM)
    layers = json.loads((draft / "config.json").read_text())["num_hidden_layers"]
    assert f"builds fc for {layers} taps" in message(report, "TAP001")


def test_the_drafts_own_head_is_served_whenever_it_ships_one(tmp_path):
    # v1/worker/gpu/spec_decode/eagle/utils.py:107-119: the target's head replaces the draft's only when
    # the draft ships none (or an identical one); TokenSpeed replaces it when draft_vocab_size is null.
    def no_draft_vocab(config):
        config["draft_vocab_size"] = None
        config["vocab_size"] = 40

    draft = write_eagle3_draft(tmp_path / "d", config_edit=no_draft_vocab, tensor_edit=lambda t: t.update(
        {"lm_head.weight": torch.zeros(40, 32, dtype=torch.bfloat16).normal_()}))
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)
    assert warnings(check_checkpoint(draft, engine="tokenspeed"))["LMH001"] == 1


def test_qwen3_dspark_model_is_the_dense_dspark_draft(tmp_path):
    # registry.py:681 maps Qwen3DSparkModel to Qwen3DSparkForCausalLM (Markov head), the name speculators writes.
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", prefix="", variant="dspark"),
                        lambda c: c.update(architectures=["Qwen3DSparkModel"]))
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)


# TorchSpec's --vllm export and `dspark convert --engine vllm` ---------------------------------


def _torchspec_vllm_kimi_export(tmp_path: Path) -> Path:
    # tools/convert_to_hf.py@6f21829:128-160 renames midlayer. to layers.0. and adds 1 to kimi_k2 tap ids.
    def vllm_kimi(config):
        config.update(model_type="kimi_k2", _torchspec_version="0.1.0", eagle_config=None,
                      eagle_aux_hidden_state_layer_ids=[2, 6, 10])

    return write_eagle3_draft(tmp_path / "vllm", scale="tiny-mla", layout="layers.0", config_edit=vllm_kimi)


def test_torchspecs_vllm_export_is_served_as_it_is_by_vllm(tmp_path):
    # The runner captures the top-level list as hidden_states ids (eagle3_utils.py:113-150;
    # deepseek_v2.py:1546-1587): the export's +1 is vLLM's numbering. TokenSpeed reads layer ids.
    source = _torchspec_vllm_kimi_export(tmp_path)
    report = check_checkpoint(source, engine=VLLM)
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings]
    assert report.resolved.to_dict()["target_layer_ids"] == [2, 6, 10]
    assert [f.code for f in check_checkpoint(source).errors] == ["SRV001"]


def test_convert_for_vllm_keeps_the_exported_taps(tmp_path):
    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions

    out = tmp_path / "served"
    convert_checkpoint(_torchspec_vllm_kimi_export(tmp_path), out, ConvertOptions(engine=VLLM))
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 6, 10]
    assert check_checkpoint(out, engine=VLLM, deep=True).passed(strict=True)


def test_convert_for_vllm_leaves_d2t_behind_at_the_targets_vocabulary(tmp_path):
    # llama_eagle3.py:338-345: no draft_id_to_target_id at a full vocabulary; a shipped d2t fails the load.
    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions
    from safetensors import safe_open

    def full_vocab(config):
        config["draft_vocab_size"] = config["vocab_size"]

    source = write_eagle3_draft(tmp_path / "src", config_edit=full_vocab,
                                tensor_edit=lambda t: t.update({"d2t": torch.zeros(96, dtype=torch.int64)}))
    out = tmp_path / "out"
    convert_checkpoint(source, out, ConvertOptions(engine=VLLM))
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        assert "d2t" not in set(handle.keys())
    assert check_checkpoint(out, engine=VLLM).passed(strict=True)


# Against the target ------------------------------------------------------------------------------


def _target(tmp_path: Path, architecture: str, model_type: str, layers: int = 12, hidden: int = 32,
            vocab: int = 96) -> Path:
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"architectures": [architecture], "model_type": model_type, "hidden_size": hidden,
                                "num_hidden_layers": layers, "vocab_size": vocab}))
    return path


def test_a_qwen3_target_captures_in_vllm(tmp_path):
    # qwen2.py:422-434 (Qwen3Model subclasses it, qwen3.py:269) captures; TokenSpeed's Qwen3 forward returns none.
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=[2, 6, 9], layout="layers.0")
    target = _target(tmp_path, "Qwen3ForCausalLM", "qwen3")
    assert check_checkpoint(draft, engine=VLLM, target=target).passed()
    assert errors(check_checkpoint(draft, target=target)) == Counter({"TGT006": 1})


def test_llama_target_ids_run_from_the_embeddings_to_the_last_layer(tmp_path):
    # models/llama.py:427-441: id 0 before the first layer, id idx+1 after layer idx, so 0..N.
    target = _target(tmp_path, "LlamaForCausalLM", "llama")
    assert check_checkpoint(write_eagle3_draft(tmp_path / "a", tap_ids=[0, 6, 12], layout="layers.0"), engine=VLLM,
                            target=target).passed()
    report = check_checkpoint(write_eagle3_draft(tmp_path / "b", tap_ids=[2, 6, 13], layout="layers.0"),
                              engine=VLLM, target=target)
    assert errors(report) == Counter({"TGT005": 1})


def test_a_deepseek_target_cannot_capture_id_0(tmp_path):
    # deepseek_v2.py:1525-1568: the residual is None before layer 0, and hidden_states + residual raises.
    def top_level(config):
        config["eagle_aux_hidden_state_layer_ids"] = [0, 5, 8]

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=top_level, layout="layers.0")
    report = check_checkpoint(draft, engine=VLLM, target=_target(tmp_path, "DeepseekV3ForCausalLM", "deepseek_v3"))
    assert errors(report) == Counter({"TGT005": 1})


# speculators-format EAGLE-3 folders ----------------------------------------------------------------


def write_speculators_eagle3(folder: Path, *, taps=(2, 4, 5), scale: str = "tiny-llama", defect: str | None = None,
                             **top_level) -> Path:
    """speculators' save_pretrained layout: the layer's config under
    transformer_layer_config, layers.0.* names (src/speculators/models/eagle3/config.py@c05b95b:27-81)."""
    flat = json.loads((write_eagle3_draft(folder, layout="layers.0", tap_ids=list(taps), scale=scale, defect=defect)
                       / "config.json").read_text())
    layer = {k: flat[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                  "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "hidden_act",
                                  "tie_word_embeddings", "rope_theta", "max_position_embeddings", "model_type")}
    config = {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
        "transformer_layer_config": layer, "draft_vocab_size": flat["draft_vocab_size"],
        "eagle_aux_hidden_state_layer_ids": list(taps), "torch_dtype": "bfloat16",
        # save_pretrained writes every field of the config class (its default false)
        "norm_before_residual": False,
        "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"speculative_tokens": 3}],
                               "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}},
        **top_level,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_speculators_folder_is_served_as_it_is_with_its_own_numbering(tmp_path):
    # transformers_utils/config.py:360-366 parses it as SpeculatorsConfig; speculators/algos.py:15-50 keeps the
    # ids as written (vLLM numbers taps as speculators does); norm_before_residual as written (on when absent:
    # tests/converters/test_trainer_inputs.py).
    draft = write_speculators_eagle3(tmp_path / "d")
    report = check_checkpoint(draft, engine=VLLM)
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings]
    assert report.resolved.to_dict()["target_layer_ids"] == [2, 4, 5]
    assert errors(check_checkpoint(draft)) == Counter({"SRV001": 1})


def test_convert_for_vllm_writes_what_vllm_reads_from_a_speculators_folder(tmp_path):
    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions

    out = tmp_path / "out"
    convert_checkpoint(write_speculators_eagle3(tmp_path / "d"), out, ConvertOptions(engine=VLLM))
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert config["norm_before_residual"] is False  # as written (speculators/algos.py:33-35 reads it so)
    assert check_checkpoint(out, engine=VLLM).passed(strict=True)


def test_norm_before_fc_is_read_from_eagle_config_first(tmp_path):
    # llama_eagle3.py:184-188: eagle_config.get("norm_before_fc", top-level); the input_norm is then built.
    def nested(config):
        config.pop("norm_before_fc", None)
        config["eagle_config"] = {"norm_before_fc": True}

    draft = write_eagle3_draft(tmp_path / "d", config_edit=nested, tensor_edit=lambda t: t.update(
        {"input_norm.weight": torch.ones(3 * 32, dtype=torch.bfloat16)}))
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)
    assert errors(check_checkpoint(draft, engine="tokenspeed"))["FEA002"] == 1


def test_the_fabricator_writes_the_names_vllm_loads(tmp_path):
    # dspark_mla.py:445: vLLM strips no model. prefix; the fabricator's K3 default keeps TokenSpeed's.
    draft = fabricate(tmp_path / "d", family="k3_dspark", fc_norm=False, engine=VLLM)
    # Names as vLLM loads them, the confidence head included (loaded when enable_confidence_head,
    # dspark_mla.py:459-464, at the width the config implies): the good draft passes.
    assert errors(check_checkpoint(draft, engine=VLLM)) == Counter()
    assert errors(check_checkpoint(fabricate(tmp_path / "t", family="k3_dspark", fc_norm=False),
                                   engine=VLLM))["SRV001"] == 1


def test_a_pruned_vocabulary_without_its_head_gets_the_targets_full_head(tmp_path):
    # v1/worker/gpu/spec_decode/eagle/utils.py:107-119 attaches the target's head when the draft ships none;
    # llama_eagle3.py:335-337, 385-395 read it as draft_vocab_size logits scattered through d2t.
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=lambda t: t.pop("lm_head.weight"))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV001": 1})
    assert "attaches the target's 96-row head" in message(report, "INV001")


def test_a_torchspec_native_list_is_one_layer_early_on_vllm(tmp_path):
    # TorchSpec's midlayer.* export writes layer outputs; vLLM reads the top-level list as hidden_states
    # indices (models/llama.py:427-441), one layer earlier.
    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tap_ids=[2, 6, 9]), engine=VLLM)
    assert errors(report) == Counter({"TAP006": 1})
    assert "captures the outputs of layers 1, 5, 8" in message(report, "TAP006")


def test_a_dflash_tap_past_the_last_layer_is_never_captured(tmp_path):
    # eagle3_utils.py:121-124 adds 1 to target_layer_ids; models/llama.py:427-441 captures ids 0..N only.
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="")
    layers = json.loads((draft / "config.json").read_text())["dflash_config"]["target_layer_ids"]
    edit_config(draft, lambda c: c["dflash_config"].update(target_layer_ids=layers[:-1] + [12]))
    target = _target(tmp_path, "LlamaForCausalLM", "llama", hidden=40, vocab=96)
    assert errors(check_checkpoint(draft, engine=VLLM, target=target))["TGT005"] == 1
    edit_config(draft, lambda c: c["dflash_config"].update(target_layer_ids=layers[:-1] + [11]))
    assert "TGT005" not in errors(check_checkpoint(draft, engine=VLLM, target=target))


def test_vllm_must_be_told_the_method_for_a_k3_draft(tmp_path):
    # config/speculative.py:1433-1509 infers dspark from the path or Qwen3DSparkModel, never from K3DSparkModel.
    report = check_checkpoint(write_k3(tmp_path / "d"), engine=VLLM)
    assert any('"method": "dspark"' in f.message for f in report.findings if f.code == "ENG004")
    dspark = check_checkpoint(fabricate(tmp_path / "g", family="dflash_gqa", prefix="", variant="dspark"), engine=VLLM)
    assert "ENG004" not in {f.code for f in dspark.findings}


# Found by a differential run against vLLM 0.33.0's own config and model code --------------------------


def test_gqa_layer_types_of_the_wrong_length_are_refused_by_vllms_config_loader(tmp_path):
    # vllm/transformers_utils/config.py:340-420 parses through transformers' config class, whose validation
    # refuses len(layer_types) != num_hidden_layers (configuration_utils.py:694-709@transformers==5.20.2).
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="", defect="layer-types-length")
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"CFG003": 1})
    assert "layer_types lists 1 layers" in message(report, "CFG003")


def test_gqa_sliding_layer_without_a_window_is_refused_by_vllm(tmp_path):
    # qwen3_dflash.py:96-157: dflash_config.swa_window_size, else sliding_window (nulled by Qwen3Config
    # unless use_sliding_window), else ValueError at build.
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="", defect="sliding-no-window")
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"CFG003": 1})
    assert "qwen3_dflash.py@vllm==0.33.0:96-157" in without_qualname(message(report, "CFG003"))
    windowed = edit_config(draft, lambda c: c["dflash_config"].update(swa_window_size=64))
    assert check_checkpoint(windowed, engine=VLLM).passed()


def test_a_two_layer_mla_eagle3_draft_without_its_second_layer_is_served_wrong(tmp_path):
    # deepseek_eagle3.py:172-182 builds num_hidden_layers layers; load_weights returns None (370-398),
    # so the second layer, never shipped, is served uninitialised.
    draft = fabricate(tmp_path / "d", family="eagle3_mla", prefix="", defect="two-layers")
    report = check_checkpoint(draft, engine=VLLM)
    assert set(errors(report)) == {"INV001"}
    assert "layers.1.self_attn.q_a_proj.weight" in {f.detail.get("tensor") for f in report.findings} | {
        m for f in report.findings for m in [f.message.split(" ")[0]]}


# EAGLE-3 with a Qwen3 layer (qwen3_eagle3.py) ------------------------------------------------


def test_a_good_qwen3_layer_draft_loads(tmp_path):
    # registry.py:705-706 -> Eagle3Qwen3ForCausalLM; load_weights (qwen3_eagle3.py:398-446) maps midlayer. and
    # stacks q/k/v as the Llama class does, and loads q_norm/k_norm into RMSNorm(head_dim) (qwen3.py:153-154).
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3")
    report = check_checkpoint(draft, engine=VLLM)
    assert report.family == "eagle3_qwen3" and report.resolved.architecture == "Eagle3Qwen3ForCausalLM"
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings]
    for options in ({"fc_norm": True}, {"norm_before_fc": True}):
        assert check_checkpoint(write_eagle3_draft(tmp_path / str(options), scale="tiny-qwen3", **options),
                                engine=VLLM).passed(strict=True)


def test_a_qwen3_layer_draft_without_q_norm_and_k_norm_is_served_with_ones(tmp_path):
    # load_weights returns None (qwen3_eagle3.py:398-446): the default loader never compares what was loaded
    # (default_loader.py:503-523), so the norms keep the ones they were built with (layers/layernorm.py:65-67).
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3", defect="no-qk-norm")
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV001": 2})
    missing = {f.tensor for f in report.findings if f.code == "INV001"}
    assert missing == {"midlayer.self_attn.q_norm.weight", "midlayer.self_attn.k_norm.weight"}
    assert all("uninitialised" in f.message for f in report.findings if f.code == "INV001")


def test_a_q_norm_of_the_wrong_width_is_refused(tmp_path):
    # default_weight_loader asserts the shapes agree (model_loader/weight_utils.py:1538-1541): q_norm is head_dim
    # (10 here: neither hidden_size // heads nor the Qwen3 config's default 128) wide.
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3", defect="qk-norm-shape")
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV003": 1})
    assert "midlayer.self_attn.q_norm.weight" in message(report, "INV003")


@pytest.mark.parametrize("defect", sorted(EAGLE3_QWEN3_DEFECTS))
def test_each_qwen3_layer_defect_gets_its_code_under_vllm(tmp_path, defect):
    spec = EAGLE3_QWEN3_DEFECTS[defect]
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3", defect=defect, **dict(spec.needs))
    target = None
    if spec.target:  # judged against the target (TGT005); without it, TGT009 from the count the config states
        target = tmp_path / "target.json"
        target.write_text(json.dumps(eagle3_target_config(EAGLE3_SCALES["tiny-qwen3"], model="qwen3")))
    report = check_checkpoint(draft, engine=VLLM, deep=spec.deep, target=target)
    assert spec.code in errors(report), [(f.code, f.message) for f in report.findings]


def test_a_qwen3_config_without_head_dim_has_128_wide_heads(tmp_path):
    # qwen3.py:100, 209: getattr(config, "head_dim", None) or hidden // heads, and transformers' Qwen3Config fills in
    # 128 (configuration_qwen3.py:68 of 5.20.2): a draft sized by hidden // heads is refused.
    def split_heads(config):
        config.pop("head_dim")

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3", config_edit=split_heads)
    report = check_checkpoint(draft, engine=VLLM)
    assert not report.passed() and "INV003" in errors(report)
    assert "head_dim = 128" in message(report, "ENG003")


def test_the_qwen3_layer_counts_the_top_level_list_the_llama_class_does_not(tmp_path):
    # qwen3_eagle3.py:201-210 counts the top-level list; llama_eagle3.py:209-216 only eagle_config's (3 without).
    for scale, family in (("tiny-qwen3", "eagle3_qwen3"), ("tiny-llama", "eagle3_llama")):
        # layers.0.*: the names vLLM and speculators write, whose ids are in vLLM's numbering
        draft = write_eagle3_draft(tmp_path / scale, scale=scale, tap_ids=[2, 5, 8, 10], layout="layers.0")
        report = check_checkpoint(draft, engine=VLLM)
        assert report.family == family
        if family == "eagle3_qwen3":
            # (TAP005, a warning: the names alone do not say which trainer numbered the ids)
            assert report.passed() and not errors(report), [(f.code, f.message) for f in report.findings]
        else:
            # fc built for 3 taps, 4 shipped and 4 captured
            assert errors(report) == Counter({"TAP001": 1, "CTX001": 1})
    # num_aux_layers wins over the list (qwen3_eagle3.py:202-204): fc built for 3 taps, the runner captures 4.
    draft = edit_config(write_eagle3_draft(tmp_path / "n", scale="tiny-qwen3", tap_ids=[2, 5, 8, 10], layout="layers.0"),
                        lambda c: c.update(num_aux_layers=3))
    assert errors(check_checkpoint(draft, engine=VLLM))["TAP001"] == 1


def test_an_o_proj_bias_is_dropped_and_qkv_biases_follow_attention_bias(tmp_path):
    # qwen3.py:115-121 builds o_proj without a bias, even with attention_bias; a shipped one ends in ".bias" and
    # is dropped without a word (utils.py:457-458): served without what it was trained with, as for any dropped
    # bias. qkv bias = attention_bias (qwen3_eagle3.py:68-80).
    def o_bias(tensors):
        tensors["midlayer.self_attn.o_proj.bias"] = torch.zeros(32, dtype=torch.bfloat16)

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3", tensor_edit=o_bias,
                               config_edit=lambda c: c.update(attention_bias=True))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"INV002": 1})
    assert "o_proj.bias" in message(report, "INV002") and "drops it without a word" in message(report, "INV002")
    biased = edit_config(write_eagle3_draft(tmp_path / "b", scale="tiny-qwen3"),
                         lambda c: c.update(attention_bias=True))
    missing = {f.tensor for f in check_checkpoint(biased, engine=VLLM).findings if f.code == "INV001"}
    assert missing == {f"midlayer.self_attn.{p}_proj.bias" for p in "qkv"}


@pytest.mark.parametrize("engine", ["tokenspeed", "sglang"])
def test_a_qwen3_layer_draft_is_refused_where_no_class_is_registered(tmp_path, engine):
    # TokenSpeed registers only LlamaForCausalLMEagle3 for GQA layers and raises for an unregistered
    # architecture (models/registry.py@f4d8ec6e:44-57, 75-86); SGLang's Transformers fallback finds no such class
    # and raises (model_loader/utils.py:111-168@sglang==0.5.23). Neither builds q_norm/k_norm.
    from dspark.schema.engines.sglang import eagle3_qwen3 as sglang_qwen3
    from dspark.schema.engines.tokenspeed import eagle3_qwen3 as tokenspeed_qwen3

    assert engine_by_spec(engine).loader_for("eagle3_qwen3") is None
    assert sglang_qwen3.NOT_SERVED.cite().startswith(
        "sglang/srt/model_loader/utils.py::resolve_transformers_arch@sglang==0.5.23")
    assert without_qualname(tokenspeed_qwen3.NOT_SERVED.cite()).startswith("python/tokenspeed/runtime/models/registry.py@f4d8ec6e")
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3")
    report = check_checkpoint(draft, engine=engine)
    assert errors(report) == Counter({"ENG006": 1})
    assert "does not serve eagle3_qwen3" in message(report, "ENG006")


@pytest.mark.parametrize("engine", ["tokenspeed", "sglang"])
def test_convert_for_an_engine_without_the_qwen3_class_says_so_and_writes_nothing(tmp_path, engine):
    # No model_type to pin for a family the engine does not serve: the re-check's ENG006 is the answer.
    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions
    from dspark.schema.errors import CheckpointError

    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match="does not serve eagle3_qwen3"):
        convert_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-qwen3"), out, ConvertOptions(engine=engine))
    assert not out.exists()


def test_a_speculators_folder_with_a_qwen3_layer_is_served_as_eagle3_qwen3(tmp_path):
    # transformers_utils/configs/speculators/algos.py:38-46: a qwen3 layer becomes Eagle3Qwen3ForCausalLM.
    draft = write_speculators_eagle3(tmp_path / "d", scale="tiny-qwen3")
    report = check_checkpoint(draft, engine=VLLM)
    assert report.family == "eagle3_qwen3" and report.passed(strict=True), [(f.code, f.message) for f in report.findings]
    assert report.resolved.to_dict()["target_layer_ids"] == [2, 4, 5]
    for engine in ("tokenspeed", "sglang"):
        assert errors(check_checkpoint(draft, engine=engine)) == Counter({"SRV001": 1, "ENG006": 1})


def test_a_speculators_qwen3_layer_over_llama_weights_is_served_wrong(tmp_path):
    # The layer says qwen3, the weights have no q_norm/k_norm: vLLM builds them and serves them as ones.
    # Judged as the Llama class it passed before.
    draft = write_speculators_eagle3(tmp_path / "d")
    config = json.loads((draft / "config.json").read_text())
    config["transformer_layer_config"]["model_type"] = "qwen3"
    (draft / "config.json").write_text(json.dumps(config))
    report = check_checkpoint(draft, engine=VLLM)
    assert report.family == "eagle3_qwen3" and errors(report) == Counter({"INV001": 2})


def test_convert_for_vllm_keeps_a_speculators_qwen3_layer_a_qwen3_draft(tmp_path):
    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions

    out = tmp_path / "out"
    convert_checkpoint(write_speculators_eagle3(tmp_path / "d", scale="tiny-qwen3"), out, ConvertOptions(engine=VLLM))
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Eagle3Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert check_checkpoint(out, engine=VLLM).passed(strict=True)


def test_a_dflash_tap_minus_one_is_the_embeddings_in_vllm_and_refused_elsewhere(tmp_path):
    # v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:121-124 adds 1 to dflash_config.target_layer_ids, so -1
    # becomes 0, which models/llama.py:428-431 (interfaces.py:1640-1650) captures before the first layer:
    # the embeddings. TokenSpeed's and SGLang's capture setters refuse ids below 0 (their tap_low).
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="")
    layers = json.loads((draft / "config.json").read_text())["dflash_config"]["target_layer_ids"]
    edit_config(draft, lambda c: c["dflash_config"].update(target_layer_ids=[-1] + layers[1:]))
    assert check_checkpoint(draft, engine=VLLM).passed()
    target = _target(tmp_path, "LlamaForCausalLM", "llama", hidden=40, vocab=96)
    assert check_checkpoint(draft, engine=VLLM, target=target).passed()
    for other in ("tokenspeed", "sglang"):
        report = check_checkpoint(draft, engine=other)
        assert errors(report)["CFG003"] == 1
        assert "below 0" in message(report, "CFG003")
    edit_config(draft, lambda c: c["dflash_config"].update(target_layer_ids=[-2] + layers[1:]))
    assert errors(check_checkpoint(draft, engine=VLLM))["CFG003"] == 1


def test_a_chunked_attention_layer_is_served_as_full_attention_by_vllm(tmp_path):
    # qwen3_dflash.py:59-73, 96-157: only "sliding_attention" gets a window and causal masking; any other
    # layer type is built as full attention without a word: served wrong (ENG001), not a schema violation.
    # TokenSpeed (models/dflash.py@f4d8ec6e:572-592) and SGLang (models/dflash.py:166-191) raise on it.
    draft = fabricate(tmp_path / "d", family="dflash_gqa", prefix="")
    layers = json.loads((draft / "config.json").read_text())["num_hidden_layers"]
    edit_config(draft, lambda c: c.update(layer_types=["chunked_attention"] * layers))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"ENG001": 1})
    assert "full attention" in message(report, "ENG001")
    for other in ("tokenspeed", "sglang"):
        assert errors(check_checkpoint(draft, engine=other)) == Counter({"CFG003": 1})


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_null_text_config_is_no_text_config_to_vllm(tmp_path, scale):
    # The draft's ModelConfig runs get_hf_text_config (config/model.py:680-693); transformers 5.20's
    # get_text_config passes over a None attribute and returns the config itself, so the check at
    # transformers_utils/config.py:1258-1272 is not made and the draft loads. TokenSpeed and SGLang test
    # hasattr(config, "text_config") and refuse None (utils/hf_transformers_utils.py@f4d8ec6e:138-143;
    # sglang/srt/utils/hf_transformers/common.py:600-604@sglang==0.5.23).
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=lambda c: c.update(text_config=None))
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)
    for other in ("tokenspeed", "sglang"):
        assert "CFG011" in errors(check_checkpoint(draft, engine=other))


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize("text_config", [{"num_attention_heads": 4}, {}, "text"])
def test_a_text_config_kept_as_a_plain_value_is_refused_by_vllms_config_loader(tmp_path, scale, text_config):
    # A llama / deepseek_v3 / kimi_k2 config class keeps the key as given; get_text_config returns it
    # and get_hf_text_config raises ValueError for want of num_attention_heads on it (a dict has no
    # attributes), at the draft's ModelConfig, before any EAGLEConfig wrapping (config/speculative.py:
    # 1406-1430, 1514-1533). A differential run that built the model from the parsed config without
    # ModelConfig saw these load; vLLM itself stops at startup.
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=lambda c: c.update(text_config=text_config))
    report = check_checkpoint(draft, engine=VLLM)
    assert errors(report) == Counter({"CFG011": 1})
    assert "vllm/config/model.py:680-693" in message(report, "CFG011")


def _llama_typed_mla(tmp_path: Path, name: str, *drop: str) -> Path:
    def edit(config):
        config["model_type"] = "llama"
        for field in drop:
            config.pop(field)

    return write_eagle3_draft(tmp_path / name, scale="tiny-mla", config_edit=edit)


def test_an_mla_draft_typed_llama_is_built_from_its_mla_fields_by_vllm(tmp_path):
    # The registry picks Eagle3DeepseekV2ForCausalLM from `architectures` (registry.py:1420-1470); LlamaConfig
    # keeps kv_lora_rank & co. as attributes (transformers 5.20) and the MLA layer reads them off it
    # (deepseek_eagle3.py:57-83): served as trained. TokenSpeed parses it too but its loader reads
    # n_routed_experts, which LlamaConfig lacks (tests/schema/test_eagle3_contract.py).
    draft = _llama_typed_mla(tmp_path, "d")
    assert check_checkpoint(draft, engine=VLLM).passed(strict=True)
    assert errors(check_checkpoint(draft, engine="tokenspeed")) == Counter({"CFG003": 1})


def test_an_mla_draft_typed_llama_without_an_mla_field_is_refused_by_vllm(tmp_path):
    # No LlamaConfig default: getattr(config, "kv_lora_rank", 0) builds zero-width projections
    # (deepseek_eagle3.py:63-66), and q_lora_rank is None without the attribute (74), where
    # DeepseekV3Config would have filled 512 and 1536.
    report = check_checkpoint(_llama_typed_mla(tmp_path, "kv", "kv_lora_rank"), engine=VLLM)
    assert errors(report) == Counter({"CFG003": 1})
    assert "kv_lora_rank is absent" in message(report, "CFG003")
    report = check_checkpoint(_llama_typed_mla(tmp_path, "q", "q_lora_rank"), engine=VLLM)
    assert errors(report) == Counter({"CFG003": 1})
    assert "q_lora_rank is absent" in message(report, "CFG003") and "fused_qkv_a_proj" in message(report, "CFG003")
    report = check_checkpoint(_llama_typed_mla(tmp_path, "n", "num_hidden_layers"), engine=VLLM)
    assert set(errors(report)) == {"INV001"}  # LlamaConfig's 32 layers, 31 of them never written
    assert "num_hidden_layers = 32" in message(report, "ENG003")


def test_a_k3_draft_without_tokenspeed_s_target_layer_count_loads_on_vllm(tmp_path):
    # Neither K3DSparkConfig (transformers_utils/configs/k3_dspark.py) nor the model reads
    # target_num_hidden_layers: its absence is no schema error there; TokenSpeed assumes 93.
    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.pop("target_num_hidden_layers"))
    assert "CFG003" not in errors(check_checkpoint(draft, engine=VLLM))
    assert check_checkpoint(draft, engine="tokenspeed@0.1.1").passed()


def test_a_dflash_fc_built_for_another_target_width_fails_on_that_target(tmp_path):
    # qwen3_dflash.py:90-92: fc takes each tap at target_hidden_size (else hidden_size); a target of
    # another hidden_size hands it narrower taps, and the first request fails on fc's width.
    from dspark.examples.fabricate import fabricate, target_config

    draft = fabricate(tmp_path / "d", family="dflash_gqa", defect="fc-target-width")
    target = tmp_path / "target.json"
    target.write_text(json.dumps(target_config("dflash_gqa", "tiny")))
    report = check_checkpoint(draft, engine=VLLM, target=target)
    assert "TGT002" in errors(report) and "target_hidden_size = 48" in message(report, "TGT002")


def test_srv001_names_a_convert_that_works_or_says_what_blocks_it(tmp_path):
    import shlex

    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions

    # vLLM builds no fc_norm: no convert makes this draft servable there
    blocked = check_checkpoint(write_k3(tmp_path / "fc", prefix="model.", fc_norm=True), engine=VLLM)
    [srv] = [f for f in blocked.findings if f.code == "SRV001"]
    assert srv.detail["convert_refuses"] == ["ENG001"] and "Run:" not in srv.message
    # a layout convert can fix: the command names the engine it writes for, and it works
    fixable = check_checkpoint(write_k3(tmp_path / "plain", prefix="model."), engine=VLLM)
    [srv] = [f for f in fixable.findings if f.code == "SRV001"]
    assert "Run: dspark convert" in srv.message and "--engine vllm@0.33.0" in srv.detail["command"]
    args = shlex.split(srv.detail["command"])
    convert_checkpoint(args[2], args[3], ConvertOptions(engine=args[args.index("--engine") + 1]))
    assert check_checkpoint(args[3], engine=VLLM).passed()


def test_an_mla_eagle3_draft_typed_deepseek_v3_is_refused_by_vllm(tmp_path):
    # config/speculative.py:749-763 turns model_type deepseek_v3 into deepseek_mtp, [DeepSeekMTPModel],
    # which the eagle3 rename makes Eagle3DeepSeekMTPModel: not registered, refused at startup.
    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", engine=VLLM,
                               config_edit=lambda c: c.update(model_type="deepseek_v3"))
    report = check_checkpoint(draft, engine=VLLM)
    assert "SRV001" in errors(report) and "'deepseek_v3'" in message(report, "SRV001")
    assert check_checkpoint(draft, engine="tokenspeed").passed()


def test_a_dspark_draft_shipping_its_confidence_head_loads_on_vllm(tmp_path):
    # qwen3_dspark.py:219-231, 366-368: the head is loaded when enable_confidence_head and dropped otherwise;
    # speculators and SpecForge DSpark drafts ship it
    import torch

    from dspark.examples.fabricate import fabricate
    from safetensors.torch import load_file, save_file

    draft = fabricate(tmp_path / "d", family="dflash_gqa", variant="dspark", engine=VLLM)
    tensors = load_file(str(draft / "model.safetensors"))
    hidden = json.loads((draft / "config.json").read_text())["hidden_size"]
    tensors["confidence_head.proj.weight"] = torch.zeros(1, hidden, dtype=torch.bfloat16).normal_()
    tensors["confidence_head.proj.bias"] = torch.zeros(1, dtype=torch.bfloat16)
    save_file(tensors, str(draft / "model.safetensors"), metadata={"format": "pt"})
    assert "INV002" not in errors(check_checkpoint(draft, engine=VLLM))
