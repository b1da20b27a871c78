"""The lazy tensor inventory: what a checkpoint ships, read from headers.

Readers in `dspark.converters` produce `TensorEntry` records without reading
payloads; the rules here and in `rules.py` compare them with what a config
implies. This module opens no file.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from dspark.schema.dtypes import nbytes_of
from dspark.schema.records import record


@record
class TensorEntry:
    """One stored tensor.

    `served_name` is the name the serving loader sees (wrappers stripped,
    family renames applied); `stored_name` is the key in the file. `file` is
    relative to the checkpoint root. `byte_range` is the absolute
    [start, end) of the payload in `file` when the format allows reading by
    range (safetensors); other formats leave it None and put what their
    reader needs in `locator`.
    """

    served_name: str
    stored_name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    byte_range: tuple[int, int] | None = None
    locator: Any = field(default=None, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.served_name,
            "stored_name": self.stored_name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "file": self.file,
            "byte_range": list(self.byte_range) if self.byte_range else None,
            "nbytes": self.nbytes,
        }


@record
class PayloadStats:
    """What a payload scan learned about one tensor (see `--deep`)."""

    nonfinite_count: int
    all_zero: bool
    all_one: bool
    # Integer tensors: the least and greatest value[i] + i over the flat
    # index (where a `d2t` table sends draft token i); None for floats.
    index_offset_min: int | None = None
    index_offset_max: int | None = None


def has_control_characters(name: str) -> bool:
    """C0 and C1 control characters, which no tensor or file name needs."""
    return any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in name)


def undecodable_as_bytes(text: str) -> str:
    """`text` with each byte a file name held that is not UTF-8 (Python
    keeps it as a lone surrogate, U+DC80-U+DCFF, os.fsdecode) written as
    the byte it is, `\\xff`: one spelling on the page, in errors, in JSON
    (where a lone surrogate is no text a strict parser takes) and in
    annotations."""
    if not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    return "".join(f"\\x{ord(ch) - 0xDC00:02x}" if "\udc80" <= ch <= "\udcff" else ch for ch in text)


def printable_name(name: str) -> str:
    """A tensor or file name made safe to print: control and other
    non-printable characters escaped, so a hostile name cannot rewrite the
    terminal or forge report lines; a byte that is not UTF-8 as `\\xff`."""
    if name.isprintable():
        return name
    name = undecodable_as_bytes(name)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in name)
