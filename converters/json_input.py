"""Strict JSON for every JSON document dspark reads from its input.

Python's `json` module accepts more than JSON: `NaN`, `Infinity` and
`-Infinity` literals (what `json.dumps(float("nan"))` writes), numbers that
overflow to infinity (`1e999`), and a key given twice (the last one wins,
silently). A config with `rms_norm_eps: NaN` would pass every `> 0` rule
(comparisons with NaN are false) and be copied into a converted checkpoint,
and a header naming a tensor twice would hide one of them. So every reader
(config.json, `--target`, safetensors headers, shard indexes, manifests)
parses through `loads_strict`, which refuses all of these and says where.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class JsonInputError(ValueError):
    """Input that is not strict JSON. `reason` is machine-readable:
    `too_large`, `not_utf8`, `not_json`, `duplicate_key`, `nonfinite`,
    `not_object`.
    `field` is the dotted path of the offending value or key, when known."""

    def __init__(self, message: str, *, reason: str, field: str | None = None, literal: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field
        self.literal = literal


class _NonFinite:
    """Stands in for a NaN/Infinity value while parsing, so that the
    finished document can say which field held it."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _path_text(parts: list[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(top level)"


def _find_nonfinite(document: Any) -> tuple[str, str] | None:
    """(dotted path, literal) of the first non-finite value, depth first."""
    stack: list[tuple[Any, list[str | int]]] = [(document, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _NonFinite):
            return _path_text(path), value.literal
        if isinstance(value, dict):
            stack.extend((item, path + [key]) for key, item in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((item, path + [index]) for index, item in reversed(list(enumerate(value))))
    return None


# Python's own bound on converting a decimal string to an int (the default
# of sys.get_int_max_str_digits()); no config value comes near it.
MAX_INTEGER_DIGITS = 4300


def loads_strict(text: str) -> Any:
    """Parse strict JSON (RFC 8259): no NaN/Infinity, no number that
    overflows a double, no duplicate keys. Raises `JsonInputError`."""
    seen_nonfinite = False

    def nonfinite(literal: str) -> _NonFinite:
        nonlocal seen_nonfinite
        seen_nonfinite = True
        return _NonFinite(literal)

    def number(literal: str) -> Any:
        value = float(literal)
        return value if math.isfinite(value) else nonfinite(literal)

    def integer(literal: str) -> int:
        digits = len(literal.lstrip("-"))
        if digits > MAX_INTEGER_DIGITS:
            # Python's own message ends "use sys.set_int_max_str_digits()",
            # advice for a programmer, not for someone fixing a config file.
            raise JsonInputError(f"invalid JSON: an integer of {digits:,} digits, longer than any value a "
                                 f"config holds (at most {MAX_INTEGER_DIGITS:,} are read)", reason="not_json")
        return int(literal)

    try:
        document = json.loads(
            text, object_pairs_hook=_object_without_duplicates, parse_constant=nonfinite, parse_float=number,
            parse_int=integer,
        )
    except JsonInputError:
        raise
    except _DuplicateKey as duplicate:
        raise JsonInputError(
            f"key {duplicate.key!r} appears twice", reason="duplicate_key", field=duplicate.key
        ) from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", reason="not_json"
        ) from None
    except RecursionError:
        raise JsonInputError("invalid JSON: nested too deeply", reason="not_json") from None
    except ValueError as exc:  # an integer literal longer than Python converts
        raise JsonInputError(f"invalid JSON: {exc}", reason="not_json") from None
    if seen_nonfinite:
        field, literal = _find_nonfinite(document)
        raise JsonInputError(
            f"{field} is {literal}, which is not a JSON number (JSON has no NaN or Infinity)",
            reason="nonfinite",
            field=field,
            literal=literal,
        )
    return document


# The most JSON read from one file, like a safetensors header's limit: an
# index or manifest of a very large model is a few MB; a config a few KB.
MAX_JSON_BYTES = 100 * 1024 * 1024


def parse_json_object(path: Path, *, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """Read a file that must hold one strict JSON object, of at most
    `max_bytes`. Raises `JsonInputError` (a ValueError) with the reason, or
    OSError."""
    size = path.stat().st_size
    if size > max_bytes:
        raise JsonInputError(
            f"{size:,} bytes, more than the {max_bytes:,} a file of this kind can need", reason="too_large"
        )
    return parse_json_object_bytes(path.read_bytes())


def parse_json_object_bytes(data: bytes) -> dict[str, Any]:
    """A JSON object from bytes already read (a local file, bounded by
    `parse_json_object`; a remote one, bounded by its caller)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonInputError(f"not UTF-8 ({exc.reason})", reason="not_utf8") from None
    value = loads_strict(text)
    if not isinstance(value, dict):
        raise JsonInputError(f"top level is {_json_kind(value)}, not an object", reason="not_object")
    return value


def read_json_object_from(source, name: str, *, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """One JSON object file of a remote `Source` (converters/sources), read
    whole by range, at most `max_bytes`. Raises `JsonInputError` or OSError."""
    size = source.stat(name)
    if size is None:
        raise FileNotFoundError(f"no {name} in {source.url}")
    if size > max_bytes:
        raise JsonInputError(
            f"{size:,} bytes, more than the {max_bytes:,} a file of this kind can need", reason="too_large"
        )
    return parse_json_object_bytes(source.read_range(name, 0, size))


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's own words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "a JSON value of another kind"
