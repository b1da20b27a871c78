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

A float table is read too (F16, BF16, F32, F64, as Python floats): vLLM
copies d2t into an int64 parameter, truncating each entry toward zero
(rules/token_map.py), so whether it serves the table as trained is in its
values. An integer table's values are Python ints.
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
# BF16 has no numpy dtype: its 16 bits are the high half of a float32.
_FLOAT_VIEWS = {"F16": "<f2", "BF16": "<u2", "F32": "<f4", "F64": "<f8"}
_CHUNK_BYTES = 1024 * 1024


class TokenMapReader:
    """`reader(count)`: the first `count` values of the checkpoint's token
    map (fewer when the table is shorter), Python ints for an integer table
    and floats for a float one, or None when it cannot be read here
    (absent, neither an integer nor a float table, past the cap, not read
    by range in a header-only check, or unreadable: the payload scan or the
    table's own rules report those). `judged` holds the served names whose
    values a rule was handed."""

    def __init__(self, checkpoint: Checkpoint, *, payloads_read: bool) -> None:
        self._checkpoint = checkpoint
        self._payloads_read = payloads_read
        self._entry = _token_map_entry(checkpoint)
        self._read: dict[int, list[int] | list[float] | None] = {}
        self.judged: set[str] = set()

    def __call__(self, count: int) -> Sequence[int] | Sequence[float] | None:
        if count not in self._read:
            self._read[count] = self._values(count)
        values = self._read[count]
        if values is not None and self._entry is not None:
            self.judged.add(self._entry.served_name)
        return values

    def _values(self, count: int) -> list[int] | list[float] | None:
        entry = self._entry
        view = (_INT_VIEWS.get(entry.dtype) or _FLOAT_VIEWS.get(entry.dtype)) if entry is not None else None
        if entry is None or view is None or len(entry.shape) != 1 or count < 0:
            return None
        if entry.byte_range is None and not self._payloads_read:
            return None  # a .pt or DCP payload needs torch: read only when every payload is
        # numpy only here, when a rule asks for the values: a check that
        # asks for none (a K3 draft) does not import it (docs/check.md).
        import numpy as np

        itemsize = np.dtype(view).itemsize
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
        values = np.frombuffer(data, dtype=view)
        if entry.dtype == "BF16":
            values = (values.astype(np.uint32) << 16).view(np.float32)
        return values.tolist()


def _token_map_entry(checkpoint: Checkpoint) -> TensorEntry | None:
    """The first stored tensor served as the family's token map (the one
    the inventory judges; a second one is INV006)."""
    family = checkpoint.family
    names = {rule.name for rule in family.tensors if rule.role == "token_map"} if family is not None else set()
    return next((e for e in checkpoint.entries if e.served_name in names), None)
