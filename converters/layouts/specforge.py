"""EAGLE-3 drafts trained with SpecForge (sgl-project/SpecForge): where its
draft weights sit and what its configs look like.

Read at a6b6b02 (and the older trainer at 20e2e3f):

* The draft module, `LlamaForCausalLMEagle3`, names its weights as the
  engine does: `midlayer.*`, `fc.weight`, `norm.weight`, `lm_head.weight`,
  `fc_norm.{i}.weight` when declared, and the `t2d`/`d2t` buffers
  (specforge/modeling/draft/llama3_eagle.py@a6b6b02:1654-1699). Its
  `export --to sglang` writes them unchanged and without the embedding
  (specforge/export/to_sglang.py@a6b6b02:33-38, 84-86), with the draft
  config it was trained from: `architectures ["LlamaForCausalLMEagle3"]`,
  `model_type "llama"`, `draft_vocab_size` (configs/*-eagle3.json). Such a
  folder, like the older trainer's `epoch_{e}_step_{s}/` save
  (scripts/train_eagle3.py@20e2e3f:677-724, the same names), is already in
  the engine's layout and is judged as it is.
* Some of its configs give the tap ids only under `eagle_config`
  (configs/deepseek-v3-671b-eagle3.json@a6b6b02): the target reads that
  list, but the Llama draft counts the top-level one only;
  `dspark.schema.normalise` copies it to the top level on convert.
* A training checkpoint is `{run_id}-step{N}/training_state.pt`, a
  torch.save dict whose draft weights are under `draft_state_dict` beside
  the step counters and optimizer state, with `training_state_rank{r}.pt`
  files beside it and no config (specforge/training/checkpoint.py@a6b6b02:
  11-15, 32; specforge/training/controller.py@a6b6b02:845-866). The engine
  never reads a `.pt`: `dspark check` says so (SRV001) and `dspark convert
  training_state.pt DST --config draft-config.json` writes the folder.
"""

from __future__ import annotations

TRAINING_STATE_FILE = "training_state.pt"
# The entry of training_state.pt that holds the draft's weights.
DRAFT_STATE_KEY = "draft_state_dict"
