"""TokenSpeed's PyPI releases where a verdict moves between them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.examples.fabricate import fabricate  # noqa: E402


def _errors(report) -> set[str]:
    return {finding.code for finding in report.errors}


@pytest.mark.parametrize("rope_scaling, expected", [
    (None, "CFG003"),                                               # transformers fills {"rope_type": "default"}
    ({"rope_type": "linear", "factor": 4.0}, "CFG003"),             # no original length for DeepSeek YaRN
    ({"type": "yarn", "factor": 4.0}, None),                        # transformers fills the original length
    # built, but as DeepSeek YaRN: served otherwise than trained
    ({"rope_type": "linear", "factor": 4.0, "original_max_position_embeddings": 4096}, "ENG001"),
])
def test_0_1_0_builds_every_eagle3_mla_rope_as_deepseek_yarn(tmp_path, rope_scaling, expected):
    draft = fabricate(tmp_path / "d", family="eagle3_mla")
    if rope_scaling is not None:
        path = draft / "config.json"
        config = json.loads(path.read_text())
        config["rope_scaling"] = rope_scaling
        path.write_text(json.dumps(config))
    report = check_checkpoint(draft, engine="tokenspeed@0.1.0")
    assert _errors(report) == ({expected} if expected else set())
    if expected:
        assert any("rope" in finding.message for finding in report.errors)
    # 0.1.1 builds plain RoPE for anything but YaRN: a plain draft loads there.
    if rope_scaling is None:
        assert check_checkpoint(draft, engine="tokenspeed@0.1.1").passed()
