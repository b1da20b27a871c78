"""TokenSpeed (lightseekorg/tokenspeed): what its loaders do with each draft
family, read from its code.

Two revisions are modelled:

* `main` at f4d8ec6e: the GQA DFlash/DSpark drafts (`models/dflash.py`,
  `models/dspark.py`) and, for K3 DSpark, the loader before the serving
  change (no fc_norm, the prefix stream only).
* `pr1031` at 4b9766f6, the head of pull request 1031 ("serve DSpark drafts:
  fc_norm + AttnRes tap"): the K3 DSpark loader with fc_norm and
  aux_hidden_stream; the other families as on main.

`current` is what a deploy gate should assume today: the K3 DSpark serving
change for `k3_dspark`, main for every other family.

Where DESIGN.md and this code disagree, this code wins (see docs/contract.md).
"""

from __future__ import annotations

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

REPOSITORY = "lightseekorg/tokenspeed"
MAIN = "f4d8ec6e"
PR1031 = "4b9766f6"

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
        # MLA attention uses num_attention_heads
        # (configs/kimi_k3_dspark_config.py@4b9766f6:91; models/kimi_k3_dspark.py).
        ignored_fields=("num_key_value_heads",),
        sources={
            "load_weights": _k3("482-553"),
            "config": _k3("87-127, 194-300", K3_CONFIG),
            "taps vs target": _k3("2627-2658", K3_TARGET),
            "stream vs target": _k3("2660-2680", K3_TARGET),
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
    # must parse as a transformers GQA config.
    model_types=("qwen3", "qwen2", "llama"),
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
        "markov head": _main("75-128", GQA_DSPARK_MODEL),
        "block size": _main("81-97", DFLASH_DRAFTER),
        "config types": _main("69-86, 337-347", HF_UTILS),
        "sliding layers": _main("542-592", GQA_MODEL),
    },
)

# The index's total_size and which shard a tensor is listed in are never
# read: every tensor of every listed shard is loaded.
_INDEX_SEVERITIES = {"IDX003": "warning", "IDX004": "warning", "IDX006": "warning"}
_INDEX_SOURCE = _main("254-272", WEIGHT_UTILS)

_COMMON = dict(
    repository=REPOSITORY,
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
    loaders={"k3_dspark": _k3_loader(serving_change=True), "dflash_gqa": GQA_LOADER},
    **_COMMON,
)

PR_1031 = EngineProfile(
    name="tokenspeed",
    revision="pr1031",
    commit=PR1031,
    description="TokenSpeed pull request 1031 head (K3 DSpark: fc_norm + AttnRes tap)",
    loaders={"k3_dspark": _k3_loader(serving_change=True), "dflash_gqa": GQA_LOADER},
    **_COMMON,
)

MAIN_PROFILE = EngineProfile(
    name="tokenspeed",
    revision="main",
    commit=MAIN,
    description="TokenSpeed main: K3 DSpark without fc_norm or the AttnRes stream",
    loaders={"k3_dspark": _k3_loader(serving_change=False), "dflash_gqa": GQA_LOADER},
    **_COMMON,
)

PROFILES = (CURRENT, PR_1031, MAIN_PROFILE)
