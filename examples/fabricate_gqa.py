"""GQA DFlash and DSpark drafts (`DFlashDraftModel`, `DSparkDraftModel`):
good ones, and ones with the defects that trap them in TokenSpeed.

A good draft is what the engine builds (python/tokenspeed/runtime/models/
dflash.py and dspark.py at f4d8ec6e, read into `dspark.schema.families.
dflash_gqa`): a Qwen3 config (`model_type: qwen3`, the convention z-lab's
DFlash drafts use, which the engine's config loader parses), taps and the
mask token in `dflash_config`, `fc` over taps x the draft's own hidden_size,
`hidden_norm`, `norm`, q/k/v/o projections with q_norm/k_norm, no fc_norm;
a DSpark draft adds the Markov head. Names carry no prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark.examples.fabricate_parts import (
    Defect,
    DefectNotApplicable,
    drop,
    fill,
    mutate,
    narrow,
    poke,
    retype,
    set_field,
    widen,
)

VARIANTS = ("dflash", "dspark")


@dataclass(frozen=True)
class GqaSpec:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    mask_token_id: int
    target_num_hidden_layers: int
    target_layer_ids: tuple[int, ...]
    markov_rank: int
    max_position_embeddings: int
    block_size: int


GQA_SCALES: dict[str, GqaSpec] = {
    # Tiny, every dimension distinct so a swapped axis cannot pass; head_dim
    # is not the 128 Qwen3Config assumes when the field is left out.
    "tiny": GqaSpec(hidden_size=40, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=12, vocab_size=96, mask_token_id=95,
                    target_num_hidden_layers=10, target_layer_ids=(1, 4, 7), markov_rank=6,
                    max_position_embeddings=4096, block_size=16),
    # Qwen3-8B target (36 layers, hidden 4096, vocab 151936): the dimensions
    # TorchSpec's DFlash draft config declares (torchspec/config/
    # dflash_draft_config.json@6f21829: 5 layers, 32/8 heads, 12288 MLP,
    # taps [1, 9, 17, 25, 33], mask token 151669, 40960 positions), in the
    # servable layout; block size 16 as its Qwen3-8B training runs use.
    "qwen3-8b": GqaSpec(hidden_size=4096, intermediate_size=12288, num_hidden_layers=5, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, vocab_size=151936, mask_token_id=151669,
                        target_num_hidden_layers=36, target_layer_ids=(1, 9, 17, 25, 33), markov_rank=256,
                        max_position_embeddings=40960, block_size=16),
}


def gqa_config(spec: GqaSpec, *, variant: str = "dflash") -> dict[str, Any]:
    """The config.json of a servable draft: what the engine's Qwen3Config
    parses and its drafter reads."""
    config: dict[str, Any] = {
        "architectures": ["DSparkDraftModel" if variant == "dspark" else "DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "rope_theta": 1000000.0,
        "max_position_embeddings": spec.max_position_embeddings,
        "layer_types": ["full_attention"] * spec.num_hidden_layers,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "block_size": spec.block_size,
        # Not read by the engine (taps are checked against the real target
        # at startup); TorchSpec writes it, and it says which target this is.
        "target_num_hidden_layers": spec.target_num_hidden_layers,
        "dflash_config": {"target_layer_ids": list(spec.target_layer_ids), "mask_token_id": spec.mask_token_id},
    }
    if variant == "dspark":
        config.update(markov_rank=spec.markov_rank, markov_head_type="vanilla")
    return config


def gqa_tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Served name -> shape of every tensor a good draft of `config` ships,
    read off the family's own rules (so the fabricator cannot drift from
    what dspark expects; the tests check dspark against the engine)."""
    from dspark.schema.families import DFLASH_GQA

    features = {"fc_norm": False, **DFLASH_GQA.derived_features(config, config["architectures"][0])}
    expected, unresolved = DFLASH_GQA.expected_tensors(DFLASH_GQA.resolve_dims(config), features)
    assert not unresolved, unresolved
    return {name: want.shape for name, want in expected.items()}


def gqa_target_config(spec: GqaSpec) -> dict[str, Any]:
    """The target's config.json, as far as a check reads it: a Qwen3.5
    target, one of the classes the DFlash drafter can wire to (TokenSpeed's
    Qwen3 models capture nothing, TGT006; its Llama and DeepSeek-V3 models
    lack the embedding accessor the drafter takes, TGT007)."""
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": {"model_type": "qwen3_5_text", "hidden_size": spec.hidden_size,
                            "num_hidden_layers": spec.target_num_hidden_layers, "vocab_size": spec.vocab_size}}


# --------------------------------------------------------------------------
# Defects


def _taps(config: dict) -> list[int]:
    return config["dflash_config"]["target_layer_ids"]


def _set_taps(change):
    def apply(config: dict, tensors: dict) -> None:
        config["dflash_config"]["target_layer_ids"] = change(list(_taps(config)), config)
    return apply


def _ship_fc_norm(config: dict, tensors: dict) -> None:
    # EAGLE-3 style per-tap norms: this model has none, the loader drops them.
    norm = tensors["norm.weight"]
    for i in range(len(_taps(config))):
        tensors[f"fc_norm.{i}.weight"] = norm.clone()  # hidden_size wide, as EAGLE-3's are


def _declare_fc_norm(config: dict, tensors: dict) -> None:
    config["fc_norm"] = True
    _ship_fc_norm(config, tensors)


def _fc_for_target_width(config: dict, tensors: dict) -> None:
    # TorchSpec's training module builds fc over taps x target_hidden_size;
    # the engine builds it over taps x the draft's own hidden_size.
    import torch

    fc = tensors["fc.weight"]
    extra = 8
    config["target_hidden_size"] = config["hidden_size"] + extra
    taps = len(_taps(config))
    tensors["fc.weight"] = torch.cat([fc, fc[:, : taps * extra]], dim=1).contiguous()


def _markov_only_in_dflash_config(config: dict, tensors: dict) -> None:
    # TokenSpeed's own DSpark config test puts it there; the model reads
    # dspark_config or the top level only.
    config["dflash_config"]["markov_rank"] = config.pop("markov_rank")


def _sliding_without_window(config: dict, tensors: dict) -> None:
    config["layer_types"] = ["sliding_attention"] + config["layer_types"][1:]
    config.pop("sliding_window", None)


def _layer_types_short(config: dict, tensors: dict) -> None:
    config["layer_types"] = config["layer_types"][:-1]


def _layer_types_chunked(config: dict, tensors: dict) -> None:
    config["layer_types"] = ["chunked_attention"] + config["layer_types"][1:]


def _no_taps(config: dict, tensors: dict) -> None:
    # A config that counts its taps (num_target_layers, as TorchSpec's
    # training config does) and lists none: the engine derives no default.
    config["num_target_layers"] = len(config["dflash_config"].pop("target_layer_ids"))


def _no_mask(config: dict, tensors: dict) -> None:
    config["dflash_config"].pop("mask_token_id")
    config.pop("mask_token_id", None)


def _mask_past_vocab(config: dict, tensors: dict) -> None:
    config["dflash_config"]["mask_token_id"] = config["vocab_size"]


def _training_names(config: dict, tensors: dict) -> None:
    # TorchSpec's training module names; the engine renames nothing and drops them.
    renames = {"fc.weight": "context_proj.weight", "hidden_norm.weight": "context_norm.weight",
               "norm.weight": "final_norm.weight"}
    for served, trained in renames.items():
        tensors[trained] = tensors.pop(served)


def _wrapped_names(config: dict, tensors: dict) -> None:
    # An FSDP/trainer wrapper the engine does not strip (it strips one "model.").
    for name in list(tensors):
        tensors["draft_model." + name] = tensors.pop(name)


def _no_head_dim(config: dict, tensors: dict) -> None:
    if config["head_dim"] == 128:
        raise DefectNotApplicable("head_dim is already the 128 Qwen3Config assumes; leaving it out changes nothing")
    del config["head_dim"]


def _biases_undeclared(config: dict, tensors: dict) -> None:
    import torch

    q = tensors["layers.0.self_attn.q_proj.weight"]
    tensors["layers.0.self_attn.q_proj.bias"] = torch.zeros(q.shape[0], dtype=q.dtype, device=q.device)


def _tap_last_layer(config: dict, tensors: dict) -> None:
    # The target's last layer N-1: its output is never captured (ids must
    # lie in [0, N-2]); checked against the target given as --target.
    _taps(config)[-1] = config["target_num_hidden_layers"] - 1


def _quantized(config: dict, tensors: dict) -> None:
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}


def _fp32(config: dict, tensors: dict) -> None:
    for name in tensors:
        tensors[name] = retype("float32")(tensors[name])


_DSPARK = (("variant", "dspark"),)

GQA_DEFECTS: dict[str, Defect] = {
    "fc-norm-shipped": Defect("ENG001", _ship_fc_norm, description="fc_norm.{i} weights shipped: the loader drops them"),
    "fc-norm-declared": Defect("ENG001", _declare_fc_norm, description="fc_norm: true with its weights: not served"),
    "fc-width": Defect("CTX001", mutate("fc.weight", widen), description="fc one column too many"),
    "fc-target-width": Defect("CTX001", _fc_for_target_width,
                              description="fc over taps x target_hidden_size (the training module's width)"),
    "no-markov-head": Defect("INV001", drop("markov_head."), needs=_DSPARK,
                             description="DSpark draft without its Markov head"),
    "markov-rank-nested": Defect("CFG003", _markov_only_in_dflash_config, needs=_DSPARK,
                                 description="markov_rank only in dflash_config, which the model does not read"),
    "markov-head-type": Defect("CFG003", set_field("markov_head_type", "gated"), needs=_DSPARK,
                               description="unsupported Markov head"),
    "dspark-as-dflash": Defect("INV002", set_field("architectures", ["DFlashDraftModel"]), needs=_DSPARK,
                               description="a DSpark draft labelled DFlashDraftModel, which drops the Markov head"),
    "no-taps": Defect("CFG005", _no_taps, description="no target_layer_ids; only num_target_layers"),
    "taps-unsorted": Defect("CFG006", _set_taps(lambda t, c: [t[-1]] + t[:-1]), description="taps out of order"),
    "taps-repeated": Defect("CFG006", _set_taps(lambda t, c: [t[0]] + t[:-1]), description="a tap listed twice"),
    "tap-last-layer": Defect("TGT005", _tap_last_layer, target=True,
                             description="last tap is the target's last layer, outside [0, N-2]"),
    "tap-negative": Defect("CFG003", _set_taps(lambda t, c: [-1] + t[1:]), description="tap -1"),
    "no-mask-token": Defect("CFG008", _no_mask, description="mask_token_id missing"),
    "mask-token-range": Defect("CFG008", _mask_past_vocab, description="mask_token_id = vocab_size"),
    "sliding-no-window": Defect("SWA001", _sliding_without_window,
                                description="sliding_attention layer, no sliding_window"),
    "layer-types-length": Defect("CFG003", _layer_types_short, description="layer_types one entry short"),
    "layer-types-chunked": Defect("CFG003", _layer_types_chunked, description="chunked_attention layer"),
    "model-type-dflash": Defect("SRV001", set_field("model_type", "dflash"),
                                description="TorchSpec's model_type, which the engine's config loader does not parse"),
    "no-head-dim": Defect("INV003", _no_head_dim,
                          description="head_dim left out: Qwen3Config assumes 128, the projections disagree"),
    "hidden-act": Defect("CFG003", set_field("hidden_act", "gelu"), description="hidden_act gelu"),
    "training-names": Defect("SRV001", _training_names,
                             description="context_proj / context_norm / final_norm: the training module's names"),
    "wrapped-names": Defect("SRV001", _wrapped_names, description="every name under draft_model."),
    "missing-layer": Defect("INV001", drop("layers.1."), description="layer 1 dropped"),
    "q-bias-undeclared": Defect("INV002", _biases_undeclared, description="q_proj bias without attention_bias"),
    "wrong-shape": Defect("INV003", mutate("layers.1.self_attn.o_proj.weight", narrow),
                          description="o_proj one row short"),
    "quantization-config": Defect("ENG005", _quantized, description="quantization_config over bf16 weights"),
    "float32": Defect("INV007", _fp32, description="everything float32"),
    "nan": Defect("PAY001", mutate("layers.0.mlp.down_proj.weight", poke(float("nan"))), deep=True,
                  description="one NaN"),
    "zero-norm": Defect("PAY002", mutate("hidden_norm.weight", fill(0.0)), deep=True,
                        description="hidden_norm all zeros"),
    "zero-fc": Defect("PAY004", mutate("fc.weight", fill(0.0)), deep=True, description="fc all zeros"),
}
