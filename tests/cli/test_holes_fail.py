"""A weight file that is mostly a hole (an unfinished download) fails a
header-only check, as the gate's full read fails it: they agree. A fixture
that says its hole is meant is named one and not failed."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK  # noqa: E402


# A good draft of a few MB, so a hole in it is more than rounding.
MEDIUM = dict(
    hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
    q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
    vocab_size=512, target_hidden_size=256, target_num_hidden_layers=12,
    target_layer_ids=(1, 4, 7, 9, 11), markov_rank=16, confidence_hidden=8,
)


@pytest.fixture
def downloaded(tmp_path) -> Path:
    """A good draft whose weight file stopped after 40 KiB of payload: its
    length kept, the rest a hole, as a preallocated download that never
    finished leaves it."""
    from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors

    spec = SCALES["tiny"].__class__(**MEDIUM)
    draft = tmp_path / "draft"
    draft.mkdir()
    write_safetensors(draft, {"model." + n: t for n, t in make_tensors(tensor_shapes(spec), seed=3).items()})
    (draft / "config.json").write_text(json.dumps(draft_config(spec)))
    weights = draft / "model.safetensors"
    size = weights.stat().st_size
    header_bytes = 8 + int.from_bytes(weights.read_bytes()[:8], "little")
    with open(weights, "r+b") as handle:
        handle.truncate(header_bytes + 40 * 1024)
        handle.truncate(size)
    if weights.stat().st_blocks * 512 >= size // 2:
        pytest.skip("this filesystem does not keep sparse files")
    return draft


def codes(run) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in run.json()["findings"]}


def test_a_mostly_hole_weight_file_fails_check_as_it_fails_the_gate(dspark, downloaded):
    check = dspark("check", downloaded, "--format", "json")
    assert check.exit_code == EXIT_CHECK_FAILED
    assert codes(check)["PAY006"] == "error"
    gate = dspark("gate", downloaded, "--format", "json")
    assert gate.exit_code == EXIT_CHECK_FAILED
    assert codes(gate)["PAY006"] == "error"


def test_a_fixture_that_marks_its_hole_is_named_not_failed(dspark, tmp_path):
    from dspark.examples.fabricate import fabricate

    draft = fabricate(tmp_path / "fixture", family="k3_dspark", scale="full", sparse=True)
    run = dspark("check", draft, "--format", "json")
    assert run.exit_code == EXIT_OK
    found = codes(run)
    assert found["PAY007"] == "info" and "PAY006" not in found


def test_the_mark_is_what_tells_a_fixture_from_a_download(dspark, tmp_path):
    from dspark.examples.fabricate import fabricate

    draft = fabricate(tmp_path / "fixture", family="k3_dspark", scale="full", sparse=True)
    weights = draft / "model.safetensors"
    with open(weights, "r+b") as handle:
        length = struct.unpack("<Q", handle.read(8))[0]
        header = json.loads(handle.read(length))
        header["__metadata__"] = {"format": "pt"}  # the same hole, unmarked: as a download leaves it
        raw = json.dumps(header, separators=(",", ":")).encode().ljust(length)
        handle.seek(8)
        handle.write(raw)
    run = dspark("check", draft, "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    assert codes(run)["PAY006"] == "error" and "PAY007" not in codes(run)
