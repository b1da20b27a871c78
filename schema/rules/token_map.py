"""The `d2t` table itself (EAGLE-3): its dtype, its length, and the
entries the draft's head can produce, as each engine serves them.

The engine adds `d2t[i]` to draft token `i` to get a target token (`hot =
d2t + arange`) and never validates the table; vLLM first copies it into an
int64 parameter, truncating a float entry toward zero. Which head is
served, and whether a table is needed at all, is the vocabulary rules'
(`vocab.py`); the values are handed over by the caller (`TokenMapValues`:
this floor opens no file).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from dspark.schema.engines import FamilyLoader
from dspark.schema.families import DraftFamily, ExpectedTensor
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry
from dspark.schema.rules.common import is_int, shape_text

_INTEGER_DTYPES = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")
# Float dtypes a loader with an integer d2t buffer (`VocabHandling.d2t_buffer`)
# copies into it, and the vocabulary up to which every offset d2t[i] a table
# may need (|d2t[i]| < vocab) is one of their integers: 2^24 for F32, 2^53
# for F64, 2^11 for F16 and 2^8 for BF16. Past it a table written as that
# dtype may hold offsets rounded when it was stored, which no reader can
# tell from the trained ones: F16/BF16 with any real vocabulary (32,000 and
# up) stay VOC002 on every engine.
_EXACT_FLOATS = {"F32": 2 ** 24, "F64": 2 ** 53, "F16": 2 ** 11, "BF16": 2 ** 8}
# How a finding names the loader's integer buffer.
_BUFFER_NAMES = {"I64": "int64", "I32": "int32"}

# The token map's values, handed over by the caller (this floor opens no
# file): `values(count)` gives the first `count` entries of the shipped
# table (fewer when it is shorter; ints for an integer table, floats for a
# float one), or None when they cannot be read.
TokenMapValues = Callable[[int], "Sequence[int] | Sequence[float] | None"]

# vLLM's EAGLE-3 drafts copy d2t into a torch.long parameter with the
# default loader's `param.data.copy_` (vllm/model_executor/models/
# llama_eagle3.py:338-345, 424-429; deepseek_eagle3.py:307-314, 376-379;
# vllm/model_executor/model_loader/weight_utils.py:1529-1543@vllm==0.33.0):
# torch converts each float entry by truncating toward zero (3.7 -> 3,
# -3.7 -> -3), and a NaN or infinity to no defined integer.
INT_BUFFER_COPY_SOURCE = ("vllm/model_executor/models/llama_eagle3.py:338-345, 424-429; "
                          "vllm/model_executor/models/deepseek_eagle3.py:307-314, 376-379; "
                          "vllm/model_executor/model_loader/weight_utils.py:1529-1543@vllm==0.33.0")

# Which entries of d2t the engine ever reads: `hot_token_id = d2t + arange`
# is indexed by the argmax of the draft's head (models/llama_eagle3.py@
# f4d8ec6e:691-695; models/deepseek_v3.py@f4d8ec6e:2358-2362;
# execution/drafter/eagle.py@f4d8ec6e:162-164, 373-375, 447-448), whose
# logits are cut to the draft's vocab_size, never fewer than its rows
# (layers/logits_processor.py@f4d8ec6e:653): the first head-rows entries.
# Past them a table is never looked up, whatever it holds.
HOT_MAP_SOURCE = ("models/llama_eagle3.py@f4d8ec6e:691-695; models/deepseek_v3.py@f4d8ec6e:2358-2362; "
                  "execution/drafter/eagle.py@f4d8ec6e:162-164, 373-375, 447-448")


def _shown(value: float, dtype: str) -> str:
    """`value` as briefly as it reads back to the same `dtype` number (a
    float32 10.7 is 10.7, not 10.699999809265137)."""
    fmt = {"F32": "<f", "F16": "<e"}.get(dtype)
    if fmt is None or not _finite(value):
        return repr(value) if dtype != "BF16" else f"{value:.4g}"
    import struct

    stored = struct.pack(fmt, value)
    return next((text for text in (f"{value:.{digits}g}" for digits in range(1, 10))
                 if struct.pack(fmt, float(text)) == stored), repr(value))


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")


def _integral(value: float) -> bool:
    return _finite(value) and float(value).is_integer()


def served_offsets(token_map: TokenMapValues | None, loader: FamilyLoader | None, dtype: str | None,
                   vocab: Any) -> TokenMapValues | None:
    """The token map as the engine uses it, for the rules that judge where
    it sends the head's rows (TGT004, VOC003): an integer table as stored;
    a float table the loader copies into its integer buffer exactly
    (`_cast_exactly`) as the integers it becomes, when every entry asked
    for is one (VOC002 names the first that is not); None otherwise (a
    float table the engine adds to token ids as it is)."""
    if token_map is None or dtype is None or dtype in _INTEGER_DTYPES:
        return token_map
    if not _cast_exactly(loader, dtype, vocab):
        return None

    def values(count: int) -> Sequence[int] | None:
        stored = token_map(count)
        if stored is None or not all(_integral(value) for value in stored):
            return None
        return [int(value) for value in stored]

    return values


def served_token_map(token_map: TokenMapValues | None, family: DraftFamily, loader: FamilyLoader | None,
                     config: Mapping[str, Any], entries: Sequence[TensorEntry]) -> TokenMapValues | None:
    """`served_offsets` for the checkpoint's token map (the first entry
    served under the family's token-map name, as the inventory judges)."""
    names = {rule.name for rule in family.tensors if rule.role == "token_map"}
    entry = next((e for e in entries if e.served_name in names), None)
    return served_offsets(token_map, loader, entry.dtype if entry is not None else None, config.get("vocab_size"))


def hot_targets(values: Sequence[int] | None, rows: int) -> tuple[int, int] | None:
    """The least and greatest target id `i + d2t[i]` over the entries the
    head can index (i < rows); None when there are none or fewer than
    rows (a short table: VOC002)."""
    if values is None or rows <= 0 or len(values) < rows:
        return None
    low = high = int(values[0])
    for i in range(rows):
        target = int(values[i]) + i
        if target < low:
            low = target
        elif target > high:
            high = target
    return low, high


def _cast_exactly(loader: FamilyLoader | None, dtype: str, vocab: Any) -> bool:
    """Whether the loader copies a `dtype` d2t into its integer buffer and
    `dtype` holds every offset a `vocab`-token vocabulary needs (vLLM:
    `copy_` into int64). The entries must still be integers: the copy
    truncates a fraction (`_fractional_entries`)."""
    handling = loader.vocab if loader is not None else None
    return (handling is not None and handling.d2t_buffer in _INTEGER_DTYPES and dtype in _EXACT_FLOATS
            and is_int(vocab) and vocab <= _EXACT_FLOATS[dtype])


def _fractional_entries(entry: TensorEntry, rows: int, loader: FamilyLoader,
                        stored_token_map: TokenMapValues | None) -> list[Finding]:
    """VOC002 for a float d2t the engine copies into its integer buffer
    (INT_BUFFER_COPY_SOURCE) whose entries the head can produce (the first
    `rows`: HOT_MAP_SOURCE) are not all integers: the copy truncates each
    toward zero, so those draft tokens are served as other target tokens.
    The values are read for it (a few hundred KB, converters/token_map.py);
    a table that cannot be read here is a warning saying so."""
    values = stored_token_map(rows) if stored_token_map is not None else None
    buffer = loader.vocab.d2t_buffer if loader.vocab is not None else ""
    table = _BUFFER_NAMES.get(buffer, buffer)
    detail = {"dtype": entry.dtype, "buffer": buffer, "entries_read": rows, "source": INT_BUFFER_COPY_SOURCE}
    if values is None or len(values) < rows:
        return [Finding(
            "VOC002",
            f"{entry.file}: d2t is {entry.dtype}, which the engine copies into its {table} table truncating "
            f"each entry toward zero ({INT_BUFFER_COPY_SOURCE}), and its values could not be read here to "
            "tell whether they are all integers. Run with --deep, or export d2t as int64.",
            file=entry.file, tensor="d2t", detail={**detail, "d2t_read": False}, severity=Severity.WARNING,
        )]
    bad = [i for i in range(rows) if not _integral(values[i])]
    if not bad:
        return []
    first, value = bad[0], values[bad[0]]
    shown = _shown(value, entry.dtype)
    served = (f"served as {int(value)}, target token {first + int(value)} instead of {first} + {shown}"
              if _finite(value) else "not a finite number, which the copy turns into no defined integer")
    return [Finding(
        "VOC002",
        f"{entry.file}: d2t is {entry.dtype} and entry {first} is {shown} ({served}); {len(bad)} of the {rows} "
        "entries the head can produce are not integers. The engine copies "
        f"the table into its {table} table, truncating each entry toward zero ({INT_BUFFER_COPY_SOURCE}), so "
        "those draft tokens are proposed as other target tokens, without a word. Export d2t as int64 "
        f"[{rows}] with the integer offsets the draft was trained with (target id = i + d2t[i]).",
        file=entry.file, tensor="d2t",
        detail={**detail, "d2t_read": True, "entry": first, "value": value if _finite(value) else shown,
                "served_as": int(value) if _finite(value) else None, "non_integer_entries": len(bad)},
    )]


def table_findings(table, loader, config, shipped, config_file,
                    stored_token_map: TokenMapValues | None = None) -> list[Finding]:
    entry = shipped.get(table.name)
    rows, vocab = table.shape[0], config.get("vocab_size")
    if entry is None:
        if is_int(vocab) and rows < vocab:
            return [Finding(
                "VOC001",
                f"the head has {rows} rows (draft_vocab_size) but the vocabulary {vocab}, and no d2t is "
                "shipped: the engine then reads draft token ids as target ids, so every proposal is a "
                "different token and acceptance collapses, without a word. Ship the d2t table the draft "
                "was trained with.",
                file=config_file,
                tensor=table.name,
                detail={"draft_vocab_size": rows, "vocab_size": vocab},
            )]
        return []
    problems = []
    buffer = loader.vocab.d2t_buffer if loader is not None and loader.vocab is not None else ""
    if entry.dtype in _EXACT_FLOATS and buffer and is_int(vocab) and vocab > _EXACT_FLOATS[entry.dtype]:
        problems.append(
            f"dtype {entry.dtype}, which holds every integer only up to {_EXACT_FLOATS[entry.dtype]}: the "
            f"offsets of a {vocab}-token vocabulary may have been rounded when the table was stored, and the "
            f"engine copies it into its {_BUFFER_NAMES.get(buffer, buffer)} table as it is")
    elif entry.dtype not in _INTEGER_DTYPES and not _cast_exactly(loader, entry.dtype, vocab):
        problems.append(f"dtype {entry.dtype}, not an integer type (the engine adds it to token ids as is)")
    # hot_token_id = d2t + arange(len(d2t)) is indexed only by the head's
    # argmax (models/llama_eagle3.py@f4d8ec6e:691-695; models/deepseek_v3.py@
    # f4d8ec6e:2358-2362): entries past the head's rows are never read.
    longer = len(entry.shape) == 1 and entry.shape[0] > rows
    if entry.shape != (rows,) and not longer:
        problems.append(
            f"shape {shape_text(entry.shape)}, not {shape_text((rows,))} (one entry per head row; a shorter "
            "table indexes out of bounds at the first request)"
        )
    findings = []
    if not problems and entry.dtype not in _INTEGER_DTYPES:
        # A float table the loader copies into its integer buffer: served
        # as trained only when the entries the head can produce are integers.
        findings += _fractional_entries(entry, rows, loader, stored_token_map)
    if problems:
        findings.append(Finding(
            "VOC002",
            f"{entry.file}: d2t has " + " and ".join(problems) + ". The engine never checks it. Export d2t as "
            f"int64 [{rows}] with target id = i + d2t[i].",
            file=entry.file,
            tensor=table.name,
            detail={"dtype": entry.dtype, "shape": list(entry.shape), "expected": [rows]},
        ))
    if longer:
        findings.append(Finding(
            "VOC002",
            f"{entry.file}: d2t has {entry.shape[0]} entries for a head of {rows} rows; the engine reads only "
            f"the first {rows}, so the rest are dead. Export d2t as int64 [{rows}] so other loaders agree.",
            file=entry.file,
            tensor=table.name,
            detail={"dtype": entry.dtype, "shape": list(entry.shape), "expected": [rows]},
            severity=Severity.WARNING,
        ))
    return findings


def table_value_findings(table: ExpectedTensor, loader: FamilyLoader | None, config: Mapping[str, Any],
                          shipped: Mapping[str, TensorEntry], token_map: TokenMapValues | None) -> list[Finding]:
    """VOC003 on the d2t entries the engine can look up (HOT_MAP_SOURCE),
    as it uses them (`served_offsets`: a float table it copies into an
    integer buffer too): a table that sends an unused entry past the
    vocabulary serves as trained."""
    entry = shipped.get(table.name)
    rows, below = table.shape[0], table.values_below
    served = served_offsets(token_map, loader, entry.dtype, config.get("vocab_size")) if entry is not None else None
    if served is None or below is None:
        return []
    span = hot_targets(served(rows), rows)
    if span is None or (span[0] >= 0 and span[1] < below):
        return []
    low, high = span
    return [Finding(
        "VOC003",
        f"{entry.file}: {table.name} sends the head's {rows} draft tokens to target ids from {low} to {high} "
        f"(i + {table.name}[i]), outside [0, vocab_size = {below}); the engine never checks it and feeds those "
        "ids to the embedding and the target. The table was built for another vocabulary or is not "
        "offset-encoded (target id = i + d2t[i]).",
        file=entry.file,
        tensor=table.name,
        detail={"min": low, "max": high, "vocab_size": below, "entries_read": rows, "source": HOT_MAP_SOURCE},
    )]
