"""What the system refuses on the way to a checkpoint is exit 2 naming the
path it refused: the draft is not broken, this machine cannot read it.
Permissions are real (chmod), read by a process that is not root (root
reads through them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_USAGE
from dspark.examples.fabricate import write_draft

NOBODY = 65534


@pytest.fixture
def shared_dir():
    """A folder another user can reach (pytest's tmp_path is private to its user)."""
    folder = Path(tempfile.mkdtemp(prefix="dspark-refusals-"))
    folder.chmod(0o755)
    yield folder
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(folder)


def _unprivileged() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root reads through permissions, and setpriv is not here to drop them")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def check_unprivileged(*args) -> tuple[int, str]:
    environment = {k: v for k, v in os.environ.items() if k != "DSPARK_DEBUG"}
    environment.update(COLUMNS="100", NO_COLOR="1", HOME="/")
    done = subprocess.run(
        [*_unprivileged(), sys.executable, "-c", "from dspark.cli.main import main; main()", "check",
         *map(str, args)],
        capture_output=True, env=environment, cwd="/", timeout=120,
    )
    return done.returncode, done.stderr.decode("utf-8", "replace")


def _draft(folder: Path) -> Path:
    draft = write_draft(folder / "draft")
    for path in [draft, *draft.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return draft


def test_a_folder_that_cannot_be_entered_is_named_itself(shared_dir):
    draft = _draft(shared_dir)
    draft.chmod(0o000)
    code, err = check_unprivileged(draft)
    assert code == EXIT_USAGE
    assert err.splitlines()[0] == f"error: {draft}: Permission denied"


def test_an_unreadable_config_is_exit_2_naming_it_not_a_bad_config(shared_dir):
    draft = _draft(shared_dir)
    (draft / "config.json").chmod(0o000)
    code, err = check_unprivileged(draft, "--format", "json")
    assert code == EXIT_USAGE
    assert err.splitlines()[0] == f"error: {draft / 'config.json'}: Permission denied"


def test_a_config_that_is_a_symlink_loop_is_unreadable_not_missing(dspark, tmp_path):
    draft = write_draft(tmp_path / "draft")
    (draft / "config.json").unlink()
    (draft / "config.json").symlink_to("loop.json")
    (draft / "loop.json").symlink_to("config.json")
    run = dspark("check", draft, "--format", "json")
    assert run.exit_code == EXIT_USAGE
    assert run.json()["error"]["file"] == str(draft / "config.json")
    assert "Too many levels of symbolic links" in run.stderr
    assert "CFG001" not in run.stdout


def test_an_unreadable_weight_file_is_exit_2_naming_it(shared_dir):
    draft = _draft(shared_dir)
    (draft / "model.safetensors").chmod(0o000)
    code, err = check_unprivileged(draft)
    assert code == EXIT_USAGE
    assert err.splitlines()[0] == f"error: {draft / 'model.safetensors'}: Permission denied"
