"""Pre-fused tensors the engine's loader will not take, split back into
the parts it builds them from.

TokenSpeed's MLA EAGLE-3 loader fills `fused_qkv_a_proj_with_mqa` and
`gate_up_proj` only from their parts, and a pre-fused tensor under the
fused name fails the load or is dropped (`schema/engines/tokenspeed/`,
EAGLE3_MLA_LOADER `fused=`, `fused_accepted=False`). Its parts are rows of
the fused weight, in the order the loader stacks them:

* `q_a_proj` at row 0 and `kv_a_proj_with_mqa` at row `q_lora_rank`
  (python/tokenspeed/runtime/models/deepseek_v3.py@f4d8ec6e:1839-1861;
  `weight_loader(..., begin_size=...)` copies into rows [begin, begin + n),
  layers/linear.py@f4d8ec6e:264-278), of a parameter `q_lora_rank +
  kv_lora_rank + qk_rope_head_dim` rows high (deepseek_v3.py@f4d8ec6e:
  2014-2027);
* `gate_proj` as shard 0 and `up_proj` as shard 1
  (deepseek_v3.py@f4d8ec6e:1740-1744, 1798-1818), each `intermediate_size`
  rows (deepseek_v3.py@f4d8ec6e:180-189, 2029-2033), shard i at row
  `sum(output_sizes[:i])` (layers/linear.py@f4d8ec6e:591-592).

A fused parameter listed in `FamilyLoader.fused` names its parts in that
row order, so the split is read off the engine profile; loaders that take
a pre-fused tensor as it is (`fused_accepted`) are left alone. The heights
are the parts' rows as the family computes them from the config the
engine reads (its defaults filled in), the same numbers `dspark check`
judges the parts by.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from dspark.schema.engines.base import FamilyLoader, FusedParameter
from dspark.schema.errors import CheckpointError, UsageError
from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.records import record
from dspark.schema.rules.config import integer_fields
from dspark.schema.rules.inventory import fused_collision_findings
from dspark.schema.rules.values import engine_view


@record
class SplitPart:
    """One part written from rows [start, stop) of the fused tensor."""

    name: str
    start: int
    stop: int


@record
class FusedSplit:
    """A stored fused tensor and the parts convert writes from it."""

    source: TensorEntry
    fused: FusedParameter
    parts: tuple[SplitPart, ...]

    def note(self) -> Finding:
        """SRC006: what was split, so the summary says why the output has
        names the input did not."""
        described = ", ".join(f"{p.name} (rows {p.start}-{p.stop - 1})" for p in self.parts)
        return Finding(
            "SRC006",
            f"{self.source.file}: {printable_name(self.source.stored_name)} is pre-fused, which the engine's "
            f"loader does not take ({self.fused.when_pre_fused.split(':')[0]}); written as its parts in the "
            f"loader's row order: {described} ({self.fused.source.cite()}).",
            file=self.source.file,
            tensor=self.source.served_name,
            detail={"parts": [{"name": p.name, "rows": [p.start, p.stop]} for p in self.parts],
                    "source": self.fused.source.cite()},
        )


def plan_fused_splits(
    entries: list[TensorEntry], family: DraftFamily, loader: FamilyLoader | None, config: Mapping[str, Any]
) -> dict[str, FusedSplit]:
    """Stored name -> its split, for every stored tensor whose served name
    is a fused parameter the loader only builds from parts. Raises
    `UsageError` when the tensor's height is not the parts' heights the
    config gives (nothing can be split with certainty then)."""
    refused = {f.fused: f for f in (loader.fused if loader else ()) if not f.fused_accepted and "{n}" not in f.fused}
    if not refused:
        return {}
    splits: dict[str, FusedSplit] = {}
    view: Mapping[str, Any] | None = None
    for entry in entries:
        fused = refused.get(entry.served_name)
        if fused is None:
            continue
        if view is None:
            view, _ = engine_view(config, loader, integer_fields(family), "config.json")
        splits[entry.stored_name] = _split(entry, fused, family, view, config)
    return splits


def refuse_fused_beside_parts(
    entries: list[TensorEntry], family: DraftFamily, loader: FamilyLoader | None, config: Mapping[str, Any]
) -> None:
    """Raise `CheckpointError` (INV008) for a pre-fused tensor the loader
    takes shipped beside its parts: the engine serves whichever it reads
    last, and which of the two the draft was trained as cannot be told from
    the files, so convert writes neither rather than both."""
    if loader is None or not any(f.fused_accepted for f in loader.fused):
        return
    view, _ = engine_view(config, loader, integer_fields(family), "config.json")
    shipped: dict[str, TensorEntry] = {}
    for entry in entries:
        shipped.setdefault(entry.served_name, entry)
    collisions = fused_collision_findings(loader, family.resolve_dims(view, loader.dims), shipped)
    if not collisions:
        return
    first = collisions[0]
    listed = "; ".join(f.message.split(": it writes", 1)[0] for f in collisions[:5])
    more = f" (and {len(collisions) - 5} more)" if len(collisions) > 5 else ""
    raise CheckpointError(
        f"{listed}{more}: the engine would serve whichever it reads last, so convert writes neither. "
        "Nothing was written.",
        code="INV008",
        path=first.file,
        tensor=first.tensor,
        detail={"findings": [f.to_dict() for f in collisions]},
        hint="Remove either the parts or the pre-fused tensor from the input (the one the draft was not "
        "trained as); `dspark check` on the input says which one each engine would serve.",
    )


def _split(
    entry: TensorEntry, fused: FusedParameter, family: DraftFamily, view: Mapping[str, Any], config: Mapping[str, Any]
) -> FusedSplit:
    expected, _ = family.expected_tensors(family.resolve_dims(view))
    rules = {rule.name: rule for rule in family.tensors}
    heights: list[int | None] = [expected[p].shape[0] if p in expected else None for p in fused.parts]
    formulas = [_fields_of(rules[p].shape[0], family) if p in rules else "?" for p in fused.parts]
    fields = sorted({f for p in fused.parts if p in rules for f in _field_names(rules[p].shape[0], family)})
    read = ", ".join(f"{f} = {view.get(f)!r}" + ("" if f in config else " (absent: the engine's default)")
                     for f in fields)
    wanted = " + ".join(f"{p.rsplit('.', 2)[-2]} {h if h is not None else '?'} ({formula})"
                        for p, h, formula in zip(fused.parts, heights, formulas))
    height = entry.shape[0] if entry.shape else None
    if any(h is None for h in heights) or height != sum(heights) or len(entry.shape) < 2:
        total = sum(heights) if all(h is not None for h in heights) else "unknown"
        raise UsageError(
            f"{entry.file}: {printable_name(entry.stored_name)} is pre-fused and must be split into "
            f"{', '.join(fused.parts)} for the engine, but its shape {list(entry.shape)} does not match the "
            f"config: the parts are {wanted} rows, {total} in all, from {read}.",
            path=entry.file,
            tensor=entry.stored_name,
            hint="Pass --config with the config the draft was trained with, or fix "
            f"{', '.join(fields)} in it; convert wrote nothing.",
        )
    parts, start = [], 0
    for name, rows in zip(fused.parts, heights):
        parts.append(SplitPart(name, start, start + rows))
        start += rows
    return FusedSplit(entry, fused, tuple(parts))


# Compiled on first use (by `re`): only a fused tensor's message needs it.
_SYMBOL = r"[A-Za-z_]\w*"


def _field_names(expression: str, family: DraftFamily) -> list[str]:
    return [family.dims[s] for s in re.findall(_SYMBOL, expression) if isinstance(family.dims.get(s), str)]


def _fields_of(expression: str, family: DraftFamily) -> str:
    """`kv_lora+qk_rope` -> `kv_lora_rank + qk_rope_head_dim`."""
    named = re.sub(_SYMBOL, lambda m: family.dims[m.group()] if isinstance(family.dims.get(m.group()), str)
                        else m.group(), expression)
    return re.sub(r"\s*([+*-])\s*", r" \1 ", named)


def iter_rows(chunks: Iterator[memoryview], start: int, stop: int) -> Iterator[memoryview]:
    """Bytes [start, stop) of a tensor's chunk stream, as views of the
    chunks (no copy). The stream is closed once `stop` is reached, so a
    reader stops reading there."""
    offset = 0
    try:
        for chunk in chunks:
            end = offset + len(chunk)
            low, high = max(start - offset, 0), min(stop - offset, len(chunk))
            if high > low:
                yield chunk[low:high]
            offset = end
            if offset >= stop:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
