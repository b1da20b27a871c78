"""TokenSpeed's loader for EAGLE-3 MLA drafts (`Eagle3DeepseekV2ForCausalLM`,
Kimi-K2.5 / DeepSeek targets), at main (f4d8ec6e): fc built for
target_hidden_size per tap, fc_norm honoured (at hidden_size), no
norm_before_fc, unknown names logged and dropped."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DROPPED,
    FIRST_NOT_NULL,
    HOT_TOKEN_MAP,
    TARGET_UNLESS_WIDTHS_DIFFER,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    Source,
    TapPaths,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.tokenspeed.common import (
    TARGET_CAPTURE,
    TARGETS_WITHOUT_CAPTURE_SOURCE,
    DEEPSEEK_MODEL,
    EAGLE3_TAPS_OUTSIDE,
    EAGLE3_TARGET_SOURCE,
    EAGLE3_TARGET_TAPS,
    FACTORY,
    HF_UTILS,
    MAIN,
    MODEL_CONFIG,
    NORM_BEFORE_RESIDUAL,
    NUMBERING,
    YARN_OR_NONE,
    at_main,
    eagle3_fc_skipped_when_widths_meet,
    eagle3_flags_only_in_eagle_config,
    engine_finding,
    rope_type,
)
from dspark.schema.families.base import is_int
from dspark.schema.families.eagle3_common import (
    DEFAULT_TAP_COUNT,
    DEFAULT_TAPS_TEXT,
    TAP_IDS_FIELD,
    default_taps,
    one_layer,
    tap_agreement_rule,
)
from dspark.schema.findings import Finding

_DS3 = DEEPSEEK_MODEL

# transformers' DeepseekV3Config defaults (transformers 5.12.0, the version
# TokenSpeed pins: python/pyproject.toml@f4d8ec6e:83).
_DEEPSEEK_V3_DEFAULTS = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
    "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-6,
}

# model_type llama is no class of the engine's registry: get_config parses it
# with AutoConfig into transformers' LlamaConfig
# (utils/hf_transformers_utils.py@f4d8ec6e:340-347; @5f1e48b5:244-253), which
# keeps the MLA fields config.json writes as attributes and defaults none of
# them, nor n_routed_experts (transformers 5.12.0,
# models/llama/configuration_llama.py:64-73). The architecture alone picks
# the MLA attention family and the model class
# (configs/model_config.py@f4d8ec6e:58-71, 537-543), which read them off it:
# `mla_config_fields` says what an absent one does.
_LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "rms_norm_eps": 1e-6,
}
_MLA_DIMENSIONS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MOE_LOADER = "python/tokenspeed/runtime/layers/moe/loader.py"

# The MLA draft reads `eagle_config`'s list whenever eagle_config is present
# (the top level is then ignored), else the top level; 3 when the list is
# absent or null (models/deepseek_v3.py@f4d8ec6e:2112-2119, 2139-2140).
TAPS = TapReading(
    target=EAGLE3_TARGET_TAPS,
    draft=TapPaths(paths=(f"eagle_config.{TAP_IDS_FIELD}", TAP_IDS_FIELD), pick=FIRST_NOT_NULL,
                   section_shadows=True),
    numbering=NUMBERING,
    source=EAGLE3_TARGET_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=DEFAULT_TAP_COUNT,
)


def mla_rope_only_yarn(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The MLA EAGLE-3 layer keeps YaRN scaling only and builds a plain
    rotary embedding for any other type, with a log line
    (models/deepseek_v3.py@f4d8ec6e:1950-1969). It compares the type as
    written: "YaRN" is dropped."""
    kind, field = rope_type(config)
    if kind is None or kind in YARN_OR_NONE:
        return []
    return [engine_finding(config_file, f"{field} declares rope type {kind!r}, which the MLA EAGLE-3 layer drops: it "
                           "applies unscaled RoPE", Source(_DS3, "1950-1969", MAIN, "_draft_rope_scaling"), "rope_scaling")]


def mla_fc_norm_width(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The MLA EAGLE-3 model builds each fc_norm at hidden_size but applies
    it to a tap of target_hidden_size (models/deepseek_v3.py@f4d8ec6e:
    2166-2175, 2205-2222): with the two widths apart no fc_norm draft is
    servable, whatever width its weights have."""
    hidden, width = config.get("hidden_size"), config.get("target_hidden_size")
    if not config.get("fc_norm") or not (is_int(hidden) and is_int(width)) or hidden == width:
        return []
    return [engine_finding(config_file, f"fc_norm with target_hidden_size {width} != hidden_size {hidden}: the MLA "
                           f"EAGLE-3 model builds fc_norm {hidden} wide and applies it to {width}-wide taps, which "
                           "fails to load or at the first request", Source(_DS3, "2166-2175, 2205-2222", MAIN,
                                                                           qualname="Eagle3MlaModel"),
                           "fc_norm", "Retrain without fc_norm, or with a draft as wide as the target.")]


def q_lora_rank_set(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Only the fused q_a/kv_a projection is rebuilt for the 2 x hidden_size
    input: without q_lora_rank the q and kv_a projections keep a
    hidden_size input and the draft cannot load
    (models/deepseek_v3.py@f4d8ec6e:2003, 2014-2027). Absent, the
    DeepSeek config classes fill 1536; LlamaConfig has no such attribute,
    so `getattr(config, "q_lora_rank", None)` reads None."""
    if config.get("q_lora_rank") is not None:
        return []
    if "q_lora_rank" in config:
        why = "q_lora_rank is null"
    elif config.get("model_type") == "llama":
        why = "q_lora_rank is absent and model_type 'llama' parses into LlamaConfig, which has no such field"
    else:
        return []
    return [Finding(
        "CFG003",
        f"{config_file}: {why}; Eagle3DeepseekV2ForCausalLM widens only the fused q_a/kv_a "
        "projection to [embedding, hidden], so a draft without q_lora_rank fails to load. Set q_lora_rank "
        "(TorchSpec's MLA drafts use 1536).",
        file=config_file,
        detail={"field": "q_lora_rank", "validator": "engine",
                "source": "models/deepseek_v3.py@f4d8ec6e:2003, 2014-2027"},
    )]


def mla_config_fields(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """What the engine reads off a config class that does not default the
    MLA fields (model_type llama, LlamaConfig): configure_mla_attention
    takes the four MLA dimensions as plain attributes
    (configs/model_config.py@f4d8ec6e:206-217), and the draft's load_weights
    sizes its expert loader from `self.config.n_routed_experts`
    (models/deepseek_v3.py@f4d8ec6e:1763-1773), which no EAGLE-3 MLA config
    writes: an AttributeError at startup for each one absent. Under any
    config class the expert loader then raises unless n_routed_experts is a
    positive integer (layers/moe/loader.py@f4d8ec6e:62-70, 464-467)."""
    findings: list[Finding] = []
    llama = config.get("model_type") == "llama"
    missing = [name for name in _MLA_DIMENSIONS if name not in config] if llama else []
    if missing:
        findings.append(Finding(
            "CFG003",
            f"{config_file}: model_type 'llama' parses into LlamaConfig, which has no MLA fields, and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} absent: the engine reads "
            f"{'it' if len(missing) == 1 else 'them'} as attributes for this MLA architecture and stops at "
            f"startup (AttributeError). Write {', '.join(missing)} in the config, or set model_type to "
            "kimi_k2 or deepseek_v3.",
            file=config_file,
            detail={"field": missing[0], "validator": "engine",
                    "source": at_main("206-217", MODEL_CONFIG, qualname="configure_mla_attention").cite()},
        ))
    experts = config.get("n_routed_experts")
    if llama and "n_routed_experts" not in config:
        findings.append(Finding(
            "CFG003",
            f"{config_file}: model_type 'llama' parses into LlamaConfig, which has no n_routed_experts, and "
            "the config does not write it: the draft's load_weights reads self.config.n_routed_experts to "
            "build its expert loader and the load fails (AttributeError). Set model_type to kimi_k2 or "
            "deepseek_v3 (their config class defaults it to 256), or write n_routed_experts.",
            file=config_file,
            detail={"field": "n_routed_experts", "validator": "engine",
                    "source": at_main("1763-1773", _DS3,
                                      qualname="DeepseekV3ForCausalLM.load_weights.moe_loader").cite()},
        ))
    elif "n_routed_experts" in config and not (is_int(experts) and experts > 0):
        findings.append(Finding(
            "CFG003",
            f"{config_file}: n_routed_experts = {experts!r}: the draft's load_weights builds its expert loader "
            "with it, which raises unless it is a positive integer, and the load fails. Write a positive "
            "n_routed_experts, or leave it out under model_type kimi_k2 or deepseek_v3 (256).",
            file=config_file,
            detail={"field": "n_routed_experts", "validator": "engine",
                    "source": f"{at_main('1763-1773', _DS3, qualname='DeepseekV3ForCausalLM.load_weights.moe_loader').cite()}; "
                              f"{at_main('62-70, 464-467', _MOE_LOADER, qualname='_ep_partition').cite()}"},
        ))
    return findings


LIMITS = (one_layer("Eagle3DeepseekV2ForCausalLM", "models/deepseek_v3.py@f4d8ec6e:2282-2283"),
          tap_agreement_rule(lambda c: (*TAPS.draft_ids(c), TAPS.draft_count(c)), "the MLA draft reads eagle_config first"),
          q_lora_rank_set, mla_config_fields,
          mla_rope_only_yarn, mla_fc_norm_width,
          eagle3_fc_skipped_when_widths_meet(_DS3, "2205", EAGLE3_TARGET_TAPS, "Eagle3MlaModel.forward"),
          eagle3_flags_only_in_eagle_config(_DS3, "2166-2186", "Eagle3MlaModel.__init__"))

LOADER = FamilyLoader(
    family="eagle3_mla",
    **TARGET_CAPTURE,
    model_class="Eagle3DeepseekV2ForCausalLM",
    # Eagle3DeepseekV2ForCausalLM is an MLA architecture, so the config class
    # must carry the MLA attributes: transformers' DeepseekV3Config, or
    # TokenSpeed's KimiK2Config subclass of it (configs/model_config.py@f4d8ec6e:58-71, 206-217;
    # configs/kimi_k2_config.py@f4d8ec6e:23-34); or LlamaConfig, which keeps
    # them as written (`mla_config_fields` for what it lacks).
    model_types=("deepseek_v3", "kimi_k2", "llama"),
    # The Eagle3 wrapper takes any name containing `d2t` for the hot-token
    # map and skips any containing `t2d` (so `model.d2t` is d2t), maps a
    # leading `layers.0.`, and prefixes `model.` to every name without
    # `lm_head`: a stored `model.` prefix becomes `model.model.*`, which is
    # logged and skipped (models/deepseek_v3.py@f4d8ec6e:2355-2376). A name
    # not found is looked up again with every `language_model.` removed
    # (get_param, models/deepseek_v3.py@f4d8ec6e:1724-1737).
    name_rewrites=((r"^.*d2t.*$", "d2t"), (r"^.*t2d.*$", "t2d"), (r"^layers\.0\.", "midlayer."),
                   (r"language_model\.", "")),
    skips=(
        SkipRule(r"t2d", "the target-to-draft table is never read", at_main("2363-2364", _DS3,
                                                                            qualname="Eagle3DeepseekV2ForCausalLM.load_weights")),
        SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding", at_main("1794-1795", _DS3,
                                                                                        qualname="DeepseekV3ForCausalLM.load_weights")),
    ),
    fused=(
        FusedParameter(
            "midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight",
            ("midlayer.self_attn.q_a_proj.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight"),
            fused_accepted=False,
            # The row-offset loader copies each part into place with no
            # full-shape check (layers/linear.py@f4d8ec6e:276-278).
            partial_passes=True,
            source=at_main("1746-1747, 1828-1861", _DS3, qualname="DeepseekV3ForCausalLM.load_weights"),
            when_pre_fused="fails the load: the name contains kv_a_proj_with_mqa, becomes "
            "fused_qfused_qkv_a_proj_with_mqa, is not found, and the loader calls weight_loader on None "
            "(AttributeError)",
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=False,
            partial_passes=True,
            source=at_main("1740-1744, 1798-1819", _DS3, qualname="DeepseekV3ForCausalLM.load_weights"),
            when_pre_fused="drops it: the name contains up_proj, becomes gate_gate_up_proj, is not found, and "
            "is skipped with a log line, so the MLP is served uninitialised",
        ),
    ),
    unexpected="drops_logged",
    missing="uninitialised",
    unread_flags={"norm_before_residual": NORM_BEFORE_RESIDUAL},
    features={
        "fc_norm": FeatureSupport(supported=True, source=at_main("2166-2175", _DS3,
                                                                 qualname="Eagle3MlaModel.__init__")),
        "norm_before_fc": FeatureSupport(
            supported=False,
            source=at_main("2110-2186 (no input_norm)", _DS3, qualname="Eagle3MlaModel"),
            when_unsupported="Eagle3MlaModel has no input_norm: a declaration is ignored and shipped weights "
            "are logged and skipped, so the taps reach fc unnormalised",
        ),
    },
    tap_low=-1,
    tap_high_offset=-2,
    # The target captures the taps, whatever the draft: a BaseTransformerModel
    # target (Llama) captures id N too (models/base/transformer_model.py@f4d8ec6e:251-264).
    tap_final_residual=True,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    # fc is built for the taps the draft counts (models/deepseek_v3.py@f4d8ec6e:2112-2155).
    dims={"S": TAPS.draft_count},
    # d2t is the hot-token map, never checked; t2d is skipped; the target's
    # embedding replaces the draft's unless the widths differ (or the
    # shapes do, and the draft shipped its own)
    # (models/deepseek_v3.py@f4d8ec6e:2358-2364, 2408-2434).
    vocab=VocabHandling(d2t=HOT_TOKEN_MAP, t2d=DROPPED, embedding=TARGET_UNLESS_WIDTHS_DIFFER,
                        source=at_main("2358-2364, 2408-2434", _DS3, qualname="Eagle3DeepseekV2ForCausalLM")),
    sources={
        "targets without capture": TARGETS_WITHOUT_CAPTURE_SOURCE,
        "load_weights": at_main("2355-2376, 1739-1877 (DeepseekV3ForCausalLM.load_weights)",
                                _DS3, qualname="Eagle3DeepseekV2ForCausalLM.load_weights"),
        "one layer": at_main("2282-2283", _DS3, qualname="Eagle3DeepseekV2ForCausalLM.__init__"),
        "taps (draft)": at_main("2112-2119, 2139-2140", _DS3, qualname="Eagle3MlaModel"),
        "taps (target)": at_main("44-75, 95-102 (_wire_draft_to_target_model)",
                                 FACTORY, qualname="_eagle_aux_layer_ids"),
        "taps vs target": at_main("1591-1593, 1688-1695 (DeepseekV3ForCausalLM.set_eagle3_layers_to_capture)",
                                  _DS3, qualname="DeepseekV3Model.forward"),
        "fc width": at_main("2142-2155", _DS3, qualname="Eagle3MlaModel.__init__"),
        "lm_head": at_main("2294-2310, 2370-2373, 2430-2432", _DS3, qualname="Eagle3DeepseekV2ForCausalLM"),
        "d2t": at_main("2358-2362", _DS3, qualname="Eagle3DeepseekV2ForCausalLM.load_weights"),
        "embedding": at_main("2408-2434", _DS3, qualname="Eagle3DeepseekV2ForCausalLM.set_embed_and_head"),
        "unknown names": at_main("1724-1737", _DS3, qualname="DeepseekV3ForCausalLM.get_param"),
        "model_type llama": at_main("340-347", HF_UTILS, qualname="get_config"),
    },
    config_defaults={"deepseek_v3": _DEEPSEEK_V3_DEFAULTS, "kimi_k2": _DEEPSEEK_V3_DEFAULTS, "llama": _LLAMA_DEFAULTS},
    # convert writes deepseek_v3 for llama: DeepseekV3Config defaults
    # n_routed_experts (256), which LlamaConfig lacks (`mla_config_fields`).
    generic_model_types=("llama",),
    # MLA attention uses num_attention_heads only.
    ignored_fields=("num_key_value_heads",),
    # `not hasattr(config, "draft_vocab_size")`, and a shipped lm_head
    # clears the flag (models/deepseek_v3.py@f4d8ec6e:2300-2301, 2370-2373).
    head_from_target="draft_vocab_size_absent",
    taps_outside_range=EAGLE3_TAPS_OUTSIDE,
)
