"""Time and memory budgets: whatever a config or header claims, the gate
answers quickly, in bounded memory, with a report of bounded size.

The limits are generous (tens of times what a run takes) so that a slow
machine does not fail them; what they catch is work that grows with a
number the input made up (10**12 layers took forever before the bounds)."""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config

SECONDS = 2.0
PEAK_BYTES = 32 * 2**20


def measured(call):
    """(result, seconds, peak bytes Python allocated) of `call()`."""
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, seconds, peak


def reconfigure(draft: Path, **fields) -> Path:
    config = json.loads((draft / "config.json").read_text())
    config.update(fields)
    (draft / "config.json").write_text(json.dumps(config))
    return draft


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"num_hidden_layers": 10**12}, id="layers-1e12"),
        pytest.param({"num_target_layers": 10**12}, id="taps-1e12"),
        pytest.param({"target_hidden_size": 10**12, "hidden_size": 10**12}, id="widths-1e12"),
        pytest.param({"vocab_size": 10**12, "draft_vocab_size": 10**12}, id="vocab-1e12"),
    ],
)
def test_an_absurd_dimension_is_answered_fast_with_cfg003(tiny_draft, fields) -> None:
    draft = tiny_draft()
    check_checkpoint(draft)  # imports and the schema validator: paid once per process, not measured
    reconfigure(draft, **fields)
    report, seconds, peak = measured(lambda: check_checkpoint(draft))
    assert seconds < SECONDS and peak < PEAK_BYTES, (seconds, peak)
    cfg003 = {f.detail["field"] for f in report.findings if f.code == "CFG003"}
    assert set(fields) <= cfg003
    assert not report.passed()


def write_stray_tensors(draft: Path, count: int) -> None:
    """The tiny draft's config over a header of `count` tensors the loader
    has no destination for (what a wrong export can ship)."""
    header: dict = {}
    for index in range(count):
        header[f"stray.{index}.weight"] = {"dtype": "BF16", "shape": [1], "data_offsets": [2 * index, 2 * index + 2]}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    (draft / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(2 * count))


def test_100k_unexpected_tensors_give_a_small_report(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
    write_stray_tensors(draft, 100_000)
    started = time.perf_counter()
    report = check_checkpoint(draft)
    assert time.perf_counter() - started < 30
    document = json.dumps(report.to_dict())
    assert len(document) < 64 * 1024, len(document)
    # every stray tensor, every missing one, and FCN001 (fc_norm declared, none shipped)
    assert report.to_dict()["counts"]["error"] == 100_000 + 29 + 1
    [stray] = [f for f in report.findings if f.code == "INV002"]
    assert stray.detail["grouped_count"] == 100_000


@pytest.mark.parametrize(
    "field, value, message",
    [
        pytest.param("target_layer_ids", list(range(10**6)), "target_layer_ids: 1,000,000 items, more than the 64 allowed", id="taps"),
        pytest.param("architectures", ["x"] * 10**6 + ["K3DSparkModel"], "architectures: 1,000,001 items, more than the 16 allowed", id="architectures"),
    ],
)
def test_a_list_a_million_long_is_counted_not_walked(tiny_draft, field, value, message) -> None:
    draft = tiny_draft()
    check_checkpoint(draft)
    reconfigure(draft, **{field: value})
    started = time.perf_counter()
    report = check_checkpoint(draft)
    seconds = time.perf_counter() - started
    assert seconds < SECONDS * 2, seconds  # most of it is parsing 7 MB of JSON
    assert len(json.dumps(report.to_dict())) < 16 * 1024
    assert any(f.code == "CFG003" and message in f.message for f in report.findings)


def test_a_config_larger_than_any_model_needs_is_not_read(tiny_draft) -> None:
    draft = tiny_draft()
    config = json.loads((draft / "config.json").read_text())
    config["padding"] = "x" * (16 * 2**20)
    (draft / "config.json").write_text(json.dumps(config))
    report, seconds, peak = measured(lambda: check_checkpoint(draft))
    [finding] = report.errors
    assert finding.code == "CFG002" and finding.detail["reason"] == "too_large"
    assert peak < PEAK_BYTES, peak
