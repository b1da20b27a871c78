"""P-EAGLE drafts (parallel EAGLE): an EAGLE-3 draft trained to propose
every draft token of a step in one forward pass. Positions after the
first read the mask token's embedding and a learnt hidden state,
`mask_hidden`, in place of the target's taps.

speculators writes them (models/peagle/config.py::PEagleSpeculatorConfig@
speculators==0.9.0:13-45; models/peagle/core.py::PEagleDraftModel:21-53):
Eagle3SpeculatorConfig's fields plus `mask_token_id`, the EAGLE-3 draft's
tensors (a Llama or Qwen3 layer, `fc`, norms, its own head and, as it
trains its embedding, `embed_tokens`) plus `mask_hidden`
[1, 1, taps x hidden_size]. vLLM's reader of that shape names
`PeagleLlamaForCausalLM` or `PeagleQwen3ForCausalLM` by the layer's
model_type, and its registry loads both as its EAGLE-3 classes served with
parallel drafting (transformers_utils/configs/speculators/algos.py::
update_peagle@vllm==0.33.0:53-87; base.py::SpeculatorsConfig.
build_vllm_speculative_config:97-137; model_executor/models/registry.py:
698-706): one family per layer, each the EAGLE-3 family of that layer with
`mask_hidden` and the mask token added (peagle_llama.py, peagle_qwen3.py).
TokenSpeed and SGLang register no P-EAGLE class.
"""

from __future__ import annotations

import dataclasses

from dspark.schema.families.base import DraftFamily, TensorRule

# The learnt hidden state of the parallel positions, one tap list wide
# (core.py::PEagleDraftModel.__init__@speculators==0.9.0:44-53). vLLM views
# it flat into a [1, taps x target_hidden_size] buffer, so any shape of as
# many elements loads (models/llama_eagle3.py::Eagle3LlamaForCausalLM.
# load_weights@vllm==0.33.0:431-441).
MASK_HIDDEN = TensorRule("mask_hidden", ("1", "1", "S*th"), role="parallel_mask", flat=True)


def peagle_family(base: DraftFamily, name: str, architecture: str, layer: str) -> DraftFamily:
    return dataclasses.replace(
        base,
        name=name,
        description=f"P-EAGLE draft with a {layer} layer (the EAGLE-3 draft plus mask_hidden and a mask token, "
        "drafted in parallel)",
        architectures=(architecture,),
        legacy_architectures=(),
        schema_file=f"{name}.schema.json",
        tensors=base.tensors + (MASK_HIDDEN,),
        # `"mask_hidden" in name` is the loader's test (llama_eagle3.py:431).
        names_by_part=base.names_by_part + (("mask_hidden", "mask_hidden"),),
        # The mask token fills every parallel position (core.py:106-115).
        needs_mask_token=True,
    )

