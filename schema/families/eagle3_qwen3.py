"""EAGLE-3 drafts whose decoder layer is Qwen3's (`Eagle3Qwen3ForCausalLM`):
the Llama EAGLE-3 draft's `midlayer`, `fc` over the taps, norms, own head
and `d2t`, with Qwen3 attention, which RMS-normalises every query and key
head with its own weight (`self_attn.q_norm`, `self_attn.k_norm`, each
[head_dim]) and has no output-projection bias.

speculators writes such a draft when its layer is a Qwen3 layer
(`transformer_layer_config.model_type: qwen3`; vLLM builds it as
Eagle3Qwen3ForCausalLM, vllm/transformers_utils/configs/speculators/
algos.py:38-46@vllm==0.33.0), and so does any trainer that names the class.
Shapes are those vLLM 0.33.0 builds (vllm/model_executor/models/
qwen3_eagle3.py:34-102, 142-249; models/qwen3.py:65-174@vllm==0.33.0), the
one engine dspark models that has the class: TokenSpeed and SGLang register
no model for it. Each engine's loader (`dspark.schema.engines.*`) says how
many taps it builds fc for and what it does with each name.
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
    # q/k/v biases when attention_bias; o_proj never has one
    # (qwen3_eagle3.py:68-80, qwen3.py:106-121@vllm==0.33.0).
    return {"attention_bias": bool(config.get("attention_bias", False))}


def _layer(prefix: str, reads: str, start: int | None = None) -> tuple[TensorRule, ...]:
    """The attention block of one layer reading `reads` wide inputs."""
    extra = {} if start is None else {"start": start}
    return (
        TensorRule(f"{prefix}.self_attn.q_proj.weight", ("nh*hd", reads), **extra),
        TensorRule(f"{prefix}.self_attn.k_proj.weight", ("nkv*hd", reads), **extra),
        TensorRule(f"{prefix}.self_attn.v_proj.weight", ("nkv*hd", reads), **extra),
        TensorRule(f"{prefix}.self_attn.o_proj.weight", ("h", "nh*hd"), **extra),
        # RMSNorm(head_dim), applied to every head (qwen3.py:153-169@vllm==0.33.0).
        TensorRule(f"{prefix}.self_attn.q_norm.weight", ("hd",), role="norm", **extra),
        TensorRule(f"{prefix}.self_attn.k_norm.weight", ("hd",), role="norm", **extra),
        TensorRule(f"{prefix}.self_attn.q_proj.bias", ("nh*hd",), when="attention_bias", **extra),
        TensorRule(f"{prefix}.self_attn.k_proj.bias", ("nkv*hd",), when="attention_bias", **extra),
        TensorRule(f"{prefix}.self_attn.v_proj.bias", ("nkv*hd",), when="attention_bias", **extra),
    )


EAGLE3_QWEN3 = DraftFamily(
    name="eagle3_qwen3",
    description="EAGLE-3 draft with a Qwen3 layer (midlayer with per-head q_norm/k_norm, fc over taps, own head "
    "and d2t)",
    model_types=(),
    architectures=("Eagle3Qwen3ForCausalLM",),
    schema_file="eagle3_qwen3.schema.json",
    dims={
        "h": "hidden_size",
        "inter": "intermediate_size",
        "N": "num_hidden_layers",
        "nh": "num_attention_heads",
        "nkv": lambda c: c.get("num_key_value_heads", c.get("num_attention_heads")),
        # getattr(config, "head_dim", None) or hidden_size // num_attention_heads
        # (qwen3.py:100, 209@vllm==0.33.0); a qwen3 config class fills in 128.
        "hd": head_dim_or_split,
        "vocab": "vocab_size",
        "draft_vocab": head_rows,
        "S": trainer_tap_count,
        "th": trainer_tap_width,
        # Each fc_norm is one tap wide (an engine's loader says how wide it builds it).
        "fcn": trainer_tap_width,
    },
    tensors=(
        *SHARED_TENSORS,
        TensorRule("input_norm.weight", ("S*th",), role="norm", when="norm_before_fc"),
        *_layer("midlayer", "2*h"),
        # The layers after the first, `layers.{n}`, read the hidden state
        # alone (h wide) normalised by their input_layernorm; their
        # hidden_norm is built and never used (qwen3_eagle3.py:64-66, 82,
        # 111-118@vllm==0.33.0).
        TensorRule("layers.{n}.hidden_norm.weight", ("h",), role="norm", optional=True, start=1),
        TensorRule("layers.{n}.input_layernorm.weight", ("h",), role="norm", start=1),
        TensorRule("layers.{n}.post_attention_layernorm.weight", ("h",), role="norm", start=1),
        *_layer("layers.{n}", "h", start=1),
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
