"""The streaming safetensors writer and shard planner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from dspark.converters.readers.safetensors_io import read_header
from dspark.converters.writers.safetensors import (
    CHUNKS_IN_FLIGHT,
    PlannedTensor,
    ShardPlan,
    natural_key,
    parse_size,
    plan_shards,
    safetensors_header,
    write_shard,
)
from dspark.schema.errors import CheckpointError, UsageError

_NUMPY = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BOOL": np.bool_, "U8": np.uint8, "F64": np.float64}


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "layers.10.w": rng.standard_normal((3, 5)).astype(np.float32),
        "layers.2.w": rng.standard_normal((7,)).astype(np.float16),  # odd byte count before wider items
        "zeta.index": np.arange(5, dtype=np.int64),
        "alpha.mask": np.array([True, False, True]),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "scalar": np.array(2.5, dtype=np.float64),
        "bytes": np.arange(3, dtype=np.uint8),
    }


def _code(array: np.ndarray) -> str:
    return next(code for code, dtype in _NUMPY.items() if array.dtype == dtype)


def _write(path: Path, arrays: dict[str, np.ndarray]) -> list:
    shard = ShardPlan(path.name, [PlannedTensor(n, _code(a), a.shape) for n, a in arrays.items()])
    return write_shard(path, shard, lambda t: [memoryview(np.ascontiguousarray(arrays[t.name]).tobytes())])


def test_output_is_byte_identical_to_the_safetensors_library(tmp_path: Path) -> None:
    arrays = _arrays()
    save_file(arrays, str(tmp_path / "reference.safetensors"), metadata={"format": "pt"})
    _write(tmp_path / "ours.safetensors", arrays)
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "reference.safetensors").read_bytes()


def test_output_opens_with_safe_open_and_records_true_ranges_and_hashes(tmp_path: Path) -> None:
    import hashlib

    arrays = _arrays()
    path = tmp_path / "model.safetensors"
    written = {w.name: w for w in _write(path, arrays)}
    with safe_open(str(path), framework="np") as handle:
        assert set(handle.keys()) == set(arrays)
        for name, array in arrays.items():
            np.testing.assert_array_equal(handle.get_tensor(name), array)
    data = path.read_bytes()
    for name, array in arrays.items():
        start, end = written[name].byte_range
        assert data[start:end] == np.ascontiguousarray(array).tobytes(), name
        assert written[name].sha256 == hashlib.sha256(data[start:end]).hexdigest()
    header = read_header(path)  # dspark's own strict validation
    assert {t.name: (t.start, t.end) for t in header.tensors} == {n: w.byte_range for n, w in written.items()}


def test_a_source_that_gives_the_wrong_byte_count_is_an_error(tmp_path: Path) -> None:
    shard = ShardPlan("model.safetensors", [PlannedTensor("w", "F32", (4,))])
    with pytest.raises(CheckpointError, match="gave 12 bytes"):
        write_shard(tmp_path / "model.safetensors", shard, lambda t: [memoryview(b"\x00" * 12)])


def test_a_source_may_reuse_a_ring_of_chunks_in_flight_plus_one_buffers(tmp_path: Path) -> None:
    import hashlib

    rng = np.random.default_rng(3)
    arrays = {f"layers.{i}.w": rng.standard_normal(n).astype(np.float32) for i, n in enumerate((1, 700, 4096, 3, 9000))}
    ring = [memoryview(bytearray(64)) for _ in range(CHUNKS_IN_FLIGHT + 1)]
    turn = 0

    def source(tensor: PlannedTensor):
        nonlocal turn
        raw = arrays[tensor.name].tobytes()
        for start in range(0, len(raw), 64):
            piece = raw[start:start + 64]
            slot = ring[turn]
            slot[: len(piece)] = piece
            turn = (turn + 1) % len(ring)
            yield slot[: len(piece)]

    path = tmp_path / "model.safetensors"
    shard = ShardPlan(path.name, [PlannedTensor(n, "F32", a.shape) for n, a in arrays.items()])
    written = {w.name: w for w in write_shard(path, shard, source)}
    save_file(arrays, str(tmp_path / "reference.safetensors"), metadata={"format": "pt"})
    assert path.read_bytes() == (tmp_path / "reference.safetensors").read_bytes()
    data = path.read_bytes()
    for name, array in arrays.items():
        start, end = written[name].byte_range
        assert written[name].sha256 == hashlib.sha256(array.tobytes()).hexdigest() == hashlib.sha256(data[start:end]).hexdigest()


def test_a_source_that_fails_midway_stops_the_hashing_thread(tmp_path: Path) -> None:
    import threading

    def source(tensor: PlannedTensor):
        for _ in range(3 * CHUNKS_IN_FLIGHT):
            yield memoryview(bytes(4))
        raise OSError("input vanished")

    shard = ShardPlan("model.safetensors", [PlannedTensor("w", "F32", (100,))])
    with pytest.raises(OSError, match="input vanished"):
        write_shard(tmp_path / "model.safetensors", shard, source)
    assert not [t for t in threading.enumerate() if t.name == "dspark-shard-hasher"]


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        _write(tmp_path / "model.safetensors", {"w": np.zeros(2, np.float32)})
    assert (tmp_path / "model.safetensors").read_bytes() == b"keep"


def test_every_dtype_is_placed_where_the_library_places_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as save_torch

    dtypes = {
        "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "F8_E4M3": torch.float8_e4m3fn,
        "F8_E5M2": torch.float8_e5m2, "I16": torch.int16, "U16": torch.uint16, "F16": torch.float16,
        "BF16": torch.bfloat16, "I32": torch.int32, "U32": torch.uint32, "F32": torch.float32,
        "I64": torch.int64, "U64": torch.uint64, "F64": torch.float64,
    }
    tensors = {f"t.{code}": torch.zeros(3, dtype=dtype) for code, dtype in dtypes.items()}
    tensors["a.second_f32"] = torch.ones(1)
    save_torch(tensors, str(tmp_path / "reference.safetensors"), metadata={"format": "pt"})
    shard = ShardPlan("ours", [PlannedTensor(n, n.split(".")[1] if n.startswith("t.") else "F32", tuple(t.shape)) for n, t in tensors.items()])
    write_shard(tmp_path / "ours.safetensors", shard, lambda t: [memoryview(tensors[t.name].view(torch.uint8).numpy().tobytes())])
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "reference.safetensors").read_bytes()


def test_header_is_padded_with_spaces_to_eight_bytes() -> None:
    for count in range(1, 12):
        header = safetensors_header([PlannedTensor("t" * count, "BF16", (count,))])
        assert len(header) % 8 == 0
        assert header[8:].rstrip(b" ").endswith(b"}")


def _sizes(n: int) -> list[PlannedTensor]:
    return [PlannedTensor(f"layers.{i}.w", "F32", (250,)) for i in range(n)]  # 1000 bytes each


def test_shards_stay_within_the_limit_header_included() -> None:
    limit = 3500
    shards = plan_shards(_sizes(10), limit)
    assert len(shards) > 1
    assert all(shard.file_bytes <= limit for shard in shards)
    assert [t.name for s in shards for t in s.tensors] == [t.name for t in _sizes(10)]
    assert [s.file for s in shards] == [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]


def test_one_shard_is_named_model_safetensors() -> None:
    shards = plan_shards(_sizes(3), 10**9)
    assert [s.file for s in shards] == ["model.safetensors"]


def test_a_tensor_larger_than_the_limit_gets_a_shard_of_its_own() -> None:
    tensors = [*_sizes(2), PlannedTensor("big", "F32", (5000,)), *_sizes(2)]
    shards = plan_shards(tensors, 3000)
    assert [[t.name for t in s.tensors] for s in shards] == [
        ["layers.0.w", "layers.1.w"], ["big"], ["layers.0.w", "layers.1.w"],
    ]


@pytest.mark.parametrize(
    "text,value",
    [("5GB", 5 * 10**9), ("500MB", 5 * 10**8), ("2GiB", 2 * 2**30), ("1.5GB", 15 * 10**8), ("4096", 4096), ("10 kb", 10_000)],
)
def test_sizes_parse(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "5XB", "-1GB", "0", "GB"])
def test_bad_sizes_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


def test_natural_order_puts_layer_2_before_layer_10() -> None:
    names = ["layers.10.w", "layers.2.w", "context_proj.weight", "layers.1.w"]
    assert sorted(names, key=natural_key) == ["context_proj.weight", "layers.1.w", "layers.2.w", "layers.10.w"]


# Run in a child process: it arms an interval timer whose handler raises,
# as a conversion's SIGINT/SIGTERM handler does, at random moments while
# the producer waits for room. Each round must end in that exception, and
# the stage must still stop cleanly afterwards.
_INTERRUPT_ROUNDS = r"""
import random, signal, sys, threading
from dspark.converters.writers.safetensors import CHUNKS_IN_FLIGHT, _Stage

class Interrupted(BaseException):
    pass

armed = False
def handler(signum, frame):
    global armed
    if armed:
        armed = False
        raise Interrupted()
signal.signal(signal.SIGALRM, handler)
random.seed(0)
for round in range(int(sys.argv[1])):
    consumer_may_go = threading.Event()
    stage = _Stage("dspark-test-stage", lambda item: consumer_may_go.wait())
    try:
        armed = True
        signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00001, 0.0003))
        for _ in range(CHUNKS_IN_FLIGHT + 2):
            stage.put(b"chunk")
        consumer_may_go.wait(0.001)
        raise SystemExit(f"round {round}: the timer never fired")
    except Interrupted:
        pass
    armed = False
    signal.setitimer(signal.ITIMER_REAL, 0)
    consumer_may_go.set()
    stage.abort()
print("clean")
"""


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="needs POSIX interval timers")
def test_an_interrupt_while_waiting_for_room_neither_hangs_nor_breaks_the_stage() -> None:
    # Against a threading.Semaphore this hung (a lock left held inside its
    # Condition) or raised "release unlocked lock" within a few thousand rounds.
    import subprocess
    import sys

    try:
        done = subprocess.run(
            [sys.executable, "-c", _INTERRUPT_ROUNDS, "6000"], capture_output=True, text=True, timeout=45,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("an interrupt left the stage's producer/consumer hand-off deadlocked")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"
