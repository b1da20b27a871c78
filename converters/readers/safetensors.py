"""HF-style safetensors checkpoints: one file, several, or sharded with an
index. Headers only; every inconsistency is a finding, not an exception, so
`dspark check` reports them all at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from dspark.converters.json_input import parse_json_object
from dspark.converters.layouts.hf import SAFETENSORS_INDEX, is_plain_file_name, safetensors_entries
from dspark.converters.readers.base import Checkpoint, load_config_for, served_name_for
from dspark.converters.readers.copies import (
    NOT_COMPARED,
    SAME,
    SAME_AS_SERVED,
    UNREADABLE,
    alike_text,
    compare_copies,
    serves_the_same,
)
from dspark.converters.readers import copies as copy_limits  # its limit read at each call (tests lower it)
from dspark.converters.readers.safetensors_io import SafetensorsHeader, iter_range_chunks, read_header, read_range
from dspark.schema.errors import CheckpointError
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry, printable_name


class SafetensorsReader:
    """Reads payloads by byte range (pread), never through a memory map."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_raw(self, entry: TensorEntry) -> bytes:
        start, end = entry.byte_range
        return read_range(self.root / entry.file, start, end)

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        start, end = entry.byte_range
        return iter_range_chunks(self.root / entry.file, start, end, chunk_bytes)


def finding_from_error(error: CheckpointError) -> Finding:
    return Finding(error.code, error.message, file=error.path, tensor=error.tensor, detail=dict(error.detail))


def open_safetensors(path: Path, fmt: str, *, config_path: Path | None = None) -> Checkpoint:
    """A `.safetensors` file, an index file or a folder; `fmt` is
    "safetensors" or "safetensors-sharded" (the registry's detection)."""
    if path.is_file():
        root = path.parent
        files = [path.name] if fmt == "safetensors" else []
    else:
        root = path
        files = sorted(p.name for p in safetensors_entries(root) if p.is_file())
    config, config_file, config_findings, family = load_config_for(root, config_path)

    findings: list[Finding] = []
    if not path.is_file():
        # A folder or a broken link with a weight file's name: left out of
        # the inventory, so say why its tensors are missing.
        for odd in sorted(p.name for p in safetensors_entries(root) if not p.is_file()):
            findings.append(Finding(
                "STF001",
                f"{printable_name(odd)} is not a readable file (a folder, or a link to nothing); its tensors "
                "cannot be read. Replace it with the real safetensors file.",
                file=odd,
                detail={"reason": "not_a_file"},
            ))
    headers: dict[str, SafetensorsHeader] = {}
    listed: dict[str, str] | None = None  # tensor -> shard, from the index
    index_total: Any = None

    if fmt == "safetensors-sharded":
        listed, index_total, index_findings = _read_index(root / SAFETENSORS_INDEX)
        findings += index_findings
        shards = sorted(set(listed.values())) if listed else []
        for shard in shards:
            if not is_plain_file_name(shard):
                findings.append(Finding(
                    "IDX007",
                    f"{SAFETENSORS_INDEX}: shard name {printable_name(str(shard))!r} is not a plain file "
                    "name inside the checkpoint folder; refusing to follow it. Regenerate the index.",
                    file=SAFETENSORS_INDEX,
                    detail={"shard": shard},
                ))
            elif not (root / shard).is_file():
                findings.append(Finding(
                    "IDX002",
                    f"{SAFETENSORS_INDEX} names shard {shard}, which is missing. TokenSpeed skips it; a "
                    "tensor the draft needs from it is reported missing. Copy it from the training "
                    "output or regenerate the index.",
                    file=shard,
                    detail={"tensors": sorted(n for n, s in listed.items() if s == shard)[:10],
                            INDEXED_TENSORS: sorted(n for n, s in listed.items() if s == shard)},
                ))
        files = sorted(set(files) | {s for s in shards if is_plain_file_name(s) and (root / s).is_file()})
    elif len(files) > 1:
        findings.append(Finding(
            "IDX001",
            f"{len(files)} safetensors files but no {SAFETENSORS_INDEX}. TokenSpeed reads every one of "
            "them (model_loader/loader.py@4b9766f6:287-311; a tensor stored twice is IDX005), but other "
            "loaders need the index. Add it, or keep one file.",
            file=str(root),
            detail={"files": files},
            severity=Severity.WARNING,
        ))

    for name in files:
        try:
            headers[name] = read_header(root / name, display_name=name)
        except CheckpointError as error:
            unreadable = finding_from_error(error)
            if listed is not None:  # what the index says the file holds
                unreadable.detail[INDEXED_TENSORS] = sorted(n for n, s in listed.items() if s == name)
            findings.append(unreadable)

    reader = SafetensorsReader(root)
    entries, more = entries_from_headers(files, headers, listed, index_total, family,
                                         same_bytes=copies_compared_through(reader))
    findings += more
    metadata = merged_metadata(headers)
    return Checkpoint(
        source=path,
        root=root,
        format=fmt,
        weight_files=files,
        entries=entries,
        findings=findings,
        reader=reader,
        config=config,
        config_path=config_file,
        config_findings=config_findings,
        family=family,
        metadata=metadata,
    )


#: In the detail of a finding about a weight file that is missing or cannot
#: be read: the tensors the index puts in it (stored names).
INDEXED_TENSORS = "indexed_tensors"


def open_speculators_epochs(path: Path, fmt: str, *, config_path: Path | None = None) -> Checkpoint:
    """A speculators run's checkpoint folder: its newest epoch, opened as
    the safetensors folder it is, named by the folder the user gave, with a
    note saying which epoch was read."""
    from dspark.converters.layouts.speculators import locate_epoch

    epoch, note = locate_epoch(path)
    checkpoint = open_safetensors(epoch, fmt, config_path=config_path)
    checkpoint.source = path
    checkpoint.findings = [note] + checkpoint.findings
    return checkpoint


def entries_from_headers(
    files: list[str],
    headers: dict[str, SafetensorsHeader],
    listed: dict[str, str] | None,
    index_total: Any,
    family,
    same_bytes: Callable[[tuple[str, Any], tuple[str, Any]], str],
) -> tuple[list[TensorEntry], list[Finding]]:
    """The inventory from the headers read, and what is inconsistent
    between the files and the index (the same for a local or remote folder).

    ``same_bytes((file, tensor), (file, tensor))`` compares two stored
    copies of one tensor (`copies_compared_through`) and says how they
    compared."""
    findings: list[Finding] = []
    entries: list[TensorEntry] = []
    owner: dict[str, tuple[str, Any]] = {}  # tensor -> (file, header entry) its entry comes from
    holders: dict[str, list[str]] = {}  # tensor -> every file that stores it
    # With an index the loader opens only the files it names
    # (model_loader/weight_utils.py@f4d8ec6e:254-272): those come first, so
    # a tensor's entry is the copy that loads, and a copy in a file the
    # index never names is never read, so never served twice.
    named = set(listed.values()) if listed is not None else None
    stray = (lambda file_name: named is not None and file_name not in named)
    copies_never_opened: dict[str, list[str]] = {}  # stray file -> tensors an indexed shard holds too
    for file_name in sorted(files, key=stray):
        header = headers.get(file_name)
        if header is None:
            continue
        for tensor in header.tensors:
            holders.setdefault(tensor.name, []).append(file_name)
            if tensor.name in owner:
                if stray(file_name) or stray(owner[tensor.name][0]):
                    if not stray(owner[tensor.name][0]):
                        copies_never_opened.setdefault(file_name, []).append(tensor.name)
                    continue
                findings.append(_stored_twice(owner[tensor.name], (file_name, tensor), same_bytes))
                continue
            owner[tensor.name] = (file_name, tensor)
            entries.append(TensorEntry(
                served_name=served_name_for(family, tensor.name),
                stored_name=tensor.name,
                dtype=tensor.dtype,
                shape=tensor.shape,
                file=file_name,
                byte_range=(tensor.start, tensor.end),
            ))

    if listed is not None:
        findings += _index_consistency(listed, index_total, headers, holders, entries)
    for file_name, tensors in copies_never_opened.items():
        findings.append(Finding(
            "IDX004",
            f"{file_name} is not named by {SAFETENSORS_INDEX}, so a loader following the index (TokenSpeed "
            f"does) never opens it; its {len(tensors)} tensor(s) that the indexed shards also hold "
            f"({', '.join(printable_name(t) for t in tensors[:3])}{', ...' if len(tensors) > 3 else ''}) are "
            "served from those shards. Delete the stale file, or regenerate the index if it is the one to serve.",
            file=file_name,
            tensor=tensors[0],
            detail={"stray_shard": True, "tensors_also_indexed": len(tensors)},
            severity=Severity.WARNING,
        ))
    return entries, findings


def _stored_twice(first: tuple[str, Any], second: tuple[str, Any], same_bytes) -> Finding:
    """IDX005 for a tensor found in two files (see `stored_twice_finding`)."""
    (first_file, first_tensor), (second_file, second_tensor) = first, second
    return stored_twice_finding(
        second_tensor.name, first_file, second_file,
        layouts=((first_tensor.dtype, tuple(first_tensor.shape)), (second_tensor.dtype, tuple(second_tensor.shape))),
        byte_ranges=((first_tensor.start, first_tensor.end), (second_tensor.start, second_tensor.end)),
        comparison=same_bytes(first, second),
    )


def stored_twice_finding(tensor: str, first_file: str, second_file: str, *, layouts, byte_ranges,
                         comparison: str) -> Finding:
    """IDX005 for a tensor found in two files. TokenSpeed loads every copy,
    the file read last winning, in glob order (model_loader/loader.py@4b9766f6:287-311,
    weight_utils.py@4b9766f6:254-272): copies that serve the same values
    (`copies.serves_the_same`) are a warning; copies that differ serve
    whichever file came last, without a word, an error. Copies that were not compared
    (too large for a header-only check) stay an error until `--deep`
    compares them (`resolve_stored_twice`); a copy that cannot be read
    back is an error that says so."""
    name = printable_name(tensor)
    (first_dtype, first_shape), (second_dtype, second_shape) = layouts
    compared = comparison not in (NOT_COMPARED, UNREADABLE)
    # identical: the same values (exactly, across dtypes that widen into
    # one another); serves_same: the same parameter values once served
    detail = {"files": [first_file, second_file], "comparison": comparison,
              "identical": comparison == SAME if compared else None,
              "serves_same": serves_the_same(comparison) if compared else None,
              "byte_ranges": [list(byte_ranges[0]), list(byte_ranges[1])] if byte_ranges else None,
              "layouts": [[first_dtype, list(first_shape)], [second_dtype, list(second_shape)]]}
    if serves_the_same(comparison):
        who = ("the engine serves the same values whichever it reads last (a trainer resuming from this "
               "checkpoint, or a launch with --dtype float32, would not)" if comparison == SAME_AS_SERVED else
               "every loader gets the same values")
        return Finding(
            "IDX005",
            f"{name} is stored in both {first_file} and {second_file}, "
            f"{alike_text(comparison, first_dtype, second_dtype)}: {who}. Remove one copy to save the space.",
            file=second_file, tensor=tensor, detail=detail, severity=Severity.WARNING,
        )
    if comparison == NOT_COMPARED:
        size = (f"{max(end - start for start, end in byte_ranges) / 2**20:,.1f} MiB each, " if byte_ranges else "")
        how = (f"({size}over the {copy_limits.COMPARE_LIMIT_HEADER_ONLY >> 20} MiB a header-only "
               "check compares; `dspark check --deep` compares them)")
    elif comparison == UNREADABLE:
        how = "(one copy could not be read back to compare them: a truncated or unreadable file)"
    elif (first_dtype, first_shape) != (second_dtype, second_shape):
        how = f"as {first_dtype}{list(first_shape)} and {second_dtype}{list(second_shape)}, with different values"
    else:
        how = "with different bytes"
    return Finding(
        "IDX005",
        f"{name} is stored in both {first_file} and {second_file} {how}; TokenSpeed loads both and "
        "serves the one it reads last, in the order the file system lists the files (an unsorted glob), so "
        "which one is served cannot be told. Keep the copy the draft was trained with and delete the other "
        "(and its entry in the index).",
        file=second_file, tensor=tensor, detail=detail,
    )


def resolve_stored_twice(finding: Finding, reader) -> Finding:
    """An IDX005 whose copies were not compared, compared now through the
    checkpoint's `reader` (`--deep`: payloads are read anyway); any other
    finding as it is."""
    detail = finding.detail or {}
    if finding.code != "IDX005" or detail.get("comparison") != NOT_COMPARED:
        return finding
    files, ranges, layouts = detail["files"], detail["byte_ranges"], detail["layouts"]
    copies = [TensorEntry(served_name=finding.tensor, stored_name=finding.tensor, dtype=dtype, shape=tuple(shape),
                          file=file, byte_range=tuple(byte_range))
              for file, byte_range, (dtype, shape) in zip(files, ranges, layouts)]
    comparison = compare_copies(reader, copies[0], copies[1], limit=None)
    return stored_twice_finding(finding.tensor, files[0], files[1],
                                layouts=tuple((dtype, tuple(shape)) for dtype, shape in layouts),
                                byte_ranges=tuple(tuple(r) for r in ranges), comparison=comparison)


def copies_compared_through(reader):
    """A `same_bytes` for `entries_from_headers`: the two copies read
    through the checkpoint's `reader` and compared by value, then as served
    (`copies.compare_copies`), up to
    `COMPARE_LIMIT_HEADER_ONLY` a copy (NOT_COMPARED beyond). A tensor
    stored twice is one of the cases where a header-only check reads
    payload: which verdict is right depends on it."""
    def same_bytes(first: tuple[str, Any], second: tuple[str, Any]) -> str:
        copies = [TensorEntry(served_name=tensor.name, stored_name=tensor.name, dtype=tensor.dtype,
                              shape=tuple(tensor.shape), file=file_name, byte_range=(tensor.start, tensor.end))
                  for file_name, tensor in (first, second)]
        return compare_copies(reader, copies[0], copies[1], limit=copy_limits.COMPARE_LIMIT_HEADER_ONLY)

    return same_bytes


def merged_metadata(headers: dict[str, SafetensorsHeader]) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for header in headers.values():
        if header.metadata:
            metadata.update(header.metadata)
    return metadata


def _read_index(index_path: Path) -> tuple[dict[str, str] | None, Any, list[Finding]]:
    return index_from(lambda: parse_json_object(index_path))


def index_from(load: Callable[[], dict[str, Any]]) -> tuple[dict[str, str] | None, Any, list[Finding]]:
    """The index's weight map and total size, or IDX001 saying why not;
    `load` reads the index file (local or remote) as a JSON object."""
    def bad(message: str) -> tuple[None, None, list[Finding]]:
        return None, None, [Finding(
            "IDX001",
            f"{SAFETENSORS_INDEX}: {message}. Regenerate the index from the shards.",
            file=SAFETENSORS_INDEX,
        )]

    try:
        index = load()
    except (ValueError, OSError) as exc:
        return bad(str(exc))
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        return bad("weight_map is missing or does not map tensor names to shard file names")
    metadata = index.get("metadata") or {}
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    return dict(weight_map), total, []


def _index_consistency(
    listed: dict[str, str],
    index_total: Any,
    headers: dict[str, SafetensorsHeader],
    holders: dict[str, list[str]],
    entries: list[TensorEntry],
) -> list[Finding]:
    findings: list[Finding] = []
    for name, shard in sorted(listed.items()):
        if shard not in headers:
            continue  # missing, unsafe or corrupt shard: reported already
        actual = holders.get(name, [])
        if shard not in actual:
            where = f" (it is in {', '.join(actual)})" if actual else ""
            findings.append(Finding(
                "IDX003",
                f"{SAFETENSORS_INDEX} lists {printable_name(name)} in {shard}, but that shard does not "
                f"hold it{where}. Regenerate the index from the shards.",
                file=shard,
                tensor=name,
                detail={"shard": shard, "actual": actual[0] if actual else None},
            ))
    named_shards = set(listed.values())
    for entry in entries:
        stray = entry.file not in named_shards
        if entry.stored_name in listed and not stray:
            continue
        if entry.stored_name in listed:
            # Listed under another shard (often one that is missing): the
            # loader opens only the files the index names, so this copy,
            # the only one there is, never loads
            # (model_loader/weight_utils.py@f4d8ec6e:254-272).
            why = (f"{SAFETENSORS_INDEX} lists it in {listed[entry.stored_name]} and does not name "
                   f"{entry.file} at all, so a loader following the index never opens the file and the "
                   "tensor does not load.")
        elif stray:
            why = (f"{SAFETENSORS_INDEX} does not list it and does not name the file at all, so a loader "
                   "following it never opens it.")
        else:
            why = (f"{SAFETENSORS_INDEX} does not list it; a loader that reads whole shards loads it anyway, "
                   "others skip it.")
        findings.append(Finding(
            "IDX004",
            f"{entry.file} holds {printable_name(entry.stored_name)}, but {why} Regenerate the index.",
            file=entry.file,
            tensor=entry.stored_name,
            detail={"stray_shard": stray},
        ))
    if index_total is not None:
        # The bytes of the shards the index names; a stray file is IDX004's.
        named = set(listed.values())
        actual = sum(e.nbytes for e in entries if e.file in named)
        complete = all(s in headers for s in set(listed.values()))
        if complete and index_total != actual:
            findings.append(Finding(
                "IDX006",
                f"{SAFETENSORS_INDEX}: metadata.total_size is {index_total!r} but the shards hold "
                f"{actual:,} bytes of tensors; the index is stale. Regenerate it.",
                file=SAFETENSORS_INDEX,
                detail={"total_size": index_total, "actual": actual},
            ))
    return findings
