"""SGLang wires a DFLASH draft only to a target class with
set_dflash_layers_to_capture, a DSPARK draft to one with either setter
(attention_backend_setup.py::configure_aux_hidden_state_capture@sglang==0.5.23:
62-73): Kimi-Linear, DeepSeek-V4 and Bailing-MoE-V3 define the DSPARK setter
only in every release, Kimi-K3's classes in 0.5.20 (kimi_k3.py@0.5.20:3056,
3512; 0.5.21 adds the DFLASH setter). TGT007 for the DFlash variant only."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.examples.fabricate import fabricate, target_config  # noqa: E402


def _target(tmp_path, architecture):
    config = target_config("dflash_gqa")
    config["architectures"] = [architecture]
    path = tmp_path / f"{architecture}.json"
    path.write_text(json.dumps(config))
    return path


def _hosted(tmp_path, variant, architecture, engine):
    folder = fabricate(tmp_path / variant, family="dflash_gqa", variant=variant)
    report = check_checkpoint(folder, engine=engine, target=_target(tmp_path, architecture))
    return "TGT007" not in [f.code for f in report.errors]


@pytest.mark.parametrize("engine, dflash_hosted", [("sglang@0.5.20", False), ("sglang@0.5.21", True),
                                                   ("sglang@0.5.23", True)])
def test_kimi_k3_hosts_dflash_from_0_5_21(tmp_path, engine, dflash_hosted):
    assert _hosted(tmp_path, "dflash", "KimiK3ForConditionalGeneration", engine) is dflash_hosted
    assert _hosted(tmp_path, "dspark", "KimiK3ForConditionalGeneration", engine)


@pytest.mark.parametrize("architecture", ["KimiLinearForCausalLM", "DeepseekV4ForCausalLM",
                                          "BailingMoeV3ForCausalLM"])
def test_dspark_only_targets_refuse_dflash(tmp_path, architecture):
    assert not _hosted(tmp_path, "dflash", architecture, "sglang@0.5.23")
    assert _hosted(tmp_path, "dspark", architecture, "sglang@0.5.23")


def test_the_finding_names_the_variant(tmp_path):
    folder = fabricate(tmp_path / "d", family="dflash_gqa", variant="dflash")
    report = check_checkpoint(folder, engine="sglang@0.5.23", target=_target(tmp_path, "KimiLinearForCausalLM"))
    finding = next(f for f in report.errors if f.code == "TGT007")
    assert finding.detail["variant"] == "DFlashDraftModel" and "KimiLinearForCausalLM" not in finding.detail["supported"]
