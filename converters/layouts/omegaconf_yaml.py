"""The few keys dspark reads from a YAML document written by OmegaConf
(TorchSpec's run `config.yaml`), with a line reader: dspark needs no YAML
library for them. It reads block-style two-level mappings with plain or
quoted scalars and block or flow lists of integers, and refuses
(ValueError) anything it cannot read with certainty rather than guess."""

from __future__ import annotations

import json
import re


def read_yaml_key(text: str, section: str, key: str) -> str | None:
    """The scalar at `section.key` of a YAML document written as OmegaConf
    writes one (block style, two-level mappings, plain or quoted scalars).

    A line reader for the keys dspark needs, so dspark needs no YAML
    library. It refuses (ValueError) anything it cannot read with certainty
    rather than guess: tabs in indentation, a flow-style or duplicated
    section or key, block or multi-line scalars, anchors, aliases and tags.
    Returns None for null, `~` or an empty value; raises ValueError when the
    key is absent or holds a list."""
    value, number, items = _yaml_entry(text, section, key)
    if items:
        raise ValueError(f"{section}.{key} is a list (line {number}), not a single value")
    return _scalar(value, number)


def read_yaml_int_list(text: str, section: str, key: str) -> list[int] | None:
    """The list of integers at `section.key`: block items (`- 2` lines, as
    OmegaConf writes a list) or a flow list (`[2, 5, 6]`). None for null or
    an empty value; ValueError for anything else, as `read_yaml_key`."""
    value, number, items = _yaml_entry(text, section, key)
    if items:
        if _scalar(value, number) is not None:
            raise ValueError(f"{section}.{key} has a value and list items (line {number})")
        texts = [(_scalar(item, at), at) for item, at in items]
    elif value.startswith("["):
        comment = re.search(r"\]\s*(#.*)?$", value)
        if not comment:
            raise ValueError(f"line {number}: a flow list dspark does not read")
        inner = value[1:comment.start()].strip()
        texts = [(part.strip(), number) for part in inner.split(",")] if inner else []
    else:
        plain = _scalar(value, number)
        if plain is None:
            return None
        raise ValueError(f"{section}.{key} is {plain!r} (line {number}), not a list")
    numbers = []
    for item, at in texts:
        if item is None or not re.fullmatch(r"[+-]?\d+", item):
            raise ValueError(f"{section}.{key}: {item!r} on line {at} is not an integer")
        numbers.append(int(item))
    return numbers


def _yaml_entry(text: str, section: str, key: str) -> tuple[str, int, list[tuple[str, int]]]:
    """`section.key`'s raw value text, its line, and the block-sequence
    items (`- x`) that follow it, each with its line."""
    section_seen = False
    in_section = False
    child_indent: int | None = None
    found: str | None = None
    found_at: int | None = None
    items: list[tuple[str, int]] = []
    value_open = False  # the lines after the key's, until a line at or above its level
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ValueError(f"line {number} is indented with a tab")
        indent = len(line) - len(line.lstrip(" "))
        if value_open:
            # PyYAML (OmegaConf) writes a list's items at the key's own indent.
            if indent >= child_indent and (stripped == "-" or stripped.startswith("- ")):
                items.append((stripped[1:].strip(), number))
                continue
            if indent > child_indent:
                raise ValueError(f"{section}.{key} continues on line {number}: a multi-line or nested value")
            value_open = False
        if indent == 0:
            name, value = _split_mapping_line(stripped, number)
            in_section = name == section
            if in_section:
                if section_seen:
                    raise ValueError(f"{section} appears twice (line {number})")
                section_seen = True
                if value and not value.startswith("#"):
                    raise ValueError(f"{section} is written in flow style on line {number}")
            continue
        if not in_section:
            continue
        if child_indent is None:
            child_indent = indent
        if indent < child_indent:
            raise ValueError(f"line {number} is indented less than the {section} section's keys")
        if indent > child_indent:
            continue  # deeper levels of another key
        name, value = _split_mapping_line(stripped, number)
        if name == key:
            if found_at is not None:
                raise ValueError(f"{section}.{key} appears twice (line {number})")
            found, found_at, value_open = value, number, True
    if found_at is None:
        if not section_seen:
            raise ValueError(f"there is no {section} section")
        raise ValueError(f"there is no {section}.{key}")
    return found, found_at, items


_MAPPING_LINE = re.compile(r"""(?P<name>[A-Za-z_][\w.-]*)\s*:(?:\s+(?P<value>.*))?$""")


def _split_mapping_line(stripped: str, number: int) -> tuple[str, str]:
    match = _MAPPING_LINE.match(stripped)
    if not match:
        if stripped.startswith(("- ", "-")):
            return "-", stripped  # a list item: no key of interest
        raise ValueError(f"line {number} is not a 'key: value' line")
    return match.group("name"), (match.group("value") or "").strip()


def _scalar(value: str, number: int) -> str | None:
    if value.startswith("'"):
        end = _closing_single_quote(value)
        if end is None or _rest_is_comment(value[end + 1:]) is False:
            raise ValueError(f"line {number}: an unterminated or multi-line quoted value")
        return value[1:end].replace("''", "'")
    if value.startswith('"'):
        end = _closing_double_quote(value)
        if end is None or _rest_is_comment(value[end + 1:]) is False:
            raise ValueError(f"line {number}: an unterminated or multi-line quoted value")
        try:
            return json.loads(value[: end + 1])
        except json.JSONDecodeError:
            raise ValueError(f"line {number}: a double-quoted value with escapes dspark does not read") from None
    comment = re.search(r"\s#", value)
    plain = (value[: comment.start()] if comment else value).strip()
    if plain in ("", "~", "null", "Null", "NULL"):
        return None
    if plain[0] in "&*!|>[{@`%":
        raise ValueError(f"line {number}: a YAML {plain[0]!r} value (anchor, alias, tag, block or flow) is not read")
    return plain


def _closing_single_quote(value: str) -> int | None:
    position = 1
    while position < len(value):
        if value[position] == "'":
            if value[position + 1:position + 2] == "'":
                position += 2
                continue
            return position
        position += 1
    return None


def _closing_double_quote(value: str) -> int | None:
    position = 1
    while position < len(value):
        if value[position] == "\\":
            position += 2
            continue
        if value[position] == '"':
            return position
        position += 1
    return None


def _rest_is_comment(rest: str) -> bool:
    rest = rest.strip()
    return not rest or rest.startswith("#")
