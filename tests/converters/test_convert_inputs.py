"""Converting what TorchSpec writes besides HF folders: DCP folders (saved
by torch.distributed.checkpoint) and .pt state dicts (saved by torch.save)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from safetensors import safe_open

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.schema.errors import CheckpointError  # noqa: E402
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

SPEC = SCALES["tiny"]
SERVED = set(tensor_shapes(SPEC, skipped=False))
# What convert writes for the default engine, TokenSpeed 0.1.1: the served tensors and the draft's
# embed_tokens, which it loads at --pipeline-parallel-size > 1 (tests/converters/test_convert_launches.py).
WRITTEN = SERVED | {"embed_tokens.weight"}


@pytest.fixture(scope="module")
def training_state() -> dict:
    """The draft module's state in fp32, with what training keeps beside it."""
    tensors = make_tensors(tensor_shapes(SPEC), dtype="float32", seed=5)
    tensors["t2d"] = torch.ones(SPEC.vocab_size, dtype=torch.bool)
    tensors["d2t"] = torch.arange(SPEC.vocab_size, dtype=torch.int64)
    return tensors


def write_config(folder: Path) -> None:
    (folder / "config.json").write_text(json.dumps(draft_config(SPEC), indent=2))


def write_dcp_run(run: Path, tensors: dict) -> Path:
    model = run / "iter_20" / "model"
    model.mkdir(parents=True)
    state = {
        "draft_model": {k: v.clone() for k, v in tensors.items()},
        "optimizer": {"exp_avg_sq": {"context_proj.weight": torch.zeros(2, 2)}, "step": 20},
    }
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(model)))
    write_config(run)
    return run


def read_output(folder: Path) -> dict:
    tensors = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as handle:
            tensors.update({n: handle.get_tensor(n) for n in handle.keys()})
    return tensors


def assert_is_served_cast(out: Path, source: dict, dtype) -> None:
    written = read_output(out)
    assert set(written) == WRITTEN
    for name, tensor in written.items():
        expected = source[name].to(dtype)
        assert tensor.dtype == dtype
        assert torch.equal(tensor.view(torch.uint8), expected.view(torch.uint8)), name
    report = check_checkpoint(out, deep=True, verify_hashes=True, environ={})
    assert report.passed(strict=True), [f.message for f in report.findings if f.severity.value != "info"]


def digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_dcp_run_converts_to_the_served_layout(tmp_path: Path, training_state: dict) -> None:
    run = write_dcp_run(tmp_path / "run", training_state)
    report = convert_checkpoint(run, tmp_path / "out", ConvertOptions.from_flags(dtype="bfloat16"))
    assert_is_served_cast(tmp_path / "out", training_state, torch.bfloat16)
    assert report.plan.source_format == "dcp"
    assert {d.served_name for d in report.plan.dropped} >= {"t2d", "d2t"}
    notes = {f.code for f in report.plan.findings}
    assert {"SRC001", "SRC002"} <= notes  # newest iteration picked; optimizer state left behind
    manifest = json.loads((tmp_path / "out" / "dspark-manifest.json").read_text())
    assert manifest["source_format"] == "dcp"


def test_dcp_conversion_is_byte_identical_on_repeat(tmp_path: Path, training_state: dict) -> None:
    run = write_dcp_run(tmp_path / "run", training_state)
    convert_checkpoint(run / "iter_20", tmp_path / "a", ConvertOptions.from_flags(dtype="bfloat16"))
    convert_checkpoint(run / "iter_20" / "model", tmp_path / "b", ConvertOptions.from_flags(dtype="bfloat16"))
    assert digest(tmp_path / "a") == digest(tmp_path / "b")


@pytest.mark.parametrize("nested", [None, "state_dict", "draft_model"])
def test_a_pt_state_dict_converts_to_the_served_layout(tmp_path: Path, training_state: dict, nested) -> None:
    state = {f"draft_model.{k}": v for k, v in training_state.items()}
    if nested:
        state = {nested: state, "epoch": 3}
    (tmp_path / "ckpt").mkdir()
    torch.save(state, tmp_path / "ckpt" / "draft.pt")
    write_config(tmp_path / "ckpt")
    report = convert_checkpoint(tmp_path / "ckpt" / "draft.pt", tmp_path / "out", ConvertOptions.from_flags(dtype="float16"))
    assert_is_served_cast(tmp_path / "out", training_state, torch.float16)
    assert report.plan.source_format == "pt"


def test_a_pt_file_with_bf16_weights_is_kept_as_is(tmp_path: Path, training_state: dict) -> None:
    state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in training_state.items()}
    (tmp_path / "ckpt").mkdir()
    torch.save(state, tmp_path / "ckpt" / "draft.pt")
    write_config(tmp_path / "ckpt")
    report = convert_checkpoint(tmp_path / "ckpt", tmp_path / "out")
    assert not report.plan.casts
    assert_is_served_cast(tmp_path / "out", state, torch.bfloat16)


def test_a_refused_pt_input_is_named_not_the_output_it_would_have_become(tmp_path: Path, training_state: dict) -> None:
    state = {**training_state, "extra_view": torch.ones(4)}  # no destination in the served model
    (tmp_path / "ckpt").mkdir()
    torch.save(state, tmp_path / "ckpt" / "draft.pt")
    write_config(tmp_path / "ckpt")
    with pytest.raises(CheckpointError) as refused:
        convert_checkpoint(tmp_path / "ckpt" / "draft.pt", tmp_path / "out")
    [unexpected] = [f for f in refused.value.detail["findings"] if f["tensor"] == "extra_view"]
    assert unexpected["file"] == "draft.pt" and unexpected["message"].startswith("draft.pt: ")
    assert not (tmp_path / "out").exists()
    # a tensor stored under another name is named as the file holds it, too
    renamed = {f"draft_model.{k}": v for k, v in training_state.items()}
    renamed["draft_model.final_norm.weight"] = torch.ones(3, 3)
    torch.save(renamed, tmp_path / "ckpt" / "draft.pt")
    with pytest.raises(CheckpointError) as refused:
        convert_checkpoint(tmp_path / "ckpt" / "draft.pt", tmp_path / "out")
    [wrong] = [f for f in refused.value.detail["findings"] if f["tensor"] == "final_norm.weight"]
    assert wrong["message"].startswith("draft.pt (stored as draft_model.final_norm.weight): ")
