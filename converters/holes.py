"""Weight files whose payload was never written: found from `os.stat` alone.

A download that preallocates its file (by seeking or truncating to the final
size) and stops early leaves a file of the right length whose tail is a
hole: the header parses, every byte range is inside the file, and the
payload reads as zeros. A header-only check cannot see zeros, but the
filesystem can say how little of the file is allocated (`st_blocks`), so
this costs one `stat` per file and no read.

To stay quiet on ordinary files and filesystems, a file is flagged only
when the filesystem reports its blocks at all (some network and FUSE
filesystems report 0 for every file), when less than half of the payload
bytes are allocated, and when at least `MIN_MISSING_BYTES` are missing.
Compression (ZFS, btrfs) shrinks `st_blocks` too, but trained weights do
not compress by half: bf16 and fp32 values carry too much entropy. Past
that margin it is an error (PAY006): the values are zeros, which the
engine serves, and the gate's full read fails the same file. A fixture
that marks its metadata `dspark_payload: hole` is said to be one (PAY007).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name

# `st_blocks` counts 512-byte units on every POSIX system, whatever the
# filesystem's own block size.
STAT_BLOCK_BYTES = 512
# Below this much missing, rounding to filesystem blocks and tiny files
# make the ratio meaningless.
MIN_MISSING_BYTES = 1024 * 1024
# Flag when fewer than this share of the payload bytes are allocated.
MAX_ALLOCATED_SHARE = 0.5


def allocated_bytes(stat: os.stat_result) -> int | None:
    """Bytes the filesystem has allocated for a file, or None where it does
    not say (no `st_blocks` on the platform, or 0 reported for a non-empty
    file, as some network and FUSE filesystems do)."""
    blocks = getattr(stat, "st_blocks", None)
    if blocks is None or (blocks == 0 and stat.st_size > 0):
        return None
    return blocks * STAT_BLOCK_BYTES


def hole_finding(file: str, payload_bytes: int, stat: os.stat_result) -> Finding | None:
    """PAY006 when `file` (shown as given) holds `payload_bytes` of tensor
    data but the filesystem has allocated far fewer bytes for it."""
    allocated = allocated_bytes(stat)
    if allocated is None or payload_bytes <= 0:
        return None
    missing = payload_bytes - allocated
    if missing < MIN_MISSING_BYTES or allocated >= MAX_ALLOCATED_SHARE * payload_bytes:
        return None
    return Finding(
        "PAY006",
        f"{printable_name(file)}: only {allocated:,} bytes of its {payload_bytes:,} payload bytes are "
        "on disk; the rest is a hole (a sparse file), which reads as zeros. This is what a preallocated "
        "download that never finished looks like. Re-download or re-copy the file; "
        "`dspark check --deep` reads every value.",
        file=file,
        detail={"allocated_bytes": allocated, "payload_bytes": payload_bytes, "file_bytes": stat.st_size},
    )


# A header-only fixture marks its metadata so (examples/fabricate_parts.py):
# its hole is meant, and is said to be, not failed as a lost download.
HOLE_MARK = ("dspark_payload", "hole")


def _marked_as_a_hole(path: Path) -> bool:
    """Whether `path`'s safetensors metadata says its payload is a hole on
    purpose. Read only for a file already found to be one."""
    from dspark.converters.readers.safetensors_io import read_header

    try:
        metadata = read_header(path).metadata or {}
    except Exception:  # noqa: BLE001 - an unreadable header is the readers' own finding
        return False
    return metadata.get(HOLE_MARK[0]) == HOLE_MARK[1]


def fixture_finding(file: str, finding: Finding) -> Finding:
    return Finding(
        "PAY007",
        f"{printable_name(file)}: a header over a hole on purpose (its metadata says "
        f"{HOLE_MARK[0]}: {HOLE_MARK[1]}): a fixture for header-only checks, whose values are zeros; never "
        "deploy it.",
        file=file,
        detail=dict(finding.detail),
    )


def hole_findings(root: Path, entries: Iterable[TensorEntry]) -> list[Finding]:
    """PAY006 for every weight file under `root` whose tensors' bytes are
    mostly unallocated. Only entries with a byte range count (safetensors):
    those bytes are known to lie in that file, where a DCP tensor split
    over ranks is not. Files that cannot be stat'ed are left to the readers'
    own findings."""
    payload: dict[str, int] = defaultdict(int)
    for entry in entries:
        if entry.byte_range is not None:
            payload[entry.file] += entry.byte_range[1] - entry.byte_range[0]
    findings = []
    for file, nbytes in sorted(payload.items()):
        try:
            stat = os.stat(root / file)
        except (OSError, ValueError):
            continue
        finding = hole_finding(file, nbytes, stat)
        if finding is not None:
            findings.append(fixture_finding(file, finding) if _marked_as_a_hole(root / file) else finding)
    return findings
