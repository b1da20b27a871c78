"""K3 DSpark (`K3DSparkModel`, model_type `k3_dspark`) in SGLang 0.5.23: not
served. No module of sglang/srt registers K3DSparkModel or a `k3_dspark`
config (neither name occurs anywhere in the package), so transformers
refuses the config's model_type (utils/hf_transformers/config.py:336-380)
and the registry finds no class for the architecture
(models/registry.py:93-114; model_loader/utils.py:111-168). The engine's
Kimi-K3 target serves the dense DSpark drafts instead (dflash_gqa.py).

The profile therefore has no loader for the family: dspark reports ENG006
for such a draft."""

from __future__ import annotations

from dspark.schema.engines.sglang.common import HF_CONFIG, at

NOT_SERVED = at("336-380 (no k3_dspark config); models/registry.py:93-114 (no K3DSparkModel)", HF_CONFIG, "get_config")
