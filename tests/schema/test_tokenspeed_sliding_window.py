"""TokenSpeed 0.1.1's drafter refuses a draft with windowed layers when its
attention backend ignores per-layer windows (execution/drafter/dflash.py
@tokenspeed==0.1.1:172, 187-222). Every backend that builds a GQA draft
applies them, the default `mha` included: a GQA DFlash or DSpark draft with
sliding layers is served with its windows, never refused for them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.examples.fabricate import fabricate  # noqa: E402
from dspark.schema.engines import engine_by_spec  # noqa: E402


@pytest.mark.parametrize("variant", ["dflash", "dspark"])
def test_a_gqa_draft_with_sliding_layers_passes_on_0_1_1(tmp_path, variant):
    folder = fabricate(tmp_path / "d", family="dflash_gqa", variant=variant)
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["layer_types"] = ["sliding_attention"] + config["layer_types"][1:]
    config["sliding_window"] = 2048
    path.write_text(json.dumps(config))
    report = check_checkpoint(folder, engine="tokenspeed@0.1.1")
    assert report.passed(), [f.message for f in report.errors]


def test_the_reading_is_cited():
    source = engine_by_spec("tokenspeed@0.1.1").loader_for("dflash_gqa").sources["sliding window backend"]
    assert source.commit == "tokenspeed==0.1.1" and "187-222" in source.lines
