"""vLLM 0.33.0's loader for EAGLE-3 drafts whose layer is Qwen3's
(`Eagle3Qwen3ForCausalLM`, registered also as `PeagleQwen3ForCausalLM`;
speculators' EAGLE-3 with a `qwen3` layer): the Llama EAGLE-3 draft's
loading code (the same `load_weights`, mapper, d2t, embedding and head
rules) over Qwen3 decoder layers, whose attention loads a per-head `q_norm`
and `k_norm` (RMSNorm(head_dim) each) and has no o_proj bias.

Where it differs from the Llama class: fc counts `num_aux_layers`, then
`num_aux_hidden_states`, then the top-level tap list, then eagle_config's,
else 3 (qwen3_eagle3.py:201-210), so a draft that writes its ids only at
the top level gets fc for as many taps as the runner captures.
`load_weights` returns nothing (qwen3_eagle3.py:398-446), so the default
loader never checks what was loaded: a q_norm/k_norm left out is served as
allocated, all ones, without a word.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DRAFT_IF_SHIPPED,
    DROPPED,
    FIRST_PRESENT,
    FIRST_TRUTHY,
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
    BIAS_WITHOUT_DESTINATION,
    DEFAULT_LOADER,
    DEFAULT_TAPS_TEXT,
    EAGLE_SHARING,
    HIDDEN_STATES_NUMBERING,
    MODEL_UTILS,
    QWEN3,
    QWEN3_EAGLE3,
    ROTARY_CACHES,
    SILU_ONLY_SOURCES,
    TARGET_TAPS,
    TARGET_TAPS_SOURCE,
    TAPS_OUTSIDE,
    WEIGHT_UTILS,
    at,
    default_taps,
    launch_method,
    silu_only,
    tap_agreement,
    tap_order,
    target_hidden_size_not_null,
    width_value,
)
from dspark.schema.engines.vllm.eagle3_llama import LLAMA_DEFAULTS
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD

_QE3 = QWEN3_EAGLE3

# Qwen3Eagle3Model sizes fc from num_aux_layers, else num_aux_hidden_states
# (each when not null), else the length of the top-level list or, when that
# is empty, eagle_config's, else 3 (qwen3_eagle3.py:201-210).
DRAFT_TAPS = TapPaths(paths=(TAP_IDS_FIELD, f"eagle_config.{TAP_IDS_FIELD}"), pick=FIRST_TRUTHY)

TAPS = TapReading(
    target=TARGET_TAPS,
    draft=DRAFT_TAPS,
    numbering=HIDDEN_STATES_NUMBERING,
    source=TARGET_TAPS_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=3,
    count_fields=("num_aux_layers", "num_aux_hidden_states"),
)

# transformers' Qwen3Config defaults at the release vLLM 0.33.0 installs
# (transformers 5.20.2, models/qwen3/configuration_qwen3.py:62-78): a
# qwen3 draft config without head_dim gets 128, not hidden_size // heads.
QWEN3_DEFAULTS = {
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768,
}


def _fc_width(config: Mapping[str, Any]) -> Any:
    # getattr(config, "target_hidden_size", hidden_size) (qwen3_eagle3.py:211-214), for fc and each fc_norm (228).
    return width_value(config, "target_hidden_size", "hidden_size")


LIMITS = (launch_method("eagle3"), silu_only(SILU_ONLY_SOURCES["qwen"]),
          target_hidden_size_not_null(at("211-214", _QE3, "Qwen3Eagle3Model.__init__")),
          tap_order(TARGET_TAPS),
          tap_agreement(TAPS, "num_aux_layers, else num_aux_hidden_states, else the top-level list, else "
                        "eagle_config's, else 3", at("201-210", _QE3, "Qwen3Eagle3Model.__init__")))

LOADER = FamilyLoader(
    family="eagle3_qwen3",
    model_class="Eagle3Qwen3ForCausalLM",
    # Any model_type transformers' AutoConfig parses; the Qwen3 layer reads
    # head_dim with getattr (qwen3.py:209) and the rest as Llama's does.
    model_types=("qwen3", "qwen2", "llama", "mistral"),
    # load_weights (qwen3_eagle3.py:398-446): a name holding "t2d" is
    # skipped; "d2t" becomes draft_id_to_target_id with no prefix; every
    # other name without "lm_head" gets "model." prepended, then the model's
    # mapper makes "midlayer." "layers.0." and stacks q/k/v and gate/up
    # (143-152). q_norm and k_norm keep their names. A stored `model.`
    # prefix lands on model.model.* and is refused.
    name_rewrites=((r"^.*t2d.*$", "t2d"), (r"^layers\.0\.", "midlayer.")),
    skips=(SkipRule(r"t2d", "the target-to-draft table is never read", at("404-405", _QE3,
                                                                          "Eagle3Qwen3ForCausalLM.load_weights")),
           ROTARY_CACHES,
           SkipRule(r"mask_hidden", "parallel drafting only: logged and skipped otherwise", at("409-420", _QE3,
                                                                                               "Eagle3Qwen3ForCausalLM.load_weights"))),
    fused=(
        FusedParameter(
            "midlayer.self_attn.qkv_proj.weight",
            ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
             "midlayer.self_attn.v_proj.weight"),
            # No shard id: QKVParallelLinear splits a pre-fused tensor by its
            # sizes (vllm/model_executor/layers/linear.py:1116-1175).
            fused_accepted=True, partial_passes=True, source=at("143-152", _QE3, "Qwen3Eagle3Model.hf_to_vllm_mapper"),
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("143-152", _QE3, "Qwen3Eagle3Model.hf_to_vllm_mapper"),
        ),
    ),
    # AutoWeightsLoader raises ValueError on a name without a destination
    # (model_executor/models/utils.py:425-448); a shipped o_proj.bias (Qwen3
    # builds none) ends in ".bias" and is dropped (457-458).
    unexpected="rejects",
    unexpected_dropped=(BIAS_WITHOUT_DESTINATION,),
    # load_weights returns None, so DefaultModelLoader never compares what was
    # loaded with the parameters (default_loader.py:503-523): a parameter
    # left out is served as allocated (a norm's ones, layers/layernorm.py:65-67).
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=at(
            "224-233, 389-394 (Eagle3Qwen3ForCausalLM.combine_hidden_states)", _QE3, "Qwen3Eagle3Model.__init__")),
        # eagle_config.norm_before_fc wins over the top level (175-179).
        "norm_before_fc": FeatureSupport(supported=True, source=at("175-179, 215-222", _QE3,
                                                                   "Qwen3Eagle3Model.__init__")),
        "norm_output": FeatureSupport(supported=True, source=at("245, 273-276 (Qwen3Eagle3Model.forward)",
                                                                _QE3, "Qwen3Eagle3Model.__init__")),
        "norm_before_residual": FeatureSupport(supported=True, source=at("85-102", _QE3, "Qwen3Eagle3DecoderLayer")),
    },
    # ids 0..N, as for the Llama class: the target's capture is the same.
    tap_low=0,
    tap_high_offset=0,
    tap_final_residual=False,
    taps_outside_range=TAPS_OUTSIDE,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    # d2t: a parameter only when draft_vocab_size (vocab_size when absent or
    # null) differs from the target's vocabulary, else a shipped d2t has no
    # destination (qwen3_eagle3.py:291-295, 317-324); copied into that
    # int64 parameter by the default loader (model_loader/weight_utils.py:
    # 1529-1543). Embedding and head: the draft's when shipped and unlike
    # the target's (process_eagle_weight, 426; model_executor/models/utils.py:
    # 1178-1198; v1/worker/gpu/spec_decode/eagle/utils.py:18-34, 45-119).
    vocab=VocabHandling(d2t=REJECTED_WHEN_FULL_VOCAB, t2d=DROPPED, embedding=DRAFT_IF_SHIPPED,
                        source=at("291-295, 317-324, 398-446 (Eagle3Qwen3ForCausalLM.load_weights)", _QE3,
                                  "Eagle3Qwen3ForCausalLM.__init__"), d2t_buffer="I64"),
    head_from_target="not_shipped",
    dims={"th": _fc_width, "S": TAPS.draft_count, "fcn": _fc_width},
    sources={
        "load_weights": at("398-446", _QE3, "Eagle3Qwen3ForCausalLM.load_weights"),
        "name mapper": at("143-152", _QE3, "Qwen3Eagle3Model.hf_to_vllm_mapper"),
        "layers": at("34-88, 190-200 (Qwen3Eagle3Model.__init__)", _QE3, "Qwen3Eagle3DecoderLayer"),
        "q_norm / k_norm": at("153-169", QWEN3, "Qwen3Attention"),
        "head_dim": at("100, 209 (Qwen3DecoderLayer.__init__)", QWEN3, "Qwen3Attention.__init__"),
        "taps (draft)": at("201-210", _QE3, "Qwen3Eagle3Model.__init__"),
        "taps (target)": TARGET_TAPS_SOURCE,
        "fc width": at("211-243", _QE3, "Qwen3Eagle3Model.__init__"),
        "lm_head": at("307-316", _QE3, "Eagle3Qwen3ForCausalLM.__init__"),
        "d2t": at("317-324", _QE3, "Eagle3Qwen3ForCausalLM.__init__"),
        "embedding": at("18-34, 45-77 (maybe_share_target_embed)", EAGLE_SHARING, "_should_share"),
        "unknown names": at("425-448", MODEL_UTILS, "AutoWeightsLoader._load_module"),
        "never loaded": at("503-523", DEFAULT_LOADER, "DefaultModelLoader.load_weights"),
        "shape": at("1529-1543", WEIGHT_UTILS, "default_weight_loader"),
        "attention bias": at("68-80", _QE3, "Qwen3Eagle3DecoderLayer.__init__"),
        "o_proj bias": at("115-121", QWEN3, "Qwen3Attention.__init__"),
    },
    config_defaults={"qwen3": QWEN3_DEFAULTS, "llama": LLAMA_DEFAULTS},
    # eagle_config.norm_before_fc, else the top level (qwen3_eagle3.py:175-179).
    flag_sources={"norm_before_fc": TapPaths(paths=("eagle_config.norm_before_fc", "norm_before_fc"),
                                             pick=FIRST_PRESENT)},
)
