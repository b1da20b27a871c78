"""P-EAGLE (`PeagleLlamaForCausalLM`, `PeagleQwen3ForCausalLM`): judged as
vLLM 0.30-0.33 load it (its EAGLE-3 classes with parallel drafting:
`mask_hidden` loaded and required, a mask token required, the V1 runner's
tap reading), reached only through its reader of speculators' config;
refused by TokenSpeed and SGLang, which have no P-EAGLE class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.examples.fabricate import fabricate  # noqa: E402
from dspark.schema.errors import CheckpointError  # noqa: E402

VLLM_RELEASES = ("vllm@0.33.0", "vllm@0.32.0", "vllm@0.31.0", "vllm@0.30.0")


def errors(report) -> set[str]:
    return {f.code for f in report.errors}


def edit_config(folder: Path, change) -> Path:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))
    return folder


def edit_tensors(folder: Path, change) -> Path:
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(params=["peagle_llama", "peagle_qwen3"])
def draft(request, tmp_path):
    return fabricate(tmp_path / request.param, family=request.param), request.param


@pytest.mark.parametrize("engine", VLLM_RELEASES)
def test_a_good_draft_in_speculators_shape_passes_every_vllm_release(draft, engine):
    folder, family = draft
    report = check_checkpoint(folder, engine=engine)
    assert report.passed(), [f.message for f in report.errors]
    assert report.resolved.family == family
    # the launch vLLM needs for a P-EAGLE draft, as a note
    [launch] = [f for f in report.findings if f.code == "ENG004"]
    assert '"parallel_drafting": true' in launch.message


@pytest.mark.parametrize("engine", ["tokenspeed@0.1.1", "sglang@0.5.23"])
def test_engines_without_a_peagle_class_refuse_it(draft, engine):
    folder, family = draft
    report = check_checkpoint(folder, engine=engine)
    assert "ENG006" in errors(report)
    assert "ENG007" not in errors(report)


def test_mask_hidden_is_required_and_loads_flat(draft):
    folder, _ = draft
    width = load_file(str(folder / "model.safetensors"))["mask_hidden"].numel()
    # vLLM views it flat into its buffer: any shape of as many elements loads
    edit_tensors(folder, lambda t: t.update(mask_hidden=t["mask_hidden"].reshape(width)))
    assert check_checkpoint(folder, engine="vllm").passed()
    edit_tensors(folder, lambda t: t.update(mask_hidden=t["mask_hidden"][:-1].contiguous()))
    assert errors(check_checkpoint(folder, engine="vllm")) == {"INV003"}
    edit_tensors(folder, lambda t: t.pop("mask_hidden"))
    report = check_checkpoint(folder, engine="vllm")
    [missing] = [f for f in report.errors if f.code == "INV001"]
    # refused at load (load_weights raises), not served uninitialised
    assert "fails on an unfilled destination" in missing.message


def test_the_mask_token_is_required(draft):
    folder, _ = draft
    edit_config(folder, lambda c: c.pop("mask_token_id"))
    assert "CFG008" in errors(check_checkpoint(folder, engine="vllm"))
    edit_config(folder, lambda c: c.update(mask_token_id=c["transformer_layer_config"]["vocab_size"]))
    assert "CFG008" in errors(check_checkpoint(folder, engine="vllm"))


def test_a_plain_config_naming_the_class_is_refused_by_vllm(tmp_path):
    """Launched as eagle3, a plain config goes through EAGLEConfig, which
    renames PeagleLlamaForCausalLM to a class vLLM does not register."""
    folder = fabricate(tmp_path / "p", family="peagle_llama")
    spec = json.loads((folder / "config.json").read_text())
    plain = {**spec["transformer_layer_config"], "architectures": ["PeagleLlamaForCausalLM"],
             **{k: spec[k] for k in ("draft_vocab_size", "mask_token_id") if k in spec}}
    (folder / "config.json").write_text(json.dumps(plain))
    report = check_checkpoint(folder, engine="vllm")
    [refused] = [f for f in report.errors if f.code == "SRV001"]
    assert "EAGLEConfig" in refused.message


def test_norm_before_residual_defaults_to_false_as_vllms_peagle_reader_has_it(tmp_path):
    folder = fabricate(tmp_path / "p", family="peagle_llama")
    edit_config(folder, lambda c: c.pop("norm_before_residual", None))
    report = check_checkpoint(folder, engine="vllm")
    assert report.passed()
    assert "ENG001" not in errors(report)


def test_convert_for_vllm_keeps_speculators_config(tmp_path):
    folder = fabricate(tmp_path / "p", family="peagle_qwen3")
    out = tmp_path / "out"
    converted = convert_checkpoint(folder, out, ConvertOptions(engine="vllm@0.33.0"))
    assert json.loads((out / "config.json").read_text()) == json.loads((folder / "config.json").read_text())
    assert any(c.startswith("whole config: kept as speculators wrote it") for c in converted.plan.config_changes)
    assert check_checkpoint(out, engine="vllm").passed()
    # engines without the class: refused, nothing written
    with pytest.raises(CheckpointError):
        convert_checkpoint(folder, tmp_path / "ts", ConvertOptions(engine="tokenspeed@0.1.1"))
