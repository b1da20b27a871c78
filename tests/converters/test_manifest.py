"""`dspark-manifest.json`: written by convert, verified by check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import ConvertOptions, convert_checkpoint
from dspark.converters.readers import open_checkpoint
from dspark.converters.writers.manifest import MANIFEST_NAME, verify_manifest
from dspark.examples.fabricate import write_draft

pytest.importorskip("torch")  # the fabricator makes its tensors with torch


@pytest.fixture
def converted(tmp_path: Path) -> Path:
    source = write_draft(tmp_path / "src", dtype="float32")
    convert_checkpoint(source, tmp_path / "out", ConvertOptions.from_flags(dtype="bfloat16", max_shard_size="25KB"))
    return tmp_path / "out"


def codes(findings) -> list[str]:
    return sorted(f.code for f in findings)


def edit_manifest(folder: Path, change) -> None:
    path = folder / MANIFEST_NAME
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def flip_one_payload_byte(folder: Path, tensor: str) -> None:
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    entry = next(t for t in manifest["tensors"] if t["name"] == tensor)
    with open(folder / entry["file"], "r+b") as handle:
        handle.seek(entry["byte_range"][0] + 1)
        byte = handle.read(1)
        handle.seek(entry["byte_range"][0] + 1)
        handle.write(bytes([byte[0] ^ 0x01]))


def test_a_fresh_conversion_verifies_with_hashes(converted: Path) -> None:
    findings = verify_manifest(open_checkpoint(converted), hashes=True)
    assert codes(findings) == ["MAN004"]
    assert "hashes" in findings[0].message


def test_a_changed_payload_byte_is_found_only_by_hashing(converted: Path) -> None:
    flip_one_payload_byte(converted, "layers.1.mlp.down_proj.weight")
    assert codes(verify_manifest(open_checkpoint(converted), hashes=False)) == ["MAN004"]
    findings = verify_manifest(open_checkpoint(converted), hashes=True)
    assert codes(findings) == ["MAN003"]
    assert findings[0].tensor == "layers.1.mlp.down_proj.weight"


def test_check_verifies_hashes_with_verify_or_deep(converted: Path) -> None:
    flip_one_payload_byte(converted, "context_proj.weight")
    assert check_checkpoint(converted, environ={}).passed()
    for flags in ({"verify_hashes": True}, {"deep": True}):
        report = check_checkpoint(converted, environ={}, **flags)
        assert "MAN003" in codes(report.errors), flags


def test_an_edited_config_is_found_by_hashing(converted: Path) -> None:
    config = json.loads((converted / "config.json").read_text())
    config["rms_norm_eps"] = 1e-6
    (converted / "config.json").write_text(json.dumps(config, indent=2))
    findings = verify_manifest(open_checkpoint(converted), hashes=True)
    assert codes(findings) == ["MAN003"] and findings[0].file == "config.json"


@pytest.mark.parametrize(
    "change,fragment",
    [
        (lambda d: d["tensors"][0].update(shape=[1, 2, 3]), "shape"),
        (lambda d: d["tensors"][0].update(dtype="F32"), "dtype"),
        (lambda d: d["tensors"][0].update(byte_range=[0, 8]), "byte_range"),
        (lambda d: d["tensors"].pop(), "not listed"),
        (lambda d: d["tensors"].append({**d["tensors"][0], "name": "ghost.weight"}), "not stored"),
        (lambda d: d["files"][0].update(size=d["files"][0]["size"] + 1), "bytes"),
        (lambda d: d["files"].append({"name": "model-00009-of-00009.safetensors", "size": 10}), "missing"),
    ],
    ids=["shape", "dtype", "byte-range", "unlisted-tensor", "missing-tensor", "file-size", "missing-file"],
)
def test_differences_from_the_manifest_are_found_without_hashing(converted: Path, change, fragment: str) -> None:
    edit_manifest(converted, change)
    findings = verify_manifest(open_checkpoint(converted), hashes=False)
    assert codes(findings) == ["MAN002"], [f.message for f in findings]
    assert fragment in findings[0].message


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        json.dumps({"manifest_version": 99, "files": [], "tensors": []}),
        json.dumps({"manifest_version": 1, "files": [], "tensors": [{"name": "x"}]}),
        json.dumps({"manifest_version": 1, "files": [], "tensors": [
            {"name": "x", "file": "f", "dtype": "F32", "shape": [1], "byte_range": [0, 4], "sha256": "XYZ"}]}),
    ],
    ids=["not-json", "list", "version", "incomplete-tensor", "bad-hash"],
)
def test_an_invalid_manifest_is_one_finding(converted: Path, content: str) -> None:
    (converted / MANIFEST_NAME).write_text(content)
    findings = verify_manifest(open_checkpoint(converted), hashes=True)
    assert codes(findings) == ["MAN001"]


def test_checkpoints_without_a_manifest_are_not_affected(tmp_path: Path) -> None:
    source = write_draft(tmp_path / "src")
    assert "MAN004" not in codes(check_checkpoint(source, environ={}).findings)


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda d: d["files"][0].update(name="../../etc/hostname"), id="file-list"),
        pytest.param(lambda d: d["tensors"][0].update(file="/etc/hostname"), id="tensor-file"),
        pytest.param(lambda d: d["config"].update(file="../src/config.json"), id="config-file"),
    ],
)
def test_a_manifest_naming_files_outside_the_folder_is_invalid(converted: Path, where) -> None:
    # A hostile manifest must not make `check --verify` stat or hash files
    # elsewhere on the machine.
    edit_manifest(converted, where)
    findings = verify_manifest(open_checkpoint(converted), hashes=True)
    assert codes(findings) == ["MAN001"]
    assert "plain file name" in findings[0].message


def test_an_invalid_manifest_is_never_answered_with_delete_it(converted: Path) -> None:
    (converted / MANIFEST_NAME).write_text("not json")
    [finding] = verify_manifest(open_checkpoint(converted), hashes=False)
    assert "delete" not in finding.message.lower() and "re-convert" in finding.message


def test_verify_without_a_manifest_is_an_error(converted: Path) -> None:
    """Deleting the manifest must not turn `check --verify --strict` into a pass."""
    (converted / MANIFEST_NAME).unlink()
    assert check_checkpoint(converted, environ={}).passed(strict=True)  # --verify not asked for
    report = check_checkpoint(converted, environ={}, verify_hashes=True)
    assert codes(report.errors) == ["MAN005"] and not report.passed()
    assert "--deep" in report.errors[0].message
    # --deep alone judges values and asks for no manifest
    assert check_checkpoint(converted, environ={}, deep=True).passed(strict=True)


def test_a_weight_file_added_to_the_folder_is_an_error(converted: Path) -> None:
    (converted / "pytorch_model.bin").write_bytes(b"\0" * 64)
    (converted / "README.md").write_text("a note beside the draft\n")
    findings = verify_manifest(open_checkpoint(converted), hashes=False)
    assert codes(findings) == ["MAN006"]
    assert findings[0].file == "pytorch_model.bin" and "not listed" in findings[0].message
    (converted / "pytorch_model.bin").unlink()
    [verified] = verify_manifest(open_checkpoint(converted), hashes=False)
    assert verified.code == "MAN004" and verified.detail["other_files"] == ["README.md"]
    assert "README.md" in verified.message


def test_an_added_safetensors_file_is_named_once_not_per_tensor(tmp_path: Path) -> None:
    source = write_draft(tmp_path / "src")
    convert_checkpoint(source, tmp_path / "out", ConvertOptions())
    write_draft(tmp_path / "other", seed=5)
    (tmp_path / "other" / "model.safetensors").rename(tmp_path / "out" / "extra.safetensors")
    findings = verify_manifest(open_checkpoint(tmp_path / "out"), hashes=False)
    assert [(f.code, f.file) for f in findings] == [("MAN006", "extra.safetensors")]


def test_a_listed_file_removed_from_the_folder_is_an_error(converted: Path) -> None:
    shard = sorted(converted.glob("model-*.safetensors"))[-1]
    shard.unlink()
    report = check_checkpoint(converted, environ={})
    assert "MAN002" in codes(report.errors)
    assert any(f.code == "MAN002" and "missing" in f.message and f.file == shard.name for f in report.errors)


def poke_nan(folder: Path, tensor: str) -> None:
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    entry = next(t for t in manifest["tensors"] if t["name"] == tensor)
    assert entry["dtype"] == "BF16"
    with open(folder / entry["file"], "r+b") as handle:
        handle.seek(entry["byte_range"][0])
        handle.write(bytes([0xC0, 0x7F]))  # a bfloat16 NaN, little-endian


def test_verify_judges_the_values_it_hashes(converted: Path) -> None:
    poke_nan(converted, "layers.0.mlp.up_proj.weight")
    report = check_checkpoint(converted, environ={}, verify_hashes=True)
    assert report.payloads_read
    by_code = {f.code: f for f in report.errors}
    assert set(by_code) == {"MAN003", "PAY001"}
    assert by_code["PAY001"].tensor == "layers.0.mlp.up_proj.weight" and by_code["PAY001"].detail == {"nonfinite": 1}


@pytest.mark.parametrize("flags", [{"verify_hashes": True}, {"deep": True}, {"deep": True, "verify_hashes": True}])
def test_values_and_hashes_come_from_one_read(converted: Path, monkeypatch, flags) -> None:
    from dspark.converters.readers.safetensors import SafetensorsReader

    read: list[int] = []
    real = SafetensorsReader.iter_chunks

    def counting(self, entry, chunk_bytes):
        for chunk in real(self, entry, chunk_bytes):
            read.append(len(chunk))
            yield chunk

    monkeypatch.setattr(SafetensorsReader, "iter_chunks", counting)
    report = check_checkpoint(converted, environ={}, **flags)
    assert report.passed(strict=True) and "MAN004" in codes(report.findings)
    assert sum(read) == report.total_bytes  # every payload byte once, not twice
