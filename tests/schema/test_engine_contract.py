"""Verdicts the serving engine would give, one class of disagreement at a
time. Each case is a real checkpoint (safetensors written by the
safetensors library) and asserts what TokenSpeed's loader does with it; the
citation beside each case is the code that decides it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors
from dspark.schema.engines import engine_by_spec
from dspark.schema.errors import UsageError
from dspark.schema.findings import Severity
from draft_edits import without_qualname


TINY = SCALES["tiny"]


def write_k3(folder: Path, *, config_edit=None, tensor_edit=None, prefix: str = "", fc_norm: bool = True) -> Path:
    config = draft_config(TINY, fc_norm=fc_norm)
    tensors = make_tensors(tensor_shapes(TINY, fc_norm=fc_norm), dtype="bfloat16", seed=0)
    if config_edit:
        config_edit(config)
    if tensor_edit:
        tensor_edit(tensors)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder, {prefix + name: t for name, t in tensors.items()})
    return folder


def errors(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.ERROR)


def warnings(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.WARNING)


# 1. Served layout against training output ----------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("draft_model.", id="draft_model"),
        pytest.param("model.model.", id="model-model"),
        pytest.param("_orig_mod.", id="compiled"),
    ],
)
def test_wrapper_prefixes_the_engine_does_not_strip_are_not_servable(tmp_path, prefix):
    # kimi_k3_dspark.py@4b9766f6:503 strips one leading "model." and nothing else.
    draft = write_k3(tmp_path / "d", prefix=prefix)
    report = check_checkpoint(draft)
    assert errors(report) == Counter({"SRV001": 1})
    [layout] = report.errors
    assert f"dspark convert {draft} {draft}-served" in layout.message
    assert report.verdicts() == {"served": False, "contents": True}
    contents = check_checkpoint(draft, verdict="contents")
    assert contents.passed(strict=True)
    assert [f.severity for f in contents.findings if f.code == "SRV001"] == [Severity.INFO]


def test_one_model_prefix_is_servable(tmp_path):
    assert check_checkpoint(write_k3(tmp_path / "d", prefix="model.")).passed(strict=True)


def test_a_folder_holding_only_a_pt_state_dict_is_not_servable(tmp_path):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(draft_config(TINY)))
    torch.save(make_tensors(tensor_shapes(TINY), dtype="bfloat16", seed=0), folder / "pytorch_model.pt")
    report = check_checkpoint(folder)
    # model_loader/loader.py@f4d8ec6e:258-318: *.safetensors, else *.bin; never .pt
    assert errors(report) == Counter({"SRV001": 1})
    assert "never reads" in report.errors[0].message
    assert check_checkpoint(folder, verdict="contents").passed(strict=True)


# 2. Names the engine resolves itself ----------------------------------------


def test_rotary_inv_freq_is_skipped_by_the_loader(tmp_path):
    def add(tensors):
        tensors["layers.0.self_attn.rotary_emb.inv_freq"] = tensors["context_norm.weight"].clone()

    report = check_checkpoint(write_k3(tmp_path / "d", tensor_edit=add))
    assert report.passed(strict=True)
    assert "layers.0.self_attn.rotary_emb.inv_freq" in {f.tensor for f in report.findings if f.code == "INV005"}


def _fuse(tensors, parts, fused):
    import torch

    for n in range(TINY.num_hidden_layers):
        stacked = [tensors.pop(p.format(n=n)) for p in parts]
        tensors[fused.format(n=n)] = torch.cat(stacked, dim=0)


def test_pre_fused_stacked_parameters_load(tmp_path):
    def fuse(tensors):
        _fuse(tensors, ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
              "layers.{n}.mlp.gate_up_proj.weight")
        _fuse(tensors, ("layers.{n}.self_attn.q_a_proj.weight", "layers.{n}.self_attn.kv_a_proj_with_mqa.weight"),
              "layers.{n}.self_attn.fused_qkv_a_proj_with_mqa.weight")

    assert check_checkpoint(write_k3(tmp_path / "d", tensor_edit=fuse)).passed(strict=True)


def test_a_pre_fused_parameter_of_the_wrong_height_is_refused(tmp_path):
    import torch

    def fuse(tensors):
        _fuse(tensors, ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
              "layers.{n}.mlp.gate_up_proj.weight")
        tensors["layers.0.mlp.gate_up_proj.weight"] = torch.zeros(3, TINY.hidden_size, dtype=torch.bfloat16)

    report = check_checkpoint(write_k3(tmp_path / "d", tensor_edit=fuse))
    assert [(f.code, f.tensor) for f in report.errors] == [("INV003", "layers.0.mlp.gate_up_proj.weight")]


def test_half_of_a_fused_parameter_is_missing_and_the_engine_would_not_notice(tmp_path):
    def drop(tensors):
        del tensors["layers.1.mlp.up_proj.weight"]

    report = check_checkpoint(write_k3(tmp_path / "d", tensor_edit=drop))
    [missing] = report.errors
    assert (missing.code, missing.tensor) == ("INV001", "layers.1.mlp.up_proj.weight")
    assert "uninitialised without an error" in missing.message


# 3. Architecture resolution ---------------------------------------------------


def test_the_first_registered_architecture_wins(tmp_path):
    def order(config):
        config["architectures"] = ["DSparkDraftModel", "K3DSparkModel"]

    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=order))
    # registry.py@f4d8ec6e:75-86: served as the GQA DSpark model
    assert report.family == "dflash_gqa"
    assert report.resolved.architecture == "DSparkDraftModel"
    assert "ENG002" in errors(report)
    assert not report.passed()


def test_absent_architectures_default_to_the_k3_model(tmp_path):
    def drop(config):
        config.pop("architectures")

    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=drop))
    assert report.passed(strict=True) and report.resolved.architecture == "K3DSparkModel"


def test_an_unregistered_first_entry_is_rewritten_and_skipped(tmp_path):
    def names(config):
        config["architectures"] = ["Qwen3ForCausalLM", "K3DSparkModel"]  # -> Qwen3ForCausalLMNextN

    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=names))
    assert report.passed(strict=True)


def test_an_unknown_family_is_a_usage_error_not_a_broken_checkpoint(tmp_path):
    def llama(config):
        config.update(model_type="llama", architectures=["LlamaForCausalLM"])

    # a verdict, not a usage error: a gate must fail what dspark cannot vouch for (ENG007, exit 1)
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=llama))
    assert [f.code for f in report.errors] == ["ENG007"]
    assert "does not model this draft family" in report.errors[0].message and "k3_dspark" in report.errors[0].message
    assert not report.passed()


# 4. Values the engine coerces or ignores -------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"hidden_size": str(TINY.hidden_size)}, id="integer-string"),
        pytest.param({"markov_head_type": "VANILLA"}, id="markov-case"),
    ],
)
def test_coerced_values_load_with_a_warning(tmp_path, edit):
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(edit)))
    assert errors(report) == Counter() and warnings(report) == Counter({"ENG003": 1})


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"num_key_value_heads": 0}, id="kv-heads-unused-by-mla"),
        pytest.param({"draft_vocab_size": TINY.vocab_size - 1}, id="draft-vocab-unused"),
    ],
)
def test_fields_the_k3_model_never_reads_do_not_fail_it(tmp_path, edit):
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(edit)))
    assert report.passed()


@pytest.mark.parametrize("value", ["false", 1, "yes"])
def test_a_non_boolean_fc_norm_the_engine_reads_as_on_loads_with_its_weights(tmp_path, value):
    """bool(value) is True: the engine builds fc_norm and loads the shipped
    weights, so the draft is served as trained; the spelling is a warning."""
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(fc_norm=value)))
    assert report.passed(), [f.code for f in report.errors]
    [warning] = [f for f in report.warnings if f.code == "ENG003"]
    assert "not a boolean" in warning.message
    if value == "false":
        assert "turns fc_norm ON" in warning.message
    # convert writes the boolean the engine serves, so every loader agrees
    from dspark.converters.convert import convert_checkpoint

    converted = convert_checkpoint(tmp_path / "d", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["fc_norm"] is True
    assert any(c.startswith("fc_norm: ") for c in converted.plan.config_changes)
    assert check_checkpoint(tmp_path / "out", deep=True).passed(strict=True)


def test_a_string_false_fc_norm_without_weights_is_refused(tmp_path):
    """Read as on, fc_norm needs weights the draft does not ship: the K3
    loader refuses the load."""
    report = check_checkpoint(write_k3(tmp_path / "d", fc_norm=False, config_edit=lambda c: c.update(fc_norm="false")))
    assert "FCN001" in errors(report)


# 5. Stream resolution -----------------------------------------------------------


def test_an_empty_nested_stream_falls_through_to_the_top_level(tmp_path):
    def nested(config):
        config["aux_hidden_stream"] = "attn_res"
        config["dflash_config"] = {"aux_hidden_stream": None}

    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=nested))
    assert report.resolved.stream == "attn_res"
    assert report.passed()


def test_a_null_top_level_stream_is_refused(tmp_path):
    # configs/kimi_k3_dspark_config.py@4b9766f6:113: str(None).lower() == "none"
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(aux_hidden_stream=None)))
    assert "STR001" in errors(report)


def test_main_serves_only_the_prefix_stream_and_no_fc_norm(tmp_path):
    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.update(aux_hidden_stream="attn_res"))
    main = check_checkpoint(draft, engine="tokenspeed@main")
    assert errors(main) == Counter({"ENG001": 2})  # fc_norm and the stream
    assert main.resolved.stream == "prefix"
    assert check_checkpoint(draft, engine="tokenspeed@pr1031").passed()


def test_an_unknown_engine_is_a_usage_error():
    with pytest.raises(UsageError):
        engine_by_spec("vllm@latest")


# 6. Target facts -------------------------------------------------------------------


def _target(folder: Path, **fields) -> Path:
    config = {"model_type": "kimi_k3", "hidden_size": TINY.target_hidden_size,
              "num_hidden_layers": TINY.target_num_hidden_layers, "vocab_size": TINY.vocab_size, **fields}
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_an_absent_attn_res_block_size_takes_the_target_default(tmp_path):
    draft = write_k3(tmp_path / "d", config_edit=lambda c: c.update(aux_hidden_stream="attn_res"))
    assert check_checkpoint(draft, target=_target(tmp_path / "t")).passed(strict=True)
    refused = check_checkpoint(draft, target=_target(tmp_path / "t0", attn_res_block_size=0))
    assert "STR006" in errors(refused)


def test_a_layer_count_mismatch_is_a_warning_and_taps_are_checked_against_the_real_target(tmp_path):
    draft = write_k3(tmp_path / "d")
    deeper = _target(tmp_path / "t", num_hidden_layers=TINY.target_num_hidden_layers + 4)
    report = check_checkpoint(draft, target=deeper, engine="tokenspeed@pr1031")
    assert errors(report) == Counter() and warnings(report) == Counter({"TGT003": 1})
    # 0.1.1 compares the two at startup (validate_k3_dspark_config) and does not start
    [refused] = [f for f in check_checkpoint(draft, target=deeper, engine="tokenspeed@0.1.1").errors]
    assert refused.code == "TGT003" and "refuses to start" in refused.message
    # the last tap (11) is past a 10-layer target: refused at wire time
    report = check_checkpoint(draft, target=_target(tmp_path / "t2", num_hidden_layers=10))
    assert "TGT005" in errors(report)


# 7. Config the engine refuses ------------------------------------------------------


@pytest.mark.parametrize(
    ("rope", "code", "severity"),
    [
        pytest.param({"rope_type": "yarn", "original_max_position_embeddings": 4096}, "ROP001", Severity.ERROR,
                     id="no-factor"),
        pytest.param({"rope_type": "deepseek_yarn", "factor": 32.0}, "ROP001", Severity.ERROR,
                     id="no-original-max"),
        pytest.param({"rope_type": "yarn", "factor": 32.0}, "ROP002", Severity.WARNING,
                     id="original-max-filled-in"),
    ],
)
def test_yarn_without_the_keys_the_rotary_setup_needs(tmp_path, rope, code, severity):
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(rope_parameters=rope)))
    assert [f.severity for f in report.findings if f.code == code] == [severity]


def test_a_nested_value_that_differs_from_the_validated_one_is_an_error(tmp_path):
    def nested(config):
        config["dflash_config"] = {"mask_token_id": config["mask_token_id"] - 1}

    assert "OVR001" in errors(check_checkpoint(write_k3(tmp_path / "d", config_edit=nested)))


# GQA DFlash / DSpark as the engine builds them ---------------------------------------


GQA = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
    "dflash_config": {"target_layer_ids": [1, 11, 22], "mask_token_id": 127},
}


def write_gqa(folder: Path, config: dict, *, edit=None) -> Path:
    import torch

    from dspark.schema.families import DFLASH_GQA

    features = {"markov_head": config["architectures"][0] == "DSparkDraftModel", "fc_norm": False,
                "attention_bias": False}
    expected, _ = DFLASH_GQA.expected_tensors(DFLASH_GQA.resolve_dims(config), features)
    tensors = {name: torch.full(e.shape, 0.5, dtype=torch.bfloat16) for name, e in expected.items()}
    if edit:
        edit(tensors)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder, tensors)
    return folder


def test_a_gqa_draft_that_ships_fc_norm_weights_is_refused_naming_the_engine(tmp_path):
    import torch

    def add(tensors):
        for i in range(3):
            tensors[f"fc_norm.{i}.weight"] = torch.ones(64, dtype=torch.bfloat16)

    report = check_checkpoint(write_gqa(tmp_path / "d", GQA, edit=add))
    [error] = report.errors
    assert error.code == "ENG001" and "tokenspeed@0.1.1" in error.message and "dropped" in error.message


def test_gqa_fc_is_taps_times_the_drafts_own_hidden_size(tmp_path):
    import torch

    def widen(tensors):
        tensors["fc.weight"] = torch.zeros(64, 3 * 80, dtype=torch.bfloat16)

    report = check_checkpoint(write_gqa(tmp_path / "d", dict(GQA, target_hidden_size=80), edit=widen))
    assert [f.code for f in report.errors] == ["CTX001"]


def test_a_dspark_gqa_draft_needs_its_markov_head(tmp_path):
    config = dict(GQA, architectures=["DSparkDraftModel"], markov_rank=8)
    assert check_checkpoint(write_gqa(tmp_path / "ok", config)).passed(strict=True)

    def drop(tensors):
        del tensors["markov_head.markov_w2.weight"]

    report = check_checkpoint(write_gqa(tmp_path / "d", config, edit=drop))
    [missing] = report.errors
    assert missing.tensor == "markov_head.markov_w2.weight" and "uninitialised" in missing.message


def test_torchspecs_model_type_is_not_parsed_by_the_engine(tmp_path):
    report = check_checkpoint(write_gqa(tmp_path / "d", dict(GQA, model_type="dflash")))
    assert errors(report) == Counter({"SRV001": 1})
    assert "model_type 'dflash'" in report.errors[0].message


def test_a_gqa_vocab_size_written_as_text_is_read_as_the_engine_reads_it(tmp_path):
    """The DSpark model int()s vocab_size for its Markov head
    (models/dspark.py@f4d8ec6e:121-127) and nothing else of the draft's
    reads it: "96" loads (ENG003, not CFG003); words do not (CFG003)."""
    report = check_checkpoint(write_gqa(tmp_path / "d", dict(GQA, vocab_size=str(GQA["vocab_size"]))))
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    assert any(f.code == "ENG003" and "vocab_size" in f.message for f in report.warnings)
    words = check_checkpoint(write_gqa(tmp_path / "w", dict(GQA, vocab_size="ninety-six")))
    assert "CFG003" in {f.code for f in words.errors}


def test_gqa_sliding_layers_need_a_window_and_block_size_names_the_launch_flag(tmp_path):
    # pull request 1031's drafter (0.1.1 ties the block size to the steps: tests/schema/test_launch.py)
    config = dict(GQA, layer_types=["sliding_attention", "full_attention"], block_size=16)
    report = check_checkpoint(write_gqa(tmp_path / "d", config), engine="tokenspeed@pr1031")
    assert errors(report) == Counter({"SWA001": 1})
    [launch] = [f for f in report.findings if f.code == "ENG004"]
    assert "--speculative-num-draft-tokens 16 or 17" in launch.message


SLIDING = ["sliding_attention", "full_attention"]


@pytest.mark.parametrize("edit, served", [
    pytest.param({"sliding_window": 64, "use_sliding_window": True}, True, id="window-and-flag"),
    # the loader restores the raw top-level window for a dflash_config draft
    # (utils/hf_transformers_utils.py@f4d8ec6e:234-254)
    pytest.param({"sliding_window": 64}, True, id="window-without-flag"),
    pytest.param({"dflash_config": {"target_layer_ids": [1, 11, 22], "mask_token_id": 127, "use_swa": True,
                                    "swa_window_size": 64}}, True, id="window-in-dflash_config"),
    pytest.param({"dflash_config": {"target_layer_ids": [1, 11, 22], "mask_token_id": 127, "use_swa": False,
                                    "swa_window_size": 64}}, False, id="dflash_config-use_swa-false"),
    # no dflash_config object: Qwen3Config drops the window without the flag
    # (configs/qwen3_config.py@f4d8ec6e:204-205), and nothing restores it
    pytest.param({"sliding_window": 64, "dflash_config": None, "target_layer_ids": [1, 11, 22],
                  "mask_token_id": 127}, False, id="no-dflash_config-no-flag"),
    pytest.param({"sliding_window": 64, "use_sliding_window": True, "dflash_config": None,
                  "target_layer_ids": [1, 11, 22], "mask_token_id": 127}, True, id="no-dflash_config-flag"),
    # the flag without a window: the Qwen config's default of 4096 (qwen3_config.py@f4d8ec6e:192, 205)
    pytest.param({"use_sliding_window": True}, True, id="flag-default-window"),
    # int() of the window (models/dflash.py@f4d8ec6e:569): text and integral floats serve (ENG003)
    pytest.param({"sliding_window": "64"}, True, id="window-as-text"),
    pytest.param({"sliding_window": 64.0}, True, id="window-as-float"),
])
def test_gqa_sliding_window_as_the_engines_config_loader_finds_it(tmp_path, edit, served):
    config = dict(GQA, layer_types=SLIDING, **edit)
    report = check_checkpoint(write_gqa(tmp_path / "d", config))
    assert ("SWA001" in errors(report)) is not served, [(f.code, f.message) for f in report.errors]


def test_gqa_two_sliding_windows_that_differ_are_refused(tmp_path):
    """dflash_config.swa_window_size (use_swa) and a top-level sliding_window
    apart: TokenSpeed serves the top-level one; which the draft learned
    cannot be told (OVR001, as for taps and mask)."""
    nested = {"target_layer_ids": [1, 11, 22], "mask_token_id": 127, "use_swa": True, "swa_window_size": 64}
    report = check_checkpoint(write_gqa(tmp_path / "d", dict(GQA, layer_types=SLIDING, dflash_config=nested,
                                                             sliding_window=128)))
    assert errors(report) == Counter({"OVR001": 1})
    same = check_checkpoint(write_gqa(tmp_path / "s", dict(GQA, layer_types=SLIDING, dflash_config=nested,
                                                           sliding_window=64)))
    assert same.passed()
    as_text = dict(nested, swa_window_size="64")  # int()-ed where it is read (hf_transformers_utils.py:253)
    assert check_checkpoint(write_gqa(tmp_path / "t", dict(GQA, layer_types=SLIDING, dflash_config=as_text,
                                                           sliding_window=64))).passed()
    # the flag without a top-level window serves the Qwen default, 4096, not dflash_config's 64
    report = check_checkpoint(write_gqa(tmp_path / "f", dict(GQA, layer_types=SLIDING, dflash_config=nested,
                                                             use_sliding_window=True)))
    assert errors(report) == Counter({"OVR001": 1}) and report.errors[0].detail["served"] == 4096


def test_gqa_dflash_config_null_reads_as_empty(tmp_path):
    """The drafter and the model take `dflash_config or {}`
    (execution/drafter/dflash.py@f4d8ec6e:72, 137; models/dflash.py@f4d8ec6e:382):
    taps and mask at the top level serve."""
    config = dict(GQA, dflash_config=None, target_layer_ids=[1, 11, 22], mask_token_id=127)
    report = check_checkpoint(write_gqa(tmp_path / "d", config))
    assert report.passed(), [(f.code, f.message) for f in report.errors]


@pytest.mark.parametrize("rope, refused", [
    pytest.param({"rope_parameters": {"rope_type": "default"}}, True, id="parameters-without-theta"),
    pytest.param({"rope_parameters": {"rope_type": "default"}, "rope_theta": 1e6}, True,
                 id="parameters-without-theta-theta-at-top"),
    pytest.param({"rope_parameters": {"rope_type": "default", "rope_theta": None}}, True, id="theta-null"),
    pytest.param({"rope_parameters": "default"}, True, id="parameters-not-an-object"),
    pytest.param({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, False, id="theta-inside"),
    pytest.param({"rope_parameters": {"rope_type": "default", "rope_theta": "1e6"}}, False, id="theta-text"),
    pytest.param({"rope_theta": 1e6}, False, id="theta-at-top-only"),
    # the config class builds rope_parameters from rope_scaling and adds rope_theta
    pytest.param({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, False, id="rope_scaling-only"),
    # ...but keeps rope_parameters written beside rope_scaling as they are
    pytest.param({"rope_scaling": {"rope_type": "linear", "factor": 2.0},
                  "rope_parameters": {"rope_type": "linear", "factor": 2.0}}, True, id="both-without-theta"),
    # transformers' LlamaConfig fills rope_theta into rope_parameters from the top level
    pytest.param({"model_type": "llama", "rope_parameters": {"rope_type": "default"}}, False,
                 id="llama-config-class"),
])
def test_gqa_rope_parameters_need_their_own_rope_theta(tmp_path, rope, refused):
    """models/dflash.py@f4d8ec6e:112-118: rope_parameters["rope_theta"] whenever
    rope_parameters is set; the engine's Qwen3Config (transformers 5.12) adds
    rope_theta only to rope_parameters it builds itself."""
    config = {k: v for k, v in GQA.items() if k != "rope_theta"}
    config.update(rope)
    report = check_checkpoint(write_gqa(tmp_path / "d", config))
    assert ("ROP001" in errors(report)) is refused, [(f.code, f.message) for f in report.findings]


def test_gqa_rope_scaling_beside_other_rope_parameters_is_not_served(tmp_path):
    """rope_parameters are what the GQA attention reads (models/dflash.py@f4d8ec6e:
    112-118); a different rope_scaling beside them is never served."""
    config = dict(GQA, rope_scaling={"rope_type": "linear", "factor": 2.0},
                  rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                                   "rope_theta": 1e6})
    report = check_checkpoint(write_gqa(tmp_path / "d", config))
    assert [(f.code, f.detail.get("feature")) for f in report.errors] == [("ENG001", "rope_scaling")]
    assert "ROP002" not in {f.code for f in report.findings}


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama", "mistral", "qwen3_moe"])
def test_gqa_config_types_the_engine_parses(tmp_path, model_type):
    report = check_checkpoint(write_gqa(tmp_path / "d", dict(GQA, model_type=model_type)))
    assert report.passed(), [(f.code, f.message) for f in report.errors]


def test_k3_float_fields_written_as_text_are_float_ed(tmp_path):
    """configs/kimi_k3_dspark_config.py@4b9766f6:103, 106: float(rms_norm_eps),
    float(rope_theta): text that reads as a number loads (ENG003)."""
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(
        rms_norm_eps="1e-5", rope_theta="50000")))
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    [coerced] = [f for f in report.findings if f.code == "ENG003"]
    assert "float('1e-5')" in coerced.message
    assert "CFG003" in errors(check_checkpoint(write_k3(tmp_path / "x", config_edit=lambda c: c.update(
        rms_norm_eps="small"))))


def test_k3_nested_stream_that_is_falsy_falls_through(tmp_path):
    """`dflash_config.aux_hidden_stream or aux_hidden_stream`
    (execution/drafter/dflash.py@4b9766f6:52-58): a 0 or false nested value
    serves the top-level stream."""
    def edit(config):
        config["aux_hidden_stream"] = "prefix"
        config.setdefault("dflash_config", {})["aux_hidden_stream"] = 0

    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=edit))
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    assert report.resolved.stream == "prefix"


def test_gqa_taps_out_of_order_are_served_wrong(tmp_path):
    config = dict(GQA, dflash_config={"target_layer_ids": [11, 1, 22], "mask_token_id": 127})
    assert "CFG006" in errors(check_checkpoint(write_gqa(tmp_path / "d", config)))


def test_gqa_taps_exclude_the_targets_last_layer(tmp_path):
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(
        {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 23, "vocab_size": 128}))
    report = check_checkpoint(write_gqa(tmp_path / "d", GQA), target=target)
    # causal_lm.py@f4d8ec6e:161-167: ids in [0, N-2]; 22 is the last of 23 layers
    [tap] = [f for f in report.errors if f.code == "TGT005"]
    assert tap.detail["outside"] == [22]


def test_gqa_pre_stacked_qkv_and_gate_up_load(tmp_path):
    # models/dflash.py@f4d8ec6e:479-514: a pre-stacked qkv_proj / gate_up_proj
    # holds none of the `.q_proj.` / `.up_proj.` substrings and loads directly.
    import torch

    def stack(tensors):
        for n in range(GQA["num_hidden_layers"]):
            p = f"layers.{n}."
            tensors[p + "self_attn.qkv_proj.weight"] = torch.cat(
                [tensors.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
            tensors[p + "mlp.gate_up_proj.weight"] = torch.cat(
                [tensors.pop(p + "mlp.gate_proj.weight"), tensors.pop(p + "mlp.up_proj.weight")])

    assert check_checkpoint(write_gqa(tmp_path / "d", GQA, edit=stack)).passed(strict=True)


def test_k3_needs_its_mask_token_at_the_top_level(tmp_path):
    # configs/kimi_k3_dspark_config.py@4b9766f6:114, 230-234 validate only
    # the top-level field; the drafter's nested copy does not save the load.
    def nested_only(config):
        config["dflash_config"] = {"mask_token_id": config.pop("mask_token_id")}

    assert "CFG008" in errors(check_checkpoint(write_k3(tmp_path / "d", config_edit=nested_only)))


def test_a_nested_mask_token_of_zero_is_served_and_must_agree(tmp_path):
    # execution/drafter/dflash.py@4b9766f6:155-157 takes the nested mask
    # whenever it is not None, 0 included.
    def zero(config):
        config["dflash_config"] = {"mask_token_id": 0}

    assert "OVR001" in errors(check_checkpoint(write_k3(tmp_path / "d", config_edit=zero)))


def test_gqa_layer_types_must_list_every_layer(tmp_path):
    config = dict(GQA, layer_types=["full_attention"])  # 2 layers
    report = check_checkpoint(write_gqa(tmp_path / "d", config))
    assert [f.code for f in report.errors] == ["CFG003"] and "layer_types" in report.errors[0].message


def test_a_quantization_block_fails_a_floating_point_draft(tmp_path):
    # configs/model_config.py@f4d8ec6e:605-700: a quantization_config makes
    # every linear layer quantized, with scales a bf16 draft does not ship.
    def quantized(config):
        config["quantization_config"] = {"quant_method": "fp8"}

    assert "ENG005" in errors(check_checkpoint(write_k3(tmp_path / "d", config_edit=quantized)))


# The GQA DSpark Markov head, as DSparkDraftModel reads it (models/dspark.py@f4d8ec6e:75-85, 110-120)


def _gqa_dspark(folder: Path, edit) -> Path:
    from dspark.examples.fabricate import fabricate

    draft = fabricate(folder, family="dflash_gqa", variant="dspark")
    config = json.loads((draft / "config.json").read_text())
    edit(config)
    (draft / "config.json").write_text(json.dumps(config))
    return draft


@pytest.mark.parametrize("edit", [
    pytest.param(lambda c: c.update(markov_head_type="VANILLA"), id="type-upper-case"),
    pytest.param(lambda c: c.update(markov_rank=str(c["markov_rank"])), id="rank-as-text"),
    pytest.param(lambda c: c.update(dspark_config={"markov_head_type": "Vanilla"}), id="nested-type-upper-case"),
])
def test_a_markov_head_the_engine_coerces_loads_with_a_warning(tmp_path, edit):
    report = check_checkpoint(_gqa_dspark(tmp_path / "d", edit), deep=True)
    assert report.passed() and errors(report) == Counter(), errors(report)
    assert warnings(report)["ENG003"] == 1


@pytest.mark.parametrize("edit, words", [
    pytest.param(lambda c: c.update(markov_head_type="gated"), "'gated'", id="unsupported-type"),
    pytest.param(lambda c: c.update(markov_rank="eight"), "'eight'", id="rank-not-a-number"),
    # dspark_config's key wins when present, even when it is 0
    pytest.param(lambda c: c.update(dspark_config={"markov_rank": 0}), "markov_rank is 0", id="nested-zero-wins"),
    pytest.param(lambda c: (c.pop("markov_rank"), c.update(dflash_config={**c.get("dflash_config", {}), "markov_rank": 8})),
                 "dflash_config.markov_rank is not read", id="rank-only-in-dflash_config"),
])
def test_a_markov_head_the_engine_refuses_fails(tmp_path, edit, words):
    report = check_checkpoint(_gqa_dspark(tmp_path / "d", edit))
    [finding] = [f for f in report.errors if f.code == "CFG003"]
    assert words in finding.message


def test_an_empty_dspark_config_falls_through_to_the_top_level(tmp_path):
    # the launch that serves its block size (16) as trained: no LCH003 warning
    report = check_checkpoint(_gqa_dspark(tmp_path / "d", lambda c: c.update(dspark_config={})), deep=True,
                              launch="--speculative-num-steps 16")
    assert report.passed(strict=True), [f.code for f in report.findings]


def test_a_dflash_draft_never_reads_the_markov_fields(tmp_path):
    from dspark.examples.fabricate import fabricate

    draft = fabricate(tmp_path / "d", family="dflash_gqa")
    config = json.loads((draft / "config.json").read_text())
    config.update(markov_rank="eight", markov_head_type="gated")
    (draft / "config.json").write_text(json.dumps(config))
    assert check_checkpoint(draft, launch="--speculative-num-steps 15").passed(strict=True)


def test_markov_tensors_in_a_dflash_draft_are_dropped_by_the_engine(tmp_path):
    """A DSpark draft relabelled DFlash without markov_rank: DFlashDraftModel
    has no Markov head, and its loader drops the tensors without a word
    (models/dflash.py@f4d8ec6e:479-514)."""
    from safetensors.torch import load_file, save_file

    from dspark.examples.fabricate import fabricate

    dspark_draft = fabricate(tmp_path / "dspark", family="dflash_gqa", variant="dspark")
    dflash_draft = fabricate(tmp_path / "dflash", family="dflash_gqa")
    tensors = load_file(dflash_draft / "model.safetensors")
    markov = {k: v for k, v in load_file(dspark_draft / "model.safetensors").items() if k.startswith("markov_head.")}
    assert len(markov) == 2
    save_file({**tensors, **markov}, str(dflash_draft / "model.safetensors"))
    config = json.loads((dflash_draft / "config.json").read_text())
    assert "markov_rank" not in config and "markov_rank" not in (config.get("dspark_config") or {})
    report = check_checkpoint(dflash_draft)
    assert sorted(f.tensor for f in report.errors if f.code == "INV002") == sorted(markov)
    # a markov_rank no int() reads leaves the shapes unknown; the tensors are still without a destination
    config["markov_rank"] = "eight"
    (dflash_draft / "config.json").write_text(json.dumps(config))
    report = check_checkpoint(dflash_draft)
    assert sorted(f.tensor for f in report.errors if f.code == "INV002") == sorted(markov)


# Found by running the engine's own loaders on fabricated drafts -------------------------


def _gqa_edit(folder: Path, edit, **options) -> Path:
    from dspark.examples.fabricate import fabricate

    draft = fabricate(folder, family="dflash_gqa", **options)
    config = json.loads((draft / "config.json").read_text())
    edit(config)
    (draft / "config.json").write_text(json.dumps(config))
    return draft


def test_partial_rope_on_a_gqa_draft_is_served_as_full_rope(tmp_path):
    """get_rope(head_dim, rotary_dim=head_dim) (models/dflash.py@f4d8ec6e:119-125)."""
    report = check_checkpoint(_gqa_edit(tmp_path / "d", lambda c: c.update(partial_rotary_factor=0.5)))
    [finding] = report.errors
    assert finding.code == "ENG001" and "partial_rotary_factor" in finding.message
    assert check_checkpoint(_gqa_edit(tmp_path / "one", lambda c: c.update(partial_rotary_factor=1.0))).passed()


def test_a_k3_nested_stream_that_differs_from_the_validated_one_is_refused(tmp_path):
    """The top-level stream is validated, the truthy nested one served
    (execution/drafter/dflash.py@4b9766f6:52-58)."""
    def nested(config):
        config["aux_hidden_stream"] = "prefix"
        config["dflash_config"] = {"aux_hidden_stream": "attn_res"}

    draft = write_k3(tmp_path / "d", config_edit=nested)
    report = check_checkpoint(draft, engine="tokenspeed@pr1031")
    [finding] = [f for f in report.errors if f.code == "OVR001"]
    assert finding.detail["field"] == "aux_hidden_stream"
    # 0.1.1 never reads the nested one: the validated top level is served, and said so (STR008)
    released = check_checkpoint(draft)
    assert not released.errors and [f.code for f in released.findings if f.code == "STR008"] == ["STR008"]

    def same(config):
        config["aux_hidden_stream"] = "prefix"
        config["dflash_config"] = {"aux_hidden_stream": "PREFIX"}

    assert "OVR001" not in errors(check_checkpoint(write_k3(tmp_path / "s", config_edit=same)))


@pytest.mark.parametrize("field, nested, top", [
    ("target_layer_ids", None, [2, 12, 23]),
    ("mask_token_id", 0, 127),
], ids=["taps", "mask-0"])
def test_a_gqa_nested_value_the_top_level_contradicts_is_refused(tmp_path, field, nested, top):
    """The GQA model and drafter read the nested value first and never the
    top-level one (models/dflash.py@f4d8ec6e:382-385;
    execution/drafter/dflash.py@f4d8ec6e:137-150): which one the draft was
    trained with cannot be known, and one of them is served."""
    def edit(config):
        section = config.setdefault("dflash_config", {})
        section[field] = section.get(field, config.get(field)) if nested is None else nested
        config[field] = top

    report = check_checkpoint(_gqa_edit(tmp_path / "d", edit))
    [finding] = [f for f in report.errors if f.code == "OVR001"]
    assert finding.detail["field"] == field and "never reads the top-level one" in finding.message


@pytest.mark.parametrize("family", ["k3", "gqa"])
def test_tap_ids_written_as_text_are_int_ed_by_the_engine(tmp_path, family):
    def as_text(config):
        section = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else config
        key = "target_layer_ids" if "target_layer_ids" in section else None
        section = section if key else config
        section["target_layer_ids"] = [str(i) for i in section["target_layer_ids"]]

    draft = (write_k3(tmp_path / "d", config_edit=as_text) if family == "k3"
             else _gqa_edit(tmp_path / "d", as_text))
    report = check_checkpoint(draft)
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    assert "ENG003" in warnings(report)


def test_a_k3_block_size_names_the_launch_flag_it_needs(tmp_path):
    """The K3 drafter refuses a block_size that is neither the launch's draft
    count nor its verify width (execution/drafter/dflash.py@4b9766f6:61-98)."""
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(block_size=16)),
                              engine="tokenspeed@pr1031")
    assert report.passed()
    [note] = [f for f in report.findings if f.code == "ENG004"]
    assert "--speculative-num-draft-tokens 16 or 17" in note.message


@pytest.mark.parametrize("top", [None, False], ids=["top-absent", "top-false"])
def test_a_k3_fc_norm_set_only_in_dflash_config_is_not_served(tmp_path, top):
    """The K3 config class and model read fc_norm at the top level only
    (configs/kimi_k3_dspark_config.py@4b9766f6:78, 112;
    models/kimi_k3_dspark.py@4b9766f6:319-328): a flag only in dflash_config
    serves the draft without fc_norm (ENG001)."""
    def nested_only(config):
        config.pop("fc_norm", None)
        if top is not None:
            config["fc_norm"] = top
        config.setdefault("dflash_config", {})["fc_norm"] = True

    report = check_checkpoint(write_k3(tmp_path / "d", fc_norm=False, config_edit=nested_only))
    [unread] = [f for f in report.findings if f.code == "ENG001"]
    assert unread.detail["feature"] == "fc_norm" and "top level only" in unread.message
    # an explicit top-level false is the flag served, and agrees with the weights shipped (none)
    assert unread.severity is (Severity.ERROR if top is None else Severity.WARNING)


@pytest.mark.parametrize("field", ["enable_confidence_head", "confidence_head_with_markov"])
def test_a_k3_confidence_flag_written_as_text_is_bool_read(tmp_path, field):
    """The K3 config class bool()s the confidence flags
    (configs/kimi_k3_dspark_config.py@4b9766f6:119-120): "false" reads as
    True, which only switches a training-only head the loader skips: the
    draft is served the same, an ENG003 warning, not CFG003."""
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update({field: "false"})))
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    [coerced] = [f for f in report.warnings if f.code == "ENG003"]
    assert f"{field} = 'false' is read as bool('false') = True" in coerced.message


@pytest.mark.parametrize("value, launches", [(1, [2]), ("6", [6, 7]), (6.0, [6, 7])],
                         ids=["one", "text", "integral-float"])
def test_a_k3_block_size_the_drafter_int_reads_names_its_launches(tmp_path, value, launches):
    """The drafter int()s block_size and needs a verify width of at least 2
    (execution/drafter/dflash.py@4b9766f6:74-97): text and floats it reads
    are served, and block_size 1 launches only with 2."""
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(block_size=value)),
                              engine="tokenspeed@pr1031")
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    [note] = [f for f in report.findings if f.code == "ENG004"]
    assert note.detail["num_draft_tokens"] == launches


@pytest.mark.parametrize("value", [0, -3, "six", [6]], ids=["zero", "negative", "words", "list"])
def test_a_k3_block_size_no_launch_serves_is_refused(tmp_path, value):
    """Below 1 no launch serves it; one int() cannot read stops startup."""
    report = check_checkpoint(write_k3(tmp_path / "d", config_edit=lambda c: c.update(block_size=value)))
    assert [(f.code, f.detail.get("field")) for f in report.errors] == [("CFG003", "block_size")]
    assert "ENG004" not in {f.code for f in report.findings}


@pytest.mark.parametrize("field", ["rope_parameters", "rope_scaling"])
def test_a_nested_partial_rope_factor_is_not_read_either(tmp_path, field):
    def edit(config):
        config[field] = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}

    [finding] = [f for f in check_checkpoint(_gqa_edit(tmp_path / "d", edit)).errors if f.code == "ENG001"]
    assert f"{field}.partial_rotary_factor" in finding.message


def test_the_k3_config_passes_only_yarn_to_the_model(tmp_path):
    """configs/kimi_k3_dspark_config.py@4b9766f6:139-170."""
    def linear(config):
        config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0}

    [finding] = [f for f in check_checkpoint(write_k3(tmp_path / "d", config_edit=linear)).errors
                 if f.code == "ENG001"]
    assert "'linear'" in finding.message


@pytest.mark.parametrize("text_config", [{"num_attention_heads": 4, "hidden_size": 64}, {}, None],
                         ids=["a-full-dict", "empty", "null"])
@pytest.mark.parametrize("family", ["k3_dspark", "dflash_gqa", "eagle3_llama", "eagle3_mla"])
def test_a_text_config_in_the_drafts_config_is_refused_by_the_config_loader(tmp_path, family, text_config):
    """utils/hf_transformers_utils.py@f4d8ec6e:138-143, 358: get_config then
    get_hf_text_config needs text_config to carry num_attention_heads as an
    attribute; the draft config classes keep the key as a dict or None."""
    from dspark.examples.fabricate import write_eagle3_draft

    def add(config):
        config["text_config"] = text_config

    if family == "k3_dspark":
        draft = write_k3(tmp_path / "d", config_edit=add)
    elif family == "dflash_gqa":
        draft = write_gqa(tmp_path / "d", dict(GQA, text_config=text_config))
    else:
        scale = "tiny-llama" if family == "eagle3_llama" else "tiny-mla"
        draft = write_eagle3_draft(tmp_path / "d", scale=scale, config_edit=add)
    report = check_checkpoint(draft)
    assert [f.code for f in report.errors] == ["CFG011"], [(f.code, f.message) for f in report.errors]
    assert "Remove text_config" in report.errors[0].message
    without = json.loads((draft / "config.json").read_text())
    del without["text_config"]
    (draft / "config.json").write_text(json.dumps(without))
    assert check_checkpoint(draft).passed()


def test_a_text_config_on_a_model_type_whose_class_builds_it_is_left_to_the_other_rules():
    from dspark.schema.rules.features import text_config_findings

    engine = engine_by_spec("tokenspeed")
    wrapped = {"model_type": "kimi_k25", "text_config": {"num_attention_heads": 64}}
    assert text_config_findings(engine, wrapped, "config.json") == []
    assert [f.code for f in text_config_findings(engine, dict(wrapped, model_type="kimi_k2"), "config.json")] == [
        "CFG011"]


def _classed_target(folder: Path, architecture: str, *, hidden: int, layers: int, vocab: int, wrapped: bool = False) -> Path:
    text = {"hidden_size": hidden, "num_hidden_layers": layers, "vocab_size": vocab}
    model_type = {"KimiK3ForConditionalGeneration": "kimi_k3", "KimiK25ForConditionalGeneration": "kimi_k25",
                  "LlamaForCausalLM": "llama", "DeepseekV3ForCausalLM": "deepseek_v3",
                  "GptOssForCausalLM": "gpt_oss", "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe"}[architecture]
    config = ({"architectures": [architecture], "model_type": model_type,
               "text_config": {**text, "model_type": "kimi_linear" if model_type == "kimi_k3" else "deepseek_v3"}}
              if wrapped else {"architectures": [architecture], "model_type": model_type, **text})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(("architecture", "wrapped", "hosts"), [
    ("KimiK3ForConditionalGeneration", True, True),
    ("KimiK25ForConditionalGeneration", True, True),
    ("Qwen3_5MoeForConditionalGeneration", False, True),
    # BaseCausalLM has no get_input_embeddings (models/base/causal_lm.py@f4d8ec6e:43):
    # the drafter's wire_target raises at startup (execution/drafter/dflash.py@f4d8ec6e:231)
    ("LlamaForCausalLM", False, False),
    ("DeepseekV3ForCausalLM", False, False),
    ("GptOssForCausalLM", False, False),
])
@pytest.mark.parametrize("family", ["k3_dspark", "dflash_gqa"])
def test_a_dflash_style_draft_needs_a_target_class_its_drafter_can_wire_to(tmp_path, family, architecture,
                                                                           wrapped, hosts):
    if family == "k3_dspark":
        draft = write_k3(tmp_path / "d", fc_norm=False)
        # one layer more than the draft names: every class's capture range then takes its taps
        # (1031's drafter; 0.1.1 compares the layer counts at startup)
        hidden, layers, vocab = TINY.target_hidden_size, TINY.target_num_hidden_layers + 1, TINY.vocab_size
    else:
        draft = write_gqa(tmp_path / "d", GQA)
        hidden, layers, vocab = GQA["hidden_size"], 24, GQA["vocab_size"]
    target = _classed_target(tmp_path / "t", architecture, hidden=hidden, layers=layers, vocab=vocab, wrapped=wrapped)
    report = check_checkpoint(draft, target=target, engine="tokenspeed@pr1031")
    refused = [f for f in report.errors if f.code == "TGT007"]
    if hosts:
        assert not refused and report.passed(), [(f.code, f.message) for f in report.errors]
    else:
        [finding] = refused
        assert architecture in finding.message and "get_input_embeddings()" in finding.message
        assert without_qualname(finding.detail["source"]).startswith("python/tokenspeed/runtime/execution/drafter/dflash.py@")


def test_a_target_without_architectures_is_not_judged_by_class(tmp_path):
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": TINY.target_hidden_size, "vocab_size": TINY.vocab_size,
                                                    "num_hidden_layers": TINY.target_num_hidden_layers}))
    assert check_checkpoint(write_k3(tmp_path / "d", fc_norm=False), target=target).passed()


def test_a_gqa_draft_takes_its_tap_range_from_a_kimi_k3_target(tmp_path):
    # kimi_k3.py@f4d8ec6e:2616-2628 (delegated from the wrapper, 3007-3020)
    # accepts [0, N-1] and captures a layer's output in place; a Kimi-K2.5
    # target shifts by one and accepts [0, N-2] (deepseek_v3.py@f4d8ec6e:1697-1715).
    config = dict(GQA, dflash_config={"target_layer_ids": [1, 11, 23], "mask_token_id": 127})
    draft = write_gqa(tmp_path / "d", config)
    k3 = _classed_target(tmp_path / "k3", "KimiK3ForConditionalGeneration", hidden=64, layers=24, vocab=128, wrapped=True)
    assert check_checkpoint(draft, target=k3).passed()
    k25 = _classed_target(tmp_path / "k25", "KimiK25ForConditionalGeneration", hidden=64, layers=24, vocab=128, wrapped=True)
    [outside] = [f for f in check_checkpoint(draft, target=k25).errors if f.code == "TGT005"]
    assert outside.detail["outside"] == [23]


@pytest.mark.parametrize(("model_type", "field", "code", "severity"), [
    # the engine's Qwen config classes hand rope_parameters to transformers' validation unfilled
    ("qwen3", "rope_parameters", "ROP001", Severity.ERROR),
    ("qwen2", "rope_parameters", "ROP001", Severity.ERROR),
    # ...and fill a rope_scaling block from max_position_embeddings, as transformers' own Llama class does
    ("qwen3", "rope_scaling", "ROP002", Severity.WARNING),
    ("llama", "rope_parameters", "ROP002", Severity.WARNING),
])
def test_gqa_yarn_without_its_original_context(tmp_path, model_type, field, code, severity):
    """configs/qwen3_config.py@f4d8ec6e:189, 240; configs/qwen2_config.py@f4d8ec6e:103."""
    block = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}
    config = dict(GQA, model_type=model_type, **{field: block})
    report = check_checkpoint(write_gqa(tmp_path / "d", config))
    rope = [f for f in report.findings if f.code.startswith("ROP")]
    assert [(f.code, f.severity) for f in rope] == [(code, severity)], [(f.code, f.message) for f in report.findings]
