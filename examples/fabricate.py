"""Fabricate K3 DSpark draft checkpoints: good ones, and ones with a defect.

Used by the tests, the benchmarks and the bundled example. Tensors are made
with torch and written by the safetensors library; `--sparse` instead
writes a header and leaves the payload as a hole (right size on disk
listings, no bytes written) for header-only benchmarks at full K3 size.

    python -m dspark.examples.fabricate OUT [--scale tiny|k3] [--defect NAME]
        [--fc-norm/--no-fc-norm] [--shards N] [--dtype bfloat16] [--sparse]
"""

from __future__ import annotations

import argparse
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dspark.schema.dtypes import nbytes_of


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
        target_layer_ids=(1, 4, 7, 9, 11), markov_rank=12, confidence_hidden=8,
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


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight") or name.startswith("fc_norm.") or "layernorm" in name


def make_tensors(shapes: dict[str, tuple[int, ...]], *, dtype: str = "bfloat16", seed: int = 0):
    """Seeded tensors: norms near 1 (never exactly 1), matrices ~N(0, 0.02)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    tensors = {}
    for name, shape in shapes.items():
        values = torch.randn(shape, generator=generator, dtype=torch.float32)
        values = 1.0 + 0.05 * values if _is_norm(name) else 0.02 * values
        tensors[name] = values.to(torch_dtype).contiguous()
    return tensors


# --------------------------------------------------------------------------
# Defects: each turns a good (config, tensors) into a bad one. The code is
# the finding `dspark check` must report; `deep` marks payload defects.


@dataclass(frozen=True)
class Defect:
    code: str
    apply: Callable[[dict, dict], None]
    deep: bool = False
    description: str = ""


def _drop(prefix: str) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        for name in [n for n in tensors if n.startswith(prefix)]:
            del tensors[name]
    return apply


def _set(field: str, value: Any) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        config[field] = value
    return apply


def _unset(field: str) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        config.pop(field, None)
    return apply


def _mutate(name: str, change: Callable[[Any], Any]) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        tensors[name] = change(tensors[name])
    return apply


def _poke(name: str, value: float) -> Callable[[Any], Any]:
    def change(tensor):
        tensor = tensor.clone()
        tensor.view(-1)[tensor.numel() // 2] = value
        return tensor
    return change


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


def _extra_tensor(config: dict, tensors: dict) -> None:
    # A GQA projection in an MLA draft: the K3 loader has no destination for it.
    tensors["layers.0.self_attn.q_proj.weight"] = tensors["layers.0.self_attn.o_proj.weight"].clone()


def _duplicate(config: dict, tensors: dict) -> None:
    # A torch.compile wrapper name next to the plain one: both strip to
    # final_norm.weight. (A second "model."-prefixed copy would collide with
    # the plain name when written and vanish.)
    tensors["_orig_mod.final_norm.weight"] = tensors["final_norm.weight"].clone()


def _widen(tensor):
    import torch

    return torch.cat([tensor, tensor[:, :1]], dim=1).contiguous()


def _narrow(tensor):
    return tensor[:-1].contiguous()


def _fill(value: float) -> Callable[[Any], Any]:
    def change(tensor):
        return tensor.clone().fill_(value)
    return change


DEFECTS: dict[str, Defect] = {
    "no-config": Defect("CFG001", lambda c, t: c.clear(), description="config.json not written"),
    "config-not-object": Defect("CFG002", lambda c, t: None, description="config.json is a JSON list"),
    "mla-nope": Defect("CFG003", _set("mla_use_nope", True), description="mla_use_nope true"),
    "zero-markov-rank": Defect("CFG003", _set("markov_rank", 0), description="markov_rank 0"),
    "markov-head-type": Defect("CFG003", _set("markov_head_type", "gated"), description="unsupported Markov head"),
    "tap-count": Defect("CFG005", _set("num_target_layers", 4), description="5 taps, 4 declared"),
    "taps-unsorted": Defect("CFG006", _set("target_layer_ids", [1, 7, 4, 9, 11]), description="taps out of order"),
    "tap-out-of-range": Defect("CFG007", lambda c, t: c.update(target_layer_ids=c["target_layer_ids"][:-1] + [c["target_num_hidden_layers"]]), description="last tap beyond the target"),
    "no-mask-token": Defect("CFG008", _unset("mask_token_id"), description="mask_token_id missing"),
    "mask-token-range": Defect("CFG008", lambda c, t: c.update(mask_token_id=c["vocab_size"]), description="mask_token_id = vocab_size"),
    "draft-vocab": Defect("CFG009", lambda c, t: c.update(draft_vocab_size=c["vocab_size"] // 2), description="draft_vocab_size differs"),
    "config-nan": Defect("CFG010", _set("rms_norm_eps", math.nan), description="rms_norm_eps NaN (json.dump writes NaN, not JSON)"),
    "layers-beyond-bound": Defect("CFG003", _set("num_hidden_layers", 10**12), description="num_hidden_layers 10**12"),
    "fc-norm-declared-not-shipped": Defect("FCN001", _drop("fc_norm."), description="fc_norm: true, no weights"),
    "fc-norm-shipped-not-declared": Defect("FCN002", _undeclare_fc_norm, description="weights, no fc_norm field"),
    "fc-norm-shipped-declared-false": Defect("FCN002", _set("fc_norm", False), description="weights, fc_norm: false"),
    "fc-norm-count": Defect("FCN003", _drop("fc_norm.4."), description="4 of 5 fc_norm weights"),
    "fc-norm-extra-index": Defect("FCN003", lambda c, t: t.update({"fc_norm.5.weight": t["fc_norm.0.weight"].clone()}), description="fc_norm.5 for 5 taps"),
    "fc-norm-shape": Defect("FCN004", _mutate("fc_norm.2.weight", _narrow), description="fc_norm.2 one short"),
    "fc-norm-int": Defect("FCN005", _fc_norm_int, description="fc_norm.1 as int32"),
    "fc-norm-identity": Defect("FCN006", _mutate("fc_norm.3.weight", _fill(1.0)), deep=True, description="fc_norm.3 all ones"),
    "context-proj-width": Defect("CTX001", _mutate("context_proj.weight", _widen), description="one column too many"),
    "stream-invalid": Defect("STR001", _set("aux_hidden_stream", "residual"), description="unknown stream"),
    "stream-invalid-nested": Defect("STR001", lambda c, t: c.update(dflash_config={"aux_hidden_stream": "mixture"}), description="unknown stream in dflash_config"),
    "missing-layer": Defect("INV001", _drop("layers.1."), description="layer 1 dropped"),
    "unexpected-tensor": Defect("INV002", _extra_tensor, description="a q_proj the MLA draft has no destination for"),
    "wrong-shape": Defect("INV003", _mutate("layers.1.self_attn.o_proj.weight", _narrow), description="o_proj one row short"),
    "int-weight": Defect("INV004", _int_matrix, description="up_proj as int8"),
    "duplicate-name": Defect("INV006", _duplicate, description="final_norm with and without model."),
    "float32": Defect("INV007", _fp32, description="everything float32"),
    "nan": Defect("PAY001", _mutate("layers.0.mlp.down_proj.weight", _poke("x", math.nan)), deep=True, description="one NaN"),
    "inf": Defect("PAY001", _mutate("context_proj.weight", _poke("x", math.inf)), deep=True, description="one Inf"),
    "zero-norm": Defect("PAY002", _mutate("final_norm.weight", _fill(0.0)), deep=True, description="final_norm all zeros"),
    "zero-matrix": Defect("PAY004", _mutate("layers.1.mlp.gate_proj.weight", _fill(0.0)), deep=True, description="gate_proj all zeros"),
    "zero-context-proj": Defect("PAY004", _mutate("context_proj.weight", _fill(0.0)), deep=True, description="context_proj all zeros"),
}


# --------------------------------------------------------------------------
# Writing


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
    """Write a draft checkpoint folder and return it."""
    spec = SCALES[scale]
    config = draft_config(spec, fc_norm=fc_norm, stream=stream)
    tensors = make_tensors(tensor_shapes(spec, fc_norm=fc_norm, skipped=skipped), dtype=dtype, seed=seed)
    if defect is not None:
        DEFECTS[defect].apply(config, tensors)
    out.mkdir(parents=True, exist_ok=True)
    if defect == "config-not-object":
        (out / "config.json").write_text(json.dumps([config]))
    elif config:
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    named = {(n if n.startswith("model.") else prefix + n): t for n, t in tensors.items()}
    write_safetensors(out, named, shards=shards)
    return out


def write_safetensors(out: Path, tensors: dict, *, shards: int = 1) -> None:
    """Write tensors with the safetensors library: one model.safetensors, or
    `shards` files plus model.safetensors.index.json."""
    from safetensors.torch import save_file

    if shards <= 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    per_shard = math.ceil(len(names) / shards)
    weight_map = {}
    total = 0
    for index in range(shards):
        part = names[index * per_shard:(index + 1) * per_shard]
        shard_name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(out / shard_name), metadata={"format": "pt"})
        for name in part:
            weight_map[name] = shard_name
            total += tensors[name].numel() * tensors[name].element_size()
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")


def write_sparse_draft(out: Path, *, scale: str = "k3", fc_norm: bool = True, dtype: str = "BF16") -> Path:
    """A full-size draft whose payload is a hole: a real safetensors header
    (readable by the safetensors library) and a file of the right length.
    For header-only benchmarks; the payload reads as zeros."""
    spec = SCALES[scale]
    shapes = tensor_shapes(spec, fc_norm=fc_norm)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = nbytes_of(dtype, shape)
        header["model." + name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    out.mkdir(parents=True, exist_ok=True)
    config = draft_config(spec, fc_norm=fc_norm)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with open(out / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)
    return out


# --------------------------------------------------------------------------
# EAGLE-3 drafts (LlamaForCausalLMEagle3, Eagle3DeepseekV2ForCausalLM): one
# layer named `midlayer`, fc over the taps, the draft's own head and d2t.


@dataclass(frozen=True)
class Eagle3Spec:
    family: str  # "eagle3_llama" | "eagle3_mla"
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    vocab_size: int
    draft_vocab_size: int
    num_key_value_heads: int = 0  # Llama
    head_dim: int = 0  # Llama
    q_lora_rank: int = 0  # MLA
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    taps: int = 3


EAGLE3_SCALES: dict[str, Eagle3Spec] = {
    # Tiny, every dimension distinct so a swapped axis cannot pass.
    "tiny-llama": Eagle3Spec("eagle3_llama", hidden_size=32, intermediate_size=48, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=10, vocab_size=96, draft_vocab_size=40),
    "tiny-mla": Eagle3Spec("eagle3_mla", hidden_size=32, intermediate_size=48, num_attention_heads=2,
                           q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                           v_head_dim=6, vocab_size=96, draft_vocab_size=40),
    # Llama-3-8B target: fc 4096 x (3 x 4096), a 32k draft vocabulary.
    "llama3-8b": Eagle3Spec("eagle3_llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                            num_key_value_heads=8, head_dim=128, vocab_size=128256, draft_vocab_size=32000),
    # Kimi-K2.5 target, MLA draft: fc 7168 x (3 x 7168).
    "kimi-k25-mla": Eagle3Spec("eagle3_mla", hidden_size=7168, intermediate_size=18432, num_attention_heads=64,
                               q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                               v_head_dim=128, vocab_size=163840, draft_vocab_size=32000),
}


def eagle3_config(
    spec: Eagle3Spec, *, fc_norm: bool = False, norm_before_fc: bool = False, tap_ids: list[int] | None = None
) -> dict[str, Any]:
    """A config TokenSpeed parses for the family (TorchSpec's fields)."""
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
    if spec.family == "eagle3_llama":
        config.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                      num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                      rope_theta=500000.0, max_position_embeddings=8192)
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
    if fc_norm:
        config["fc_norm"] = True
    if norm_before_fc:
        config["norm_before_fc"] = True
    return config


def eagle3_tensor_specs(config: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Served name -> (shape, safetensors dtype) of every tensor a good draft
    of `config` ships, read off the family (bf16 weights, int64 d2t). A
    tensor whose dimensions the config does not give is left out."""
    from dspark.schema.families import family_for_config

    family = family_for_config(config)
    features = {name: bool(config.get(name)) for name in family.declared_features}
    features.update(family.derived_features(config, None))
    expected, _ = family.expected_tensors(family.resolve_dims(config), features)
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


def eagle3_tensors(config: dict[str, Any], *, seed: int = 0) -> dict:
    """Real tensors for `config`: seeded weights and a valid offset-encoded
    d2t (draft token i -> target token i + d2t[i])."""
    import torch

    specs = eagle3_tensor_specs(config)
    tensors = make_tensors({n: s for n, (s, d) in specs.items() if d == "BF16"}, dtype="bfloat16", seed=seed)
    if "d2t" in specs:
        rows, vocab = specs["d2t"][0][0], config["vocab_size"]
        used = torch.linspace(0, vocab - 1, rows).round().to(torch.int64).unique()
        assert used.numel() == rows, "draft vocabulary too large to spread over the target's"
        tensors["d2t"] = (used - torch.arange(rows, dtype=torch.int64)).contiguous()
    return tensors


def _widen_fc(config: dict, tensors: dict) -> None:
    tensors["fc.weight"] = _widen(tensors["fc.weight"])


def _d2t_float(config: dict, tensors: dict) -> None:
    import torch

    tensors["d2t"] = tensors["d2t"].to(torch.float32)


def _d2t_short(config: dict, tensors: dict) -> None:
    tensors["d2t"] = tensors["d2t"][:-1].contiguous()


def _d2t_past_vocab(config: dict, tensors: dict) -> None:
    tensors["d2t"] = tensors["d2t"].clone()
    tensors["d2t"][-1] += 1  # the last draft token now maps to vocab_size


def _input_norm(config: dict, tensors: dict) -> None:
    import torch

    width = tensors["fc.weight"].shape[1]
    tensors["input_norm.weight"] = torch.ones(width, dtype=torch.bfloat16)


def _two_layers(config: dict, tensors: dict) -> None:
    config["num_hidden_layers"] = 2


def _taps_top_level_ignored(config: dict, tensors: dict) -> None:
    # eagle_config without ids: the target reads only it and captures its
    # defaults, whatever the top level lists.
    config["eagle_aux_hidden_state_layer_ids"] = [2, 5, 9]
    config["eagle_config"] = {"use_aux_hidden_state": True}


def _four_taps_in_eagle_config(config: dict, tensors: dict) -> None:
    # The Llama draft counts the top level (absent: 3); the target captures 4.
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 7]}


def _fuse_qkv_a(config: dict, tensors: dict) -> None:
    import torch

    p = "midlayer.self_attn."
    tensors[p + "fused_qkv_a_proj_with_mqa.weight"] = torch.cat(
        [tensors.pop(p + "q_a_proj.weight"), tensors.pop(p + "kv_a_proj_with_mqa.weight")]).contiguous()


EAGLE3_DEFECTS: dict[str, Defect] = {
    "one-layer": Defect("CFG003", _two_layers, description="num_hidden_layers 2"),
    "fc-width": Defect("CTX001", _widen_fc, description="fc one column too many"),
    "no-d2t": Defect("VOC001", _drop("d2t"), description="draft_vocab_size < vocab_size, no d2t"),
    "d2t-float": Defect("VOC002", _d2t_float, description="d2t as float32"),
    "d2t-short": Defect("VOC002", _d2t_short, description="d2t one entry short"),
    "d2t-past-vocab": Defect("VOC003", _d2t_past_vocab, deep=True, description="last d2t entry past the vocab"),
    "no-lm-head": Defect("INV001", _drop("lm_head."), description="draft_vocab_size set, no lm_head"),
    "input-norm-undeclared": Defect("FEA002", _input_norm, description="input_norm shipped, norm_before_fc absent"),
    "norm-before-fc-no-weight": Defect("FEA001", _set("norm_before_fc", True), description="norm_before_fc, no input_norm"),
    "taps-ignored": Defect("TAP002", _taps_top_level_ignored, description="top-level taps the target ignores"),
    "taps-count": Defect("TAP001", _four_taps_in_eagle_config, description="draft 3 taps, target 4 (Llama)"),
    "fused-qkv-a": Defect("INV002", _fuse_qkv_a, description="pre-fused q/kv-a projection (MLA)"),
}


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
) -> Path:
    """Write an EAGLE-3 draft folder. `layout` "midlayer" writes TorchSpec's
    native names, "layers.0" its `--vllm` export's."""
    config = eagle3_config(EAGLE3_SCALES[scale], fc_norm=fc_norm, norm_before_fc=norm_before_fc, tap_ids=tap_ids)
    if config_edit:
        config_edit(config)
    tensors = eagle3_tensors(config, seed=seed)
    if defect is not None:
        EAGLE3_DEFECTS[defect].apply(config, tensors)
    if tensor_edit:
        tensor_edit(tensors)
    if layout == "layers.0":
        tensors = {("layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n): t
                   for n, t in tensors.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(out, tensors)
    return out


def write_header_only(out: Path, config: dict[str, Any], specs: dict[str, tuple[tuple[int, ...], str]],
                      *, prefix: str = "") -> Path:
    """A draft whose payload is a hole (see `write_sparse_draft`), for any
    config and tensor list: real-size header-only checks."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, dtype) in specs.items():
        size = nbytes_of(dtype, shape)
        header[prefix + name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with open(out / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", choices=sorted(SCALES), default="tiny")
    parser.add_argument("--defect", choices=sorted(DEFECTS))
    parser.add_argument("--no-fc-norm", dest="fc_norm", action="store_false")
    parser.add_argument("--stream", default="prefix")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--sparse", action="store_true", help="header only; payload left as a hole")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Exit 2 with a message, never a traceback, like dspark itself.
    if not args.sparse and not _torch_available():
        parser.exit(2, "error: writing weights needs PyTorch, which is not installed (the core install has no torch).\n"
                       "hint: Install the extra: pip install 'dspark[torch]'; or pass --sparse for a header-only "
                       "draft whose payload reads as zeros.\n")
    try:
        if args.sparse:
            write_sparse_draft(args.out, scale=args.scale, fc_norm=args.fc_norm)
        else:
            write_draft(
                args.out, scale=args.scale, fc_norm=args.fc_norm, stream=args.stream, defect=args.defect,
                dtype=args.dtype, shards=args.shards, seed=args.seed,
            )
    except OSError as error:
        parser.exit(2, f"error: {error.filename or args.out}: {error.strerror or error}\n")
    print(args.out)


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401 - tensors are made with torch and written by safetensors.torch
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
