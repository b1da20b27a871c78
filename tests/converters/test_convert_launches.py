"""convert never drops a tensor a launch the engine supports needs:
TokenSpeed 0.1.1's K3 DSpark model skips the draft's embed_tokens at
--pipeline-parallel-size 1 but builds and loads its own on the last
pipeline stage when it is larger, and refuses a draft without it there
(models/kimi_k3_dspark.py@tokenspeed==0.1.1:402-416, 633-637, 697-703)."""

from __future__ import annotations

import pytest
from safetensors import safe_open

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import convert_checkpoint
from dspark.converters.convert_plan import ConvertOptions, plan_conversion

pytest.importorskip("torch")


def names(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "np") as handle:
        return set(handle.keys())


def test_the_0_1_1_output_keeps_the_embedding_the_pipeline_stage_loads(tiny_draft, tmp_path):
    source = tiny_draft()
    plan = plan_conversion(source, tmp_path / "out", ConvertOptions(engine="tokenspeed@0.1.1"))
    [kept] = [f for f in plan.findings if f.code == "CNV002"]
    assert kept.tensor == "embed_tokens.weight" and kept.detail["launch"] == "--pipeline-parallel-size > 1"
    convert_checkpoint(source, tmp_path / "out", ConvertOptions(engine="tokenspeed@0.1.1"))
    served = names(tmp_path / "out")
    assert "embed_tokens.weight" in served and not any(n.startswith(("lm_head", "confidence_head")) for n in served)
    report = check_checkpoint(tmp_path / "out", engine="tokenspeed@0.1.1")
    assert report.passed()
    [note] = [f for f in report.findings if f.code == "INV005" and f.tensor == "embed_tokens.weight"]
    assert "which needs it" in note.message and "for nothing" not in note.message


def test_an_engine_that_never_loads_it_still_drops_it(tiny_draft, tmp_path):
    convert_checkpoint(tiny_draft(), tmp_path / "out", ConvertOptions(engine="tokenspeed@pr1031"))
    assert "embed_tokens.weight" not in names(tmp_path / "out")


def test_convert_for_vllm_keeps_the_k3_confidence_head_it_loads(tiny_draft, tmp_path):
    # vLLM builds and loads the head when enable_confidence_head (dspark_mla.py@vllm==0.33.0:194-205, 459-464);
    # TokenSpeed skips it as training-only: only the output for TokenSpeed leaves it behind
    source = tiny_draft(fc_norm=False)
    convert_checkpoint(source, tmp_path / "vllm", ConvertOptions(engine="vllm"))
    assert {"confidence_head.proj.weight", "confidence_head.proj.bias"} <= names(tmp_path / "vllm")
    assert check_checkpoint(tmp_path / "vllm", engine="vllm").passed()
    convert_checkpoint(source, tmp_path / "ts", ConvertOptions(engine="tokenspeed"))
    assert not any(n.startswith("confidence_head") for n in names(tmp_path / "ts"))
