"""Payload statistics for `dspark check --deep`, with numpy on raw bits.

Finiteness is decided on the exponent bits, so every float format (bf16 and
fp8 included, which numpy cannot compute with) takes the same path, and no
value is ever converted. Memory is bounded by the chunk size.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np

from dspark.schema.inventory import PayloadStats, TensorEntry

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024

# dtype -> (unsigned view, exponent mask or None, bit pattern of 1.0, sign-free mask)
_BIT_LAYOUT: dict[str, tuple[type, int | None, int, int]] = {
    "F64": (np.uint64, 0x7FF0000000000000, 0x3FF0000000000000, 0x7FFFFFFFFFFFFFFF),
    "F32": (np.uint32, 0x7F800000, 0x3F800000, 0x7FFFFFFF),
    "F16": (np.uint16, 0x7C00, 0x3C00, 0x7FFF),
    "BF16": (np.uint16, 0x7F80, 0x3F80, 0x7FFF),
    "F8_E5M2": (np.uint8, 0x7C, 0x3C, 0x7F),
    # e4m3fn has no infinity; only S.1111.111 is NaN.
    "F8_E4M3": (np.uint8, None, 0x38, 0x7F),
}
_INT_VIEWS = {
    "BOOL": np.uint8, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
    "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64,
}


def scan_chunks(dtype: str, chunks: Iterable[memoryview]) -> PayloadStats:
    nonfinite = 0
    all_zero = True
    all_one = True
    if dtype in _BIT_LAYOUT:
        view, exponent, one, magnitude = _BIT_LAYOUT[dtype]
        for chunk in chunks:
            bits = np.frombuffer(chunk, dtype=view)
            if exponent is None:
                nonfinite += int(np.count_nonzero((bits & magnitude) == magnitude))
            else:
                nonfinite += int(np.count_nonzero((bits & exponent) == exponent))
            if all_zero:
                all_zero = not np.any(bits & magnitude)
            if all_one:
                all_one = bool(np.all(bits == one))
    else:
        view = _INT_VIEWS[dtype]
        for chunk in chunks:
            values = np.frombuffer(chunk, dtype=view)
            if all_zero:
                all_zero = not np.any(values)
            if all_one:
                all_one = bool(np.all(values == 1))
    return PayloadStats(nonfinite_count=nonfinite, all_zero=all_zero, all_one=all_one)


def scan_entries(
    reader,
    entries: Iterable[TensorEntry],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[TensorEntry, PayloadStats]]:
    """Stream every entry's payload once; `progress(n)` is told each chunk's
    byte count."""
    for entry in entries:
        def counted(chunks: Iterable[memoryview]) -> Iterator[memoryview]:
            for chunk in chunks:
                yield chunk
                if progress is not None:
                    progress(len(chunk))

        yield entry, scan_chunks(entry.dtype, counted(reader.iter_chunks(entry, chunk_bytes)))
