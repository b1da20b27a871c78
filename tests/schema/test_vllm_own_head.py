"""vLLM 0.31.0+ keeps a DFlash draft's own lm_head when its config sets
has_own_lm_head, loaded or not (v1/worker/gpu/spec_decode/dflash/utils.py@
vllm==0.33.0:60-73); 0.30.0 never reads the flag and attaches the target's
head; a DSpark draft shares by the shipped head alone (dspark/utils.py:
130-150). A DFlash draft declaring the flag without shipping the head is
served an uninitialised head (INV001, served wrong) from 0.31.0."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file, save_file  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.examples.fabricate import fabricate  # noqa: E402


def _draft(tmp_path, variant, *, ship_head=False):
    folder = fabricate(tmp_path / variant, family="dflash_gqa", variant=variant)
    config = json.loads((folder / "config.json").read_text())
    config["has_own_lm_head"] = True
    (folder / "config.json").write_text(json.dumps(config))
    if ship_head:
        path = next(folder.glob("*.safetensors"))
        tensors = load_file(str(path))
        tensors["lm_head.weight"] = torch.zeros(config["vocab_size"], config["hidden_size"], dtype=torch.bfloat16)
        save_file(tensors, str(path), metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize("engine, fails", [("vllm@0.30.0", False), ("vllm@0.31.0", True), ("vllm@0.33.0", True),
                                           ("sglang@0.5.23", False), ("tokenspeed@0.1.1", False)])
def test_declared_own_head_not_shipped(tmp_path, engine, fails):
    report = check_checkpoint(_draft(tmp_path, "dflash"), engine=engine)
    codes = [f.code for f in report.errors if f.tensor == "lm_head.weight"]
    assert (codes == ["INV001"]) is fails
    if fails:
        assert report.engine_verdicts()[0]["outcome"] == "served_wrong"


def test_dspark_ignores_the_flag(tmp_path):
    report = check_checkpoint(_draft(tmp_path, "dspark"), engine="vllm@0.33.0")
    assert not [f for f in report.errors if f.tensor == "lm_head.weight"]


def test_a_shipped_head_is_served(tmp_path):
    report = check_checkpoint(_draft(tmp_path, "dflash", ship_head=True), engine="vllm@0.33.0")
    assert not [f for f in report.errors if f.tensor == "lm_head.weight" and f.code == "INV001"]
