"""Reading config.json files (draft and target) into plain dicts.

Problems with the draft's own config are findings (the checkpoint fails);
problems with a `--target` the user named are usage errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding
from dspark.schema.inventory import printable_name
from dspark.schema.rules import TargetFacts

CONFIG_NAME = "config.json"


class _DuplicateKey(Exception):
    pass


def _reject_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise _DuplicateKey(dup)
    return dict(pairs)


def parse_json_object(path: Path) -> dict[str, Any]:
    """Parse a JSON object, rejecting duplicate keys (which json.loads would
    silently resolve to the last one). Raises ValueError with a reason."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None
    try:
        value = json.loads(text, object_pairs_hook=_reject_duplicates)
    except _DuplicateKey as dup:
        raise ValueError(f"key {dup.args[0]!r} appears twice") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"top level is a JSON {type(value).__name__}, not an object")
    return value


def read_draft_config(path: Path | None, shown: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The draft's config, or findings that say why there is none."""
    if path is None or not path.is_file():
        return None, [Finding(
            "CFG001",
            f"no {CONFIG_NAME} beside the weights ({shown}); every check depends on it. Copy the "
            "draft's config.json from the training run next to the weights, or pass --config.",
            file=shown,
        )]
    try:
        return parse_json_object(path), []
    except (ValueError, OSError) as exc:
        return None, [Finding(
            "CFG002",
            f"{shown}: {exc}. Fix or regenerate the draft's config.json.",
            file=shown,
        )]


def read_target_facts(target: Path) -> TargetFacts:
    """`--target` accepts a model folder or its config.json."""
    config_path = target / CONFIG_NAME if target.is_dir() else target
    shown = printable_name(str(target))
    if not target.exists():
        raise UsageError(f"--target {shown}: no such file or folder.", hint="Pass the target model's folder or its config.json.")
    if not config_path.is_file():
        raise UsageError(
            f"--target {shown}: no {CONFIG_NAME} in that folder.",
            hint="Pass the target model's folder (with its config.json) or the config file itself.",
        )
    try:
        config = parse_json_object(config_path)
    except (ValueError, OSError) as exc:
        raise UsageError(
            f"--target {printable_name(str(config_path))}: {exc}.", hint="Pass a valid target config.json."
        ) from None
    return TargetFacts.from_config(config, str(config_path))
