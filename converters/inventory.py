"""Open any checkpoint dspark reads and list its tensors, headers only.

`open_checkpoint(path)` detects the format, reads the draft config, and
returns a `Checkpoint`: the lazy inventory (`TensorEntry` per stored
tensor), file-level findings, and a reader that fetches payloads by entry.
Every format's reader has the same verbs (`read_raw`, `iter_chunks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Iterator, Protocol

from dspark.converters.configs import CONFIG_NAME, read_draft_config
from dspark.converters.torchspec_run import holds_dcp
from dspark.schema.errors import UsageError
from dspark.schema.families import DraftFamily, family_for_config, strip_wrappers
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name

SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_SUFFIXES = (".pt", ".pth", ".bin")


class TensorReader(Protocol):
    """Payload access for one checkpoint format."""

    def read_raw(self, entry: TensorEntry) -> bytes:
        """The tensor's bytes, little-endian, in `entry.dtype`, C order."""

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        """The same bytes in chunks of at most `chunk_bytes` (bounded memory
        where the format allows; whole-tensor otherwise). `--deep` calls it
        from several threads at once, one tensor per call: calls must not
        share mutable state (open a file handle per call)."""


@dataclass
class Checkpoint:
    """A checkpoint as dspark sees it before reading any payload."""

    source: Path  # what the user named
    root: Path  # the folder that holds the weights
    format: str  # "safetensors" | "safetensors-sharded" | "dcp" | "pt"
    weight_files: list[str]  # relative to root
    entries: list[TensorEntry]  # every stored tensor that could be listed
    findings: list[Finding]  # file-level problems (corrupt files, bad index)
    reader: TensorReader
    config: dict[str, Any] | None = None
    config_path: Path | None = None
    config_findings: list[Finding] = field(default_factory=list)
    family: DraftFamily | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def config_display(self) -> str:
        return _display(self.config_path, self.root) if self.config_path else CONFIG_NAME

    def entry(self, served_name: str) -> TensorEntry | None:
        return next((e for e in self.entries if e.served_name == served_name), None)

    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries)


def is_plain_file_name(name: Any) -> bool:
    """A bare file name inside the checkpoint folder: no folder part (either
    separator), not `.`/`..`, no NUL. Names read from untrusted files (a
    shard index, DCP storage records, a manifest) must pass this before any
    path is built from them."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "\x00" not in name
        and PurePosixPath(name).name == name
        and PureWindowsPath(name).name == name
    )


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def detect_format(path: Path) -> str:
    """Name the format at `path` by looking at file names only."""
    if not path.exists():
        raise UsageError(f"{printable_name(str(path))}: no such file or folder.", hint="Check the checkpoint path.")
    if path.is_file():
        if path.suffix == ".safetensors":
            return "safetensors"
        if path.suffix in TORCH_SUFFIXES:
            return "pt"
        if path.name == SAFETENSORS_INDEX:
            return "safetensors-sharded"
        raise UsageError(
            f"{printable_name(str(path))}: not a checkpoint file dspark reads.",
            hint="Pass a checkpoint folder, a .safetensors file or a .pt state dict.",
        )
    if not path.is_dir():
        raise UsageError(
            f"{printable_name(str(path))}: neither a file nor a folder (a device, pipe or socket).",
            hint="Pass a checkpoint folder, a .safetensors file or a .pt state dict.",
        )
    if (path / SAFETENSORS_INDEX).is_file():
        return "safetensors-sharded"
    if any(path.glob("*.safetensors")):
        return "safetensors"
    if holds_dcp(path):
        return "dcp"
    try:
        pts = sorted(p for p in path.iterdir() if p.suffix in TORCH_SUFFIXES and p.is_file())
    except OSError as error:
        raise UsageError(
            f"{printable_name(str(path))}: cannot list the folder ({error.strerror or error}).",
            hint="Check the folder's permissions.",
        ) from None
    if len(pts) == 1:
        return "pt"
    raise UsageError(
        f"{printable_name(str(path))}: not a checkpoint folder: no *.safetensors, {SAFETENSORS_INDEX}, DCP .metadata, "
        "training run (checkpoints/iter_N/) or single .pt file in it.",
        hint="Pass the folder that holds the draft's weights and config.json.",
    )


def open_checkpoint(path: Path | str, *, config_path: Path | str | None = None) -> Checkpoint:
    """Open a checkpoint for inspection: headers only, no payload read."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt.startswith("safetensors"):
        from dspark.converters.safetensors_dir import open_safetensors

        return open_safetensors(path, fmt, config_path=Path(config_path) if config_path else None)
    if fmt == "dcp":
        from dspark.converters.dcp_reader import open_dcp

        return open_dcp(path, config_path=Path(config_path) if config_path else None)
    from dspark.converters.pt_reader import open_pt

    return open_pt(path, config_path=Path(config_path) if config_path else None)


def find_config_upwards(root: Path, levels: int) -> Path | None:
    """`config.json` beside the weights, else in up to `levels` folders above."""
    folder = root
    for _ in range(levels + 1):
        if (folder / CONFIG_NAME).is_file():
            return folder / CONFIG_NAME
        folder = folder.parent
    return None


def load_config_for(
    root: Path, explicit: Path | None, *, search_parents: int = 0, missing_note: str | None = None
) -> tuple[dict[str, Any] | None, Path | None, list[Finding], DraftFamily | None]:
    """Find and read the draft config: `explicit`, else beside the weights,
    else (training outputs) up to `search_parents` folders above.
    `missing_note` is added to the finding when there is none: what the
    reader knows about where this format keeps (or does not keep) it."""
    if explicit is not None:
        if not explicit.is_file():
            raise UsageError(f"--config {printable_name(str(explicit))}: no such file.", hint="Pass the draft's config.json.")
        candidate: Path | None = explicit
    else:
        candidate = find_config_upwards(root, search_parents)
    shown = _display(candidate, root) if candidate else _display(root / CONFIG_NAME, root)
    config, findings = read_draft_config(candidate, shown)
    if missing_note and candidate is None:
        findings = [replace(f, message=f"{f.message} {missing_note}") if f.code == "CFG001" else f for f in findings]
    family = family_for_config(config) if config else None
    return config, candidate, findings, family


def served_name_for(family: DraftFamily | None, stored_name: str) -> str:
    return family.served_name(stored_name) if family else strip_wrappers(stored_name)
