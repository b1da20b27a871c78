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
from dspark.schema.families import EAGLE3_LLAMA, DraftFamily, nested_field
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.rules import DEFAULT_STREAM, STREAMS, load_config_schema


class WrittenWeight(Protocol):
    """A tensor as it will be written: its served name, dtype and size."""

    name: str
    dtype: str

    @property
    def nbytes(self) -> int: ...


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
    engine = default_engine() if engine is None else engine
    out = copy.deepcopy(dict(config))
    changes: list[str] = []

    def put(key: str, value: Any, why: str) -> None:
        if out.get(key) != value or key not in out:
            before = repr(out[key]) if key in out else "absent"
            out[key] = value
            changes.append(f"{key}: {before} -> {value!r} ({why})")

    loader = engine.loader_for(family.name)
    parseable = loader.model_types if loader is not None else family.model_types
    if out.get("model_type") not in parseable:
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

    # The Llama EAGLE-3 draft counts only the top-level tap list while the
    # target reads eagle_config's first (eagle3_common.py): a list given only
    # under eagle_config (SpecForge's configs) is written at the top level too.
    nested_taps = out.get("eagle_config")
    if (family.name == EAGLE3_LLAMA.name and TAP_IDS_FIELD not in out and isinstance(nested_taps, dict)
            and isinstance(nested_taps.get(TAP_IDS_FIELD), list) and nested_taps[TAP_IDS_FIELD]):
        put(TAP_IDS_FIELD, list(nested_taps[TAP_IDS_FIELD]), "eagle_config's list, which the target captures")

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
    elif declared is None:
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
