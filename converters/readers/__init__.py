"""Every checkpoint format dspark reads, behind one registry.

`open_checkpoint(path)` asks each registered reader, in order, whether the
path is its format (file names only, nothing read), then opens it with
that reader: headers only, no payload. A new format is one `ReaderSpec`
and one module whose `open_*` function returns a `Checkpoint`
(`readers/base.py`). A reader's module is imported only when its format is
opened, so `dspark check` on a safetensors folder never loads the DCP or
`.pt` code.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable

from dspark.converters.layouts.hf import SAFETENSORS_INDEX, TORCH_SUFFIXES, safetensors_entries, torch_weight_files
from dspark.converters.readers.base import Checkpoint, TensorReader
from dspark.converters.sources import is_url
from dspark.schema.errors import UsageError
from dspark.schema.inventory import printable_name
from dspark.schema.records import record

_CHECKPOINT_KINDS = "Pass a checkpoint folder, a .safetensors file or a .pt state dict."


def _never(path: Path) -> bool:
    return False


def _holds_torch_weights(folder: Path) -> bool:
    try:
        names = [p.name for p in folder.iterdir() if p.is_file()]
    except OSError as error:
        raise UsageError(
            f"{printable_name(str(folder))}: cannot list the folder ({error.strerror or error}).",
            hint="Check the folder's permissions.",
        ) from None
    return bool(torch_weight_files(names))


@record
class ReaderSpec:
    """One format: how to recognise it from file names, and the function
    (`module:name`, imported when needed) that opens it as
    `opener(path, format, *, config_path=None) -> Checkpoint`."""

    format: str
    claims_file: Callable[[Path], bool]
    claims_folder: Callable[[Path], bool]
    opener: str

    def open(self, path: Path, *, config_path: Path | None) -> Checkpoint:
        module, _, name = self.opener.partition(":")
        return getattr(importlib.import_module(module), name)(path, self.format, config_path=config_path)


# Asked in this order: a folder with an index is sharded even when it also
# holds *.safetensors; weights beside a DCP folder win over it.
def _holds_dcp(path: Path) -> bool:
    # The TorchSpec layout is loaded only once a folder holds no safetensors.
    from dspark.converters.layouts.torchspec import holds_dcp

    return holds_dcp(path)


def _holds_speculators_epochs(path: Path) -> bool:
    # Asked only once a folder holds no safetensors of its own.
    from dspark.converters.layouts.speculators import holds_epochs

    return holds_epochs(path)


def _holds_training_state(path: Path) -> bool:
    # The SpecForge layout is loaded only once a folder holds no
    # safetensors (the safetensors reader is asked first).
    from dspark.converters.layouts.specforge import holds_training_state

    return holds_training_state(path)


READERS: tuple[ReaderSpec, ...] = (
    ReaderSpec(
        "safetensors-sharded",
        claims_file=lambda p: p.name == SAFETENSORS_INDEX,
        claims_folder=lambda p: (p / SAFETENSORS_INDEX).is_file(),
        opener="dspark.converters.readers.safetensors:open_safetensors",
    ),
    ReaderSpec(
        "safetensors",
        claims_file=lambda p: p.suffix == ".safetensors",
        claims_folder=lambda p: bool(safetensors_entries(p)),
        opener="dspark.converters.readers.safetensors:open_safetensors",
    ),
    # a speculators run's checkpoint folder: one safetensors folder an epoch
    ReaderSpec(
        "safetensors",
        claims_file=_never,
        claims_folder=_holds_speculators_epochs,
        opener="dspark.converters.readers.safetensors:open_speculators_epochs",
    ),
    ReaderSpec("dcp", claims_file=_never, claims_folder=_holds_dcp, opener="dspark.converters.readers.dcp:open_dcp"),
    ReaderSpec(
        "pt",
        claims_file=lambda p: p.suffix in TORCH_SUFFIXES,
        # a SpecForge step folder holds training_state.pt and a file per rank
        claims_folder=lambda p: _holds_training_state(p) or _holds_torch_weights(p),
        opener="dspark.converters.readers.pt:open_pt",
    ),
)
FORMATS = tuple(dict.fromkeys(spec.format for spec in READERS))


def reader_for(path: Path) -> ReaderSpec:
    """The reader whose format is at `path`, by file names only."""
    if not path.exists():
        raise UsageError(f"{printable_name(str(path))}: no such file or folder.", hint="Check the checkpoint path.")
    if path.is_file():
        spec = next((s for s in READERS if s.claims_file(path)), None)
        if spec is None:
            raise UsageError(f"{printable_name(str(path))}: not a checkpoint file dspark reads.", hint=_CHECKPOINT_KINDS)
        return spec
    if not path.is_dir():
        raise UsageError(
            f"{printable_name(str(path))}: neither a file nor a folder (a device, pipe or socket).",
            hint=_CHECKPOINT_KINDS,
        )
    spec = _claiming(path)
    if spec is None:
        below = checkpoints_below(path)
        shown = ", ".join(printable_name(str(folder)) for folder in below[:SHOWN_BELOW])
        if len(below) > SHOWN_BELOW:
            shown += f" and {len(below) - SHOWN_BELOW} more"
        raise UsageError(
            f"{printable_name(str(path))}: not a checkpoint folder: no *.safetensors, {SAFETENSORS_INDEX}, DCP "
            ".metadata, training run (checkpoints/iter_N/), SpecForge checkpoint "
            "({run_id}-step{N}/training_state.pt), speculators epochs (N/model.safetensors), *.bin files or "
            "single .pt file in it." + (f" Checkpoints below it: {shown}." if below else ""),
            hint="Pass one of the checkpoint folders below it." if below
            else "Pass the folder that holds the draft's weights and config.json.",
        )
    return spec


def _claiming(path: Path) -> ReaderSpec | None:
    return next((s for s in READERS if s.claims_folder(path)), None)


# A folder that is no checkpoint is searched this deep, and no wider, for
# checkpoints to name (a parent of drafts passed by mistake); a home folder
# or a dataset must not be walked.
DEPTH_BELOW = 2
FOLDERS_LOOKED_AT = 200
SHOWN_BELOW = 5


def checkpoints_below(path: Path) -> list[Path]:
    """Checkpoint folders one or two levels below `path`, in name order,
    looking at no more than FOLDERS_LOOKED_AT folders."""
    found: list[Path] = []
    level = [path]
    budget = FOLDERS_LOOKED_AT
    for _ in range(DEPTH_BELOW):
        deeper = []
        for folder in level:
            try:
                children = sorted(c for c in folder.iterdir() if c.is_dir() and not c.name.startswith("."))
            except OSError:
                continue
            for child in children:
                if budget == 0:
                    return found
                budget -= 1
                try:
                    claimed = _claiming(child) is not None
                except OSError:
                    claimed = False
                (found if claimed else deeper).append(child)
        level = deeper
    return found


def detect_format(path: Path) -> str:
    """Name the format at `path` by looking at file names only."""
    return reader_for(path).format


def open_checkpoint(path: Path | str, *, config_path: Path | str | None = None) -> Checkpoint:
    """Open a checkpoint for inspection: headers only, no payload read.
    A URL (`hf://`, `https://`, `s3://`, …) is read through its source
    (converters/sources) and never made a `Path`."""
    config = Path(config_path) if config_path else None
    if isinstance(path, str) and is_url(path):
        from dspark.converters.readers.remote import open_remote

        return open_remote(path, config_path=config)
    path = Path(path)
    return reader_for(path).open(path, config_path=Path(config_path) if config_path else None)


__all__ = ["FORMATS", "READERS", "Checkpoint", "ReaderSpec", "TensorReader", "detect_format", "open_checkpoint", "reader_for"]
