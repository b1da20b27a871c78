"""safetensors header validation on real files: each file is written by the
safetensors library, then its bytes or header are corrupted the way a bad
export, a truncated copy or a hostile file would."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import dspark.converters.readers.safetensors_io as safetensors_io
from dspark.converters.check import check_checkpoint
from dspark.converters.readers.safetensors_io import MAX_HEADER_BYTES, iter_range_chunks, read_header, read_range
from dspark.schema.errors import CheckpointError


def write_real(path: Path, tensors: dict | None = None) -> Path:
    """A valid file, written by the library: three tensors of different sizes."""
    if tensors is None:
        tensors = {
            "a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b.weight": np.ones(4, dtype=np.float16),
            "c.weight": np.arange(6, dtype=np.float32).reshape(3, 2),
        }
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def split(path: Path) -> tuple[dict, bytes]:
    """(header as a dict, payload bytes) of a file."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + length]), raw[8 + length:]


def put(path: Path, header_text: bytes, payload: bytes) -> None:
    header_text += b" " * (-len(header_text) % 8)
    path.write_bytes(struct.pack("<Q", len(header_text)) + header_text + payload)


def rewrite(path: Path, change: Callable[[dict], None]) -> None:
    header, payload = split(path)
    change(header)
    put(path, json.dumps(header).encode(), payload)


def rewrite_text(path: Path, text: bytes) -> None:
    _, payload = split(path)
    put(path, text, payload)


def _entries_text(path: Path, duplicate: str) -> bytes:
    header, _ = split(path)
    items = [f"{json.dumps(k)}:{json.dumps(v)}" for k, v in header.items()]
    items.append(f"{json.dumps(duplicate)}:{json.dumps(header[duplicate])}")
    return ("{" + ",".join(items) + "}").encode()


def _set(name: str, field: str, value) -> Callable[[dict], None]:
    def change(header: dict) -> None:
        header[name][field] = value
    return change


def _truncate_to(size: int) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        path.write_bytes(path.read_bytes()[:size])
    return corrupt


def _header_length(value: int) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        raw = bytearray(path.read_bytes())
        raw[:8] = struct.pack("<Q", value)
        path.write_bytes(bytes(raw))
    return corrupt


def _drop_first_tensor(header: dict) -> None:
    first = min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    del header[first]


def _overlap(header: dict) -> None:
    # c (24 bytes) claims a's bytes (24 bytes) as well
    header["c.weight"]["data_offsets"] = list(header["a.weight"]["data_offsets"])


# reason -> how to corrupt a good file (in place)
CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate_to(5),
    "header_too_large": _header_length(MAX_HEADER_BYTES + 1),
    "header_out_of_file": lambda p: _header_length(p.stat().st_size)(p),
    "not_utf8": lambda p: rewrite_text(p, b'{"a\xff\xfe": 1}'),
    "duplicate_key": lambda p: rewrite_text(p, _entries_text(p, "b.weight")),
    "not_json": lambda p: rewrite_text(p, b'{"a.weight": {"dtype": "F32",'),
    "nonfinite": lambda p: rewrite_text(p, b'{"a.weight": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}'),
    "not_object": lambda p: rewrite_text(p, b"[1, 2, 3]"),
    "bad_metadata": lambda p: rewrite(p, lambda h: h.update({"__metadata__": {"format": 1}})),
    "control_character": lambda p: write_real(p, {"evil\x1b[2Jname": np.zeros(2, dtype=np.float32)}),
    "bad_entry": lambda p: rewrite(p, lambda h: h.update({"b.weight": ["F16", [4], [24, 32]]})),
    "unknown_dtype": lambda p: rewrite(p, _set("b.weight", "dtype", "F128")),
    "bad_shape": lambda p: rewrite(p, _set("a.weight", "shape", [2, -3])),
    "bad_offsets": lambda p: rewrite(p, _set("a.weight", "data_offsets", [24, 0])),
    "size_mismatch": lambda p: rewrite(p, _set("a.weight", "shape", [2, 2])),
    "gap": lambda p: rewrite(p, _drop_first_tensor),
    "overlap": lambda p: rewrite(p, _overlap),
    "payload_length": _truncate_to(-4),
}


def test_the_library_written_file_is_valid_and_read_like_the_library_reads_it(tmp_path):
    path = write_real(tmp_path / "m.safetensors")
    header = read_header(path)
    assert header.metadata == {"format": "pt"}
    assert header.file_bytes == path.stat().st_size
    start = 8 + header.header_bytes
    with safe_open(str(path), framework="numpy") as reference:
        assert sorted(t.name for t in header.tensors) == sorted(reference.keys())
        for tensor in header.tensors:
            expected = reference.get_tensor(tensor.name)
            assert tensor.shape == expected.shape
            assert tensor.start >= start
            assert read_range(path, tensor.start, tensor.end) == expected.tobytes()
    # file order, contiguous
    assert [t.start for t in header.tensors] == sorted(t.start for t in header.tensors)


def test_zero_sized_tensors_may_sit_anywhere(tmp_path):
    path = write_real(tmp_path / "m.safetensors", {"a": np.zeros((0, 4), np.float32), "b": np.ones(3, np.float32)})
    header = read_header(path)
    assert {t.name: t.end - t.start for t in header.tensors} == {"a": 0, "b": 12}


@pytest.mark.parametrize("reason", sorted(CORRUPTIONS))
def test_corrupt_header_is_refused_with_its_reason(tmp_path, reason):
    path = write_real(tmp_path / "model.safetensors")
    CORRUPTIONS[reason](path)
    with pytest.raises(CheckpointError) as caught:
        read_header(path, display_name="model.safetensors")
    error = caught.value
    assert (error.code, error.detail["reason"]) == ("STF001", reason)
    assert error.message.startswith("model.safetensors: ")
    assert "\x1b" not in error.message  # names are escaped in messages


@pytest.mark.parametrize("reason", sorted(CORRUPTIONS))
def test_check_reports_a_corrupt_file_as_stf001(tiny_draft, reason):
    draft = tiny_draft()
    CORRUPTIONS[reason](write_real(draft / "model.safetensors"))
    report = check_checkpoint(draft)
    corrupt = [f for f in report.findings if f.code == "STF001"]
    assert len(corrupt) == 1
    assert corrupt[0].file == "model.safetensors"
    assert corrupt[0].detail["reason"] == reason
    assert not report.passed()


def test_every_reason_in_the_reader_is_tested():
    source = Path(safetensors_io.__file__).read_text(encoding="utf-8")
    reasons = set(re.findall(r'corrupt\(\s*"(\w+)"', source)) | {"gap", "overlap"}
    # `unreadable` is an OSError on a file that exists (permissions, I/O):
    # not something a test running as any user can fabricate reliably.
    reasons.discard("kind")
    assert reasons == set(CORRUPTIONS)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deeply-nested"),
        pytest.param(b"", id="empty"),
        pytest.param(b"{}garbage", id="trailing-garbage"),
        pytest.param(b'{"a.weight": NaN}', id="nan-entry"),
    ],
)
def test_hostile_json_is_not_json_or_not_an_entry(tmp_path, text):
    path = write_real(tmp_path / "m.safetensors")
    rewrite_text(path, text)
    with pytest.raises(CheckpointError) as caught:
        read_header(path)
    assert caught.value.detail["reason"] in {"not_json", "not_object", "bad_entry", "nonfinite"}


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("shape", [2.0, 3], "bad_shape"),
        ("shape", [True, 3], "bad_shape"),
        ("shape", "2x3", "bad_shape"),
        ("shape", None, "bad_shape"),
        ("data_offsets", [0], "bad_offsets"),
        ("data_offsets", [-24, 0], "bad_offsets"),
        ("data_offsets", [0, 24.0], "bad_offsets"),
        ("data_offsets", None, "bad_offsets"),
        ("dtype", "f32", "unknown_dtype"),
        ("dtype", None, "unknown_dtype"),
    ],
)
def test_entry_fields_are_validated(tmp_path, field, value, reason):
    path = write_real(tmp_path / "m.safetensors")
    rewrite(path, _set("a.weight", field, value))
    with pytest.raises(CheckpointError) as caught:
        read_header(path)
    assert caught.value.detail["reason"] == reason


def test_trailing_bytes_after_the_last_tensor_are_refused(tmp_path):
    path = write_real(tmp_path / "m.safetensors")
    with open(path, "ab") as handle:
        handle.write(b"\0" * 16)
    with pytest.raises(CheckpointError) as caught:
        read_header(path)
    assert caught.value.detail["reason"] == "payload_length"


def test_metadata_must_map_strings_to_strings(tmp_path):
    path = write_real(tmp_path / "m.safetensors")
    rewrite(path, lambda h: h.update({"__metadata__": ["format", "pt"]}))
    with pytest.raises(CheckpointError, match="__metadata__"):
        read_header(path)


def test_chunks_stream_a_range_with_one_buffer(tmp_path):
    path = write_real(tmp_path / "m.safetensors", {"x": np.arange(1000, dtype=np.float32)})
    tensor = read_header(path).tensors[0]
    seen = []
    for chunk in iter_range_chunks(path, tensor.start, tensor.end, 256):
        assert len(chunk) <= 256
        seen.append(bytes(chunk))
    assert b"".join(seen) == np.arange(1000, dtype=np.float32).tobytes()
    assert [len(c) for c in seen] == [256] * 15 + [160]


def test_a_file_truncated_after_its_header_was_read_is_pay003(tmp_path):
    path = write_real(tmp_path / "m.safetensors", {"x": np.arange(1000, dtype=np.float32)})
    tensor = read_header(path).tensors[0]
    with open(path, "r+b") as handle:
        handle.truncate(tensor.start + 100)
    with pytest.raises(CheckpointError) as caught:
        read_range(path, tensor.start, tensor.end)
    assert caught.value.code == "PAY003"
    with pytest.raises(CheckpointError) as caught:
        list(iter_range_chunks(path, tensor.start, tensor.end, 64))
    assert caught.value.code == "PAY003"


def test_the_header_limit_is_told_in_binary_units(tmp_path):
    path = write_real(tmp_path / "m.safetensors")
    CORRUPTIONS["header_too_large"](path)
    with pytest.raises(CheckpointError) as refused:
        read_header(path)
    assert MAX_HEADER_BYTES == 100 * 2**20 and "100 MiB limit" in refused.value.message
