"""`.pt` state dicts written by torch.save, read with weights-only loading."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark.converters.readers import open_checkpoint  # noqa: E402
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes  # noqa: E402
from dspark.schema.errors import CheckpointError, UnsafeInputError  # noqa: E402


@pytest.fixture(scope="module")
def tensors() -> dict:
    return make_tensors(tensor_shapes(SCALES["tiny"]), dtype="float32", seed=3)


def save(folder: Path, obj, name: str = "draft.pt", **kwargs) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(obj, folder / name, **kwargs)
    (folder / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
    return folder / name


def raw(tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize(
    "wrap,nested_under",
    [
        (lambda sd: sd, None),
        (lambda sd: {"state_dict": sd, "epoch": 3}, "state_dict"),
        (lambda sd: {"model": sd, "optimizer": {"lr": 1e-4}}, "model"),
        (lambda sd: {"module": sd}, "module"),
        (lambda sd: {"draft_model": sd, "step": 10}, "draft_model"),
        (lambda sd: {"checkpoint": 1, "state_dict": {"model": sd}}, "state_dict.model"),
    ],
    ids=["flat", "state_dict", "model", "module", "draft_model", "nested-twice"],
)
def test_state_dict_is_found_flat_or_nested(tmp_path: Path, tensors: dict, wrap, nested_under) -> None:
    path = save(tmp_path / "ckpt", wrap({f"draft_model.{k}": v for k, v in tensors.items()}))
    checkpoint = open_checkpoint(path)
    assert checkpoint.format == "pt"
    assert {e.served_name for e in checkpoint.entries} == set(tensors)
    assert checkpoint.metadata.get("state_dict_key") == nested_under
    for entry in checkpoint.entries:
        assert checkpoint.reader.read_raw(entry) == raw(tensors[entry.served_name]), entry.served_name
    left = [f for f in checkpoint.findings if f.code == "SRC002"]
    assert bool(left) == (nested_under not in (None, "module")), left


def test_folder_with_one_pt_file_and_config_in_the_parent(tmp_path: Path, tensors: dict) -> None:
    path = save(tmp_path / "run" / "final", tensors)
    (path.parent / "config.json").rename(tmp_path / "run" / "config.json")
    checkpoint = open_checkpoint(path.parent)
    assert checkpoint.config_path == tmp_path / "run" / "config.json"
    assert len(checkpoint.entries) == len(tensors)


def test_views_transposes_and_shared_storage_read_as_their_own_values(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {"t": base.t(), "row": base[2], "cols": base[:, 1:3], "whole": base, "bf16": base.to(torch.bfloat16)}
    checkpoint = open_checkpoint(save(tmp_path, state))
    for entry in checkpoint.entries:
        assert checkpoint.reader.read_raw(entry) == raw(state[entry.stored_name]), entry.stored_name
        assert entry.shape == tuple(state[entry.stored_name].shape)


def test_chunks_are_element_aligned_and_complete(tmp_path: Path) -> None:
    value = torch.randn(1000, 37)
    checkpoint = open_checkpoint(save(tmp_path, {"w": value}))
    chunks = [bytes(c) for c in checkpoint.reader.iter_chunks(checkpoint.entries[0], 4096)]
    assert all(len(c) == 4096 for c in chunks[:-1])
    assert b"".join(chunks) == raw(value)


def test_legacy_format_is_read_too(tmp_path: Path, tensors: dict) -> None:
    path = save(tmp_path, tensors, _use_new_zipfile_serialization=False)
    checkpoint = open_checkpoint(path)
    assert checkpoint.metadata["memory_mapped"] is False
    entry = checkpoint.entry("final_norm.weight")
    assert checkpoint.reader.read_raw(entry) == raw(tensors["final_norm.weight"])


class _Shell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_code_payload_is_refused_and_never_runs(tmp_path: Path, tensors: dict, legacy: bool) -> None:
    marker = tmp_path / "PAYLOAD_RAN"
    path = save(tmp_path / "ckpt", {**tensors, "hook": _Shell(marker)}, _use_new_zipfile_serialization=not legacy)
    with pytest.raises(UnsafeInputError) as caught:
        open_checkpoint(path)
    assert caught.value.code == "SRC003"
    assert "draft.pt" in caught.value.message and "posix.system" in caught.value.message
    assert not marker.exists()


def test_a_pickled_class_is_refused_with_a_clear_message(tmp_path: Path, tensors: dict) -> None:
    path = save(tmp_path, {"state_dict": tensors, "args": argparse.Namespace(lr=1e-4)})
    with pytest.raises(UnsafeInputError) as caught:
        open_checkpoint(path)
    assert "argparse.Namespace" in caught.value.message
    assert "state_dict()" in caught.value.hint


def test_a_truncated_file_is_a_checkpoint_error(tmp_path: Path, tensors: dict) -> None:
    path = save(tmp_path, tensors)
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(path)
    assert caught.value.code == "SRC004" and not isinstance(caught.value, UnsafeInputError)



def test_a_file_that_is_no_pickle_never_suggests_unsafe_loading(tmp_path: Path) -> None:
    path = tmp_path / "draft.pt"
    path.write_bytes(b"garbage " * 16)
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(path)
    assert caught.value.code == "SRC004" and not isinstance(caught.value, UnsafeInputError)
    assert "draft.pt" in caught.value.message and "Unsupported operand" in caught.value.message
    assert "weights_only" not in caught.value.message


def test_no_tensors_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no tensors found"):
        open_checkpoint(save(tmp_path, {"epoch": 3, "lr": 0.1}))



@pytest.mark.parametrize(
    "change,said",
    [
        (lambda t: t.to("meta"), "meta tensor"),
        (lambda t: t.to_sparse(), "sparse_coo"),
    ],
    ids=["meta", "sparse"],
)
def test_a_tensor_without_dense_data_is_a_checkpoint_error(tmp_path: Path, tensors: dict, change, said) -> None:
    path = save(tmp_path, {**tensors, "final_norm.weight": change(tensors["final_norm.weight"])})
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(path)
    assert caught.value.code == "SRC004" and caught.value.tensor == "final_norm.weight"
    assert "draft.pt" in caught.value.message and said in caught.value.message


_RSS_SCRIPT = r"""
import hashlib
import sys
from pathlib import Path
from dspark.converters.readers import open_checkpoint

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

checkpoint = open_checkpoint(Path(sys.argv[1]))
before = rss_mb()
for entry in checkpoint.entries:
    for chunk in checkpoint.reader.iter_chunks(entry, 4 << 20):
        hashlib.sha256(chunk)  # touches every page of the chunk
print(before, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_reading_a_mapped_file_gives_its_pages_back(tmp_path: Path) -> None:
    # 8 x 16 MB: reading everything without handing pages back would add
    # ~128 MB of resident memory.
    tensors = {f"w{i}": torch.full((4 << 20,), float(i)) for i in range(8)}
    path = save(tmp_path, tensors)
    result = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(path)], capture_output=True, text=True, check=True)
    before, after = map(float, result.stdout.split())
    assert after - before < 32, f"resident memory grew {after - before:.0f} MB while streaming 128 MB"
