"""Launch settings as an input (`--launch`, the settings' `launch`): the
server flags a verdict depends on, read per engine release, on drafts the
fabricator writes with the safetensors library."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import fabricate
from dspark.schema.engines.launch import LaunchError, parse_launch
from dspark.schema.engines.tokenspeed.launch import FLAGS, checkpoint_block_size, launch_widths
from dspark.schema.findings import Severity
from draft_edits import set_config_fields as edit_config


def codes(report, severity=None) -> Counter:
    return Counter(f.code for f in report.findings if severity is None or f.severity is severity)


def lch(report) -> list:
    return [f for f in report.findings if f.code.startswith("LCH")]


def edit_tensors(folder: Path, drop=(), replace=None) -> Path:
    weights = folder / "model.safetensors"
    tensors = {k: v for k, v in load_file(str(weights)).items() if k not in drop}
    tensors.update(replace or {})
    save_file(tensors, str(weights))
    return folder


@pytest.fixture
def k3(tmp_path) -> Path:
    return edit_config(fabricate(tmp_path / "k3", family="k3_dspark"), block_size=7)


# -- parsing --------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("--speculative-num-steps x", "takes an integer"),
    ("--pipeline-parallel-size", "needs a value"),
    ("7", "follows no flag"),
    ("--pipeline-parallel-size 0", "1 or more"),
    ("--speculative-config '[1]'", "JSON object"),
    ("--speculative-config '{bad'", "not JSON"),
    ("--a 'b", "cannot split"),
])
def test_a_malformed_launch_names_the_flag(text, words):
    with pytest.raises(LaunchError) as raised:
        parse_launch(text, engine="tokenspeed@0.1.1", flags=FLAGS)
    assert words in raised.value.message and raised.value.hint


def test_flags_in_either_spelling_and_unknown_ones_kept_as_ignored():
    launch = parse_launch("--tp 8 --speculative-num-steps=7 --enable-x --speculative_config '{\"method\": \"dspark\"}'",
                          engine="tokenspeed@0.1.1", flags=FLAGS)
    assert launch.values == {"--speculative-num-steps": 7, "--speculative-config": {"method": "dspark"}}
    assert launch.ignored == ("--tp", "--enable-x")


@pytest.mark.parametrize("flags, widths", [
    ("", (7, 8, False)),                                        # the defaults follow the checkpoint
    ("--speculative-num-steps 3", (3, 4, False)),               # 3 is the default: not explicit
    ("--speculative-num-draft-tokens 8", (7, 8, True)),
    ("--speculative-config '{\"num_speculative_tokens\": 8}'", (7, 8, True)),
])
def test_the_widths_are_the_server_args_arithmetic(flags, widths):
    launch = parse_launch(flags, engine="tokenspeed@0.1.1", flags=FLAGS) if flags else None
    resolved = launch_widths(launch, "DSPARK")
    got = (resolved.steps, resolved.draft_tokens, resolved.explicit)
    assert got == widths if flags != "" else resolved.explicit is False


def test_the_block_size_is_read_nested_first_dspark_block_size_before_block_size():
    assert checkpoint_block_size({"block_size": 4, "dspark_config": {"block_size": 6, "dspark_block_size": 5}}) == (
        5, "dspark_config.dspark_block_size")
    assert checkpoint_block_size({"block_size": 4, "dflash_config": {"block_size": None}}) == (4, "block_size")


# -- TokenSpeed 0.1.1: block size against --speculative-num-steps -----------------------

def test_without_launch_the_flags_that_serve_the_draft_are_named(k3):
    report = check_checkpoint(k3)
    assert report.passed(strict=True)
    [note] = [f for f in report.findings if f.code == "LCH008"]
    assert "--speculative-num-steps 7" in note.message and note.detail["verdicts"]["other"] == "refused"


@pytest.mark.parametrize("flags, verdict", [
    ("--speculative-num-steps 7", "LCH005"),
    ("--speculative-num-steps 7 --speculative-num-draft-tokens 8", "LCH005"),
    ("--speculative-num-steps 3", "LCH005"),  # the default value: the server takes the checkpoint's
    ("--speculative-num-steps 6", "LCH001"),
    ("--speculative-num-draft-tokens 7", "LCH001"),
])
def test_a_k3_block_size_against_the_launch(k3, flags, verdict):
    report = check_checkpoint(k3, launch=flags)
    assert verdict in codes(report) and "LCH004" in codes(report)
    assert report.passed() is (verdict != "LCH001")


def test_a_dflash_block_counts_the_anchor(tmp_path):
    draft = fabricate(tmp_path / "d", family="dflash_gqa")  # block_size 16: DFLASH serves 15 steps
    assert check_checkpoint(draft, launch="--speculative-num-steps 15").passed(strict=True)
    wrong = check_checkpoint(draft, launch="--speculative-num-steps 16")
    [refusal] = [f for f in wrong.errors if f.code == "LCH001"]
    assert "--speculative-num-steps 15" in refusal.message


def test_steps_and_draft_tokens_that_disagree_stop_the_server_whatever_the_draft(k3):
    report = check_checkpoint(k3, launch="--speculative-num-steps 7 --speculative-num-draft-tokens 9")
    assert any("whatever the draft" in f.message for f in report.errors)


def test_a_block_size_that_drafts_nothing_is_refused_at_every_launch(tmp_path):
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa"), block_size=1)
    assert "CFG003" in codes(check_checkpoint(draft), Severity.ERROR)


# -- TokenSpeed 0.1.1: pipeline parallelism ------------------------------------------------

PP2 = "--pipeline-parallel-size 2 --disaggregation-mode prefill"


def test_a_k3_draft_with_its_embedding_serves_a_pipeline(k3):
    report = check_checkpoint(k3, launch=PP2)
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings if f.severity is not Severity.INFO]


def test_a_k3_draft_without_embed_tokens_warns_and_does_not_start_on_a_pipeline(k3):
    edit_tensors(k3, drop={"model.embed_tokens.weight"})
    default = check_checkpoint(k3)
    assert default.passed()
    [warning] = [f for f in default.warnings if f.code == "LCH003"]
    assert "embed_tokens" in warning.message and warning.detail["setting"] == "--pipeline-parallel-size"
    pipeline = check_checkpoint(k3, launch=PP2)
    assert [f.code for f in pipeline.errors] == ["LCH001"]


def test_a_misshaped_or_integer_embedding_fails_on_a_pipeline(k3):
    import torch

    embed = load_file(str(k3 / "model.safetensors"))["model.embed_tokens.weight"]
    edit_tensors(k3, replace={"model.embed_tokens.weight": embed[:, :-1].contiguous()})
    assert [f.code for f in check_checkpoint(k3, launch=PP2).errors] == ["LCH001"]
    edit_tensors(k3, replace={"model.embed_tokens.weight": torch.zeros(embed.shape, dtype=torch.int8)})
    integers = check_checkpoint(k3, launch=PP2)
    assert [f.code for f in integers.errors] == ["LCH002"]
    assert [row["outcome"] for row in integers.engine_verdicts()] == ["served_wrong"]


def test_a_quantized_k3_draft_is_refused_on_a_pipeline(k3):
    edit_config(k3, quantization_config={"quant_method": "fp8"})
    assert "LCH001" in codes(check_checkpoint(k3, launch=PP2), Severity.ERROR)


def test_an_extra_fc_norm_is_refused_at_one_stage_and_dropped_on_a_pipeline(tmp_path):
    draft = fabricate(tmp_path / "d", family="k3_dspark", defect="fc-norm-extra-index")
    single = check_checkpoint(draft)
    assert "FCN003" in codes(single, Severity.ERROR) and "LCH003" in codes(single, Severity.WARNING)
    pipeline = check_checkpoint(draft, launch=PP2)
    assert pipeline.passed(), [(f.code, f.message) for f in pipeline.errors]
    assert "LCH007" in codes(pipeline)


@pytest.mark.parametrize("family, variant", [("dflash_gqa", "dflash"), ("dflash_gqa", "dspark"),
                                             ("eagle3_llama", None)])
def test_only_k3_dspark_starts_on_a_pipeline(tmp_path, family, variant):
    draft = fabricate(tmp_path / "d", family=family, **({"variant": variant} if variant else {}))
    assert "LCH001" in codes(check_checkpoint(draft, launch=PP2), Severity.ERROR)


def test_a_pipeline_without_a_prefill_server_is_a_warning(k3):
    report = check_checkpoint(k3, launch="--pipeline-parallel-size 2")
    assert "LCH006" in codes(report, Severity.WARNING) and report.passed()


# -- vLLM 0.33.0 and SGLang 0.5.23 ---------------------------------------------------------

def test_vllm_takes_a_dspark_drafts_token_count_from_its_block_size(tmp_path):
    # vLLM's K3 model builds no fc_norm (ENG001): a draft without it
    k3 = edit_config(fabricate(tmp_path / "k3", family="k3_dspark", fc_norm=False, engine="vllm"), block_size=7)
    dspark = "--speculative-config '{\"method\": \"dspark\"}'"
    assert "LCH005" in codes(check_checkpoint(k3, engine="vllm", launch=dspark))
    edit_config(k3, block_size=None)
    assert "LCH001" in codes(check_checkpoint(k3, engine="vllm", launch=dspark), Severity.ERROR)
    with_count = "--speculative-config '{\"method\": \"dspark\", \"num_speculative_tokens\": 4}' -pp 2"
    report = check_checkpoint(k3, engine="vllm", launch=with_count)
    assert report.passed() and any("not modelled" in f.message for f in lch(report))


@pytest.mark.parametrize("version", ["0.32.0", "0.31.0", "0.30.0"])
def test_older_vllm_releases_read_the_launch_and_0_30_0_has_no_dspark_default(tmp_path, version):
    k3 = edit_config(fabricate(tmp_path / "k3", family="k3_dspark", fc_norm=False, engine="vllm"), block_size=7)
    dspark = "--speculative-config '{\"method\": \"dspark\"}'"
    report = check_checkpoint(k3, engine=f"vllm@{version}", launch=dspark)
    # 0.30.0's SpeculativeConfig takes n_predict only (speculative.py:1473-1492@vllm==0.30.0)
    assert ("LCH001" in codes(report, Severity.ERROR)) == (version == "0.30.0")
    assert any(f"vllm=={version}" in f.message for f in lch(report) if f.code in ("LCH001", "LCH005"))
    edit_config(k3, n_predict=7)
    assert "LCH005" in codes(check_checkpoint(k3, engine=f"vllm@{version}", launch=dspark))
    # every other method takes n_predict in every release
    dflash = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", engine="vllm"))
    assert "LCH001" in codes(check_checkpoint(dflash, engine=f"vllm@{version}",
                                              launch="-sc '{\"method\": \"dflash\"}'"), Severity.ERROR)


def test_sglang_reads_pp_size_and_the_dflash_block_size(tmp_path):
    draft = fabricate(tmp_path / "d", family="dflash_gqa")
    assert "LCH008" in codes(check_checkpoint(draft, engine="sglang"))
    assert "LCH001" in codes(check_checkpoint(draft, engine="sglang", launch="--pp-size 2"), Severity.ERROR)
    assert "LCH002" in codes(check_checkpoint(draft, engine="sglang", launch="--speculative-num-draft-tokens 8"),
                             Severity.ERROR)
    ignored = check_checkpoint(draft, engine="sglang", launch="--speculative-num-draft-tokens 16 --tp-size 4")
    [note] = [f for f in ignored.findings if f.code == "LCH004"]
    assert note.detail["ignored"] == ["--tp-size"] and ignored.passed()


@pytest.mark.parametrize("version", ["0.5.23", "0.5.20"])
def test_sglang_reads_both_dflash_size_flags(tmp_path, version):
    draft = fabricate(tmp_path / "d", family="dflash_gqa")  # block_size 16
    engine = f"sglang@{version}"
    assert "LCH002" in codes(check_checkpoint(draft, engine=engine, launch="--speculative-dflash-block-size 8"),
                             Severity.ERROR)
    both = check_checkpoint(draft, engine=engine,
                            launch="--speculative-dflash-block-size 16 --speculative-num-draft-tokens 8")
    assert "LCH001" in codes(both, Severity.ERROR) and f"sglang=={version}" in lch(both)[-1].message
    assert check_checkpoint(draft, engine=engine, launch="--speculative-dflash-block-size 16").passed()


def test_sglang_stops_a_dspark_draft_whose_token_count_is_not_gamma_plus_one(tmp_path):
    draft = fabricate(tmp_path / "d", family="dflash_gqa", variant="dspark")  # block_size 16: gamma 16
    assert check_checkpoint(draft, engine="sglang", launch="--speculative-num-draft-tokens 17").passed()
    assert "LCH001" in codes(check_checkpoint(draft, engine="sglang", launch="--speculative-num-draft-tokens 16"),
                             Severity.ERROR)
    # the prefixed dspark_block_size is gamma when present
    edit_config(draft, dspark_block_size=4)
    assert check_checkpoint(draft, engine="sglang", launch="--speculative-num-draft-tokens 5").passed()


def test_sglang_0_5_20_refuses_a_dspark_pipeline_that_0_5_21_runs_on_a_prefill_server(tmp_path):
    draft = fabricate(tmp_path / "d", family="dflash_gqa", variant="dspark")
    prefill = "--pp-size 2 --disaggregation-mode prefill"
    assert check_checkpoint(draft, engine="sglang@0.5.21", launch=prefill).passed()
    old = check_checkpoint(draft, engine="sglang@0.5.20", launch=prefill)
    assert "LCH001" in codes(old, Severity.ERROR) and "565-568" in lch(old)[-1].message
    assert "LCH001" in codes(check_checkpoint(draft, engine="sglang@0.5.21", launch="--pp-size 2"), Severity.ERROR)


@pytest.mark.parametrize("layers, pp_size, first", [(12, 2, 6), (12, 4, 9), (13, 2, 6), (10, 4, 7), (61, 8, 53)])
def test_sglangs_last_pipeline_stage_holds_the_extra_layers(layers, pp_size, first):
    from dspark.schema.engines.sglang.launch import last_stage_start

    assert last_stage_start(layers, pp_size) == first


def _eagle3_target(tmp_path: Path, layers: int = 12) -> Path:
    path = tmp_path / "target.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
                                "num_hidden_layers": layers, "vocab_size": 128}))
    return path


def test_sglang_serves_an_eagle3_draft_above_pp_size_1_only_with_its_taps_on_the_last_stage(tmp_path):
    draft = fabricate(tmp_path / "d", family="eagle3_llama")  # no taps: the target's defaults, layers 1, 5, 8
    target = _eagle3_target(tmp_path)
    spread = check_checkpoint(draft, engine="sglang", target=target, launch="--pp-size 2")
    [finding] = [f for f in spread.findings if f.code == "LCH002"]
    assert finding.detail["lost_taps"] == [1] and finding.detail["last_stage_first_layer"] == 6
    # the server starts and drafts from fewer layers than trained: served wrong, not refused
    [row] = spread.engine_verdicts()
    assert row["outcome"] == "served_wrong", row
    assert check_checkpoint(draft, engine="sglang", target=target, launch="--pp-size 1").passed()
    edit_config(draft, eagle_config={"eagle_aux_hidden_state_layer_ids": [6, 7, 8]})
    assert check_checkpoint(draft, engine="sglang@0.5.20", target=target, launch="--pp-size 2").passed()
    # at 4 stages the last holds layers 9-11: the outputs of 8 (entering 9) and on
    deeper = check_checkpoint(draft, engine="sglang", target=target, launch="--pipeline-parallel-size 4")
    assert [f.detail["lost_taps"] for f in deeper.findings if f.code == "LCH002"] == [[6, 7]]


def test_without_a_target_sglangs_eagle3_pipeline_fails_only_where_every_target_loses_a_tap(tmp_path):
    draft = fabricate(tmp_path / "d", family="eagle3_llama")
    unknown = check_checkpoint(draft, engine="sglang", launch="--pp-size 2")
    assert unknown.passed() and "LCH003" in codes(unknown, Severity.WARNING)
    # a tap on layer 20 needs 22 layers or more; their last stage starts at 11 or later
    edit_config(draft, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 10, 20]})
    assert "LCH002" in codes(check_checkpoint(draft, engine="sglang", launch="--pp-size 2"), Severity.ERROR)
    edit_config(draft, eagle_config={"eagle_aux_hidden_state_layer_ids": [18, 19, 20]})
    near = check_checkpoint(draft, engine="sglang", launch="--pp-size 2")
    assert near.passed() and "LCH003" in codes(near, Severity.WARNING)


def test_a_release_without_a_launch_model_names_every_flag_ignored(k3):
    report = check_checkpoint(k3, engine="tokenspeed@pr1031", launch="--speculative-num-steps 6")
    [note] = [f for f in report.findings if f.code == "LCH004"]
    assert note.detail["ignored"] == ["--speculative-num-steps"]


def _target(tmp_path: Path, architecture: str, **extra) -> Path:
    path = tmp_path / f"{architecture}.json"
    path.write_text(json.dumps({"architectures": [architecture], "hidden_size": 32, "num_hidden_layers": 12,
                                "vocab_size": 128, "max_position_embeddings": 2048, **extra}))
    return path


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_vllm_refuses_a_pipeline_on_a_target_whose_decoder_relays_no_captured_state(tmp_path, version):
    draft = fabricate(tmp_path / "d", family="eagle3_llama")
    engine = f"vllm@{version}"
    assert check_checkpoint(draft, engine=engine, target=_target(tmp_path, "LlamaForCausalLM"), launch="-pp 2").passed()
    moe = check_checkpoint(draft, engine=engine, target=_target(tmp_path, "Qwen3MoeForCausalLM"), launch="-pp 2")
    [refusal] = [f for f in moe.findings if f.code == "LCH001"]
    assert "does not support eagle3 with pipeline parallelism" in refusal.message
    assert f"vllm=={version}" in refusal.message
    assert check_checkpoint(draft, engine=engine, target=_target(tmp_path, "Qwen3MoeForCausalLM"),
                            launch="-pp 1").passed()
    unknown = check_checkpoint(draft, engine=engine, launch="--pipeline-parallel-size 2")
    assert unknown.passed() and "LCH003" in codes(unknown, Severity.WARNING)


def test_vllm_relays_minimax_m3_from_0_32_0_and_leaves_an_unread_capture_alone(tmp_path):
    draft = fabricate(tmp_path / "d", family="eagle3_llama")
    target = _target(tmp_path, "MiniMaxM3SparseForCausalLM")
    assert "LCH001" in codes(check_checkpoint(draft, engine="vllm@0.31.0", target=target, launch="-pp 2"))
    assert check_checkpoint(draft, engine="vllm@0.32.0", target=target, launch="-pp 2").passed()
    # 0.33.0 captures nothing for a draft without aux hidden states: nothing to relay
    edit_config(draft, eagle_config={"use_aux_hidden_state": False})
    moe = _target(tmp_path, "Qwen3MoeForCausalLM")
    assert "LCH001" not in codes(check_checkpoint(draft, engine="vllm@0.33.0", target=moe, launch="-pp 2"))


def _spec(max_model_len) -> str:
    return ("--max-model-len 2048 -sc '" + json.dumps({"method": "dflash", "num_speculative_tokens": 3,
                                                       "max_model_len": max_model_len}) + "'")


@pytest.mark.parametrize("version", ["0.30.0", "0.33.0"])
def test_vllm_refuses_a_speculative_max_model_len_above_the_drafts_or_the_served_length(tmp_path, version):
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", engine="vllm"), max_position_embeddings=1024)
    engine = f"vllm@{version}"
    [above_draft] = [f for f in check_checkpoint(draft, engine=engine, launch=_spec(1536)).findings
                     if f.code == "LCH001"]
    assert above_draft.detail == {"max_model_len": 1536, "derived": 1024}
    edit_config(draft, max_position_embeddings=4096)
    [above_served] = [f for f in check_checkpoint(draft, engine=engine, launch=_spec(3072)).findings
                      if f.code == "LCH001"]
    assert above_served.detail["served_length"] == 2048
    assert "LCH001" in codes(check_checkpoint(draft, engine=engine, launch=_spec(0)))
    assert check_checkpoint(draft, engine=engine, launch=_spec(1024)).passed()


def test_vllm_0_33_0_lowers_the_server_to_a_speculative_max_model_len_only_where_it_does_not_raise(tmp_path):
    draft = edit_config(fabricate(tmp_path / "d", family="dflash_gqa", engine="vllm"), max_position_embeddings=4096)
    # default RoPE only sizes the cache: the draft shares the target's positions, the value changes nothing
    assert "ROP004" not in codes(check_checkpoint(draft, engine="vllm@0.33.0", launch=_spec(1024)))
    edit_config(draft, rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048})
    [lowered] = [f for f in check_checkpoint(draft, engine="vllm@0.33.0", launch=_spec(1024)).findings
                 if f.code == "ROP004"]
    assert lowered.detail["served_length"] == 1024 and lowered.detail["requested_length"] == 2048
    # through 0.32.0 no runner reads the draft's max_model_len
    assert "ROP004" not in codes(check_checkpoint(draft, engine="vllm@0.32.0", launch=_spec(1024)))


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
def test_sglangs_dspark_block_size_flag_is_gamma_over_the_checkpoints(tmp_path, version):
    draft = fabricate(tmp_path / "d", family="dflash_gqa", variant="dspark")  # block_size 16: gamma 16
    engine = f"sglang@{version}"
    assert check_checkpoint(draft, engine=engine, launch="--speculative-dspark-block-size 16").passed()
    [wrong] = [f for f in check_checkpoint(draft, engine=engine, launch="--speculative-dspark-block-size 8").findings
               if f.code == "LCH002"]
    assert wrong.detail["gamma"] == 16 and wrong.detail["dspark_block_size"] == 8
    # the draft-token count is checked against the flag's gamma, not the checkpoint's
    assert check_checkpoint(draft, engine=engine, launch="--speculative-dspark-block-size 16 "
                            "--speculative-num-draft-tokens 17").passed()
    stopped = check_checkpoint(draft, engine=engine, launch="--speculative-dspark-block-size 8 "
                               "--speculative-num-draft-tokens 17")
    assert "LCH001" in codes(stopped, Severity.ERROR)
    # a DFlash draft does not read it
    dflash = fabricate(tmp_path / "f", family="dflash_gqa")
    assert check_checkpoint(dflash, engine=engine, launch="--speculative-dspark-block-size 8").passed()


def test_tokenspeed_0_1_0_has_no_pipeline_flag_and_refuses_the_launch(tmp_path):
    # 0.1.0's parser has no --pipeline-parallel-size: the server exits at
    # argument parsing, whatever the draft; 0.1.1 reads the flag.
    draft = fabricate(tmp_path / "d", family="dflash_gqa")
    launch = "--pipeline-parallel-size 2 --disaggregation-mode prefill"
    old = check_checkpoint(draft, engine="tokenspeed@0.1.0", launch=launch)
    [refusal] = [f for f in old.errors if f.code == "LCH001"]
    assert refusal.detail["flag"] == "--pipeline-parallel-size" and "0.1.0" in refusal.message
    assert [row["outcome"] for row in old.engine_verdicts()] == ["refused"]
    assert check_checkpoint(draft, engine="tokenspeed@0.1.0", launch="--speculative-num-steps 3").passed()
    # 0.1.1 has the flag: it refuses a DFlash drafter on a pipeline, for the family, not the flag
    newer = check_checkpoint(draft, engine="tokenspeed@0.1.1", launch=launch)
    assert [f.detail.get("flag") for f in newer.errors if f.code == "LCH001"] == [None]
