"""The values of an EAGLE-3 draft's `d2t` table, read for the rules whose
verdict depends on them.

`dspark check` is header-only unless asked to read payloads, with one
exception: the engine's verdict on a draft whose `vocab_size` exceeds the
target's depends on where `d2t` sends the head's rows (rules/target.py,
TGT004), and no header can say. The table is one integer per draft token
(a few hundred KB: 32,000 or 163,840 int64 entries), so reading it costs
what reading a header costs; only its first `count` entries are read (the
ones the head can index), never more than `READ_CAP_BYTES`, and only from
a file read by byte range (safetensors), with numpy: `check` still never
imports torch. The rules call the reader only where they need the values,
so a draft that does not need them reads nothing.
"""

from __future__ import annotations

from typing import Sequence

from dspark.converters.fused_split import iter_rows
from dspark.converters.readers import Checkpoint
from dspark.schema.errors import CheckpointError
from dspark.schema.inventory import TensorEntry

# Far above any real table (a 1M-token vocabulary in int64 is 8 MB), far
# below what would make a header-only check read weights.
READ_CAP_BYTES = 16 * 1024 * 1024
_INT_VIEWS = {"I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "u1", "U16": "<u2", "U32": "<u4",
              "U64": "<u8"}
_CHUNK_BYTES = 1024 * 1024


class TokenMapReader:
    """`reader(count)`: the first `count` values of the checkpoint's token
    map as Python ints (fewer when the table is shorter), or None when it
    cannot be read here (absent, not an integer table, past the cap, not
    read by range in a header-only check, or unreadable: the payload scan
    or the table's own rules report those). `judged` holds the served names
    whose values a rule was handed."""

    def __init__(self, checkpoint: Checkpoint, *, payloads_read: bool) -> None:
        self._checkpoint = checkpoint
        self._payloads_read = payloads_read
        self._entry = _token_map_entry(checkpoint)
        self._read: dict[int, list[int] | None] = {}
        self.judged: set[str] = set()

    def __call__(self, count: int) -> Sequence[int] | None:
        if count not in self._read:
            self._read[count] = self._values(count)
        values = self._read[count]
        if values is not None and self._entry is not None:
            self.judged.add(self._entry.served_name)
        return values

    def _values(self, count: int) -> list[int] | None:
        entry = self._entry
        if entry is None or entry.dtype not in _INT_VIEWS or len(entry.shape) != 1 or count < 0:
            return None
        if entry.byte_range is None and not self._payloads_read:
            return None  # a .pt or DCP payload needs torch: read only when every payload is
        # numpy only here, when a rule asks for the values: a check that
        # asks for none (a K3 draft) does not import it (docs/check.md).
        import numpy as np

        itemsize = np.dtype(_INT_VIEWS[entry.dtype]).itemsize
        nbytes = min(count, entry.shape[0]) * itemsize
        if nbytes > READ_CAP_BYTES:
            return None
        try:
            chunks = self._checkpoint.reader.iter_chunks(entry, _CHUNK_BYTES)
            data = b"".join(bytes(chunk) for chunk in iter_rows(chunks, 0, nbytes))
        except (CheckpointError, OSError):
            return None
        if len(data) != nbytes:
            return None
        return np.frombuffer(data, dtype=_INT_VIEWS[entry.dtype]).tolist()


def _token_map_entry(checkpoint: Checkpoint) -> TensorEntry | None:
    """The first stored tensor served as the family's token map (the one
    the inventory judges; a second one is INV006)."""
    family = checkpoint.family
    names = {rule.name for rule in family.tensors if rule.role == "token_map"} if family is not None else set()
    return next((e for e in checkpoint.entries if e.served_name in names), None)
