"""A safetensors checkpoint folder read through a remote `Source`
(converters/sources): an HTTP folder, a Hub repository, an object store.

Only what `dspark check` needs crosses the network: the folder's listing,
`config.json`, the shard index and each weight file's header, by range.
Payloads are read by range too, and only for `--deep`, in bounded chunks.
Remote DCP and `.pt` checkpoints are refused (exit 2): both formats need
their whole files, so downloading first is the honest way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from dspark.converters.configs import read_draft_config, read_draft_config_from
from dspark.converters.json_input import read_json_object_from
from dspark.converters.layouts.hf import SAFETENSORS_INDEX, TORCH_SUFFIXES, is_plain_file_name
from dspark.converters.readers.base import Checkpoint
from dspark.converters.readers.safetensors import (
    copies_compared_through,
    entries_from_headers,
    finding_from_error,
    index_from,
    merged_metadata,
)
from dspark.converters.readers.safetensors_io import SafetensorsHeader, read_header_from_source
from dspark.converters.sources import Source, SourceError, open_source
from dspark.schema.errors import CheckpointError, UsageError
from dspark.schema.families import family_for_config
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry, printable_name

_DOWNLOAD_HINT = "Download it first (e.g. `hf download ORG/REPO --local-dir DIR`) and check DIR."


class SourceTensorReader:
    """Payloads by range request, `chunk_bytes` at a time: memory stays at
    one chunk per tensor in flight, whatever the file's size."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def read_raw(self, entry: TensorEntry) -> bytes:
        return b"".join(bytes(chunk) for chunk in self.iter_chunks(entry, 1 << 62))

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        start, end = entry.byte_range
        position = start
        while position < end:
            stop = min(end, position + chunk_bytes)
            try:
                data = self.source.read_range(entry.file, position, stop)
            except OSError as error:
                raise CheckpointError(
                    f"{entry.file}: cannot read [{position:,}, {stop:,}) from {self.source.url}: {error}",
                    code="PAY003", path=entry.file, tensor=entry.stored_name,
                    hint="Check the network and your access to the checkpoint; or download it and check the copy.",
                ) from None
            if len(data) != stop - position:
                raise CheckpointError(
                    f"{entry.file}: the source returned {len(data):,} of {stop - position:,} bytes at {position:,}",
                    code="PAY003", path=entry.file, tensor=entry.stored_name,
                    hint="The remote file is shorter than its header says: re-upload it.",
                )
            yield memoryview(data)
            position = stop


def open_remote(url: str, *, config_path: Path | None = None) -> Checkpoint:
    """Open the safetensors checkpoint folder at `url`: headers only."""
    try:
        source = open_source(url)
        names = source.list()
        return _open_source(source, names, config_path)
    except SourceError as error:
        raise UsageError(f"{printable_name(str(error))}", hint="Check the address, your access to it and the network.") from None


def _open_source(source: Source, names: list[str], config_path: Path | None) -> Checkpoint:
    shown_url = printable_name(source.url)
    weights = sorted(n for n in names if n.endswith(".safetensors"))
    if SAFETENSORS_INDEX in names:
        fmt = "safetensors-sharded"
    elif weights:
        fmt = "safetensors"
    elif any(n.endswith(TORCH_SUFFIXES) for n in names) or ".metadata" in names:
        raise UsageError(
            f"{shown_url}: a DCP or torch (.pt, .bin) checkpoint; remote checkpoints are read only as safetensors "
            "(headers by range request).",
            hint=_DOWNLOAD_HINT,
        )
    elif not names and getattr(source, "probed", None):
        # Every name asked for was 404: the address is wrong or gone, which
        # "not a checkpoint folder" would hide behind a claim about a folder.
        raise UsageError(
            f"{shown_url}: not found: the server answers 404 Not Found for each of {', '.join(source.probed)} "
            "there.",
            hint="Check the address (a typo, a moved or private folder); it must name the folder that holds "
            "the draft's weights and config.json.",
        )
    else:
        raise UsageError(
            f"{shown_url}: not a checkpoint folder: no *.safetensors or {SAFETENSORS_INDEX} in it.",
            hint="Pass the folder (or repository) that holds the draft's weights and config.json.",
        )

    if config_path is not None:
        if not config_path.is_file():
            raise UsageError(f"--config {printable_name(str(config_path))}: no such file.",
                             hint="Pass the draft's config.json.")
        config, config_findings = read_draft_config(config_path, str(config_path))
    else:
        config, config_findings = read_draft_config_from(source)
    family = family_for_config(config) if config else None

    findings: list[Finding] = []
    listed: dict[str, str] | None = None
    index_total: Any = None
    files = weights
    if fmt == "safetensors-sharded":
        listed, index_total, index_findings = index_from(lambda: read_json_object_from(source, SAFETENSORS_INDEX))
        findings += index_findings
        shards = sorted(set(listed.values())) if listed else []
        present = set(names)
        for shard in shards:
            if not is_plain_file_name(shard):
                findings.append(Finding(
                    "IDX007",
                    f"{SAFETENSORS_INDEX}: shard name {printable_name(str(shard))!r} is not a plain file "
                    "name inside the checkpoint folder; refusing to follow it. Regenerate the index.",
                    file=SAFETENSORS_INDEX, detail={"shard": shard},
                ))
            elif shard not in present and source.stat(shard) is None:
                findings.append(Finding(
                    "IDX002",
                    f"{SAFETENSORS_INDEX} names shard {shard}, which is missing. TokenSpeed skips it; a tensor "
                    "the draft needs from it is reported missing. Upload it or regenerate the index.",
                    file=shard,
                    detail={"tensors": sorted(n for n, s in listed.items() if s == shard)[:10]},
                ))
            else:
                present.add(shard)
        files = sorted(set(weights) | {s for s in shards if is_plain_file_name(s) and s in present})
    elif len(files) > 1:
        findings.append(Finding(
            "IDX001",
            f"{len(files)} safetensors files but no {SAFETENSORS_INDEX}. TokenSpeed reads every one of "
            "them (model_loader/loader.py@4b9766f6:287-311; a tensor stored twice is IDX005), but other "
            "loaders need the index. Add it, or keep one file.",
            file=source.url, detail={"files": files},
            severity=Severity.WARNING,
        ))

    headers: dict[str, SafetensorsHeader] = {}
    for name in files:
        try:
            headers[name] = read_header_from_source(source, name, display_name=name)
        except CheckpointError as error:
            findings.append(finding_from_error(error))
    reader = SourceTensorReader(source)
    entries, more = entries_from_headers(files, headers, listed, index_total, family,
                                         same_bytes=copies_compared_through(reader))
    return Checkpoint(
        source=source.url,
        root=None,
        format=fmt,
        weight_files=files,
        entries=entries,
        findings=findings + more,
        reader=reader,
        config=config,
        config_path=config_path,
        config_findings=config_findings,
        family=family,
        metadata=merged_metadata(headers),
        remote=source,
    )
