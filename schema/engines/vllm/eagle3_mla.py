"""vLLM 0.33.0's loader for EAGLE-3 MLA drafts (`Eagle3DeepseekV2ForCausalLM`,
also `Eagle3DeepseekV3ForCausalLM`): an MLA decoder layer, fc built for
target_hidden_size per tap, fc_norm, norm_output and norm_before_residual
honoured, no input_norm (norm_before_fc is not served), `d2t` only when the
draft's vocabulary is smaller than the target's, any other name without a
destination refused."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DRAFT_IF_SHIPPED,
    DROPPED,
    FIRST_TRUTHY,
    REJECTED_WHEN_FULL_VOCAB,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    TapPaths,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.vllm.common import (
    BIAS_WITHOUT_DESTINATION,
    DEEPSEEK_EAGLE3,
    DEEPSEEK_V2,
    DEFAULT_LOADER,
    DEFAULT_TAPS_TEXT,
    EAGLE_SHARING,
    HIDDEN_STATES_NUMBERING,
    MODEL_UTILS,
    ROTARY_CACHES,
    SILU_ONLY_SOURCES,
    T2D,
    TARGET_TAPS,
    TARGET_TAPS_SOURCE,
    TAPS_OUTSIDE,
    at,
    default_taps,
    engine_refusal,
    launch_method,
    silu_only,
    tap_agreement,
    tap_order,
    target_hidden_size_not_null,
    width_value,
)
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.findings import Finding

_DE3 = DEEPSEEK_EAGLE3

# DeepseekV2Eagle3Model sizes fc from num_aux_hidden_states, else
# eagle_config's list, else 3 (deepseek_eagle3.py:189-194).
TAPS = TapReading(
    target=TARGET_TAPS,
    draft=TapPaths(paths=(f"eagle_config.{TAP_IDS_FIELD}",), pick=FIRST_TRUTHY),
    numbering=HIDDEN_STATES_NUMBERING,
    source=TARGET_TAPS_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=3,
    count_fields=("num_aux_hidden_states",),
)

# transformers' DeepseekV3Config defaults (kimi_k2 parses as DeepseekV3Config
# too: transformers_utils/config.py:141).
DEEPSEEK_V3_DEFAULTS = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
    "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-6,
}


# model_type llama parses into transformers' LlamaConfig, which keeps the MLA
# fields it does not know as attributes (transformers 5.20; no defaults for
# them); the registry picks the model class from `architectures` alone
# (model_executor/models/registry.py:1420-1470), and the MLA layer reads
# those attributes off whatever config class holds them
# (deepseek_eagle3.py:57-83). Absent, the dimensions read 0 and q_lora_rank
# None (`mla_fields_without_defaults`); the rest take LlamaConfig's defaults.
LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "rms_norm_eps": 1e-6,
}
# The config classes without defaults for the MLA fields.
_PLAIN_MODEL_TYPES = ("llama",)
_MLA_DIMENSIONS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_fields_without_defaults(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Under a config class with no MLA defaults, an MLA dimension left out
    is `getattr(config, name, 0)`: zero-width projections the shipped
    weights do not fit (refused at load, or a weight never written)."""
    if config.get("model_type") not in _PLAIN_MODEL_TYPES:
        return []
    missing = [name for name in _MLA_DIMENSIONS if name not in config]
    if not missing:
        return []
    return [engine_refusal(
        config_file, f"model_type {config.get('model_type')!r} parses into a config class with no MLA fields, and "
        f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} absent: the MLA layer reads "
        f"getattr(config, name, 0) = 0 and builds zero-width projections: the shipped weights are refused at "
        "load or never written",
        at("57-83", _DE3, "DeepseekV2Eagle3DecoderLayer.__init__"), missing[0],
        f"Write {', '.join(missing)} in the config, or set model_type to deepseek_v3.")]


def _fc_width(config: Mapping[str, Any]) -> Any:
    # getattr(config, "target_hidden_size", hidden_size) (deepseek_eagle3.py:196-199)
    return width_value(config, "target_hidden_size", "hidden_size")


def q_lora_rank_required(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Without q_lora_rank the attention builds q_proj and a standalone
    kv_a_proj_with_mqa (deepseek_v2.py:1051-1097), but the draft's mapper
    still stacks kv_a_proj_with_mqa into fused_qkv_a_proj, which then has no
    destination: the load fails."""
    if config.get("q_lora_rank") is not None:
        return []
    if "q_lora_rank" in config:
        why = "q_lora_rank is null"
    elif config.get("model_type") in _PLAIN_MODEL_TYPES:
        # `config.q_lora_rank if hasattr(config, "q_lora_rank") else None` (deepseek_eagle3.py:74)
        why = (f"q_lora_rank is absent and model_type {config.get('model_type')!r} parses into a config class "
               "without it, so the layer reads None")
    else:
        return []  # DeepseekV2/V3Config default it (config_defaults)
    return [engine_refusal(config_file, f"{why}; the EAGLE-3 MLA mapper renames kv_a_proj_with_mqa "
                           "to fused_qkv_a_proj, which a layer without q_lora_rank does not build, and the load "
                           "fails", at("74, 259-266", _DE3,
                                       "DeepseekV2Eagle3DecoderLayer.__init__"), "q_lora_rank", "Train and serve with q_lora_rank set.")]


LIMITS = (launch_method("eagle3"), silu_only(SILU_ONLY_SOURCES["deepseek"]),
          target_hidden_size_not_null(at("196-199", _DE3, "DeepseekV2Eagle3Model.__init__")),
          q_lora_rank_required, mla_fields_without_defaults, tap_order(TARGET_TAPS),
          tap_agreement(TAPS, "num_aux_hidden_states, else eagle_config's list, else 3", at("189-194", _DE3,
                                                                                            "DeepseekV2Eagle3Model.__init__")))

LOADER = FamilyLoader(
    family="eagle3_mla",
    model_class="Eagle3DeepseekV2ForCausalLM",
    # llama too: LlamaConfig keeps the MLA fields as attributes and the
    # class comes from `architectures` (LLAMA_DEFAULTS says what it fills).
    # Not deepseek_v3: the draft's config override turns that model_type into
    # deepseek_mtp with architectures [DeepSeekMTPModel], which the eagle3
    # rename makes Eagle3DeepSeekMTPModel, a class the registry does not have
    # (config/speculative.py::SpeculativeConfig.hf_config_override@0.33.0:749-763;
    # transformers_utils/configs/eagle.py:55-64): refused at startup. Found by
    # running that code; convert writes kimi_k2.
    model_types=("kimi_k2", "deepseek_v2", "llama"),
    # Same load_weights as the Llama draft (deepseek_eagle3.py:370-398):
    # "t2d" skipped, "d2t" renamed, "model." prepended to everything but
    # lm_head, then "midlayer." -> "layers.0." (259-266).
    name_rewrites=((r"^.*t2d.*$", "t2d"), (r"^layers\.0\.", "midlayer.")),
    skips=(T2D, ROTARY_CACHES),
    fused=(
        FusedParameter(
            "midlayer.self_attn.fused_qkv_a_proj.weight",
            ("midlayer.self_attn.q_a_proj.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight"),
            # A pre-fused fused_qkv_a_proj matches no stacked substring and is
            # loaded whole, split by the layer's output sizes.
            fused_accepted=True, partial_passes=True, source=at("259-266", _DE3,
                                                                "DeepseekV2Eagle3Model.hf_to_vllm_mapper"),
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("259-266", _DE3,
                                                                "DeepseekV2Eagle3Model.hf_to_vllm_mapper"),
        ),
    ),
    unexpected="rejects",
    unexpected_dropped=(BIAS_WITHOUT_DESTINATION,),
    # load_weights returns None: nothing compares loaded with built.
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=at(
            "211-220, 357-368 (Eagle3DeepseekV2ForCausalLM.combine_hidden_states)", _DE3,
            "DeepseekV2Eagle3Model.__init__")),
        "norm_before_fc": FeatureSupport(
            supported=False,
            source=at("152-226 (no input_norm)", _DE3, "DeepseekV2Eagle3Model"),
            when_unsupported="DeepseekV2Eagle3Model has no input_norm: a declaration is ignored and a shipped "
            "input_norm.weight has no destination, which fails the load",
        ),
        "norm_output": FeatureSupport(supported=True, source=at("222-256", _DE3, "DeepseekV2Eagle3Model")),
        "norm_before_residual": FeatureSupport(supported=True, source=at("101-118", _DE3,
                                                                         "DeepseekV2Eagle3DecoderLayer")),
    },
    # DeepSeek-V2/V3 targets capture hidden_states + residual entering layer
    # k, and id N after the last layer; at layer 0 the residual is None and
    # the sum raises TypeError (deepseek_v2.py:1525-1587).
    tap_low=1,
    tap_high_offset=0,
    tap_final_residual=False,  # the range above already ends at the last layer's output
    taps_outside_range=TAPS_OUTSIDE,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    # d2t is copied into an int64 parameter (deepseek_eagle3.py:309-312, 378-379;
    # model_loader/weight_utils.py:1529-1543): a float table of integers loads exactly,
    # a fractional entry is truncated toward zero (its values are read: rules/token_map.py).
    vocab=VocabHandling(d2t=REJECTED_WHEN_FULL_VOCAB, t2d=DROPPED, embedding=DRAFT_IF_SHIPPED,
                        source=at("282-314, 370-398 (Eagle3DeepseekV2ForCausalLM.load_weights)",
                                  _DE3, "Eagle3DeepseekV2ForCausalLM.__init__"), d2t_buffer="I64"),
    head_from_target="not_shipped",
    dims={"th": _fc_width, "S": TAPS.draft_count, "fcn": _fc_width},
    # targets_without_capture stays empty: every Llama/Qwen2/Qwen3(-MoE)/DeepSeek/Kimi
    # target captures (EagleModelMixin; common.EAGLE3_TARGET_CLASSES).
    sources={
        "load_weights": at("370-398", _DE3, "Eagle3DeepseekV2ForCausalLM.load_weights"),
        "name mapper": at("259-266", _DE3, "DeepseekV2Eagle3Model.hf_to_vllm_mapper"),
        "taps (draft)": at("189-194", _DE3, "DeepseekV2Eagle3Model.__init__"),
        "taps (target)": TARGET_TAPS_SOURCE,
        "capture": at("1546-1587", DEEPSEEK_V2, "DeepseekV2Model.forward"),
        "fc width": at("196-209", _DE3, "DeepseekV2Eagle3Model.__init__"),
        "lm_head": at("298-306", _DE3, "Eagle3DeepseekV2ForCausalLM.__init__"),
        "d2t": at("307-314", _DE3, "Eagle3DeepseekV2ForCausalLM.__init__"),
        "embedding": at("18-34, 45-77 (maybe_share_target_embed)", EAGLE_SHARING, "_should_share"),
        "unknown names": at("425-448", MODEL_UTILS, "AutoWeightsLoader._load_module"),
        "never loaded": at("503-523", DEFAULT_LOADER, "DefaultModelLoader.load_weights"),
    },
    config_defaults={"deepseek_v3": DEEPSEEK_V3_DEFAULTS, "kimi_k2": DEEPSEEK_V3_DEFAULTS, "llama": LLAMA_DEFAULTS},
    # convert writes kimi_k2 for llama (LlamaConfig defaults no MLA field).
    generic_model_types=("llama",),
    # MLA attention uses num_attention_heads only.
    ignored_fields=("num_key_value_heads",),
)
