"""TokenSpeed (lightseekorg/tokenspeed): what its loaders do with each draft
family, read from its code.

Three revisions are modelled:

* `main` at f4d8ec6e: the GQA DFlash/DSpark drafts (`models/dflash.py`,
  `models/dspark.py`) and, for K3 DSpark, the loader before the serving
  change (no fc_norm, the prefix stream only).
* `pr1031` at 4b9766f6, the head of pull request 1031 ("serve DSpark drafts:
  fc_norm + AttnRes tap"): the K3 DSpark loader with fc_norm and
  aux_hidden_stream; the other families as on main.
* `pr1016` at 5f1e48b5, the head of pull request 1016, the first version of
  that change: the same K3 DSpark loader, but its drafter lets
  TOKENSPEED_DFLASH_AUX_STREAM override the checkpoint's stream, and its model
  imports the segmented RMSNorm from the `tokenspeed_kernel` wheel at module
  top (what that needs installed is judged by `check --runtime`).

`current` is what a deploy gate should assume today: the K3 DSpark serving
change for `k3_dspark`, main for every other family.

Where DESIGN.md and this code disagree, this code wins (see docs/contract.md).

Why this module is long: it is one engine's contract, four family loaders
of cited facts read from one repository; split per family, the shared
revision constants and citations would be spelled in several places.
"""

from __future__ import annotations

import dataclasses

from dspark.schema.engines.base import (
    ArchitectureResolution,
    EngineProfile,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    Source,
    StreamResolution,
)

from dspark.schema.engines.tokenspeed_limits import GQA_LIMITS, K3_LIMITS, LLAMA_EAGLE3_LIMITS, MLA_LIMITS
from dspark.schema.engines.tokenspeed_revisions import MAIN, PR1016, PR1031, REPOSITORY, STREAM_ENV_VAR

_RT = "python/tokenspeed/runtime/"
K3_MODEL = _RT + "models/kimi_k3_dspark.py"
K3_CONFIG = _RT + "configs/kimi_k3_dspark_config.py"
K3_TARGET = _RT + "models/kimi_k3.py"
DFLASH_DRAFTER = _RT + "execution/drafter/dflash.py"
GQA_MODEL = _RT + "models/dflash.py"
GQA_DSPARK_MODEL = _RT + "models/dspark.py"
CAUSAL_LM = _RT + "models/base/causal_lm.py"
HF_UTILS = _RT + "utils/hf_transformers_utils.py"
REGISTRY = _RT + "models/registry.py"
WEIGHT_UTILS = _RT + "model_loader/weight_utils.py"
LOADER = _RT + "model_loader/loader.py"
EAGLE3_LLAMA_MODEL = _RT + "models/llama_eagle3.py"
DEEPSEEK_MODEL = _RT + "models/deepseek_v3.py"
LLAMA_MODEL = _RT + "models/llama.py"
FACTORY = _RT + "execution/factory.py"
MODEL_CONFIG = _RT + "configs/model_config.py"


def _k3(lines: str, path: str = K3_MODEL) -> Source:
    return Source(path, lines, PR1031)


def _main(lines: str, path: str) -> Source:
    return Source(path, lines, MAIN)


# Every class the engine registers (each models/*.py `EntryClass`), at both
# commits; the draft worker resolves `architectures` against this set.
_REGISTERED = frozenset({
    "DFlashDraftModel", "DSparkDraftModel", "K3DSparkModel", "LlamaForCausalLMEagle3",
    "Eagle3DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV32ForCausalLMNextN",
    "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMNextN", "DeepseekV4ForCausalLM",
    "DeepseekV4ForCausalLMDSpark", "DeepseekV4ForCausalLMNextN", "GlmMoeDsaForCausalLM",
    "GlmMoeDsaForCausalLMNextN", "GptOssForCausalLM", "InklingForConditionalGeneration",
    "InklingForConditionalGenerationNextN", "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "KimiK3ForConditionalGenerationNextN", "LlamaForCausalLM",
    "LongcatFlashForCausalLM", "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Qwen2ForCausalLM", "Qwen3ASRForConditionalGeneration", "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "Qwen3OmniMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5ForConditionalGenerationNextN", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForCausalLMNextN",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForConditionalGenerationNextN",
})

ARCHITECTURES = ArchitectureResolution(
    registered=_REGISTERED,
    # hf_transformers_utils.get_config(is_draft_worker=True) rewrites only the
    # first entry; then registry.resolve_model_cls returns the first entry
    # that is registered.
    first_entry_prefix_rewrites=(("Qwen3DSparkModel", "DSparkDraftModel"),),
    first_entry_exact_rewrites={"MiniMaxM2ForCausalLM": "LlamaForCausalLMEagle3"},
    keep_substrings=("NextN", "Eagle", "DFlash", "DSpark"),
    appended_suffix="NextN",
    # KimiK3DSparkConfig fills architectures when absent, [] or null.
    default_architectures={"k3_dspark": ("K3DSparkModel",)},
    source=_main("375-398 (rewrite); registry.py:75-86 (first registered wins)", HF_UTILS),
)

_K3_SKIPS = (
    SkipRule(r"^(embed_tokens|lm_head|confidence_head)\.", "borrowed from the target, or training-only",
             _k3("41", K3_CONFIG)),
    SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding", _k3("506-507")),
)

_K3_FUSED = (
    FusedParameter(
        "layers.{n}.mlp.gate_up_proj.weight",
        ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
        fused_accepted=True, partial_passes=True, source=_k3("490-518"),
    ),
    FusedParameter(
        "layers.{n}.self_attn.fused_qkv_a_proj_with_mqa.weight",
        ("layers.{n}.self_attn.q_a_proj.weight", "layers.{n}.self_attn.kv_a_proj_with_mqa.weight"),
        fused_accepted=True, partial_passes=True, source=_k3("494-497, 519-532"),
    ),
)


# KimiK3DSparkConfig.__init__ defaults (configs/kimi_k3_dspark_config.py@4b9766f6:85-120).
_K3_DEFAULTS = {
    "hidden_size": 7168, "intermediate_size": 14336, "num_hidden_layers": 5, "num_attention_heads": 64,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 163840, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "max_position_embeddings": 1048576, "rope_theta": 50000.0, "num_target_layers": 5,
    "target_hidden_size": 7168, "target_num_hidden_layers": 93, "markov_rank": 256,
    "markov_head_type": "vanilla",
}


# The DFlash drafter (K3 DSpark and GQA DFlash/DSpark alike) wires itself to
# the target at startup with `target_model.get_input_embeddings()`, no
# argument, then `lm_head`, `language_model.logits_processor` and
# `set_dflash_layers_to_capture`, and the engine stops on any it lacks
# (execution/drafter/dflash.py@f4d8ec6e:227-238, @4b9766f6:236-247, called
# from execution/model_executor.py:440). Of the registered target classes only
# these define all four (kimi_k3.py@f4d8ec6e:2997, 3007; kimi_k25.py:303-323,
# 285; qwen3_5.py:1450-1453, its Moe classes subclass it at 1607, 1750;
# minimax_m3.py:1740 over BaseCausalLM). BaseCausalLM has no
# get_input_embeddings (models/base/causal_lm.py:43), so Llama, DeepSeek-V3,
# GPT-OSS and MiniMax-M2 targets fail with AttributeError; Qwen2/Qwen3's
# takes input_ids (qwen3.py:458), a TypeError; Inkling has no capture setter.
DFLASH_TARGET_CLASSES = frozenset({
    "KimiK3ForConditionalGeneration", "KimiK25ForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
})
DFLASH_TARGET_SOURCE = _main("227-238 (wire_target); models/base/causal_lm.py:43", DFLASH_DRAFTER)


def _k3_loader(*, serving_change: bool) -> FamilyLoader:
    commit = PR1031 if serving_change else MAIN
    fc_norm = FeatureSupport(
        supported=serving_change,
        source=Source(K3_MODEL, "319-328" if serving_change else "(no fc_norm)", commit),
        when_unsupported="the model has no fc_norm modules: shipped weights fail the load as unexpected, "
        "a declaration alone is ignored and the taps reach context_proj unnormalised",
    )
    stream = StreamResolution(
        nested_truthy_wins=True,
        validates_top_level=True,
        fixed_stream=None if serving_change else "prefix",
        source=Source(DFLASH_DRAFTER, "52-58, 260-271" if serving_change else "(prefix capture only)", commit),
    )
    return FamilyLoader(
        family="k3_dspark",
        model_class="K3DSparkModel",
        model_types=("k3_dspark",),
        name_rewrites=((r"^model\.", ""),),
        skips=_K3_SKIPS,
        fused=_K3_FUSED,
        unexpected="rejects",
        missing="rejects",
        features={"fc_norm": fc_norm},
        # kimi_k3.set_dflash_layers_to_capture: unique, 0 <= id < len(layers)
        tap_low=0,
        tap_high_offset=-1,
        stream=stream,
        config_defaults={"k3_dspark": _K3_DEFAULTS},
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
        config_limits=K3_LIMITS,
        target_classes=DFLASH_TARGET_CLASSES,
        # MLA attention uses num_attention_heads
        # (configs/kimi_k3_dspark_config.py@4b9766f6:91; models/kimi_k3_dspark.py).
        ignored_fields=("num_key_value_heads",),
        sources={
            "load_weights": _k3("482-553"),
            "config": _k3("87-127, 194-300", K3_CONFIG),
            "taps vs target": _k3("2627-2658", K3_TARGET),
            "stream vs target": _k3("2660-2680", K3_TARGET),
            "target classes": Source(DFLASH_DRAFTER, "236-247 (wire_target)" if serving_change
                                     else "227-238 (wire_target)", commit),
        },
    )


_GQA_SKIPS = (
    SkipRule(r"^(embed_tokens|lm_head)\.", "the draft uses the target's embedding and head",
             _main("479-514", GQA_MODEL)),
    SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding", _main("479-514", GQA_MODEL)),
)

_GQA_FUSED = (
    FusedParameter(
        "layers.{n}.self_attn.qkv_proj.weight",
        ("layers.{n}.self_attn.q_proj.weight", "layers.{n}.self_attn.k_proj.weight",
         "layers.{n}.self_attn.v_proj.weight"),
        fused_accepted=True, partial_passes=True, source=_main("479-514", GQA_MODEL),
    ),
    FusedParameter(
        "layers.{n}.mlp.gate_up_proj.weight",
        ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
        fused_accepted=True, partial_passes=True, source=_main("479-514", GQA_MODEL),
    ),
)

GQA_LOADER = FamilyLoader(
    family="dflash_gqa",
    model_class="DFlashDraftModel / DSparkDraftModel",
    # The engine has no "dflash"/"dspark" config type; the draft's config
    # must parse as a GQA config TokenSpeed registers or transformers knows
    # (utils/hf_transformers_utils.py@f4d8ec6e:339-345); these were run.
    model_types=("qwen3", "qwen2", "llama", "mistral", "qwen3_moe"),
    name_rewrites=((r"^model\.", ""),),
    skips=_GQA_SKIPS,
    fused=_GQA_FUSED,
    unexpected="drops",
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(
            supported=False,
            source=_main("381-395", GQA_MODEL),
            when_unsupported="the GQA DFlash/DSpark model has no fc_norm: the weights are dropped without a "
            "word and the taps reach fc unnormalised",
        ),
        "aux_hidden_stream": FeatureSupport(
            supported=False,
            source=_main("146-177", CAUSAL_LM),
            when_unsupported="the GQA target captures the prefix stream only",
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
    config_limits=GQA_LIMITS,
    target_classes=DFLASH_TARGET_CLASSES,
    unread_flags={
        # The attention's rotary embedding spans the whole head
        # (get_rope(head_dim, rotary_dim=head_dim), models/dflash.py@f4d8ec6e:119-125).
        "partial_rotary_factor": FeatureSupport(
            supported=False,
            source=_main("119-125", GQA_MODEL),
            when_unsupported="the GQA DFlash/DSpark attention rotates the whole head: a draft trained with "
            "partial RoPE is served with full RoPE",
            fixed_value=1.0,
        ),
    },
    # causal_lm.set_dflash_layers_to_capture: unique, 0 <= id and id + 1 < N
    tap_low=0,
    tap_high_offset=-2,
    stream=None,
    # TokenSpeed's Qwen3Config defaults (configs/qwen3_config.py@f4d8ec6e:173-197).
    config_defaults={"qwen3": {
        "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "max_position_embeddings": 32768,
    }},
    sources={
        "load_weights": _main("479-514", GQA_MODEL),
        "fc width": _main("381-395", GQA_MODEL),
        "taps": _main("382-385", GQA_MODEL),
        "taps vs target": _main("146-177", CAUSAL_LM),
        "target classes": DFLASH_TARGET_SOURCE,
        "markov head": _main("75-128", GQA_DSPARK_MODEL),
        "block size": _main("81-97", DFLASH_DRAFTER),
        "config types": _main("69-86, 337-347", HF_UTILS),
        "sliding layers": _main("542-592", GQA_MODEL),
    },
)

# EAGLE-3 (main, f4d8ec6e) ----------------------------------------------------

_LE3 = EAGLE3_LLAMA_MODEL
_DS3 = DEEPSEEK_MODEL

# Neither EAGLE-3 loader validates d2t (`hot = d2t + arange`, any dtype and
# length) and both ignore t2d; these rules come from the `d2t`/`t2d`
# branches of their load_weights.
_EAGLE3_T2D = SkipRule(r"t2d", "the target-to-draft table is never read", _main("697-698", _LE3))

# The target's capture: ids -1..N-2 are captured before layer id+1 runs;
# anything else is silently never captured, so fc gets fewer taps than it
# was built for (models/base/transformer_model.py@f4d8ec6e:219-264;
# models/deepseek_v3.py@f4d8ec6e:1591-1593). No range check anywhere.
_EAGLE3_TAPS_OUTSIDE = ("never captures the rest, without a word: fc then gets fewer taps than it was built for "
                        "and the draft fails at the first request or is served the wrong layers")

# transformers' LlamaConfig and DeepseekV3Config defaults: what the config
# class fills in for a field the config.json leaves out (read off
# transformers 5.12.0, the version TokenSpeed pins: python/pyproject.toml@f4d8ec6e:83).
_LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "rms_norm_eps": 1e-6,
}
_DEEPSEEK_V3_DEFAULTS = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
    "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-6,
}

# speculators' EAGLE-3 config can set norm_before_residual (the layer
# normalises the hidden state before adding the residual); no TokenSpeed
# model reads the key (`git grep norm_before_residual` over python/ at
# f4d8ec6e finds nothing), so a draft trained with it on is served the
# other arithmetic.
_NORM_BEFORE_RESIDUAL = FeatureSupport(
    supported=False,
    source=Source(EAGLE3_LLAMA_MODEL, "(never read)", MAIN),
    when_unsupported="no TokenSpeed model reads norm_before_residual: the decoder layer adds the residual "
    "before its norm, whatever the draft was trained with",
)

EAGLE3_LLAMA_LOADER = FamilyLoader(
    family="eagle3_llama",
    model_class="LlamaForCausalLMEagle3",
    # hf_transformers_utils.get_config: TokenSpeed's own Qwen2/Qwen3 config
    # classes, transformers' AutoConfig for llama (utils/hf_transformers_utils.py@f4d8ec6e:69-86, 337-347).
    model_types=("llama", "qwen3", "qwen2"),
    # load_weights maps a leading `layers.0.` to `midlayer.`, then looks the
    # name up as it is or with `model.` added: a stored `model.` prefix
    # matches body parameters directly, but `model.layers.0.*` (never
    # mapped) and `model.lm_head.*` (the head is not under `model.`) match
    # nothing and are dropped (models/llama_eagle3.py@f4d8ec6e:675-719).
    # Any name holding `d2t` is the hot-token map, any holding `t2d` is
    # skipped (models/llama_eagle3.py@f4d8ec6e:691-698).
    name_rewrites=((r"^.*d2t.*$", "d2t"), (r"^.*t2d.*$", "t2d"), (r"^layers\.0\.", "midlayer."),
                   (r"^model\.(?!layers\.0\.|lm_head\.)", "")),
    # inv_freq is a buffer the rotary embedding recomputes: the loader finds
    # no parameter for it and drops it, which costs nothing.
    skips=(_EAGLE3_T2D, SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding; dropped",
                                 _main("705-719", _LE3))),
    fused=(
        FusedParameter(
            "midlayer.self_attn.qkv_proj.weight",
            ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
             "midlayer.self_attn.v_proj.weight"),
            # A pre-stacked qkv_proj holds none of the `.q_proj` substrings and
            # is split by the configured sizes (layers/linear.py@f4d8ec6e:927-996).
            fused_accepted=True, partial_passes=True, source=_main("678-711", _LE3),
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=_main("678-711", _LE3),
        ),
    ),
    unexpected="drops",
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=_main("489-498", _LE3)),
        "norm_before_fc": FeatureSupport(supported=True, source=_main("480-488", _LE3)),
    },
    unread_flags={
        "norm_before_residual": _NORM_BEFORE_RESIDUAL,
        # LlamaMLP takes hidden_act and builds SiluAndMul whatever it says
        # (models/llama_eagle3.py@f4d8ec6e:150-188, called with it at 268).
        "hidden_act": FeatureSupport(
            supported=False,
            source=_main("150-188, 268", _LE3),
            when_unsupported="the EAGLE-3 MLP is always SiLU-gated: a draft trained with another activation "
            "is served with SiLU",
            fixed_value="silu",
            # transformers' ACT2FN maps "swish" to the same SiLU.
            same_as_fixed=("swish",),
        ),
    },
    tap_low=-1,
    tap_high_offset=-2,
    # id N captures the residual after the last layer
    # (models/base/transformer_model.py@f4d8ec6e:251-264); N-1 is never captured.
    tap_final_residual=True,
    config_limits=LLAMA_EAGLE3_LIMITS,
    stream=None,
    sources={
        "load_weights": _main("675-719", _LE3),
        "one layer": _main("612-613", _LE3),
        "taps (draft)": _main("462-466", _LE3),
        "taps (target)": _main("44-75, 95-102", FACTORY),
        "taps vs target": _main("133-144", CAUSAL_LM),
        "fc width": _main("468-478", _LE3),
        "lm_head": _main("617-631, 752-754", _LE3),
        "d2t": _main("691-695", _LE3),
        "embedding": _main("727-751", _LE3),
        "head_dim": _main("148-150", LLAMA_MODEL),
    },
    config_defaults={"llama": _LLAMA_DEFAULTS, "qwen3": GQA_LOADER.config_defaults["qwen3"]},
    # `getattr(config, "draft_vocab_size", None) is None` -> the target's
    # head replaces whatever was loaded (models/llama_eagle3.py@f4d8ec6e:620-622, 752-754).
    head_from_target="draft_vocab_size_null",
    taps_outside_range=_EAGLE3_TAPS_OUTSIDE,
)

EAGLE3_MLA_LOADER = FamilyLoader(
    family="eagle3_mla",
    model_class="Eagle3DeepseekV2ForCausalLM",
    # Eagle3DeepseekV2ForCausalLM is an MLA architecture, so the config class
    # must carry the MLA attributes: transformers' DeepseekV3Config, or
    # TokenSpeed's KimiK2Config subclass of it (configs/model_config.py@f4d8ec6e:58-71, 206-217;
    # configs/kimi_k2_config.py@f4d8ec6e:23-34).
    model_types=("deepseek_v3", "kimi_k2"),
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
        SkipRule(r"t2d", "the target-to-draft table is never read", _main("2363-2364", _DS3)),
        SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding", _main("1794-1795", _DS3)),
    ),
    fused=(
        FusedParameter(
            "midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight",
            ("midlayer.self_attn.q_a_proj.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight"),
            fused_accepted=False,
            # The row-offset loader copies each part into place with no
            # full-shape check (layers/linear.py@f4d8ec6e:276-278).
            partial_passes=True,
            source=_main("1746-1747, 1828-1861", _DS3),
            when_pre_fused="fails the load: the name contains kv_a_proj_with_mqa, becomes "
            "fused_qfused_qkv_a_proj_with_mqa, is not found, and the loader calls weight_loader on None "
            "(AttributeError)",
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=False,
            partial_passes=True,
            source=_main("1740-1744, 1798-1819", _DS3),
            when_pre_fused="drops it: the name contains up_proj, becomes gate_gate_up_proj, is not found, and "
            "is skipped with a log line, so the MLP is served uninitialised",
        ),
    ),
    unexpected="drops_logged",
    missing="uninitialised",
    unread_flags={"norm_before_residual": _NORM_BEFORE_RESIDUAL},
    features={
        "fc_norm": FeatureSupport(supported=True, source=_main("2166-2175", _DS3)),
        "norm_before_fc": FeatureSupport(
            supported=False,
            source=_main("2110-2186 (no input_norm)", _DS3),
            when_unsupported="Eagle3MlaModel has no input_norm: a declaration is ignored and shipped weights "
            "are logged and skipped, so the taps reach fc unnormalised",
        ),
    },
    tap_low=-1,
    tap_high_offset=-2,
    # The target captures the taps, whatever the draft: a BaseTransformerModel
    # target (Llama) captures id N too (models/base/transformer_model.py@f4d8ec6e:251-264).
    tap_final_residual=True,
    config_limits=MLA_LIMITS,
    stream=None,
    sources={
        "load_weights": _main("2355-2376, 1739-1877", _DS3),
        "one layer": _main("2282-2283", _DS3),
        "taps (draft)": _main("2112-2119, 2139-2140", _DS3),
        "taps (target)": _main("44-75, 95-102", FACTORY),
        "taps vs target": _main("1591-1593, 1688-1695", _DS3),
        "fc width": _main("2142-2155", _DS3),
        "lm_head": _main("2294-2310, 2370-2373, 2430-2432", _DS3),
        "d2t": _main("2358-2362", _DS3),
        "embedding": _main("2408-2434", _DS3),
        "unknown names": _main("1724-1737", _DS3),
    },
    config_defaults={"deepseek_v3": _DEEPSEEK_V3_DEFAULTS, "kimi_k2": _DEEPSEEK_V3_DEFAULTS},
    # MLA attention uses num_attention_heads only.
    ignored_fields=("num_key_value_heads",),
    # `not hasattr(config, "draft_vocab_size")`, and a shipped lm_head
    # clears the flag (models/deepseek_v3.py@f4d8ec6e:2300-2301, 2370-2373).
    head_from_target="draft_vocab_size_absent",
    taps_outside_range=_EAGLE3_TAPS_OUTSIDE,
)

_EAGLE3_LOADERS = {"eagle3_llama": EAGLE3_LLAMA_LOADER, "eagle3_mla": EAGLE3_MLA_LOADER}

# The index's total_size and which shard a tensor is listed in are never
# read: every tensor of every listed shard is loaded. The index only picks
# which of the files present are read, so a shard it names that is missing
# is skipped; a tensor the draft needs from it is then missing (INV001).
_INDEX_SEVERITIES = {"IDX002": "warning", "IDX003": "warning", "IDX004": "warning", "IDX006": "warning"}
_INDEX_SOURCE = _main("254-272", WEIGHT_UTILS)

_COMMON = dict(
    repository=REPOSITORY,
    # ModelConfig._verify_quantization reads either key from the draft's
    # config.json and builds every linear layer quantized
    # (configs/model_config.py@f4d8ec6e:605-700).
    quantization_keys=("quantization_config", "compression_config"),
    quantization_source=_main("605-700", _RT + "configs/model_config.py"),
    # get_config parses the draft's config.json and get_hf_text_config then
    # requires any `text_config` attribute to carry num_attention_heads;
    # transformers' plain config classes (llama, qwen2/3, deepseek_v3) and
    # the engine's kimi_k2 and k3_dspark classes keep the key as given, a
    # dict or null, which has no such attribute: the draft is refused at
    # startup, whatever the key holds (checked by running get_config on
    # each with transformers 5.12, at both commits). The engine's
    # multimodal classes build it into a config (configs/kimi_k25_config.py,
    # kimi_k3_config.py, qwen3_5_config.py, inkling_config.py,
    # minimax_m3_config.py, qwen3_asr_config.py).
    text_config_model_types=("kimi_k25", "kimi_k3", "qwen3_5", "qwen3_5_moe", "inkling_mm_model",
                             "minimax_m3_vl", "qwen3_asr"),
    text_config_source=_main("138-143 (get_hf_text_config), 358 (get_config)", HF_UTILS),
    architectures=ARCHITECTURES,
    ignored_env_vars=("TOKENSPEED_DFLASH_AUX_STREAM",),
    severity_overrides=_INDEX_SEVERITIES,
    severity_sources={code: _INDEX_SOURCE for code in _INDEX_SEVERITIES},
)

CURRENT = EngineProfile(
    name="tokenspeed",
    revision="current",
    commit=f"{PR1031} (k3_dspark), {MAIN} (others)",
    description="TokenSpeed with the K3 DSpark serving change (pull request 1031) for k3_dspark; main for the rest",
    loaders={"k3_dspark": _k3_loader(serving_change=True), "dflash_gqa": GQA_LOADER, **_EAGLE3_LOADERS},
    **_COMMON,
)

PR_1031 = EngineProfile(
    name="tokenspeed",
    revision="pr1031",
    commit=PR1031,
    description="TokenSpeed pull request 1031 head (K3 DSpark: fc_norm + AttnRes tap)",
    loaders={"k3_dspark": _k3_loader(serving_change=True), "dflash_gqa": GQA_LOADER, **_EAGLE3_LOADERS},
    **_COMMON,
)

MAIN_PROFILE = EngineProfile(
    name="tokenspeed",
    revision="main",
    commit=MAIN,
    description="TokenSpeed main: K3 DSpark without fc_norm or the AttnRes stream",
    loaders={"k3_dspark": _k3_loader(serving_change=False), "dflash_gqa": GQA_LOADER, **_EAGLE3_LOADERS},
    **_COMMON,
)

def _k3_loader_pr1016() -> FamilyLoader:
    """PR 1016's K3 DSpark loader: PR 1031's (load_weights, the config and
    fc_norm are the same code: `git diff 5f1e48b5 4b9766f6` over
    models/kimi_k3_dspark.py and configs/kimi_k3_dspark_config.py changes
    only the kernel's import, comments and an idle-rank return), with the
    drafter reading the stream from the environment first."""
    loader = _k3_loader(serving_change=True)
    return dataclasses.replace(
        loader,
        features={"fc_norm": FeatureSupport(supported=True, source=Source(K3_MODEL, "312-322", PR1016))},
        stream=dataclasses.replace(loader.stream, env_override=STREAM_ENV_VAR,
                                   source=Source(DFLASH_DRAFTER, "53-65, 264-277", PR1016)),
        sources={**loader.sources, "load_weights": Source(K3_MODEL, "471-543", PR1016),
                 "taps vs target": Source(K3_TARGET, "1954-1984", PR1016),
                 "stream vs target": Source(K3_TARGET, "1986-2005", PR1016),
                 "target classes": Source(DFLASH_DRAFTER, "242-264 (wire_target)", PR1016)},
    )


PR_1016 = EngineProfile(
    name="tokenspeed",
    revision="pr1016",
    commit=PR1016,
    description="TokenSpeed pull request 1016 head (K3 DSpark: fc_norm via tokenspeed_kernel; the stream "
    "overridable by TOKENSPEED_DFLASH_AUX_STREAM)",
    loaders={"k3_dspark": _k3_loader_pr1016(), "dflash_gqa": GQA_LOADER, **_EAGLE3_LOADERS},
    **{**_COMMON, "ignored_env_vars": ()},
)

PROFILES = (CURRENT, PR_1031, PR_1016, MAIN_PROFILE)
