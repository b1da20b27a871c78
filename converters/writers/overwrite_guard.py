"""Nothing dspark writes lands on what it reads.

A report written with `--output` replaces its file whole. Pointed at the
checkpoint being judged (`--output DRAFT/model.safetensors`, or `gate .
--output config.json` from inside the draft) it would destroy the weights
and leave a run that exited 0. So before any work, the report's path is
held against every input of the run: a folder input protects everything
below it, and the config files its readers look for in the folders above;
a file input protects itself and the checkpoint files beside it (a
`.safetensors` or `.pt` file is read with the `config.json` next to it).
Paths are compared resolved (a symbolic link to the weights is the
weights) and, for a report file that already exists, by inode (a hard link
is too).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from dspark.converters.layouts.hf import CONFIG_NAME, MANIFEST_NAME, SAFETENSORS_INDEX, TORCH_SUFFIXES
from dspark.schema.records import record

# Files a checkpoint is made of, besides its weights: a report must never
# take one of these names beside a checkpoint file it reads.
_CHECKPOINT_NAMES = frozenset({CONFIG_NAME, SAFETENSORS_INDEX, MANIFEST_NAME, "config.yaml", ".metadata",
                               "generation_config.json", "training_state.pt"})
_CHECKPOINT_SUFFIXES = (".safetensors", ".distcp", *TORCH_SUFFIXES)
# Config files a reader looks for in the folders above the one it was
# given (a DCP `model/` folder's run, a shard folder's draft config).
_CONFIGS_ABOVE = frozenset({CONFIG_NAME, "config.yaml", MANIFEST_NAME})
_LEVELS_ABOVE = 3


@record
class RunInput:
    """A path the run reads, as the user named it (`flag` is how the
    message names it: "CKPT", "--config", ...)."""

    flag: str
    path: str | os.PathLike | None


def is_checkpoint_file_name(name: str) -> bool:
    return name in _CHECKPOINT_NAMES or name.endswith(_CHECKPOINT_SUFFIXES) or name.endswith(".index.json")


def report_overwrites(report: Path, inputs: Iterable[RunInput], *, writes_into: Path | None = None) -> str | None:
    """Why writing the report to `report` would destroy something the run
    reads or writes (None: it would not). `writes_into` is a folder the run
    is asked to write (convert's DST): a report may sit there, but not under
    a name the run writes itself."""
    from dspark.converters.sources import is_url

    target = _resolved(report)
    existing = _identity(report)
    for run_input in inputs:
        if run_input.path is None or str(run_input.path) == "" or is_url(str(run_input.path)):
            continue
        named = Path(run_input.path)
        source = _resolved(named)
        label = f"{run_input.flag} {run_input.path}"
        if named.is_dir():
            if target == source or source in target.parents:
                return f"it lies inside {label}, which this run reads; write the report outside the checkpoint"
            if target.name in _CONFIGS_ABOVE and target.parent in list(source.parents)[:_LEVELS_ABOVE]:
                return (f"{target.name} in a folder above {label} is read as part of that checkpoint; "
                        "name the report differently or write it elsewhere")
            if existing is not None and _holds_same_file(named, existing):
                return f"it is the same file (a hard link) as one inside {label}, which this run reads"
        elif named.exists():
            if target == source or (existing is not None and existing == _identity(named)):
                return f"it is {label}, which this run reads"
            if target.parent == source.parent and is_checkpoint_file_name(target.name):
                return (f"{target.name} beside {label} is part of that checkpoint; "
                        "name the report differently or write it elsewhere")
    if writes_into is not None:
        destination = _resolved(writes_into)
        if destination in target.parents and is_checkpoint_file_name(target.name):
            return (f"{target.name} is a file this run writes into {writes_into}; "
                    "name the report differently (e.g. report.json)")
    return None


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


def _holds_same_file(folder: Path, identity: tuple[int, int]) -> bool:
    """A hard link to a file below `folder`. Checkpoints hold tens of files,
    and this runs only when the report file already exists with links."""
    for root, _, files in os.walk(folder):
        for name in files:
            if _identity(Path(root) / name) == identity:
                return True
    return False
