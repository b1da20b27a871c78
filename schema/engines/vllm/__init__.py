"""vLLM (vllm-project/vllm) 0.33.0, the released wheel: what its loaders do
with each draft family, read from its code. `--engine vllm` is
`vllm@0.33.0`.

The default runner of this release is Model Runner V2 (config/vllm.py:
730-767): tap ids, the drafters' wiring and the embedding/head sharing are
read from it; where the V1 runner differs (it also reads eagle_config's
tap list) docs/engines/vllm.md says so.
"""

from __future__ import annotations

from dspark.schema.engines.base import EngineProfile
from dspark.schema.engines.vllm import dflash_gqa, eagle3_llama, eagle3_mla, eagle3_qwen3, k3_dspark
from dspark.schema.engines.vllm.common import NAME, PIN, PROFILE_FACTS, VERSION

V0_33_0 = EngineProfile(
    name=NAME,
    revision=VERSION,
    commit=PIN,
    description="vLLM 0.33.0 (the released wheel; Model Runner V2, its default)",
    loaders={
        "k3_dspark": k3_dspark.LOADER,
        "dflash_gqa": dflash_gqa.LOADER,
        "eagle3_llama": eagle3_llama.LOADER,
        "eagle3_mla": eagle3_mla.LOADER,
        "eagle3_qwen3": eagle3_qwen3.LOADER,
    },
    **PROFILE_FACTS,
)

DEFAULT = V0_33_0
PROFILES = (V0_33_0,)
