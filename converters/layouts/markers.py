"""Keys that tell which trainer wrote a config, cheap to test before that
trainer's layout module is loaded: a header-only check of a folder in the
engine's layout loads none of them."""

# speculators' Eagle3SpeculatorConfig (layouts/speculators.py)
SPECULATORS_TYPE_FIELD = "speculators_model_type"
# TorchSpec's DFlashConfig.model_type (layouts/torchspec_run.py)
TORCHSPEC_DFLASH_MODEL_TYPE = "dflash"
# written by TorchSpec's tools/convert_to_hf.py into the exported config
# (layouts/torchspec.py: the --vllm tap shift)
TORCHSPEC_EXPORT_MARKER = "_torchspec_version"
