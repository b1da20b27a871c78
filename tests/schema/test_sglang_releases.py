"""SGLang 0.5.22, 0.5.21 and 0.5.20 (`sglang@0.5.2x`), each a delta over its
newer neighbour (schema/engines/sglang/releases.py): for every delta a
fabricated draft (and, for the capture deltas, a target) whose verdict
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
from dspark.schema.engines.sglang import DEFAULT, PROFILES
from dspark.schema.findings import Severity
from draft_edits import set_config_fields

NEWEST = "sglang@0.5.23"


def draft(folder: Path, *, variant: str = "dspark", family: str = "dflash_gqa", **fields) -> Path:
    """A fabricated draft for SGLang, its config.json given `fields` (None drops a key)."""
    fabricate(folder, family=family, engine="sglang", **({"variant": variant} if variant else {}))
    return set_config_fields(folder, **fields)


def target(folder: Path, architecture: str, family: str) -> Path:
    folder.mkdir()
    config = target_config(family) | {"architectures": [architecture]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def errors(folder: Path, engine: str, target_folder: Path | None = None) -> Counter:
    report = check_checkpoint(folder, engine=engine, environ={}, target=target_folder)
    return Counter(f.code for f in report.findings if f.severity is not Severity.INFO)


def messages(folder: Path, engine: str, code: str, target_folder: Path | None = None) -> list[str]:
    report = check_checkpoint(folder, engine=engine, environ={}, target=target_folder)
    return [f.message for f in report.findings if f.code == code]


def test_a_bare_sglang_stays_0_5_23_and_the_releases_are_listed_newest_first():
    assert engine_by_spec("sglang").spec == NEWEST and DEFAULT.revision == "0.5.23"
    assert [p.revision for p in PROFILES] == ["0.5.23", "0.5.22", "0.5.21", "0.5.20"]
    for version in ("0.5.22", "0.5.21", "0.5.20"):
        assert engine_by_spec(f"sglang@{version}").commit == f"sglang=={version}"


@pytest.mark.parametrize("version", ["0.5.23", "0.5.22", "0.5.21", "0.5.20"])
def test_an_installed_release_is_judged_by_its_own_profile(released_engine, version):
    (detector,) = [d for d in DETECTORS if d.distribution == "sglang"]
    site = released_engine("sglang", version)
    found = detector.identify(site / "sglang", version, site)
    assert found.profile == f"sglang@{version}" and found.exact, found.differences


def test_a_markov_head_type_only_in_dflash_config_is_refused_before_0_5_23(tmp_path):
    """0.5.23 reads DSpark fields from {**dflash_config, **dspark_config}
    (dspark_config.py@0.5.23:194-212); 0.5.22 from dspark_config only
    (196-205) and raises without a head type (259-262)."""
    folder = draft(tmp_path / "d", markov_head_type=None)
    config = json.loads((folder / "config.json").read_text())
    config["dflash_config"]["markov_head_type"] = "vanilla"
    (folder / "config.json").write_text(json.dumps(config))
    assert errors(folder, NEWEST) == Counter()
    for version in ("0.5.22", "0.5.21", "0.5.20"):
        assert errors(folder, f"sglang@{version}") == Counter({"CFG003": 1})
    (message,) = messages(folder, "sglang@0.5.22", "CFG003")
    assert "dspark_config.py::_get_dspark_config@sglang==0.5.22:196-205" in message
    assert "dspark_config.py::_get_dspark_config@sglang==0.5.23:206-211, 194-203 (_get_nested_config)" in message
    assert "dspark_config.py::parse_dspark_draft_config@sglang==0.5.22:259-262" in message


def test_a_bad_head_type_in_dflash_config_is_not_read_before_0_5_23(tmp_path):
    """The other side of the same delta: 0.5.23 refuses the nested type,
    0.5.22 never reads it and builds the top-level one."""
    folder = draft(tmp_path / "d")
    config = json.loads((folder / "config.json").read_text())
    config["dflash_config"]["markov_head_type"] = "mixture"
    (folder / "config.json").write_text(json.dumps(config))
    assert errors(folder, NEWEST) == Counter({"CFG003": 1})
    assert errors(folder, "sglang@0.5.22") == Counter()


def test_swigluoai_is_refused_by_the_dflash_mlp_before_0_5_23(tmp_path):
    """0.5.23's DFlash MLP builds swigluoai (models/dflash.py@0.5.23:493-510);
    0.5.22's raises for anything but silu (454-459). (The family's schema
    allows silu only, so both releases refuse the folder; the engine's own
    refusal is 0.5.22's alone.)"""
    folder = draft(tmp_path / "d", variant="dflash", hidden_act="swigluoai", swiglu_alpha=1.702, swiglu_limit=7.0)
    assert not [m for m in messages(folder, NEWEST, "CFG003") if "DFlash MLP" in m]
    (engine,) = [m for m in messages(folder, "sglang@0.5.22", "CFG003") if "DFlash MLP" in m]
    assert "DFlashMLP.__init__@sglang==0.5.22:454-459" in engine
    assert "DFlashMLP.__init__@sglang==0.5.23:493-510" in engine
    (engine,) = [m for m in messages(folder, "sglang@0.5.20", "CFG003") if "DFlash MLP" in m]
    assert "@sglang==0.5.20:398-403" in engine


@pytest.mark.parametrize("variant", ["dflash", "dspark"])
def test_use_gemma_norm_is_served_as_plain_rmsnorm_before_0_5_23(tmp_path, variant):
    folder = draft(tmp_path / "d", variant=variant, use_gemma_norm=True)
    assert errors(folder, NEWEST) == Counter()
    assert errors(folder, "sglang@0.5.22") == Counter({"ENG001": 1})
    (message,) = messages(folder, "sglang@0.5.21", "ENG001")
    assert "@sglang==0.5.21:249-250, 554, 562 (DFlashDecoderLayer.__init__), 678, 708 (DFlashDraftModel.__init__)" \
        in message
    assert "@sglang==0.5.23:247-250, 610-619 (DFlashDecoderLayer.__init__), 695-699, 745, 775" in message


def test_rope_dim_is_not_read_before_0_5_23(tmp_path):
    """head_dim 12, rope_dim 6: 0.5.23 rotates 6 dims (models/dflash.py@0.5.23:
    252-278), 0.5.22 all 12 (244-258)."""
    folder = draft(tmp_path / "d", variant="dflash", rope_scaling={"rope_type": "default", "rope_dim": 6})
    assert errors(folder, NEWEST) == Counter()
    assert errors(folder, "sglang@0.5.22") == Counter({"ENG001": 1})
    same = draft(tmp_path / "same", variant="dflash", rope_scaling={"rope_type": "default", "rope_dim": 12})
    assert errors(same, "sglang@0.5.22") == Counter()


def test_minimax_m3_vl_captures_for_dflash_from_0_5_23(tmp_path):
    folder = draft(tmp_path / "d")
    on = target(tmp_path / "t", "MiniMaxM3SparseForConditionalGeneration", "dflash_gqa")
    assert errors(folder, NEWEST, on) == Counter()
    assert errors(folder, "sglang@0.5.22", on) == Counter({"TGT007": 1})


def test_qwen3_5_text_targets_capture_for_eagle3_from_0_5_22(tmp_path):
    folder = draft(tmp_path / "d", family="eagle3_llama", variant=None)
    on = target(tmp_path / "t", "Qwen3_5ForCausalLM", "eagle3_llama")
    assert errors(folder, "sglang@0.5.22", on) == Counter()
    assert errors(folder, "sglang@0.5.21", on) == Counter({"TGT007": 1})
    (message,) = messages(folder, "sglang@0.5.21", "TGT007", on)
    assert "@sglang==0.5.21:40-66" in message and "1837" in message


def test_lfm2_vl_captures_for_dflash_from_0_5_21(tmp_path):
    folder = draft(tmp_path / "d")
    on = target(tmp_path / "t", "Lfm2VlForConditionalGeneration", "dflash_gqa")
    assert errors(folder, "sglang@0.5.21", on) == Counter()
    assert errors(folder, "sglang@0.5.20", on) == Counter({"TGT007": 1})


@pytest.mark.parametrize("first, newer, older", [
    ("DFlash2BeamDraftModel", "sglang@0.5.23", "sglang@0.5.22"),
    ("LiLiCorrDraftModel", "sglang@0.5.21", "sglang@0.5.20"),
])
def test_the_first_registered_architecture_is_each_releases(tmp_path, first, newer, older):
    """A class registered only from `newer` on is loaded there (a family
    dspark does not model); `older` skips it and loads the DSpark class."""
    folder = draft(tmp_path / "d", architectures=[first, "DSparkDraftModel"])
    assert errors(folder, newer)["ENG002"] == 1
    assert errors(folder, older) == Counter()
