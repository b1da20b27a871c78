"""SGLang 0.5.23's loader for EAGLE-3 MLA drafts (`Eagle3DeepseekV2ForCausalLM`,
sglang/srt/models/kimi_k25_eagle3.py, for Kimi-K2.x / DeepSeek targets):
one layer, fc built for target_hidden_size per tap, fc_norm (or
`use_aux_norm`) and norm_output honoured, no norm_before_fc, `d2t` read as
the hot-token map, unknown names logged and dropped, the q_a/kv_a pair
fused by the loader."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DROPPED,
    FIRST_NOT_NULL,
    FIRST_TRUTHY,
    HOT_TOKEN_MAP,
    TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    TapPaths,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.sglang.common import (
    DEEPSEEK_V2,
    DEEPSEEK_V3_DEFAULTS,
    EAGLE3_NUMBERING,
    EAGLE3_TARGET_CLASSES_SOURCE,
    EAGLE3_TARGET_SOURCE,
    EAGLE3_TARGET_TAPS,
    EAGLE_WORKER,
    LLAMA_DEFAULTS,
    MLA_EAGLE3,
    MODEL_CONFIG,
    NORM_BEFORE_RESIDUAL,
    SPEC_AUX,
    at,
    refused,
    silu_only,
)
from dspark.schema.engines.sglang.taps import EAGLE3_TARGET_CAPTURE, eagle3_tap_rules
from dspark.schema.families.eagle3_common import (
    DEFAULT_TAP_COUNT,
    DEFAULT_TAPS_TEXT,
    TAP_IDS_FIELD,
    default_taps,
    one_layer,
)
from dspark.schema.findings import Finding

_MLA = MLA_EAGLE3

# The draft reads eagle_config's list (an object's key or attribute), then
# the top-level list, each when not null; 3 when neither is set
# (models/kimi_k25_eagle3.py:48-59).
TAPS = TapReading(
    target=EAGLE3_TARGET_TAPS,
    draft=TapPaths(paths=(f"eagle_config.{TAP_IDS_FIELD}", TAP_IDS_FIELD), pick=FIRST_NOT_NULL),
    numbering=EAGLE3_NUMBERING,
    source=EAGLE3_TARGET_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=DEFAULT_TAP_COUNT,
)


def _target_width(config: Mapping[str, Any]) -> Any:
    """`getattr(config, "target_hidden_size", None) or config.hidden_size`
    (models/kimi_k25_eagle3.py:208-210)."""
    return config.get("target_hidden_size") or config.get("hidden_size")


def q_lora_rank_set(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The EAGLE-3 MLA layer raises without q_lora_rank
    (models/kimi_k25_eagle3.py:113-117); absent, DeepseekV3Config fills 1536."""
    if "q_lora_rank" not in config or config["q_lora_rank"] is not None:
        return []
    return [refused(config_file, "q_lora_rank", "q_lora_rank is null: the EAGLE-3 MLA layer widens only the fused "
                    "q_a/kv_a projection and raises ValueError without it", at("113-117", _MLA,
                                                                               "Eagle3MLADecoderLayer.__init__"),
                    "Set q_lora_rank (TorchSpec's MLA drafts use 1536).")]


# The config classes (transformers 5.19.0) with no MLA fields and no
# defaults for them: they keep the ones config.json writes as attributes.
# DeepseekV2Config and DeepseekV3Config (kimi_k2 too) default all five.
_PLAIN_MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma")
_MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_fields_present(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Under a config class without MLA fields an absent one is an
    AttributeError at startup: ModelConfig reads `hf_text_config.kv_lora_rank`
    and the other three dimensions for this architecture
    (configs/model_config.py:1392, 1398-1401), and the EAGLE-3 MLA layer
    reads all five as plain attributes (models/kimi_k25_eagle3.py:95-99)."""
    model_type = config.get("model_type")
    if model_type not in _PLAIN_MODEL_TYPES:
        return []
    missing = [name for name in _MLA_FIELDS if name not in config]
    if not missing:
        return []
    return [refused(config_file, missing[0],
                    f"model_type {model_type!r} parses into a config class with no MLA fields, and "
                    f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} absent: SGLang reads "
                    f"{'it' if len(missing) == 1 else 'them'} as attributes (AttributeError)",
                    at("1392, 1398-1401; models/kimi_k25_eagle3.py:95-99", MODEL_CONFIG,
                       "ModelConfig._derive_model_shapes"),
                    f"Write {', '.join(missing)} in the config, or set model_type to deepseek_v3.")]


LIMITS = (
    one_layer("Eagle3DeepseekV2ForCausalLM", at("243-244", _MLA, "Eagle3MLAModel.__init__").cite()),
    q_lora_rank_set,
    mla_fields_present,
    silu_only("Eagle3DeepseekV2ForCausalLM", at("330-334 (DeepseekV2MLP)", DEEPSEEK_V2, "DeepseekV2MLP.__init__")),
    *eagle3_tap_rules(TAPS, "Eagle3DeepseekV2ForCausalLM", at("48-59, 211-219", _MLA,
                                                              "_get_eagle_aux_layer_count"), at("285-294", _MLA,
                                                                                                                        "Eagle3MLAModel.forward")),
)

LOADER = FamilyLoader(
    family="eagle3_mla",
    model_class="Eagle3DeepseekV2ForCausalLM",
    # An MLA config: transformers' DeepseekV3Config, which SGLang also
    # registers under kimi_k2 (utils/hf_transformers/common.py:229-233).
    # Nothing on the load path reads model_type: get_config builds the class
    # it names (utils/hf_transformers/config.py:336-380), which keeps the MLA
    # keys as attributes, and ModelConfig picks MLA by the architecture
    # (configs/model_config.py:1384-1398); SGLang's own code loads this
    # draft under each of these config classes, filling every parameter,
    # as long as config.json writes the five MLA fields the non-DeepSeek
    # classes do not default (`mla_fields_present`).
    model_types=("deepseek_v3", "kimi_k2", "deepseek_v2", "llama", "qwen2", "qwen3", "qwen3_moe", "mistral",
                 "gemma"),
    # load_weights (models/kimi_k25_eagle3.py:428-501): `d2t`/`t2d` only as a
    # whole name or a `.d2t`/`.t2d` suffix (437-443); a leading `layers.0.`
    # becomes `midlayer.`; every name but `lm_head.*` gets `model.` added, so
    # a stored `model.` prefix finds nothing (model.model.*) and is logged
    # and skipped (494-496).
    name_rewrites=((r"^(?:.*\.)?d2t$", "d2t"), (r"^(?:.*\.)?t2d$", "t2d"), (r"^layers\.0\.", "midlayer.")),
    skips=(SkipRule(r"^t2d$", "the target-to-draft table is never read", at("442-443", _MLA,
                                                                            "Eagle3DeepseekV2ForCausalLM.load_weights")),
           SkipRule(r"rotary_emb\.inv_freq", "a buffer the rotary embedding recomputes; logged and dropped",
                    at("494-496", _MLA, "Eagle3DeepseekV2ForCausalLM.load_weights"))),
    fused=(
        FusedParameter(
            "midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight",
            ("midlayer.self_attn.q_a_proj.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight"),
            fused_accepted=False,
            # Each half is held back until the other arrives; a lone half is
            # never loaded, and nothing notices (467-492).
            partial_passes=True,
            source=at("467-492", _MLA, "Eagle3DeepseekV2ForCausalLM.load_weights"),
            when_pre_fused="drops it without a word: its name holds kv_a_proj_with_mqa, so the loader holds it "
            "back as one half of a pair whose other half never comes, and the fused projection is served "
            "uninitialised",
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            # A pre-stacked gate_up_proj holds no `.gate_proj`/`.up_proj` and is loaded whole.
            fused_accepted=True, partial_passes=True, source=at("430-465", _MLA,
                                                                "Eagle3DeepseekV2ForCausalLM.load_weights"),
        ),
    ),
    unexpected="drops_logged",
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=at("228-241, 287-292 (Eagle3MLAModel.forward)",
                                                            _MLA, "Eagle3MLAModel.__init__")),
        "norm_before_fc": FeatureSupport(
            supported=False,
            source=at("190-255 (no input_norm)", _MLA, "Eagle3MLAModel"),
            when_unsupported="Eagle3MLAModel has no input_norm: a declaration is ignored and shipped weights are "
            "logged and skipped, so the taps reach fc unnormalised",
        ),
    },
    # `config.fc_norm or config.use_aux_norm` (models/kimi_k25_eagle3.py:228-232).
    flag_sources={"fc_norm": TapPaths(("fc_norm", "use_aux_norm"), pick=FIRST_TRUTHY)},
    unread_flags={"norm_before_residual": NORM_BEFORE_RESIDUAL},
    # fc and every fc_norm are built from `target_hidden_size or hidden_size`
    # (models/kimi_k25_eagle3.py:208-241).
    dims={"S": TAPS.draft_count, "th": _target_width, "fcn": _target_width},
    **EAGLE3_TARGET_CAPTURE,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    vocab=VocabHandling(d2t=HOT_TOKEN_MAP, t2d=DROPPED, embedding=TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER,
                        source=at("336-369 (init_lm_head); models/kimi_k25_eagle3.py:404-423", EAGLE_WORKER,
                                  "EagleDraftWorker.init_lm_head")),
    # getattr(config, "draft_vocab_size", None) is None -> the target's
    # embedding and head (models/kimi_k25_eagle3.py:350-364).
    head_from_target="draft_vocab_size_unset",
    sources={
        "target classes": EAGLE3_TARGET_CLASSES_SOURCE,
        "load_weights": at("428-501", _MLA, "Eagle3DeepseekV2ForCausalLM.load_weights"),
        "one layer": at("243-244", _MLA, "Eagle3MLAModel.__init__"),
        "taps (draft)": at("48-59, 211 (Eagle3MLAModel.__init__)", _MLA, "_get_eagle_aux_layer_count"),
        "taps (target)": at("185-196", SPEC_AUX, "_resolve_eagle_aux_hidden_state"),
        "taps vs target": at("3458-3473", DEEPSEEK_V2, "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"),
        "fc width": at("208-219", _MLA, "Eagle3MLAModel.__init__"),
        "lm_head": at("350-364", _MLA, "Eagle3DeepseekV2ForCausalLM.__init__"),
        "d2t": at("437-441", _MLA, "Eagle3DeepseekV2ForCausalLM.load_weights"),
        "embedding": at("336-369", EAGLE_WORKER, "EagleDraftWorker.init_lm_head"),
        "unknown names": at("494-496", _MLA, "Eagle3DeepseekV2ForCausalLM.load_weights"),
    },
    # LlamaConfig fills the usual fields but none of the MLA ones (`mla_fields_present`).
    config_defaults={"deepseek_v3": DEEPSEEK_V3_DEFAULTS, "kimi_k2": DEEPSEEK_V3_DEFAULTS, "llama": LLAMA_DEFAULTS},
    # MLA attention uses num_attention_heads only.
    ignored_fields=("num_key_value_heads",),
)
