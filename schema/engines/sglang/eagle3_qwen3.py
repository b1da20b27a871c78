"""EAGLE-3 with a Qwen3 layer (`Eagle3Qwen3ForCausalLM`) in SGLang 0.5.23:
not served. No module of sglang/srt registers the class (its one EAGLE-3
model for GQA layers is `LlamaForCausalLMEagle3`, models/llama_eagle3.py:387,
whose attention has no q_norm/k_norm). An architecture the registry lacks
goes to the Transformers backend, which finds no such transformers class and
no auto_map and raises ValueError "Cannot find model module"
(model_loader/utils.py:111-168, 198-231): the draft is refused at load.

The profile therefore has no loader for the family: dspark reports ENG006
for such a draft, and for a speculators folder whose layer is `qwen3`
(renamed to the Llama class, it would be served without its q/k norms)."""

from __future__ import annotations

from dspark.schema.engines.sglang.common import LOADER_UTILS, at

NOT_SERVED = at("111-168, 198-231 (unregistered, no transformers class: refused); "
                "models/llama_eagle3.py:387 (the only GQA EAGLE-3 class)", LOADER_UTILS, "resolve_transformers_arch")
