"""P-EAGLE drafts with a Llama layer (`PeagleLlamaForCausalLM`): the
EAGLE-3 Llama draft plus `mask_hidden` and a mask token (peagle_common.py).
speculators writes one when its layer is a Llama layer; vLLM loads it as
Eagle3LlamaForCausalLM with parallel drafting (model_executor/models/
registry.py:698-699@vllm==0.33.0)."""

from __future__ import annotations

from dspark.schema.families.eagle3_llama import EAGLE3_LLAMA
from dspark.schema.families.peagle_common import peagle_family

PEAGLE_LLAMA = peagle_family(EAGLE3_LLAMA, "peagle_llama", "PeagleLlamaForCausalLM", "Llama")
