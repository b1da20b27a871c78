"""A draft's max_position_embeddings against the length vLLM serves
(schema/engines/vllm/positions.py): raised for EAGLE drafts only up to
0.32.0, for every draft whose RoPE only sizes its cache on 0.33.0, whose
V2 runner lowers the server's length for the others. Fabricated drafts and
targets, judged through `check_checkpoint` with and without --launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import fabricate, target_config
from dspark.schema.engines.launch import LaunchError
from draft_edits import set_config_fields

OLDER = ("0.32.0", "0.31.0", "0.30.0")
ALL = ("0.33.0",) + OLDER


def draft(folder: Path, family: str, **config_updates) -> Path:
    fabricate(folder, family=family, engine="vllm")
    return set_config_fields(folder, **config_updates)


def target(folder: Path, family: str, max_position_embeddings: int | None) -> Path:
    folder.mkdir()
    config = target_config(family)
    if max_position_embeddings is not None:
        config["max_position_embeddings"] = max_position_embeddings
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def codes(folder: Path, version: str, *, launch: str | None = None, target_folder: Path | None = None) -> list[str]:
    report = check_checkpoint(folder, engine=f"vllm@{version}", environ={}, target=target_folder, launch=launch)
    return [f.code for f in report.findings if f.code.startswith("ROP00") and f.code >= "ROP003"]


@pytest.mark.parametrize("version", ALL)
def test_a_dflash_draft_shorter_than_the_launched_length_is_served_wrong_before_0_33_0(tmp_path, version):
    folder = draft(tmp_path / "d", "dflash_gqa", max_position_embeddings=1024)
    found = codes(folder, version, launch="--max-model-len 2048")
    assert found == (["ROP005"] if version == "0.33.0" else ["ROP003"])
    if found == ["ROP003"]:
        # nothing stops the server: the verdict says served wrong, not refused
        report = check_checkpoint(folder, engine=f"vllm@{version}", environ={}, launch="--max-model-len 2048")
        assert [row["outcome"] for row in report.engine_verdicts()] == ["served_wrong"]
    # at a length the draft reaches, no release has anything to say
    assert codes(folder, version, launch="--max-model-len 1024") == []


@pytest.mark.parametrize("version", ALL)
def test_an_eagle3_draft_is_raised_in_every_release(tmp_path, version):
    folder = draft(tmp_path / "d", "eagle3_llama", max_position_embeddings=1024)
    assert codes(folder, version, launch="--max-model-len 4096") == ["ROP005"]


@pytest.mark.parametrize("version", ALL)
def test_a_dynamic_rope_eagle3_draft(tmp_path, version):
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    folder = draft(tmp_path / "d", "eagle3_llama", max_position_embeddings=1024, rope_scaling=dynamic)
    # up to 0.32.0 raised, and the base is the factor's alone: the trained
    # rotation on a longer cache; 0.33.0 leaves it, and its V2 runner
    # serves the derived 1024 x 2 positions past the cache's 1024 rows
    assert codes(folder, version, launch="--max-model-len 4096") == (
        ["ROP003"] if version == "0.33.0" else ["ROP005"])
    # given max_trained_positions, a raise moves the base: rotated otherwise
    trained = draft(tmp_path / "t", "eagle3_llama", max_position_embeddings=1024,
                    rope_scaling={**dynamic, "max_trained_positions": 1024})
    assert codes(trained, version, launch="--max-model-len 4096") == ["ROP003"]


def test_a_yarn_draft_is_left_on_0_33_0_and_the_server_shortened(tmp_path):
    folder = draft(tmp_path / "d", "dflash_gqa", max_position_embeddings=2048,
                   rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024})
    assert codes(folder, "0.33.0", launch="--max-model-len 8192") == ["ROP004"]
    assert codes(folder, "0.32.0", launch="--max-model-len 8192") == ["ROP003"]


def test_a_raised_yarn_eagle3_cache_does_not_grow(tmp_path):
    folder = draft(tmp_path / "d", "eagle3_llama", max_position_embeddings=2048,
                   rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024})
    report = check_checkpoint(folder, engine="vllm@0.31.0", environ={}, launch="--max-model-len 8192")
    [finding] = [f for f in report.findings if f.code == "ROP003"]
    assert finding.detail["cache_rows"] == 2048 and "speculative.py" in finding.message


def test_the_length_is_the_targets_when_none_is_launched(tmp_path):
    folder = draft(tmp_path / "d", "dflash_gqa", max_position_embeddings=1024)
    long_target = target(tmp_path / "long", "dflash_gqa", 32768)
    assert codes(folder, "0.32.0", target_folder=long_target) == ["ROP003"]
    # the launch wins over the target's own length
    assert codes(folder, "0.32.0", target_folder=long_target, launch="--max-model-len 1000") == []
    # a target stating no length, and no launch: nothing to judge against
    assert codes(folder, "0.32.0", target_folder=target(tmp_path / "bare", "dflash_gqa", None)) == []
    assert codes(folder, "0.32.0") == []


def test_a_draft_without_max_position_embeddings_is_not_judged(tmp_path):
    folder = draft(tmp_path / "d", "dflash_gqa", max_position_embeddings=None)
    assert codes(folder, "0.32.0", launch="--max-model-len 1048576") == []


def test_a_k3_dspark_draft_reaches_its_yarn_length(tmp_path):
    folder = draft(tmp_path / "d", "k3_dspark")
    # 131072 = 4096 x 32: the YaRN cache reaches it on every release
    assert codes(folder, "0.30.0", launch="--max-model-len 131072") == []
    assert codes(folder, "0.30.0", launch="--max-model-len 262144") == ["ROP003"]


def test_max_model_len_must_be_a_positive_integer(tmp_path):
    folder = draft(tmp_path / "d", "dflash_gqa")
    with pytest.raises(LaunchError):
        check_checkpoint(folder, engine="vllm@0.33.0", environ={}, launch="--max-model-len 0")
