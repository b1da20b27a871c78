"""Fabricate draft checkpoints of every family dspark gates: good ones, and
ones with a named defect, at tiny or full size.

Used by the tests, the benchmarks and the bundled example. Tensors are made
with torch and written by the safetensors library; `--sparse` instead
writes a header and leaves the payload as a hole (right size on disk
listings, no bytes written) for header-only checks at full size.

    python -m dspark.examples.fabricate OUT [--family FAMILY] [--scale tiny|full]
        [--defect NAME] [--variant dflash|dspark] [--fc-norm/--no-fc-norm]
        [--norm-before-fc] [--stream S] [--shards N] [--dtype bfloat16]
        [--sparse] [--target-config FILE]
    python -m dspark.examples.fabricate --list-defects [--family FAMILY]

Families: k3_dspark (the default), dflash_gqa, eagle3_llama, eagle3_mla,
eagle3_qwen3, peagle_llama, peagle_qwen3 (served by vLLM only: check them with
`--engine vllm`).
This module holds the K3 DSpark draft, the family registry and the command;
the other families are in `fabricate_gqa` and `fabricate_eagle3`, the parts
they share in `fabricate_parts`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from dspark.examples.fabricate_eagle3 import (  # noqa: F401 - re-exported: the tests import them from here
    EAGLE3_DEFECTS,
    EAGLE3_LLAMA_DEFECTS,
    EAGLE3_MLA_DEFECTS,
    EAGLE3_QWEN3_DEFECTS,
    PEAGLE_LLAMA_DEFECTS,
    PEAGLE_QWEN3_DEFECTS,
    speculators_peagle_config,
    EAGLE3_SCALES,
    Eagle3Spec,
    eagle3_config,
    eagle3_target_config,
    eagle3_tensor_specs,
    eagle3_tensors,
    write_eagle3_draft,
)
from dspark.examples.fabricate_dflash2 import VARIANTS as DFLASH2_VARIANTS
from dspark.examples.fabricate_dflash2 import (
    DFLASH2_DEFECTS,
    dflash2_config,
    dflash2_target_config,
    dflash2_tensor_shapes,
)
from dspark.examples.fabricate_gqa import (  # noqa: F401 - re-exported
    GQA_DEFECTS,
    GQA_SCALES,
    VARIANTS,
    GqaSpec,
    gqa_config,
    gqa_target_config,
    gqa_tensor_shapes,
)
from dspark.examples.fabricate_parts import (  # noqa: F401 - re-exported
    Defect,
    DefectNotApplicable,
    FabricateError,
    drop,
    fill,
    make_tensors,
    mutate,
    narrow,
    poke,
    safetensors_dtype,
    set_field,
    shape_tensors,
    specs_of,
    unset,
    widen,
    write_config,
    write_header_file,
    write_header_only,
    write_safetensors,
)
from dspark.schema.errors import UsageError
from dspark.schema.findings import FINDING_CODES, Severity


@dataclass(frozen=True)
class DraftSpec:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    vocab_size: int
    target_hidden_size: int
    target_num_hidden_layers: int
    target_layer_ids: tuple[int, ...]
    markov_rank: int
    confidence_hidden: int


SCALES: dict[str, DraftSpec] = {
    # Tiny, but every dimension distinct so a swapped axis cannot pass.
    "tiny": DraftSpec(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
        vocab_size=96, target_hidden_size=40, target_num_hidden_layers=12,
        target_layer_ids=(1, 4, 7, 9, 11), markov_rank=12, confidence_hidden=32,
    ),
    # Kimi-K3 reference dimensions (DESIGN §2).
    "k3": DraftSpec(
        hidden_size=7168, intermediate_size=14336, num_hidden_layers=5, num_attention_heads=64,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        vocab_size=163840, target_hidden_size=7168, target_num_hidden_layers=93,
        target_layer_ids=(1, 23, 46, 69, 92), markov_rank=256, confidence_hidden=7168,
    ),
}


def draft_config(spec: DraftSpec, *, fc_norm: bool = True, stream: str | None = "prefix") -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["K3DSparkModel"],
        "model_type": "k3_dspark",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_attention_heads,
        "q_lora_rank": spec.q_lora_rank,
        "kv_lora_rank": spec.kv_lora_rank,
        "qk_nope_head_dim": spec.qk_nope_head_dim,
        "qk_rope_head_dim": spec.qk_rope_head_dim,
        "v_head_dim": spec.v_head_dim,
        "mla_use_nope": False,
        "mla_use_output_gate": False,
        "vocab_size": spec.vocab_size,
        "draft_vocab_size": spec.vocab_size,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rope_theta": 50000.0,
        "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
        "target_hidden_size": spec.target_hidden_size,
        "target_num_hidden_layers": spec.target_num_hidden_layers,
        "num_target_layers": len(spec.target_layer_ids),
        "target_layer_ids": list(spec.target_layer_ids),
        "mask_token_id": spec.vocab_size - 1,
        "markov_rank": spec.markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": False,
        "fc_norm": fc_norm,
        "torch_dtype": "bfloat16",
    }
    if stream is not None:
        config["aux_hidden_stream"] = stream
    return config


def tensor_shapes(spec: DraftSpec, *, fc_norm: bool = True, skipped: bool = True) -> dict[str, tuple[int, ...]]:
    """Served name -> shape, in the order the reference checkpoint lists them."""
    h, th, nh = spec.hidden_size, spec.target_hidden_size, spec.num_attention_heads
    taps = len(spec.target_layer_ids)
    shapes: dict[str, tuple[int, ...]] = {
        "context_proj.weight": (h, taps * th),
        "context_norm.weight": (h,),
        "final_norm.weight": (h,),
        "markov_head.markov_w1.weight": (spec.vocab_size, spec.markov_rank),
        "markov_head.markov_w2.weight": (spec.vocab_size, spec.markov_rank),
    }
    if fc_norm:
        for i in range(taps):
            shapes[f"fc_norm.{i}.weight"] = (th,)
    for n in range(spec.num_hidden_layers):
        p = f"layers.{n}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_a_proj.weight"] = (spec.q_lora_rank, h)
        shapes[p + "self_attn.q_a_layernorm.weight"] = (spec.q_lora_rank,)
        shapes[p + "self_attn.q_b_proj.weight"] = (nh * (spec.qk_nope_head_dim + spec.qk_rope_head_dim), spec.q_lora_rank)
        shapes[p + "self_attn.kv_a_proj_with_mqa.weight"] = (spec.kv_lora_rank + spec.qk_rope_head_dim, h)
        shapes[p + "self_attn.kv_a_layernorm.weight"] = (spec.kv_lora_rank,)
        shapes[p + "self_attn.kv_b_proj.weight"] = (nh * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank)
        shapes[p + "self_attn.o_proj.weight"] = (h, nh * spec.v_head_dim)
        shapes[p + "mlp.gate_proj.weight"] = (spec.intermediate_size, h)
        shapes[p + "mlp.up_proj.weight"] = (spec.intermediate_size, h)
        shapes[p + "mlp.down_proj.weight"] = (h, spec.intermediate_size)
    if skipped:
        shapes["embed_tokens.weight"] = (spec.vocab_size, h)
        shapes["confidence_head.proj.weight"] = (1, spec.confidence_hidden)
        shapes["confidence_head.proj.bias"] = (1,)
    return shapes


# --------------------------------------------------------------------------
# K3 defects (`Defect` in fabricate_parts says what one is)

_FC_NORM = (("fc_norm", True),)


def _undeclare_fc_norm(config: dict, tensors: dict) -> None:
    config.pop("fc_norm", None)


def _fc_norm_int(config: dict, tensors: dict) -> None:
    import torch

    tensors["fc_norm.1.weight"] = tensors["fc_norm.1.weight"].to(torch.int32)


def _fp32(config: dict, tensors: dict) -> None:
    import torch

    for name in tensors:
        tensors[name] = tensors[name].to(torch.float32)


def _int_matrix(config: dict, tensors: dict) -> None:
    import torch

    tensors["layers.0.mlp.up_proj.weight"] = tensors["layers.0.mlp.up_proj.weight"].to(torch.int8)


def _stream_nested_only(config: dict, tensors: dict) -> None:
    config.pop("aux_hidden_stream", None)
    config["dflash_config"] = {**(config.get("dflash_config") or {}), "aux_hidden_stream": "attn_res"}


def _extra_tensor(config: dict, tensors: dict) -> None:
    # A GQA projection in an MLA draft: the K3 loader has no destination for it.
    tensors["layers.0.self_attn.q_proj.weight"] = tensors["layers.0.self_attn.o_proj.weight"].clone()


def _duplicate(config: dict, tensors: dict) -> None:
    # A torch.compile wrapper name next to the plain one: both strip to
    # final_norm.weight, with other values (identical copies are only a
    # warning). (A second "model."-prefixed copy would collide with the
    # plain name when written and vanish.)
    tensors["_orig_mod.final_norm.weight"] = tensors["final_norm.weight"] * 2


DEFECTS: dict[str, Defect] = {
    "no-config": Defect("CFG001", lambda c, t: c.clear(), description="config.json not written"),
    "config-not-object": Defect("CFG002", lambda c, t: None, description="config.json is a JSON list"),
    "mla-nope": Defect("CFG003", set_field("mla_use_nope", True), description="mla_use_nope true"),
    "zero-markov-rank": Defect("CFG003", set_field("markov_rank", 0), description="markov_rank 0"),
    "markov-head-type": Defect("CFG003", set_field("markov_head_type", "gated"), description="unsupported Markov head"),
    "tap-count": Defect("CFG005", set_field("num_target_layers", 4), description="5 taps, 4 declared"),
    "taps-unsorted": Defect("CFG006", set_field("target_layer_ids", [1, 7, 4, 9, 11]), description="taps out of order"),
    "tap-out-of-range": Defect("CFG007", lambda c, t: c.update(target_layer_ids=c["target_layer_ids"][:-1] + [c["target_num_hidden_layers"]]), description="last tap beyond the target"),
    "no-mask-token": Defect("CFG008", unset("mask_token_id"), description="mask_token_id missing"),
    "mask-token-range": Defect("CFG008", lambda c, t: c.update(mask_token_id=c["vocab_size"]), description="mask_token_id = vocab_size"),
    "draft-vocab": Defect("CFG009", lambda c, t: c.update(draft_vocab_size=c["vocab_size"] // 2), description="draft_vocab_size differs"),
    "config-nan": Defect("CFG010", set_field("rms_norm_eps", math.nan), description="rms_norm_eps NaN (json.dump writes NaN, not JSON)"),
    "layers-beyond-bound": Defect("CFG003", set_field("num_hidden_layers", 10**12), description="num_hidden_layers 10**12"),
    "fc-norm-declared-not-shipped": Defect("FCN001", drop("fc_norm."), needs=_FC_NORM, description="fc_norm: true, no weights"),
    "fc-norm-shipped-not-declared": Defect("FCN002", _undeclare_fc_norm, needs=_FC_NORM, description="weights, no fc_norm field"),
    "fc-norm-shipped-declared-false": Defect("FCN002", set_field("fc_norm", False), needs=_FC_NORM, description="weights, fc_norm: false"),
    "fc-norm-count": Defect("FCN003", drop("fc_norm.4."), needs=_FC_NORM, description="4 of 5 fc_norm weights"),
    "fc-norm-extra-index": Defect("FCN003", lambda c, t: t.update({"fc_norm.5.weight": t["fc_norm.0.weight"].clone()}), needs=_FC_NORM, description="fc_norm.5 for 5 taps"),
    "fc-norm-shape": Defect("FCN004", mutate("fc_norm.2.weight", narrow), needs=_FC_NORM, description="fc_norm.2 one short"),
    "fc-norm-int": Defect("FCN005", _fc_norm_int, needs=_FC_NORM, description="fc_norm.1 as int32"),
    "fc-norm-identity": Defect("FCN006", mutate("fc_norm.3.weight", fill(1.0)), deep=True, needs=_FC_NORM, description="fc_norm.3 all ones"),
    "context-proj-width": Defect("CTX001", mutate("context_proj.weight", widen), description="one column too many"),
    "stream-invalid": Defect("STR001", set_field("aux_hidden_stream", "residual"), description="unknown stream"),
    # TokenSpeed 0.1.1 reads the K3 stream at the top level only: a nested one
    # is never read (configs/kimi_k3_dspark_config.py@tokenspeed==0.1.1:79, 113)
    "stream-invalid-nested": Defect("STR008", lambda c, t: c.update(dflash_config={"aux_hidden_stream": "mixture"}), description="unknown stream in dflash_config, never read"),
    "stream-nested-only": Defect("ENG001", _stream_nested_only, description="attn_res declared in dflash_config only: served the prefix stream"),
    "missing-layer": Defect("INV001", drop("layers.1."), description="layer 1 dropped"),
    "unexpected-tensor": Defect("INV002", _extra_tensor, description="a q_proj the MLA draft has no destination for"),
    "wrong-shape": Defect("INV003", mutate("layers.1.self_attn.o_proj.weight", narrow), description="o_proj one row short"),
    "int-weight": Defect("INV004", _int_matrix, description="up_proj as int8"),
    "duplicate-name": Defect("INV006", _duplicate, description="final_norm twice, with and without _orig_mod., values apart"),
    "float32": Defect("INV007", _fp32, description="everything float32"),
    "nan": Defect("PAY001", mutate("layers.0.mlp.down_proj.weight", poke(math.nan)), deep=True, description="one NaN"),
    "inf": Defect("PAY001", mutate("context_proj.weight", poke(math.inf)), deep=True, description="one Inf"),
    "zero-norm": Defect("PAY002", mutate("final_norm.weight", fill(0.0)), deep=True, description="final_norm all zeros"),
    "zero-matrix": Defect("PAY004", mutate("layers.1.mlp.gate_proj.weight", fill(0.0)), deep=True, description="gate_proj all zeros"),
    "zero-context-proj": Defect("PAY004", mutate("context_proj.weight", fill(0.0)), deep=True, description="context_proj all zeros"),
}


# --------------------------------------------------------------------------
# The families, as one table: what each makes, at which sizes, with which
# options and defects.

Specs = dict[str, tuple[tuple[int, ...], str]]


@dataclass(frozen=True)
class FamilyFabricator:
    name: str
    description: str
    # --scale name -> the family's own scale
    scales: Mapping[str, str]
    defects: Mapping[str, Defect]
    # Build options the family has, with their defaults.
    options: Mapping[str, Any]
    # (scale, options) -> config.json
    config: Callable[[str, Mapping[str, Any]], dict]
    # (scale, config, options) -> served name -> (shape, safetensors dtype of a bf16 draft)
    specs: Callable[[str, dict, Mapping[str, Any]], Specs]
    # (config, specs, torch dtype, seed) -> real tensors
    tensors: Callable[[dict, Specs, str, int], dict]
    # scale -> the target's config.json (for defects checked with --target)
    target: Callable[[str], dict]
    # Prefix of the stored names (the engine strips it, or never sees one).
    prefix: str = ""
    # Defects written as something other than a config object.
    config_as_list: frozenset[str] = field(default=frozenset())
    # The engine whose verdicts the defects' codes are (None: the default
    # engine); a family the default engine does not serve names one that does.
    engine: str | None = None
    # config.json as the family's trainer writes it, from the config the
    # engine parses (None: that one): P-EAGLE in speculators' shape, the one
    # vLLM reaches its P-EAGLE classes through.
    written: Callable[[dict], dict] | None = None


def _gqa_eagle3_fabricator(name: str, description: str, scales: Mapping[str, str], defects: Any, *,
                           target_model: str, **fields: Any) -> "FamilyFabricator":
    """An EAGLE-3-shaped family with a GQA layer (EAGLE-3 Llama and Qwen3,
    P-EAGLE): one config, tensors and target writer, the layer and the
    target's model told by the scale."""
    return FamilyFabricator(
        name=name, description=description, scales=scales, defects=defects,
        options={"fc_norm": False, "norm_before_fc": False, "engine": None},
        config=lambda scale, o: eagle3_config(EAGLE3_SCALES[scale], fc_norm=o["fc_norm"],
                                              norm_before_fc=o["norm_before_fc"], engine=o["engine"]),
        specs=lambda scale, config, o: eagle3_tensor_specs(config),
        tensors=lambda config, specs, dtype, seed: eagle3_tensors(config, seed=seed, dtype=dtype),
        target=lambda scale: eagle3_target_config(EAGLE3_SCALES[scale], model=target_model),
        **fields,
    )


def _k3_target(scale: str) -> dict:
    """A Kimi-K3 target config as released: the language model's sizes under
    text_config (its config class reads them nowhere else), and the class
    the K3 DSpark drafter wires to."""
    spec = SCALES[scale]
    return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
            "text_config": {"model_type": "kimi_linear", "hidden_size": spec.target_hidden_size,
                            "num_hidden_layers": spec.target_num_hidden_layers, "vocab_size": spec.vocab_size}}


def _bf16(shapes: Mapping[str, tuple[int, ...]]) -> Specs:
    return {name: (shape, "BF16") for name, shape in shapes.items()}


def _seeded(config: dict, specs: Specs, dtype: str, seed: int) -> dict:
    return make_tensors({name: shape for name, (shape, _) in specs.items()}, dtype=dtype, seed=seed)


FABRICATORS: dict[str, FamilyFabricator] = {
    "k3_dspark": FamilyFabricator(
        name="k3_dspark",
        description="Kimi-K3 DSpark (K3DSparkModel); full size: the Kimi-K3 reference draft",
        scales={"tiny": "tiny", "full": "k3", "k3": "k3"},
        defects=DEFECTS,
        options={"fc_norm": True, "stream": "prefix", "skipped": True, "engine": None},
        config=lambda scale, o: draft_config(SCALES[scale], fc_norm=o["fc_norm"], stream=o["stream"]),
        specs=lambda scale, config, o: _bf16(tensor_shapes(SCALES[scale], fc_norm=o["fc_norm"],
                                                          skipped=o["skipped"])),
        tensors=_seeded,
        target=_k3_target,
        prefix="model.",
        config_as_list=frozenset({"config-not-object"}),
    ),
    "dflash_gqa": FamilyFabricator(
        name="dflash_gqa",
        description="GQA DFlash / DSpark (DFlashDraftModel, DSparkDraftModel); full size: on Qwen3-8B",
        scales={"tiny": "tiny", "full": "qwen3-8b"},
        defects=GQA_DEFECTS,
        options={"variant": "dflash", "engine": None},
        config=lambda scale, o: gqa_config(GQA_SCALES[scale], variant=o["variant"]),
        specs=lambda scale, config, o: _bf16(gqa_tensor_shapes(config)),
        tensors=_seeded,
        target=lambda scale: gqa_target_config(GQA_SCALES[scale]),
    ),
    "dflash2": FamilyFabricator(
        name="dflash2",
        description="DFlash2 (DFlash2DraftModel), GQA or MLA attention (--variant); full size: on Qwen3-8B",
        scales={"tiny": "tiny", "full": "qwen3-8b"},
        defects=DFLASH2_DEFECTS,
        options={"variant": "gqa", "engine": None},
        config=lambda scale, o: dflash2_config(scale, variant=o["variant"]),
        specs=lambda scale, config, o: _bf16(dflash2_tensor_shapes(config)),
        tensors=_seeded,
        target=dflash2_target_config,
    ),
    "eagle3_llama": _gqa_eagle3_fabricator(
        "eagle3_llama", "EAGLE-3 Llama (LlamaForCausalLMEagle3); full size: on Llama-3.1-8B",
        {"tiny": "tiny-llama", "full": "llama3-8b"}, EAGLE3_LLAMA_DEFECTS, target_model="llama"),
    "eagle3_mla": FamilyFabricator(
        name="eagle3_mla",
        description="EAGLE-3 MLA (Eagle3DeepseekV2ForCausalLM); full size: TorchSpec's Kimi-K2.5 draft",
        scales={"tiny": "tiny-mla", "full": "kimi-k25-mla"},
        defects=EAGLE3_MLA_DEFECTS,
        options={"fc_norm": False, "engine": None},
        config=lambda scale, o: eagle3_config(EAGLE3_SCALES[scale], fc_norm=o["fc_norm"], engine=o["engine"]),
        specs=lambda scale, config, o: eagle3_tensor_specs(config),
        tensors=lambda config, specs, dtype, seed: eagle3_tensors(config, seed=seed, dtype=dtype),
        target=lambda scale: eagle3_target_config(EAGLE3_SCALES[scale], model="kimi_k25"),
    ),
    "eagle3_qwen3": _gqa_eagle3_fabricator(
        "eagle3_qwen3", "EAGLE-3 with a Qwen3 layer (Eagle3Qwen3ForCausalLM; vLLM only); full size: on Qwen3-8B",
        {"tiny": "tiny-qwen3", "full": "qwen3-8b"}, EAGLE3_QWEN3_DEFECTS, target_model="qwen3", engine="vllm"),
    "peagle_llama": _gqa_eagle3_fabricator(
        "peagle_llama", "P-EAGLE with a Llama layer (PeagleLlamaForCausalLM; vLLM only); full size: on Llama-3.1-8B",
        {"tiny": "tiny-peagle-llama", "full": "peagle-llama3-8b"}, PEAGLE_LLAMA_DEFECTS, target_model="llama",
        engine="vllm", written=speculators_peagle_config),
    "peagle_qwen3": _gqa_eagle3_fabricator(
        "peagle_qwen3", "P-EAGLE with a Qwen3 layer (PeagleQwen3ForCausalLM; vLLM only); full size: on Qwen3-8B",
        {"tiny": "tiny-peagle-qwen3", "full": "peagle-qwen3-8b"}, PEAGLE_QWEN3_DEFECTS, target_model="qwen3",
        engine="vllm", written=speculators_peagle_config),
}

# The command's flag for each build option (`skipped`, K3's skipped tensors, is the library's only).
_OPTION_FLAGS = {"fc_norm": "--fc-norm/--no-fc-norm", "stream": "--stream", "variant": "--variant",
                 "norm_before_fc": "--norm-before-fc", "engine": "--engine"}


def fabricator(family: str) -> FamilyFabricator:
    if family not in FABRICATORS:
        raise FabricateError(f"no family {family!r}; the families are {', '.join(FABRICATORS)}.")
    return FABRICATORS[family]


@dataclass(frozen=True)
class DraftPlan:
    """What `fabricate` will write: printable and testable before a byte is."""

    family: FamilyFabricator
    scale: str  # the family's own scale name
    options: Mapping[str, Any]
    defect: str | None


def plan_draft(family: str = "k3_dspark", scale: str = "tiny", defect: str | None = None,
               **options: Any) -> DraftPlan:
    """Resolve the family's scale, its options (None: the family's default,
    or what the defect needs) and the defect; refuse with FabricateError
    what the family cannot make."""
    fab = fabricator(family)
    if scale not in fab.scales:
        offered = ", ".join(fab.scales)
        hint = " (k3 is the K3 DSpark full size: use --scale full)" if scale == "k3" else ""
        raise FabricateError(f"{family} has no scale {scale!r}{hint}; it is made at {offered}.")
    if defect is not None and defect not in fab.defects:
        elsewhere = [name for name, other in FABRICATORS.items() if defect in other.defects]
        where = f"; it is a defect of {', '.join(elsewhere)}" if elsewhere else ""
        raise FabricateError(f"{family} has no defect {defect!r}{where}. "
                             f"List them with --list-defects --family {family}.")
    given = {name: value for name, value in options.items() if value is not None}
    foreign = sorted(set(given) - set(fab.options))
    if foreign:
        flags = ", ".join(_OPTION_FLAGS.get(name, name) for name in foreign)
        offered = [_OPTION_FLAGS[n] for n in fab.options if n in _OPTION_FLAGS]
        raise FabricateError(f"{flags} does not apply to {family}; its options are {', '.join(offered)}.")
    resolved = {**fab.options, **given}
    if defect is not None:
        for name, value in fab.defects[defect].needs:
            if name in given and given[name] != value:
                raise FabricateError(f"defect {defect} needs {_OPTION_FLAGS.get(name, name)} {value!r}, "
                                     f"and {given[name]!r} was asked for.")
            resolved[name] = value
    return DraftPlan(fab, fab.scales[scale], resolved, defect)


def fabricate(
    out: Path,
    *,
    family: str = "k3_dspark",
    scale: str = "tiny",
    defect: str | None = None,
    sparse: bool = False,
    dtype: str = "bfloat16",
    shards: int = 1,
    seed: int = 0,
    prefix: str | None = None,
    **options: Any,
) -> Path:
    """Write a draft folder of `family` and return it. `options` are the
    family's build options (`fc_norm`, `stream`, `variant`,
    `norm_before_fc`); None means the family's default. `sparse` writes the
    header over a payload hole: without a defect it needs no torch; a
    payload defect (`deep`) cannot be sparse. Nothing is written when the
    draft cannot be made (FabricateError)."""
    plan = plan_draft(family, scale, defect, **options)
    fab, chosen = plan.family, plan.defect
    config = fab.config(plan.scale, plan.options)
    specs = fab.specs(plan.scale, config, plan.options)
    if sparse and shards > 1:
        raise FabricateError("--sparse writes one model.safetensors; --shards needs real tensors.")
    engine = plan.options.get("engine")
    stored_prefix = prefix if prefix is not None else _engine_prefix(fab, engine, specs) if engine else fab.prefix
    if chosen is None and sparse:
        float_dtype = safetensors_dtype(dtype)
        specs = {n: (shape, float_dtype if d == "BF16" else d) for n, (shape, d) in specs.items()}
        _write(out, fab, chosen, config, header=_prefixed(specs, stored_prefix))
        return out
    if sparse and fab.defects[chosen].deep:
        raise FabricateError(f"defect {chosen} is in the payload values, which a sparse draft does not "
                             "have; drop --sparse.")
    if chosen is not None and not sparse:
        # A rehearsal on tensors without values: a defect with nothing to
        # break here is refused before gigabytes of weights are made.
        fab.defects[chosen].apply(json.loads(json.dumps(config)), shape_tensors(specs))
    if sparse:
        float_dtype = safetensors_dtype(dtype)
        tensors = shape_tensors({n: (s, float_dtype if d == "BF16" else d) for n, (s, d) in specs.items()})
    else:
        tensors = fab.tensors(config, specs, dtype, seed)
    if chosen is not None:
        fab.defects[chosen].apply(config, tensors)
    if sparse:
        _write(out, fab, chosen, config, header=_prefixed(specs_of(tensors), stored_prefix))
    else:
        _write(out, fab, chosen, config, tensors=_prefixed(tensors, stored_prefix), shards=shards)
    return out


def _engine_prefix(fab: FamilyFabricator, engine: str, specs: Mapping[str, Any]) -> str:
    """The family's stored prefix if `engine`'s loader strips it, else none:
    the names that engine loads as they are (vLLM strips no `model.`)."""
    from dspark.schema.engines import engine_by_spec

    loader = engine_by_spec(engine).loader_for(fab.name)
    probe = next(iter(specs), "")
    if loader is None or not fab.prefix or loader.engine_name(fab.prefix + probe) == probe:
        return fab.prefix
    return ""


def _prefixed(named: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {(n if not prefix or n.startswith(prefix) else prefix + n): value for n, value in named.items()}


def _write(out: Path, fab: FamilyFabricator, defect: str | None, config: dict, *,
           tensors: dict | None = None, header: Specs | None = None, shards: int = 1) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if fab.written is not None and isinstance(config, dict):
        config = fab.written(config)
    write_config(out, config, as_list=defect in fab.config_as_list)
    if header is not None:
        write_header_file(out / "model.safetensors", header)
    else:
        write_safetensors(out, tensors, shards=shards)


def target_config(family: str = "k3_dspark", scale: str = "tiny") -> dict:
    """The config.json of the target a `family` draft at `scale` was made
    for: what `dspark check --target` reads (defects marked `target`)."""
    fab = fabricator(family)
    if scale not in fab.scales:
        raise FabricateError(f"{family} has no scale {scale!r}; it is made at {', '.join(fab.scales)}.")
    return fab.target(fab.scales[scale])


def defect_table(family: str | None = None) -> list[tuple[str, str, str, str]]:
    """(family, defect, expected code, description) for every defect, the
    description saying when the check needs --deep or --target and what
    the defect sets up itself."""
    rows = []
    for fab in [fabricator(family)] if family else FABRICATORS.values():
        for name, defect in fab.defects.items():
            notes = (["needs --deep"] if defect.deep else []) + (["needs --target"] if defect.target else [])
            notes += [f"{_OPTION_FLAGS.get(k, k).split('/')[0]} {v}" for k, v in defect.needs]
            if FINDING_CODES[defect.code].severity is not Severity.ERROR:
                # the engine serves such a draft; dspark only says so (a CI job expecting exit 1 needs --strict)
                notes.append(f"a {FINDING_CODES[defect.code].severity.value}: exits 0, 1 with --strict")
            text = defect.description + (f" [{'; '.join(notes)}]" if notes else "")
            rows.append((fab.name, name, defect.code, text))
    return rows


# --------------------------------------------------------------------------
# The K3 entry points the tests and benchmarks have always called


def write_draft(
    out: Path,
    *,
    scale: str = "tiny",
    fc_norm: bool = True,
    stream: str | None = "prefix",
    defect: str | None = None,
    dtype: str = "bfloat16",
    shards: int = 1,
    prefix: str = "model.",
    seed: int = 0,
    skipped: bool = True,
) -> Path:
    """Write a K3 DSpark draft folder and return it (`stream` None: the
    config declares none)."""
    spec = SCALES[scale]
    config = draft_config(spec, fc_norm=fc_norm, stream=stream)
    if defect is not None:
        for name, value in DEFECTS[defect].needs:
            if {"fc_norm": fc_norm}.get(name, value) != value:
                raise FabricateError(f"defect {defect} needs {name} = {value!r}.")
    tensors = make_tensors(tensor_shapes(spec, fc_norm=fc_norm, skipped=skipped), dtype=dtype, seed=seed)
    if defect is not None:
        DEFECTS[defect].apply(config, tensors)
    _write(out, FABRICATORS["k3_dspark"], defect, config, tensors=_prefixed(tensors, prefix), shards=shards)
    return out


def write_sparse_draft(out: Path, *, scale: str = "k3", fc_norm: bool = True, dtype: str = "BF16") -> Path:
    """A full-size K3 draft whose payload is a hole: a real safetensors
    header (readable by the safetensors library) and a file of the right
    length. For header-only benchmarks; the payload reads as zeros."""
    spec = SCALES[scale]
    specs = {name: (shape, dtype) for name, shape in tensor_shapes(spec, fc_norm=fc_norm).items()}
    _write(out, FABRICATORS["k3_dspark"], None, draft_config(spec, fc_norm=fc_norm),
           header=_prefixed(specs, "model."))
    return out


# --------------------------------------------------------------------------
# The command


def main(argv: list[str] | None = None) -> None:
    # the docstring's first paragraph, not its first line (a sentence wraps)
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("out", type=Path, nargs="?", help="the draft folder to write")
    parser.add_argument("--family", choices=list(FABRICATORS), help="draft family (default: k3_dspark)")
    parser.add_argument("--scale", choices=["tiny", "full", "k3"], default="tiny",
                        help="tiny, or full: the family's real size (k3: K3 DSpark's full size)")
    parser.add_argument("--defect", metavar="NAME", help="a defect of the family (see --list-defects)")
    parser.add_argument("--list-defects", action="store_true",
                        help="print family, defect, expected finding code and description, and exit")
    parser.add_argument("--variant", choices=VARIANTS + DFLASH2_VARIANTS,
                        help="dflash_gqa: dflash (default) or dspark (Markov head); dflash2: gqa (default) or mla")
    parser.add_argument("--fc-norm", dest="fc_norm", action=argparse.BooleanOptionalAction, default=None,
                        help="ship fc_norm (k3_dspark: on by default; eagle3_*: off)")
    parser.add_argument("--norm-before-fc", action="store_const", const=True, default=None,
                        help="eagle3_llama, eagle3_qwen3: declare norm_before_fc and ship input_norm")
    parser.add_argument("--stream", help="k3_dspark: aux_hidden_stream (default prefix)")
    parser.add_argument("--engine", metavar="NAME[@REV]",
                        help="write the layout this engine loads as it is: its names (vllm: no model. prefix) and, "
                        "eagle3_*, the tap list where it reads it (sglang: eagle_config)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--sparse", action="store_true", help="header only; payload left as a hole")
    parser.add_argument("--target-config", type=Path, metavar="FILE",
                        help="also write the target's config.json here, for check --target")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    family = args.family or "k3_dspark"
    # Exit 2 with a message, never a traceback, like dspark itself.
    if args.list_defects:
        _print_defects(defect_table(args.family))
        return
    if args.out is None:
        parser.exit(2, "error: the draft folder to write (OUT) is missing.\n")
    if args.shards < 1:
        parser.exit(2, f"error: --shards {args.shards}: a draft is written in at least one file.\n")
    if args.target_config is not None and args.target_config.is_dir():
        # checked before the draft is written, so that a refusal writes nothing
        parser.exit(2, f"error: --target-config {args.target_config} is a folder; name the file to write, "
                       f"e.g. {args.target_config / 'config.json'}.\n")
    options = {"fc_norm": args.fc_norm, "stream": args.stream, "variant": args.variant,
               "norm_before_fc": args.norm_before_fc, "engine": args.engine}
    try:
        plan_draft(family, args.scale, args.defect, **options)
    except FabricateError as error:
        parser.exit(2, f"error: {error}\n")
    if (not args.sparse or args.defect) and not _torch_available():
        why = "a defect on a sparse draft is applied to torch tensors" if args.sparse else "writing weights needs PyTorch"
        parser.exit(2, f"error: {why}, which is not installed (the core install has no torch).\n"
                       "hint: Install the extra: pip install 'dspark[torch]'; or pass --sparse for a header-only "
                       "draft whose payload reads as zeros.\n")
    try:
        fabricate(args.out, family=family, scale=args.scale, defect=args.defect, sparse=args.sparse,
                  dtype=args.dtype, shards=args.shards, seed=args.seed, **options)
        if args.target_config is not None:
            args.target_config.parent.mkdir(parents=True, exist_ok=True)
            args.target_config.write_text(json.dumps(target_config(family, args.scale), indent=2) + "\n")
    except FabricateError as error:
        parser.exit(2, f"error: {error}\n")
    except UsageError as error:  # an engine dspark does not model
        parser.exit(2, f"error: {error.message}\n")
    except OSError as error:
        parser.exit(2, f"error: {error.filename or args.out}: {error.strerror or error}\n")
    print(args.out)


def _print_defects(rows: list[tuple[str, str, str, str]]) -> None:
    header = ("family", "defect", "code", "description")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        sys.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3] + "\n")


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401 - tensors are made with torch and written by safetensors.torch
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
