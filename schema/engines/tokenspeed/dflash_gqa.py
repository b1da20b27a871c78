"""TokenSpeed's loader for GQA DFlash / DSpark drafts (`DFlashDraftModel`,
`DSparkDraftModel`), at main (f4d8ec6e): no fc_norm, `fc` is taps x the
draft's hidden_size, the prefix stream only, and unknown names dropped
without a word. At the head of pull request 1031 (4b9766f6) the same
loader, but the drafter hands the target the stream the draft declares
(`loader_pr1031`); at the head of pull request 1016 (5f1e48b5) the stream
it resolves from TOKENSPEED_DFLASH_AUX_STREAM first (`loader_pr1016`)."""

from __future__ import annotations

import dataclasses

from typing import Any, Mapping

from dspark.schema.engines.base import (
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    Source,
    StreamResolution,
    TapReading,
)
from dspark.schema.engines.tokenspeed.common import (
    TARGET_CAPTURE,
    TARGETS_WITHOUT_CAPTURE_SOURCE,
    CAUSAL_LM,
    DFLASH_DRAFTER,
    DFLASH_TAP_PATHS,
    DFLASH_TARGET_CLASSES,
    DFLASH_TARGET_SOURCE,
    GQA_DSPARK_MODEL,
    GQA_MODEL,
    HF_UTILS,
    K3_TARGET,
    KEEPS_FILE_ROPE_PARAMETERS,
    MAIN,
    NUMBERING,
    PR1016,
    PR1031,
    QWEN3_DEFAULTS,
    STREAM_ENV_VAR,
    at_main,
    engine_finding,
    reads_as_float,
)
from dspark.schema.families.base import block_size_launch_note
from dspark.schema.findings import Finding

_SKIPS = (
    SkipRule(r"^(embed_tokens|lm_head)\.", "the draft uses the target's embedding and head",
             at_main("479-514", GQA_MODEL, "DFlashDraftModel.load_weights")),
    SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding", at_main("479-514", GQA_MODEL,
                                                                                    "DFlashDraftModel.load_weights")),
)

_FUSED = (
    FusedParameter(
        "layers.{n}.self_attn.qkv_proj.weight",
        ("layers.{n}.self_attn.q_proj.weight", "layers.{n}.self_attn.k_proj.weight",
         "layers.{n}.self_attn.v_proj.weight"),
        fused_accepted=True, partial_passes=True, source=at_main("479-514", GQA_MODEL, "DFlashDraftModel.load_weights"),
    ),
    FusedParameter(
        "layers.{n}.mlp.gate_up_proj.weight",
        ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
        fused_accepted=True, partial_passes=True, source=at_main("479-514", GQA_MODEL, "DFlashDraftModel.load_weights"),
    ),
)

# `dflash_config.target_layer_ids` when non-empty, else the top level; no
# default (models/dflash.py@f4d8ec6e:382-385).
_TAPS = TapReading(target=DFLASH_TAP_PATHS, numbering=NUMBERING, source=at_main("382-385", GQA_MODEL,
                                                                                qualname="DFlashDraftModel.__init__"))


def gqa_partial_rope_nested(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """`partial_rotary_factor` inside rope_parameters or rope_scaling is not
    read either: the attention rotates the whole head
    (models/dflash.py@f4d8ec6e:112-125). The top-level key is an unread flag."""
    for field in ("rope_parameters", "rope_scaling"):
        block = config.get(field)
        factor = block.get("partial_rotary_factor") if isinstance(block, Mapping) else None
        if factor is not None and factor != 1:
            return [engine_finding(config_file, f"{field}.partial_rotary_factor is {factor!r}, but the GQA "
                                   "DFlash/DSpark attention rotates the whole head", Source(GQA_MODEL, "112-125", MAIN, qualname="DFlashAttention.__init__"),
                                   "partial_rotary_factor")]
    return []


def gqa_rope_parameters_need_theta(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The GQA attention takes its base from `rope_parameters["rope_theta"]`
    whenever the config has rope_parameters (models/dflash.py@f4d8ec6e:
    112-118), and its scaling from them too. The engine's Qwen config
    classes keep the rope_parameters config.json writes as they are (run
    on the pinned transformers 5.12): without rope_theta the model's
    construction fails whatever the top level says; beside a different
    rope_scaling, rope_parameters are served and rope_scaling is not."""
    parameters = config.get("rope_parameters")
    if parameters is None or config.get("model_type") not in KEEPS_FILE_ROPE_PARAMETERS:
        return []
    scaling = config.get("rope_scaling")
    source = Source(GQA_MODEL, "112-118", MAIN, qualname="DFlashAttention.__init__")
    if isinstance(parameters, Mapping) and reads_as_float(parameters.get("rope_theta")):
        if isinstance(scaling, Mapping) and any(
                scaling.get(key) != parameters.get(key) for key in set(scaling) - {"rope_theta"}):
            return [engine_finding(config_file, "rope_scaling and rope_parameters describe different RoPE; the GQA "
                                   "DFlash/DSpark attention serves rope_parameters and never reads rope_scaling",
                                   source, "rope_scaling", "Keep the one the draft was trained with, in rope_parameters.")]
        return []
    what = ("has no rope_theta" if isinstance(parameters, Mapping) and "rope_theta" not in parameters
            else f"rope_theta is {parameters.get('rope_theta')!r}" if isinstance(parameters, Mapping)
            else f"is {type(parameters).__name__}, not an object")
    return [Finding(
        "ROP001",
        f"{config_file}: rope_parameters {what}; the GQA DFlash/DSpark attention reads its base only from "
        "rope_parameters['rope_theta'] (a top-level rope_theta is not read there), so the engine refuses the draft "
        f"({source.cite()}). Write rope_theta inside rope_parameters, or drop "
        "rope_parameters and keep the top-level rope_theta.",
        file=config_file,
        detail={"field": "rope_parameters.rope_theta", "source": source.cite()},
    )]


def sliding_layers(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Sliding-attention layers need config.sliding_window
    (models/dflash.py@f4d8ec6e:542-592): the family's rule."""
    # Imported when a DFlash config is judged: this package is imported for
    # a check of any family, the family's module only for its own drafts.
    from dspark.schema.families.dflash_gqa import sliding_layers as rule

    return rule(config, config_file)


def markov_head(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """A DSpark draft's Markov head as the engine reads it
    (models/dspark.py@f4d8ec6e:75-128): the family's rule."""
    from dspark.schema.families.dflash_gqa import markov_head as rule

    return rule(config, config_file)


# What its drafter and model check beyond the shapes: the block size the
# drafter launches with (execution/drafter/dflash.py@f4d8ec6e:74-97), the
# sliding-window layers (models/dflash.py@f4d8ec6e:542-592), a DSpark
# draft's Markov head (models/dspark.py@f4d8ec6e:75-128).
LIMITS = (block_size_launch_note, sliding_layers, markov_head, gqa_partial_rope_nested,
          gqa_rope_parameters_need_theta)

LOADER = FamilyLoader(
    family="dflash_gqa",
    **TARGET_CAPTURE,
    model_class="DFlashDraftModel / DSparkDraftModel",
    # The engine has no "dflash"/"dspark" config type; the draft's config
    # must parse as a GQA config TokenSpeed registers or transformers knows
    # (utils/hf_transformers_utils.py@f4d8ec6e:339-345); these were run.
    model_types=("qwen3", "qwen2", "llama", "mistral", "qwen3_moe"),
    name_rewrites=((r"^model\.", ""),),
    skips=_SKIPS,
    fused=_FUSED,
    unexpected="drops",
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(
            supported=False,
            source=at_main("381-395", GQA_MODEL, qualname="DFlashDraftModel"),
            when_unsupported="the GQA DFlash/DSpark model has no fc_norm: the weights are dropped without a "
            "word and the taps reach fc unnormalised",
        ),
        # The drafter hands the target no stream (wire_target,
        # execution/drafter/dflash.py@f4d8ec6e:227-248) and every target
        # captures the prefix stream, Kimi-K3 included
        # (models/base/causal_lm.py@f4d8ec6e:146-177; models/kimi_k3.py@f4d8ec6e:2488-2503).
        "aux_hidden_stream": FeatureSupport(
            supported=False,
            source=at_main("227-248 (wire_target: no stream); models/base/causal_lm.py:146-177; "
                           "models/kimi_k3.py:2488-2503", DFLASH_DRAFTER, qualname="DFlash.wire_target"),
            when_unsupported="the drafter hands the target no stream and every target captures the prefix "
            "stream only",
        ),
    },
    # The drafter int()s the taps and the mask token it reads
    # (execution/drafter/dflash.py@f4d8ec6e:137-150); the target is handed ints.
    # ...and the sliding window: int(sliding_window) in the model
    # (models/dflash.py@f4d8ec6e:569) and in the config loader's restore
    # (utils/hf_transformers_utils.py@f4d8ec6e:253). ...and vocab_size: the
    # DSpark model int()s it for its Markov head (models/dspark.py@f4d8ec6e:
    # 121-127), and nothing else of the draft's reads it (the drafter and the
    # executor take the target's, execution/factory.py@f4d8ec6e:155-162).
    int_coerced_fields=("target_layer_ids", "dflash_config.target_layer_ids", "mask_token_id",
                        "dflash_config.mask_token_id", "sliding_window", "dflash_config.swa_window_size",
                        "vocab_size"),
    config_limits=LIMITS,
    target_classes=DFLASH_TARGET_CLASSES,
    unread_flags={
        # The attention's rotary embedding spans the whole head
        # (get_rope(head_dim, rotary_dim=head_dim), models/dflash.py@f4d8ec6e:119-125).
        "partial_rotary_factor": FeatureSupport(
            supported=False,
            source=at_main("119-125", GQA_MODEL, qualname="DFlashAttention.__init__"),
            when_unsupported="the GQA DFlash/DSpark attention rotates the whole head: a draft trained with "
            "partial RoPE is served with full RoPE",
            fixed_value=1.0,
        ),
    },
    # causal_lm.set_dflash_layers_to_capture: unique, 0 <= id and id + 1 < N
    tap_low=0,
    tap_high_offset=-2,
    stream=None,
    config_defaults={"qwen3": QWEN3_DEFAULTS},
    taps=_TAPS,
    # fc takes taps x the draft's own hidden_size; target_hidden_size is
    # never read (models/dflash.py@f4d8ec6e:381-395).
    target_width_field="hidden_size",
    sources={
        "targets without capture": TARGETS_WITHOUT_CAPTURE_SOURCE,
        "load_weights": at_main("479-514", GQA_MODEL, "DFlashDraftModel.load_weights"),
        "fc width": at_main("381-395", GQA_MODEL, qualname="DFlashDraftModel"),
        "taps": at_main("382-385", GQA_MODEL, qualname="DFlashDraftModel.__init__"),
        "taps vs target": at_main("146-177", CAUSAL_LM, "BaseCausalLM"),
        "target classes": DFLASH_TARGET_SOURCE,
        "markov head": at_main("75-85, 88-128 (DSparkDraftModel)", GQA_DSPARK_MODEL, "_get_markov_params"),
        "block size": at_main("81-89, 92-94 (_resolve_draft_query_width)", DFLASH_DRAFTER, "_resolve_block_geometry"),
        "config types": at_main("69-86, 337-347 (get_config)", HF_UTILS, qualname="_CONFIG_REGISTRY"),
        "sliding layers": at_main("542-551, 554-569 (get_dflash_attention_sliding_window_size), "
                                  "572-592 (_get_dflash_layer_sliding_window)", GQA_MODEL, "get_dflash_layer_types"),
    },
)


def _drafter_resolves_stream(stream: StreamResolution, feature: Source, stream_vs_target: Source) -> FamilyLoader:
    """Main's GQA loader with the stream its drafter resolves and hands the
    target: the models are main's and never read aux_hidden_stream, so the
    drafter's resolution is the whole difference."""
    return dataclasses.replace(
        LOADER,
        features={**LOADER.features, "aux_hidden_stream": FeatureSupport(supported=True, source=feature)},
        stream=stream,
        sources={**LOADER.sources, "stream vs target": stream_vs_target},
    )


def loader_pr1031() -> FamilyLoader:
    """PR 1031's GQA DFlash/DSpark loader: main's (`git diff f4d8ec6e
    4b9766f6` changes neither models/dflash.py nor models/dspark.py; neither
    reads aux_hidden_stream), with the drafter choosing the stream. Its DFlash
    drafter, which the DSpark drafter subclasses (execution/drafter/dspark.py@
    4b9766f6:35; drafter/__init__.py@4b9766f6:55-60), ends `wire_target` for
    every draft by resolving the stream (execution/drafter/dflash.py@4b9766f6:
    258-271): `dflash_config.aux_hidden_stream or aux_hidden_stream`,
    lower-cased, "prefix" when neither (52-58); no environment variable is
    read. It hands that to the target's `set_dflash_aux_hidden_stream`, which
    only Kimi-K3 targets define and which refuses any value but prefix and
    attn_res, and attn_res without attn_res_block_size (models/kimi_k3.py@
    4b9766f6:2660-2680, 3069-3074); on any other target a stream but "prefix"
    stops the engine (dflash.py@4b9766f6:263-271). So a GQA draft is served
    the stream it declares, on a Kimi-K3 target with AttnRes, as a K3 draft
    is; the GQA config class validates nothing on its own (no top-level
    check)."""
    resolution = Source(DFLASH_DRAFTER, "52-58, 258-271 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)", PR1031,
                         qualname="_resolve_aux_hidden_stream")
    return _drafter_resolves_stream(
        StreamResolution(nested_truthy_wins=True, validates_top_level=False, fixed_stream=None, source=resolution),
        feature=resolution,
        stream_vs_target=Source(K3_TARGET, "2660-2680, 3069-3074 (set_dflash_aux_hidden_stream of "
                                           "KimiK3ForConditionalGeneration); execution/drafter/dflash.py:263-271", PR1031,
                                qualname="KimiLinearForCausalLM.set_dflash_aux_hidden_stream"),
    )


def loader_pr1016() -> FamilyLoader:
    """PR 1016's GQA DFlash/DSpark loader: main's (`git diff f4d8ec6e
    5f1e48b5` over models/dflash.py changes one KV-cache page-size read and
    models/dspark.py nothing; neither model reads aux_hidden_stream), with
    the drafter choosing the stream. Its DFlash drafter, which the DSpark
    drafter subclasses (execution/drafter/dspark.py@5f1e48b5:35;
    drafter/__init__.py@5f1e48b5:55-60), ends `wire_target` for every draft
    by resolving the stream (execution/drafter/dflash.py@5f1e48b5:242-277):
    TOKENSPEED_DFLASH_AUX_STREAM when set and non-empty, `.strip().lower()`,
    else `dflash_config.aux_hidden_stream or aux_hidden_stream`, lower-cased,
    "prefix" when neither (56-65). It hands that to the target's
    `set_dflash_aux_hidden_stream`, which only Kimi-K3 targets define and
    which refuses any value but prefix and attn_res, and attn_res without
    attn_res_block_size (models/kimi_k3.py@5f1e48b5:1986-1999, 2247-2252);
    on any other target a stream but "prefix" stops the engine (dflash.py@
    5f1e48b5:269-277). So a GQA draft is served the stream it declares or
    the variable names, on a Kimi-K3 target with AttnRes, as a K3 draft is;
    the GQA config class validates nothing on its own (no top-level check)."""
    return _drafter_resolves_stream(
        StreamResolution(
            nested_truthy_wins=True,
            validates_top_level=False,
            fixed_stream=None,
            env_override=STREAM_ENV_VAR,
            source=Source(DFLASH_DRAFTER, "56-65, 264-277 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)", PR1016,
                          "_resolve_aux_hidden_stream"),
        ),
        feature=Source(DFLASH_DRAFTER, "56-65, 264-277 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)", PR1016,
                        qualname="_resolve_aux_hidden_stream"),
        stream_vs_target=Source(K3_TARGET, "1986-2005, 2247-2252 (set_dflash_aux_hidden_stream of "
                                           "KimiK3ForConditionalGeneration); execution/drafter/dflash.py:269-277", PR1016,
                                qualname="KimiLinearForCausalLM.set_dflash_aux_hidden_stream"),
    )
