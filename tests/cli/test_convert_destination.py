"""Where `convert` writes: an empty folder (a mount point included) is
written without --force, a plan never needs --force, and two converts that
race for one destination leave the winner's output whole and tell the loser
that another convert finished first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dspark.converters.convert import ConvertOptions, convert_checkpoint, execute_plan, plan_conversion
from dspark.converters.writers.atomic import TEMP_MARK
from dspark.examples.fabricate import write_draft
from dspark.schema.errors import UsageError

torch = pytest.importorskip("torch")  # to fabricate the sources


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_draft(tmp_path / "src", prefix="draft_model.")


def written(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if TEMP_MARK in p.name or ".dspark-old-" in p.name]


def test_an_empty_folder_is_written_without_force(source: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    report = convert_checkpoint(source, tmp_path / "out")
    assert not report.plan.replaces_existing
    assert {"config.json", "dspark-manifest.json", "model.safetensors"} <= written(tmp_path / "out")
    assert leftovers(tmp_path) == []


def test_a_folder_with_anything_in_it_still_needs_force(source: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".keep").write_text("")
    with pytest.raises(UsageError, match="not an empty folder") as refused:
        convert_checkpoint(source, tmp_path / "out")
    assert "--force" in refused.value.hint and written(tmp_path / "out") == {".keep"}


def test_a_plan_never_needs_force(dspark, source: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("keep me")
    run = dspark("convert", source, tmp_path / "out", "--plan")
    assert run.exit_code == 0, run.stderr
    assert "needs --force" in run.stdout and written(tmp_path / "out") == {"notes.txt"}
    assert dspark("convert", source, tmp_path / "out", "--plan", "--format", "json").json()["replaces_existing"] is True


def test_a_convert_that_loses_the_race_says_another_finished_first(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    loser = plan_conversion(source, out)  # planned while `out` does not exist
    winner = convert_checkpoint(source, out, ConvertOptions.from_flags(dtype="float32"))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(UsageError) as lost:
        execute_plan(loser)
    assert "another convert" in lost.value.message and "finished writing it first" in lost.value.message
    assert "free space" not in (lost.value.hint or "")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the winner's output, untouched
    assert winner.plan.destination == loser.destination and leftovers(tmp_path) == []


def test_the_race_for_an_empty_folder_is_lost_the_same_way(dspark, source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    loser = plan_conversion(source, out)
    assert dspark("convert", source, out, "-q").exit_code == 0  # a real second convert, first to finish
    with pytest.raises(UsageError, match="another convert"):
        execute_plan(loser)
    assert "dspark-manifest.json" in written(out) and leftovers(tmp_path) == []


def test_the_race_lost_under_force_replaces_only_a_conversion(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    loser = plan_conversion(source, out, ConvertOptions.from_flags(force=True, dtype="float32"))
    convert_checkpoint(source, out)
    report = execute_plan(loser)  # --force: the other conversion is replaced, as it would be had it come first
    assert report.files and leftovers(tmp_path) == []


@pytest.fixture
def mount_point(tmp_path: Path):
    """An empty tmpfs mounted in the test's folder (where the system lets
    this user mount one): a folder rename can neither replace nor remove."""
    point = tmp_path / "mnt"
    point.mkdir()
    if shutil.which("mount") is None or subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)], capture_output=True
    ).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root or a user namespace)")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], capture_output=True)


def test_an_empty_mount_point_is_written_in_place(source: Path, tmp_path: Path, mount_point: Path) -> None:
    import os

    report = convert_checkpoint(source, mount_point)
    assert os.path.ismount(mount_point)
    assert {"config.json", "dspark-manifest.json", "model.safetensors"} <= written(mount_point)
    assert leftovers(mount_point) == [] and leftovers(tmp_path) == []
    assert report.verification.passed()


def test_a_mount_point_holding_a_conversion_is_not_replaced_under_force(
        dspark, source: Path, tmp_path: Path, mount_point: Path) -> None:
    convert_checkpoint(source, mount_point)
    before = {name: (mount_point / name).read_bytes() for name in written(mount_point)}
    run = dspark("convert", str(source), str(mount_point), "--force")
    assert run.exit_code == 2
    assert "is a mount point that is not empty" in run.stderr and "Traceback" not in run.stderr
    assert {name: (mount_point / name).read_bytes() for name in written(mount_point)} == before
    assert leftovers(mount_point) == [] and leftovers(tmp_path) == []
