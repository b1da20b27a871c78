"""TokenSpeed's loader for Kimi-K3 DSpark drafts (`K3DSparkModel`): at main
(f4d8ec6e) without fc_norm or the AttnRes stream, at the head of pull
request 1031 (4b9766f6, "serve DSpark drafts: fc_norm + AttnRes tap") with
both."""

from __future__ import annotations

import dataclasses

from typing import Any, Mapping

from dspark.schema.engines.base import (
    FIRST_PRESENT,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    Source,
    StreamResolution,
    TapPaths,
    TapReading,
)
from dspark.schema.engines.tokenspeed.common import (
    TARGET_CAPTURE,
    TARGETS_WITHOUT_CAPTURE_SOURCE,
    DFLASH_DRAFTER,
    DFLASH_TARGET_CLASSES,
    K3_CONFIG,
    K3_MODEL,
    K3_TARGET,
    MAIN,
    NUMBERING,
    PR1016,
    PR1031,
    STREAM_ENV_VAR,
    YARN_OR_NONE,
    at_pr1031,
    engine_finding,
    rope_type,
)
from dspark.schema.families.base import block_size_the_drafter_reads
from dspark.schema.findings import Finding, Severity

_SKIPS = (
    SkipRule(r"^(embed_tokens|lm_head|confidence_head)\.", "borrowed from the target, or training-only",
             at_pr1031("41", K3_CONFIG, qualname="K3_DSPARK_SKIPPED_WEIGHT_PREFIXES")),
    SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding",
             at_pr1031("506-507", qualname="K3DSparkModel.load_weights")),
)

_FUSED = (
    FusedParameter(
        "layers.{n}.mlp.gate_up_proj.weight",
        ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
        fused_accepted=True, partial_passes=True, source=at_pr1031("490-518", qualname="K3DSparkModel.load_weights"),
    ),
    FusedParameter(
        "layers.{n}.self_attn.fused_qkv_a_proj_with_mqa.weight",
        ("layers.{n}.self_attn.q_a_proj.weight", "layers.{n}.self_attn.kv_a_proj_with_mqa.weight"),
        fused_accepted=True, partial_passes=True, source=at_pr1031("494-497, 519-532",
                                                                   qualname="K3DSparkModel.load_weights"),
    ),
)

# KimiK3DSparkConfig.__init__ defaults (configs/kimi_k3_dspark_config.py@4b9766f6:85-120).
_DEFAULTS = {
    "hidden_size": 7168, "intermediate_size": 14336, "num_hidden_layers": 5, "num_attention_heads": 64,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 163840, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "max_position_embeddings": 1048576, "rope_theta": 50000.0, "num_target_layers": 5,
    "target_hidden_size": 7168, "target_num_hidden_layers": 93, "markov_rank": 256,
    "markov_head_type": "vanilla",
}

# The model and its validator read the top-level list
# (configs/kimi_k3_dspark_config.py@4b9766f6:111, 206-229).
_TAPS = TapReading(
    target=TapPaths(paths=("target_layer_ids",), pick=FIRST_PRESENT),
    numbering=NUMBERING,
    source=at_pr1031("111, 206-229 (validate_k3_dspark_config)", K3_CONFIG, qualname="KimiK3DSparkConfig.__init__"),
)


def k3_rope_only_yarn(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The K3 config hands the model YaRN from rope_parameters and nothing
    else (configs/kimi_k3_dspark_config.py@4b9766f6:139-170), in any case
    (it lower-cases the type)."""
    kind, field = rope_type(config)
    if kind is None or kind.lower() in YARN_OR_NONE:
        return []
    return [engine_finding(config_file, f"{field} declares rope type {kind!r}; the K3 DSpark config passes only "
                           "YaRN to the model, which then applies unscaled RoPE", Source(K3_CONFIG, "139-170", PR1031,
                                                                                         qualname="KimiK3DSparkConfig"),
                           "rope_scaling")]


def k3_fc_norm_only_in_dflash_config(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The K3 config class takes `fc_norm` as a top-level argument
    (configs/kimi_k3_dspark_config.py@4b9766f6:78, 112) and the model
    builds the per-tap norms from it alone (models/kimi_k3_dspark.py@
    4b9766f6:319-328): one set only inside `dflash_config` is not served,
    and the draft runs without fc_norm (shipped fc_norm weights are then
    FCN002)."""
    nested = config.get("dflash_config")
    if not isinstance(nested, Mapping) or not nested.get("fc_norm") or config.get("fc_norm"):
        return []
    unread = engine_finding(config_file, "dflash_config sets fc_norm but the engine reads it at the top level only, "
                            "where it is off, and serves the draft without its per-tap norms",
                            Source(K3_CONFIG, "78, 112", PR1031, qualname="KimiK3DSparkConfig.__init__"), "fc_norm",
                            "Set fc_norm at the top level of config.json (and ship the fc_norm weights).")
    if "fc_norm" in config:
        # The top level says off, and it is the one served: the two flags
        # disagree, but what loads is what the top level declares (shipped
        # fc_norm weights would be FCN002).
        return [dataclasses.replace(unread, severity=Severity.WARNING, message=unread.message.replace(
            "where it is off", f"where it is {config['fc_norm']!r}, as served"))]
    return [unread]


# The drafter int()s block_size and launches only with a verify width it
# fits (execution/drafter/dflash.py@4b9766f6:74-97).
LIMITS = (block_size_the_drafter_reads, k3_rope_only_yarn, k3_fc_norm_only_in_dflash_config)


def loader(*, serving_change: bool) -> FamilyLoader:
    """The K3 DSpark loader at pull request 1031 (`serving_change`) or main."""
    commit = PR1031 if serving_change else MAIN
    fc_norm = FeatureSupport(
        supported=serving_change,
        source=Source(K3_MODEL, "319-328" if serving_change else "(no fc_norm)", commit,
                    "K3DSparkModel.__init__" if serving_change else ""),
        when_unsupported="the model has no fc_norm modules: shipped weights fail the load as unexpected, "
        "a declaration alone is ignored and the taps reach context_proj unnormalised",
    )
    stream = StreamResolution(
        nested_truthy_wins=True,
        validates_top_level=True,
        fixed_stream=None if serving_change else "prefix",
        source=Source(DFLASH_DRAFTER, "52-58, 260-271 (DFlash._wire_aux_hidden_stream)" if serving_change
                    else "(prefix capture only)", commit, "_resolve_aux_hidden_stream" if serving_change else ""),
    )
    return FamilyLoader(
        family="k3_dspark",
        **TARGET_CAPTURE,
        model_class="K3DSparkModel",
        model_types=("k3_dspark",),
        name_rewrites=((r"^model\.", ""),),
        skips=_SKIPS,
        fused=_FUSED,
        unexpected="rejects",
        missing="rejects",
        features={"fc_norm": fc_norm},
        # kimi_k3.set_dflash_layers_to_capture: unique, 0 <= id < len(layers)
        tap_low=0,
        tap_high_offset=-1,
        stream=stream,
        config_defaults={"k3_dspark": _DEFAULTS},
        coerces_values=True,
        lowercased_fields=("markov_head_type",),
        # The validator and the drafter int() the taps and the mask token
        # (configs/kimi_k3_dspark_config.py@4b9766f6:85-127;
        # execution/drafter/dflash.py@4b9766f6:146-162).
        int_coerced_fields=("target_layer_ids", "dflash_config.target_layer_ids", "dflash_config.mask_token_id"),
        # float() in the K3 config class (configs/kimi_k3_dspark_config.py@4b9766f6:103, 106)
        float_coerced_fields=("rms_norm_eps", "rope_theta"),
        # bool() in the K3 config class (configs/kimi_k3_dspark_config.py@4b9766f6:119-120); the
        # confidence head they switch is training-only and skipped at load either way (SkipRule above)
        bool_coerced_fields=("enable_confidence_head", "confidence_head_with_markov"),
        config_limits=LIMITS,
        target_classes=DFLASH_TARGET_CLASSES,
        # MLA attention uses num_attention_heads
        # (configs/kimi_k3_dspark_config.py@4b9766f6:91; models/kimi_k3_dspark.py).
        ignored_fields=("num_key_value_heads",),
        taps=_TAPS,
        sources={
            "targets without capture": TARGETS_WITHOUT_CAPTURE_SOURCE,
            "load_weights": at_pr1031("482-553", qualname="K3DSparkModel.load_weights"),
            "config": at_pr1031("87-127, 194-300 (validate_k3_dspark_config)",
                                K3_CONFIG, qualname="KimiK3DSparkConfig.__init__"),
            "taps vs target": at_pr1031("2627-2658", K3_TARGET,
                                        qualname="KimiLinearForCausalLM.set_dflash_layers_to_capture"),
            "stream vs target": at_pr1031("2660-2680", K3_TARGET,
                                          qualname="KimiLinearForCausalLM.set_dflash_aux_hidden_stream"),
            "target classes": Source(DFLASH_DRAFTER, "236-247" if serving_change else "227-238", commit,
                                     "DFlash.wire_target"),
        },
    )


def loader_pr1016() -> FamilyLoader:
    """PR 1016's K3 DSpark loader: PR 1031's (load_weights, the config and
    fc_norm are the same code: `git diff 5f1e48b5 4b9766f6` over
    models/kimi_k3_dspark.py and configs/kimi_k3_dspark_config.py changes
    only the kernel's import, comments and an idle-rank return), with the
    drafter reading the stream from the environment first."""
    base = loader(serving_change=True)
    return dataclasses.replace(
        base,
        features={"fc_norm": FeatureSupport(supported=True, source=Source(K3_MODEL, "312-322", PR1016,
                                                                          qualname="K3DSparkModel.__init__"))},
        stream=dataclasses.replace(base.stream, env_override=STREAM_ENV_VAR,
                                   source=Source(DFLASH_DRAFTER, "56-65, 264-277 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)", PR1016,
                          "_resolve_aux_hidden_stream")),
        sources={**base.sources, "load_weights": Source(K3_MODEL, "471-543", PR1016,
                                                        qualname="K3DSparkModel.load_weights"),
                 "taps vs target": Source(K3_TARGET, "1954-1984", PR1016,
                                          qualname="KimiLinearForCausalLM.set_dflash_layers_to_capture"),
                 "stream vs target": Source(K3_TARGET, "1986-2005", PR1016,
                                            qualname="KimiLinearForCausalLM.set_dflash_aux_hidden_stream"),
                 "target classes": Source(DFLASH_DRAFTER, "242-264 (wire_target)", PR1016,
                                          qualname="DFlash.wire_target")},
    )
