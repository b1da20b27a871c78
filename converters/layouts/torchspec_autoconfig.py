"""The draft config TorchSpec generates when a run names none.

TorchSpec's default run sets `model.draft_model_config: null`
(configs/default.yaml@6f21829:7). Training then builds a Llama EAGLE-3
config from the target model and never saves it
(torchspec/train_entry.py@6f21829:184-195). The function that builds it is
`generate_draft_model_config` (torchspec/config/utils.py@6f21829:61-149),
and TorchSpec's exporter writes the same dict with `tie_word_embeddings`
false and `draft_vocab_size` set (tools/convert_to_hf.py@6f21829:170-188).

dspark makes the same dict from the target's `config.json` and
`tokenizer.json`, without transformers:

* `architectures` `["LlamaForCausalLMEagle3"]`, `model_type` `llama`;
* thirteen fields copied from the target's text config (`text_config`
  when there is one, else the top level): vocab_size, hidden_size, num_attention_heads,
  num_key_value_heads, intermediate_size, max_position_embeddings,
  rope_theta, rope_scaling, rms_norm_eps, hidden_act, bos_token_id,
  eos_token_id, torch_dtype;
* `vocab_size` raised to the tokenizer's length when that is larger
  (`len(tokenizer)`: the distinct tokens of tokenizer.json's model
  vocabulary and added tokens, and of the special tokens
  tokenizer_config.json names, which transformers adds when missing; a
  tokenizer class that adds default special tokens of its own, named
  nowhere in the files, is not counted: a vocabulary that then differs
  from the checkpoint's embedding rows fails the shape checks);
* a YaRN `rope_scaling` completed with beta_fast 32, beta_slow 1, mscale 1,
  mscale_all_dim 0 where unset (`_normalize_rope_scaling`), and a legacy
  `type` key copied to `rope_type`, as transformers' config classes do;
* `num_hidden_layers` 1, `tie_word_embeddings` false, `use_cache` true,
  `draft_vocab_size` = `vocab_size`.

transformers fills a field the target's config.json leaves out with its
config class's default, which dspark does not know. Where one that changes
the draft's arithmetic or shapes is missing, nothing is generated and the
reason says so; `num_key_value_heads` defaults to the head count (as every
transformers decoder config does), and `rope_scaling`, `bos_token_id`,
`eos_token_id` and `torch_dtype` to null.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.converters.json_input import parse_json_object

ARCHITECTURE = "LlamaForCausalLMEagle3"
COPIED_FIELDS = (
    "vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "max_position_embeddings", "rope_theta", "rope_scaling", "rms_norm_eps", "hidden_act",
    "bos_token_id", "eos_token_id", "torch_dtype",
)
# Without these the generated draft would be built at a guessed width or
# compute a guessed function.
REQUIRED_FIELDS = (
    "vocab_size", "hidden_size", "num_attention_heads", "intermediate_size", "max_position_embeddings",
    "rope_theta", "rms_norm_eps", "hidden_act",
)
_YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}
_MAX_CONFIG_BYTES = 16 << 20
_MAX_TOKENIZER_BYTES = 512 << 20

SOURCE = "torchspec/config/utils.py@6f21829:61-149"


@dataclass(frozen=True)
class GeneratedConfig:
    """The config, or why none could be made; `tokenizer_length` when the
    tokenizer raised the vocabulary."""

    config: dict[str, Any] | None
    problem: str | None = None
    tokenizer_length: int | None = None


def generate_draft_config(target: Path) -> GeneratedConfig:
    """TorchSpec's generated EAGLE-3 draft config for the target folder."""
    try:
        top = parse_json_object(target / "config.json", max_bytes=_MAX_CONFIG_BYTES)
    except (OSError, ValueError) as exc:
        return GeneratedConfig(None, f"the target's config.json cannot be read ({exc})")
    if not isinstance(top, dict):
        return GeneratedConfig(None, "the target's config.json is not a JSON object")
    text = top.get("text_config") if isinstance(top.get("text_config"), dict) else top

    def field(name: str) -> tuple[bool, Any]:
        # transformers reads every field from the text config's own class,
        # defaults included, so a top-level value never stands in for one.
        if name in text:
            return True, text[name]
        if name == "torch_dtype" and "dtype" in text:  # the newer name of the same field
            return True, text["dtype"]
        return False, None

    missing = [name for name in REQUIRED_FIELDS if not field(name)[0]]
    if missing:
        return GeneratedConfig(None, f"the target's config.json leaves out {', '.join(missing)}, which transformers "
                                     "fills with its config class's defaults; dspark does not know them")

    config: dict[str, Any] = {"architectures": [ARCHITECTURE], "model_type": "llama"}
    for name in COPIED_FIELDS:
        present, value = field(name)
        if not present:
            if name == "num_key_value_heads":
                value = field("num_attention_heads")[1]
            else:
                value = None
        config[name] = copy.deepcopy(value)
    config["rope_scaling"] = _normalised_rope_scaling(config["rope_scaling"])

    length, problem = tokenizer_length(target)
    if problem is not None:
        return GeneratedConfig(None, problem)
    raised = None
    if isinstance(config["vocab_size"], int) and length > config["vocab_size"]:
        config["vocab_size"] = raised = length

    config["num_hidden_layers"] = 1
    config["tie_word_embeddings"] = False
    config["use_cache"] = True
    config["draft_vocab_size"] = config["vocab_size"]
    return GeneratedConfig(config, None, raised)


def _normalised_rope_scaling(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = dict(value)
    if "type" in out and "rope_type" not in out:
        out["rope_type"] = out["type"]
    if out.get("rope_type", out.get("type")) == "yarn":
        for key, default in _YARN_DEFAULTS.items():
            if out.get(key) is None:
                out[key] = default
    return out


def tokenizer_length(target: Path) -> tuple[int, str | None]:
    """`len(tokenizer)` of the target's fast tokenizer: the distinct tokens
    of tokenizer.json's model vocabulary and added tokens, and the special
    tokens tokenizer_config.json names."""
    path = target / "tokenizer.json"
    if not path.is_file():
        return 0, ("the target has no tokenizer.json, whose length TorchSpec uses as the vocabulary size when it "
                   "is larger than the config's")
    try:
        data = parse_json_object(path, max_bytes=_MAX_TOKENIZER_BYTES)
    except (OSError, ValueError) as exc:
        return 0, f"the target's tokenizer.json cannot be read ({exc})"
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = data.get("added_tokens") or []
    if isinstance(vocab, dict):
        tokens = set(vocab)
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs
        tokens = {entry[0] for entry in vocab if isinstance(entry, list) and entry and isinstance(entry[0], str)}
    else:
        vocab = None
    if vocab is None or not isinstance(added, list):
        return 0, ("the target's tokenizer.json has no model vocabulary and added_tokens list dspark can count "
                   "(tokenizer.json's model.vocab, added_tokens)")
    tokens |= {entry["content"] for entry in added if isinstance(entry, dict) and isinstance(entry.get("content"), str)}
    tokens |= _configured_special_tokens(target / "tokenizer_config.json")
    return len(tokens), None


_SPECIAL_SLOTS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _configured_special_tokens(path: Path) -> set[str]:
    """Special tokens tokenizer_config.json names: transformers adds any
    that the vocabulary lacks when it loads the tokenizer."""
    try:
        config = parse_json_object(path, max_bytes=_MAX_CONFIG_BYTES) if path.is_file() else {}
    except (OSError, ValueError):
        config = {}
    if not isinstance(config, dict):
        return set()

    def content(value: Any) -> str | None:
        if isinstance(value, dict):
            value = value.get("content")
        return value if isinstance(value, str) else None

    named = [config.get(slot) for slot in _SPECIAL_SLOTS]
    extra = config.get("additional_special_tokens")
    named += extra if isinstance(extra, list) else []
    decoder = config.get("added_tokens_decoder")
    named += list(decoder.values()) if isinstance(decoder, dict) else []
    return {text for text in map(content, named) if text is not None}
