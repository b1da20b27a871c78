"""Streaming safetensors writer: plan the shards, then write each one
tensor by tensor, hashing as the bytes go by.

The files are laid out exactly as the safetensors library lays them out:
`__metadata__` first, then the tensors in payload order, which is by dtype
(the library's dtype order, descending, so wider items come first and every
tensor stays aligned to its item size) and then by name; the header is
padded with spaces to 8 bytes. The same tensors give the same bytes as
`safetensors.save_file`.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from dspark.converters.layouts.hf import shard_file_name
from dspark.converters.writers.atomic import write_all, write_json
from dspark.converters.writers.manifest import WrittenTensor
from dspark.schema.dtypes import nbytes_of
from dspark.schema.errors import CheckpointError, UsageError

# `--max-shard-size`'s default, as HF's `save_pretrained` shards.
DEFAULT_MAX_SHARD_SIZE = "5GB"
HEADER_METADATA = {"format": "pt"}
HEADER_ALIGNMENT = 8

_SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}


def parse_size(text: str | int) -> int:
    """`5GB` -> 5_000_000_000; `512MiB` -> 536_870_912; a bare number is bytes."""
    if isinstance(text, int):
        value = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
        unit = match.group(2).upper() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise UsageError(
                f"--max-shard-size {text!r} is not a size.",
                hint="Use a number of bytes or a unit: 500MB, 5GB, 2GiB.",
            )
        value = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if value <= 0:
        raise UsageError(f"--max-shard-size {text!r} must be positive.", hint="For example: 5GB.")
    return value


def natural_key(name: str) -> tuple:
    """`layers.2.x` before `layers.10.x`: digit runs compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor as it will be written."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)


@dataclass
class ShardPlan:
    file: str
    tensors: list[PlannedTensor] = field(default_factory=list)

    @property
    def payload_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def file_bytes(self) -> int:
        return len(safetensors_header(self.tensors)) + self.payload_bytes

    def to_dict(self) -> dict:
        return {
            "file": self.file,
            "tensors": [t.name for t in self.tensors],
            "payload_bytes": self.payload_bytes,
            "file_bytes": self.file_bytes,
        }


def _entry_bound(tensor: PlannedTensor) -> int:
    """An upper bound on the header bytes one tensor adds (offsets taken at
    20 digits each), so shard planning never needs a second pass."""
    entry = {"dtype": tensor.dtype, "shape": list(tensor.shape), "data_offsets": [10**19, 10**19]}
    return len(json.dumps({tensor.name: entry}, separators=(",", ":")).encode()) + 1


def plan_shards(tensors: Iterable[PlannedTensor], max_shard_bytes: int) -> list[ShardPlan]:
    """Greedy in the given order: a shard takes tensors while the whole
    file (header included) stays within `max_shard_bytes`; a tensor larger
    than the limit gets a shard of its own."""
    fixed = len(safetensors_header([])) + HEADER_ALIGNMENT  # padding at most 7 bytes more
    groups: list[list[PlannedTensor]] = []
    size = 0
    for tensor in tensors:
        grows = tensor.nbytes + _entry_bound(tensor)
        if groups and groups[-1] and size + grows <= max_shard_bytes:
            groups[-1].append(tensor)
            size += grows
        else:
            groups.append([tensor])
            size = fixed + grows
    if not groups:
        groups = [[]]
    return [ShardPlan(shard_file_name(i, len(groups)), group) for i, group in enumerate(groups)]


# The safetensors library's dtype order (its Rust enum), lowest first.
_DTYPE_RANK = {
    code: rank
    for rank, code in enumerate(
        ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"]
    )
}


def payload_order(tensors: Iterable[PlannedTensor]) -> list[PlannedTensor]:
    """The safetensors library's payload order: dtype descending (wider
    items first, which keeps every tensor aligned), then name."""
    return sorted(tensors, key=lambda t: (-_DTYPE_RANK[t.dtype], t.name))


def safetensors_header(tensors: Iterable[PlannedTensor]) -> bytes:
    """The 8-byte length plus the JSON header, padded with spaces."""
    entries: dict[str, dict] = {}
    offset = 0
    for tensor in payload_order(tensors):
        end = offset + tensor.nbytes
        entries[tensor.name] = {"dtype": tensor.dtype, "shape": list(tensor.shape), "data_offsets": [offset, end]}
        offset = end
    document = {"__metadata__": HEADER_METADATA, **entries}
    raw = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    raw += b" " * (-(len(raw) + 8) % HEADER_ALIGNMENT)
    return struct.pack("<Q", len(raw)) + raw


# Yields a tensor's bytes in chunks. The writer hashes and writes them on
# other threads, so a chunk must stay untouched after it is yielded: when the
# writer asks for the next chunk it may still hold the CHUNKS_IN_FLIGHT
# chunks before it (across tensors), and it releases them oldest first. A
# source may therefore fill a ring of CHUNKS_IN_FLIGHT + 1 buffers in turn,
# or hand out fresh buffers.
ChunkSource = Callable[[PlannedTensor], Iterable[Any]]

CHUNKS_IN_FLIGHT = 4
_END_OF_TENSOR = object()
_STOP = object()
_WRITEBACK_BYTES = 64 * 1024 * 1024


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a written range to disk now (and
    drop it from the page cache once written), so the final fsync has
    little left to wait for and a large conversion does not fill the page
    cache. Advice only: where it is unsupported, nothing happens."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


class _Stage:
    """One consumer thread that runs `work` on every item in order. `put`
    returns once the item is queued and at most `CHUNKS_IN_FLIGHT` items
    are unfinished, which is what lets a source reuse chunk buffers.

    The free places are tokens in a `queue.SimpleQueue`, not a
    `threading.Semaphore`: a conversion's SIGINT/SIGTERM handler raises in
    the producer wherever it happens to be, and inside the Semaphore's
    pure-Python Condition that can leave its lock held (the consumer then
    blocks forever on `release`) or released twice ("release unlocked
    lock"). SimpleQueue's `get` and `put` are single C calls that either
    happen or not."""

    def __init__(self, name: str, work: Callable[[Any], None]) -> None:
        self._work = work
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._room: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(CHUNKS_IN_FLIGHT):
            self._room.put(None)
        self._abort = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._abort:
                item = self._queue.get()
                if item is _STOP:
                    return
                try:
                    self._work(item)
                finally:
                    self._room.put(None)
        except BaseException as error:  # noqa: BLE001 - handed to the producer thread
            self.error = error

    def put(self, item: Any) -> None:
        while True:
            try:
                self._room.get(timeout=0.05)
                break
            except queue.Empty:
                if self.error is not None:
                    raise self.error from None
        if self.error is not None:
            self._room.put(None)
            raise self.error
        self._queue.put(item)

    def finish(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()
        if self.error is not None:
            raise self.error

    def abort(self) -> None:
        """Stop without working through what is still queued."""
        self._abort = True
        self._queue.put(_STOP)
        self._thread.join()


@dataclass(frozen=True)
class _Writeback:
    offset: int
    length: int


class _HashingSink:
    """Writes each chunk on the calling thread and hashes it on a second
    one, so that hashing a chunk overlaps reading, casting and writing the
    next (hashlib, numpy and file writes all release the GIL). On two cores
    this balances best: sha256 is about as much work as everything else.
    The hashing thread also starts the writeback of what has been written,
    which costs CPU time in the caller of `posix_fadvise`."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self._digest = hashlib.sha256()
        self.digests: list[str] = []
        self._written = self._flushed = 0
        self._hasher = _Stage("dspark-shard-hasher", self._hash)

    def _hash(self, item: Any) -> None:
        if item is _END_OF_TENSOR:
            self.digests.append(self._digest.hexdigest())
            self._digest = hashlib.sha256()
        elif isinstance(item, _Writeback):
            _start_writeback(self._handle.fileno(), item.offset, item.length)
        else:
            self._digest.update(item)

    def put(self, item: Any) -> None:
        self._hasher.put(item)
        if item is _END_OF_TENSOR:
            return
        write_all(self._handle, item)
        self._written += len(item)
        if self._written - self._flushed >= _WRITEBACK_BYTES:
            # Queued behind chunks that are already written, so the range is complete.
            self._hasher.put(_Writeback(self._flushed, self._written - self._flushed))
            self._flushed = self._written

    def finish(self) -> None:
        self._hasher.finish()

    def abort(self) -> None:
        """Stop hashing what is still queued (the file is discarded)."""
        self._hasher.abort()


def write_shard(
    path: Path,
    shard: ShardPlan,
    source: ChunkSource,
) -> list[WrittenTensor]:
    """Write one shard: header, then each tensor's bytes from `source`, in
    payload order, hashing as they go. The file is created exclusively and
    fsynced."""
    header = safetensors_header(shard.tensors)
    order = payload_order(shard.tensors)
    ranges: list[tuple[int, int]] = []
    with open(path, "xb", buffering=0) as handle:
        write_all(handle, header)
        sink = _HashingSink(handle)
        try:
            position = len(header)
            for tensor in order:
                count = 0
                for chunk in source(tensor):
                    view = memoryview(chunk).cast("B")
                    count += len(view)
                    sink.put(view)
                if count != tensor.nbytes:
                    raise CheckpointError(
                        f"{tensor.name}: the source gave {count:,} bytes but {tensor.dtype}{list(tensor.shape)} "
                        f"needs {tensor.nbytes:,}; the input changed or is corrupt.",
                        code="PAY003",
                        tensor=tensor.name,
                        hint="Re-run on an input that is not being written to.",
                    )
                sink.put(_END_OF_TENSOR)
                ranges.append((position, position + count))
                position += count
            sink.finish()
        except BaseException:
            sink.abort()
            raise
        os.fsync(handle.fileno())
    return [
        WrittenTensor(tensor.name, shard.file, tensor.dtype, tensor.shape, byte_range, digest)
        for tensor, byte_range, digest in zip(order, ranges, sink.digests)
    ]


def write_index(path: Path, written: Iterable[WrittenTensor]) -> None:
    """`model.safetensors.index.json`, with `total_size` the tensor bytes."""
    written = list(written)
    document = {
        "metadata": {"total_size": sum(w.byte_range[1] - w.byte_range[0] for w in written)},
        "weight_map": {w.name: w.file for w in sorted(written, key=lambda w: w.name)},
    }
    write_json(path, document)
