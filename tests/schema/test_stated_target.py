"""TGT009: without --target, a draft's taps are judged against the target
layer count its own config states, on each engine's capture range (SGLang
and TokenSpeed capture a DFlash id k entering layer k+1, so the last layer's
id is never reached; vLLM captures it). EAGLE-3 configs state it only where
a user writes it (no trainer does): its list on each engine's range, and
with no list the engine reads, the target's defaults on that depth."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.examples.fabricate import fabricate, target_config  # noqa: E402


def _codes(report):
    return [f.code for f in report.findings]


def _edit(folder, change):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("engine, fails", [("sglang@0.5.23", True), ("tokenspeed@0.1.1", True),
                                           ("vllm@0.33.0", False)])
def test_last_layer_tap_against_the_stated_layer_count(tmp_path, engine, fails):
    folder = fabricate(tmp_path / "d", family="dflash_gqa", defect="tap-last-layer")
    report = check_checkpoint(folder, engine=engine)
    assert ("TGT009" in _codes(report)) is fails
    if fails:
        finding = next(f for f in report.findings if f.code == "TGT009")
        assert finding.detail["outside"] == [9] and finding.detail["stated_by"] == "target_num_hidden_layers"
        assert not report.passed()


def test_num_target_layers_as_specforge_writes_it(tmp_path):
    """SpecForge writes the target's layer count as num_target_layers."""
    folder = _edit(fabricate(tmp_path / "d", family="dflash_gqa", defect="tap-last-layer"),
                   lambda c: c.update(num_target_layers=c.pop("target_num_hidden_layers")))
    finding = next(f for f in check_checkpoint(folder, engine="sglang@0.5.23").findings if f.code == "TGT009")
    assert finding.detail["stated_by"] == "num_target_layers"


def test_a_count_equal_to_the_taps_may_be_the_tap_count(tmp_path):
    """TorchSpec counts the taps in num_target_layers: a value equal to the
    tap count is not read as the target's layers."""
    folder = _edit(fabricate(tmp_path / "d", family="dflash_gqa"),
                   lambda c: (c.pop("target_num_hidden_layers"), c.update(num_target_layers=3)))
    assert "TGT009" not in _codes(check_checkpoint(folder, engine="sglang@0.5.23"))


def test_with_target_the_real_target_judges(tmp_path):
    folder = fabricate(tmp_path / "d", family="dflash_gqa", defect="tap-last-layer")
    target = tmp_path / "target.json"
    target.write_text(json.dumps(target_config("dflash_gqa")))
    codes = _codes(check_checkpoint(folder, engine="sglang@0.5.23", target=target))
    assert "TGT005" in codes and "TGT009" not in codes


def test_a_good_draft_passes_without_target(tmp_path):
    folder = fabricate(tmp_path / "d", family="dflash_gqa")
    for engine in ("sglang@0.5.23", "tokenspeed@0.1.1", "vllm@0.33.0"):
        assert "TGT009" not in _codes(check_checkpoint(folder, engine=engine))


# EAGLE-3 -------------------------------------------------------------------


@pytest.mark.parametrize("family, engine", [("eagle3_llama", "vllm@0.33.0"), ("eagle3_llama", "tokenspeed@0.1.1"),
                                            ("eagle3_mla", "tokenspeed@0.1.1"), ("eagle3_qwen3", "vllm@0.33.0"),
                                            ("peagle_llama", "vllm@0.30.0")])
def test_eagle3_tap_past_the_stated_target(tmp_path, family, engine):
    folder = fabricate(tmp_path / "d", family=family, defect="tap-past-target")
    finding = next(f for f in check_checkpoint(folder, engine=engine).findings if f.code == "TGT009")
    assert finding.detail["outside"] == [13] and finding.detail["stated_by"] == "target_num_hidden_layers"
    target = tmp_path / "target.json"
    target.write_text(json.dumps(target_config(family)))
    codes = _codes(check_checkpoint(folder, engine=engine, target=target))
    assert "TGT005" in codes and "TGT009" not in codes


def _defaults_on(folder, layers, field="target_num_hidden_layers"):
    """No tap list any engine reads, and a stated target of `layers` layers."""
    return _edit(folder, lambda c: (c.pop("eagle_aux_hidden_state_layer_ids", None), c.pop("eagle_config", None),
                                    c.update({field: layers})))


@pytest.mark.parametrize("engine", ["vllm@0.33.0", "tokenspeed@0.1.1"])
def test_eagle3_defaults_that_collide_on_the_stated_target(tmp_path, engine):
    """On a 6-layer target the default taps name one layer twice; the target
    captures it once and fc, built for 3, gets 2."""
    folder = _defaults_on(fabricate(tmp_path / "d", family="eagle3_llama"), 6)
    finding = next(f for f in check_checkpoint(folder, engine=engine).findings if f.code == "TGT009")
    assert finding.detail["stated_by"] == "target_num_hidden_layers"
    assert len(finding.detail["captured_layers"]) == 2


def test_eagle3_defaults_that_fit_the_stated_target_pass(tmp_path):
    folder = _defaults_on(fabricate(tmp_path / "d", family="eagle3_llama"), 32)
    for engine in ("vllm@0.33.0", "tokenspeed@0.1.1"):
        assert "TGT009" not in _codes(check_checkpoint(folder, engine=engine))


def test_eagle3_num_target_layers_equal_to_the_default_tap_count_is_not_read(tmp_path):
    folder = _defaults_on(fabricate(tmp_path / "d", family="eagle3_llama"), 3, field="num_target_layers")
    assert "TGT009" not in _codes(check_checkpoint(folder, engine="vllm@0.33.0"))
    folder = _defaults_on(fabricate(tmp_path / "e", family="eagle3_llama"), 6, field="num_target_layers")
    assert "TGT009" in _codes(check_checkpoint(folder, engine="vllm@0.33.0"))
