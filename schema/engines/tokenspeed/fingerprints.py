"""Fingerprints of the tokenspeed functions dspark's rules cite, in each
release it models: `path::Qualified.name` -> a hash of the definition's
source (converters/fingerprints.py), None where the release has no such
definition. `--runtime` and `doctor` compare an installed engine with it.

Stored as the profiles are (releases.py): the newest release whole, each
older one as the fingerprints that differ from its newer neighbour's;
schema/engines/fingerprint_tables.py gives each release's whole table.

Generated from the released wheels by `python tests/conformance/fingerprints.py`:
do not edit.

Why this module is long: it is generated data, one row per cited function
and per registered class, whole for the newest release."""

NEWEST = '0.1.1'

FINGERPRINTS: dict[str, str | None] = {
    'tokenspeed-kernel/python/tokenspeed_kernel/ops/layernorm/triton.py::segmented_rmsnorm': None,
    'tokenspeed/runtime/configs/kimi_k3_dspark_config.py::K3_DSPARK_SKIPPED_WEIGHT_PREFIXES': '73936ecf16a51ae0',
    'tokenspeed/runtime/configs/kimi_k3_dspark_config.py::KimiK3DSparkConfig.__init__': 'd26da5dddaa2e857',
    'tokenspeed/runtime/configs/kimi_k3_dspark_config.py::validate_k3_dspark_config': 'e15793ea8d3399d5',
    'tokenspeed/runtime/configs/model_config.py::ModelConfig': 'f0661b030dab03eb',
    'tokenspeed/runtime/execution/drafter/dflash.py::AUX_HIDDEN_STREAM_ENV': None,
    'tokenspeed/runtime/execution/drafter/dflash.py::DFlash': '40574ee6bb956480',
    'tokenspeed/runtime/execution/drafter/dflash.py::DFlash.wire_target': '7b2d4c6d80162e01',
    'tokenspeed/runtime/execution/drafter/dflash.py::_resolve_aux_hidden_stream': None,
    'tokenspeed/runtime/execution/factory.py::_eagle_aux_layer_ids': '41928a60e6b9ada0',
    'tokenspeed/runtime/layers/segmented_rmsnorm.py::segmented_rmsnorm': 'e1177b6783939c20',
    'tokenspeed/runtime/model_loader/weight_utils.py::filter_duplicate_safetensors_files': '5614e3357227e442',
    'tokenspeed/runtime/models/base/causal_lm.py::BaseCausalLM': '8a5930b14d6adaba',
    'tokenspeed/runtime/models/base/causal_lm.py::BaseCausalLM.set_eagle3_layers_to_capture': '12a69b4d2b4d1ce8',
    'tokenspeed/runtime/models/deepseek_v3.py::DeepseekV3ForCausalLM.get_param': '34b5dd0e8956c9a2',
    'tokenspeed/runtime/models/deepseek_v3.py::DeepseekV3ForCausalLM.load_weights': '639780880723c05c',
    'tokenspeed/runtime/models/deepseek_v3.py::DeepseekV3Model.forward': '774c7048db1c340f',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM': '0739f2fb3253da34',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM.__init__': '0860afb2adac0054',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM.load_weights': '3d2a9669546cdf6f',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM.set_embed_and_head': 'ee95ff463d0d85f2',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3MlaDecoderLayer.__init__': 'bc37006c61e6aab4',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3MlaModel': 'c1d29709c1d0583b',
    'tokenspeed/runtime/models/deepseek_v3.py::Eagle3MlaModel.__init__': '2bef2810bcfd37ce',
    'tokenspeed/runtime/models/dflash.py::DFlashAttention.__init__': '07004a7a0070861a',
    'tokenspeed/runtime/models/dflash.py::DFlashDraftModel': '51b250f2266ba7eb',
    'tokenspeed/runtime/models/dflash.py::DFlashDraftModel.__init__': 'dee77d4c46697470',
    'tokenspeed/runtime/models/dflash.py::DFlashDraftModel._checkpoint_capture_field': '43f849f73ec7956e',
    'tokenspeed/runtime/models/dflash.py::DFlashDraftModel.load_weights': '62e41abcb6a38ddf',
    'tokenspeed/runtime/models/kimi_k3.py::KimiLinearForCausalLM.set_dflash_aux_hidden_stream': '6304422c63168d96',
    'tokenspeed/runtime/models/kimi_k3.py::KimiLinearForCausalLM.set_dflash_layers_to_capture': 'c7ab7bdc7c503c19',
    'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel': 'ba1faed2953724c0',
    'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.__init__': '658a39467d1713d8',
    'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.configure_target': '7de69978c0df78ac',
    'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.load_weights': '9b332ae1e33cd793',
    'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.project_target_hidden': 'd7943411cb9b1949',
    'tokenspeed/runtime/models/llama.py::LlamaAttention.__init__': '2043f495e4411808',
    'tokenspeed/runtime/models/llama_eagle3.py::Eagle3LlamaModel.forward': 'f16a0126f665ba8d',
    'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3': 'e4315178c1f37556',
    'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3.load_weights': '0c885b9f90219269',
    'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3.prepare_model_kwargs': '68bbb6694008e1bd',
    'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3.set_embed_and_head': '36287387e46da763',
    'tokenspeed/runtime/models/llama_eagle3.py::LlamaMLP': '125d677cfb6594dc',
    'tokenspeed/runtime/models/qwen3.py::Qwen3Model.forward': '0831366900a6dbdc',
    'tokenspeed/runtime/models/registry.py::import_model_classes': '3bd61859f6f17b88',
    'tokenspeed/runtime/utils/hf_transformers_utils.py::_CONFIG_REGISTRY': 'a5208a9d3806de0e',
    'tokenspeed/runtime/utils/hf_transformers_utils.py::get_config': '60b8b26ab2589866',
    'tokenspeed/runtime/utils/hf_transformers_utils.py::get_hf_text_config': 'f49f408725e5332d',
}

# Each older release, newest first: what differs from the release above it.
OLDER_FINGERPRINTS: dict[str, dict[str, str | None]] = {
    '0.1.0': {
        'tokenspeed/runtime/configs/kimi_k3_dspark_config.py::K3_DSPARK_SKIPPED_WEIGHT_PREFIXES': None,
        'tokenspeed/runtime/configs/kimi_k3_dspark_config.py::KimiK3DSparkConfig.__init__': None,
        'tokenspeed/runtime/configs/kimi_k3_dspark_config.py::validate_k3_dspark_config': None,
        'tokenspeed/runtime/configs/model_config.py::ModelConfig': '91ba34338a23c2dd',
        'tokenspeed/runtime/execution/drafter/dflash.py::DFlash': '6c6a5545f83e8370',
        'tokenspeed/runtime/execution/drafter/dflash.py::DFlash.wire_target': None,
        'tokenspeed/runtime/execution/factory.py::_eagle_aux_layer_ids': None,
        'tokenspeed/runtime/layers/segmented_rmsnorm.py::segmented_rmsnorm': None,
        'tokenspeed/runtime/model_loader/weight_utils.py::filter_duplicate_safetensors_files': 'daab57762e5c0503',
        'tokenspeed/runtime/models/base/causal_lm.py::BaseCausalLM': '3db19a81fe81b5ee',
        'tokenspeed/runtime/models/deepseek_v3.py::DeepseekV3ForCausalLM.get_param': 'b933507457ae8b47',
        'tokenspeed/runtime/models/deepseek_v3.py::DeepseekV3ForCausalLM.load_weights': 'e492e8339386b7a3',
        'tokenspeed/runtime/models/deepseek_v3.py::DeepseekV3Model.forward': 'fa7be021c043c6a7',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM': '856368d6d4534938',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM.__init__': '30867697832ae630',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM.load_weights': 'c9adacea2a687320',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3DeepseekV2ForCausalLM.set_embed_and_head': '03ec806917e5b80a',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3MlaDecoderLayer.__init__': '85eb0d617677b69a',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3MlaModel': 'd15c20ee03bda124',
        'tokenspeed/runtime/models/deepseek_v3.py::Eagle3MlaModel.__init__': 'ee8863a2a149fff6',
        'tokenspeed/runtime/models/dflash.py::DFlashAttention.__init__': 'ad997ede677fb0af',
        'tokenspeed/runtime/models/dflash.py::DFlashDraftModel': '194a2e6bd71fe349',
        'tokenspeed/runtime/models/dflash.py::DFlashDraftModel.__init__': '09a7569290c40434',
        'tokenspeed/runtime/models/dflash.py::DFlashDraftModel._checkpoint_capture_field': None,
        'tokenspeed/runtime/models/kimi_k3.py::KimiLinearForCausalLM.set_dflash_aux_hidden_stream': None,
        'tokenspeed/runtime/models/kimi_k3.py::KimiLinearForCausalLM.set_dflash_layers_to_capture': None,
        'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel': None,
        'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.__init__': None,
        'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.configure_target': None,
        'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.load_weights': None,
        'tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.project_target_hidden': None,
        'tokenspeed/runtime/models/llama.py::LlamaAttention.__init__': 'a44ba1d31607f661',
        'tokenspeed/runtime/models/llama_eagle3.py::Eagle3LlamaModel.forward': '96f6b14fccf1add0',
        'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3': 'fc7f9ab59a2ce88c',
        'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3.load_weights': '02189ba3023fc9e5',
        'tokenspeed/runtime/models/llama_eagle3.py::LlamaForCausalLMEagle3.set_embed_and_head': '03ec806917e5b80a',
        'tokenspeed/runtime/models/qwen3.py::Qwen3Model.forward': '2fef7f9797063572',
        'tokenspeed/runtime/utils/hf_transformers_utils.py::_CONFIG_REGISTRY': 'f5ce1697c308e0b1',
        'tokenspeed/runtime/utils/hf_transformers_utils.py::get_config': '054ae4427b08e117',
    },
}

# What each release registers and which targets capture, read in its wheel as
# converters/engine_lists.py reads an installed engine (None: not read for this engine):
# the newest release's lists, then what each older release lacks or adds over
# the release above it.
LISTS: dict[str, list[str] | None] = {
    'drafts': [
        'DFlash2DraftModel',
        'DFlashDraftModel',
        'DSparkDraftModel',
        'DeepseekV32ForCausalLM',
        'DeepseekV32ForCausalLMNextN',
        'DeepseekV3ForCausalLM',
        'DeepseekV3ForCausalLMNextN',
        'DeepseekV41ForCausalLM',
        'DeepseekV41ForCausalLMDSpark',
        'DeepseekV4ForCausalLM',
        'DeepseekV4ForCausalLMDSpark',
        'DeepseekV4ForCausalLMNextN',
        'Eagle3DeepseekV2ForCausalLM',
        'Glm53FlashForConditionalGeneration',
        'Glm53FlashForConditionalGenerationNextN',
        'GlmMoeDsaForCausalLM',
        'GlmMoeDsaForCausalLMNextN',
        'GptOssForCausalLM',
        'InklingForConditionalGeneration',
        'InklingForConditionalGenerationNextN',
        'K3DSparkModel',
        'KimiK25ForConditionalGeneration',
        'KimiK3ForConditionalGeneration',
        'KimiK3ForConditionalGenerationNextN',
        'LlamaForCausalLM',
        'LlamaForCausalLMEagle3',
        'LongcatFlashForCausalLM',
        'MiniMaxM3SparseForConditionalGeneration',
        'NemotronHForCausalLM',
        'NemotronHForCausalLMNextN',
        'Qwen2ForCausalLM',
        'Qwen3ASRForConditionalGeneration',
        'Qwen3ForCausalLM',
        'Qwen3MoeForCausalLM',
        'Qwen3OmniMoeForConditionalGeneration',
        'Qwen3_5ForConditionalGeneration',
        'Qwen3_5ForConditionalGenerationNextN',
        'Qwen3_5MoeForCausalLM',
        'Qwen3_5MoeForCausalLMNextN',
        'Qwen3_5MoeForConditionalGeneration',
        'Qwen3_5MoeForConditionalGenerationNextN',
        'Qwen4ExpForCausalLM',
        'Qwen4ExpForCausalLMNextN',
        'Qwen4ExpForConditionalGeneration',
    ],
    'eagle3_targets': None,
    'dflash_targets': None,
}

OLDER_LISTS: dict[str, dict[str, dict[str, list[str] | None]]] = {
    '0.1.0': {
        'drafts': {
            'lacks': [
                'DFlash2DraftModel',
                'DSparkDraftModel',
                'DeepseekV32ForCausalLM',
                'DeepseekV32ForCausalLMNextN',
                'DeepseekV41ForCausalLM',
                'DeepseekV41ForCausalLMDSpark',
                'DeepseekV4ForCausalLMDSpark',
                'Glm53FlashForConditionalGeneration',
                'Glm53FlashForConditionalGenerationNextN',
                'K3DSparkModel',
                'KimiK3ForConditionalGeneration',
                'KimiK3ForConditionalGenerationNextN',
                'NemotronHForCausalLM',
                'NemotronHForCausalLMNextN',
                'Qwen3_5MoeForCausalLM',
                'Qwen3_5MoeForCausalLMNextN',
                'Qwen4ExpForCausalLM',
                'Qwen4ExpForCausalLMNextN',
                'Qwen4ExpForConditionalGeneration',
            ],
            'adds': [
                'MiniMaxM2ForCausalLM',
            ],
        },
    },
}
