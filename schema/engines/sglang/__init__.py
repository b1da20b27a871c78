"""SGLang (sgl-project/sglang) 0.5.23: what its loaders do with each draft
family, read from the released wheel. One module per family, `common.py`
for what they share.

Served: EAGLE-3 Llama (`LlamaForCausalLMEagle3`), EAGLE-3 MLA
(`Eagle3DeepseekV2ForCausalLM`), GQA DFlash and dense DSpark
(`DFlashDraftModel`, `DSparkDraftModel` and its Qwen3/Ling/LFM2 names),
DFlash2 (`DFlash2DraftModel`).
Not served: K3 DSpark (`k3_dspark.py` says why) and EAGLE-3 with a Qwen3
layer (`eagle3_qwen3.py`): such a draft gets ENG006.

0.5.22, 0.5.21 and 0.5.20 are the rules that differ from their newer
neighbour (`releases.py`), applied over 0.5.23's loaders.
"""

from __future__ import annotations

from dspark.schema.engines.base import EngineProfile
from dspark.schema.engines.sglang import launch, dflash2, dflash_gqa, eagle3_llama, eagle3_mla
from dspark.schema.engines.sglang.common import NAME, PIN, PROFILE_FACTS, VERSION

V0_5_23 = EngineProfile(
    name=NAME,
    revision=VERSION,
    commit=PIN,
    description="SGLang 0.5.23 (the released wheel): EAGLE-3 Llama and MLA, GQA DFlash and dense DSpark, "
    "DFlash2; no K3 DSpark",
    loaders={
        "dflash_gqa": dflash_gqa.LOADER,
        "dflash2": dflash2.LOADER,
        "eagle3_llama": eagle3_llama.LOADER,
        "eagle3_mla": eagle3_mla.LOADER,
    },
    **PROFILE_FACTS,
    launch_model=launch.MODEL,
)


def _release(version: str, description: str) -> EngineProfile:
    """An older release: its deltas (releases.py) over 0.5.23's loaders,
    accumulated release by release."""
    from dspark.schema.engines.sglang import releases

    return EngineProfile(
        name=NAME,
        revision=version,
        commit=f"sglang=={version}",
        description=description,
        loaders={
            "dflash_gqa": releases.dflash_loader(version, dflash_gqa.LOADER),
            "dflash2": releases.dflash2_loader(version, dflash2.LOADER),
            "eagle3_llama": releases.eagle3_loader(version, eagle3_llama.LOADER),
            "eagle3_mla": releases.eagle3_loader(version, eagle3_mla.LOADER),
        },
        **{**PROFILE_FACTS, "architectures": releases.architectures(version)},
        launch_model=launch.model(version),
    )


V0_5_22 = _release("0.5.22", "SGLang 0.5.22: as 0.5.23, but DSpark fields read from dspark_config only, a silu-only "
                   "DFlash MLP, use_gemma_norm and rope_dim not read, fewer DFLASH targets")
V0_5_21 = _release("0.5.21", "SGLang 0.5.21: as 0.5.22, but no EAGLE-3 capture on Qwen3.5 text targets")
V0_5_20 = _release("0.5.20", "SGLang 0.5.20: as 0.5.21, but no DFLASH capture on LFM2-VL targets")

# A bare `sglang` means 0.5.23, the newest release; the older ones are deltas.
PROFILES = (V0_5_23, V0_5_22, V0_5_21, V0_5_20)
DEFAULT = V0_5_23
