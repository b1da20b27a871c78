"""The pre-commit hook judges only folders that hold weights or a weight
index: a config.json elsewhere is some other project's, not a draft."""

from __future__ import annotations

import contextvars

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK
from dspark.cli.precommit import draft_folders, main as precommit


def _hook(args, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = contextvars.Context().run(precommit, [str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_config_json_that_is_no_checkpoint_does_not_fail_the_commit(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    assert draft_folders([other / "config.json"]) == []
    assert _hook(["-q", other / "config.json"], capsys) == (EXIT_OK, "")


def test_a_changed_config_beside_weights_is_judged(tiny_draft, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    draft = tiny_draft(defect="fc-norm-shipped-declared-false")
    assert draft_folders([draft / "config.json"]) == [draft]
    assert _hook(["-q", draft / "config.json"], capsys)[0] == EXIT_CHECK_FAILED


def test_a_config_beside_only_a_weight_index_is_judged(tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors.index.json").write_text("{}")
    assert draft_folders([folder / "config.json"]) == [folder]
