"""The human check page names the engine it judged for and where that
choice came from: the flag, a settings file found upward, or the default."""

from __future__ import annotations

from dspark.cli.errors import EXIT_OK


def _engine_line(page: str) -> str:
    (line,) = [line for line in page.splitlines() if line.strip().startswith("engine ")]
    return line.strip()


def test_the_default_engine_is_named_as_the_default(dspark, tiny_draft, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = dspark("check", tiny_draft())
    assert run.exit_code == EXIT_OK
    assert _engine_line(run.stdout) == f"engine {run_engine(dspark, tiny_draft())} (dspark's default)"


def run_engine(dspark, draft) -> str:
    return dspark("check", draft, "--format", "json").json()["engine"]


def test_a_flag_is_named_as_the_flag(dspark, tiny_draft, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _engine_line(dspark("check", tiny_draft(), "--engine", "tokenspeed@main").stdout) == (
        "engine tokenspeed@main (--engine)")


def test_a_settings_file_found_upward_is_named(dspark, tiny_draft, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.dspark]\nengine = "tokenspeed@main"\n')
    (tmp_path / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "deep" / "er")
    line = _engine_line(dspark("check", tiny_draft()).stdout)
    assert line == f"engine tokenspeed@main (engine in {(tmp_path / 'pyproject.toml').resolve()})"
