"""The config `dspark convert` writes: the draft's own config, made explicit
where the serving engine would otherwise guess.

A pure function of the draft's config, its family and the tensors to be
written; it opens no file and imports nothing above `schema`.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Mapping, Protocol, Sequence

from dspark.schema.dtypes import TORCH_DTYPE_NAMES, is_floating
from dspark.schema.engines import EngineProfile, default_engine
from dspark.schema.families import DraftFamily, nested_field
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.rules import DEFAULT_STREAM, STREAMS, load_config_schema


class WrittenWeight(Protocol):
    """A tensor as it will be written: its served name, dtype and size."""

    name: str
    dtype: str

    @property
    def nbytes(self) -> int: ...


def _declared_eagle_list(config: Mapping[str, Any]) -> list | None:
    """The EAGLE-3 tap list the config spells out: eagle_config's, else the
    top level's (None when neither is a non-empty list)."""
    nested = config.get("eagle_config")
    for ids in ((nested or {}).get(TAP_IDS_FIELD) if isinstance(nested, dict) else None, config.get(TAP_IDS_FIELD)):
        if isinstance(ids, list) and ids:
            return list(ids)
    return None


def _write_list(out: dict[str, Any], path: str, ids: list, engine: str) -> list[str]:
    """Write `ids` at a dotted `path` (one section deep at most), making the
    section when absent; nothing when a section of another type is there."""
    section, _, key = path.rpartition(".")
    holder = out
    if section:
        if out.get(section) is None:
            out[section] = {}
        if not isinstance(out[section], dict):
            return []
        out[section] = holder = dict(out[section])
    holder[key] = list(ids)
    return [f"{path}: absent -> {ids!r} (where {engine} reads the tap list)"]


def place_eagle3_taps(config: dict[str, Any], family: DraftFamily, engine: EngineProfile) -> list[str]:
    """Write an EAGLE-3 tap list given in one place only where the engine's
    target and draft read it, when either would find none (in place), and
    say what was written: TokenSpeed's Llama draft counts only the
    top-level list (SpecForge writes eagle_config's), SGLang's target reads
    only eagle_config's (TorchSpec writes the top level's)."""
    loader = engine.loader_for(family.name)
    declared = _declared_eagle_list(config)
    changes: list[str] = []
    if loader is not None and loader.taps is not None and family.default_tap_count is not None and declared:
        for reading in (loader.taps.target, loader.taps.draft):
            if reading is not None and reading.read(config) == (None, None):
                changes += _write_list(config, reading.paths[0], declared, engine.spec)
    return changes


def _target_depth(config: dict[str, Any], loader: Any, engine: EngineProfile) -> list[str]:
    """A field the engine reads as the target's layer count that is below
    a tap id (TorchSpec writes num_target_layers as the number of taps,
    SGLang reads it as the target's depth and refuses the ids past it)
    becomes target_num_hidden_layers, or goes when that is unknown."""
    field = loader.target_depth_field if loader is not None else None
    ids = loader.taps.target_ids(config)[0] if loader is not None and loader.taps is not None else None
    if field is None or not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        return []
    changes = []
    for holder, path in ((config, field), (config.get("dflash_config"), f"dflash_config.{field}")):
        if not isinstance(holder, dict) or not isinstance(holder.get(field), int) or holder[field] > max(ids):
            continue
        depth = config.get("target_num_hidden_layers")
        if isinstance(depth, int) and not isinstance(depth, bool) and depth > max(ids):
            changes.append(f"{path}: {holder[field]!r} -> {depth!r} (target_num_hidden_layers: {engine.spec} reads "
                           f"{field} as the target's layer count)")
            holder[field] = depth
        else:
            changes.append(f"{path}: {holder.pop(field)!r} -> absent ({engine.spec} reads it as the target's layer "
                           "count, which the config does not give)")
    return changes


def _dflash2_fields_nested(config: dict[str, Any], family: DraftFamily) -> list[str]:
    """A DFlash2 draft's fields written where every engine reads them:
    dflash_config. TokenSpeed's model reads each there first, then at the
    top level, and its drafter and KV-cache layout read dflash_config only
    (selector_top_k, output_multiplier, final_logit_softcapping; an exact
    "mla": models/dflash2.py::_dflash2_config_value@tokenspeed==0.1.1:50-52,
    execution/drafter/dflash2.py:85-91, configs/model_config.py:354-366);
    vLLM reads dflash_config only (qwen3_dflash2.py@vllm==0.33.0:248-258,
    376-406). The value moved is the one TokenSpeed's model builds with."""
    if family.name != "dflash2":
        return []
    from dspark.schema.families.dflash2 import BUILD_FIELDS, SERVE_FIELDS, dflash2_value

    nested = config.get("dflash_config")
    if nested is not None and not isinstance(nested, dict):
        return []  # left for the check to judge
    nested = config.setdefault("dflash_config", {}) if nested is None else nested
    changes = []
    for key in (*BUILD_FIELDS, *SERVE_FIELDS, "block_size", "attention_mode"):
        value = dflash2_value(config, key)
        if key == "attention_mode" and isinstance(value, str):
            value = value.lower()  # the model lower-cases it; the cache layout compares it exactly
        if value is None or (key in nested and nested[key] == value):
            continue
        before = repr(nested[key]) if key in nested else "absent"
        nested[key] = value
        changes.append(f"dflash_config.{key}: {before} -> {value!r} (where every engine reads it)")
    return changes


def normalise_config(
    config: Mapping[str, Any],
    family: DraftFamily,
    tensors: Sequence[WrittenWeight],
    *,
    engine: EngineProfile | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The config as the server should read it: family identity, `fc_norm`
    and `aux_hidden_stream` explicit, `torch_dtype` true to the data.

    Nothing is inferred: `fc_norm` absent with fc_norm weights shipped stays
    absent (the check then fails, as it must); an invalid stream is left
    for the check to report.
    """
    out = copy.deepcopy(dict(config))
    changes: list[str] = []

    def put(key: str, value: Any, why: str) -> None:
        if out.get(key) != value or key not in out:
            before = repr(out[key]) if key in out else "absent"
            out[key] = value
            changes.append(f"{key}: {before} -> {value!r} ({why})")

    engine = engine if engine is not None else default_engine()
    loader = engine.loader_for(family.name)
    parseable = loader.model_types if loader is not None else family.model_types
    # (none: the engine serves no such family, and the check says so, ENG006)
    generic = loader.generic_model_types if loader is not None else ()
    if parseable and (out.get("model_type") not in parseable or out.get("model_type") in generic):
        # Pin what the new config class would otherwise default (TokenSpeed's
        # Qwen3Config assumes head_dim 128, configs/qwen3_config.py@f4d8ec6e:173-197).
        if family.dims.get("hd") is not None and "head_dim" not in out:
            head_dim = family.resolve_dims(out).get("hd")
            if head_dim is not None:
                put("head_dim", head_dim, "explicit, so the engine's config class does not default it")
        put("model_type", parseable[0], f"a model_type the engine's config loader parses for {family.name}")
    architectures = out.get("architectures")
    # The engine loads the first registered entry: the family's class goes first.
    first = next((a for a in architectures if a in family.architectures), None) if isinstance(architectures, list) else None
    if not isinstance(architectures, list) or not architectures or architectures[0] != first:
        put("architectures", [first or family.architectures[0]], f"the {family.name} family, first")

    changes += place_eagle3_taps(out, family, engine)
    changes += _target_depth(out, loader, engine)
    changes += _dflash2_fields_nested(out, family)

    if "fc_norm" not in out and not any(family.fc_norm_index(t.name) is not None for t in tensors):
        put("fc_norm", False, "no fc_norm weights shipped; absent means false")
    elif "fc_norm" in out and not isinstance(out["fc_norm"], bool):
        # The engine takes the flag's truth ("false" is true): written as
        # the boolean it serves, so every other loader reads the same
        # (configs/kimi_k3_dspark_config.py@4b9766f6:112; models/kimi_k3_dspark.py@4b9766f6:326).
        # (not `put`: 1 == True, and the point is the type)
        changes.append(f"fc_norm: {out['fc_norm']!r} -> {bool(out['fc_norm'])!r} "
                       f"(the engine reads bool({out['fc_norm']!r}))")
        out["fc_norm"] = bool(out["fc_norm"])

    declared, where = nested_field(out, "aux_hidden_stream")
    if "aux_hidden_stream" not in load_config_schema(family.schema_file).get("properties", {}):
        pass  # a family without a stream (EAGLE-3): nothing to make explicit
    elif declared is None and where is None:
        # absent everywhere: the engine's default, written out. A null the
        # config does write is left for the check to judge (STR001), so
        # convert never passes a declaration check refuses.
        put("aux_hidden_stream", DEFAULT_STREAM, "the default, made explicit")
    elif isinstance(declared, str) and declared.lower() in STREAMS:
        stream = declared.lower()
        put("aux_hidden_stream", stream, f"from {where}" if where != "aux_hidden_stream" else "normalised")
        nested = out.get("dflash_config")
        if isinstance(nested, dict) and nested.get("aux_hidden_stream") not in (None, stream):
            nested["aux_hidden_stream"] = stream
            changes.append(f"dflash_config.aux_hidden_stream: {declared!r} -> {stream!r} (normalised)")

    by_dtype: Counter[str] = Counter()
    for tensor in tensors:
        if is_floating(tensor.dtype):
            by_dtype[tensor.dtype] += tensor.nbytes
    if by_dtype:
        dominant = max(sorted(by_dtype), key=lambda d: by_dtype[d])
        name = TORCH_DTYPE_NAMES[dominant]
        put("torch_dtype", name, "the dtype of the weights written")
        if "dtype" in out:
            put("dtype", name, "the dtype of the weights written")
    return out, changes
