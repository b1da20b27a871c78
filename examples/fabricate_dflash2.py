"""DFlash2 drafts (`DFlash2DraftModel`): good ones, GQA and MLA, and the
header defects that change how TokenSpeed 0.1.1 serves them.

A good draft is what TokenSpeed 0.1.1 and vLLM 0.33.0 both build (read into
`dspark.schema.families.dflash2`): the GQA DFlash draft of
`fabricate_gqa` (a Qwen3 config, taps and the mask token in dflash_config)
with `architectures: ["DFlash2DraftModel"]`, the convolution and selector
fields in dflash_config (vLLM reads them nowhere else, TokenSpeed's drafter
reads selector_top_k only there), block_size there too (TokenSpeed's model
needs it), and per layer `attention_conv` / `mlp_conv` plus the
`candidate_selector`. The MLA variant (TokenSpeed only) swaps the attention
for Kimi-K3 DSpark's, with `dflash_config.attention_mode: "mla"` and a
DeepSeek-V3 config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark.examples.fabricate_gqa import GQA_SCALES, gqa_config, gqa_target_config
from dspark.examples.fabricate_parts import Defect, DefectNotApplicable, drop, mutate, narrow, set_field

VARIANTS = ("gqa", "mla")


@dataclass(frozen=True)
class Dflash2Spec:
    conv_kernel_size: int
    conv_group_size: int
    selector_rank: int
    selector_top_k: int


# Tiny: every width distinct from the GQA ones (hidden 40: groups of 8 make 5).
# Full: speculators' defaults (models/dflash2/config.py::DFlash2SpeculatorConfig
# @speculators==0.9.0:26-44: kernel 2, groups of 16, rank 256, top-16).
DFLASH2_SCALES: dict[str, Dflash2Spec] = {
    "tiny": Dflash2Spec(conv_kernel_size=3, conv_group_size=8, selector_rank=6, selector_top_k=4),
    "qwen3-8b": Dflash2Spec(conv_kernel_size=2, conv_group_size=16, selector_rank=256, selector_top_k=16),
}

# The MLA attention's widths (Kimi-K3 DSpark's, as examples/fabricate.py's
# K3 scales): tiny distinct, full the K3 reference's.
_MLA_WIDTHS = {
    "tiny": {"q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
             "v_head_dim": 6},
    "qwen3-8b": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                 "v_head_dim": 128},
}


def dflash2_config(scale: str, *, variant: str = "gqa") -> dict[str, Any]:
    """config.json of a servable DFlash2 draft at `scale`."""
    gqa = GQA_SCALES[scale]
    spec = DFLASH2_SCALES[scale]
    config = gqa_config(gqa)
    config["architectures"] = ["DFlash2DraftModel"]
    config["dflash_config"].update(
        block_size=gqa.block_size,
        conv_kernel_size=spec.conv_kernel_size,
        conv_group_size=spec.conv_group_size,
        selector_rank=spec.selector_rank,
        selector_top_k=spec.selector_top_k,
    )
    if variant == "mla":
        config["model_type"] = "deepseek_v3"
        for key in ("num_key_value_heads", "head_dim", "attention_bias"):
            config.pop(key, None)
        config.update(_MLA_WIDTHS[scale])
        config["dflash_config"]["attention_mode"] = "mla"
    return config


def dflash2_tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Served name -> shape of every tensor a good draft ships, off the family's rules."""
    from dspark.schema.families import DFLASH2

    features = {"fc_norm": False, **DFLASH2.derived_features(config, config["architectures"][0])}
    expected, unresolved = DFLASH2.expected_tensors(DFLASH2.resolve_dims(config), features)
    assert not unresolved, unresolved
    return {name: want.shape for name, want in expected.items()}


def dflash2_target_config(scale: str) -> dict[str, Any]:
    return gqa_target_config(GQA_SCALES[scale])


# --------------------------------------------------------------------------
# Defects


def _nested(key: str, value: Any):
    def apply(config: dict, tensors: dict) -> None:
        config["dflash_config"][key] = value
    return apply


def _to_top_level(key: str):
    def apply(config: dict, tensors: dict) -> None:
        config[key] = config["dflash_config"].pop(key)
    return apply


def _drop_nested(key: str):
    def apply(config: dict, tensors: dict) -> None:
        config["dflash_config"].pop(key)
    return apply


def _no_block_size(config: dict, tensors: dict) -> None:
    config["dflash_config"].pop("block_size")
    config.pop("block_size", None)


def _group_not_dividing(config: dict, tensors: dict) -> None:
    group = config["dflash_config"]["conv_group_size"]
    config["dflash_config"]["conv_group_size"] = next(
        g for g in range(group + 1, config["hidden_size"] + 1) if config["hidden_size"] % g)


def _kernel_past_block(config: dict, tensors: dict) -> None:
    config["dflash_config"]["conv_kernel_size"] = config["dflash_config"]["block_size"] + 1


def _output_multiplier_top_level(config: dict, tensors: dict) -> None:
    config["output_multiplier"] = 2.0


def _mla_mode_top_level(config: dict, tensors: dict) -> None:
    config["attention_mode"] = config["dflash_config"].pop("attention_mode")


def _mla_mode_upper(config: dict, tensors: dict) -> None:
    config["dflash_config"]["attention_mode"] = "MLA"


def _ship_lm_head(config: dict, tensors: dict) -> None:
    import torch

    tensors["lm_head.weight"] = torch.zeros(config["vocab_size"], config["hidden_size"], dtype=torch.bfloat16)


def _ship_fc_norm(config: dict, tensors: dict) -> None:
    norm = tensors["norm.weight"]
    for i in range(len(config["dflash_config"]["target_layer_ids"])):
        tensors[f"fc_norm.{i}.weight"] = norm.clone()


def _selector_rank_off(config: dict, tensors: dict) -> None:
    config["dflash_config"]["selector_rank"] += 1


def _gqa_as_mla_label(config: dict, tensors: dict) -> None:
    if config["dflash_config"].get("attention_mode") == "mla":
        raise DefectNotApplicable("the draft is already MLA")
    config["dflash_config"]["attention_mode"] = "mla"


_MLA = (("variant", "mla"),)

DFLASH2_DEFECTS: dict[str, Defect] = {
    "no-conv-kernel-size": Defect("CFG003", _drop_nested("conv_kernel_size"),
                                  description="conv_kernel_size missing: int(None) at build"),
    "conv-group-indivisible": Defect("CFG003", _group_not_dividing,
                                     description="conv_group_size does not divide hidden_size"),
    "conv-kernel-past-block": Defect("CFG003", _kernel_past_block,
                                     description="conv_kernel_size > block_size"),
    "no-block-size": Defect("CFG003", _no_block_size, description="no block_size: int(None) at build"),
    "selector-top-k-top-level": Defect("CFG003", _to_top_level("selector_top_k"),
                                       description="selector_top_k at the top level: the drafter reads "
                                       "dflash_config only"),
    "selector-top-k-one": Defect("CFG003", _nested("selector_top_k", 1), description="selector_top_k 1 (< 2)"),
    "output-multiplier-top-level": Defect("ENG001", _output_multiplier_top_level,
                                          description="output_multiplier 2.0 at the top level: never read"),
    "selector-rank-mismatch": Defect("INV003", _selector_rank_off,
                                     description="selector_rank one more than the codebooks' width"),
    "no-selector": Defect("INV001", drop("candidate_selector."), description="candidate_selector not shipped"),
    "no-conv": Defect("INV001", drop("layers.0.mlp_conv."), description="layer 0's mlp_conv not shipped"),
    "conv-projection-short": Defect("INV003", mutate("layers.1.attention_conv.kernel_projection.weight", narrow),
                                    description="a kernel_projection one row short"),
    "fc-norm-shipped": Defect("ENG001", _ship_fc_norm, description="fc_norm.{i} weights: the model has none"),
    "gqa-labelled-mla": Defect("INV002", _gqa_as_mla_label,
                               description="a GQA draft with attention_mode mla: the MLA loader refuses q/k/v"),
    "mla-mode-top-level": Defect("CFG003", _mla_mode_top_level, needs=_MLA,
                                 description="attention_mode mla at the top level only: the KV cache is laid out "
                                 "per head"),
    "mla-mode-upper-case": Defect("CFG003", _mla_mode_upper, needs=_MLA,
                                  description="attention_mode \"MLA\": the model builds MLA, the cache is per head"),
    "mla-lm-head": Defect("INV002", _ship_lm_head, needs=_MLA,
                          description="lm_head shipped with an MLA draft: its loader refuses unknown names"),
    "missing-layer": Defect("INV001", drop("layers.1."), description="layer 1 dropped"),
    "hidden-act": Defect("CFG003", set_field("hidden_act", "gelu"), description="hidden_act gelu"),
}


# --------------------------------------------------------------------------
# Engine readings: good drafts edited where the engines read one field each
# their own way, so no one finding code fits every engine (not defects).
# The conformance suite runs each through every engine's own code.


def _conv_fields_top_level(config: dict) -> None:
    for key in ("conv_kernel_size", "conv_group_size"):
        config[key] = config["dflash_config"].pop(key)


def _input_embedding_scale(config: dict) -> None:
    config["dflash_config"]["input_embedding_scale"] = 2.0


# name -> (edit of config.json, what each engine does with it)
ENGINE_READINGS: dict[str, tuple[Any, str]] = {
    "conv-fields-top-level": (
        _conv_fields_top_level,
        "conv_kernel_size and conv_group_size at the top level only: TokenSpeed reads them there, vLLM refuses "
        "(dflash_config only), SGLang builds no convolution and drops their weights"),
    "input-embedding-scale": (
        _input_embedding_scale,
        "dflash_config.input_embedding_scale 2.0: TokenSpeed and vLLM scale the embedding, SGLang never reads it"),
}
