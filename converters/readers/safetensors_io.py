"""safetensors files, read header-first and by byte range, without torch.

The header is untrusted JSON; `read_header` validates all of it (DESIGN §3)
before any offset is used, and raises `CheckpointError` (code STF001) naming
the file, the tensor and the reason.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterator

from dspark.converters.json_input import JsonInputError, loads_strict
from dspark.converters.readers import positional
from dspark.schema.dtypes import DTYPE_ITEMSIZE
from dspark.schema.errors import CheckpointError
from dspark.schema.inventory import has_control_characters, printable_name
from dspark.schema.records import record

MAX_HEADER_BYTES = 100 * 1024 * 1024
HEADER_LENGTH_BYTES = 8


@record
class HeaderTensor:
    """One tensor of a safetensors header."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    # absolute [start, end) within the file
    start: int
    end: int


@record
class SafetensorsHeader:
    """A safetensors file's header, read without its payload."""

    path: Path
    tensors: tuple[HeaderTensor, ...]  # in file order
    metadata: dict[str, str] | None
    header_bytes: int  # length of the JSON header
    payload_bytes: int
    file_bytes: int


def read_header(path: Path, display_name: str | None = None) -> SafetensorsHeader:
    """Read and fully validate the header of one safetensors file."""
    shown = display_name or str(path)

    def corrupt(reason: str, message: str, tensor: str | None = None) -> CheckpointError:
        return _corrupt(shown, reason, message, tensor)

    try:
        with open(path, "rb") as handle:
            file_bytes = os.fstat(handle.fileno()).st_size
            header_len = _header_length(handle.read(HEADER_LENGTH_BYTES), file_bytes, corrupt)
            raw = handle.read(header_len)
    except PermissionError:
        # The file is there and may be whole: this user may not read it.
        # Not the draft's fault (exit 2, naming the file), as for config.json.
        raise
    except OSError as exc:
        raise CheckpointError(
            f"{shown}: cannot read: {exc.strerror or exc}",
            code="STF001",
            path=shown,
            hint="Check the file's permissions and that it is fully written.",
        ).with_reason("unreadable") from exc
    return _parse_header(raw, header_len, file_bytes, path, corrupt)


# A remote header is fetched with one range request of this many bytes
# first (a K3 draft's header is ~10 KB); a longer header costs one more.
REMOTE_HEAD_BYTES = 64 * 1024


def read_header_from_source(source, name: str, display_name: str | None = None) -> SafetensorsHeader:
    """The same validated header, read by byte range from a remote
    `Source` (converters/sources): its size from `stat`, then one range
    read of the first `REMOTE_HEAD_BYTES`, and a second only when the
    header is longer. No payload byte is fetched beyond that first read."""
    shown = display_name or name

    def corrupt(reason: str, message: str, tensor: str | None = None) -> CheckpointError:
        return _corrupt(shown, reason, message, tensor)

    try:
        file_bytes = source.stat(name)
        if file_bytes is None:
            raise CheckpointError(f"{shown}: no such file in {source.url}", code="STF001", path=shown,
                                  hint="Check the checkpoint's address.").with_reason("unreadable")
        head = source.read_range(name, 0, min(file_bytes, REMOTE_HEAD_BYTES))
        header_len = _header_length(head[:HEADER_LENGTH_BYTES], file_bytes, corrupt)
        raw = head[HEADER_LENGTH_BYTES:HEADER_LENGTH_BYTES + header_len]
        if len(raw) < header_len:
            raw += source.read_range(name, HEADER_LENGTH_BYTES + len(raw), HEADER_LENGTH_BYTES + header_len)
        if len(raw) < header_len:
            raise corrupt("truncated", f"the source returned {len(raw):,} of the header's {header_len:,} bytes")
    except OSError as exc:
        raise CheckpointError(
            f"{shown}: cannot read: {exc}",
            code="STF001",
            path=shown,
            hint="Check the address, your access to it and the network.",
        ).with_reason("unreadable") from exc
    return _parse_header(raw, header_len, file_bytes, Path(name), corrupt)


def _corrupt(shown: str, reason: str, message: str, tensor: str | None = None) -> CheckpointError:
    return CheckpointError(
        f"{shown}: {message}",
        code="STF001",
        path=shown,
        tensor=tensor,
        hint="Re-export or re-download this file; it is not a valid safetensors file.",
    ).with_reason(reason)


def _header_length(prefix: bytes, file_bytes: int, corrupt) -> int:
    if len(prefix) < HEADER_LENGTH_BYTES:
        raise corrupt("truncated", f"file is {file_bytes} bytes, too short for a header length")
    (header_len,) = struct.unpack("<Q", prefix)
    if header_len > MAX_HEADER_BYTES:
        raise corrupt("header_too_large", f"header length {header_len:,} exceeds the 100 MiB limit")
    if HEADER_LENGTH_BYTES + header_len > file_bytes:
        raise corrupt(
            "header_out_of_file",
            f"header length {header_len:,} runs past the end of the {file_bytes:,}-byte file",
        )
    return header_len


def _parse_header(raw: bytes, header_len: int, file_bytes: int, path: Path, corrupt) -> SafetensorsHeader:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise corrupt("not_utf8", "header is not valid UTF-8") from None
    try:
        header = loads_strict(text)
    except JsonInputError as exc:
        if exc.reason == "duplicate_key":
            raise corrupt("duplicate_key", f"header names {printable_name(exc.field)!r} twice", exc.field) from None
        if exc.reason == "nonfinite":
            raise corrupt("nonfinite", f"header is not valid JSON ({printable_name(str(exc))})") from None
        raise corrupt("not_json", f"header is not valid JSON ({printable_name(str(exc))})") from None
    if not isinstance(header, dict):
        raise corrupt("not_object", "header is not a JSON object")

    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise corrupt("bad_metadata", "__metadata__ must map strings to strings")

    tensors: list[HeaderTensor] = []
    data_start = HEADER_LENGTH_BYTES + header_len
    payload_bytes = file_bytes - data_start
    for name, info in header.items():
        shown_name = printable_name(name)
        if has_control_characters(name):
            raise corrupt("control_character", f"tensor name {shown_name!r} contains control characters", name)
        if not isinstance(info, dict):
            raise corrupt("bad_entry", f"entry for {shown_name} is not an object", name)
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if dtype not in DTYPE_ITEMSIZE:
            raise corrupt("unknown_dtype", f"{shown_name} has unknown dtype {dtype!r}", name)
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise corrupt("bad_shape", f"{shown_name} has invalid shape {shape!r}", name)
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise corrupt("bad_offsets", f"{shown_name} has invalid data_offsets {offsets!r}", name)
        numel = 1
        for dim in shape:
            numel *= dim
        if offsets[1] - offsets[0] != numel * DTYPE_ITEMSIZE[dtype]:
            raise corrupt(
                "size_mismatch",
                f"{shown_name} spans {offsets[1] - offsets[0]:,} bytes but {dtype}{shape} needs "
                f"{numel * DTYPE_ITEMSIZE[dtype]:,}",
                name,
            )
        tensors.append(HeaderTensor(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1]))

    # Offsets must tile the payload exactly: start at 0, no gap, no overlap,
    # end at the end of the file. Zero-sized tensors may sit anywhere.
    cursor = data_start
    for tensor in sorted(tensors, key=lambda t: (t.start, t.end)):
        if tensor.start == tensor.end and data_start <= tensor.start <= data_start + payload_bytes:
            continue
        if tensor.start != cursor:
            kind = "gap" if tensor.start > cursor else "overlap"
            raise corrupt(
                kind,
                f"{printable_name(tensor.name)} starts at payload offset {tensor.start - data_start:,} "
                f"but the previous tensor ends at {cursor - data_start:,} ({kind})",
                tensor.name,
            )
        cursor = tensor.end
    if cursor != file_bytes:
        raise corrupt(
            "payload_length",
            f"tensors end at payload offset {cursor - data_start:,} but the payload is "
            f"{payload_bytes:,} bytes (truncated or trailing data)",
        )
    return SafetensorsHeader(
        path=path,
        tensors=tuple(tensors),
        metadata=metadata,
        header_bytes=header_len,
        payload_bytes=payload_bytes,
        file_bytes=file_bytes,
    )


def read_range(path: Path, start: int, end: int) -> bytes:
    """The bytes [start, end) of a file, read with pread: no memory map, so
    resident memory stays at what the caller holds."""
    with open(path, "rb", buffering=0) as handle:
        return _pread_exact(handle.fileno(), start, end, path)


def _pread_exact(fd: int, start: int, end: int, path: Path) -> bytes:
    wanted = end - start
    data = positional.pread(fd, wanted, start)
    if len(data) == wanted:
        return data
    parts = [data]
    got = len(data)
    while got < wanted:
        chunk = positional.pread(fd, wanted - got, start + got)
        if not chunk:
            raise CheckpointError(
                f"{path}: file ended at byte {start + got:,} while reading [{start:,}, {end:,})",
                code="PAY003",
                path=str(path),
                hint="The file was truncated after its header was written.",
            )
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def iter_range_chunks(path: Path, start: int, end: int, chunk_bytes: int) -> Iterator[memoryview]:
    """Stream [start, end) in full chunks of `chunk_bytes` (the last may be
    shorter), reusing one buffer: the caller must be done with a chunk
    before asking for the next. Chunks stay element-aligned as long as
    `chunk_bytes` is a multiple of the item size."""
    buffer = bytearray(min(chunk_bytes, max(end - start, 1)))
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        position = start
        while position < end:
            size = min(len(buffer), end - position)
            filled = 0
            while filled < size:
                got = positional.pread_into(fd, view[filled:size], position + filled)
                if got <= 0:
                    raise CheckpointError(
                        f"{path}: file ended at byte {position + filled:,} while reading [{start:,}, {end:,})",
                        code="PAY003",
                        path=str(path),
                        hint="The file was truncated after its header was written.",
                    )
                filled += got
            yield view[:size]
            position += size
