"""EAGLE-3 drafts (`LlamaForCausalLMEagle3`, `Eagle3DeepseekV2ForCausalLM`,
`Eagle3Qwen3ForCausalLM`): one decoder layer named `midlayer`, `fc` over the
taps, the draft's own head and its `d2t` hot-token map; good ones, and ones
with the defects that trap them in TokenSpeed (models/llama_eagle3.py and
models/deepseek_v3.py at f4d8ec6e, read into `dspark.schema.families.eagle3_*`)
or, for the Qwen3 layer only vLLM serves, in vLLM 0.33.0
(`dspark.schema.engines.vllm.eagle3_qwen3`). P-EAGLE drafts
(`PeagleLlamaForCausalLM`, `PeagleQwen3ForCausalLM`) are the same drafts
plus the learnt `mask_hidden` [1, 1, taps x hidden] and the `mask_token_id`
speculators' P-EAGLE writes (models/peagle/core.py@speculators==0.9.0:
44-53), judged on vLLM, the one engine that serves them
(`dspark.schema.engines.vllm.peagle`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from dspark.examples.fabricate_parts import (
    Defect,
    DefectNotApplicable,
    drop,
    fill,
    make_tensors,
    mutate,
    narrow,
    poke,
    retype,
    set_field,
    unset,
    widen,
    write_safetensors,
)


@dataclass(frozen=True)
class Eagle3Spec:
    family: str  # "eagle3_llama" | "eagle3_mla" | "eagle3_qwen3" | "peagle_llama" | "peagle_qwen3"
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    vocab_size: int
    draft_vocab_size: int
    num_key_value_heads: int = 0  # Llama, Qwen3
    head_dim: int = 0  # Llama, Qwen3
    q_lora_rank: int = 0  # MLA
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    taps: int = 3
    # The target's decoder layers (what a check with --target reads).
    target_num_hidden_layers: int = 12
    # The tap ids the draft was trained on, where the family's configs put
    # them; None: the engine's defaults (the config lists none).
    tap_ids: tuple[int, ...] | None = None
    # Fields copied into the config as they are (rope, eps, positions).
    extra: tuple[tuple[str, Any], ...] = field(default=())


EAGLE3_SCALES: dict[str, Eagle3Spec] = {
    # Tiny, every dimension distinct so a swapped axis cannot pass.
    "tiny-llama": Eagle3Spec("eagle3_llama", hidden_size=32, intermediate_size=48, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=10, vocab_size=96, draft_vocab_size=40),
    "tiny-mla": Eagle3Spec("eagle3_mla", hidden_size=32, intermediate_size=48, num_attention_heads=2,
                           q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                           v_head_dim=6, vocab_size=96, draft_vocab_size=40),
    # A Qwen3 layer: head_dim (10) is neither hidden_size // heads (8) nor
    # the Qwen3 config's default (128), so a q_norm sized either way fails.
    "tiny-qwen3": Eagle3Spec("eagle3_qwen3", hidden_size=32, intermediate_size=48, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=10, vocab_size=96, draft_vocab_size=40),
    # Qwen3-8B target (36 layers, vocab 151936 pruned to a 32k draft
    # vocabulary): one Qwen3 layer, 32 query and 8 key/value heads of 128.
    "qwen3-8b": Eagle3Spec("eagle3_qwen3", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                           num_key_value_heads=8, head_dim=128, vocab_size=151936, draft_vocab_size=32000,
                           target_num_hidden_layers=36),
    # Llama-3.1-8B target: fc 4096 x (3 x 4096), vocab 128256 pruned to a
    # 32k draft vocabulary (head and d2t); no tap ids, so the engine's
    # default taps, as the published Llama-3.1-8B EAGLE-3 drafts ship.
    "llama3-8b": Eagle3Spec("eagle3_llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                            num_key_value_heads=8, head_dim=128, vocab_size=128256, draft_vocab_size=32000,
                            target_num_hidden_layers=32,
                            extra=(("rms_norm_eps", 1e-5),)),
    # Kimi-K2.5 target, MLA draft: TorchSpec's configs/draft_models/
    # kimi_k25_eagle3_mla.json@6f21829 (fc 7168 x (3 x 7168), the full
    # 163840 vocabulary, so a head and no d2t; taps [1, 29, 57] in eagle_config).
    "kimi-k25-mla": Eagle3Spec("eagle3_mla", hidden_size=7168, intermediate_size=18432, num_attention_heads=64,
                               q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                               v_head_dim=128, vocab_size=163840, draft_vocab_size=163840, tap_ids=(1, 29, 57),
                               target_num_hidden_layers=61,
                               extra=(("rms_norm_eps", 1e-5),
                                      ("rope_scaling", {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0,
                                                        "mscale": 1.0, "mscale_all_dim": 1.0,
                                                        "original_max_position_embeddings": 4096,
                                                        "type": "yarn"}))),
    # P-EAGLE (speculators' `peagle`): the tiny EAGLE-3 shapes, and Llama-3.1-8B
    # and Qwen3-8B drafts at full size.
    "tiny-peagle-llama": Eagle3Spec("peagle_llama", hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=10, vocab_size=96, draft_vocab_size=40),
    "tiny-peagle-qwen3": Eagle3Spec("peagle_qwen3", hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=10, vocab_size=96, draft_vocab_size=40),
    "peagle-llama3-8b": Eagle3Spec("peagle_llama", hidden_size=4096, intermediate_size=14336,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                                   draft_vocab_size=32000, target_num_hidden_layers=32,
                                   extra=(("rms_norm_eps", 1e-5),)),
    "peagle-qwen3-8b": Eagle3Spec("peagle_qwen3", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                                  num_key_value_heads=8, head_dim=128, vocab_size=151936, draft_vocab_size=32000,
                                  target_num_hidden_layers=36),
}

# P-EAGLE family -> the EAGLE-3 family whose config it extends.
PEAGLE_BASES = {"peagle_llama": ("eagle3_llama", "PeagleLlamaForCausalLM"),
                "peagle_qwen3": ("eagle3_qwen3", "PeagleQwen3ForCausalLM")}


def eagle3_config(
    spec: Eagle3Spec, *, fc_norm: bool = False, norm_before_fc: bool = False, tap_ids: list[int] | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """A config TokenSpeed parses for the family (TorchSpec's fields).
    `tap_ids` (default: the spec's) go where the family's draft and the
    target both read them; with `engine` (NAME[@REV]) also where that
    engine's draft and target read them (SGLang: eagle_config)."""
    config: dict[str, Any] = {
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": spec.num_attention_heads,
        "vocab_size": spec.vocab_size,
        "draft_vocab_size": spec.draft_vocab_size,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if tap_ids is None and spec.tap_ids is not None:
        tap_ids = list(spec.tap_ids)
    if spec.family in PEAGLE_BASES:
        base, architecture = PEAGLE_BASES[spec.family]
        config = eagle3_config(replace(spec, family=base), fc_norm=fc_norm, norm_before_fc=norm_before_fc,
                               tap_ids=tap_ids, engine=engine)
        # The last token of the vocabulary, as a tokenizer's added mask token sits.
        config.update(architectures=[architecture], mask_token_id=spec.vocab_size - 1)
        return config
    if spec.family == "eagle3_llama":
        config.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                      num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                      rope_theta=500000.0, max_position_embeddings=8192)
        if tap_ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = list(tap_ids)
    elif spec.family == "eagle3_qwen3":
        # What vLLM reads from speculators' Qwen3-layer draft: a qwen3 config
        # whose top-level tap list both fc and the target read.
        config.update(architectures=["Eagle3Qwen3ForCausalLM"], model_type="qwen3",
                      num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                      rope_theta=1000000.0, max_position_embeddings=40960)
        if tap_ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = list(tap_ids)
    else:
        config.update(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="kimi_k2",
                      num_key_value_heads=spec.num_attention_heads, q_lora_rank=spec.q_lora_rank,
                      kv_lora_rank=spec.kv_lora_rank, qk_nope_head_dim=spec.qk_nope_head_dim,
                      qk_rope_head_dim=spec.qk_rope_head_dim, v_head_dim=spec.v_head_dim,
                      rope_theta=50000.0, max_position_embeddings=262144)
        if tap_ids is not None:
            config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(tap_ids), "use_aux_hidden_state": True}
    config.update(dict(spec.extra))
    if fc_norm:
        config["fc_norm"] = True
    if norm_before_fc:
        config["norm_before_fc"] = True
    if engine is not None:
        from dspark.schema.engines import engine_by_spec
        from dspark.schema.families import family_by_name
        from dspark.schema.normalise import place_eagle3_taps

        place_eagle3_taps(config, family_by_name(spec.family), engine_by_spec(engine))
    return config


# speculators' top-level P-EAGLE fields (models/peagle/config.py::
# PEagleSpeculatorConfig and models/eagle3/config.py::Eagle3SpeculatorConfig
# @speculators==0.9.0): the rest of the config is the layer's.
_PEAGLE_TOP_LEVEL = ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", "norm_before_fc",
                     "fc_norm", "norm_output", "norm_before_residual", "mask_token_id")


def speculators_peagle_config(config: dict[str, Any]) -> dict[str, Any]:
    """A P-EAGLE config (`eagle3_config`) in speculators' shape: the layer
    under transformer_layer_config, the P-EAGLE fields at the top level, and
    the speculators_config vLLM validates (transformers_utils/configs/
    speculators/base.py::SpeculatorsConfig.validate_speculators_config@
    vllm==0.33.0:76-94). Fields the config leaves out stay out."""
    layer = {k: v for k, v in config.items() if k not in _PEAGLE_TOP_LEVEL and k != "architectures"}
    out: dict[str, Any] = {"architectures": ["PEagleSpeculator"], "speculators_model_type": "peagle",
                           "transformer_layer_config": layer}
    out.update({k: config[k] for k in _PEAGLE_TOP_LEVEL if k in config})
    out["speculators_config"] = {
        "algorithm": "peagle", "default_proposal_method": "greedy",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
        "verifier": {"name_or_path": "target", "architectures": ["LlamaForCausalLM"]}}
    out["speculators_version"] = "0.9.0"
    return out


def eagle3_tensor_specs(config: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Served name -> (shape, safetensors dtype) of every tensor a good draft
    of `config` ships, read off the family (bf16 weights, int64 d2t). A
    tensor whose dimensions the config does not give is left out."""
    from dspark.schema.engines import all_profiles, default_engine
    from dspark.schema.families import family_for_config

    family = family_for_config(config)
    # the layout TokenSpeed loads: its loader sizes fc (FamilyLoader.dims);
    # a family TokenSpeed does not serve, as the first engine that does
    loader = default_engine().loader_for(family.name) or next(
        p.loader_for(family.name) for p in all_profiles() if p.loader_for(family.name) is not None)
    engine_dims = loader.dims
    features = {name: bool(config.get(name)) for name in family.declared_features}
    features.update(family.derived_features(config, None))
    expected, _ = family.expected_tensors(family.resolve_dims(config, engine_dims), features)
    specs: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, want in expected.items():
        if want.role == "token_map":
            if config.get("draft_vocab_size") and config["draft_vocab_size"] < config["vocab_size"]:
                specs[name] = (want.shape, "I64")
            continue
        if want.role == "lm_head" and (config.get("tie_word_embeddings") or config.get("draft_vocab_size") is None):
            continue
        specs[name] = (want.shape, "BF16")
    return specs


def eagle3_tensors(config: dict[str, Any], *, seed: int = 0, dtype: str = "bfloat16") -> dict:
    """Real tensors for `config`: seeded weights and a valid offset-encoded
    d2t (draft token i -> target token i + d2t[i])."""
    import torch

    specs = eagle3_tensor_specs(config)
    tensors = make_tensors({n: s for n, (s, d) in specs.items() if d == "BF16"}, dtype=dtype, seed=seed)
    if "d2t" in specs:
        rows, vocab = specs["d2t"][0][0], config["vocab_size"]
        used = torch.linspace(0, vocab - 1, rows).round().to(torch.int64).unique()
        assert used.numel() == rows, "draft vocabulary too large to spread over the target's"
        tensors["d2t"] = (used - torch.arange(rows, dtype=torch.int64)).contiguous()
    return tensors


def eagle3_target_config(spec: Eagle3Spec, model: str = "llama") -> dict[str, Any]:
    """The target's config.json, as far as a check reads it, named as the
    real models name themselves: a Llama or Qwen3 target, or a Kimi-K2.5 one
    (the MLA draft's), whose sizes sit under text_config."""
    sizes = {"hidden_size": spec.hidden_size, "num_hidden_layers": spec.target_num_hidden_layers,
             "vocab_size": spec.vocab_size}
    if model == "qwen3":
        return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **sizes}
    if model == "kimi_k25":
        return {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                "text_config": {"model_type": "deepseek_v3", **sizes}}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **sizes}


# --------------------------------------------------------------------------
# Defects


def _widen_fc(config: dict, tensors: dict) -> None:
    tensors["fc.weight"] = widen(tensors["fc.weight"])


def _needs_d2t(change: Callable[[dict, dict], None]) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        if "d2t" not in tensors:
            raise DefectNotApplicable("this draft ships the full vocabulary (draft_vocab_size = vocab_size), "
                                      "so it has no d2t to break; use the tiny scale")
        change(config, tensors)
    return apply


def _d2t_float(config: dict, tensors: dict) -> None:
    tensors["d2t"] = retype("float32")(tensors["d2t"])


def _d2t_short(config: dict, tensors: dict) -> None:
    tensors["d2t"] = narrow(tensors["d2t"])


def _d2t_past_vocab(config: dict, tensors: dict) -> None:
    tensors["d2t"] = tensors["d2t"].clone()
    tensors["d2t"][-1] += 1  # the last draft token now maps to vocab_size


def _input_norm(config: dict, tensors: dict) -> None:
    import torch

    width = tensors["fc.weight"].shape[1]
    tensors["input_norm.weight"] = torch.ones(width, dtype=tensors["fc.weight"].dtype,
                                              device=tensors["fc.weight"].device)


def _two_layers(config: dict, tensors: dict) -> None:
    config["num_hidden_layers"] = 2


def _four_taps_in_eagle_config(config: dict, tensors: dict) -> None:
    # The Llama draft counts the top level (absent: 3); the target captures 4.
    config.pop("eagle_aux_hidden_state_layer_ids", None)
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 7]}


def _drop_qk_norm(config: dict, tensors: dict) -> None:
    # A Qwen3-layer config over Llama-layer weights: what a trainer that
    # relabels a Llama draft, or drops the norms on export, writes.
    drop("midlayer.self_attn.q_norm.")(config, tensors)
    drop("midlayer.self_attn.k_norm.")(config, tensors)


def _fuse_qkv_a(config: dict, tensors: dict) -> None:
    import torch

    p = "midlayer.self_attn."
    tensors[p + "fused_qkv_a_proj_with_mqa.weight"] = torch.cat(
        [tensors.pop(p + "q_a_proj.weight"), tensors.pop(p + "kv_a_proj_with_mqa.weight")]).contiguous()


def _fuse_gate_up(config: dict, tensors: dict) -> None:
    import torch

    p = "midlayer.mlp."
    tensors[p + "gate_up_proj.weight"] = torch.cat(
        [tensors.pop(p + "gate_proj.weight"), tensors.pop(p + "up_proj.weight")]).contiguous()


def _prefix_model(config: dict, tensors: dict) -> None:
    # The MLA loader adds "model." itself: a stored one becomes model.model.*.
    for name in [n for n in tensors if not n.startswith("lm_head.")]:
        tensors["model." + name] = tensors.pop(name)


def _prefix_model_layers_0(config: dict, tensors: dict) -> None:
    # The Llama loader maps a leading layers.0. to midlayer., never model.layers.0.
    for name in [n for n in tensors if n.startswith("midlayer.")]:
        tensors["model.layers.0." + name[len("midlayer."):]] = tensors.pop(name)


def _norm_before_fc_on_mla(config: dict, tensors: dict) -> None:
    config["norm_before_fc"] = True
    _input_norm(config, tensors)


def _fp32(config: dict, tensors: dict) -> None:
    for name in tensors:
        if tensors[name].is_floating_point():
            tensors[name] = retype("float32")(tensors[name])


def _target_hidden_size(config: dict, tensors: dict) -> None:
    # A draft for a wider target: the Llama class builds fc from hidden_size.
    config["target_hidden_size"] = config["hidden_size"] + 8


def _tap_past_target(config: dict, tensors: dict) -> None:
    """The last tap one past the target's last layer, with the target's
    layer count stated in the config (a user's `target_num_hidden_layers`):
    outside every engine's capture range, judged with --target (TGT005) and,
    from the stated count, without (TGT009)."""
    spec = next((s for s in EAGLE3_SCALES.values() if s.hidden_size == config["hidden_size"]
                 and s.vocab_size == config["vocab_size"]), None)
    if spec is None:
        raise DefectNotApplicable("no target of this draft's size is known to the fabricator")
    layers = spec.target_num_hidden_layers
    ids = [1, layers // 2, layers + 1]
    # In both places, so every engine's draft and target read the same list.
    config["eagle_aux_hidden_state_layer_ids"] = list(ids)
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    config["eagle_config"] = {**nested, "eagle_aux_hidden_state_layer_ids": list(ids)}
    config["target_num_hidden_layers"] = layers


# The defects the EAGLE-3 tests have always used (Llama drafts, plus
# fused-qkv-a on MLA). The per-family tables below are what the command offers.
EAGLE3_DEFECTS: dict[str, Defect] = {
    "one-layer": Defect("CFG003", _two_layers, description="num_hidden_layers 2"),
    "fc-width": Defect("CTX001", _widen_fc, description="fc one column too many"),
    "no-d2t": Defect("VOC001", _needs_d2t(drop("d2t")), description="draft_vocab_size < vocab_size, no d2t"),
    "d2t-float": Defect("VOC002", _needs_d2t(_d2t_float), description="d2t as float32"),
    "d2t-short": Defect("VOC002", _needs_d2t(_d2t_short), description="d2t one entry short"),
    "d2t-past-vocab": Defect("VOC003", _needs_d2t(_d2t_past_vocab), deep=True,
                             description="last d2t entry past the vocab"),
    "no-lm-head": Defect("INV001", drop("lm_head."), description="draft_vocab_size set, no lm_head"),
    "input-norm-undeclared": Defect("FEA002", _input_norm, description="input_norm shipped, norm_before_fc absent"),
    "norm-before-fc-no-weight": Defect("FEA001", set_field("norm_before_fc", True),
                                       description="norm_before_fc, no input_norm"),
    "taps-count": Defect("TAP001", _four_taps_in_eagle_config, description="draft 3 taps, target 4 (Llama)"),
    "fused-qkv-a": Defect("INV002", _fuse_qkv_a, description="pre-fused q/kv-a projection (MLA)"),
    "text-config": Defect("CFG011", set_field("text_config", {"num_attention_heads": 4}),
                          description="a text_config, as copied from a multimodal target's config"),
}

_FC_NORM = (("fc_norm", True),)

# Both families.
_SHARED_DEFECTS: dict[str, Defect] = {
    "two-layers": EAGLE3_DEFECTS["one-layer"],
    "fc-width": EAGLE3_DEFECTS["fc-width"],
    "fc-norm-declared-not-shipped": Defect("FCN001", drop("fc_norm."), needs=_FC_NORM,
                                           description="fc_norm: true, no weights"),
    "fc-norm-shipped-not-declared": Defect("FCN002", unset("fc_norm"), needs=_FC_NORM,
                                           description="fc_norm weights, no fc_norm field"),
    "fc-norm-count": Defect("FCN003", drop("fc_norm.2."), needs=_FC_NORM, description="2 of 3 fc_norm weights"),
    "fc-norm-shape": Defect("FCN004", mutate("fc_norm.1.weight", narrow), needs=_FC_NORM,
                            description="fc_norm.1 one short"),
    "fc-norm-identity": Defect("FCN006", mutate("fc_norm.0.weight", fill(1.0)), deep=True, needs=_FC_NORM,
                               description="fc_norm.0 all ones"),
    "no-d2t": EAGLE3_DEFECTS["no-d2t"],
    "d2t-float": EAGLE3_DEFECTS["d2t-float"],
    "d2t-short": EAGLE3_DEFECTS["d2t-short"],
    "d2t-past-vocab": EAGLE3_DEFECTS["d2t-past-vocab"],
    "text-config": EAGLE3_DEFECTS["text-config"],
    "no-lm-head": Defect("INV001", drop("lm_head."), description="own head declared (draft_vocab_size), not shipped"),
    "missing-mlp": Defect("INV001", drop("midlayer.mlp.down_proj."), description="down_proj dropped"),
    "wrong-shape": Defect("INV003", mutate("midlayer.self_attn.o_proj.weight", narrow),
                          description="o_proj one row short"),
    "float32": Defect("INV007", _fp32, description="every weight float32"),
    "nan": Defect("PAY001", mutate("midlayer.mlp.down_proj.weight", poke(float("nan"))), deep=True,
                  description="one NaN"),
    "zero-norm": Defect("PAY002", mutate("norm.weight", fill(0.0)), deep=True, description="norm all zeros"),
    "zero-fc": Defect("PAY004", mutate("fc.weight", fill(0.0)), deep=True, description="fc all zeros"),
    "tap-past-target": Defect("TGT005", _tap_past_target, target=True,
                              description="last tap one past the target's layers; target_num_hidden_layers stated"),
}

EAGLE3_LLAMA_DEFECTS: dict[str, Defect] = {
    **_SHARED_DEFECTS,
    "input-norm-undeclared": EAGLE3_DEFECTS["input-norm-undeclared"],
    "norm-before-fc-no-weight": EAGLE3_DEFECTS["norm-before-fc-no-weight"],
    "taps-count": EAGLE3_DEFECTS["taps-count"],
    "target-hidden-size": Defect("CFG003", _target_hidden_size,
                                 description="target_hidden_size differs from hidden_size (a warning with a "
                                 "--target as wide as hidden_size, whose taps fit)"),
    "model-layers-0-prefix": Defect("SRV001", _prefix_model_layers_0,
                                    description="model.layers.0.* names, which the loader never maps"),
}

EAGLE3_MLA_DEFECTS: dict[str, Defect] = {
    **_SHARED_DEFECTS,
    "norm-before-fc": Defect("ENG001", _norm_before_fc_on_mla,
                             description="norm_before_fc with input_norm: the MLA model has no input_norm"),
    "fused-qkv-a": EAGLE3_DEFECTS["fused-qkv-a"],
    "fused-gate-up": Defect("INV002", _fuse_gate_up, description="pre-fused gate_up_proj, which the loader drops"),
    "model-prefix": Defect("SRV001", _prefix_model, description="names under model., which the loader prefixes again"),
    "model-type-llama": Defect("CFG003", set_field("model_type", "llama"),
                               description="LlamaConfig, without the n_routed_experts the loader reads"),
    "no-q-lora-rank": Defect("CFG003", set_field("q_lora_rank", None), description="q_lora_rank null"),
}


# The Qwen3 layer, judged by the one engine that serves it (`--engine vllm`):
# the codes are vLLM 0.33.0's.
EAGLE3_QWEN3_DEFECTS: dict[str, Defect] = {
    "no-qk-norm": Defect("INV001", _drop_qk_norm, description="q_norm and k_norm not shipped"),
    "qk-norm-shape": Defect("INV003", mutate("midlayer.self_attn.q_norm.weight", narrow),
                            description="q_norm one entry short of head_dim"),
    **{name: _SHARED_DEFECTS[name] for name in (
        "fc-width", "fc-norm-declared-not-shipped", "fc-norm-shipped-not-declared", "fc-norm-count",
        "fc-norm-shape", "d2t-short", "d2t-past-vocab", "missing-mlp", "wrong-shape", "nan", "tap-past-target")},
    "input-norm-undeclared": EAGLE3_DEFECTS["input-norm-undeclared"],
    "norm-before-fc-no-weight": EAGLE3_DEFECTS["norm-before-fc-no-weight"],
}


def _mask_hidden_short(config: dict, tensors: dict) -> None:
    # One tap's width short: a mask_hidden saved for fewer taps than fc reads.
    tensors["mask_hidden"] = tensors["mask_hidden"][..., :-1].contiguous()


def _peagle_defects(base: dict[str, Defect]) -> dict[str, Defect]:
    """P-EAGLE's own defects, then its EAGLE-3 family's that hold for it; the
    codes are vLLM 0.33.0's (the one engine that serves P-EAGLE)."""
    return {
        "no-mask-hidden": Defect("INV001", drop("mask_hidden"),
                                 description="mask_hidden not shipped (vLLM refuses a parallel draft without it)"),
        "mask-hidden-width": Defect("INV003", _mask_hidden_short, description="mask_hidden one entry short"),
        "no-mask-token": Defect("CFG008", unset("mask_token_id"), description="mask_token_id absent"),
        # vLLM's reader of the P-EAGLE config never copies fc_norm
        # (algos.py::update_peagle@vllm==0.33.0:53-87): the weights have no destination.
        "fc-norm": Defect("ENG001", lambda config, tensors: None, needs=_FC_NORM,
                          description="fc_norm declared and shipped, which vLLM's P-EAGLE reader drops"),
        "mask-token-past-vocab": Defect("CFG008", lambda config, tensors: config.update(
            mask_token_id=config["vocab_size"]), description="mask_token_id = vocab_size"),
        **{name: base[name] for name in ("fc-width", "missing-mlp", "wrong-shape", "d2t-short", "nan",
                                         "tap-past-target")},
    }


PEAGLE_LLAMA_DEFECTS = _peagle_defects(EAGLE3_LLAMA_DEFECTS)
PEAGLE_QWEN3_DEFECTS = {**_peagle_defects(EAGLE3_QWEN3_DEFECTS),
                        "no-qk-norm": EAGLE3_QWEN3_DEFECTS["no-qk-norm"]}
DEFECTS_BY_FAMILY = {"eagle3_qwen3": EAGLE3_QWEN3_DEFECTS, "peagle_llama": PEAGLE_LLAMA_DEFECTS,
                     "peagle_qwen3": PEAGLE_QWEN3_DEFECTS}


def write_eagle3_draft(
    out: Path,
    *,
    scale: str = "tiny-llama",
    fc_norm: bool = False,
    norm_before_fc: bool = False,
    tap_ids: list[int] | None = None,
    defect: str | None = None,
    layout: str = "midlayer",
    config_edit: Callable[[dict], None] | None = None,
    tensor_edit: Callable[[dict], None] | None = None,
    seed: int = 0,
    engine: str | None = None,
) -> Path:
    """Write an EAGLE-3 draft folder. `layout` "midlayer" writes TorchSpec's
    native names, "layers.0" its `--vllm` export's. `defect` names one of
    `EAGLE3_DEFECTS` (`DEFECTS_BY_FAMILY` for a Qwen3-layer or P-EAGLE scale).
    `engine`: the tap list is written where that engine reads it too."""
    config = eagle3_config(EAGLE3_SCALES[scale], fc_norm=fc_norm, norm_before_fc=norm_before_fc, tap_ids=tap_ids,
                           engine=engine)
    if config_edit:
        config_edit(config)
    tensors = eagle3_tensors(config, seed=seed)
    if defect is not None:
        defects = DEFECTS_BY_FAMILY.get(EAGLE3_SCALES[scale].family, EAGLE3_DEFECTS)
        defects[defect].apply(config, tensors)
    if tensor_edit:
        tensor_edit(tensors)
    if layout == "layers.0":
        tensors = {("layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n): t
                   for n, t in tensors.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(out, tensors)
    return out
