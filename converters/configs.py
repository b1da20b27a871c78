"""Reading config.json files (draft and target) into plain dicts.

Problems with the draft's own config are findings (the checkpoint fails);
problems with a `--target` the user named are usage errors.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

# The strict JSON reader, shared by every reader of JSON input (json_input.py).
from dspark.converters.json_input import JsonInputError, parse_json_object, read_json_object_from
from dspark.converters.layouts.hf import CONFIG_NAME
from dspark.converters.sources import is_url, open_source, url_scheme
from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding
from dspark.schema.inventory import printable_name
from dspark.schema.rules import TargetFacts

# A model's config.json is a few KB (a multimodal target's, tens of KB);
# reading more than this would only spend memory on what no model declares.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_draft_config(path: Path | None, shown: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The draft's config, or findings that say why there is none. What
    the system refuses on the way (a permission, an I/O error) is raised as
    the OSError naming the file: the config is there but this machine
    cannot read it (exit 2), which no edit to the draft's config fixes."""
    if path is None or not path.is_file():
        return None, [Finding(
            "CFG001",
            f"no {CONFIG_NAME} beside the weights ({shown}); every check depends on it. Copy the "
            "draft's config.json from the training run next to the weights, or pass --config.",
            file=shown,
        )]
    return _config_or_findings(lambda: parse_json_object(path, max_bytes=MAX_CONFIG_BYTES), shown)


def refuse_a_looping_link(path: Path) -> None:
    """A `config.json` that is a symlink loop is there but unreadable (the
    OSError naming it), not missing: `is_file()` says False for both."""
    if path.is_symlink():
        try:
            path.stat()
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise


def read_draft_config_from(source, shown: str = CONFIG_NAME) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The draft's config from a remote `Source` (converters/sources), with
    the same findings as a local one."""
    if source.stat(CONFIG_NAME) is None:
        return read_draft_config(None, shown)
    return _config_or_findings(lambda: read_json_object_from(source, CONFIG_NAME, max_bytes=MAX_CONFIG_BYTES), shown)


def _config_or_findings(load, shown: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    try:
        return load(), []
    except JsonInputError as exc:
        if exc.reason == "nonfinite":
            return None, [Finding(
                "CFG010",
                f"{shown}: {exc}. A config value must be a finite number; Python's json.dump writes "
                "NaN/Infinity for a float that is not. Fix the field in the draft's config.json.",
                file=shown,
                detail={"field": exc.field, "value": exc.literal},
            )]
        return None, [Finding(
            "CFG002",
            f"{shown}: {exc}. Fix or regenerate the draft's config.json.",
            file=shown,
            detail={"reason": exc.reason, **({"field": exc.field} if exc.field else {})},
        )]


def read_target_facts(target: Path | str) -> TargetFacts:
    """`--target` accepts a model folder or its config.json, local or a URL
    (`hf://ORG/REPO[@REV]`, an HTTP or object-store folder, or the URL of
    its config.json)."""
    if is_url(str(target)):
        return _read_remote_target_facts(str(target))
    target = Path(target)
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
        config = parse_json_object(config_path, max_bytes=MAX_CONFIG_BYTES)
    except (ValueError, OSError) as exc:
        raise UsageError(
            f"--target {printable_name(str(config_path))}: {exc}.", hint="Pass a valid target config.json."
        ) from None
    return TargetFacts.from_config(config, str(config_path))


def _read_remote_target_facts(url: str) -> TargetFacts:
    """The target's config.json read by range from a remote folder; a URL
    whose last part names a .json file is that file in its folder (a Hub
    address is always a repository, whose root holds the config)."""
    folder, name = url, CONFIG_NAME
    head, _, last = url.rstrip("/").rpartition("/")
    if last.lower().endswith(".json") and url_scheme(url) != "hf" and url_scheme(head + "/") is not None:
        folder, name = head + "/", last
    shown = printable_name(url)
    try:
        source = open_source(folder)
        if source.stat(name) is None:
            raise UsageError(
                f"--target {shown}: no {name} there.",
                hint="Pass the target model's folder (with its config.json) or the URL of the config file itself.",
            )
        config = read_json_object_from(source, name, max_bytes=MAX_CONFIG_BYTES)
    except (ValueError, OSError) as exc:  # SourceError is an OSError
        raise UsageError(f"--target {shown}: {exc}.", hint="Pass a valid target config.json.") from None
    location = folder.rstrip("/") + "/" + name
    return TargetFacts.from_config(config, location)
