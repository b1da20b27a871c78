"""Kimi-K3 DSpark drafts: MLA attention, a Markov head, optional fc_norm.

Shapes are those `K3DSparkModel` builds (tokenspeed
python/tokenspeed/runtime/models/kimi_k3_dspark.py@4b9766f6:305-347); the
loader's name handling lives in `dspark.schema.engines.tokenspeed`.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.families.base import (
    DECODER_MLP_AND_NORMS,
    SHARED_DIMS,
    DraftFamily,
    TensorRule,
)


def _top_level_taps(config: Mapping[str, Any]) -> tuple[Any, str | None]:
    # The model and its validator read the top-level list
    # (configs/kimi_k3_dspark_config.py@4b9766f6:111, 206-229).
    if "target_layer_ids" in config:
        return config["target_layer_ids"], "target_layer_ids"
    return None, None


K3_DSPARK = DraftFamily(
    name="k3_dspark",
    description="Kimi-K3 DSpark draft (MLA attention, Markov head)",
    model_types=("k3_dspark",),
    architectures=("K3DSparkModel",),
    schema_file="k3_dspark.schema.json",
    dims={
        **SHARED_DIMS,
        "th": "target_hidden_size",
        "S": "num_target_layers",
        "q_lora": "q_lora_rank",
        "kv_lora": "kv_lora_rank",
        "qk_nope": "qk_nope_head_dim",
        "qk_rope": "qk_rope_head_dim",
        "v_head": "v_head_dim",
        "markov": "markov_rank",
        "cm": lambda c: c.get("markov_rank") if c.get("confidence_head_with_markov") else 0,
    },
    tensors=(
        TensorRule("context_proj.weight", ("h", "S*th"), role="context_proj"),
        TensorRule("context_norm.weight", ("h",), role="context_norm"),
        TensorRule("final_norm.weight", ("h",), role="norm"),
        # VanillaMarkov(vocab_size, markov_rank): both tables are vocab_size
        # rows; draft_vocab_size is never read (models/dspark.py@4b9766f6:60-61).
        TensorRule("markov_head.markov_w1.weight", ("vocab", "markov")),
        TensorRule("markov_head.markov_w2.weight", ("vocab", "markov")),
        TensorRule("fc_norm.{i}.weight", ("th",), role="fc_norm", when="fc_norm"),
        # The confidence head a draft trained with enable_confidence_head ships
        # (training-only to a loader that skips it): [1, hidden_size (+ markov_rank
        # with confidence_head_with_markov)] and its bias.
        # Optional: it serves only adaptive verification, and convert leaves it behind.
        TensorRule("confidence_head.proj.weight", ("1", "h+cm"), when="confidence_head", optional=True),
        TensorRule("confidence_head.proj.bias", ("1",), when="confidence_head", optional=True),
        *DECODER_MLP_AND_NORMS,
        TensorRule("layers.{n}.self_attn.q_a_proj.weight", ("q_lora", "h")),
        TensorRule("layers.{n}.self_attn.q_a_layernorm.weight", ("q_lora",), role="norm"),
        TensorRule("layers.{n}.self_attn.q_b_proj.weight", ("nh*(qk_nope+qk_rope)", "q_lora")),
        TensorRule("layers.{n}.self_attn.kv_a_proj_with_mqa.weight", ("kv_lora+qk_rope", "h")),
        TensorRule("layers.{n}.self_attn.kv_a_layernorm.weight", ("kv_lora",), role="norm"),
        TensorRule("layers.{n}.self_attn.kv_b_proj.weight", ("nh*(qk_nope+v_head)", "kv_lora")),
        TensorRule("layers.{n}.self_attn.o_proj.weight", ("h", "nh*v_head")),
    ),
    tap_ids=_top_level_taps,
    tap_count_field="num_target_layers",
    target_width_field="target_hidden_size",
    declared_features=("fc_norm",),
    derived_features=lambda config, architecture: {"confidence_head": bool(config.get("enable_confidence_head"))},
)
