"""Project settings (`dspark.toml`, `[tool.dspark]` in pyproject.toml) give
the engine of every command that takes `--engine`, found from the working
directory upward; the flag wins. And the pre-commit hook, which runs
`dspark check`, follows them and checks a weight folder that lost its config."""

from __future__ import annotations

import contextvars
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.cli.precommit import draft_folders, main as precommit

# The tiny draft ships fc_norm, which TokenSpeed main does not build (ENG001):
# judged for main it fails, for the default (pull request 1031) it passes.
MAIN = 'engine = "tokenspeed@main"\n'


def settings(folder: Path, text: str, name: str = "dspark.toml") -> None:
    (folder / name).write_text(text)


@pytest.mark.parametrize("command", ["check", "inspect"])
def test_check_and_inspect_judge_for_the_settings_engine_and_the_flag_wins(dspark, tiny_draft, tmp_path, command):
    draft = tiny_draft()
    assert dspark(command, draft, "--format", "json").json()["engine"] != "tokenspeed@main"
    settings(tmp_path, MAIN)
    run = dspark(command, draft, "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED and run.json()["engine"] == "tokenspeed@main"
    assert "ENG001" in {f["code"] for f in run.json()["findings"]}
    run = dspark(command, draft, "--engine", "tokenspeed@pr1031", "--format", "json")
    assert run.exit_code == EXIT_OK and run.json()["engine"] == "tokenspeed@pr1031"


def test_the_settings_are_found_from_the_working_directory_upward(dspark, tiny_draft, tmp_path, monkeypatch):
    settings(tmp_path, '[project]\nname = "drafts"\n\n[tool.dspark]\n' + MAIN, "pyproject.toml")
    below = tmp_path / "team" / "drafts"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    assert dspark("check", tiny_draft(), "--format", "json").json()["engine"] == "tokenspeed@main"


def test_convert_writes_for_the_settings_engine(dspark, tiny_draft, tmp_path):
    pytest.importorskip("torch")
    draft = tiny_draft()
    settings(tmp_path, MAIN)
    run = dspark("convert", draft, tmp_path / "out")
    assert run.exit_code == EXIT_CHECK_FAILED and "ENG001" in run.stderr and not (tmp_path / "out").exists()
    assert dspark("convert", draft, tmp_path / "out", "--plan").exit_code == EXIT_CHECK_FAILED
    assert dspark("convert", draft, tmp_path / "out", "--engine", "tokenspeed@pr1031", "-q").exit_code == EXIT_OK


def test_a_settings_file_with_a_misspelt_engine_is_a_usage_error(dspark, tiny_draft, tmp_path):
    settings(tmp_path, 'engine = "tokenspeed@mian"\n')
    run = dspark("check", tiny_draft())
    assert run.exit_code == EXIT_USAGE and "tokenspeed@mian" in run.stderr


def _hook(args, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = contextvars.Context().run(precommit, [str(a) for a in args])
    return code, capsys.readouterr().out


def test_the_pre_commit_hook_follows_the_settings_engine(tiny_draft, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    draft = tiny_draft()
    assert _hook(["-q", draft / "config.json"], capsys)[0] == EXIT_OK
    settings(tmp_path, MAIN)
    code, out = _hook(["-q", draft / "config.json"], capsys)
    assert code == EXIT_CHECK_FAILED and "ENG001" in out


def test_a_weight_folder_without_a_config_is_checked_not_skipped(tiny_draft, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    draft = tiny_draft()
    (draft / "config.json").unlink()
    weights = next(draft.glob("*.safetensors"))
    assert draft_folders([weights]) == [draft]
    code, out = _hook(["-q", weights], capsys)
    assert code == EXIT_CHECK_FAILED and "CFG001" in out


@pytest.mark.parametrize("name", ["model.safetensors", "model.safetensors.index.json", "draft.pt", "pytorch_model.bin",
                                  ".metadata", "__0_0.distcp", "dspark-manifest.json"])
def test_every_weight_index_or_manifest_file_names_its_folder(tmp_path, name):
    folder = tmp_path / "lost"
    folder.mkdir()
    (folder / name).write_bytes(b"")
    assert draft_folders([folder / name]) == [folder]


def test_files_that_are_not_weights_name_no_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    assert draft_folders([tmp_path / "notes.txt", tmp_path / "README.md"]) == []


def test_the_settings_may_name_several_engines(dspark, tiny_draft, tmp_path):
    settings(tmp_path, 'engine = ["tokenspeed@pr1031", "tokenspeed@main"]\n')
    run = dspark("check", tiny_draft(), "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED  # main fails it: every named engine must pass
    assert [row["engine"] for row in run.json()["engine_verdicts"]] == ["tokenspeed@pr1031", "tokenspeed@main"]
