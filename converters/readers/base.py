"""What every reader shares: the `Checkpoint` it returns, the verbs of
its payload reader, and where it finds the draft's config.

A `Checkpoint` is the lazy inventory (`TensorEntry` per stored tensor),
file-level findings, and a reader that fetches payloads by entry. Every
format's reader has the same verbs (`read_raw`, `iter_chunks`). The
registry that picks a reader for a path is the package (`readers/__init__.py`).
"""

from __future__ import annotations

from dataclasses import field, replace
from pathlib import Path
from typing import Any, Iterator, Protocol

from dspark.converters.configs import read_draft_config, refuse_a_looping_link
from dspark.converters.layouts.hf import CONFIG_NAME
from dspark.converters.layouts.markers import SPECULATORS_TYPE_FIELD, TORCHSPEC_DFLASH_MODEL_TYPE
from dspark.converters.sources.local import why_not_a_file
from dspark.schema.errors import UsageError
from dspark.schema.families import DraftFamily, family_for_config, strip_wrappers
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.records import record


class TensorReader(Protocol):
    """Payload access for one checkpoint format."""

    def read_raw(self, entry: TensorEntry) -> bytes:
        """The tensor's bytes, little-endian, in `entry.dtype`, C order."""

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        """The same bytes in chunks of at most `chunk_bytes` (bounded memory
        where the format allows; whole-tensor otherwise). `--deep` calls it
        from several threads at once, one tensor per call: calls must not
        share mutable state (open a file handle per call)."""


@record(frozen=False)
class Checkpoint:
    """A checkpoint as dspark sees it before reading any payload."""

    source: Path | str  # what the user named: a path, or a URL (never made a Path: it would lose its `//`)
    root: Path | None  # the local folder that holds the weights; None for a remote source
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
    remote: Any = None  # the converters.sources.Source read, for a URL

    @property
    def is_remote(self) -> bool:
        return self.remote is not None

    @property
    def config_display(self) -> str:
        if self.config_path is None:
            return CONFIG_NAME
        return display_name(self.config_path, self.root) if self.root is not None else str(self.config_path)

    def entry(self, served_name: str) -> TensorEntry | None:
        return next((e for e in self.entries if e.served_name == served_name), None)

    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries)


def display_name(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


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
            raise UsageError(f"--config {printable_name(str(explicit))}: {why_not_a_file(explicit)}.",
                             hint="Pass the draft's config.json.")
        candidate: Path | None = explicit
    else:
        candidate = find_config_upwards(root, search_parents)
    beside = root / CONFIG_NAME
    if candidate is None:
        refuse_a_looping_link(beside)
    shown = display_name(candidate, root) if candidate else display_name(root / CONFIG_NAME, root)
    config, findings = read_draft_config(candidate, shown)
    if candidate is None and beside.exists() and not beside.is_file():
        findings = [replace(f, message=f"{shown} is a folder or special file, not a file: the draft's config.json "
                                       "must be a JSON file beside the weights. Replace it with the draft's "
                                       "config.json, or pass --config.")
                    if f.code == "CFG001" else f for f in findings]
    elif missing_note and candidate is None:
        findings = [replace(f, message=f"{f.message} {missing_note}") if f.code == "CFG001" else f for f in findings]
    if config is not None:
        # Another trainer's config shape is read as the config convert
        # writes; the served verdict then says the engine cannot parse it.
        # Other trainers' shapes, recognised by a key before their modules
        # load: a header-only check of an engine-layout folder needs neither.
        if SPECULATORS_TYPE_FIELD in config:
            from dspark.converters.layouts.speculators import read_speculators_config

            trainer = read_speculators_config(config, shown)
            if trainer is not None:
                config, findings = trainer.config, findings + trainer.findings
        if config.get("model_type") == TORCHSPEC_DFLASH_MODEL_TYPE:
            from dspark.converters.layouts.torchspec_run import with_dflash_default_taps

            config, derived = with_dflash_default_taps(config, shown)
            findings = findings + derived
    family = family_for_config(config) if config else None
    return config, candidate, findings, family


def served_name_for(family: DraftFamily | None, stored_name: str) -> str:
    return family.served_name(stored_name) if family else strip_wrappers(stored_name)


def left_behind_finding(left_behind: list[str], shown: str) -> Finding:
    """SRC002: entries of a training save that are not draft weights."""
    sample = ", ".join(printable_name(n) for n in sorted(left_behind)[:6])
    more = f" and {len(left_behind) - 6} more" if len(left_behind) > 6 else ""
    return Finding(
        "SRC002",
        f"{shown}: {len(left_behind)} entries that are not draft weights are left behind ({sample}{more}).",
        file=shown,
        detail={"count": len(left_behind), "names": sorted(left_behind)[:100]},
    )
