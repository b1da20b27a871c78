"""EAGLE-3 Llama drafts (`LlamaForCausalLMEagle3`): one Llama decoder layer
named `midlayer` whose attention reads [embedding, hidden] (2 x hidden_size),
`fc` over the taps, optional fc_norm / norm_before_fc, the draft's own head
and its `d2t` token map.

Shapes are those TokenSpeed builds (python/tokenspeed/runtime/models/
llama_eagle3.py@f4d8ec6e:235-263, 457-498, 612-631; models/llama.py@f4d8ec6e:
148-160): fc is [hidden_size, hidden_size x taps] (target_hidden_size is never
read for it), every fc_norm is [hidden_size], input_norm is
[hidden_size x taps], the width of each tap `th` (an engine that builds fc
from target_hidden_size, as SGLang does, sizes input_norm so too). The config is a transformers config (model_type llama,
qwen2, qwen3, ...); the loader's name handling lives in
`dspark.schema.engines.tokenspeed`, with what TokenSpeed builds and
refuses beyond the shapes (one layer, the fc width, the tap counts).
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.families.base import DraftFamily, TensorRule, head_dim_or_split
from dspark.schema.families.eagle3_common import (
    DEFAULT_TAP_COUNT,
    EAGLE3_NAMES_BY_PART,
    EAGLE3_RENAMES,
    SHARED_TENSORS,
    TAP_IDS_FIELD,
    head_rows,
    target_capture_ids,
    trainer_tap_count,
    trainer_tap_width,
)


def _derived(config: Mapping[str, Any], architecture: str | None) -> dict[str, bool]:
    # models/llama.py@f4d8ec6e:160: q/k/v/o biases when attention_bias.
    return {"attention_bias": bool(config.get("attention_bias", False))}


EAGLE3_LLAMA = DraftFamily(
    name="eagle3_llama",
    description="EAGLE-3 Llama draft (midlayer, fc over taps, own head and d2t)",
    # Recognised by architecture only: model_type is a plain transformers
    # type (llama, qwen3, ...) that says nothing about EAGLE-3.
    model_types=(),
    architectures=("LlamaForCausalLMEagle3",),
    # speculators' name for the same draft (speculators/algos.py:39-46@vllm==0.33.0);
    # TokenSpeed registers only LlamaForCausalLMEagle3.
    legacy_architectures=("Eagle3LlamaForCausalLM",),
    schema_file="eagle3_llama.schema.json",
    dims={
        "h": "hidden_size",
        "inter": "intermediate_size",
        "N": "num_hidden_layers",
        "nh": "num_attention_heads",
        "nkv": lambda c: c.get("num_key_value_heads", c.get("num_attention_heads")),
        "hd": head_dim_or_split,
        "vocab": "vocab_size",
        "draft_vocab": head_rows,
        "S": trainer_tap_count,
        # Each fc_norm is hidden_size wide in TokenSpeed's build (an engine that builds
        # it otherwise overrides "fcn" in its loader's dims).
        "fcn": "hidden_size",
        "th": trainer_tap_width,
        # Each fc_norm is hidden_size wide as TokenSpeed builds it (an
        # engine that builds it otherwise overrides "fcn" in its loader's dims).
        "fcn": "hidden_size",
    },
    tensors=(
        *SHARED_TENSORS,
        TensorRule("input_norm.weight", ("S*th",), role="norm", when="norm_before_fc"),
        TensorRule("midlayer.self_attn.q_proj.weight", ("nh*hd", "2*h")),
        TensorRule("midlayer.self_attn.k_proj.weight", ("nkv*hd", "2*h")),
        TensorRule("midlayer.self_attn.v_proj.weight", ("nkv*hd", "2*h")),
        TensorRule("midlayer.self_attn.o_proj.weight", ("h", "nh*hd")),
        TensorRule("midlayer.self_attn.q_proj.bias", ("nh*hd",), when="attention_bias"),
        TensorRule("midlayer.self_attn.k_proj.bias", ("nkv*hd",), when="attention_bias"),
        TensorRule("midlayer.self_attn.v_proj.bias", ("nkv*hd",), when="attention_bias"),
        TensorRule("midlayer.self_attn.o_proj.bias", ("h",), when="attention_bias"),
        # A draft of several layers (num_hidden_layers > 1) names the layers
        # after the first `layers.{n}`; they read the hidden state alone
        # (h wide) and normalise it with their hidden_norm, their
        # input_layernorm unused (sglang/srt/models/llama_eagle3.py:46-119@sglang==0.5.23).
        TensorRule("layers.{n}.hidden_norm.weight", ("h",), role="norm", start=1),
        TensorRule("layers.{n}.input_layernorm.weight", ("h",), role="norm", optional=True, start=1),
        TensorRule("layers.{n}.post_attention_layernorm.weight", ("h",), role="norm", start=1),
        TensorRule("layers.{n}.self_attn.q_proj.weight", ("nh*hd", "h"), start=1),
        TensorRule("layers.{n}.self_attn.k_proj.weight", ("nkv*hd", "h"), start=1),
        TensorRule("layers.{n}.self_attn.v_proj.weight", ("nkv*hd", "h"), start=1),
        TensorRule("layers.{n}.self_attn.o_proj.weight", ("h", "nh*hd"), start=1),
        TensorRule("layers.{n}.mlp.gate_proj.weight", ("inter", "h"), start=1),
        TensorRule("layers.{n}.mlp.up_proj.weight", ("inter", "h"), start=1),
        TensorRule("layers.{n}.mlp.down_proj.weight", ("h", "inter"), start=1),
    ),
    skipped_prefixes=(),
    training_only_prefixes=("t2d",),
    renames=EAGLE3_RENAMES,
    names_by_part=EAGLE3_NAMES_BY_PART,
    tap_ids=target_capture_ids,
    default_tap_count=DEFAULT_TAP_COUNT,
    tap_ids_field=TAP_IDS_FIELD,
    tap_ids_section="eagle_config",
    tap_count_field=None,
    target_width_field="target_hidden_size",
    target_width_fallback="hidden_size",
    declared_features=("fc_norm", "norm_before_fc"),
    derived_features=_derived,
    needs_mask_token=False,
)
