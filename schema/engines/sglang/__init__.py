"""SGLang (sgl-project/sglang) 0.5.23: what its loaders do with each draft
family, read from the released wheel. One module per family, `common.py`
for what they share.

Served: EAGLE-3 Llama (`LlamaForCausalLMEagle3`), EAGLE-3 MLA
(`Eagle3DeepseekV2ForCausalLM`), GQA DFlash and dense DSpark
(`DFlashDraftModel`, `DSparkDraftModel` and its Qwen3/Ling/LFM2 names).
Not served: K3 DSpark (`k3_dspark.py` says why) and EAGLE-3 with a Qwen3
layer (`eagle3_qwen3.py`): such a draft gets ENG006.
"""

from __future__ import annotations

from dspark.schema.engines.base import EngineProfile
from dspark.schema.engines.sglang import dflash_gqa, eagle3_llama, eagle3_mla
from dspark.schema.engines.sglang.common import NAME, PIN, PROFILE_FACTS, VERSION

V0_5_23 = EngineProfile(
    name=NAME,
    revision=VERSION,
    commit=PIN,
    description="SGLang 0.5.23 (the released wheel): EAGLE-3 Llama and MLA, GQA DFlash and dense DSpark; "
    "no K3 DSpark",
    loaders={
        "dflash_gqa": dflash_gqa.LOADER,
        "eagle3_llama": eagle3_llama.LOADER,
        "eagle3_mla": eagle3_mla.LOADER,
    },
    **PROFILE_FACTS,
)

# A bare `sglang` means 0.5.23.
PROFILES = (V0_5_23,)
DEFAULT = V0_5_23
