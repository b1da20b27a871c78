"""A name stdout cannot encode is written escaped, never an internal error."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("options", [(), ("--format", "github"), ("-q",), ("--format", "junit")])
@pytest.mark.parametrize("defect, verdict", [(None, 0), ("mla-nope", 1)])
def test_a_japanese_folder_on_a_cp1252_stream(dspark_process, tiny_draft, options, defect, verdict):
    draft = tiny_draft("ドラフト", defect=defect)
    run = dspark_process("check", draft, *options, env={"PYTHONIOENCODING": "cp1252"})
    assert run.exit_code == verdict, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
    if verdict or not options:
        assert "\\u30c9\\u30e9\\u30d5\\u30c8" in run.stdout + run.stderr


def test_a_usage_error_naming_such_a_path(dspark_process, tmp_path):
    run = dspark_process("check", tmp_path / "ドラフト", env={"PYTHONIOENCODING": "cp1252"})
    assert run.exit_code == 2
    assert "\\u30c9" in run.stderr and "internal error" not in run.stderr
