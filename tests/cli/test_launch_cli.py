"""`--launch` on check, inspect, convert and gate, and the settings file's
`launch` (the flag wins), on fabricated drafts."""

from __future__ import annotations

import json

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.examples.fabricate import fabricate


@pytest.fixture
def k3(tmp_path):
    draft = fabricate(tmp_path / "k3", family="k3_dspark")
    config = json.loads((draft / "config.json").read_text())
    config["block_size"] = 7
    (draft / "config.json").write_text(json.dumps(config))
    return draft


def test_check_with_and_without_launch(dspark, k3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dspark("check", k3).exit_code == EXIT_OK
    good = dspark("check", k3, "--launch", "--speculative-num-steps 7", "--format", "json")
    assert good.exit_code == EXIT_OK and "LCH005" in {f["code"] for f in good.json()["findings"]}
    bad = dspark("check", k3, "--launch=--speculative-num-steps 6")
    assert bad.exit_code == EXIT_CHECK_FAILED and "LCH001" in bad.stdout


@pytest.mark.parametrize("command", ["check", "inspect", "gate"])
def test_a_malformed_launch_is_exit_2_naming_the_flag(dspark, k3, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    run = dspark(command, k3, "--launch", "--speculative-num-steps seven")
    assert run.exit_code == EXIT_USAGE
    assert "--speculative-num-steps takes an integer" in run.stderr and "Traceback" not in run.stderr


def test_the_settings_launch_applies_and_the_flag_wins(dspark, k3, tmp_path, monkeypatch):
    (tmp_path / "dspark.toml").write_text('launch = "--speculative-num-steps 6"\n')
    monkeypatch.chdir(tmp_path)
    assert dspark("check", k3).exit_code == EXIT_CHECK_FAILED
    assert dspark("check", k3, "--launch", "--speculative-num-steps 7").exit_code == EXIT_OK
    assert dspark("gate", k3).exit_code == EXIT_CHECK_FAILED


def test_a_settings_launch_that_is_not_text_is_exit_2(dspark, k3, tmp_path, monkeypatch):
    (tmp_path / "dspark.toml").write_text("launch = 7\n")
    monkeypatch.chdir(tmp_path)
    run = dspark("check", k3)
    assert run.exit_code == EXIT_USAGE and "launch" in run.stderr


def test_convert_keeps_embed_tokens_and_says_which_launches_it_serves(dspark, k3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = dspark("convert", k3, tmp_path / "out", "--engine", "tokenspeed@0.1.1", "--plan", "--format", "json")
    assert plan.exit_code == EXIT_OK
    document = plan.json()
    assert "embed_tokens.weight" in {t["name"] for t in document["tensors"]}
    served = document["serves_launches"]["tokenspeed@0.1.1"]
    assert "--speculative-num-steps 7" in served and "every pipeline-parallel size" in served
    written = dspark("convert", k3, tmp_path / "out", "--engine", "tokenspeed@0.1.1",
                     "--launch", "--pipeline-parallel-size 2 --disaggregation-mode prefill")
    assert written.exit_code == EXIT_OK, written.stdout + written.stderr
    assert dspark("check", tmp_path / "out", "--launch", "--pipeline-parallel-size 2 --disaggregation-mode prefill"
                  ).exit_code == EXIT_OK


def test_convert_refuses_an_output_that_cannot_serve_the_launch_asked(dspark, k3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = dspark("convert", k3, tmp_path / "out", "--launch", "--speculative-num-steps 6", "--plan")
    assert run.exit_code == EXIT_CHECK_FAILED and "LCH001" in run.stdout
