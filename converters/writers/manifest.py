"""`dspark-manifest.json`: what `dspark convert` wrote, tensor by tensor.

The manifest records every tensor's file, dtype, shape, absolute byte range
and sha256, each file's size, the config's sha256, the dspark version and
the source format. `verify_manifest` compares a checkpoint with it: names,
files, dtypes, shapes, byte ranges and sizes, and weight files the manifest
does not list, always (headers only); payload hashes when asked
(`dspark check --deep` or `--verify`).

A folder convert wrote holds exactly the files the manifest lists, plus
`config.json`, the manifest itself and, for several shards, the index
(`written_by_convert`); `convert --force` replaces nothing else.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from dspark.converters.json_input import parse_json_object
from dspark.converters.layouts.hf import CONFIG_NAME, MANIFEST_NAME, SAFETENSORS_INDEX, is_plain_file_name
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name

MANIFEST_VERSION = 1
HASH_CHUNK_BYTES = 8 * 1024 * 1024
# Files a serving loader could read as weights: one in the folder that the
# manifest does not list changes what is served (MAN006).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".distcp", ".index.json")

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class WrittenTensor:
    """One tensor as written, and as the manifest lists it. The shard
    writer returns these; reading a manifest gives them back."""

    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    byte_range: tuple[int, int]  # absolute within the file
    sha256: str


def dspark_version() -> str:
    # Package metadata is read when a manifest is written, not when
    # `dspark check` imports this module to verify one.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dspark")
    except PackageNotFoundError:
        return "unknown"


def build_manifest(
    *,
    source_format: str,
    family: str | None,
    dtype: str | None,
    tensors: Iterable[WrittenTensor],
    files: dict[str, int],
    config_sha256: str | None,
    engine: str | None = None,
    trained_taps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest document. `tensors` are `WrittenTensor`s (in any order;
    they are listed by file, then offset, so the document is stable)."""
    ordered = sorted(tensors, key=lambda t: (t.file, t.byte_range[0], t.name))
    # The engine the config was written for (`convert --engine`); absent: the default.
    written_for = {"engine": engine} if engine else {}
    # The layers the draft was trained on (layouts/tap_origin.py reads them
    # back): convert rewrites the ids in the engine's numbering.
    taps = {"trained_taps": trained_taps} if trained_taps else {}
    return {**written_for, **taps,
        "manifest_version": MANIFEST_VERSION,
        "dspark_version": dspark_version(),
        "source_format": source_format,
        "family": family,
        "dtype": dtype,
        "config": {"file": CONFIG_NAME, "sha256": config_sha256},
        "files": [{"name": name, "size": size} for name, size in sorted(files.items())],
        "tensors": [
            {
                "name": t.name,
                "file": t.file,
                "dtype": t.dtype,
                "shape": list(t.shape),
                "byte_range": list(t.byte_range),
                "sha256": t.sha256,
            }
            for t in ordered
        ],
    }


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse(document: dict[str, Any]) -> tuple[list[WrittenTensor], dict[str, int], dict[str, Any]]:
    """Validate the document's shape; raise ValueError naming what is wrong."""
    if document.get("manifest_version") != MANIFEST_VERSION:
        raise ValueError(f"manifest_version is {document.get('manifest_version')!r}, expected {MANIFEST_VERSION}")
    files_raw = document.get("files")
    if not isinstance(files_raw, list):
        raise ValueError("'files' is not a list")
    files: dict[str, int] = {}
    for item in files_raw:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and _is_count(item.get("size"))):
            raise ValueError(f"file entry {item!r} needs a string 'name' and a byte 'size'")
        if not is_plain_file_name(item["name"]):
            raise ValueError(f"file name {printable_name(str(item['name']))!r} is not a plain file name in the folder")
        files[item["name"]] = item["size"]
    tensors_raw = document.get("tensors")
    if not isinstance(tensors_raw, list):
        raise ValueError("'tensors' is not a list")
    tensors: list[WrittenTensor] = []
    seen: set[str] = set()
    for item in tensors_raw:
        if not isinstance(item, dict):
            raise ValueError(f"tensor entry {item!r} is not an object")
        name, shape, byte_range, digest = item.get("name"), item.get("shape"), item.get("byte_range"), item.get("sha256")
        if not isinstance(name, str) or name in seen:
            raise ValueError(f"tensor entry has a missing or repeated name {name!r}")
        seen.add(name)
        if not is_plain_file_name(item.get("file")) or not isinstance(item.get("dtype"), str):
            raise ValueError(f"{printable_name(name)}: 'file' must be a plain file name and 'dtype' a string")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise ValueError(f"{printable_name(name)}: 'shape' {shape!r} is not a list of sizes")
        if not (isinstance(byte_range, list) and len(byte_range) == 2 and all(_is_count(b) for b in byte_range)):
            raise ValueError(f"{printable_name(name)}: 'byte_range' {byte_range!r} is not [start, end]")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise ValueError(f"{printable_name(name)}: 'sha256' is not 64 lowercase hex digits")
        tensors.append(WrittenTensor(name, item["file"], item["dtype"], tuple(shape), tuple(byte_range), digest))
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    if "file" in config and not is_plain_file_name(config["file"]):
        raise ValueError(f"config file {printable_name(str(config['file']))!r} is not a plain file name in the folder")
    return tensors, files, config


def read_manifest(folder: Path) -> tuple[list[WrittenTensor], dict[str, int], dict[str, Any]]:
    """The tensors, files and config record of `folder`'s manifest; raises
    ValueError (invalid) or OSError (unreadable)."""
    return _parse(parse_json_object(folder / MANIFEST_NAME))


def companion_names(files: dict[str, int], config: dict[str, Any]) -> set[str]:
    """The names convert writes beside the weight files it lists."""
    names = {MANIFEST_NAME, config.get("file") or CONFIG_NAME}
    if len(files) > 1:
        names.add(SAFETENSORS_INDEX)
    return names


def written_by_convert(folder: Path) -> tuple[bool, list[str]]:
    """Whether `folder` holds a manifest, and the entries in it that the
    manifest does not account for (sorted; folders get a trailing `/`).
    A folder convert wrote has a manifest and nothing unaccounted for.
    Raises ValueError/OSError for a manifest that cannot be read."""
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    if not (folder / MANIFEST_NAME).is_file():
        return False, [_entry_label(p) for p in entries]
    _, files, config = read_manifest(folder)
    accounted = set(files) | companion_names(files, config)
    unaccounted = [
        _entry_label(p) for p in entries
        if p.name not in accounted or p.is_symlink() or not p.is_file()
    ]
    return True, unaccounted


def _entry_label(path: Path) -> str:
    name = printable_name(path.name)
    return name + "/" if path.is_dir() and not path.is_symlink() else name


def verify_manifest(checkpoint, *, hashes: bool, digests: dict[str, str | None] | None = None) -> list[Finding]:
    """Compare `checkpoint` (an opened `Checkpoint`) with its manifest.

    `digests` (stored name -> sha256, or None for a payload that could not
    be read and is reported elsewhere) are hashes the caller computed while
    reading the payloads for another reason (`check --deep`); without them,
    `hashes=True` reads every payload here."""
    root: Path = checkpoint.root
    try:
        tensors, files, config = read_manifest(root)
    except (ValueError, OSError) as exc:
        return [Finding(
            "MAN001",
            f"{MANIFEST_NAME}: {exc}. Without a valid manifest the files cannot be verified: re-convert "
            "the source with `dspark convert` (which writes a new one), or restore the folder from the "
            "copy it came from.",
            file=MANIFEST_NAME,
        )]

    findings: list[Finding] = []

    def differs(message: str, *, tensor: str | None = None, file: str | None = None, **detail: Any) -> None:
        findings.append(Finding(
            "MAN002",
            f"{message}; the checkpoint is not what `dspark convert` wrote. Re-convert or re-copy it.",
            file=file,
            tensor=tensor,
            detail=detail,
        ))

    for name, size in sorted(files.items()):
        path = root / name
        if not path.is_file():
            differs(f"{printable_name(name)} is listed in {MANIFEST_NAME} but missing", file=name)
        elif path.stat().st_size != size:
            differs(
                f"{printable_name(name)} is {path.stat().st_size:,} bytes but {MANIFEST_NAME} says {size:,}",
                file=name, actual=path.stat().st_size, expected=size,
            )

    accounted = set(files) | companion_names(files, config)
    unlisted_weights, other_files = [], []
    for path in sorted(root.iterdir(), key=lambda p: p.name):
        if path.name in accounted:
            continue
        if path.name.endswith(WEIGHT_SUFFIXES):
            unlisted_weights.append(path.name)
        elif not path.name.startswith("."):  # .git, .gitattributes: not the checkpoint's
            other_files.append(path.name)
    for name in unlisted_weights:
        findings.append(Finding(
            "MAN006",
            f"{printable_name(name)} is in the folder but not listed in {MANIFEST_NAME}; a loader may read "
            "it as weights, so the folder is no longer what `dspark convert` wrote. Remove it, or re-convert.",
            file=name,
        ))

    shipped: dict[str, TensorEntry] = {e.stored_name: e for e in checkpoint.entries}
    listed = {t.name: t for t in tensors}
    for name, want in listed.items():
        entry = shipped.get(name)
        shown = printable_name(name)
        if entry is None:
            differs(f"{shown} is listed in {MANIFEST_NAME} but not stored", tensor=name, file=want.file)
            continue
        pairs = {
            "file": (entry.file, want.file),
            "dtype": (entry.dtype, want.dtype),
            "shape": (tuple(entry.shape), want.shape),
            "byte_range": (tuple(entry.byte_range or ()), want.byte_range),
        }
        changed = {field: pair for field, pair in pairs.items() if pair[0] != pair[1]}
        if changed:
            text = "; ".join(f"{field} {got} (manifest: {expected})" for field, (got, expected) in changed.items())
            differs(
                f"{entry.file}: {shown} differs from {MANIFEST_NAME}: {text}",
                tensor=name, file=entry.file, fields=sorted(changed),
            )
    for name, entry in shipped.items():
        if name not in listed and entry.file not in unlisted_weights:  # (MAN006 names the whole file)
            differs(f"{entry.file}: {printable_name(name)} is stored but not listed in {MANIFEST_NAME}",
                    tensor=name, file=entry.file)

    checked_hashes = 0
    if hashes and not findings:
        findings += _hash_findings(checkpoint, listed, shipped, config, digests)
        checked_hashes = len(listed)

    if not findings:
        what = "names, files, dtypes, shapes, byte ranges and sizes"
        if hashes:
            what += f", and {checked_hashes} payload hashes"
        others = ""
        if other_files:
            shown = ", ".join(printable_name(n) for n in other_files[:5]) + (", ..." if len(other_files) > 5 else "")
            others = f" {len(other_files)} other file(s) not listed and not weights: {shown}."
        findings.append(Finding(
            "MAN004",
            f"{MANIFEST_NAME}: {len(listed)} tensors match ({what}).{others}",
            file=MANIFEST_NAME,
            detail={"tensors": len(listed), "hashes": hashes, "other_files": other_files},
        ))
    return findings


def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _hash_findings(checkpoint, listed: dict, shipped: dict, config: dict, digests: dict | None) -> list[Finding]:
    from dspark.schema.errors import CheckpointError

    findings: list[Finding] = []
    config_file, config_hash = config.get("file"), config.get("sha256")
    if isinstance(config_file, str) and isinstance(config_hash, str):
        path = checkpoint.root / config_file
        try:
            actual = sha256_of_file(path) if path.is_file() else None
        except OSError:
            actual = None
        if actual != config_hash:
            findings.append(Finding(
                "MAN003",
                f"{config_file} does not hash to the value in {MANIFEST_NAME}; it was edited after "
                "conversion. Re-convert, or check the edit with `dspark check`.",
                file=config_file,
                detail={"expected": config_hash, "actual": actual},
            ))
    for name, want in listed.items():
        entry = shipped[name]
        if digests is not None:
            actual = digests.get(name)
            if actual is None:
                continue  # unreadable: the scan reported it
        else:
            digest = hashlib.sha256()
            try:
                for chunk in checkpoint.reader.iter_chunks(entry, HASH_CHUNK_BYTES):
                    digest.update(chunk)
            except CheckpointError as error:
                findings.append(Finding(error.code, error.message, file=entry.file, tensor=name))
                continue
            actual = digest.hexdigest()
        if actual != want.sha256:
            findings.append(Finding(
                "MAN003",
                f"{entry.file}: {printable_name(name)} does not hash to the value in {MANIFEST_NAME}; "
                "its bytes changed after conversion (corruption or an edit). Re-convert or re-copy it.",
                file=entry.file,
                tensor=name,
                detail={"expected": want.sha256, "actual": actual},
            ))
    return findings
