"""vLLM 0.32.0, 0.31.0 and 0.30.0 (`vllm@0.3x.0`), each a delta over its
newer neighbour (schema/engines/vllm/releases.py): for every delta a
fabricated draft (and, for the capture delta, a target) whose verdict
differs between the two releases, both verdicts asserted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.converters.engine_install import DETECTORS
from dspark.examples.fabricate import fabricate, target_config
from dspark.schema.engines import engine_by_spec
from dspark.schema.engines.vllm import DEFAULT, PROFILES
from dspark.schema.findings import Severity
from draft_edits import without_qualname


def draft(folder: Path, family: str, edit=None, **options) -> Path:
    """A fabricated draft for vLLM, its config.json edited by `edit`."""
    fabricate(folder, family=family, engine="vllm", **options)
    if edit is not None:
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def target(folder: Path, architecture: str, family: str) -> Path:
    folder.mkdir()
    config = target_config(family) | {"architectures": [architecture]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def errors(folder: Path, engine: str, target_folder: Path | None = None) -> Counter:
    report = check_checkpoint(folder, engine=engine, environ={}, target=target_folder)
    return Counter(f.code for f in report.findings if f.severity is Severity.ERROR)


def findings(folder: Path, engine: str, code: str, target_folder: Path | None = None) -> list:
    report = check_checkpoint(folder, engine=engine, environ={}, target=target_folder)
    return [f for f in report.findings if f.code == code]


def test_a_bare_vllm_stays_0_33_0_and_the_releases_are_listed_newest_first():
    assert engine_by_spec("vllm").spec == "vllm@0.33.0" and DEFAULT.revision == "0.33.0"
    assert [p.revision for p in PROFILES] == ["0.33.0", "0.32.0", "0.31.0", "0.30.0"]
    for version in ("0.32.0", "0.31.0", "0.30.0"):
        assert engine_by_spec(f"vllm@{version}").commit == f"vllm=={version}"


@pytest.mark.parametrize("version", ["0.33.0", "0.32.0", "0.31.0", "0.30.0"])
def test_an_installed_release_is_judged_by_its_own_profile(released_engine, version):
    [detector] = [d for d in DETECTORS if d.distribution == "vllm"]
    site = released_engine("vllm", version)
    found = detector.identify(site / "vllm", version, site)
    assert found.profile == f"vllm@{version}" and found.exact
    # the version alone, without the files, is no evidence
    assert detector.identify(Path("/nowhere/vllm"), version, None).profile is None


def test_every_rule_of_an_older_release_cites_that_release():
    for profile in PROFILES[1:]:
        pin = f"vllm=={profile.revision}"
        for loader in profile.loaders.values():
            for name, source in loader.sources.items():
                assert source.commit == pin, (profile.revision, loader.family, name)
        assert profile.architectures.source.commit == pin
    # a cited function that moved is cited at its own lines: DFlash's fc width
    cites = {p.revision: p.loaders["dflash_gqa"].sources["fc width"].cite() for p in PROFILES}
    assert cites["0.33.0"].endswith("@vllm==0.33.0:84-93")
    assert cites["0.32.0"].endswith("@vllm==0.32.0:108-117")
    assert cites["0.30.0"].endswith("@vllm==0.30.0:79-87")


@pytest.mark.parametrize("family", ["eagle3_llama", "eagle3_qwen3"])
def test_use_aux_hidden_state_false_is_served_on_0_33_0_and_refused_before(tmp_path, family):
    # 0.33.0: requires_aux_hidden_states asks eagle_config (eagle3_utils.py:15-22);
    # 0.32.0: model_runner.py:300-307 captures for every eagle3 draft, the draft asserts the width.
    def no_aux(config):
        config["eagle_config"] = {**(config.get("eagle_config") or {}), "use_aux_hidden_state": False}

    folder = draft(tmp_path / "d", family, no_aux)
    assert not any("use_aux_hidden_state" in f.message for f in findings(folder, "vllm@0.33.0", "CFG003"))
    [refused] = [f for f in findings(folder, "vllm@0.32.0", "CFG003") if "use_aux_hidden_state" in f.message]
    assert "model_runner.py@vllm==0.32.0:300-307" in without_qualname(refused.message)
    assert "eagle3_utils.py::requires_aux_hidden_states@vllm==0.33.0:15-22" in refused.message
    assert refused.severity is Severity.ERROR


def test_a_granite_moe_target_captures_from_0_33_0_only(tmp_path):
    folder = draft(tmp_path / "d", "dflash_gqa")
    granite_moe = target(tmp_path / "t", "GraniteMoeForCausalLM", "dflash_gqa")
    assert "TGT006" not in errors(folder, "vllm@0.33.0", granite_moe)
    [refused] = findings(folder, "vllm@0.32.0", "TGT006", granite_moe)
    assert "eagle3_utils.py@vllm==0.32.0:19-20" in without_qualname(refused.message) and "@vllm==0.33.0" in refused.message


def test_a_granite_target_captures_from_0_32_0_only(tmp_path):
    folder = draft(tmp_path / "d", "dflash_gqa")
    granite = target(tmp_path / "t", "GraniteForCausalLM", "dflash_gqa")
    assert "TGT006" not in errors(folder, "vllm@0.32.0", granite)
    assert "TGT006" in errors(folder, "vllm@0.31.0", granite)


def test_a_medusa_draft_loads_unjudged_on_0_32_0_and_is_refused_on_0_33_0(tmp_path):
    folder = draft(tmp_path / "d", "eagle3_llama", lambda c: c.update(architectures=["MedusaModel"]))
    [newer] = findings(folder, "vllm@0.33.0", "ENG007")
    [older] = findings(folder, "vllm@0.32.0", "ENG007")
    assert newer.message != older.message
    assert older.detail != newer.detail


def test_a_k3_confidence_head_is_loaded_from_0_31_0_only(tmp_path):
    # 0.31.0 builds the head when enable_confidence_head (dspark_mla.py:194-205) and loads it (459-464),
    # so a head of another shape than it builds fails the load; 0.30.0's mapper always drops it (417-431).
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    folder = draft(tmp_path / "d", "k3_dspark", lambda c: c.update(enable_confidence_head=True), fc_norm=False)
    tensors = load_file(folder / "model.safetensors")
    tensors["confidence_head.proj.weight"] = torch.zeros(1, 7, dtype=torch.bfloat16)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    assert errors(folder, "vllm@0.31.0")["INV003"] == 1
    assert not errors(folder, "vllm@0.30.0")
    dropped = [f for f in findings(folder, "vllm@0.30.0", "INV005") if f.tensor == "confidence_head.proj.weight"]
    assert dropped and "dspark_mla.py::K3DSparkForCausalLM.hf_to_vllm_mapper@vllm==0.30.0:417-431" in json.dumps(dropped[0].detail) + dropped[0].message


def test_dflash_attention_value_scale_is_served_wrong_on_0_30_0_only(tmp_path):
    # qwen3_dflash.py:299-300, 349, 696-698@0.31.0 scale the values; 0.30.0 never reads the key.
    def scaled(config):
        config.setdefault("dflash_config", {})["attention_value_scale"] = 0.5

    folder = draft(tmp_path / "d", "dflash_gqa", scaled)
    assert not any("attention_value_scale" in f.message for f in findings(folder, "vllm@0.31.0", "ENG001"))
    [wrong] = [f for code in ("ENG001", "SRV002", "CFG003") for f in findings(folder, "vllm@0.30.0", code)
               if "attention_value_scale" in f.message]
    assert wrong.severity is Severity.ERROR and "@vllm==0.31.0" in wrong.message
