"""TorchSpec's default run names no draft config (`model.draft_model_config:
null`): it trains on a Llama EAGLE-3 config generated from the target and
never saves it (torchspec/config/utils.py@6f21829:61-149). dspark makes the
same config from the target's config.json and tokenizer.json. The expected
dicts below are what TorchSpec's own `generate_draft_model_config` (with
transformers 4.57.1) returned for the same target files, plus the exporter's
`tie_word_embeddings`/`draft_vocab_size` (tools/convert_to_hf.py@6f21829:170-188)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from test_torchspec_layouts import dspark  # noqa: E402
from test_torchspec_run_training import RUN_YAML  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.layouts.torchspec_autoconfig import generate_draft_config, tokenizer_length  # noqa: E402
from dspark.examples.fabricate import eagle3_tensors  # noqa: E402

TARGET = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 16,
    "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 96, "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
    "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}
GENERATED = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
    "vocab_size": 96, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 48, "max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_scaling": None,
    "rms_norm_eps": 1e-5, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    "num_hidden_layers": 1, "tie_word_embeddings": False, "use_cache": True, "draft_vocab_size": 96,
}


def tokenizer_json(vocab: int, added: list[tuple[str, int]] = (), model: dict | None = None) -> dict:
    """A word-level tokenizer.json, every field the tokenizers library
    needs to load it: `vocab` tokens, then `added` ones."""
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for c, i in added],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": model or {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(vocab)}, "unk_token": "w0"},
    }


def write_target(folder: Path, config: dict = TARGET, tokenizer: dict | None = None,
                 tokenizer_config: dict | None = None) -> Path:
    """A target folder as a Llama-3 one is laid out: config.json,
    tokenizer.json and a tokenizer_config.json naming the generic fast class."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer is not False:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer or tokenizer_json(90, [("<s>", 90)])))
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", **(tokenizer_config or {})}))
    return folder


def test_the_config_torchspec_generates_from_a_llama_target(tmp_path: Path) -> None:
    generated = generate_draft_config(write_target(tmp_path / "target"))
    assert generated.problem is None and generated.tokenizer_length is None
    assert generated.config == GENERATED


def test_a_tokenizer_longer_than_the_vocabulary_sets_it(tmp_path: Path) -> None:
    # VLMs resize their embeddings after the config is written: TorchSpec
    # takes len(tokenizer) when it is larger.
    added = [("<img>", 96), ("<s>", 3), ("</img>", 97)]  # "<s>" is a new string at an existing id
    target = write_target(tmp_path / "target", tokenizer=tokenizer_json(96, added))
    assert tokenizer_length(target) == (99, None)
    generated = generate_draft_config(target)
    assert generated.config["vocab_size"] == generated.config["draft_vocab_size"] == 99
    assert generated.tokenizer_length == 99


def test_special_tokens_the_tokenizer_config_names_are_counted(tmp_path: Path) -> None:
    """transformers adds a configured special token the vocabulary lacks."""
    extra = {"additional_special_tokens": ["<x>", "w5"], "pad_token": {"content": "<pad>", "__type": "AddedToken"},
             "eos_token": None}
    target = write_target(tmp_path / "target", tokenizer=tokenizer_json(96, [("<img>", 96), ("<s>", 3), ("</img>", 97)]),
                          tokenizer_config=extra)
    assert tokenizer_length(target) == (101, None)  # 96 + <img> + <s> + </img> + <x> + <pad>


def test_a_unigram_vocabulary_is_counted(tmp_path: Path) -> None:
    unigram = {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -2.0]]}
    tokenizer = tokenizer_json(0, [("<pad>", 3), ("a", 1)], model=unigram)
    assert tokenizer_length(write_target(tmp_path / "target", tokenizer=tokenizer)) == (5, None)  # and <s>


def test_rope_scaling_is_normalised_as_torchspec_and_transformers_do(tmp_path: Path) -> None:
    config = dict(TARGET, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
                                        "beta_fast": None})
    generated = generate_draft_config(write_target(tmp_path / "target", config)).config
    assert generated["rope_scaling"] == {"type": "yarn", "rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 2048, "beta_fast": 32.0,
                                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}


def test_a_text_config_is_where_the_fields_come_from(tmp_path: Path) -> None:
    # A multimodal target: the language model's fields, never the wrapper's.
    config = {"model_type": "llava", "hidden_size": 999, "text_config": {**TARGET, "num_key_value_heads": None}}
    del config["text_config"]["num_key_value_heads"]
    generated = generate_draft_config(write_target(tmp_path / "target", config)).config
    assert generated["hidden_size"] == 32
    assert generated["num_key_value_heads"] == 4  # the head count, as every transformers decoder config defaults it


@pytest.mark.parametrize("missing", ["rope_theta", "rms_norm_eps", "hidden_act", "intermediate_size"])
def test_a_field_transformers_would_default_is_not_guessed(tmp_path: Path, missing: str) -> None:
    config = {k: v for k, v in TARGET.items() if k != missing}
    generated = generate_draft_config(write_target(tmp_path / "target", config))
    assert generated.config is None
    assert missing in generated.problem and "defaults" in generated.problem


@pytest.mark.parametrize("tokenizer", [
    {"model": {"vocab": {"a": 0}}, "added_tokens": 5},
    {"model": {"vocab": "a b"}},
], ids=["added-not-a-list", "vocab-a-string"])
def test_a_tokenizer_json_dspark_cannot_count_is_said_not_guessed(tmp_path: Path, tokenizer: dict) -> None:
    length, problem = tokenizer_length(write_target(tmp_path / "target", tokenizer=tokenizer))
    assert "tokenizer.json" in problem and "dspark can count" in problem


def test_tokens_that_are_not_strings_are_not_counted(tmp_path: Path) -> None:
    tokenizer = {"model": {"vocab": [[["a"], 0.0], ["b", 0.0]]}, "added_tokens": [{"content": ["<s>"]}]}
    assert tokenizer_length(write_target(tmp_path / "target", tokenizer=tokenizer)) == (2, None)  # b, and <s> configured


def test_a_target_path_naming_an_unknown_user_is_not_here(tmp_path: Path) -> None:
    run = default_run(tmp_path / "run", "~no-such-user-here/model")
    [missing] = [f for f in check_checkpoint(run).errors if f.code == "CFG001"]
    assert "is not a folder here" in missing.message


def test_without_a_tokenizer_json_nothing_is_generated(tmp_path: Path) -> None:
    generated = generate_draft_config(write_target(tmp_path / "target", tokenizer=False))
    assert generated.config is None and "tokenizer.json" in generated.problem


# --------------------------------------------------------------------------
# A default TorchSpec run, end to end


def default_run(root: Path, target: str) -> Path:
    """A run as TorchSpec's default config writes it: the draft trained on
    the generated config, `draft_model_config: null` in config.yaml."""
    model = root / "checkpoints" / "iter_0000003" / "model"
    tensors = eagle3_tensors(dict(GENERATED))
    dcp.save({"model_state": {"model": {"draft_model": tensors}}}, checkpoint_id=str(model), no_dist=True)
    (root / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    (root / "config.yaml").write_text(RUN_YAML.format(draft_config="null", aux=" null", block=16, target=target))
    return root


def test_a_default_torchspec_run_converts_with_one_command(tmp_path: Path) -> None:
    target = write_target(tmp_path / "target")
    run = default_run(tmp_path / "run", str(target))
    report = check_checkpoint(run, verdict="contents")
    assert report.errors == [], [f.message for f in report.errors]
    [generated] = [f for f in report.findings if f.code == "SRC007" and f.detail.get("source") == "generated"]
    assert "never saved" in generated.message and str(target) in generated.message

    out = tmp_path / "served"
    converted = dspark("convert", str(run), str(out))
    assert converted.returncode == 0, converted.stdout + converted.stderr
    config = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in GENERATED} == GENERATED
    # the run sets no tap list: TorchSpec captured [1, N//2-1, N-4] of the 16-layer target
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 7, 12]
    checked = dspark("check", str(out), "--deep", "--strict", "--target", str(target))
    assert checked.returncode == 0, checked.stdout


def test_a_default_run_whose_target_is_not_here_says_what_to_do(tmp_path: Path) -> None:
    run = default_run(tmp_path / "run", "meta-llama/Llama-3.1-8B-Instruct")
    [missing] = [f for f in check_checkpoint(run).errors if f.code == "CFG001"]
    assert "never saves it" in missing.message and "pass --config" in missing.message
    assert "'meta-llama/Llama-3.1-8B-Instruct', is not a folder here" in missing.message
