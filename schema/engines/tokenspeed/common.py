"""What TokenSpeed (lightseekorg/tokenspeed) does the same way for every
draft family: the commits its rules were read at, where its sources sit,
how it resolves `architectures`, which targets a DFlash-style drafter
wires to, how it reads and numbers tap ids, and the profile-wide facts
(quantization keys, `text_config`, the shard index).

The family modules beside this one (`k3_dspark.py`, `dflash_gqa.py`,
`eagle3_llama.py`, `eagle3_mla.py`) hold each family's loader.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    FIRST_TRUTHY,
    LAYER_OUTPUT,
    ArchitectureResolution,
    FeatureSupport,
    SkipRule,
    Source,
    served_wrong,
    TapNumbering,
    TapPaths,
)
# The commits (main, PR 1016, PR 1031): commits.py; how an installed engine
# says which it is: revisions.py.
from dspark.schema.engines.tokenspeed.commits import MAIN, PR1016, PR1031, REPOSITORY, STREAM_ENV_VAR
from dspark.schema.families.base import is_int
from dspark.schema.families.eagle3_common import DEFAULT_TAP_COUNT, TAP_IDS_FIELD
from dspark.schema.findings import Finding

NAME = "tokenspeed"

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


def at_pr1031(lines: str, path: str = K3_MODEL, qualname: str = "") -> Source:
    return Source(path, lines, PR1031, qualname)


def at_main(lines: str, path: str, qualname: str = "") -> Source:
    return Source(path, lines, MAIN, qualname)


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
    source=at_main("375-398 (rewrite); registry.py:75-86 (first registered wins)", HF_UTILS, qualname="get_config"),
)

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
DFLASH_TARGET_SOURCE = at_main("227-238 (wire_target); models/base/causal_lm.py:43", DFLASH_DRAFTER,
                               qualname="DFlash.wire_target")

# Target model classes whose forward never reads `layers_to_capture`: it
# returns `(hidden_states, None)`, so a draft gets no captured states
# (models/qwen3.py@f4d8ec6e:367-401, models/qwen2.py@f4d8ec6e:345-372,
# models/qwen3_moe.py@f4d8ec6e:175-196; qwen3.py@4b9766f6 the same), although
# `set_eagle3_layers_to_capture` and `set_dflash_layers_to_capture` exist on
# them (models/base/causal_lm.py@f4d8ec6e:133-171).
TARGETS_WITHOUT_CAPTURE = frozenset({"Qwen3ForCausalLM", "Qwen2ForCausalLM", "Qwen3MoeForCausalLM"})
TARGETS_WITHOUT_CAPTURE_SOURCE = at_main("367-401", _RT + "models/qwen3.py", qualname="Qwen3Model.forward")
# Targets built on the engine's BaseTransformerModel, whose forward also
# captures id N, the residual after the last layer
# (models/base/transformer_model.py@f4d8ec6e:251-264; subclassed by
# llama.py:325, gpt_oss.py:526, minimax_m2.py:777, minimax_m3.py:864 at
# f4d8ec6e). Other targets (DeepseekV3, Kimi, Qwen) capture layers only.
FINAL_RESIDUAL_TARGETS = frozenset({"LlamaForCausalLM", "GptOssForCausalLM", "MiniMaxM2ForCausalLM",
                                    "MiniMaxM3SparseForConditionalGeneration"})
# Every family's loader: which targets capture what.
TARGET_CAPTURE = dict(targets_without_capture=TARGETS_WITHOUT_CAPTURE,
                      final_residual_targets=FINAL_RESIDUAL_TARGETS)

# Tap numbering ---------------------------------------------------------------

# "Checkpoints name layer *outputs*, but a layer captures the residual
# entering it -- hence the + 1 shift": both capture setters add 1 to every
# id and capture the residual entering that layer, the output of layer id
# (models/base/causal_lm.py@f4d8ec6e:133-171; models/deepseek_v3.py@f4d8ec6e:1688-1695).
NUMBERING = TapNumbering(
    base=LAYER_OUTPUT,
    text="id k is the output of target layer k (the engine adds 1 and captures the residual entering that layer)",
    source=at_main("133-171", CAUSAL_LM, "BaseCausalLM"),
)

# The DFlash drafter reads `dflash_config.target_layer_ids` when non-empty,
# else the top level (execution/drafter/dflash.py@f4d8ec6e:137-150).
DFLASH_TAP_PATHS = TapPaths(paths=("dflash_config.target_layer_ids", "target_layer_ids"), pick=FIRST_TRUTHY)

# The EAGLE-3 target captures what `_eagle_aux_layer_ids` returns: per
# candidate (the config, then its `text_config`) `eagle_config`'s ids when
# `eagle_config` is present, else the top-level ids; the first non-empty
# list wins (execution/factory.py@f4d8ec6e:44-75, 95-102).
EAGLE3_TARGET_TAPS = TapPaths(
    paths=(f"eagle_config.{TAP_IDS_FIELD}", TAP_IDS_FIELD),
    pick=FIRST_TRUTHY,
    section_shadows=True,
    also_under=("text_config",),
)
EAGLE3_TARGET_SOURCE = at_main("44-75, 95-102 (_wire_draft_to_target_model)", FACTORY, qualname="_eagle_aux_layer_ids")

# Config findings shared by the family limits ---------------------------------

YARN_OR_NONE = ("default", "yarn", "deepseek_yarn")


engine_finding = served_wrong


def rope_type(config: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The declared rope type and where: rope_scaling, else rope_parameters
    (`rope_type`, or the older `type` key). Given both, transformers'
    config classes (DeepseekV3Config, KimiK3DSparkConfig) keep
    rope_scaling's, as rope_findings reads them."""
    for field in ("rope_scaling", "rope_parameters"):
        block = config.get(field)
        if isinstance(block, Mapping):
            kind = block.get("rope_type", block.get("type"))
            if isinstance(kind, str):
                return kind, field
    return None, None


def reads_as_float(value: Any) -> bool:
    """Whether Python's float() takes `value`, as the engine calls it."""
    if isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


# model_types TokenSpeed parses with its own Qwen config classes
# (utils/hf_transformers_utils.py@f4d8ec6e:69-72): they keep the
# rope_parameters a config.json writes as it is (configs/qwen3_config.py@
# f4d8ec6e:219, 240); transformers' own classes (llama, mistral) fill
# rope_theta into them from the top level.
KEEPS_FILE_ROPE_PARAMETERS = ("qwen2", "qwen3")

# TokenSpeed's Qwen3Config defaults (configs/qwen3_config.py@f4d8ec6e:173-197).
QWEN3_DEFAULTS = {
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "max_position_embeddings": 32768,
}

# EAGLE-3, both models (main, f4d8ec6e) ----------------------------------------

# Neither EAGLE-3 loader validates d2t (`hot = d2t + arange`, any dtype and
# length) and both ignore t2d; these rules come from the `d2t`/`t2d`
# branches of their load_weights.
EAGLE3_T2D = SkipRule(r"t2d", "the target-to-draft table is never read", at_main("697-698", EAGLE3_LLAMA_MODEL,
                                                                                 qualname="LlamaForCausalLMEagle3.load_weights"))

# The target's capture: ids -1..N-2 are captured before layer id+1 runs;
# anything else is silently never captured, so fc gets fewer taps than it
# was built for (models/base/transformer_model.py@f4d8ec6e:219-264;
# models/deepseek_v3.py@f4d8ec6e:1591-1593). No range check anywhere.
EAGLE3_TAPS_OUTSIDE = ("never captures the rest, without a word: fc then gets fewer taps than it was built for "
                       "and the draft fails at the first request or is served the wrong layers")

# speculators' EAGLE-3 config can set norm_before_residual (the layer
# normalises the hidden state before adding the residual); no TokenSpeed
# model reads the key (`git grep norm_before_residual` over python/ at
# f4d8ec6e finds nothing), so a draft trained with it on is served the
# other arithmetic.
NORM_BEFORE_RESIDUAL = FeatureSupport(
    supported=False,
    source=Source(EAGLE3_LLAMA_MODEL, "(never read)", MAIN),
    when_unsupported="no TokenSpeed model reads norm_before_residual: the decoder layer adds the residual "
    "before its norm, whatever the draft was trained with",
)


def eagle3_flags_only_in_eagle_config(model: str, lines: str, qualname: str):
    """The EAGLE-3 models read `norm_output`, `fc_norm` and `norm_before_fc`
    from the top level of the config only (`getattr(config, ...)`): one set
    only inside `eagle_config` is not served."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        nested = config.get("eagle_config")
        if not isinstance(nested, Mapping):
            return []
        unread = [name for name in ("norm_output", "fc_norm", "norm_before_fc")
                  if nested.get(name) and not config.get(name)]
        if not unread:
            return []
        return [engine_finding(config_file, f"eagle_config sets {', '.join(unread)} but the engine reads "
                               f"{'it' if len(unread) == 1 else 'them'} at the top level only, where "
                               f"{'it is' if len(unread) == 1 else 'they are'} off", Source(model, lines, MAIN, qualname),
                               unread[0], "Set the flag at the top level of config.json.")]

    return rule


def eagle3_fc_skipped_when_widths_meet(model: str, lines: str, tap_paths: TapPaths, qualname: str):
    """The EAGLE-3 forward applies input_norm, fc_norm and fc only when the
    captured state is wider than the embedding (`if hidden_states.size(-1)
    != embeds.size(-1)`): with taps x target width equal to hidden_size
    (one tap of the draft's own width) the raw target state enters the
    layer and fc is never applied. `tap_paths`: the list the target
    captures, whose length is the number of captured states."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        hidden = config.get("hidden_size")
        width = config.get("target_hidden_size") or hidden
        ids, _ = tap_paths.read(config)
        count = DEFAULT_TAP_COUNT if ids is None else len(ids) if isinstance(ids, list) else None
        if not (is_int(hidden) and is_int(width) and is_int(count)) or count * width != hidden:
            return []
        return [engine_finding(config_file, f"{count} tap(s) x {width} = hidden_size {hidden}: the engine's forward "
                               "then takes the captured state for already projected and never applies fc (nor "
                               "fc_norm or input_norm)", Source(model, lines, MAIN, qualname), "fc",
                               "Retrain on more taps (their concatenation must be wider than hidden_size).")]

    return rule


# Profile-wide facts -----------------------------------------------------------

# The index's total_size and which shard a tensor is listed in are never
# read: every tensor of every listed shard is loaded. The index only picks
# which of the files present are read, so a shard it names that is missing
# is skipped; a tensor the draft needs from it is then missing (INV001).
_INDEX_SEVERITIES = {"IDX002": "warning", "IDX003": "warning", "IDX004": "warning", "IDX006": "warning"}
_INDEX_SOURCE = at_main("254-272", WEIGHT_UTILS, qualname="filter_duplicate_safetensors_files")

PROFILE_FACTS = dict(
    repository=REPOSITORY,
    # ModelConfig._verify_quantization reads either key from the draft's
    # config.json and builds every linear layer quantized
    # (configs/model_config.py@f4d8ec6e:605-700).
    quantization_keys=("quantization_config", "compression_config"),
    quantization_source=at_main("605-700", MODEL_CONFIG, qualname="ModelConfig"),
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
    text_config_source=at_main("138-143 (get_hf_text_config), 358 (get_config)", HF_UTILS,
                               qualname="get_hf_text_config"),
    architectures=ARCHITECTURES,
    ignored_env_vars=(STREAM_ENV_VAR,),
    severity_overrides=_INDEX_SEVERITIES,
    severity_sources={code: _INDEX_SOURCE for code in _INDEX_SEVERITIES},
)
