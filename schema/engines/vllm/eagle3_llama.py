"""vLLM 0.33.0's loader for EAGLE-3 Llama drafts (`Eagle3LlamaForCausalLM`,
registered also as `LlamaForCausalLMEagle3`): fc built for
target_hidden_size per tap, fc_norm, norm_before_fc, norm_output and
norm_before_residual honoured, `d2t` loaded only when the draft's vocabulary
is smaller than the target's, any other name without a destination refused.

Its tap count comes from `num_aux_hidden_states` or eagle_config's list
(3 without either) while the default runner captures the top-level list:
a draft that writes its ids only at the top level gets fc for 3 taps.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DRAFT_IF_SHIPPED,
    FIRST_PRESENT,
    FIRST_TRUTHY,
    DROPPED,
    REJECTED_WHEN_FULL_VOCAB,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    TapPaths,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.vllm.common import (
    launch_method,
    BIAS_WITHOUT_DESTINATION,
    DEFAULT_LOADER,
    DEFAULT_TAPS_TEXT,
    EAGLE_SHARING,
    HIDDEN_STATES_NUMBERING,
    LLAMA,
    LLAMA_EAGLE3,
    MODEL_UTILS,
    ROTARY_CACHES,
    SILU_ONLY_SOURCES,
    T2D,
    TARGET_TAPS,
    TARGET_TAPS_SOURCE,
    TAPS_OUTSIDE,
    at,
    default_taps,
    silu_only,
    tap_agreement,
    tap_order,
    target_hidden_size_not_null,
    width_value,
)
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD

_LE3 = LLAMA_EAGLE3

# LlamaModel sizes fc from config.num_aux_hidden_states, else the length of
# eagle_config.eagle_aux_hidden_state_layer_ids, else 3: the top-level list
# is not counted (model_executor/models/llama_eagle3.py:209-216).
DRAFT_TAPS = TapPaths(paths=(f"eagle_config.{TAP_IDS_FIELD}",), pick=FIRST_TRUTHY)

TAPS = TapReading(
    target=TARGET_TAPS,
    draft=DRAFT_TAPS,
    numbering=HIDDEN_STATES_NUMBERING,
    source=TARGET_TAPS_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=3,
    count_fields=("num_aux_hidden_states",),
)

# transformers' LlamaConfig defaults (the config class vLLM parses a llama
# config.json with, transformers_utils/config.py:340-420).
LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "rms_norm_eps": 1e-6,
}


def _fc_width(config: Mapping[str, Any]) -> Any:
    # getattr(config, "target_hidden_size", hidden_size) (llama_eagle3.py:218-221)
    return width_value(config, "target_hidden_size", "hidden_size")


LIMITS = (launch_method("eagle3"), silu_only(SILU_ONLY_SOURCES["llama"]),
          target_hidden_size_not_null(at("218-221", _LE3, "LlamaModel.__init__")),
          tap_order(TARGET_TAPS),
          tap_agreement(TAPS, "num_aux_hidden_states, else eagle_config's list, else 3", at("209-216", _LE3,
                                                                                            "LlamaModel.__init__")))

LOADER = FamilyLoader(
    family="eagle3_llama",
    model_class="Eagle3LlamaForCausalLM",
    # Any model_type transformers' AutoConfig parses (llama, qwen2, qwen3,
    # mistral, ...); the Llama layers read only the Llama fields.
    model_types=("llama", "qwen2", "qwen3", "mistral"),
    # load_weights: a name holding "t2d" is skipped; "d2t" becomes
    # draft_id_to_target_id with no prefix; every other name without
    # "lm_head" gets "model." prepended, then "midlayer." becomes
    # "layers.0." (llama_eagle3.py:290-299, 420-470). A stored `model.`
    # prefix therefore lands on model.model.* and is refused, as is
    # `model.d2t` and `model.lm_head.*`.
    name_rewrites=((r"^.*t2d.*$", "t2d"), (r"^layers\.0\.", "midlayer.")),
    skips=(T2D, ROTARY_CACHES,
           SkipRule(r"mask_hidden", "parallel drafting only: logged and skipped otherwise", at("431-442", _LE3,
                                                                                               "Eagle3LlamaForCausalLM.load_weights"))),
    fused=(
        FusedParameter(
            "midlayer.self_attn.qkv_proj.weight",
            ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
             "midlayer.self_attn.v_proj.weight"),
            # No shard id: QKVParallelLinear splits a pre-fused tensor by its
            # sizes (vllm/model_executor/layers/linear.py:1116-1175).
            fused_accepted=True, partial_passes=True, source=at("290-299", _LE3, "LlamaModel.hf_to_vllm_mapper"),
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("290-299", _LE3, "LlamaModel.hf_to_vllm_mapper"),
        ),
    ),
    # AutoWeightsLoader raises ValueError (model_executor/models/utils.py:425-448).
    unexpected="rejects",
    unexpected_dropped=(BIAS_WITHOUT_DESTINATION,),
    # load_weights returns None, so DefaultModelLoader never compares what was
    # loaded with the parameters (default_loader.py:503-523): a parameter
    # left out is served as allocated.
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=at(
            "231-240, 409-416 (Eagle3LlamaForCausalLM.combine_hidden_states)", _LE3, "LlamaModel.__init__")),
        # eagle_config.norm_before_fc wins over the top level (184-188).
        "norm_before_fc": FeatureSupport(supported=True, source=at("184-188, 223-229", _LE3, "LlamaModel.__init__")),
        "norm_output": FeatureSupport(supported=True, source=at("252, 285-288 (LlamaModel.forward)",
                                                                _LE3, "LlamaModel.__init__")),
        "norm_before_residual": FeatureSupport(supported=True, source=at("101-122", _LE3, "LlamaDecoderLayer")),
    },
    # ids 0..N: the embeddings (0) to the last layer's output (N)
    # (models/llama.py:427-441); no range check.
    tap_low=0,
    tap_high_offset=0,
    tap_final_residual=False,  # the range above already ends at the last layer's output
    taps_outside_range=TAPS_OUTSIDE,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    # d2t: a parameter only when draft_vocab_size (vocab_size when absent or
    # null) differs from the target's vocabulary; a shipped d2t is then
    # refused as a name without destination (llama_eagle3.py:314-316, 338-345).
    # The embedding and head are the draft's when it ships them (and they
    # differ from the target's), else the target's (process_eagle_weight,
    # model_executor/models/utils.py:1178-1198; v1/worker/gpu/spec_decode/eagle/utils.py:18-34, 45-119).
    # A shipped d2t is copied into that int64 parameter by the default
    # loader (`param.data.copy_`, model_loader/weight_utils.py:1529-1543;
    # llama_eagle3.py:340-343, 428-429): a float table of integers loads
    # exactly, a fractional entry is truncated toward zero (its values are
    # read: rules/token_map.py).
    vocab=VocabHandling(d2t=REJECTED_WHEN_FULL_VOCAB, t2d=DROPPED, embedding=DRAFT_IF_SHIPPED,
                        source=at("314-316, 338-345, 420-470 (Eagle3LlamaForCausalLM.load_weights)", _LE3,
                                  "Eagle3LlamaForCausalLM.__init__"), d2t_buffer="I64"),
    head_from_target="not_shipped",
    dims={"th": _fc_width, "S": TAPS.draft_count, "fcn": _fc_width},
    # targets_without_capture stays empty: every Llama/Qwen2/Qwen3(-MoE)/DeepSeek/Kimi
    # target captures (EagleModelMixin; common.EAGLE3_TARGET_CLASSES).
    sources={
        "load_weights": at("420-470", _LE3, "Eagle3LlamaForCausalLM.load_weights"),
        "name mapper": at("290-299", _LE3, "LlamaModel.hf_to_vllm_mapper"),
        "layers": at("80-96, 198-208 (LlamaModel.__init__)", _LE3, "LlamaDecoderLayer.__init__"),
        "taps (draft)": at("209-216", _LE3, "LlamaModel.__init__"),
        "taps (target)": TARGET_TAPS_SOURCE,
        "fc width": at("218-250", _LE3, "LlamaModel.__init__"),
        "lm_head": at("329-337", _LE3, "Eagle3LlamaForCausalLM.__init__"),
        "d2t": at("338-345", _LE3, "Eagle3LlamaForCausalLM.__init__"),
        "embedding": at("18-34, 45-77 (maybe_share_target_embed)", EAGLE_SHARING, "_should_share"),
        "unknown names": at("425-448", MODEL_UTILS, "AutoWeightsLoader._load_module"),
        "never loaded": at("503-523", DEFAULT_LOADER, "DefaultModelLoader.load_weights"),
        "attention bias": at("84-96", _LE3, "LlamaDecoderLayer.__init__"),
        "o_proj bias": at("267-271", LLAMA, "LlamaDecoderLayer.__init__"),
    },
    config_defaults={"llama": LLAMA_DEFAULTS},
    # eagle_config.norm_before_fc, else the top level (llama_eagle3.py:184-188).
    flag_sources={"norm_before_fc": TapPaths(paths=("eagle_config.norm_before_fc", "norm_before_fc"),
                                             pick=FIRST_PRESENT)},
)
