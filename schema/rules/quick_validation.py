"""A config that is valid, proved without jsonschema.

Importing jsonschema costs about as much as typer (40 ms of a 130 ms
header-only check here, docs/check.md), and a draft's config is almost
always valid. `certainly_valid` walks the family's schema over the config
with the keywords the family schemas use, as jsonschema's Draft 2020-12
keywords do, with dspark's two changes (`schema/rules/config.py`): an
integer is a JSON integer (2.0 is not), and a list past its maxItems is
not looked into. It answers True only when it proves the config valid;
anything it does not model (a keyword, a `$ref` outside the schema, a
value it cannot compare exactly) makes it answer False, and then
jsonschema validates, as before, and says what is wrong.

So False does not mean invalid; True means jsonschema finds nothing.
tests/schema/test_quick_validation.py holds that against jsonschema on
every fabricated config and thousands of changed ones.
"""

from __future__ import annotations

import re
from typing import Any

# Keywords that only describe (jsonschema does not validate them).
_ANNOTATIONS = frozenset(("$schema", "$id", "$defs", "title", "description", "$comment", "examples", "default"))
_MODELLED = frozenset((
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
    "items", "properties", "required", "pattern", "anyOf", "allOf", "$ref",
))


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":  # a JSON integer only (config.py: range(2.0) raises in the engine)
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    return False  # not a JSON type: not proved


def _same(value: Any, expected: Any) -> bool:
    """Equal as JSON values and of the same Python type all the way down
    (1 and 1.0, or True and 1, are not proved equal here: jsonschema
    decides those)."""
    if type(value) is not type(expected):
        return False
    if isinstance(value, list):
        return len(value) == len(expected) and all(_same(a, b) for a, b in zip(value, expected))
    if isinstance(value, dict):
        return value.keys() == expected.keys() and all(_same(value[k], expected[k]) for k in value)
    return value == expected


def _resolve(reference: Any, root: dict[str, Any]) -> Any:
    """A `#/...` pointer into the schema itself, else None (not modelled)."""
    if not isinstance(reference, str) or not reference.startswith("#/"):
        return None
    node: Any = root
    for part in reference[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def certainly_valid(instance: Any, schema: Any, root: dict[str, Any] | None = None) -> bool:
    """True only when `instance` is valid against `schema` (see above)."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False  # False, or not a schema
    root = schema if root is None else root
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword not in _MODELLED or not _keyword_holds(keyword, value, instance, schema, root):
            return False
    return True


def _keyword_holds(keyword: str, value: Any, instance: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    number = _is_type(instance, "number")
    if keyword == "type":
        names = value if isinstance(value, list) else [value]
        return any(_is_type(instance, name) for name in names)
    if keyword == "enum":
        return isinstance(value, list) and any(_same(instance, each) for each in value)
    if keyword == "const":
        return _same(instance, value)
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if not _is_type(value, "number"):
            return False
        if not number:
            return True
        return {"minimum": instance >= value, "maximum": instance <= value,
                "exclusiveMinimum": instance > value, "exclusiveMaximum": instance < value}[keyword]
    if keyword in ("minItems", "maxItems"):
        if not _is_type(value, "integer"):
            return False
        if not isinstance(instance, list):
            return True
        return len(instance) >= value if keyword == "minItems" else len(instance) <= value
    if keyword == "items":
        if "prefixItems" in schema:
            return False
        if not isinstance(instance, list):
            return True
        # A list past its maxItems fails that keyword; its items are not
        # looked into (config.py `_within_max_items`), nor here.
        return all(certainly_valid(item, value, root) for item in instance)
    if keyword == "properties":
        if not isinstance(value, dict):
            return False
        if not isinstance(instance, dict):
            return True
        return all(certainly_valid(instance[name], sub, root) for name, sub in value.items() if name in instance)
    if keyword == "required":
        if not isinstance(value, list):
            return False
        return not isinstance(instance, dict) or all(name in instance for name in value)
    if keyword == "pattern":
        if not isinstance(value, str):
            return False
        # jsonschema searches with Python's `re` as well.
        return not isinstance(instance, str) or re.search(value, instance) is not None
    if keyword == "anyOf":
        return isinstance(value, list) and any(certainly_valid(instance, sub, root) for sub in value)
    if keyword == "allOf":
        return isinstance(value, list) and all(certainly_valid(instance, sub, root) for sub in value)
    if keyword == "$ref":
        target = _resolve(value, root)
        return target is not None and certainly_valid(instance, target, root)
    return False


__all__ = ["certainly_valid"]
