"""Tensors written by torch.save, located in place without torch.load: the
bytes found must be exactly what torch.load gives."""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark.converters.readers.torch_save_blob import SavedTensor, locate_saved_tensor  # noqa: E402
from dspark.schema.errors import CheckpointError, UnsafeInputError  # noqa: E402


def raw(tensor) -> bytes:
    return tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""


def locate(path: Path, start: int = 0, length: int | None = None) -> SavedTensor:
    length = path.stat().st_size - start if length is None else length
    with open(path, "rb") as handle:
        return locate_saved_tensor(handle.fileno(), start, length, shown=path.name, tensor="t")


def read_located(path: Path, saved: SavedTensor) -> bytes:
    start, end = saved.byte_range
    with open(path, "rb") as handle:
        return os.pread(handle.fileno(), end - start, start)


def sample(dtype) -> "torch.Tensor":
    generator = torch.Generator().manual_seed(5)
    if dtype == torch.bool:
        return torch.rand(3, 7, generator=generator) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-1000, 1000, (3, 7), generator=generator).to(dtype) if dtype != torch.uint16 else \
            torch.randint(0, 60000, (3, 7), generator=generator).to(dtype)
    return (torch.randn(3, 7, generator=generator) * 3).to(dtype)


DTYPES = [
    pytest.param(torch.bfloat16, "BF16", id="bf16"),
    pytest.param(torch.float32, "F32", id="fp32"),
    pytest.param(torch.float16, "F16", id="fp16"),
    pytest.param(torch.float64, "F64", id="fp64"),
    pytest.param(torch.int64, "I64", id="int64"),
    pytest.param(torch.int32, "I32", id="int32"),
    pytest.param(torch.int8, "I8", id="int8"),
    pytest.param(torch.uint8, "U8", id="uint8"),
    pytest.param(torch.bool, "BOOL", id="bool"),
    # dtypes torch saves as an untyped storage plus a dtype (_rebuild_tensor_v3)
    pytest.param(torch.float8_e4m3fn, "F8_E4M3", id="fp8-e4m3"),
    pytest.param(torch.uint16, "U16", id="uint16"),
]


@pytest.mark.parametrize("dtype,code", DTYPES)
def test_located_bytes_equal_torch_load(tmp_path: Path, dtype, code: str) -> None:
    tensor = sample(dtype)
    path = tmp_path / "blob.pt"  # archive records are named blob/...: the prefix is not fixed
    torch.save(tensor, path)
    saved = locate(path)
    assert (saved.dtype, saved.shape, saved.is_contiguous) == (code, (3, 7), True)
    assert read_located(path, saved) == raw(torch.load(path, weights_only=True)) == raw(tensor)


def test_a_contiguous_view_into_a_larger_storage(tmp_path: Path) -> None:
    big = torch.arange(40, dtype=torch.float32).reshape(8, 5)
    torch.save(big[2:5], tmp_path / "view.pt")  # torch.save keeps the whole storage
    saved = locate(tmp_path / "view.pt")
    assert saved.storage_offset == 10 and saved.storage_bytes == 160 and saved.is_contiguous
    assert read_located(tmp_path / "view.pt", saved) == raw(big[2:5])


def test_a_transposed_tensor_is_reported_strided(tmp_path: Path) -> None:
    tensor = torch.arange(12, dtype=torch.int64).reshape(3, 4).t()
    torch.save(tensor, tmp_path / "t.pt")
    saved = locate(tmp_path / "t.pt")
    assert saved.shape == (4, 3) and saved.stride == (1, 4) and not saved.is_contiguous


def test_a_blob_in_the_middle_of_a_file(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    tensor = sample(torch.bfloat16)
    torch.save(tensor, buffer)
    blob = buffer.getvalue()
    path = tmp_path / "data.distcp"
    path.write_bytes(b"x" * 1000 + blob + b"y" * 333)
    saved = locate(path, 1000, len(blob))
    assert read_located(path, saved) == raw(tensor)


# --------------------------------------------------------------------------
# Archives written another way


def members_of(blob: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def build_zip64(members: list[tuple[str, bytes]]) -> bytes:
    """A stored zip whose sizes and offsets all sit in zip64 records, as a
    writer puts them for members or archives past 4 GiB."""
    out, central = bytearray(), bytearray()
    for name, data in members:
        offset, encoded, crc = len(out), name.encode(), zlib.crc32(data)
        local_extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                           len(encoded), len(local_extra)) + encoded + local_extra + data
        central_extra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(encoded), len(central_extra), 0, 0, 0, 0, 0xFFFFFFFF) + encoded + central_extra
    directory_at = len(out)
    out += central
    zip64_end_at = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members), len(members), len(central), directory_at)
    out += struct.pack("<IIQI", 0x07064B50, 0, zip64_end_at, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out)


def rezip(members: list[tuple[str, bytes]], compression=zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


def torch_blob(tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


def test_a_zip64_archive_is_read(tmp_path: Path) -> None:
    tensor = sample(torch.float32)
    path = tmp_path / "zip64.pt"
    path.write_bytes(build_zip64(members_of(torch_blob(tensor))))
    assert read_located(path, locate(path)) == raw(tensor)
    assert raw(torch.load(path, weights_only=True)) == raw(tensor)  # torch reads the same archive


def test_an_archive_written_by_pythons_zipfile_is_read(tmp_path: Path) -> None:
    tensor = sample(torch.int64)
    path = tmp_path / "plain.pt"
    path.write_bytes(rezip(members_of(torch_blob(tensor))))  # no alignment padding, no data descriptors
    assert read_located(path, locate(path)) == raw(tensor) == raw(torch.load(path, weights_only=True))


def refusal(path: Path, kind=CheckpointError) -> CheckpointError:
    with pytest.raises(kind) as caught:
        locate(path)
    assert caught.value.path == path.name and caught.value.tensor == "t"
    return caught.value


def test_a_compressed_member_is_refused_as_src004(tmp_path: Path) -> None:
    path = tmp_path / "deflated.pt"
    path.write_bytes(rezip(members_of(torch_blob(torch.zeros(64))), zipfile.ZIP_DEFLATED))
    error = refusal(path)
    assert error.code == "SRC004" and "is compressed" in error.message and "torch.distributed.checkpoint" in error.hint


def test_a_legacy_format_blob_is_refused_as_src004(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    torch.save(torch.ones(3), buffer, _use_new_zipfile_serialization=False)
    path = tmp_path / "legacy.pt"
    path.write_bytes(buffer.getvalue())
    error = refusal(path)
    assert error.code == "SRC004" and "not a zip archive" in error.message


def test_a_big_endian_blob_is_refused(tmp_path: Path) -> None:
    members = [(n, b"big" if n.endswith("/byteorder") else d) for n, d in members_of(torch_blob(torch.ones(3)))]
    path = tmp_path / "big.pt"
    path.write_bytes(rezip(members))
    assert "big-endian" in refusal(path).message


def test_a_blob_that_is_not_one_tensor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dict.pt"
    torch.save({"a": torch.ones(2)}, path)
    error = refusal(path)
    assert error.code == "SRC004" and "not one plain tensor" in error.message


class _Payload:
    def __reduce__(self):
        return (os.system, ("true",))


def test_a_pickle_with_a_code_payload_is_refused_as_src003(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save(_Payload(), path)
    error = refusal(path, UnsafeInputError)
    assert error.code == "SRC003" and "refusing" in error.message


@pytest.mark.parametrize("cut", [10, 200, 1000])
def test_a_truncated_blob_is_refused(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "cut.pt"
    path.write_bytes(torch_blob(sample(torch.float32))[:-cut])
    assert refusal(path).code == "SRC004"


def test_a_storage_shorter_than_the_tensor_is_refused(tmp_path: Path) -> None:
    members = members_of(torch_blob(torch.arange(16, dtype=torch.int64)))
    members = [(n, d[:64] if n.endswith("/data/0") else d) for n, d in members]
    path = tmp_path / "short.pt"
    path.write_bytes(rezip(members))
    assert "holds 64 bytes" in refusal(path).message
