"""P-EAGLE drafts with a Qwen3 layer (`PeagleQwen3ForCausalLM`): the
EAGLE-3 Qwen3 draft plus `mask_hidden` and a mask token (peagle_common.py).
speculators writes one when its layer is a Qwen3 layer; vLLM loads it as
Eagle3Qwen3ForCausalLM with parallel drafting (model_executor/models/
registry.py:705-706@vllm==0.33.0)."""

from __future__ import annotations

from dspark.schema.families.eagle3_qwen3 import EAGLE3_QWEN3
from dspark.schema.families.peagle_common import peagle_family

PEAGLE_QWEN3 = peagle_family(EAGLE3_QWEN3, "peagle_qwen3", "PeagleQwen3ForCausalLM", "Qwen3")
