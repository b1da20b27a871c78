"""EAGLE-3 MLA drafts (`Eagle3DeepseekV2ForCausalLM`, Kimi-K2.5 / DeepSeek
targets): one DeepSeek-V3 MLA decoder layer named `midlayer` whose
q_a/kv_a projections read [embedding, hidden] (2 x hidden_size), `fc` over
the taps, optional fc_norm, the draft's own head and its `d2t` token map.

Shapes are those TokenSpeed builds (python/tokenspeed/runtime/models/
deepseek_v3.py@f4d8ec6e:532-594, 1995-2048, 2110-2175, 2282-2310): fc is
[hidden_size, target_hidden_size x taps] (target_hidden_size defaults to
hidden_size), every fc_norm is [hidden_size] (not target_hidden_size), and
there is no input_norm: norm_before_fc is not implemented. The config must
parse into a DeepSeek-V3 config class (model_type deepseek_v3, or kimi_k2,
which TokenSpeed registers as a subclass), whose MLA attributes the engine
reads (configs/model_config.py@f4d8ec6e:58-71, 206-217).
"""

from __future__ import annotations

from dspark.schema.families.base import DraftFamily, TensorRule
from dspark.schema.families.eagle3_common import (
    DEFAULT_TAP_COUNT,
    EAGLE3_NAMES_BY_PART,
    EAGLE3_RENAMES,
    SHARED_TENSORS,
    TAP_IDS_FIELD,
    head_rows,
    target_capture_ids,
    trainer_tap_count,
)


EAGLE3_MLA = DraftFamily(
    name="eagle3_mla",
    description="EAGLE-3 MLA draft (midlayer with MLA attention, fc over taps, own head and d2t)",
    model_types=(),
    architectures=("Eagle3DeepseekV2ForCausalLM",),
    # TorchSpec's name before its commit 6897040; no TokenSpeed model
    # registers it (models/registry.py@f4d8ec6e:102-118).
    # (Eagle3DeepseekV3ForCausalLM: the name vLLM also registers, registry.py:713@vllm==0.33.0.)
    legacy_architectures=("DeepSeekForCausalLMEagle3", "Eagle3DeepseekV3ForCausalLM"),
    schema_file="eagle3_mla.schema.json",
    dims={
        "h": "hidden_size",
        "inter": "intermediate_size",
        "N": "num_hidden_layers",
        "nh": "num_attention_heads",
        "vocab": "vocab_size",
        "draft_vocab": head_rows,
        "S": trainer_tap_count,
        # Each fc_norm is hidden_size wide in TokenSpeed's build (an engine that builds
        # it otherwise overrides "fcn" in its loader's dims).
        "fcn": "hidden_size",
        "th": lambda c: c.get("target_hidden_size", c.get("hidden_size")),
        "q_lora": "q_lora_rank",
        "kv_lora": "kv_lora_rank",
        "qk_nope": "qk_nope_head_dim",
        "qk_rope": "qk_rope_head_dim",
        "v_head": "v_head_dim",
    },
    tensors=(
        *SHARED_TENSORS,
        # Not a parameter of this model: listed so that shipped weights are
        # recognised and refused by name (ENG001).
        TensorRule("input_norm.weight", ("S*th",), role="norm", when="norm_before_fc"),
        TensorRule("midlayer.self_attn.q_a_proj.weight", ("q_lora", "2*h")),
        TensorRule("midlayer.self_attn.q_a_layernorm.weight", ("q_lora",), role="norm"),
        TensorRule("midlayer.self_attn.q_b_proj.weight", ("nh*(qk_nope+qk_rope)", "q_lora")),
        TensorRule("midlayer.self_attn.kv_a_proj_with_mqa.weight", ("kv_lora+qk_rope", "2*h")),
        TensorRule("midlayer.self_attn.kv_a_layernorm.weight", ("kv_lora",), role="norm"),
        TensorRule("midlayer.self_attn.kv_b_proj.weight", ("nh*(qk_nope+v_head)", "kv_lora")),
        TensorRule("midlayer.self_attn.o_proj.weight", ("h", "nh*v_head")),
        # A draft of several layers (num_hidden_layers > 1, which vLLM builds)
        # names the layers after the first `layers.{n}`; they read the hidden
        # state alone (h wide), normalised by input_layernorm; their
        # hidden_norm is built but unused
        # (vllm/model_executor/models/deepseek_eagle3.py:63-97, 120-148, 172-182@vllm==0.33.0).
        TensorRule("layers.{n}.hidden_norm.weight", ("h",), role="norm", optional=True, start=1),
        TensorRule("layers.{n}.input_layernorm.weight", ("h",), role="norm", start=1),
        TensorRule("layers.{n}.post_attention_layernorm.weight", ("h",), role="norm", start=1),
        TensorRule("layers.{n}.self_attn.q_a_proj.weight", ("q_lora", "h"), start=1),
        TensorRule("layers.{n}.self_attn.q_a_layernorm.weight", ("q_lora",), role="norm", start=1),
        TensorRule("layers.{n}.self_attn.q_b_proj.weight", ("nh*(qk_nope+qk_rope)", "q_lora"), start=1),
        TensorRule("layers.{n}.self_attn.kv_a_proj_with_mqa.weight", ("kv_lora+qk_rope", "h"), start=1),
        TensorRule("layers.{n}.self_attn.kv_a_layernorm.weight", ("kv_lora",), role="norm", start=1),
        TensorRule("layers.{n}.self_attn.kv_b_proj.weight", ("nh*(qk_nope+v_head)", "kv_lora"), start=1),
        TensorRule("layers.{n}.self_attn.o_proj.weight", ("h", "nh*v_head"), start=1),
        TensorRule("layers.{n}.mlp.gate_proj.weight", ("inter", "h"), start=1),
        TensorRule("layers.{n}.mlp.up_proj.weight", ("inter", "h"), start=1),
        TensorRule("layers.{n}.mlp.down_proj.weight", ("h", "inter"), start=1),
    ),
    skipped_prefixes=(),
    training_only_prefixes=("t2d",),
    # TokenSpeed's MLA loader drops `language_model.` from a name it does
    # not find (models/deepseek_v3.py@f4d8ec6e:1724-1737): convert writes the name without it.
    removed_infixes=("language_model.",),
    renames=EAGLE3_RENAMES,
    names_by_part=EAGLE3_NAMES_BY_PART,
    tap_ids=target_capture_ids,
    default_tap_count=DEFAULT_TAP_COUNT,
    tap_ids_field=TAP_IDS_FIELD,
    tap_ids_section="eagle_config",
    tap_count_field=None,
    target_width_field="target_hidden_size",
    # getattr(config, "target_hidden_size", config.hidden_size) (models/deepseek_v3.py@f4d8ec6e:2142-2143)
    target_width_fallback="hidden_size",
    declared_features=("fc_norm", "norm_before_fc"),
    needs_mask_token=False,
)
