"""vLLM (vllm-project/vllm) 0.33.0, the released wheel: what its loaders do
with each draft family, read from its code. `--engine vllm` is
`vllm@0.33.0`.

Releases 0.32.0, 0.31.0 and 0.30.0 (`vllm@0.32.0`, ...) are each the delta
over their newer neighbour (`releases.py`): the rules that differ, cited to
both releases, every other rule cited to the older wheel's own lines.

The default runner of this release is Model Runner V2 (config/vllm.py:
730-767): tap ids, the drafters' wiring and the embedding/head sharing are
read from it; where the V1 runner differs (it also reads eagle_config's
tap list) docs/engines/vllm.md says so.
"""

from __future__ import annotations

from dspark.schema.engines.base import EngineProfile, FamilyLoader
from dspark.schema.engines.vllm import (launch, dflash2, dflash_gqa, eagle3_llama, eagle3_mla, eagle3_qwen3, k3_dspark,
                                        peagle)
from dspark.schema.engines.vllm.common import NAME, PIN, PROFILE_FACTS, VERSION

V0_33_0 = EngineProfile(
    name=NAME,
    revision=VERSION,
    commit=PIN,
    description="vLLM 0.33.0 (the released wheel; Model Runner V2, its default)",
    loaders={
        "k3_dspark": k3_dspark.LOADER,
        "dflash_gqa": dflash_gqa.LOADER,
        "dflash2": dflash2.LOADER,
        "eagle3_llama": eagle3_llama.LOADER,
        "eagle3_mla": eagle3_mla.LOADER,
        "eagle3_qwen3": eagle3_qwen3.LOADER,
        "peagle_llama": peagle.LLAMA_LOADER,
        "peagle_qwen3": peagle.QWEN3_LOADER,
    },
    **PROFILE_FACTS,
    launch_model=launch.MODEL,
)


def _release(version: str, description: str) -> EngineProfile:
    """An older release: 0.33.0's loaders with each delta down to `version` (releases.py)."""
    from dspark.schema.engines.vllm import releases

    loaders: dict[str, FamilyLoader] = {family: releases.loader(version, base)
                                        for family, base in V0_33_0.loaders.items()}
    return EngineProfile(name=NAME, revision=version, commit=f"vllm=={version}",
                         description=f"vLLM {version} (the released wheel; Model Runner V2): {description}",
                         loaders=loaders, **releases.profile_facts(version, PROFILE_FACTS),
                         launch_model=launch.model(version))


V0_32_0 = _release("0.32.0", "0.33.0 less: an EAGLE-3 draft's use_aux_hidden_state is not asked (the taps are "
                   "always captured); GraniteMoe targets capture nothing; MedusaModel registered")
V0_31_0 = _release("0.31.0", "0.32.0 less: Granite, GPT-NeoX, Phi, SeedOss and other targets capture nothing")
V0_30_0 = _release("0.30.0", "0.31.0 less: K3 DSpark's confidence_head always dropped; DFlash's "
                   "attention_value_scale unread; LiLiCorrDraftModel unregistered")

DEFAULT = V0_33_0
# Newest first; a bare `vllm` is the first.
PROFILES = (V0_33_0, V0_32_0, V0_31_0, V0_30_0)
