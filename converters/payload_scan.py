"""Payload statistics for `dspark check --deep`, with numpy on raw bits.

Finiteness is decided on the bit patterns, so every float format (bf16 and
fp8 included, which numpy cannot compute with) takes the same path, and no
value is ever converted. Memory is bounded by one chunk per worker.

Speed: a deep check should stream about as fast as the disk cache can be
copied. Each chunk is small enough to stay in a core's L2 cache after the
read that filled it, and the steady-state test is two read-only reductions
(a signed and an unsigned max), which need no temporary arrays: a float is
NaN/Inf iff its magnitude bits are >= the exponent mask, and such values are
the largest ones in one of the two views. The exact count, the all-zero and
the all-ones tests only run on the chunks that may need them. Tensors are
spread over a few threads (numpy and pread release the GIL).
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from dspark.schema.errors import CheckpointError
from dspark.schema.inventory import PayloadStats, TensorEntry

# About a core's L2 cache on current x86 and ARM servers: large enough that
# per-chunk Python overhead is noise, small enough that the reductions read
# what the pread just wrote from cache rather than from memory.
DEFAULT_CHUNK_BYTES = 1024 * 1024
MAX_WORKERS = 4


@dataclass(frozen=True)
class _FloatBits:
    """How to read one float format's bits (little-endian, as stored)."""

    unsigned: str  # numpy dtype of the same width
    signed: str
    # magnitude (sign cleared) at or above which a value is NaN or Inf
    nonfinite_floor: int
    one: int  # bit pattern of 1.0
    sign: int

    @property
    def magnitude(self) -> int:
        return self.sign - 1


_FLOAT_BITS: dict[str, _FloatBits] = {
    "F64": _FloatBits("<u8", "<i8", 0x7FF0000000000000, 0x3FF0000000000000, 1 << 63),
    "F32": _FloatBits("<u4", "<i4", 0x7F800000, 0x3F800000, 1 << 31),
    "F16": _FloatBits("<u2", "<i2", 0x7C00, 0x3C00, 1 << 15),
    "BF16": _FloatBits("<u2", "<i2", 0x7F80, 0x3F80, 1 << 15),
    "F8_E5M2": _FloatBits("u1", "i1", 0x7C, 0x3C, 1 << 7),
    # e4m3fn has no infinity; only S.1111.111 is NaN.
    "F8_E4M3": _FloatBits("u1", "i1", 0x7F, 0x38, 1 << 7),
}
_INT_VIEWS = {
    "BOOL": "u1", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2",
    "I32": "<i4", "U32": "<u4", "I64": "<i8", "U64": "<u8",
}


class _FloatScan:
    def __init__(self, bits: _FloatBits) -> None:
        self.bits = bits
        # NaN/Inf: positive ones are the largest signed values, negative
        # ones the largest unsigned values.
        self.signed_limit = bits.nonfinite_floor
        self.unsigned_limit = bits.sign | bits.nonfinite_floor
        self.nonfinite = 0
        self.all_zero = True
        self.all_one = True

    def update(self, chunk) -> None:
        bits = self.bits
        unsigned = np.frombuffer(chunk, dtype=bits.unsigned)
        if not unsigned.size:
            return
        signed = unsigned.view(bits.signed)
        if signed.max() >= self.signed_limit or unsigned.max() >= self.unsigned_limit:
            self.nonfinite += int(np.count_nonzero((unsigned & bits.magnitude) >= bits.nonfinite_floor))
        if self.all_zero or self.all_one:
            low, high = int(unsigned.min()), int(unsigned.max())
            if self.all_one:
                self.all_one = low == high == bits.one
            if self.all_zero:
                zeros = (0, bits.sign)  # +0.0 and -0.0
                if low not in zeros or high not in zeros:
                    self.all_zero = False
                elif low != high:
                    self.all_zero = not np.any(unsigned & bits.magnitude)

    def stats(self) -> PayloadStats:
        return PayloadStats(nonfinite_count=self.nonfinite, all_zero=self.all_zero, all_one=self.all_one)


class _IntScan:
    def __init__(self, view: str) -> None:
        self.view = view
        self.all_zero = True
        self.all_one = True
        # value[i] + i over the flat index: where a d2t table sends draft
        # token i. Integer tensors are token tables, small next to weights.
        self.seen = 0
        self.offset_min: int | None = None
        self.offset_max: int | None = None

    def update(self, chunk) -> None:
        values = np.frombuffer(chunk, dtype=self.view)
        if not values.size:
            return
        if self.view != "<u8":  # every other integer view fits int64 exactly
            shifted = values.astype(np.int64) + np.arange(self.seen, self.seen + values.size, dtype=np.int64)
            low_at, high_at = int(shifted.min()), int(shifted.max())
            self.offset_min = low_at if self.offset_min is None else min(self.offset_min, low_at)
            self.offset_max = high_at if self.offset_max is None else max(self.offset_max, high_at)
        self.seen += values.size
        if not (self.all_zero or self.all_one):
            return
        low, high = int(values.min()), int(values.max())
        self.all_zero = self.all_zero and low == high == 0
        self.all_one = self.all_one and low == high == 1

    def stats(self) -> PayloadStats:
        return PayloadStats(nonfinite_count=0, all_zero=self.all_zero, all_one=self.all_one,
                            index_offset_min=self.offset_min, index_offset_max=self.offset_max)


def payload_scanner(dtype: str) -> _FloatScan | _IntScan:
    """A scanner for one tensor of `dtype`: feed it the payload with
    `update(chunk)` (element-aligned chunks, in order), then read `stats()`.
    `dspark convert` uses one per tensor on the bytes it writes."""
    if dtype in _FLOAT_BITS:
        return _FloatScan(_FLOAT_BITS[dtype])
    return _IntScan(_INT_VIEWS[dtype])


def scan_chunks(dtype: str, chunks: Iterable[memoryview]) -> PayloadStats:
    """Statistics of one tensor's payload, handed over in element-aligned
    chunks (little-endian, C order)."""
    scanner = payload_scanner(dtype)
    for chunk in chunks:
        scanner.update(chunk)
    return scanner.stats()


@dataclass(frozen=True)
class PayloadScan:
    """One tensor's scan: `stats` (and the payload's `sha256` when asked
    for), or the `error` that stopped its read."""

    entry: TensorEntry
    stats: PayloadStats | None
    error: CheckpointError | None = None
    sha256: str | None = None


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cpus))


def scan_payloads(
    reader,
    entries: Sequence[TensorEntry],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    digest: bool = False,
) -> list[PayloadScan]:
    """Stream every entry's payload once and return one `PayloadScan` per
    entry, in entry order. A tensor whose payload cannot be read gets its
    `error` and the scan goes on with the others. `progress(n)` is told
    each chunk's byte count (from one thread at a time). With `digest`,
    each payload's sha256 is computed from the same chunks (one read
    serves both the manifest's hashes and the value checks).

    The reader's `iter_chunks` is called from up to `workers` threads at
    once, one tensor per call.
    """
    entries = list(entries)
    results: list[PayloadScan | None] = [None] * len(entries)
    # Largest first, so the last tensors to finish are small ones and the
    # threads end together.
    order = sorted(range(len(entries)), key=lambda i: entries[i].nbytes, reverse=True)
    next_index = iter(order)
    take_lock = threading.Lock()
    progress_lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def scan_one(entry: TensorEntry) -> PayloadScan:
        scanner = payload_scanner(entry.dtype)
        hasher = hashlib.sha256() if digest else None
        try:
            for chunk in reader.iter_chunks(entry, chunk_bytes):
                if stop.is_set():
                    break
                scanner.update(chunk)
                if hasher is not None:
                    hasher.update(chunk)
                if progress is not None:
                    with progress_lock:
                        progress(len(chunk))
        except CheckpointError as error:
            return PayloadScan(entry, None, error)
        except OSError as error:
            return PayloadScan(entry, None, CheckpointError(
                f"{entry.file}: cannot read: {error.strerror or error}",
                code="PAY003",
                path=entry.file,
                tensor=entry.served_name,
                hint="Check that the file is still there and readable.",
            ))
        return PayloadScan(entry, scanner.stats(), sha256=hasher.hexdigest() if hasher is not None else None)

    def work() -> None:
        try:
            while not stop.is_set():
                with take_lock:
                    index = next(next_index, None)
                if index is None:
                    return
                results[index] = scan_one(entries[index])
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            failures.append(error)
            stop.set()

    count = min(workers or default_workers(), len(entries))
    helpers = [threading.Thread(target=work, name=f"dspark-scan-{n}", daemon=True) for n in range(count - 1)]
    for thread in helpers:
        thread.start()
    try:
        work()
        for thread in helpers:
            thread.join()
    except BaseException:
        # Ctrl-C while waiting: the helpers stop after their current chunk.
        stop.set()
        raise
    if failures:
        raise failures[0]
    return [r for r in results if r is not None]


def scan_entries(
    reader,
    entries: Iterable[TensorEntry],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
) -> Iterator[tuple[TensorEntry, PayloadStats]]:
    """(entry, stats) for every entry, in entry order; raises the first
    `CheckpointError` met (use `scan_payloads` to go on past it)."""
    for scan in scan_payloads(reader, list(entries), chunk_bytes=chunk_bytes, progress=progress, workers=workers):
        if scan.error is not None:
            raise scan.error
        yield scan.entry, scan.stats
