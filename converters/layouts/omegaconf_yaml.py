"""The few keys dspark reads from a YAML document written by OmegaConf
(TorchSpec's run `config.yaml`), read with PyYAML's safe loader, the parser
OmegaConf itself loads the file with.

PyYAML accepts more than OmegaConf writes, and some of it would be a guess
about what the run meant; the reader refuses (ValueError) what it cannot
read with certainty: tabs in indentation, a flow-style or duplicated
section or key (PyYAML keeps the last duplicate without a word), block or
multi-line scalars, anchors, aliases and tags, nested values. An OmegaConf
interpolation (`${model.x}`, `${oc.env:HOME}`) is a plain scalar to YAML and
comes back as written: dspark does not resolve it, and the caller's checks
(a path that is not there, a value that is not an integer) say so.

The document is parsed only when a TorchSpec run folder is opened, so
`yaml` is imported inside the readers, not with the module.
"""

from __future__ import annotations

import re
from typing import Any

_NULL_TAG = "tag:yaml.org,2002:null"
_INT_TAG = "tag:yaml.org,2002:int"


def read_yaml_key(text: str, section: str, key: str) -> str | None:
    """The scalar at `section.key`, as the text it holds (`16`, a path),
    of a YAML document written as OmegaConf writes one (block style,
    two-level mappings, plain or quoted scalars).

    Returns None for null, `~` or an empty value; raises ValueError when
    the key is absent, holds a list, or is written in a way dspark does not
    read for certain (see the module's docstring)."""
    node, line = _entry(text, section, key)
    if node.id == "sequence":
        if node.flow_style:
            raise ValueError(f"line {line}: a YAML '[' value (flow) is not read")
        raise ValueError(f"{section}.{key} is a list (line {line}), not a single value")
    return _scalar(node, line)


def read_yaml_int_list(text: str, section: str, key: str) -> list[int] | None:
    """The list of integers at `section.key`: block items (`- 2` lines, as
    OmegaConf writes a list) or a flow list (`[2, 5, 6]`). None for null or
    an empty value; ValueError for anything else, as `read_yaml_key`."""
    node, line = _entry(text, section, key)
    if node.id != "sequence":
        plain = _scalar(node, line)
        if plain is None:
            return None
        raise ValueError(f"{section}.{key} is {plain!r} (line {line}), not a list")
    numbers = []
    for item in node.value:
        at = item.start_mark.line + 1
        text_value = item.value if item.id == "scalar" else None
        # A plain integer as OmegaConf (PyYAML's SafeLoader) reads it, or a
        # quoted one in decimal digits (as dspark read them before).
        plain_int = item.id == "scalar" and item.style is None and item.tag == _INT_TAG
        quoted_int = item.id == "scalar" and item.style in ("'", '"') and re.fullmatch(r"[+-]?\d+", item.value)
        if not (plain_int or quoted_int):
            raise ValueError(f"{section}.{key}: {text_value!r} on line {at} is not an integer")
        numbers.append(_as_int(item.value) if plain_int else int(item.value))
    return numbers


def _as_int(plain: str) -> int:
    import yaml

    return yaml.safe_load(plain)  # 0x10, 0o10, 1_000: as the run's own loader reads them


def _entry(text: str, section: str, key: str) -> tuple[Any, int]:
    """`section.key`'s node and the line of its key (1-based)."""
    import yaml

    _refuse_tab_indentation(text)
    _refuse_anchors_aliases_and_tags(text)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise ValueError(_yaml_problem(error, section)) from None
    if root is None:
        raise ValueError(f"there is no {section} section")
    if root.id != "mapping":
        raise ValueError(f"the document is not a mapping (line {root.start_mark.line + 1})")
    section_node = _child(root, section, section)
    if section_node is None:
        raise ValueError(f"there is no {section} section")
    section_node, section_line = section_node
    if section_node.id == "mapping" and section_node.flow_style:
        raise ValueError(f"{section} is written in flow style on line {section_line}")
    if section_node.id == "scalar" and section_node.tag == _NULL_TAG:
        raise ValueError(f"there is no {section}.{key}")
    if section_node.id != "mapping":
        raise ValueError(f"{section} (line {section_line}) is not a mapping")
    found = _child(section_node, key, f"{section}.{key}")
    if found is None:
        raise ValueError(f"there is no {section}.{key}")
    return found


def _child(mapping: Any, name: str, shown: str) -> tuple[Any, int] | None:
    """The value node under key `name` and the key's line; ValueError when
    the key appears twice."""
    found = None
    for key_node, value_node in mapping.value:
        if key_node.id == "scalar" and key_node.value == name:
            line = key_node.start_mark.line + 1
            if found is not None:
                raise ValueError(f"{shown} appears twice (line {line})")
            found = (value_node, line)
    return found


def _scalar(node: Any, line: int) -> str | None:
    if node.id == "mapping":
        raise ValueError(f"line {line}: a multi-line or nested value")
    if node.style in ("|", ">"):
        raise ValueError(f"line {line}: a multi-line (block) value")
    if node.end_mark.line != node.start_mark.line:
        if node.style in ("'", '"'):
            raise ValueError(f"line {line}: an unterminated or multi-line quoted value")
        raise ValueError(f"the value on line {line} continues on line {node.end_mark.line + 1}: a multi-line value")
    if node.style is None and node.tag == _NULL_TAG:
        return None
    return node.value


def _refuse_tab_indentation(text: str) -> None:
    # PyYAML refuses a tab too, with a message about tokens; say what it is.
    for number, line in enumerate(text.splitlines(), start=1):
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ValueError(f"line {number} is indented with a tab")


def _refuse_anchors_aliases_and_tags(text: str) -> None:
    import yaml

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                raise ValueError(f"line {line}: a YAML '*' value (alias) is not read")
            if getattr(event, "anchor", None) is not None:
                raise ValueError(f"line {line}: a YAML '&' value (anchor) is not read")
            if getattr(event, "tag", None) is not None:
                raise ValueError(f"line {line}: a YAML '!' value (tag) is not read")
    except yaml.YAMLError:
        return  # the document does not parse: compose says why


def _yaml_problem(error: Any, section: str) -> str:
    """PyYAML's error in the words of what dspark refuses."""
    mark = getattr(error, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    context = getattr(error, "context", None) or ""
    problem = getattr(error, "problem", None) or str(error)
    if "quoted scalar" in context:
        return f"line {line}: an unterminated or multi-line quoted value"
    if "block mapping" in context and "block end" in problem:
        return f"line {line} is indented less than the {section} section's keys (or a key sits where none can)"
    where = f" (line {line})" if line is not None else ""
    return f"not YAML dspark can read: {context + ': ' if context else ''}{problem}{where}"
