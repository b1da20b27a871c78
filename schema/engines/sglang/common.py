"""What SGLang 0.5.23 does the same way for every draft family: where its
sources sit, how it resolves `architectures`, which target classes capture
hidden states for a drafter and how they number tap ids, and the
profile-wide facts (quantization keys, `text_config`, the shard index).

Every rule is read from the released wheel's Python files and cited as
`sglang/srt/<path>@sglang==0.5.23:<lines>`. The family modules beside this
one (`eagle3_llama.py`, `eagle3_mla.py`, `dflash_gqa.py`) hold each family's
loader; `k3_dspark.py` says why there is none for K3 DSpark.

How a draft reaches SGLang: the user names the algorithm
(`--speculative-algorithm EAGLE3 | DFLASH | DSPARK`, upper-cased; the
engine never infers it from the draft: arg_groups/speculative_hook.py:81-118,
121-152; speculative/spec_info.py:49-65), the draft's `config.json` is parsed
by transformers (pinned at 5.19.0) or SGLang's own config registry, and the
model class is the first registered entry of `architectures`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dspark.schema.engines.base import (
    ANY_MODEL_TYPE,
    FIRST_NOT_NULL,
    LAYER_OUTPUT,
    ArchitectureResolution,
    FeatureSupport,
    Source,
    served_wrong,
    TapNumbering,
    TapPaths,
)
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.findings import Finding

NAME = "sglang"
VERSION = "0.5.23"
PIN = f"sglang=={VERSION}"
REPOSITORY = "sgl-project/sglang"

_SRT = "sglang/srt/"
LLAMA_EAGLE3 = _SRT + "models/llama_eagle3.py"
MLA_EAGLE3 = _SRT + "models/kimi_k25_eagle3.py"
LLAMA = _SRT + "models/llama.py"
QWEN3 = _SRT + "models/qwen3.py"
DEEPSEEK_V2 = _SRT + "models/deepseek_v2.py"
KIMI_K25 = _SRT + "models/kimi_k25.py"
KIMI_K3 = _SRT + "models/kimi_k3.py"
GPT_OSS = _SRT + "models/gpt_oss.py"
DFLASH_MODEL = _SRT + "models/dflash.py"
DSPARK_MODEL = _SRT + "models/dspark.py"
LFM2_DSPARK = _SRT + "models/lfm2_dspark.py"
REGISTRY = _SRT + "models/registry.py"
MODEL_CONFIG = _SRT + "configs/model_config.py"
HF_COMMON = _SRT + "utils/hf_transformers/common.py"
HF_CONFIG = _SRT + "utils/hf_transformers/config.py"
LOADER_UTILS = _SRT + "model_loader/utils.py"
LOADER = _SRT + "model_loader/loader.py"
WEIGHT_UTILS = _SRT + "model_loader/weight_utils.py"
SPEC_AUX = _SRT + "model_executor/model_runner_components/spec_aux_hidden_state.py"
CAPTURE_SETUP = _SRT + "model_executor/model_runner_components/attention_backend_setup.py"
EAGLE_WORKER = _SRT + "speculative/eagle_worker_v2.py"
DFLASH_UTILS = _SRT + "speculative/dflash_utils.py"
DFLASH_WORKER = _SRT + "speculative/dflash_worker_v2.py"
DSPARK_CONFIG = _SRT + "speculative/dspark_components/dspark_config.py"
DSPARK_WORKER = _SRT + "speculative/dspark_components/dspark_worker_v2.py"
LAYER_STAGE = _SRT + "layers/layer_boundary/stage.py"


def at(lines: str, path: str, qualname: str = "") -> Source:
    """A rule read from the released wheel, `path::qualname@sglang==0.5.23:lines`."""
    return Source(path, lines, PIN, qualname)


# Architectures -----------------------------------------------------------------

# Every class the engine registers: the `EntryClass` of each module of
# sglang/srt/models/ (models/registry.py:117-150 imports them all and keys
# them by class name), listed off the wheel.
_REGISTERED = frozenset({
    "AfmoeForCausalLM", "ApertusForCausalLM", "ArceeForCausalLM", "BaichuanForCausalLM",
    "BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration", "BailingMoEForCausalLM",
    "BailingMoeForCausalLM", "BailingMoeForCausalLMNextN", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
    "BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration", "BeamForCausalLM",
    "BertForSequenceClassification", "BertModel", "CLIPModel", "ChatGLMModel", "Cohere2ForCausalLM",
    "Cohere2MoeForCausalLM", "Cohere2VisionForConditionalGeneration", "CohereForCausalLM", "Contriever",
    "Cosmos3EdgeForConditionalGeneration", "Cosmos3ForConditionalGeneration", "DFlash2BeamDraftModel",
    "DFlash2DraftModel", "DFlashDraftModel", "DFlashLagunaForCausalLM", "DSparkDraftModel",
    "DSparkMiniMaxDraftModel", "DbrxForCausalLM", "DeciLMForCausalLM", "DeepseekForCausalLM",
    "DeepseekOCRForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV3ForCausalLMNextN", "DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMDSpark",
    "DeepseekV4ForCausalLMNextN", "DeepseekVL2ForCausalLM", "DiffusionGemmaForBlockDiffusion",
    "Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN", "DotsOCRForCausalLM", "DotsVLMForCausalLM",
    "Eagle3DeepseekV2ForCausalLM", "EmbeddingGemma2Model", "EmbeddingGemmaModel", "Ernie4_5_ForCausalLM",
    "Ernie4_5_MoeForCausalLM", "Ernie4_5_MoeForCausalLMMTP", "Ernie4_5_VLMoeForConditionalGeneration",
    "Exaone4ForCausalLM", "ExaoneForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoEForCausalLMMTP",
    "ExaoneMoeForCausalLM", "FalconH1ForCausalLM", "FalconMambaForCausalLM", "GPT2LMHeadModel",
    "GPTBigCodeForCausalLM", "GPTJForCausalLM", "Gemma2ForCausalLM", "Gemma2ForSequenceClassification",
    "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration",
    "Gemma4AssistantForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedAssistantForCausalLM", "Gemma4UnifiedForConditionalGeneration", "GemmaForCausalLM",
    "GigaChat35ForCausalLM", "GigaChat35ForCausalLMNextN", "Glm4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeForCausalLMNextN", "Glm4MoeLiteForCausalLM", "Glm4MoeLiteForCausalLMNextN",
    "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "Glm5NextForConditionalGeneration",
    "Glm5NextForConditionalGenerationNextN", "GlmAsrForConditionalGeneration", "GlmImageForConditionalGeneration",
    "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN", "GlmOcrForConditionalGeneration",
    "GlmOcrForConditionalGenerationNextN", "GptOssForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
    "GraniteMoeHybridForCausalLM", "GraniteMoeSWAForCausalLM", "GraniteMoeSharedForCausalLM",
    "GraniteSWAForCausalLM", "Grok1ForCausalLM", "Grok1ModelForCausalLM", "HYV3ForCausalLM", "HYV3ForCausalLMNextN",
    "HYV4ForCausalLM", "HYV4ForCausalLMNextN", "HrmTextForCausalLM", "HunYuanDenseV1ForCausalLM",
    "HunYuanMoEV1ForCausalLM", "IQuestCoderForCausalLM", "IQuestLoopCoderForCausalLM", "IQuestQ1ForCausalLM",
    "IQuestQ1MTP", "InklingForConditionalGeneration", "InklingForConditionalGenerationMTP", "InternLM2ForCausalLM",
    "InternLM2ForRewardModel", "InternLM3ForCausalLM", "InternS1ForConditionalGeneration",
    "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "InternVLChatModel", "JetNemotronForCausalLM",
    "JetVLMForConditionalGeneration", "K2HorizonForCausalLM", "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM", "KimiLinearForCausalLM",
    "KimiVLForConditionalGeneration", "LLaDA2MoeModelLM", "LagunaForCausalLM", "Lfm2BidirectionalModel",
    "Lfm2DSparkDraftModel", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Lfm2VlForConditionalGeneration",
    "LiLiCorrDraftModel", "LightOnOCRForConditionalGeneration", "LingDSparkModel", "Llama4ForCausalLM",
    "Llama4ForConditionalGeneration", "LlamaEmbeddingModel", "LlamaForCausalLM", "LlamaForCausalLMEagle",
    "LlamaForCausalLMEagle3", "LlamaForClassification", "LlamaForSequenceClassification",
    "LlamaForSequenceClassificationWithNormal_Weights", "LlavaForConditionalGeneration", "LlavaLlamaForCausalLM",
    "LlavaMistralForCausalLM", "LlavaQwenForCausalLM", "LlavaVidForCausalLM",
    "LocateAnythingForConditionalGeneration", "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN",
    "Mamba2ForCausalLM", "MambaForCausalLM", "MellumForCausalLM", "MiDashengLMModel", "MiMoForCausalLM", "MiMoMTP",
    "MiMoV2ASRForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", "MiMoV2MTP", "MindSporeForCausalLM",
    "MiniCPM3ForCausalLM", "MiniCPMForCausalLM", "MiniCPMO", "MiniCPMSALAForCausalLM", "MiniCPMV",
    "MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_7ForConditionalGeneration", "MiniMaxDFlash2DraftModel",
    "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Ministral3ForCausalLM", "Mistral3ForConditionalGeneration", "MistralForCausalLM", "MistralForCausalLMEagle",
    "MistralLarge3ForCausalLM", "MistralLarge3ForCausalLMEagle", "MistralModel", "MixtralForCausalLM",
    "MllamaForConditionalGeneration", "MossVLForConditionalGeneration", "MultiModalityCausalLM",
    "MuseGlimmerAssistantModel", "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration",
    "MuseSparkForConditionalGeneration", "NVILAForConditionalGeneration", "NVILALiteForConditionalGeneration",
    "NanbeigeForCausalLM", "NanbeigeForSequenceClassification", "NemotronHForCausalLM", "NemotronHForCausalLMMTP",
    "NemotronHPuzzleForCausalLM", "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2",
    "NemotronH_Omni_Reasoning_V3", "OPTForCausalLM", "Olmo2ForCausalLM", "OlmoForCausalLM", "OlmoeForCausalLM",
    "OrionForCausalLM", "POINTSV15ChatModel", "PaddleOCRVLForConditionalGeneration", "PersimmonForCausalLM",
    "Phi3ForCausalLM", "Phi3SmallForCausalLM", "Phi4MMForCausalLM", "PhiForCausalLM", "PhiMoEForCausalLM",
    "PixtralForConditionalGeneration", "PixtralVisionModel", "QWenLMHeadModel", "QuantMixtralForCausalLM",
    "Qwen2AudioForConditionalGeneration", "Qwen2ForCausalLM", "Qwen2ForCausalLMEagle", "Qwen2ForRewardModel",
    "Qwen2ForSequenceClassification", "Qwen2MoeForCausalLM", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3ASRForConditionalGeneration", "Qwen3DSparkModel",
    "Qwen3ForCausalLM", "Qwen3ForRewardModel", "Qwen3ForSequenceClassification", "Qwen3Model",
    "Qwen3MoeForCausalLM", "Qwen3MoeForCausalLMMTP", "Qwen3NextForCausalLM", "Qwen3NextForCausalLMMTP",
    "Qwen3OmniMoeForConditionalGeneration", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5ForCausalLMMTP", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForCausalLMMTP", "Qwen4ExpForConditionalGeneration",
    "SDARForCausalLM", "SDARMoeForCausalLM", "Sarashina2VisionForCausalLM", "SarvamMLAForCausalLM",
    "SarvamMoEForCausalLM", "SolarForCausalLM", "Spark2_5ForCausalLM", "StableLmForCausalLM",
    "Starcoder2ForCausalLM", "Step3VLForConditionalGeneration", "Step3p5ForCausalLM", "Step3p5MTP",
    "Step3p7ForConditionalGeneration", "StepVLForConditionalGeneration", "TeleFLMForCausalLM",
    "TorchNativeLlamaForCausalLM", "TorchNativePhi3ForCausalLM", "TransformersEmbeddingModel",
    "TransformersForCausalLM", "TransformersForSequenceClassification", "TransformersMoEEmbeddingModel",
    "TransformersMoEForCausalLM", "TransformersMoEForSequenceClassification",
    "TransformersMultiModalEmbeddingModel", "TransformersMultiModalForCausalLM",
    "TransformersMultiModalForSequenceClassification", "TransformersMultiModalMoEEmbeddingModel",
    "TransformersMultiModalMoEForCausalLM", "TransformersMultiModalMoEForSequenceClassification",
    "UnlimitedOCRForCausalLM", "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
    "XLMRobertaForSequenceClassification", "XLMRobertaModel", "XllmForCausalLM", "XverseForCausalLM",
    "XverseMoeForCausalLM", "YiVLForCausalLM", "ZayaForCausalLM"
})

ARCHITECTURES = ArchitectureResolution(
    registered=_REGISTERED,
    first_entry_prefix_rewrites=(),
    # ModelConfig rewrites the first entry of a draft's architectures from a
    # target class to its own MTP/NextN head (configs/model_config.py:1010-1212);
    # LlamaForCausalLM and the draft classes are left as they are.
    first_entry_exact_rewrites={
        "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLMNextN", "DeepseekV32ForCausalLM": "DeepseekV3ForCausalLMNextN",
        "GlmMoeDsaForCausalLM": "GlmMoeDsaForCausalLMNextN", "Glm4MoeForCausalLM": "Glm4MoeForCausalLMNextN",
        "Glm4MoeLiteForCausalLM": "Glm4MoeLiteForCausalLMNextN", "MiMoForCausalLM": "MiMoMTP",
        "Qwen3MoeForCausalLM": "Qwen3MoeForCausalLMMTP", "Qwen3NextForCausalLM": "Qwen3NextForCausalLMMTP",
        "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLMMTP", "Qwen3_5ForCausalLM": "Qwen3_5ForCausalLMMTP",
        "Qwen3_5MoeForConditionalGeneration": "Qwen3_5ForCausalLMMTP", "Qwen3_5MoeForCausalLM": "Qwen3_5ForCausalLMMTP",
        "LongcatFlashForCausalLM": "LongcatFlashForCausalLMNextN",
    },
    keep_substrings=(),
    appended_suffix="",
    # No config class fills architectures in: without them ModelConfig
    # indexes architectures[0] of None (or of []) and the engine stops
    # (configs/model_config.py:1010-1040).
    default_architectures={},
    # The dense DSpark classes for Qwen3, Ling and LFM2 targets are the same
    # model under other names (models/dspark.py:977-995, models/lfm2_dspark.py:
    # 12-16): dspark judges them as the DSparkDraftModel they subclass.
    aliases={"Qwen3DSparkModel": "DSparkDraftModel", "LingDSparkModel": "DSparkDraftModel",
             "Lfm2DSparkDraftModel": "DSparkDraftModel"},
    source=at("1010-1212 (draft rewrite); models/registry.py:74-114 (first registered wins); "
              "model_loader/utils.py:111-168, 224-231 (unregistered: refused)", MODEL_CONFIG, "ModelConfig"),
)

# Target capture -------------------------------------------------------------------

# EAGLE-3: the target reads the draft's `eagle_config["eagle_aux_hidden_state_layer_ids"]`
# and nothing else; no eagle_config (or not an object, or no key) means
# None, the target's defaults. The top-level list is never read by the
# target (spec_aux_hidden_state.py:185-196).
EAGLE3_TARGET_TAPS = TapPaths(paths=(f"eagle_config.{TAP_IDS_FIELD}",), pick=FIRST_NOT_NULL)
EAGLE3_TARGET_SOURCE = at("185-196", SPEC_AUX, "_resolve_eagle_aux_hidden_state")

# The EAGLE-3 capture setters of DeepSeek-V2/V3 (and of every class that
# inherits it, Kimi-K2.5's language model included) add 1 only when the
# first id is 1, and otherwise capture the ids as they are
# (models/deepseek_v2.py:3458-3473; models/kimi_k25.py:691-693, 928-939;
# models/glm4_moe_lite.py:805-820).
DEEPSEEK_STYLE_TARGETS = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN",
    "KimiK25ForConditionalGeneration", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN",
    "Glm5NextForConditionalGenerationNextN", "MistralLarge3ForCausalLM", "Glm4MoeLiteForCausalLM",
    "Glm4MoeLiteForCausalLMNextN",
})


def _eagle3_shift(ids: Sequence[int], target_class: str | None) -> int:
    """0 where the target adds 1 (id k is the output of layer k); -1 on a
    DeepSeek-style target handed a list whose first id is not 1: it
    captures the residual entering layer k, the output of layer k-1."""
    if target_class in DEEPSEEK_STYLE_TARGETS and not (ids and ids[0] == 1):
        return -1
    return 0


# A capture id c captures the residual stream entering decoder layer c
# (models/llama.py:485-494 with layers/layer_boundary/stage.py:412-458;
# models/deepseek_v2.py:3175-3195, 2806-2811 with stage.py:461-482): so id k,
# handed on as k + 1, is the output of layer k.
EAGLE3_NUMBERING = TapNumbering(
    base=LAYER_OUTPUT,
    text=("id k is the output of target layer k (the target adds 1 and captures the residual entering that "
          "layer); a DeepSeek-V3 or Kimi-K2.5 target adds 1 only when the first id is 1, else id k is the "
          "output of layer k-1"),
    source=at("929-941", LLAMA, "LlamaForCausalLM.set_eagle3_layers_to_capture"),
    shift=_eagle3_shift,
)

# DFLASH/DSPARK: every capture setter but Kimi-K3's (and the other AttnRes
# or DeepSeek-V4 targets') adds 1; those capture the layer's output in place
# (models/llama.py:943-953; models/qwen3.py:793-805; models/deepseek_v2.py:
# 3475-3485; models/kimi_k3.py:3054-3071). Both name layer outputs.
#
# Muse Glimmer's setter adds nothing and its model appends the stream
# ENTERING layer i for an id i (models/muse_glimmer.py::MuseGlimmerModel.
# forward@0.5.23:420-423, MuseGlimmerForCausalLM.set_dflash_layers_to_capture:
# 866-879): layer i - 1's output. The runner first maps a DFlash2 (or Muse
# assistant) draft's ids up by one, so those read layer outputs there as
# everywhere; every other DFLASH-family draft's id k is layer k - 1's output
# (model_runner_components/spec_aux_hidden_state.py::
# _map_muse_target_layer_ids:22-29, same in 0.5.20-0.5.23).
MUSE_INPUT_CAPTURE_TARGETS = frozenset({"MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration"})


def _muse_input_shift(ids: Sequence[int], target_class: str | None) -> int:
    return -1 if target_class in MUSE_INPUT_CAPTURE_TARGETS else 0


DFLASH_NUMBERING = TapNumbering(
    base=LAYER_OUTPUT,
    text="id k is the output of target layer k (on a Muse Glimmer target, of layer k - 1: it captures the "
         "stream entering layer k)",
    source=at("793-805", QWEN3, "Qwen3ForCausalLM.set_dflash_layers_to_capture"),
    shift=_muse_input_shift,
)
DFLASH2_NUMBERING = TapNumbering(
    base=LAYER_OUTPUT,
    text="id k is the output of target layer k (a Muse Glimmer target is handed k + 1, which it captures "
         "entering that layer)",
    source=at("22-29", SPEC_AUX, "_map_muse_target_layer_ids"),
)

# Target classes whose model implements set_eagle3_layers_to_capture: any
# other target stops the engine at startup (attention_backend_setup.py:51-61).
# Read off every registered class and the classes it inherits from.
EAGLE3_TARGET_CLASSES = frozenset({
    "ApertusForCausalLM", "BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "Cosmos3ForConditionalGeneration", "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV3ForCausalLMNextN", "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM", "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "Glm5NextForConditionalGeneration", "GlmMoeDsaForCausalLM", "GptOssForCausalLM", "IQuestCoderForCausalLM",
    "InternLM3ForCausalLM", "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "KimiK25ForConditionalGeneration", "Llama4ForCausalLM",
    "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LongcatFlashForCausalLM", "MellumForCausalLM",
    "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Ministral3ForCausalLM", "MistralForCausalLM", "MistralLarge3ForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM",
    "Qwen2MoeForCausalLM", "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration", "SarvamMoEForCausalLM",
    "TeleFLMForCausalLM",
})
EAGLE3_TARGET_CLASSES_SOURCE = at("40-61", CAPTURE_SETUP, "configure_aux_hidden_state_capture")

# Target classes a DFLASH or DSPARK drafter can wire to: a capture setter
# (set_dflash_layers_to_capture, or set_dspark_layers_to_capture for DSPARK;
# attention_backend_setup.py:62-73), the input embedding (dflash_worker_v2.py:
# 222-230; dspark_worker_v2.py:519-522) and, for DSpark, lm_head
# (dspark_worker_v2.py:312-323). Qwen2ForCausalLM has no DFLASH setter.
DFLASH_TARGET_CLASSES = frozenset({
    "BailingMoeV3ForCausalLM", "BeamForCausalLM", "Cosmos3ForConditionalGeneration", "DeepseekV2ForCausalLM",
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "Glm4MoeLiteForCausalLM",
    "Glm5NextForConditionalGeneration", "GlmMoeDsaForCausalLM", "GptOssForCausalLM", "IQuestCoderForCausalLM",
    "InklingForConditionalGeneration", "InternLM3ForCausalLM", "InternS1ProForConditionalGeneration",
    "InternS2MobiusForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM",
    "KimiLinearForCausalLM", "LagunaForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM",
    "Lfm2VlForConditionalGeneration", "Llama4ForCausalLM", "LlamaForCausalLM", "MellumForCausalLM",
    "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", "MiniMaxM3SparseForConditionalGeneration", "Ministral3ForCausalLM",
    "MistralForCausalLM", "MistralLarge3ForCausalLM", "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration",
    "MuseSparkForConditionalGeneration", "NanbeigeForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_VL_V2", "Phi3ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "TeleFLMForCausalLM",
})
# Of those, the classes with set_dspark_layers_to_capture and no
# set_dflash_layers_to_capture host a DSPARK draft only: a DFLASH draft on
# them stops the engine ("implements neither ...": attention_backend_setup.py::
# configure_aux_hidden_state_capture:62-73; models/kimi_linear.py:803,
# deepseek_v4.py:4853, bailing_moe_v3.py:1731, each class an nn.Module).
DSPARK_ONLY_TARGET_CLASSES = frozenset({"BailingMoeV3ForCausalLM", "DeepseekV4ForCausalLM", "KimiLinearForCausalLM"})
DFLASH_VARIANT = "DFlashDraftModel"
DFLASH_TARGET_SOURCE = at("40-73 (capture setters); dflash_worker_v2.py:222-230; "
                          "dspark_components/dspark_worker_v2.py:307-323, 519-522", CAPTURE_SETUP,
                          "configure_aux_hidden_state_capture")

# speculators' EAGLE-3 config can set norm_before_residual; no SGLang model
# reads the key (no occurrence anywhere in sglang/srt), so a draft trained
# with it on is served the other arithmetic.
NORM_BEFORE_RESIDUAL = FeatureSupport(
    supported=False,
    source=at("88-119 (never read)", LLAMA_EAGLE3, "LlamaDecoderLayer.forward"),
    when_unsupported="no SGLang model reads norm_before_residual: the decoder layer adds the residual before "
    "its norm, whatever the draft was trained with",
)

# Every capture setter's model reads layers_to_capture in its layer loop
# (models/qwen3.py:524-533, models/llama.py:485-494): no target class
# registers a setter and then captures nothing (FamilyLoader.targets_without_capture).
NON_CAPTURING_TARGETS: tuple[str, ...] = ()



engine_finding = served_wrong


def refused(config_file: str, field: str, text: str, source: Source, fix: str) -> Finding:
    """CFG003 for a config SGLang refuses at startup."""
    return Finding(
        "CFG003",
        f"{config_file}: {text}; SGLang refuses the draft at startup ({source.cite()}). {fix}",
        file=config_file,
        detail={"field": field, "validator": "engine", "source": source.cite()},
    )


def silu_only(model: str, source: Source):
    """The MLP of the EAGLE-3 models raises unless hidden_act is "silu"."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        act = config.get("hidden_act", "silu")
        if act == "silu":
            return []
        return [refused(config_file, "hidden_act", f"hidden_act = {act!r}; {model}'s MLP supports silu only "
                        "and raises ValueError", source, "Serve it on an engine with that activation, or retrain "
                        "with silu.")]

    return rule


# transformers' config classes, at the version SGLang 0.5.23 pins
# (transformers==5.19.0, sglang-0.5.23.dist-info/METADATA): what they fill
# in for a field config.json leaves out (models/llama/configuration_llama.py:
# 64-90, models/qwen3/configuration_qwen3.py:62-78,
# models/deepseek_v3/configuration_deepseek_v3.py:82-117 of that release).
LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "rms_norm_eps": 1e-6,
}
QWEN3_DEFAULTS = {
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768,
}
DEEPSEEK_V3_DEFAULTS = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
    "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-6,
}

# Profile-wide facts -------------------------------------------------------------

# The index only picks which of the files present are read (files it does
# not name are dropped); a shard it names that is missing stops the engine
# (RuntimeError, kept an error); which shard a tensor is listed in and
# total_size are never read (model_loader/weight_utils.py:757-808).
_INDEX_SEVERITIES = {"IDX003": "warning", "IDX004": "warning", "IDX006": "warning"}
_INDEX_SOURCE = at("757-808", WEIGHT_UTILS, "filter_duplicate_safetensors_files")

PROFILE_FACTS = dict(
    repository=REPOSITORY,
    # ModelConfig._parse_quant_hf_config reads quantization_config, else
    # compression_config (configs/model_config.py:1727-1746).
    quantization_keys=("quantization_config", "compression_config"),
    quantization_source=at("1727-1746", MODEL_CONFIG, "ModelConfig._parse_quant_hf_config"),
    # get_hf_text_config turns a text_config given as a plain object into a
    # config and takes it as the draft's text config, asserting it has
    # num_attention_heads (utils/hf_transformers/common.py:561-572, 600-604),
    # whatever the model_type; ModelConfig then reads the draft's shapes from
    # it alone: head_dim else hidden_size // num_attention_heads, hidden_size,
    # num_hidden_layers, vocab_size (configs/model_config.py:1341-1348, 1566,
    # 1581, 1605), an AttributeError at startup for one it lacks.
    text_config_model_types=(ANY_MODEL_TYPE,),
    text_config_source=at("547-604", HF_COMMON, "get_hf_text_config"),
    text_config_requires=("num_attention_heads", "hidden_size", "num_hidden_layers", "vocab_size"),
    text_config_requires_source=at("1341-1348, 1566, 1581, 1605", MODEL_CONFIG, "ModelConfig._derive_model_shapes"),
    architectures=ARCHITECTURES,
    # Weight files: *.safetensors, else *.bin, else *.pt (fall_back_to_pt),
    # the first pattern with matches (model_loader/loader.py:406-430,
    # 480-548), a .pt loaded with torch.load(weights_only=True) and its
    # top-level entries yielded (model_loader/weight_utils.py:1398-1419).
    reads_pt=True,
    severity_overrides=_INDEX_SEVERITIES,
    severity_sources={code: _INDEX_SOURCE for code in _INDEX_SEVERITIES},
)
