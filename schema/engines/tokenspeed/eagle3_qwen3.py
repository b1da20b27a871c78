"""EAGLE-3 with a Qwen3 layer (`Eagle3Qwen3ForCausalLM`) in TokenSpeed: not
served at main (f4d8ec6e) nor at pull request 1031 (4b9766f6). No
`EntryClass` names it (the one EAGLE-3 class for GQA layers is
`LlamaForCausalLMEagle3`, models/llama_eagle3.py:759, whose attention has
no q_norm/k_norm); the draft worker leaves a first architecture holding
"Eagle" as it is (utils/hf_transformers_utils.py:382-398) and the registry,
finding no class for any entry, raises ValueError
(models/registry.py:44-57, 75-86): the draft is refused at load.

The profiles therefore have no loader for the family: dspark reports ENG006
for such a draft, and for a speculators folder whose layer is `qwen3`
(renamed to the Llama class, it would be served without its q/k norms)."""

from __future__ import annotations

from dspark.schema.engines.tokenspeed.common import REGISTRY, at_main

NOT_SERVED = at_main("44-57, 75-86 (no class registered: refused); models/llama_eagle3.py:759 "
                     "(the only GQA EAGLE-3 class)", REGISTRY, qualname="_ModelRegistry")
