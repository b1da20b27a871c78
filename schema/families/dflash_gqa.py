"""GQA DFlash / DSpark drafts: fc, hidden_norm, norm and q/k/v/o projections.

Shapes are those TokenSpeed's `DFlashDraftModel` and `DSparkDraftModel`
build (python/tokenspeed/runtime/models/dflash.py@f4d8ec6e:60-125, 239-296,
378-395; models/dspark.py@f4d8ec6e:75-128): `fc` takes taps x the draft's
own hidden_size (target_hidden_size is never read), there is no fc_norm,
and a DSpark draft adds a Markov head.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.families.base import (
    DECODER_MLP_AND_NORMS,
    SHARED_DIMS,
    DraftFamily,
    TensorRule,
    head_dim_or_split,
    is_int,
    nested_field,
)
from dspark.schema.findings import Finding


def gqa_taps(config: Mapping[str, Any]) -> tuple[Any, str | None]:
    """`dflash_config.target_layer_ids` when non-empty, else the top level;
    no default (models/dflash.py@f4d8ec6e:382-385)."""
    ids, path = nested_field(config, "target_layer_ids")
    return (ids, path) if ids else (None, None)


def _tap_count(config: Mapping[str, Any]) -> Any:
    ids, _ = gqa_taps(config)
    return len(ids) if isinstance(ids, list) else 0


def gqa_head_dim(config: Mapping[str, Any]) -> Any:
    """`head_dim` when present; else the config class's default: 128 for
    TokenSpeed's Qwen3Config (configs/qwen3_config.py@f4d8ec6e:173-197),
    hidden_size // heads otherwise (models/dflash.py@f4d8ec6e:78-80)."""
    if "head_dim" not in config and config.get("model_type") == "qwen3":
        return 128
    return head_dim_or_split(config)


# DSparkDraftModel's Markov head (models/dspark.py@f4d8ec6e:75-85, 110-120):
# each field from dspark_config when that dict holds the key, else the top
# level; `int(rank or 0)` and `str(type or "vanilla").lower()`; rank <= 0 or a
# type other than these is refused. dflash_config is not read.
SUPPORTED_MARKOV_HEAD_TYPES = ("vanilla",)
_MAX_MARKOV_RANK = 262144  # the schema's bound on widths


def _markov_field(config: Mapping[str, Any], key: str) -> tuple[Any, str]:
    nested = config.get("dspark_config") or {}
    if isinstance(nested, Mapping) and key in nested:
        return nested[key], f"dspark_config.{key}"
    return config.get(key), key


def _engine_int(value: Any) -> int | None:
    """`int(value)` as Python computes it, or None where it raises."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _markov_rank(config: Mapping[str, Any]) -> Any:
    """The rank the engine builds the Markov head with (None when its
    `int()` raises)."""
    raw, _ = _markov_field(config, "markov_rank")
    return _engine_int(raw or 0)


def _derived(config: Mapping[str, Any], architecture: str | None) -> dict[str, bool]:
    markov = architecture == "DSparkDraftModel" or (architecture is None and is_dspark_variant(config))
    head_type = str(_markov_field(config, "markov_head_type")[0] or "vanilla").lower()
    return {
        "markov_head": markov,
        # A gated or RNN Markov head adds its own projection
        # (sglang/srt/models/dspark.py:310-345@sglang==0.5.23).
        "markov_gated": markov and head_type == "gated",
        "markov_rnn": markov and head_type == "rnn",
        "attention_bias": bool(config.get("attention_bias", False)),
    }


def is_dspark_variant(config: Mapping[str, Any]) -> bool:
    """A DSpark draft of this family (its first architecture), not a DFlash one."""
    architectures = config.get("architectures")
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    return isinstance(first, str) and (first == "DSparkDraftModel" or first.startswith("Qwen3DSparkModel"))


def sliding_layers(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Sliding-attention layers need config.sliding_window
    (models/dflash.py@f4d8ec6e:542-592)."""
    layer_types = config.get("layer_types")
    layers = config.get("num_hidden_layers")
    if isinstance(layer_types, list) and isinstance(layers, int) and len(layer_types) != layers:
        # transformers' config validation refuses it before the model is built
        # (the pinned transformers 5.12, python/pyproject.toml@f4d8ec6e:83;
        # transformers 5.12.0 configuration_utils.py:475-486).
        return [Finding(
            "CFG003",
            f"{config_file}: layer_types lists {len(layer_types)} layers but num_hidden_layers is {layers}; "
            "the engine's config loader refuses the draft. List one type per layer.",
            file=config_file,
            detail={"field": "layer_types", "validator": "engine"},
        )]
    if isinstance(layer_types, list) and "chunked_attention" in layer_types:
        # The schema admits the type transformers knows; the engine builds
        # full and sliding layers only and raises ValueError on any other
        # (models/dflash.py@f4d8ec6e:572-592).
        return [Finding(
            "CFG003",
            f"{config_file}: layer_types holds chunked_attention; the engine builds full_attention and "
            "sliding_attention layers only and raises ValueError at build (models/dflash.py@f4d8ec6e:572-592). "
            "Serve it on an engine that builds chunked layers, or retrain with the two types.",
            file=config_file,
            detail={"field": "layer_types", "validator": "engine"},
        )]
    nested = config.get("dflash_config")
    served, inner = served_sliding_window(config), nested.get("swa_window_size") if isinstance(nested, Mapping) else None
    if (isinstance(layer_types, list) and "sliding_attention" in layer_types and isinstance(nested, Mapping)
            and nested.get("use_swa") and served is not None and inner is not None and served != inner):
        return [Finding(
            "OVR001",
            f"{config_file}: dflash_config.swa_window_size = {inner!r} (use_swa) but the engine serves a window "
            f"of {served!r} (sliding_window {config.get('sliding_window', 'absent')!r}, use_sliding_window "
            f"{config.get('use_sliding_window')!r}; a Qwen config's default is {_QWEN_DEFAULT_WINDOW}): it takes "
            "dflash_config's window only when it finds none (utils/hf_transformers_utils.py@f4d8ec6e:234-254). "
            "Which one the draft was trained with cannot be told here, and other engines refuse the pair. Write "
            "the same window at the top level.",
            file=config_file,
            detail={"field": "sliding_window", "nested": inner, "served": served},
        )]
    if isinstance(layer_types, list) and "sliding_attention" in layer_types and not served_sliding_window(config):
        return [Finding(
            "SWA001",
            f"{config_file}: layer_types has sliding_attention layers but the engine's config loader finds no "
            f"window (sliding_window is {config.get('sliding_window')!r}, use_sliding_window "
            f"{config.get('use_sliding_window')!r}; dflash_config.use_swa / swa_window_size not set); the "
            "engine refuses the draft. Set the window the draft was trained with.",
            file=config_file,
            detail={"field": "sliding_window"},
        )]
    return []


# model_type -> the engine's config class nulls sliding_window unless
# use_sliding_window (configs/qwen3_config.py@f4d8ec6e:204-205,
# configs/qwen2_config.py@f4d8ec6e:85-86).
_WINDOW_NEEDS_FLAG = ("qwen2", "qwen3")
_QWEN_DEFAULT_WINDOW = 4096


def served_sliding_window(config: Mapping[str, Any]) -> Any:
    """config.sliding_window as the engine's config loader leaves it: the
    Qwen config classes drop it unless use_sliding_window; then, for a
    draft with a dflash_config object, the loader restores the top-level
    value, else dflash_config.swa_window_size when dflash_config.use_swa
    (utils/hf_transformers_utils.py@f4d8ec6e:234-254, called at 355)."""
    window = config.get("sliding_window")
    if config.get("model_type") in _WINDOW_NEEDS_FLAG:
        # ...whose default window is 4096 (configs/qwen3_config.py@f4d8ec6e:192,
        # configs/qwen2_config.py@f4d8ec6e:74)
        window = config.get("sliding_window", _QWEN_DEFAULT_WINDOW) if config.get("use_sliding_window") else None
    nested = config.get("dflash_config")
    if window is None and isinstance(nested, Mapping):
        window = config.get("sliding_window")
        if window is None and nested.get("use_swa"):
            window = nested.get("swa_window_size")
    return window


def markov_head(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """A DSpark draft's Markov head as the engine reads it: refused where the
    engine refuses (CFG003), a warning where it loads only by coercing
    (ENG003). A DFlash draft has no Markov head and these fields are unread."""
    if not is_dspark_variant(config):
        return []
    raw_rank, rank_path = _markov_field(config, "markov_rank")
    raw_type, type_path = _markov_field(config, "markov_head_type")
    rank = _engine_int(raw_rank or 0)
    head_type = str(raw_type or "vanilla").lower()
    problems = []
    if rank is None:
        problems.append(f"{rank_path} = {raw_rank!r} is not a number the engine's int() reads")
    elif rank <= 0:
        nested = config.get("dflash_config")
        unread = (" (dflash_config.markov_rank is not read)"
                  if isinstance(nested, Mapping) and "markov_rank" in nested else "")
        problems.append(f"markov_rank is {rank} as the engine reads it{unread}; it must be > 0 "
                        "at the top level or in dspark_config")
    elif rank > _MAX_MARKOV_RANK:
        problems.append(f"{rank_path} = {rank} is past {_MAX_MARKOV_RANK}, dspark's bound on any width "
                        "(the engine would try to build it)")
    if head_type not in SUPPORTED_MARKOV_HEAD_TYPES:
        problems.append(f"{type_path} = {raw_type!r} is read as {head_type!r}; the engine supports "
                        f"{', '.join(SUPPORTED_MARKOV_HEAD_TYPES)}")
    if problems:
        return [Finding(
            "CFG003",
            f"{config_file}: the DSpark Markov head: " + "; ".join(problems) + ". The engine refuses the draft "
            "(models/dspark.py@f4d8ec6e:110-120). Set markov_rank and markov_head_type to what it was trained with.",
            file=config_file,
            detail={"field": "markov_rank" if rank is None or rank <= 0 or rank > _MAX_MARKOV_RANK
                    else "markov_head_type", "validator": "engine"},
        )]
    coerced = []
    if not is_int(raw_rank):
        coerced.append(f"{rank_path} = {raw_rank!r} is read as int({raw_rank!r}) = {rank}")
    if raw_type is not None and raw_type != head_type:
        coerced.append(f"{type_path} = {raw_type!r} is read as {head_type!r}")
    if not coerced:
        return []
    return [Finding(
        "ENG003",
        f"{config_file}: the engine loads this config only by coercing values: " + "; ".join(coerced)
        + ". Write the values the engine uses, so other loaders agree.",
        file=config_file,
        detail={"notes": coerced, "defaults_filled": []},
    )]


DFLASH_GQA = DraftFamily(
    name="dflash_gqa",
    description="GQA DFlash / DSpark draft (fc, hidden_norm, norm; q/k/v/o projections)",
    model_types=("dflash", "dspark", "dflash_draft"),
    architectures=("DFlashDraftModel", "DSparkDraftModel"),
    # speculators' and vLLM's name for the dense DSpark draft (speculators/algos.py:175-186@vllm==0.33.0).
    legacy_architectures=("Qwen3DSparkModel",),
    schema_file="dflash_gqa.schema.json",
    # "tw": TokenSpeed builds fc for hidden_size per tap whatever target_hidden_size says
    # (an engine that builds it otherwise overrides "tw" in its loader's dims).
    dims={**SHARED_DIMS, "S": _tap_count, "hd": gqa_head_dim, "markov": _markov_rank, "tw": "hidden_size"},
    tensors=(
        # tw: the width of each tap fc is built for (TokenSpeed: hidden_size).
        TensorRule("fc.weight", ("h", "S*tw"), role="context_proj"),
        TensorRule("hidden_norm.weight", ("h",), role="context_norm"),
        TensorRule("norm.weight", ("h",), role="norm"),
        # Not a parameter of the engine's model: listed so that shipped
        # fc_norm weights are recognised and refused by name.
        TensorRule("fc_norm.{i}.weight", ("h",), role="fc_norm", when="fc_norm"),
        TensorRule("markov_head.markov_w1.weight", ("vocab", "markov"), when="markov_head"),
        TensorRule("markov_head.markov_w2.weight", ("vocab", "markov"), when="markov_head"),
        TensorRule("markov_head.gate_proj.weight", ("markov", "h+markov"), when="markov_gated"),
        TensorRule("markov_head.gate_proj.bias", ("markov",), when="markov_gated"),
        TensorRule("markov_head.joint_proj.weight", ("3*markov", "2*markov+h"), when="markov_rnn"),
        TensorRule("markov_head.joint_proj.bias", ("3*markov",), when="markov_rnn"),
        *DECODER_MLP_AND_NORMS,
        TensorRule("layers.{n}.self_attn.q_proj.weight", ("nh*hd", "h")),
        TensorRule("layers.{n}.self_attn.k_proj.weight", ("nkv*hd", "h")),
        TensorRule("layers.{n}.self_attn.v_proj.weight", ("nkv*hd", "h")),
        TensorRule("layers.{n}.self_attn.o_proj.weight", ("h", "nh*hd")),
        TensorRule("layers.{n}.self_attn.q_proj.bias", ("nh*hd",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.k_proj.bias", ("nkv*hd",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.v_proj.bias", ("nkv*hd",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.o_proj.bias", ("h",), when="attention_bias"),
        TensorRule("layers.{n}.self_attn.q_norm.weight", ("hd",), role="norm"),
        TensorRule("layers.{n}.self_attn.k_norm.weight", ("hd",), role="norm"),
    ),
    # TorchSpec's training module names the same parts like the K3 draft
    # (TorchSpec torchspec/models/draft/dflash.py@6f21829); convert renames them.
    renames={"context_proj.": "fc.", "context_norm.": "hidden_norm.", "final_norm.": "norm.",
             # ...and a native DFlash export names them under `encoder.`
             # (SGLang aliases them: sglang/srt/models/dflash.py:899-903@sglang==0.5.23).
             "encoder.fc.": "fc.", "encoder.output_norm_enc.": "hidden_norm."},
    tap_ids=gqa_taps,
    tap_count_field=None,
    target_width_field="hidden_size",
    declared_features=("fc_norm",),
    derived_features=_derived,
)
