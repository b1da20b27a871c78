"""The --deep payload scan against torch's own reading of the same values,
on real safetensors files, across every float format and chunk boundary."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from dspark.converters.readers import open_checkpoint
from dspark.converters.payload_scan import scan_chunks, scan_entries, scan_payloads
from dspark.schema.errors import CheckpointError

FLOATS = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3": torch.float8_e4m3fn,
}
INTS = {"I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def random_bits(dtype: torch.dtype, count: int, seed: int) -> torch.Tensor:
    """Every bit pattern is fair game: NaN, ±Inf, ±0, subnormals."""
    size = torch.empty(0, dtype=dtype).element_size()
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (count * size,), dtype=torch.uint8, generator=generator)
    return raw.view(dtype)


def reference(tensor: torch.Tensor) -> tuple[int, bool, bool]:
    wide = tensor.to(torch.float64)
    nonfinite = int((~torch.isfinite(wide)).sum())
    one = torch.ones(1, dtype=tensor.dtype).view(BITS[tensor.element_size()])
    bits = tensor.view(BITS[tensor.element_size()])
    return nonfinite, bool((wide == 0).all()), bool((bits == one).all())


def scan_file(tmp_path, tensors: dict, **options):
    save_file(tensors, str(tmp_path / "model.safetensors"))
    checkpoint = open_checkpoint(tmp_path / "model.safetensors")
    assert not checkpoint.findings
    scans = scan_payloads(checkpoint.reader, checkpoint.entries, **options)
    return {s.entry.stored_name: s for s in scans}


def special_values(dtype: torch.dtype) -> torch.Tensor:
    values = [0.0, -0.0, 1.0, -1.0, float("nan"), float("-nan")]
    if dtype is not torch.float8_e4m3fn:  # e4m3fn has no infinity
        values += [float("inf"), float("-inf")]
    return torch.tensor(values, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("name", sorted(FLOATS))
@pytest.mark.parametrize("workers", [1, 2])
def test_float_statistics_match_torch(tmp_path, name, workers):
    dtype = FLOATS[name]
    tensors = {f"random{seed}": random_bits(dtype, 999 + seed, seed) for seed in range(3)}
    tensors["specials"] = special_values(dtype)
    tensors["clean"] = torch.linspace(-2, 2, 4097).to(dtype)
    ones = torch.ones(3000, dtype=dtype)
    tensors["ones"] = ones
    tensors["ones_but_last"] = torch.cat([ones[:-1], torch.full((1,), 2.0).to(dtype)])
    tensors["zeros"] = torch.zeros(3000, dtype=dtype)
    tensors["signed_zeros"] = torch.tensor([0.0, -0.0] * 1500).to(dtype)
    tensors["zeros_then_tiny"] = torch.cat([torch.zeros(2999), torch.full((1,), -1e-3)]).to(dtype)
    # Small chunks put values on every side of a chunk boundary.
    chunk = 8 * 37
    scans = scan_file(tmp_path, tensors, chunk_bytes=chunk, workers=workers)
    for key, tensor in tensors.items():
        stats = scans[key].stats
        assert (stats.nonfinite_count, stats.all_zero, stats.all_one) == reference(tensor), (name, key)


@pytest.mark.parametrize("name", sorted(INTS))
def test_integer_statistics(tmp_path, name):
    dtype = INTS[name]
    tensors = {
        "zeros": torch.zeros(100, dtype=dtype),
        "ones": torch.ones(100, dtype=dtype),
        "mixed": torch.tensor([0, 1] * 50).to(dtype),
    }
    scans = scan_file(tmp_path, tensors, chunk_bytes=16)
    summary = {k: (s.stats.nonfinite_count, s.stats.all_zero, s.stats.all_one) for k, s in scans.items()}
    assert summary == {"zeros": (0, True, False), "ones": (0, False, True), "mixed": (0, False, False)}


def test_a_nan_in_the_last_element_of_a_huge_chunk_is_counted():
    values = torch.zeros(1 << 20, dtype=torch.bfloat16)
    values[-1] = float("-nan")
    values[7] = float("inf")
    raw = memoryview(values.view(torch.int16).numpy().tobytes())
    stats = scan_chunks("BF16", [raw])
    assert (stats.nonfinite_count, stats.all_zero, stats.all_one) == (2, False, False)


def test_results_come_in_entry_order_whatever_the_threads_do(tmp_path):
    tensors = {f"t{i:02d}": torch.full((1 + 97 * i,), float(i)) for i in range(20)}
    scans = scan_payloads(*_reader_and_entries(tmp_path, tensors), chunk_bytes=64, workers=3)
    assert [s.entry.stored_name for s in scans] == sorted(tensors)
    assert [s.stats.all_zero for s in scans] == [True] + [False] * 19


def test_progress_is_told_every_byte(tmp_path):
    tensors = {f"t{i}": torch.ones(1000 + i) for i in range(5)}
    reader, entries = _reader_and_entries(tmp_path, tensors)
    seen = []
    scan_payloads(reader, entries, chunk_bytes=512, progress=seen.append, workers=2)
    assert sum(seen) == sum(e.nbytes for e in entries)
    assert max(seen) <= 512


def test_an_unreadable_payload_does_not_stop_the_scan(tmp_path):
    tensors = {"a": torch.ones(1000), "b": torch.ones(1000), "c": torch.full((1000,), float("nan"))}
    reader, entries = _reader_and_entries(tmp_path, tensors)
    by_name = {e.stored_name: e for e in entries}
    # The file loses its last bytes after the header was read: "c" cannot be read.
    with open(tmp_path / "model.safetensors", "r+b") as handle:
        handle.truncate(by_name["c"].byte_range[1] - 10)
    scans = {s.entry.stored_name: s for s in scan_payloads(reader, entries, workers=1)}
    assert scans["c"].error is not None and scans["c"].error.code == "PAY003"
    assert scans["a"].stats.all_one and scans["b"].stats.all_one
    with pytest.raises(CheckpointError):
        list(scan_entries(reader, entries))


def _reader_and_entries(tmp_path, tensors):
    save_file(tensors, str(tmp_path / "model.safetensors"))
    checkpoint = open_checkpoint(tmp_path / "model.safetensors")
    entries = sorted(checkpoint.entries, key=lambda e: e.stored_name)
    return checkpoint.reader, entries
