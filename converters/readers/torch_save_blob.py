"""One tensor saved by `torch.save`, located in place without torch.

`torch.save` writes a zip archive with every member stored uncompressed:
`<archive>/data.pkl` (a small pickle that describes the tensor: storage
key, dtype, shape, strides, storage offset), `<archive>/byteorder`, and one
`<archive>/data/<key>` member per storage holding its raw bytes. A DCP
`.distcp` file is such archives back to back, one per tensor chunk, each
at the byte range the checkpoint metadata records.

`locate_saved_tensor` reads the archive's central directory and the small
members (two `pread`s for a typical archive), unpickles `data.pkl` with an
allow-list unpickler that only builds plain records (nothing from torch is
imported or called), and returns where the tensor's bytes sit in the file.
The caller then streams them by byte range, exactly as a safetensors
payload: no `torch.load`, no copy of the whole blob.

A zip member that is compressed, encrypted or split, a big-endian blob, or
a pickle that is not one plain tensor is refused with SRC004 (corrupt or
unsupported); a pickle that refers to anything off the allow-list with
SRC003, before it can run.
"""

from __future__ import annotations

import io
import pickle
import struct
from dataclasses import dataclass
from typing import Any

from dspark.converters.readers import positional
from dspark.schema.dtypes import DTYPE_ITEMSIZE, TORCH_DTYPE_NAMES
from dspark.schema.errors import CheckpointError, UnsafeInputError
from dspark.schema.inventory import printable_name

# One read at each end of the archive covers its directory and its small
# members (data.pkl, byteorder, and the local header of the tensor data).
_EDGE_READ = 4096
# data.pkl of one tensor is ~200 bytes; anything near this is not one tensor.
_MAX_PICKLE_BYTES = 1 << 20

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # 30 bytes
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes
_END_OF_DIRECTORY = struct.Struct("<IHHHHIIH")  # 22 bytes
_ZIP64_LOCATOR = struct.Struct("<IIQI")  # 20 bytes
_ZIP64_END_OF_DIRECTORY = struct.Struct("<IQHHIIQQQQ")  # 56 bytes
_LOCAL_SIGNATURE = 0x04034B50  # PK\x03\x04
_CENTRAL_SIGNATURE = 0x02014B50  # PK\x01\x02
_END_SIGNATURE = 0x06054B50  # PK\x05\x06
_ZIP64_LOCATOR_SIGNATURE = 0x07064B50  # PK\x06\x07
_ZIP64_END_SIGNATURE = 0x06064B50  # PK\x06\x06
_ZIP64_EXTRA_ID = 0x0001
_STORED = 0
_FLAG_ENCRYPTED = 0x1

# torch's legacy typed-storage class names (what `_rebuild_tensor_v2`
# pickles carry) -> safetensors dtype codes. Newer dtypes are saved as an
# `UntypedStorage` plus an explicit dtype (`_rebuild_tensor_v3`).
_STORAGE_DTYPES = {
    "DoubleStorage": "F64", "FloatStorage": "F32", "HalfStorage": "F16", "BFloat16Storage": "BF16",
    "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16", "CharStorage": "I8",
    "ByteStorage": "U8", "BoolStorage": "BOOL",
}
_DTYPE_CODES = {name: code for code, name in TORCH_DTYPE_NAMES.items()}


@dataclass(frozen=True)
class SavedTensor:
    """Where one saved tensor's values are: `data_start` is the absolute
    file offset of its storage's bytes; shape, strides and the storage
    offset are in elements, as torch keeps them."""

    dtype: str  # safetensors code
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    data_start: int
    storage_bytes: int

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE[self.dtype]

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def is_contiguous(self) -> bool:
        """C order with no gaps: the values are one byte range."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def byte_range(self) -> tuple[int, int]:
        """[start, end) of the values in the file; only for a contiguous tensor."""
        start = self.data_start + self.storage_offset * self.itemsize
        return start, start + self.numel * self.itemsize


@dataclass(frozen=True)
class _Member:
    name: str
    method: int
    flags: int
    compressed_size: int
    size: int
    local_offset: int


class _Blob:
    """Reads inside [start, start + length) of one open file; offsets are
    relative to the archive's first byte, as the zip records them."""

    def __init__(self, fd: int, start: int, length: int, fail) -> None:
        self.fd, self.start, self.length, self.fail = fd, start, length, fail
        self._cache: list[tuple[int, bytes]] = []

    def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.length:
            raise self.fail(f"zip record at [{offset:,}, {offset + size:,}) runs outside the blob's "
                            f"{self.length:,} bytes")
        for cached_at, data in self._cache:
            if cached_at <= offset and offset + size <= cached_at + len(data):
                return data[offset - cached_at:offset - cached_at + size]
        data = positional.pread(self.fd, size, self.start + offset)
        if len(data) != size:
            raise self.fail("the file ends inside the blob")
        return data

    def prefetch(self, offset: int, size: int) -> None:
        self._cache.append((offset, self.read(offset, size)))


def locate_saved_tensor(fd: int, start: int, length: int, *, shown: str, tensor: str) -> SavedTensor:
    """Find the tensor that `torch.save` wrote at [start, start + length) of
    the open file `fd`. `shown` and `tensor` name it in errors."""

    def fail(reason: str) -> CheckpointError:
        return CheckpointError(
            f"{shown}: {printable_name(tensor)}: {reason}.",
            code="SRC004",
            path=shown,
            tensor=tensor,
            hint="dspark reads DCP tensor chunks in place from torch.save's uncompressed zip archives; this "
            "one is damaged or written another way. Copy the checkpoint again from the training run, or "
            "re-save it with torch.distributed.checkpoint.",
        )

    blob = _Blob(fd, start, length, fail)
    edge = min(length, _EDGE_READ)
    blob.prefetch(length - edge, edge)
    if length > edge:
        blob.prefetch(0, min(length - edge, _EDGE_READ))
    members = _central_directory(blob, fail)

    pickles = [m for m in members.values() if m.name.endswith("/data.pkl") and m.name.count("/") == 1]
    if len(pickles) != 1:
        raise fail("not a torch.save archive (no single <archive>/data.pkl record)")
    prefix = pickles[0].name[: -len("data.pkl")]
    pickled = _member_bytes(blob, pickles[0], fail, limit=_MAX_PICKLE_BYTES)
    byteorder = members.get(prefix + "byteorder")
    if byteorder is not None and _member_bytes(blob, byteorder, fail, limit=16) != b"little":
        raise fail("saved on a big-endian machine; dspark reads little-endian tensors only")

    record = _unpickle_tensor(pickled, shown, tensor, fail)
    storage = record.storage
    data = members.get(f"{prefix}data/{storage.key}")
    if data is None:
        raise fail(f"its storage record data/{printable_name(str(storage.key))} is missing")
    data_start, data_size = _member_range(blob, data, fail)
    itemsize = DTYPE_ITEMSIZE[record.dtype]
    storage_dtype_size = DTYPE_ITEMSIZE[storage.dtype] if storage.dtype else 1
    if data_size != storage.numel * storage_dtype_size or data_size % itemsize:
        raise fail(f"storage data/{storage.key} holds {data_size:,} bytes, not the {storage.numel:,} "
                   "elements its record names")
    saved = SavedTensor(record.dtype, record.shape, record.stride, record.storage_offset, start + data_start, data_size)
    if saved.numel:
        last = saved.storage_offset + sum((size - 1) * stride for size, stride in zip(saved.shape, saved.stride))
        if (last + 1) * itemsize > data_size:
            raise fail(f"the tensor {list(saved.shape)} with strides {list(saved.stride)} at offset "
                       f"{saved.storage_offset} reaches past its storage of {data_size // itemsize:,} elements")
    return saved


def _central_directory(blob: _Blob, fail) -> dict[str, _Member]:
    tail_start = max(0, blob.length - _EDGE_READ)
    tail = blob.read(tail_start, blob.length - tail_start)
    end = _find_end_of_directory(tail)
    if end is None:
        raise fail("not a zip archive (no end-of-directory record): not written by torch.save's current "
                   "format")
    (_, disk, directory_disk, _, count, directory_size, directory_offset, _) = _END_OF_DIRECTORY.unpack_from(tail, end)
    locator_at = end - _ZIP64_LOCATOR.size
    if locator_at >= 0 and struct.unpack_from("<I", tail, locator_at)[0] == _ZIP64_LOCATOR_SIGNATURE:
        _, _, zip64_end, _ = _ZIP64_LOCATOR.unpack_from(tail, locator_at)
        record = blob.read(zip64_end, _ZIP64_END_OF_DIRECTORY.size)
        fields = _ZIP64_END_OF_DIRECTORY.unpack(record)
        if fields[0] != _ZIP64_END_SIGNATURE:
            raise fail("the zip64 end-of-directory record is damaged")
        disk, directory_disk, count, directory_size, directory_offset = fields[4], fields[5], fields[7], fields[8], fields[9]
    if disk or directory_disk:
        raise fail("a multi-part zip archive")
    directory = blob.read(directory_offset, directory_size)
    members: dict[str, _Member] = {}
    position = 0
    for _ in range(count):
        if position + _CENTRAL_HEADER.size > len(directory):
            raise fail("the zip directory is truncated")
        fields = _CENTRAL_HEADER.unpack_from(directory, position)
        if fields[0] != _CENTRAL_SIGNATURE:
            raise fail("the zip directory is damaged")
        flags, method, compressed, size = fields[3], fields[4], fields[8], fields[9]
        name_length, extra_length, comment_length, local_offset = fields[10], fields[11], fields[12], fields[16]
        name_at = position + _CENTRAL_HEADER.size
        raw_name = directory[name_at:name_at + name_length]
        extra = directory[name_at + name_length:name_at + name_length + extra_length]
        size, compressed, local_offset = _zip64_sizes(extra, size, compressed, local_offset, fail)
        name = raw_name.decode("utf-8", errors="replace")
        if name in members:
            raise fail(f"the zip archive holds {printable_name(name)} twice")
        members[name] = _Member(name, method, flags, compressed, size, local_offset)
        position = name_at + name_length + extra_length + comment_length
    return members


def _find_end_of_directory(tail: bytes) -> int | None:
    """The end-of-directory record, searched from the end (a zip comment may
    follow it; torch writes none)."""
    position = len(tail) - _END_OF_DIRECTORY.size
    while position >= 0:
        position = tail.rfind(b"PK\x05\x06", 0, position + 4)
        if position < 0:
            return None
        comment_length = struct.unpack_from("<H", tail, position + 20)[0]
        if position + _END_OF_DIRECTORY.size + comment_length == len(tail):
            return position
        position -= 1
    return None


def _zip64_sizes(extra: bytes, size: int, compressed: int, local_offset: int, fail) -> tuple[int, int, int]:
    """Values a zip64 archive moved out of the 32-bit fields: in the extra
    field 0x0001, in this order, only those whose 32-bit field is full."""
    if 0xFFFFFFFF not in (size, compressed, local_offset):
        return size, compressed, local_offset
    position = 0
    while position + 4 <= len(extra):
        header_id, data_size = struct.unpack_from("<HH", extra, position)
        data = extra[position + 4:position + 4 + data_size]
        if header_id == _ZIP64_EXTRA_ID:
            values = iter(struct.unpack_from(f"<{len(data) // 8}Q", data))
            try:
                size = next(values) if size == 0xFFFFFFFF else size
                compressed = next(values) if compressed == 0xFFFFFFFF else compressed
                local_offset = next(values) if local_offset == 0xFFFFFFFF else local_offset
            except StopIteration:
                raise fail("a zip64 size field is missing") from None
            return size, compressed, local_offset
        position += 4 + data_size
    raise fail("a zip64 member lacks its zip64 sizes")


def _member_range(blob: _Blob, member: _Member, fail) -> tuple[int, int]:
    """[offset, size) of a member's bytes inside the blob, from its local
    header (whose extra field torch uses to align the data)."""
    if member.flags & _FLAG_ENCRYPTED:
        raise fail(f"zip member {printable_name(member.name)} is encrypted")
    if member.method != _STORED or member.compressed_size != member.size:
        raise fail(f"zip member {printable_name(member.name)} is compressed (method {member.method}), "
                   "not stored as torch.save stores it")
    header = blob.read(member.local_offset, _LOCAL_HEADER.size)
    fields = _LOCAL_HEADER.unpack(header)
    if fields[0] != _LOCAL_SIGNATURE:
        raise fail(f"the local header of zip member {printable_name(member.name)} is damaged")
    name_length, extra_length = fields[9], fields[10]
    name_at = member.local_offset + _LOCAL_HEADER.size
    if blob.read(name_at, name_length) != member.name.encode("utf-8", errors="replace"):
        raise fail(f"the local header of zip member {printable_name(member.name)} names another member")
    data_at = name_at + name_length + extra_length
    if data_at + member.size > blob.length:
        raise fail(f"zip member {printable_name(member.name)} runs past the end of the blob")
    return data_at, member.size


def _member_bytes(blob: _Blob, member: _Member, fail, *, limit: int) -> bytes:
    if member.size > limit:
        raise fail(f"zip member {printable_name(member.name)} is {member.size:,} bytes; at most {limit:,} expected")
    offset, size = _member_range(blob, member, fail)
    return blob.read(offset, size)


# --------------------------------------------------------------------------
# data.pkl, rebuilt as plain records


@dataclass(frozen=True)
class _StorageRef:
    key: str
    dtype: str | None  # None: an untyped (byte) storage
    numel: int  # elements of `dtype`, or bytes when untyped


@dataclass(frozen=True)
class _TensorRecord:
    storage: _StorageRef
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class _StorageType:
    dtype: str | None


@dataclass(frozen=True)
class _DtypeName:
    name: str


def _ints(value: Any) -> tuple[int, ...]:
    values = tuple(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(f"{values!r} is not a tuple of non-negative integers")
    return values


def _rebuild_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    if not isinstance(storage, _StorageRef) or storage.dtype is None:
        raise ValueError("a tensor record without a typed storage")
    return _record(storage, storage_offset, size, stride, storage.dtype)


def _rebuild_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(storage, _StorageRef) or not isinstance(dtype, _DtypeName):
        raise ValueError("a tensor record without a storage or dtype")
    code = _DTYPE_CODES.get(dtype.name)
    if code is None:
        raise ValueError(f"dtype torch.{dtype.name}, which a safetensors checkpoint cannot hold")
    return _record(storage, storage_offset, size, stride, code)


def _record(storage, storage_offset, size, stride, dtype: str) -> _TensorRecord:
    shape, strides = _ints(size), _ints(stride)
    if len(shape) != len(strides) or not isinstance(storage_offset, int) or storage_offset < 0:
        raise ValueError("a tensor record with an inconsistent shape, stride or offset")
    return _TensorRecord(storage, storage_offset, shape, strides, dtype)


def _torch_size(values):
    return _ints(values)


class _TensorPickle(pickle.Unpickler):
    """Unpickles one tensor's `data.pkl` into a `_TensorRecord`. Resolves
    only torch's tensor-rebuild functions (to local stand-ins that build a
    record and call nothing), storage type names, dtype names and
    `collections.OrderedDict` (the empty backward-hooks slot)."""

    def __init__(self, data: bytes, shown: str, tensor: str) -> None:
        super().__init__(io.BytesIO(data))
        self.shown, self.tensor = shown, tensor

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_v2
        if module == "torch._utils" and name == "_rebuild_tensor_v3":
            return _rebuild_v3
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if module in ("torch", "torch.storage") and name == "UntypedStorage":
            return _StorageType(None)
        if module == "torch" and name == "Size":
            return _torch_size
        if module == "torch" and name.isidentifier() and not name.startswith("_") and name.islower():
            return _DtypeName(name)  # a dtype (`_rebuild_tensor_v3`'s argument); inert
        if module == "collections" and name == "OrderedDict":
            from collections import OrderedDict

            return OrderedDict
        raise UnsafeInputError(
            f"{self.shown}: refusing to load {printable_name(self.tensor)}: its pickle refers to "
            f"{printable_name(module)}.{printable_name(name)}, which a saved tensor does not need; nothing "
            "from it was run.",
            code="SRC003",
            path=self.shown,
            tensor=self.tensor,
            hint="Only read checkpoints from a source you trust.",
        )

    def persistent_load(self, pid: Any) -> Any:
        if (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and isinstance(pid[2], str) and isinstance(pid[4], int) and pid[4] >= 0):
            return _StorageRef(pid[2], pid[1].dtype, pid[4])
        raise ValueError(f"unexpected persistent reference {pid!r:.80}")


def _unpickle_tensor(data: bytes, shown: str, tensor: str, fail) -> _TensorRecord:
    try:
        record = _TensorPickle(data, shown, tensor).load()
    except UnsafeInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to parse is a damaged or foreign record
        raise fail(f"its data.pkl does not describe one plain tensor ({type(exc).__name__}: {exc})") from None
    if not isinstance(record, _TensorRecord):
        raise fail(f"its data.pkl holds a {type(record).__name__}, not one plain tensor")
    return record
