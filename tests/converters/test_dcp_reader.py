"""DCP folders written by torch.distributed.checkpoint itself, read back
with the restricted metadata unpickler."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from dspark.converters.readers.dcp import open_dcp, read_dcp_metadata  # noqa: E402
from dspark.converters.readers import detect_format, open_checkpoint  # noqa: E402
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes  # noqa: E402
from dspark.schema.errors import CheckpointError, UnsafeInputError, UsageError  # noqa: E402

# dcp.save in one process, without a process group, says so every time.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def draft_state(seed: int = 0) -> dict[str, "torch.Tensor"]:
    """A tiny K3 draft as TorchSpec's training module holds it: fp32, the
    frozen embedding, the confidence head and the vocab maps."""
    spec = SCALES["tiny"]
    tensors = make_tensors(tensor_shapes(spec), dtype="float32", seed=seed)
    tensors["t2d"] = torch.ones(spec.vocab_size, dtype=torch.bool)
    tensors["d2t"] = torch.arange(spec.vocab_size, dtype=torch.int64)
    return tensors


def write_dcp(model_dir: Path, tensors: dict, *, with_extras: bool = True) -> Path:
    """`dcp.save` in one process, as FSDP would lay out the keys: the draft
    under `draft_model.`, a frozen target copy, optimizer state and a step
    counter beside it."""
    state: dict = {"draft_model": {k: v.clone() for k, v in tensors.items()}}
    if with_extras:
        state["target_model"] = {"embed_tokens.weight": torch.zeros(4, 3)}
        state["optimizer"] = {"exp_avg": {"layers.0.mlp.up_proj.weight": torch.zeros(3, 2)}, "step": 7}
    model_dir.mkdir(parents=True, exist_ok=True)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(model_dir)))
    return model_dir


def torch_metadata(model: Path):
    """The metadata as torch itself reads it (a full unpickle: fine for
    files this test wrote), to change and write back with pickle.dumps."""
    return dcp.FileSystemReader(str(model)).read_metadata()


def write_config(folder: Path, **changes) -> Path:
    config = draft_config(SCALES["tiny"])
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder / "config.json"


@pytest.fixture(scope="module")
def tensors() -> dict:
    return draft_state()


@pytest.fixture
def run(tmp_path: Path, tensors: dict) -> Path:
    """`run/iter_3/model` with config.json in `run/iter_3`."""
    model = write_dcp(tmp_path / "run" / "iter_3" / "model", tensors)
    write_config(model.parent)
    return tmp_path / "run"


def test_reads_only_the_draft_and_reports_what_is_left_behind(run: Path, tensors: dict) -> None:
    checkpoint = open_checkpoint(run / "iter_3")
    assert checkpoint.format == "dcp"
    assert checkpoint.root == run / "iter_3" / "model"
    assert {e.stored_name for e in checkpoint.entries} == {f"draft_model.{n}" for n in tensors}
    assert {e.served_name for e in checkpoint.entries} == set(tensors)
    left = [f for f in checkpoint.findings if f.code == "SRC002"]
    assert len(left) == 1
    assert set(left[0].detail["names"]) == {
        "target_model.embed_tokens.weight", "optimizer.exp_avg.layers.0.mlp.up_proj.weight", "optimizer.step",
    }
    assert checkpoint.config is not None and checkpoint.family.name == "k3_dspark"


def test_every_tensor_reads_back_exactly(run: Path, tensors: dict) -> None:
    checkpoint = open_checkpoint(run / "iter_3" / "model")
    for entry in checkpoint.entries:
        source = tensors[entry.served_name]
        assert entry.dtype == {"torch.float32": "F32", "torch.bool": "BOOL", "torch.int64": "I64"}[str(source.dtype)]
        assert entry.shape == tuple(source.shape)
        assert checkpoint.reader.read_raw(entry) == source.contiguous().view(torch.uint8).numpy().tobytes(), entry.served_name


def torch_load_chunk(model: Path, chunk) -> "torch.Tensor":
    """What torch.load makes of one chunk's byte range (torch's own DCP
    reader does exactly this)."""
    with open(model / chunk.file, "rb") as handle:
        handle.seek(chunk.start)
        return torch.load(io.BytesIO(handle.read(chunk.length)), weights_only=True)


def raw(tensor) -> bytes:
    return tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""


MIXED = {
    "bf16": torch.randn(5, 6, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16),
    "fp32": torch.randn(4, 3, 2, generator=torch.Generator().manual_seed(2)),
    "int64": torch.arange(-9, 30, dtype=torch.int64),
    "bool": torch.arange(11) % 3 == 0,
    "fp16-scalar": torch.tensor(2.5, dtype=torch.float16),
    "fp8": torch.linspace(-3, 3, 16).to(torch.float8_e4m3fn),
    "empty": torch.zeros(0, 4, dtype=torch.bfloat16),
    "transposed": torch.arange(24, dtype=torch.float32).reshape(4, 6).t(),
}


def test_bytes_read_in_place_equal_torch_load(tmp_path: Path) -> None:
    model = tmp_path / "model"
    dcp.save({"model_state": {"model": {"draft_model": dict(MIXED)}}}, checkpoint_id=str(model), no_dist=True)
    checkpoint = open_checkpoint(model)
    assert {e.served_name for e in checkpoint.entries} == set(MIXED)
    for entry in checkpoint.entries:
        want = MIXED[entry.served_name]
        chunks = [torch_load_chunk(model, c) for c in entry.locator if c.numel]
        by_torch = b"".join(raw(c) for c in chunks)
        assert checkpoint.reader.read_raw(entry) == by_torch == raw(want), entry.served_name
    # the transposed tensor is stored with its strides: read, then put in C order
    assert not checkpoint.reader.locate(checkpoint.entry("transposed"), checkpoint.entry("transposed").locator[0]).is_contiguous


def test_bytes_equal_what_torch_dcp_load_gives(tmp_path: Path, tensors: dict) -> None:
    model = write_dcp(tmp_path / "model", tensors)
    checkpoint = open_checkpoint(model)
    loaded = {f"draft_model.{n}": torch.empty_like(t) for n, t in tensors.items()}
    dcp.load(loaded, checkpoint_id=str(model), no_dist=True)
    for entry in checkpoint.entries:
        assert checkpoint.reader.read_raw(entry) == raw(loaded[entry.stored_name]), entry.served_name


def test_chunks_stream_in_bounded_pieces(tmp_path: Path) -> None:
    model = tmp_path / "model"
    dcp.save({"w": torch.arange(1000, dtype=torch.int64)}, checkpoint_id=str(model), no_dist=True)
    checkpoint = open_checkpoint(model)
    pieces = [bytes(p) for p in checkpoint.reader.iter_chunks(checkpoint.entries[0], 4096)]
    assert [len(p) for p in pieces] == [4096, 3904]
    assert b"".join(pieces) == raw(torch.arange(1000, dtype=torch.int64))


@pytest.mark.parametrize("given", ["run", "iter_10", "model"])
def test_run_iter_and_model_folders_are_all_accepted(tmp_path: Path, tensors: dict, given: str) -> None:
    run = tmp_path / "run"
    for n in (2, 9, 10):
        # a different seed per iteration, to see which one was read
        write_dcp(run / f"iter_{n}" / "model", draft_state(seed=n), with_extras=False)
    write_config(run)
    path = {"run": run, "iter_10": run / "iter_10", "model": run / "iter_10" / "model"}[given]
    checkpoint = open_checkpoint(path)
    assert checkpoint.root == run / "iter_10" / "model"
    # config.json is searched from the weights up to the training run folder
    assert checkpoint.config_path == run / "config.json"
    norm = checkpoint.entry("final_norm.weight")
    assert checkpoint.reader.read_raw(norm) == draft_state(seed=10)["final_norm.weight"].numpy().tobytes()
    picked = [f for f in checkpoint.findings if f.code == "SRC001"]
    if given == "run":
        assert picked and "iter_10" in picked[0].message and picked[0].detail["iterations"] == ["iter_2", "iter_9", "iter_10"]
    else:
        assert not picked


def test_metadata_reads_as_torch_reads_it(run: Path) -> None:
    """The allow-list unpickler rebuilds torch's records as plain ones;
    every field dspark uses must come out as torch's own reader has it."""
    model = run / "iter_3" / "model"
    ours, theirs = read_dcp_metadata(model / ".metadata"), torch_metadata(model)
    assert list(ours.state_dict_metadata) == list(theirs.state_dict_metadata)
    for fqn, want in theirs.state_dict_metadata.items():
        got = ours.state_dict_metadata[fqn]
        assert got.kind == type(want).__name__
        if got.kind == "TensorStorageMetadata":
            assert got.size == tuple(want.size) and got.properties.dtype.name == str(want.properties.dtype)[6:]
            assert [(c.offsets, c.sizes) for c in got.chunks] == [(tuple(c.offsets), tuple(c.sizes)) for c in want.chunks]
    stored = {(i.fqn, i.offset): (r.relative_path, r.offset, r.length) for i, r in ours.storage_data.items()}
    assert stored == {(i.fqn, tuple(i.offset) if i.offset is not None else None): (r.relative_path, r.offset, r.length)
                      for i, r in theirs.storage_data.items()}


def test_a_folder_without_dcp_metadata_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError):
        open_dcp(tmp_path / "empty")


class _Shell:
    """A pickle payload that would create `marker` if it ever ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Eval:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({str(self.marker)!r}, 'w').close()",))


class _TorchLoad:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (torch.load, (str(self.marker),))


@pytest.mark.parametrize("payload", [_Shell, _Eval, _TorchLoad], ids=["os.system", "builtins.eval", "torch.load"])
@pytest.mark.parametrize("placement", ["whole-file", "inside-real-metadata"])
def test_metadata_with_a_code_payload_is_refused_and_never_runs(
    run: Path, tmp_path: Path, payload, placement: str
) -> None:
    marker = tmp_path / "PAYLOAD_RAN"
    metadata_file = run / "iter_3" / "model" / ".metadata"
    if placement == "whole-file":
        metadata_file.write_bytes(pickle.dumps(payload(marker)))
    else:
        # A genuine Metadata object with the payload hidden in one field.
        metadata = torch_metadata(metadata_file.parent)
        metadata.storage_meta = payload(marker)
        metadata_file.write_bytes(pickle.dumps(metadata))
    with pytest.raises(UnsafeInputError) as caught:
        open_checkpoint(run / "iter_3")
    assert caught.value.code == "SRC003"
    assert ".metadata" in caught.value.message and "refusing" in caught.value.message
    assert not marker.exists()


def test_a_tensor_blob_with_a_code_payload_is_refused_and_never_runs(run: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PAYLOAD_RAN"
    model = run / "iter_3" / "model"
    metadata = torch_metadata(model)
    # Append a torch.save'd payload to the data file and point one tensor at it.
    evil = tmp_path / "evil.pt"
    torch.save({"x": _Shell(marker)}, evil)
    data_file = next(model.glob("*.distcp"))
    start = data_file.stat().st_size
    with open(data_file, "ab") as handle:
        handle.write(evil.read_bytes())
    for index, info in metadata.storage_data.items():
        if index.fqn == "draft_model.final_norm.weight":
            info.relative_path, info.offset, info.length = data_file.name, start, evil.stat().st_size
    (model / ".metadata").write_bytes(pickle.dumps(metadata))

    checkpoint = open_checkpoint(model)
    with pytest.raises(UnsafeInputError) as caught:
        checkpoint.reader.read_raw(checkpoint.entry("final_norm.weight"))
    assert caught.value.code == "SRC003"
    assert not marker.exists()


def _rewrite_storage(model: Path, fqn: str, **changes) -> None:
    metadata = torch_metadata(model)
    for index, info in metadata.storage_data.items():
        if index.fqn == fqn:
            for key, value in changes.items():
                setattr(info, key, value)
    (model / ".metadata").write_bytes(pickle.dumps(metadata))


@pytest.mark.parametrize(
    "changes,reason",
    [
        ({"relative_path": "../outside.distcp"}, "not a plain file name"),
        ({"relative_path": "missing.distcp"}, "is missing"),
        ({"offset": 10**9}, "runs outside"),
    ],
    ids=["path-traversal", "missing-file", "range-outside-file"],
)
def test_bad_storage_records_are_refused(run: Path, changes: dict, reason: str) -> None:
    model = run / "iter_3" / "model"
    (run / "iter_3" / "outside.distcp").write_bytes(b"x" * 10_000)
    _rewrite_storage(model, "draft_model.context_norm.weight", **changes)
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(model)
    assert caught.value.code == "SRC004"
    assert reason in caught.value.message and "context_norm" in caught.value.message


def test_a_corrupt_blob_is_a_checkpoint_error(run: Path) -> None:
    model = run / "iter_3" / "model"
    checkpoint = open_checkpoint(model)
    entry = checkpoint.entry("final_norm.weight")
    chunk = entry.locator[0]
    with open(model / chunk.file, "r+b") as handle:
        handle.seek(chunk.start)
        handle.write(b"\x00" * 64)  # wipe the zip header of that blob
    with pytest.raises(CheckpointError) as caught:
        checkpoint.reader.read_raw(entry)
    assert caught.value.code == "SRC004"


def test_garbage_metadata_is_a_checkpoint_error(run: Path) -> None:
    (run / "iter_3" / "model" / ".metadata").write_bytes(b"\x80\x04not a pickle at all")
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(run / "iter_3")
    assert caught.value.code == "SRC004" and not isinstance(caught.value, UnsafeInputError)



def _a_storage_record_is_a_path(metadata) -> None:
    index = next(i for i in metadata.storage_data if i.fqn == "draft_model.final_norm.weight")
    metadata.storage_data[index] = Path("x.distcp")


def _first_storage_key_is_a_string(metadata) -> None:
    index = next(iter(metadata.storage_data))
    metadata.storage_data["x"] = metadata.storage_data.pop(index)


def _a_tensor_size_is_text(metadata) -> None:
    metadata.state_dict_metadata["draft_model.final_norm.weight"].size = "abc"


@pytest.mark.parametrize(
    "mutate",
    [_a_storage_record_is_a_path, _first_storage_key_is_a_string, _a_tensor_size_is_text],
    ids=["storage-record", "storage-key", "tensor-size"],
)
def test_malformed_metadata_records_are_a_checkpoint_error(run: Path, mutate) -> None:
    model = run / "iter_3" / "model"
    metadata = torch_metadata(model)
    mutate(metadata)
    (model / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(model)
    assert caught.value.code == "SRC004" and not isinstance(caught.value, UnsafeInputError)
    assert ".metadata" in caught.value.message and "malformed metadata record" in caught.value.message


# --------------------------------------------------------------------------
# A sharded (FSDP-style) checkpoint: two gloo ranks on CPU, tensors split
# across ranks by DTensor, saved by dcp.save.

_TWO_RANKS = textwrap.dedent('''
    import os, sys, torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def rank_main(rank, out, init, source):
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
        mesh = init_device_mesh("cpu", (2,))
        tensors = torch.load(source, weights_only=True)
        state = {}
        for name, tensor in tensors.items():
            if tensor.dim() == 2 and name.startswith(("context_proj", "layers.0.self_attn.kv_b_proj")):
                placement = Shard(1)
            elif tensor.dim() == 2 or name == "d2t":
                placement = Shard(0)
            else:
                placement = Replicate()
            state[name] = distribute_tensor(tensor, mesh, [placement])
        dcp.save({"draft_model": state}, checkpoint_id=out)
        dist.destroy_process_group()

    if __name__ == "__main__":
        out, source = sys.argv[1], sys.argv[2]
        mp.spawn(rank_main, args=(out, "file://" + os.path.abspath(out + ".rendezvous"), source), nprocs=2)
''')


SPLIT_SAMPLE = (
    "context_proj.weight", "layers.0.mlp.up_proj.weight", "markov_head.markov_w1.weight",
    "confidence_head.proj.weight", "final_norm.weight", "d2t", "t2d",
    "layers.0.self_attn.kv_b_proj.weight", "layers.1.self_attn.q_a_proj.weight",
)
# saved in bf16, as TorchSpec's trainer saves the draft: one split by
# columns (assembled), one by rows (streamed)
BF16_IN_SAMPLE = ("layers.0.self_attn.kv_b_proj.weight", "layers.1.self_attn.q_a_proj.weight")


def split_sample(tensors: dict) -> dict:
    return {n: tensors[n].to(torch.bfloat16) if n in BF16_IN_SAMPLE else tensors[n] for n in SPLIT_SAMPLE}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory, tensors: dict) -> Path:
    folder = tmp_path_factory.mktemp("sharded")
    source = folder / "source.pt"
    # A few tensors of each kind: every placement costs collectives.
    torch.save(split_sample(tensors), source)
    script = folder / "two_ranks.py"
    script.write_text(_TWO_RANKS)
    model = folder / "iter_1" / "model"
    model.parent.mkdir()  # the rendezvous file lives beside the model folder
    result = subprocess.run(
        [sys.executable, str(script), str(model), str(source)], capture_output=True, text=True, timeout=240
    )
    if result.returncode != 0:
        pytest.skip(f"cannot run two gloo ranks here: {result.stderr[-500:]}")
    write_config(model.parent)
    return model.parent


def test_tensors_split_across_ranks_are_assembled(sharded: Path, tensors: dict) -> None:
    from dspark.converters.readers.dcp import _row_major_runs

    checkpoint = open_checkpoint(sharded)
    model = sharded / "model"
    assert checkpoint.weight_files == ["__0_0.distcp", "__1_0.distcp"]
    assert {e.served_name for e in checkpoint.entries} == set(SPLIT_SAMPLE)
    split = {e.served_name for e in checkpoint.entries if len(e.locator) > 1}
    # confidence_head.proj.weight has one row for two ranks: one chunk is empty
    assert split == {
        "context_proj.weight", "layers.0.mlp.up_proj.weight", "markov_head.markov_w1.weight", "d2t",
        "confidence_head.proj.weight", "layers.0.self_attn.kv_b_proj.weight", "layers.1.self_attn.q_a_proj.weight",
    }
    # split by rows: streamed chunk after chunk; by columns: assembled
    streamed = {e.served_name for e in checkpoint.entries if _row_major_runs(e.locator, e.shape) is not None}
    assert "layers.1.self_attn.q_a_proj.weight" in streamed and "d2t" in streamed
    assert not {"context_proj.weight", "layers.0.self_attn.kv_b_proj.weight"} & streamed
    expected = split_sample(tensors)
    for entry in checkpoint.entries:
        assert checkpoint.reader.read_raw(entry) == raw(expected[entry.served_name]), entry.served_name
        for chunk in entry.locator:
            if chunk.numel:  # each chunk in place equals torch.load of its blob
                saved = checkpoint.reader.locate(entry, chunk)
                start, end = saved.byte_range
                with open(model / chunk.file, "rb") as handle:
                    assert os.pread(handle.fileno(), end - start, start) == raw(torch_load_chunk(model, chunk))


def test_a_split_tensor_counts_in_every_file_that_holds_a_part_of_it(sharded: Path) -> None:
    """`inspect` and the report's `files` give each rank's file its share."""
    from dspark.converters.check import check_checkpoint

    checkpoint = open_checkpoint(sharded)
    report = check_checkpoint(sharded, verdict="contents")
    files = {f.name: f for f in report.files}
    on_disk = {name: 0 for name in files}
    for entry in checkpoint.entries:
        for chunk in entry.locator:
            if chunk.numel:
                on_disk[chunk.file] += chunk.numel * entry.nbytes // max(1, sum(c.numel for c in entry.locator))
    assert {name: f.nbytes for name, f in files.items()} == on_disk
    assert all(f.nbytes > 0 and f.tensors > 0 for f in files.values())
    assert sum(f.nbytes for f in files.values()) == sum(e.nbytes for e in checkpoint.entries)


def test_detect_format_sees_all_three_dcp_layouts(run: Path) -> None:
    for path in (run, run / "iter_3", run / "iter_3" / "model"):
        assert detect_format(path) == "dcp"
