"""`dspark convert` on TorchSpec's EAGLE-3 exports (tools/convert_to_hf.py@6f21829:
native `midlayer.*` names, or `layers.0.*` with `--vllm`; a pruned run adds
`t2d`/`d2t`): the output is what TokenSpeed serves and passes `check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import convert_checkpoint
from dspark.examples.fabricate import write_eagle3_draft

torch = pytest.importorskip("torch")


def with_t2d(tensors: dict) -> None:
    # TorchSpec's pruned drafts carry both tables (llama3_eagle.py@6f21829:2122-2124).
    tensors["t2d"] = torch.ones(96, dtype=torch.bool)


def names(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        return set(handle.keys())


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
@pytest.mark.parametrize("layout", ["midlayer", "layers.0"])
def test_torchspec_exports_convert_to_a_servable_draft_keeping_d2t(tmp_path, scale, layout):
    source = write_eagle3_draft(tmp_path / "src", scale=scale, layout=layout, fc_norm=True, tensor_edit=with_t2d)
    original = load_file(str(source / "model.safetensors"))
    out = tmp_path / "out"
    convert_checkpoint(source, out)
    served = names(out)
    assert "d2t" in served and "t2d" not in served  # d2t is served; t2d is never read
    assert not any(n.startswith("layers.0.") for n in served)
    assert "midlayer.self_attn.o_proj.weight" in served
    report = check_checkpoint(out, deep=True)
    assert report.passed(strict=True), [f.message for f in report.findings]
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        assert torch.equal(handle.get_tensor("d2t"), original["d2t"])  # the integer table is never cast
    config = json.loads((out / "config.json").read_text())
    assert "aux_hidden_stream" not in config  # EAGLE-3 has no stream to make explicit
    assert config["architectures"][0] in ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM")


def test_the_old_mla_architecture_name_is_rewritten(tmp_path):
    source = write_eagle3_draft(tmp_path / "src", scale="tiny-mla",
                                config_edit=lambda c: c.update(architectures=["DeepSeekForCausalLMEagle3"]))
    assert not check_checkpoint(source).passed()
    out = tmp_path / "out"
    convert_checkpoint(source, out)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    assert check_checkpoint(out).passed(strict=True)


def test_an_mla_export_with_model_prefixed_names_becomes_servable(tmp_path):
    # models/deepseek_v3.py@f4d8ec6e:2370-2371 would look these up as model.model.*.
    def prefix(tensors):
        for name in [n for n in tensors if n.startswith(("midlayer.", "fc.", "norm."))]:
            tensors["model." + name] = tensors.pop(name)

    source = write_eagle3_draft(tmp_path / "src", scale="tiny-mla", tensor_edit=prefix)
    assert [f.code for f in check_checkpoint(source).errors] == ["SRV001"]
    out = tmp_path / "out"
    convert_checkpoint(source, out)
    assert check_checkpoint(out).passed(strict=True)


def test_torchspecs_vllm_export_of_a_kimi_k2_draft_has_its_taps_shifted_back(tmp_path):
    # tools/convert_to_hf.py@6f21829:146-159 (TorchSpec) adds 1 to kimi_k2 tap
    # ids in its --vllm export; TokenSpeed reads layer ids.
    def vllm_kimi(config):
        config.update(model_type="kimi_k2", _torchspec_version="0.1.0", eagle_config=None,
                      eagle_aux_hidden_state_layer_ids=[2, 6, 10])

    source = write_eagle3_draft(tmp_path / "vllm", scale="tiny-mla", layout="layers.0", config_edit=vllm_kimi)
    report = check_checkpoint(source)
    [layout] = [f for f in report.errors if f.code == "SRV001"]
    assert "one layer late" in layout.message
    out = tmp_path / "served"
    convert_checkpoint(source, out)
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 5, 9]
    assert check_checkpoint(out, deep=True).passed()
    # the taps are judged as convert writes them, against a target too: an
    # 11-layer kimi_k2 target captures ids up to 9 (N - 2): [1, 5, 9], not the exported [2, 6, 10]
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
                                  "hidden_size": 32, "num_hidden_layers": 11, "vocab_size": 96}))
    against_target = check_checkpoint(source, target=target)
    assert [f.code for f in against_target.errors] == ["SRV001"], [(f.code, f.message) for f in against_target.errors]
    assert against_target.resolved.to_dict()["target_layer_ids"] == [1, 5, 9]
    assert check_checkpoint(source, target=target, verdict="contents").passed()
    assert check_checkpoint(out, target=target).passed()


def test_torchspecs_vllm_export_without_tap_ids_is_served_as_it_is(tmp_path):
    """The exporter shifts only the id lists the config holds
    (tools/convert_to_hf.py@6f21829:150-157); with none, the engine serves
    its default taps, renaming layers.0. to midlayer.
    (models/deepseek_v3.py@f4d8ec6e:2368): nothing was shifted."""
    def vllm_kimi(config):
        config.update(model_type="kimi_k2", _torchspec_version="0.1.0", eagle_config=None)
        config.pop("eagle_aux_hidden_state_layer_ids", None)

    source = write_eagle3_draft(tmp_path / "vllm", scale="tiny-mla", layout="layers.0", config_edit=vllm_kimi)
    report = check_checkpoint(source, deep=True)
    assert "SRV001" not in {f.code for f in report.findings}, [(f.code, f.message) for f in report.findings]
    out = tmp_path / "served"
    convert_checkpoint(source, out)
    config = json.loads((out / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in config
    assert check_checkpoint(out, deep=True).passed()
