"""What vLLM 0.33.0 does the same way for every draft family: where its
sources sit, how it resolves `architectures`, how its default runner (Model
Runner V2) reads and numbers tap ids, which targets capture hidden states,
and the profile-wide facts (quantization keys, `text_config`, the shard
index, what a name without a destination and a parameter never loaded do).

Every rule was read in the released wheel (`pip download vllm==0.33.0
--no-deps`); citations are `vllm/<path>:<lines>@vllm==0.33.0`. The family
modules beside this one hold each family's loader.

Why this module is long: it holds what vLLM does the same way for all five
families (the runner's tap reading, the capturing targets, the loader's
treatment of unknown and missing names, the config rules several loaders
share); split, the family modules would import it from several places.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    FIRST_TRUTHY,
    HIDDEN_STATES,
    LAYER_OUTPUT,
    ArchitectureResolution,
    FeatureSupport,
    SkipRule,
    Source,
    served_wrong,
    TapNumbering,
    TapPaths,
    TapReading,
)
from dspark.schema.families.base import is_int
from dspark.schema.families.eagle3_common import layers_defaulting_to
from dspark.schema.findings import Finding, Severity

NAME = "vllm"
VERSION = "0.33.0"
PIN = f"vllm=={VERSION}"
REPOSITORY = "vllm-project/vllm"

_M = "vllm/model_executor/models/"
LLAMA_EAGLE3 = _M + "llama_eagle3.py"
QWEN3_EAGLE3 = _M + "qwen3_eagle3.py"
DEEPSEEK_EAGLE3 = _M + "deepseek_eagle3.py"
QWEN3_DFLASH = _M + "qwen3_dflash.py"
QWEN3_DSPARK = _M + "qwen3_dspark.py"
LLAMA = _M + "llama.py"
QWEN2 = _M + "qwen2.py"
QWEN3 = _M + "qwen3.py"
DEEPSEEK_V2 = _M + "deepseek_v2.py"
INTERFACES = _M + "interfaces.py"
MODEL_UTILS = _M + "utils.py"
REGISTRY = _M + "registry.py"
K3_DSPARK = "vllm/models/kimi_k3/nvidia/dspark_mla.py"
K3_TARGET = "vllm/models/kimi_k3/nvidia/model.py"
K3_CONFIG = "vllm/transformers_utils/configs/k3_dspark.py"
EAGLE_CONFIG = "vllm/transformers_utils/configs/eagle.py"
SPECULATORS_ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"
HF_CONFIG = "vllm/transformers_utils/config.py"
ARCH_CONVERTOR = "vllm/transformers_utils/model_arch_config_convertor.py"
SPECULATIVE = "vllm/config/speculative.py"
VLLM_CONFIG = "vllm/config/vllm.py"
DEFAULT_LOADER = "vllm/model_executor/model_loader/default_loader.py"
WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
EAGLE3_UTILS = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
EAGLE_SHARING = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"
DFLASH_SHARING = "vllm/v1/worker/gpu/spec_decode/dflash/utils.py"
DSPARK_SHARING = "vllm/v1/worker/gpu/spec_decode/dspark/utils.py"
SPEC_UTILS = "vllm/v1/worker/gpu/spec_decode/utils.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def at(lines: str, path: str, qualname: str = "") -> Source:
    """A rule read from the released wheel: `path::qualname@vllm==0.33.0:lines`."""
    return Source(path, lines, PIN, qualname)


# Architectures ---------------------------------------------------------------

# The draft classes the registry maps (model_executor/models/registry.py:
# 655-713), each under the name the dspark family uses for the same model:
# vLLM registers several names per class.
ALIASES = {
    "Eagle3LlamaForCausalLM": "LlamaForCausalLMEagle3",
    "Eagle3MiniMaxM2ForCausalLM": "LlamaForCausalLMEagle3",
    "Eagle3Qwen2_5vlForCausalLM": "LlamaForCausalLMEagle3",
    "Eagle3Qwen3vlForCausalLM": "LlamaForCausalLMEagle3",
    # Qwen3 layers (qwen3_eagle3.py, registry.py:705-706).
    "Eagle3DeepseekV3ForCausalLM": "Eagle3DeepseekV2ForCausalLM",
    "MuseGlimmerAssistantModel": "DFlashDraftModel",
    "DFlashMuseGlimmerAssistantModel": "DFlashDraftModel",
    "Qwen3DSparkModel": "DSparkDraftModel",
    "Qwen3OmniDSparkModel": "DSparkDraftModel",
}

# The other draft classes the registry maps (model_executor/models/registry.py::
# _SPECULATIVE_DECODING_MODELS@0.33.0:655-744), which no dspark family models:
# a draft naming one loads, unjudged (ENG007), where an unregistered name is refused.
UNMODELLED_DRAFT_CLASSES = frozenset({
    "ExtractHiddenStatesModel", "MiMoMTPModel", "MiMoV2MTPModel", "MiMoV2OmniMTPModel", "EagleCohereForCausalLM",
    "EagleLlamaForCausalLM", "EagleLlama4ForCausalLM", "EagleMiniCPMForCausalLM", "LiLiCorrDraftModel",
    "DFlash2DraftModel", "DFlash2BeamDraftModel", "DSparkV41DraftModel", "Qwen3XPressModel",
    "DFlashQwen3XPressModel", "MuseSparkDSparkModel", "DFlashLagunaForCausalLM", "Gemma4DSparkModel",
    "EagleMistralForCausalLM", "EagleMistralLarge3ForCausalLM", "EagleDeepSeekMTPModel", "DeepSeekMTPModel",
    "DeepseekV32MTPModel", "Dots3NoteMTPModel", "DeepSeekV4MTPModel", "BailingMoeV3MTPModel", "MiniMaxM3MTP",
    "BailingMoeV25MTPModel", "InklingMTPModel", "Gemma4MTPModel", "ErnieMTPModel", "ExaoneMoeMTP",
    "Exaone4_5_MTP", "NemotronHMTPModel", "LongCatFlashMTPModel", "Glm4MoeMTPModel", "Glm4MoeLiteMTPModel",
    "GlmOcrMTPModel", "Glm5NextMTPModel", "OpenPanguMTPModel", "ParseAuxMTPModel", "Qwen3NextMTP", "Step5MTP",
    "Qwen4ExpMTP", "Step3p5MTP", "Qwen3_5MTP", "Qwen3_5MoeMTP", "InternS2MobiusMTP", "HYV3MTPModel",
    "HYV4MTPModel", "KimiK3MTPModel",
    # SpecForge's P-EAGLE name, registered as the Llama EAGLE-3 class: dspark
    # models P-EAGLE under vLLM's own names (peagle.py), not SpecForge's
    # export, whose config names no mask token vLLM reads.
    "PEagleDraftModel",
})

ARCHITECTURES = ArchitectureResolution(
    registered=frozenset({"LlamaForCausalLMEagle3", "Eagle3Qwen3ForCausalLM", "Eagle3DeepseekV2ForCausalLM",
                          "DFlashDraftModel", "DSparkDraftModel", "K3DSparkModel",
                          # P-EAGLE, the EAGLE-3 classes served with parallel drafting (registry.py:698-706).
                          "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM"}) | UNMODELLED_DRAFT_CLASSES,
    # The registry takes every entry as written: no first-entry rewrite
    # (the eagle3/dflash rename of EAGLEConfig keeps names that already
    # start or end with Eagle3/DFlash, transformers_utils/configs/eagle.py:55-76).
    first_entry_prefix_rewrites=(),
    first_entry_exact_rewrites={},
    keep_substrings=("",),
    appended_suffix="",
    # K3DSparkConfig fills no architectures: an empty list is "No model
    # architectures are specified" (model_executor/models/registry.py:1426-1427).
    default_architectures={},
    source=at("1420-1470 (first registered entry wins); 655-713 (draft classes)", REGISTRY,
              "_ModelRegistry.resolve_model_cls"),
    aliases=ALIASES,
)

# Tap ids -------------------------------------------------------------------

# Model Runner V2 is the default (config/vllm.py:730-767) and the only runner
# for dspark (3111-3113). It captures what get_eagle3_aux_layers_from_config
# returns: the top-level eagle_aux_hidden_state_layer_ids as written; else
# dflash_config.target_layer_ids, dspark_target_layer_ids or the top-level
# target_layer_ids, each id + 1; else dflash_config.layer_ids or
# eagle_config.layer_ids as written. eagle_config's
# eagle_aux_hidden_state_layer_ids is never read
# (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150).
TARGET_TAPS = TapPaths(
    paths=("eagle_aux_hidden_state_layer_ids", "dflash_config.target_layer_ids", "dspark_target_layer_ids",
           "target_layer_ids", "dflash_config.layer_ids", "eagle_config.layer_ids"),
    pick=FIRST_TRUTHY,
)
TARGET_TAPS_SOURCE = at("113-150", EAGLE3_UTILS, "get_eagle3_aux_layers_from_config")

# The target captures `hidden_states + residual` entering layer k for id k
# (id 0: the embeddings; id N: the last layer's output before the final
# norm): Llama, Qwen2/3, Qwen3-MoE, Kimi-K3 (models/llama.py:427-441,
# qwen2.py:422-434, qwen3_moe.py:505-515, kimi_k3/nvidia/model.py:1145-1189)
# and DeepSeek-V2/V3 (deepseek_v2.py:1546-1587).
HIDDEN_STATES_NUMBERING = TapNumbering(
    base=HIDDEN_STATES,
    text="id k is hidden_states[k], the residual entering target layer k (0 the embeddings, N the last "
    "layer's output)",
    source=at("427-441", LLAMA, "LlamaModel.forward"),
)
# dflash_config.target_layer_ids / target_layer_ids name layer outputs: the
# runner adds 1 before capturing (eagle3_utils.py:121-140).
LAYER_OUTPUT_NUMBERING = TapNumbering(
    base=LAYER_OUTPUT,
    text="id k is the output of target layer k (the runner adds 1 and captures the residual entering layer k+1)",
    source=at("121-140", EAGLE3_UTILS, "get_eagle3_aux_layers_from_config"),
)
PATH_NUMBERING = {
    "dflash_config.target_layer_ids": LAYER_OUTPUT_NUMBERING,
    "dspark_target_layer_ids": LAYER_OUTPUT_NUMBERING,
    "target_layer_ids": LAYER_OUTPUT_NUMBERING,
}


def default_taps(target_layers: int) -> list[int]:
    """SupportsEagle3.get_eagle3_default_aux_hidden_state_layers: (2, N//2,
    N-3) of the target's N layers, in vLLM's numbering
    (model_executor/models/interfaces.py:1751-1770; deepseek_v2.py:1958-1960)."""
    return [2, target_layers // 2, target_layers - 3]


DEFAULT_TAPS_TEXT = "[2, N//2, N-3] of the target's N layers, as hidden_states ids"
DEFAULT_TAPS_SOURCE = at("1751-1770", INTERFACES, "SupportsEagle3.get_eagle3_default_aux_hidden_state_layers")

# The target stores tuple(sorted(set(ids))) and captures in layer order
# (model_executor/models/interfaces.py:1616-1617, 1640-1650; DeepSeek-V2
# captures in layer order too, deepseek_v2.py:1561-1568): the draft gets its
# taps in ascending layer order, each once.
TAP_ORDER_SOURCE = at("1616-1617, 1640-1650", INTERFACES, "EagleModelMixin._set_aux_hidden_state_layers")

def tap_order(paths: TapPaths):
    """A config rule: the target captures the ids sorted and once each
    (TAP_ORDER_SOURCE), so a list written out of order is served permuted and
    a repeated id leaves fc one tap short."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        ids, path = paths.read(config)
        if not isinstance(ids, list) or not all(is_int(i) for i in ids) or ids == sorted(set(ids)):
            return []
        if len(set(ids)) != len(ids):
            text = (f"{path} {ids} repeats an id; the target captures each layer once, so fc gets "
                    f"{len(set(ids))} taps for the {len(ids)} it was built for and the first request fails")
            return [engine_refusal(config_file, text, TAP_ORDER_SOURCE, path,
                                   "List each layer once, as the draft was trained.")]
        return [served_wrong(config_file, f"{path} {ids} is not in ascending order; the target captures "
                             f"{sorted(ids)} in layer order, so each fc slice gets another layer than it "
                             "was trained on", TAP_ORDER_SOURCE, path,
                             "Retrain with the list in ascending order (reordering fc's columns to match "
                             "would serve it right).")]

    return rule


# Every list a trainer writes, where it writes it.
_DECLARED_LISTS = ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids",
                   "dflash_config.target_layer_ids", "target_layer_ids", "aux_hidden_state_layer_ids")


def _declared(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    found = []
    for path in _DECLARED_LISTS:
        value = TapPaths(paths=(path,)).read(config)[0]
        if value:
            found.append((path, value))
    return found


def tap_agreement(taps: TapReading, draft_text: str, draft_source: Source):
    """A config rule: the tap count the draft builds fc for against what the
    default runner makes the target capture (TARGET_TAPS_SOURCE). vLLM
    compares neither: a count that differs fails on fc's width at load or
    at the first request; a list the runner does not read is trained on
    layers the target does not capture."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        count = taps.draft_count(config)
        if not is_int(count):
            return []
        target_ids, target_path = taps.target_ids(config)
        sources = {"draft": draft_source.cite(), "target": TARGET_TAPS_SOURCE.cite()}
        unread = [(p, ids) for p, ids in _declared(config)
                  if p != target_path and p.split(".")[-1] != (target_path or "").split(".")[-1]]
        if target_ids is None:
            if taps.defaults is None:
                return []
            if count != 3:
                return [Finding(
                    "TAP001",
                    f"{config_file}: the draft builds fc for {count} taps ({draft_text}) but vLLM's runner finds no "
                    f"tap list it reads and the target captures its 3 default taps {DEFAULT_TAPS_TEXT} "
                    f"({TARGET_TAPS_SOURCE.cite()}); the draft fails at the first request. Write the list the "
                    "draft was trained on in eagle_aux_hidden_state_layer_ids.",
                    file=config_file,
                    detail={"draft_taps": count, "target_ids": None, "source": sources},
                )]
            if unread:
                path, ids = unread[0]
                # eagle_config's ids are layer outputs (SpecForge, TorchSpec's MLA
                # export); the defaults vLLM captures, hidden_states [2, N//2, N-3],
                # are the outputs of layers [1, N//2-1, N-4]: the same layers on
                # the one target size whose defaults the list is.
                fits = layers_defaulting_to(ids) if path.startswith("eagle_config.") else None
                same = (f" On a {fits}-layer target those defaults are the outputs of layers {ids!r}, the list "
                        "itself: served as trained there, other layers on any other (pass --target to tell)."
                        if fits is not None else "")
                return [Finding(
                    "TAP002",
                    f"{config_file}: {path} = {ids!r} is not read by vLLM's default runner (Model Runner V2 reads "
                    f"the top-level eagle_aux_hidden_state_layer_ids, dflash_config/top-level target_layer_ids, "
                    f"never eagle_config's list), so the target captures its defaults {DEFAULT_TAPS_TEXT}.{same} "
                    "(The V1 runner, VLLM_USE_V2_MODEL_RUNNER=0, reads eagle_config's list.) Copy the list the "
                    "draft was trained on to the top-level eagle_aux_hidden_state_layer_ids, as vLLM numbers it.",
                    file=config_file,
                    detail={"declared": dict(unread), "target_ids": None, "source": sources,
                            **({"defaults_for_layers": fits, "rejudge": "layer_outputs"} if fits else {})},
                    # SpecForge and TorchSpec's MLA configs train on eagle_config's list: served wrong,
                    # unless the list is what the defaults capture.
                    severity=(Severity.WARNING if fits is not None or not path.startswith("eagle_config.")
                              else Severity.ERROR),
                )]
            return [Finding(
                "TAP003",
                f"{config_file}: no tap ids vLLM reads; the draft builds fc for {count} taps and the target "
                f"captures its defaults {DEFAULT_TAPS_TEXT}. Write the list in eagle_aux_hidden_state_layer_ids "
                "if the draft was trained on other layers.",
                file=config_file,
                detail={"draft_taps": count, "target_ids": None, "source": sources},
            )]
        if not isinstance(target_ids, list):
            return []
        if len(target_ids) != count:
            return [Finding(
                "TAP001",
                f"{config_file}: the draft builds fc for {count} taps ({draft_text}) but vLLM's runner makes the "
                f"target capture {len(target_ids)} ({target_path} = {target_ids!r}, which it reads first); the "
                "draft fails on fc's width at load or at the first request. Make the lists agree.",
                file=config_file,
                detail={"draft_taps": count, "target_ids": target_ids, "target_source": target_path,
                        "source": sources},
            )]
        return []

    return rule


# No range check: an id no layer reaches is never captured, so the draft gets
# fewer states than fc was built for (eagle3_utils.py:113-150 hands the ids
# over as they are).
TAPS_OUTSIDE = ("never captures the rest, without a word: fc then gets fewer taps than it was built for and the "
                "draft fails at the first request")

# Target classes that implement SupportsEagle3 (the EAGLE-3, DFlash and DSpark
# drafters all need it: eagle3_utils.py:28-29 raises RuntimeError otherwise),
# read off the registry with their class hierarchy. Architectures the
# registry does not know load through the Transformers backend, whose
# classes implement it too (registry.py:1440-1470).
EAGLE3_TARGET_CLASSES = frozenset({
    "AfmoeForCausalLM", "ApertusForCausalLM", "ArceeForCausalLM", "Cohere2MoeForCausalLM", "CwmForCausalLM",
    "DeepseekForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV41ForCausalLM", "DeepseekV4ForCausalLM", "DeepseekV4ForConditionalGeneration",
    "Emu3ForConditionalGeneration", "Ernie4_5ForCausalLM", "Exaone4_5_ForConditionalGeneration",
    "FlexOlmoForCausalLM", "GPTBigCodeForCausalLM", "GPTNeoXForCausalLM", "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "Glm5NextForCausalLM",
    "Glm5NextForConditionalGeneration", "GlmForCausalLM", "GlmMoeDsaForCausalLM", "GptOssForCausalLM",
    "GraniteForCausalLM", "GraniteMoeForCausalLM", "GraniteMoeSWAForCausalLM", "GraniteMoeSharedForCausalLM",
    "GraniteSWAForCausalLM", "HunYuanDenseV1ForCausalLM", "HunYuanMoEV1ForCausalLM",
    "HunYuanVLForConditionalGeneration", "IQuestCoderForCausalLM", "InternLM3ForCausalLM",
    "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "Jais2ForCausalLM", "K2HorizonForCausalLM",
    "KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration", "KimiLinearForCausalLM",
    "Kolibri1ForCausalLM", "LLaMAForCausalLM", "LagunaForCausalLM", "LightOnOCRForConditionalGeneration",
    "Llama4ForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LlavaForConditionalGeneration",
    "MellumForCausalLM", "MiMoForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", "MiMoV2OmniForCausalLM",
    "MiniCPM3ForCausalLM", "MiniCPMForCausalLM", "MiniCPMOcrForConditionalGeneration",
    "MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_7ForConditionalGeneration", "MiniMaxM2ForCausalLM",
    "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration", "Ministral3ForCausalLM",
    "Mistral3ForConditionalGeneration", "MistralForCausalLM", "MistralLarge3ForCausalLM",
    "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration",
    "NanbeigeForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2", "NemotronH_Omni_Reasoning_V3",
    "NemotronH_Super_Omni_Reasoning_V3", "Olmo2ForCausalLM", "Olmo3ForCausalLM", "OlmoForCausalLM",
    "OpenCUAForConditionalGeneration", "Phi3ForCausalLM", "PhiForCausalLM", "PixtralForConditionalGeneration",
    "Plamo3ForCausalLM", "Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3ASRForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3OmniMoeForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
    "SarvamMLAForCausalLM", "SeedOssForCausalLM", "SmolLM3ForCausalLM", "Starcoder2ForCausalLM",
    "Step1ForCausalLM", "TeleChat2ForCausalLM", "TeleChat3ForCausalLM", "TeleFLMForCausalLM",
    "TransformersForCausalLM", "TransformersMoEForCausalLM", "TransformersMultiModalForCausalLM",
    "TransformersMultiModalMoEForCausalLM", "VaultGemmaForCausalLM",
})
EAGLE3_TARGET_SOURCE = at("28-29", EAGLE3_UTILS, "set_eagle3_aux_hidden_state_layers")

# What every family shares --------------------------------------------------------

# AutoWeightsLoader raises ValueError on a name that reaches no module or
# parameter (model_executor/models/utils.py:425-448), except names ending in
# ".bias" (load_weights adds it to the ignored suffixes, 457-458) and the
# rotary caches its mapper drops (233-240, 471).
ROTARY_CACHES = SkipRule(r"rotary_(pos_)?emb\.(inv_freq|cos_cached|sin_cached)",
                         "recomputed by the rotary embedding; dropped",
                         at("233-240, 471 (AutoWeightsLoader.load_weights)", MODEL_UTILS,
                            "AutoWeightsLoader.REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER"))
BIAS_WITHOUT_DESTINATION = SkipRule(r"\.bias$", "a bias the model does not build is dropped without a word",
                                    at("457-458", MODEL_UTILS, "AutoWeightsLoader.load_weights"))
T2D = SkipRule(r"t2d", "the target-to-draft table is never read", at("426-427", LLAMA_EAGLE3,
                                                                     "Eagle3LlamaForCausalLM.load_weights"))

# hidden_act: LlamaMLP, DeepseekV2MLP and Qwen2MLP (Qwen3's) raise ValueError
# for anything but "silu" when the model is built.
SILU_ONLY_SOURCES = {"llama": at("112-115", LLAMA,
                                 "LlamaMLP.__init__"), "deepseek": at("278-281", DEEPSEEK_V2,
                                                                                        "DeepseekV2MLP.__init__"),
                     "qwen": at("105-108", QWEN2, "Qwen2MLP.__init__")}





def engine_refusal(config_file: str, text: str, source: Source, field: str, fix: str) -> Finding:
    """CFG003 (validator: engine): the engine refuses the draft at startup."""
    return Finding(
        "CFG003",
        f"{config_file}: {text} ({source.cite()}). {fix}",
        file=config_file,
        detail={"field": field, "source": source.cite(), "validator": "engine"},
    )


def launch_method(method: str, inferred_from: tuple[str, ...] = ()):
    """A config rule (ENG004, a note): the speculative method vLLM must be
    given. Without `method` it infers one only from the draft path's words
    or a few architectures (config/speculative.py:1433-1509), else runs the
    folder as an independent draft model."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        architectures = config.get("architectures")
        if isinstance(architectures, list) and any(a in inferred_from for a in architectures):
            return []
        source = at("1433-1509", SPECULATIVE, "SpeculativeConfig.__post_init__")
        return [Finding(
            "ENG004",
            f"{config_file}: launch vLLM with --speculative-config '{{\"method\": \"{method}\", ...}}' (or a draft "
            f"path holding \"{method}\"): vLLM infers the method only from the path's words or a few architectures "
            f"and otherwise runs the folder as an independent draft model ({source.cite()}).",
            file=config_file,
            detail={"method": method, "source": source.cite()},
        )]

    return rule


def silu_only(source: Source):
    """A config rule: the MLP refuses any activation but silu at build."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        act = config.get("hidden_act", "silu")
        if act == "silu":
            return []
        return [engine_refusal(config_file, f"hidden_act is {act!r}; the model's MLP raises ValueError "
                               "'Unsupported activation' for anything but \"silu\"", source, "hidden_act",
                               "Serve it as silu only if it was trained with silu; otherwise retrain.")]

    return rule


def target_hidden_size_not_null(source: Source):
    """`getattr(config, "target_hidden_size", hidden_size)`: a null value is
    taken as it is and the fc width None * taps raises TypeError at build."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        if "target_hidden_size" not in config or config["target_hidden_size"] is not None:
            return []
        return [engine_refusal(config_file, "target_hidden_size is null; the model builds fc as "
                               "target_hidden_size x taps and fails with TypeError", source,
                               "target_hidden_size", "Drop the key (hidden_size is the default) or write the width.")]

    return rule


def width_value(config: Mapping[str, Any], field: str, fallback: str) -> Any:
    """getattr(config, field, config.fallback): absent -> the fallback."""
    return config[field] if field in config else config.get(fallback)


def width_or(config: Mapping[str, Any], field: str, fallback: str) -> Any:
    """getattr(config, field, None) or config.fallback: null too."""
    return config.get(field) or config.get(fallback)


# Profile-wide facts -----------------------------------------------------------

# Only the files the index names are read, and a named file that is missing
# stops the load (FileNotFoundError); the index's total_size and which file a
# tensor is listed in are never read, and every tensor of a read file is
# loaded (model_executor/model_loader/weight_utils.py:590-616, called from
# default_loader.py:248-254).
_INDEX_SEVERITIES = {"IDX003": "warning", "IDX004": "warning", "IDX006": "warning"}
_INDEX_SOURCE = at("590-616", WEIGHT_UTILS, "filter_duplicate_safetensors_files")

PROFILE_FACTS = dict(
    repository=REPOSITORY,
    # quantization_config, else compression_config (compressed-tensors),
    # from the draft's config (transformers_utils/model_arch_config_convertor.py:241-291).
    quantization_keys=("quantization_config", "compression_config"),
    quantization_source=at("241-291", ARCH_CONVERTOR, "ModelArchConfigConvertorBase"),
    # The draft's ModelConfig runs get_hf_text_config on the config as
    # parsed (config/model.py:680-693, built at config/speculative.py:1406-1430,
    # before the EAGLEConfig wrapping at 1514-1533), which requires
    # num_attention_heads on whatever get_text_config returns when it is not
    # the config itself (transformers_utils/config.py:1258-1272).
    # transformers 5.20's get_text_config returns a `text_config` attribute
    # that is not None, and a plain config class (llama, qwen2/3,
    # deepseek_v3, kimi_k2) keeps the key as given: a dict, {} or any other
    # value has no such attribute and the draft is refused at startup; a
    # null one is passed over and the config itself returned, so the draft
    # loads (checked by running get_config and get_hf_text_config on each).
    # The multimodal config classes vLLM registers build text_config into a
    # config; but an EAGLE-3 or DFlash draft is then wrapped in EAGLEConfig,
    # which copies the draft's to_dict() (text_config as a plain dict) onto
    # itself (transformers_utils/configs/eagle.py:85-88), and update_arch_
    # runs get_hf_text_config again on it (config/speculative.py:1514-1533,
    # 1872-1878): refused there too (a kimi_k25-typed EAGLE-3 draft with its
    # target's text_config; no loader below parses those types anyway, SRV001).
    # The EAGLE-3 models read every field from that EAGLEConfig, never from
    # text_config (model_executor/models/llama_eagle3.py:173, deepseek_eagle3.py:162).
    text_config_model_types=("kimi_k25", "kimi_k3", "qwen3_5", "qwen3_5_moe", "minimax_m3_vl", "qwen3_asr"),
    text_config_source=at("1258-1272 (get_hf_text_config); vllm/config/model.py:680-693 (the draft's ModelConfig)",
                          HF_CONFIG, "get_hf_text_config"),
    text_config_null_is_absent=True,
    architectures=ARCHITECTURES,
    # config.json with speculators_config parses as SpeculatorsConfig
    # (transformers_utils/config.py:360-366; configs/speculators/base.py:32-63).
    native_config_shapes=("speculators",),
    severity_overrides=_INDEX_SEVERITIES,
    severity_sources={code: _INDEX_SOURCE for code in _INDEX_SEVERITIES},
)

UNREAD_STREAM = FeatureSupport(
    supported=False,
    source=at("1068-1106", K3_TARGET, "KimiLinearModel"),
    when_unsupported="no vLLM model reads aux_hidden_stream: the Kimi-K3 target captures the AttnRes stream only "
    "when the server runs with VLLM_KIMI_K3_AUX_ATTN_RES_STREAM=1 (vllm/envs.py:1664-1666), for every draft, and "
    "the prefix stream otherwise",
)

__all__ = ["is_int"]
