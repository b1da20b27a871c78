"""Each of convert's safety layers on its own, so that one cannot hide the
other: the scan of the values convert writes refuses before the output is
finished (no config, no manifest, no verification run), and the check of
the finished output catches what was corrupted after the values were
judged; `--force` keeps a folder whose manifest lists a name that is now a
folder or a link. Inputs and corruptions are real files (safetensors and
json written by their libraries)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from safetensors.torch import load_file, save_file  # noqa: E402

from dspark.converters import convert as convert_module  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.examples.fabricate import write_draft  # noqa: E402
from dspark.schema.errors import CheckpointError, UsageError  # noqa: E402


@pytest.fixture
def stages(monkeypatch):
    """Which of convert's later steps ran: the config and manifest writes,
    and the check of the output."""
    ran: list[str] = []
    write_json, check = convert_module.write_json, convert_module.check_checkpoint

    def recorded_write_json(path, document):
        ran.append(f"write {Path(path).name}")
        return write_json(path, document)

    def recorded_check(*args, **kwargs):
        ran.append("check output")
        return check(*args, **kwargs)

    monkeypatch.setattr(convert_module, "write_json", recorded_write_json)
    monkeypatch.setattr(convert_module, "check_checkpoint", recorded_check)
    return ran


def nothing_left(destination: Path) -> bool:
    return not destination.exists() and not [p for p in destination.parent.iterdir() if ".dspark-" in p.name]


def test_the_value_scan_refuses_before_the_output_is_finished(tmp_path, stages):
    source = write_draft(tmp_path / "src", defect="nan", dtype="float32")
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out", ConvertOptions.from_flags(dtype="bfloat16"))
    assert caught.value.code == "PAY001"
    assert "convert refuses to write values a server cannot use" in caught.value.message
    assert stages == []  # no config, no manifest, and the output check never ran
    assert nothing_left(tmp_path / "out")


def _corrupt_after_writing(monkeypatch, corrupt) -> None:
    """Run `corrupt(folder)` once every file is written and synced, just
    before convert checks its output (between the write and the move)."""
    fsync_dir = convert_module.fsync_dir

    def then_corrupt(folder):
        fsync_dir(folder)
        corrupt(Path(folder))

    monkeypatch.setattr(convert_module, "fsync_dir", then_corrupt)


def _refused_by_the_output_check(source: Path, destination: Path, stages: list[str]) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, destination, ConvertOptions.from_flags(dtype="bfloat16"))
    assert "the converted output fails `dspark check`" in caught.value.message
    assert stages == ["write config.json", "write dspark-manifest.json", "check output"]  # the value scan passed
    assert nothing_left(destination)
    return caught.value


def test_the_output_check_catches_a_config_value_corrupted_before_the_move(tmp_path, monkeypatch, stages):
    def corrupt(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config["fc_norm"] = False  # the fc_norm weights are still shipped
        (folder / "config.json").write_text(json.dumps(config))

    _corrupt_after_writing(monkeypatch, corrupt)
    error = _refused_by_the_output_check(write_draft(tmp_path / "src"), tmp_path / "out", stages)
    assert [f["code"] for f in error.detail["findings"]] == ["FCN002"]  # fc_norm shipped, not declared


def test_the_output_check_catches_a_tensor_rewritten_before_the_move(tmp_path, monkeypatch, stages):
    def corrupt(folder: Path) -> None:
        weights = folder / "model.safetensors"
        tensors = load_file(str(weights))
        name = next(n for n in tensors if n.endswith("final_norm.weight"))
        tensors[name] = tensors[name][:-1].clone()  # one value short
        save_file(tensors, str(weights), metadata={"format": "pt"})

    _corrupt_after_writing(monkeypatch, corrupt)
    error = _refused_by_the_output_check(write_draft(tmp_path / "src"), tmp_path / "out", stages)
    assert "final_norm.weight" in error.message


# --------------------------------------------------------------------------
# --force and names the manifest lists


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_force_keeps_a_listed_name_that_is_now_a_folder_or_a_link(tmp_path, kind):
    source = write_draft(tmp_path / "src")
    out = tmp_path / "out"
    convert_checkpoint(source, out, ConvertOptions.from_flags(dtype="float32"))
    elsewhere = tmp_path / "elsewhere.safetensors"
    (out / "model.safetensors").rename(elsewhere)
    if kind == "folder":
        (out / "model.safetensors").mkdir()
        (out / "model.safetensors" / "results.txt").write_text("someone's\n")
    else:
        (out / "model.safetensors").symlink_to(elsewhere)
    with pytest.raises(UsageError) as caught:
        convert_checkpoint(source, out, ConvertOptions.from_flags(dtype="bfloat16", force=True))
    assert "does not list" in caught.value.message and "model.safetensors" in caught.value.message
    if kind == "folder":
        assert (out / "model.safetensors" / "results.txt").read_text() == "someone's\n"
        assert "model.safetensors/" in caught.value.message
    else:
        assert (out / "model.safetensors").is_symlink() and elsewhere.is_file()
