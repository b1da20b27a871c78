"""DFlash2 drafts: a DFlash draft (fc, hidden_norm, norm, decoder layers)
whose every layer wraps its attention and its MLP in a grouped dynamic
convolution, and whose drafted tokens are picked by a low-rank candidate
selector over the head's top-k.

Shapes as the three codebases that build it agree on them:
TokenSpeed's `DFlash2DraftModel`
(tokenspeed/runtime/models/dflash2.py@tokenspeed==0.1.1:126-187 the
convolution, 213-264 the selector, 286-357 the layer, 408-438 the model),
vLLM's `DFlash2Qwen3ForCausalLM`
(vllm/model_executor/models/qwen3_dflash2.py@vllm==0.33.0:170-227, 314-358,
361-389), SGLang's `DFlash2DraftModel`
(sglang/srt/models/dflash.py@sglang==0.5.23:536-591 the convolution,
1142-1261 the selector, 1264-1302 the model) and speculators' trainer
(speculators/models/dflash2/model_definitions.py@speculators==0.9.0:105-137,
243-266; core.py:36-70):

* `layers.N.{attention,mlp}_conv.base_kernel` [2, conv_kernel_size, hidden]
  and `.kernel_projection.weight` [2 * conv_kernel_size * groups, hidden],
  groups = hidden / conv_group_size;
* `candidate_selector.{predecessor,successor}_codebook` [vocab, rank] and
  `.hidden_projection.weight` [rank, hidden].

The context projection is DFlash's: `hidden_norm(fc(concat(taps)))`, fc of
taps x hidden_size in TokenSpeed (models/dflash.py::DFlashDraftModel.__init__
@tokenspeed==0.1.1:381-398), no fc_norm.

TokenSpeed also builds an MLA attention (Kimi-K3 DSpark's) when
`attention_mode` is "mla" (models/dflash2.py@tokenspeed==0.1.1:55-56,
305-345); vLLM, SGLang and speculators build Qwen3 GQA attention only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from dspark.schema.families.base import DECODER_MLP_AND_NORMS, TensorRule
from dspark.schema.families.dflash_gqa import DFLASH_GQA, gqa_head_dim

# The four fields the model is built from: TokenSpeed reads each from
# dflash_config when that holds the key (null included), else the top level
# (models/dflash2.py::_dflash2_config_value@tokenspeed==0.1.1:50-52); vLLM
# from dflash_config only (qwen3_dflash2.py@vllm==0.33.0:248-256, 376-386).
BUILD_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
# Read at serve time, never at build: they change what is drafted, not
# whether it loads (models/dflash2.py@tokenspeed==0.1.1:427-429;
# execution/drafter/dflash2.py@tokenspeed==0.1.1:86-91;
# qwen3_dflash2.py@vllm==0.33.0:376-379, 400-406).
SERVE_FIELDS = ("input_embedding_scale", "output_multiplier", "final_logit_softcapping")


def dflash2_value(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A field as TokenSpeed's `_dflash2_config_value` reads it:
    `dflash_config.get(key, config.key)`: the nested key whenever present."""
    nested = config.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    return nested.get(key, config.get(key, default))


def nested_value(config: Mapping[str, Any], key: str) -> Any:
    """dflash_config[key], None when absent: vLLM's reading."""
    nested = config.get("dflash_config")
    return nested.get(key) if isinstance(nested, Mapping) else None


def uses_mla(config: Mapping[str, Any]) -> bool:
    """TokenSpeed's model: `str(attention_mode or "gqa").lower() == "mla"`,
    nested first (models/dflash2.py::_dflash2_uses_mla@tokenspeed==0.1.1:55-56)."""
    return str(dflash2_value(config, "attention_mode", "gqa")).lower() == "mla"


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _conv_taps(config: Mapping[str, Any]) -> Any:
    """conv_kernel_size (dflash_config first, then the top level)."""
    return _int_or_none(dflash2_value(config, "conv_kernel_size"))


def _conv_groups(config: Mapping[str, Any]) -> Any:
    """hidden_size // conv_group_size (None where the engine refuses the pair)."""
    group = _int_or_none(dflash2_value(config, "conv_group_size"))
    hidden = config.get("hidden_size")
    if not group or group < 1 or not isinstance(hidden, int) or hidden % group:
        return None
    return hidden // group


def _selector_rank(config: Mapping[str, Any]) -> Any:
    """selector_rank (dflash_config first, then the top level)."""
    return _int_or_none(dflash2_value(config, "selector_rank"))


def _o_head(config: Mapping[str, Any]) -> Any:
    """v_head_dim for MLA attention, else the GQA head_dim (o_proj's input per head)."""
    return config.get("v_head_dim") if uses_mla(config) else gqa_head_dim(config)


def _derived(config: Mapping[str, Any], architecture: str | None) -> dict[str, bool]:
    mla = uses_mla(config)
    return {"mla": mla, "gqa": not mla, "attention_bias": not mla and bool(config.get("attention_bias", False))}


_CONV = tuple(
    rule
    for side in ("attention_conv", "mlp_conv")
    for rule in (
        TensorRule(f"layers.{{n}}.{side}.base_kernel", ("2", "conv_taps", "h")),
        # Zero at initialisation, where the convolution is its base kernel
        # alone (speculators/models/dflash2/model_definitions.py::
        # GroupedDynamicCausalConv.reset_parameters@speculators==0.9.0:138-143):
        # all zeros is a draft served as trained, not a lost weight (no PAY004).
        TensorRule(f"layers.{{n}}.{side}.kernel_projection.weight", ("2*conv_taps*conv_groups", "h"),
                   role="dynamic_delta"),
    )
)

DFLASH2 = dataclasses.replace(
    DFLASH_GQA,
    name="dflash2",
    description="DFlash2 draft (DFlash with grouped dynamic convolutions and a candidate selector; GQA or MLA)",
    # No model_type of its own: the config is a Qwen3 (GQA) or DeepSeek-V3 (MLA)
    # config naming the class.
    model_types=(),
    architectures=("DFlash2DraftModel",),
    legacy_architectures=(),
    schema_file="dflash2.schema.json",
    dims={
        **DFLASH_GQA.dims,
        "conv_taps": _conv_taps,
        "conv_groups": _conv_groups,
        "rank": _selector_rank,
        "q_lora": "q_lora_rank",
        "kv_lora": "kv_lora_rank",
        "qk_nope": "qk_nope_head_dim",
        "qk_rope": "qk_rope_head_dim",
        "v_head": "v_head_dim",
        "o_head": _o_head,
    },
    tensors=(
        TensorRule("fc.weight", ("h", "S*tw"), role="context_proj"),
        TensorRule("hidden_norm.weight", ("h",), role="context_norm"),
        TensorRule("norm.weight", ("h",), role="norm"),
        # No parameter of any engine's model: listed so that shipped fc_norm
        # weights are recognised and refused by name.
        TensorRule("fc_norm.{i}.weight", ("h",), role="fc_norm", when="fc_norm"),
        TensorRule("candidate_selector.predecessor_codebook", ("vocab", "rank")),
        TensorRule("candidate_selector.successor_codebook", ("vocab", "rank")),
        TensorRule("candidate_selector.hidden_projection.weight", ("rank", "h")),
        *DECODER_MLP_AND_NORMS,
        *_CONV,
        # GQA: DFlash's Qwen3 attention (models/dflash.py@tokenspeed==0.1.1:58-141).
        TensorRule("layers.{n}.self_attn.q_proj.weight", ("nh*hd", "h"), when="gqa"),
        TensorRule("layers.{n}.self_attn.k_proj.weight", ("nkv*hd", "h"), when="gqa"),
        TensorRule("layers.{n}.self_attn.v_proj.weight", ("nkv*hd", "h"), when="gqa"),
        # One o_proj for both attentions: its input is heads x head_dim (GQA)
        # or heads x v_head_dim (MLA).
        TensorRule("layers.{n}.self_attn.o_proj.weight", ("h", "nh*o_head")),
        TensorRule("layers.{n}.self_attn.q_proj.bias", ("nh*hd",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.k_proj.bias", ("nkv*hd",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.v_proj.bias", ("nkv*hd",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.o_proj.bias", ("h",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.q_norm.weight", ("hd",), role="norm", when="gqa"),
        TensorRule("layers.{n}.self_attn.k_norm.weight", ("hd",), role="norm", when="gqa"),
        # MLA: Kimi-K3 DSpark's attention (models/dflash2.py@tokenspeed==0.1.1:307-330),
        # the K3 family's names and shapes.
        TensorRule("layers.{n}.self_attn.q_a_proj.weight", ("q_lora", "h"), when="mla"),
        TensorRule("layers.{n}.self_attn.q_a_layernorm.weight", ("q_lora",), role="norm", when="mla"),
        TensorRule("layers.{n}.self_attn.q_b_proj.weight", ("nh*(qk_nope+qk_rope)", "q_lora"), when="mla"),
        TensorRule("layers.{n}.self_attn.kv_a_proj_with_mqa.weight", ("kv_lora+qk_rope", "h"), when="mla"),
        TensorRule("layers.{n}.self_attn.kv_a_layernorm.weight", ("kv_lora",), role="norm", when="mla"),
        TensorRule("layers.{n}.self_attn.kv_b_proj.weight", ("nh*(qk_nope+v_head)", "kv_lora"), when="mla"),
    ),
    # TorchSpec's and native exports' names for the context projection, as DFlash's.
    renames=dict(DFLASH_GQA.renames),
    derived_features=_derived,
)
