"""`--output` never lands on what the run reads: a report aimed at the
checkpoint being judged or converted is refused before any work (exit 2,
naming the file), and the checkpoint is left byte for byte as it was."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from dspark.converters.writers.overwrite_guard import RunInput, report_overwrites


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "notes/report.json"])
def test_check_refuses_a_report_inside_the_checkpoint(dspark, tiny_draft, name):
    draft = tiny_draft()
    (draft / "notes").mkdir()
    before = _digests(draft)
    run = dspark("check", draft, "--format", "json", "--output", draft / name)
    assert run.exit_code == 2
    assert f"--output {draft / name}" in run.stderr and "inside CKPT" in run.stderr
    assert _digests(draft) == before
    assert not (draft / "notes" / "report.json").exists()


def test_gate_refuses_a_report_named_config_json_from_inside_the_draft(dspark, tiny_draft, monkeypatch):
    draft = tiny_draft()
    before = _digests(draft)
    monkeypatch.chdir(draft)
    run = dspark("gate", ".", "--output", "config.json")
    assert run.exit_code == 2
    assert "--output config.json" in run.stderr
    assert _digests(draft) == before


def test_a_file_checkpoint_protects_the_config_beside_it(dspark, tiny_draft):
    draft = tiny_draft()
    before = _digests(draft)
    run = dspark("check", draft / "model.safetensors", "--output", draft / "config.json")
    assert run.exit_code == 2
    assert "config.json beside CKPT" in run.stderr
    assert _digests(draft) == before


def test_links_to_the_weights_are_the_weights(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    before = _digests(draft)
    (tmp_path / "soft.json").symlink_to(draft / "model.safetensors")
    os.link(draft / "config.json", tmp_path / "hard.json")
    for link in ("soft.json", "hard.json"):
        run = dspark("check", draft, "--output", tmp_path / link)
        assert run.exit_code == 2, link
        assert f"--output {tmp_path / link}" in run.stderr
    assert _digests(draft) == before


def test_the_config_file_given_is_not_overwritten(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    config = tmp_path / "draft-config.json"
    config.write_bytes((draft / "config.json").read_bytes())
    run = dspark("check", draft, "--config", config, "--format", "json", "--output", config)
    assert run.exit_code == 2
    assert "--config" in run.stderr
    assert config.read_bytes() == (draft / "config.json").read_bytes()


def test_convert_refuses_a_report_in_its_source_before_writing_anything(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    before = _digests(draft)
    run = dspark("convert", draft, tmp_path / "out", "--output", draft / "dspark-manifest.json")
    assert run.exit_code == 2
    assert "inside SRC" in run.stderr
    assert _digests(draft) == before
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "dspark-manifest.json"])
def test_convert_refuses_a_report_named_like_a_file_it_writes(dspark, tiny_draft, tmp_path, name):
    draft = tiny_draft()
    run = dspark("convert", draft, tmp_path / "out", "--format", "json", "--output", tmp_path / "out" / name)
    assert run.exit_code == 2
    assert f"{name} is a file this run writes" in run.stderr
    assert not (tmp_path / "out").exists()


def test_convert_may_leave_its_report_in_the_folder_it_writes(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    run = dspark("convert", draft, tmp_path / "out", "--output", tmp_path / "out" / "report.json")
    assert run.exit_code == 0, run.stderr
    assert (tmp_path / "out" / "report.json").is_file()
    assert dspark("check", tmp_path / "out", "--verify").exit_code == 0


def test_a_report_beside_the_checkpoint_is_written(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    run = dspark("check", draft, "--output", tmp_path / "report.json")
    assert run.exit_code == 0
    assert (tmp_path / "report.json").is_file()


def test_a_config_read_from_a_folder_above_is_protected(tmp_path):
    weights = tmp_path / "run" / "checkpoints" / "iter_1" / "model"
    weights.mkdir(parents=True)
    run_input = [RunInput("CKPT", weights)]
    assert report_overwrites(tmp_path / "run" / "checkpoints" / "config.yaml", run_input)
    assert report_overwrites(tmp_path / "run" / "checkpoints" / "iter_1" / "config.json", run_input)
    assert report_overwrites(tmp_path / "run" / "checkpoints" / "report.json", run_input) is None


def test_taps_and_urls(tmp_path):
    taps = tmp_path / "taps.safetensors"
    taps.write_bytes(b"")
    assert report_overwrites(taps, [RunInput("--taps", taps)])
    assert report_overwrites(tmp_path / "r.json", [RunInput("CKPT", "hf://org/repo"), RunInput("--target", None)]) is None


def test_report_files_take_the_mode_open_would_give(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    previous = os.umask(0o022)
    try:
        assert dspark("check", draft, "--output", tmp_path / "new.sarif").exit_code == 0
        assert stat.S_IMODE((tmp_path / "new.sarif").stat().st_mode) == 0o644
        kept = tmp_path / "kept.json"
        kept.write_text("{}")
        kept.chmod(0o640)
        assert dspark("check", draft, "--output", kept).exit_code == 0
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
        assert kept.read_text() != "{}"
    finally:
        os.umask(previous)
