"""Sharded safetensors checkpoints: the index against the shards, on real
drafts written in shards by the safetensors library."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import convert_checkpoint
from dspark.converters.readers import copies
from dspark.converters.layouts.hf import SAFETENSORS_INDEX
from dspark.converters.readers import open_checkpoint
from dspark.schema.findings import Severity

SHARD = "model-{:05d}-of-00003.safetensors"


@pytest.fixture
def sharded(tiny_draft) -> Path:
    return tiny_draft(shards=3)


def index_of(draft: Path) -> dict:
    return json.loads((draft / SAFETENSORS_INDEX).read_text())


def write_index(draft: Path, index: dict) -> None:
    (draft / SAFETENSORS_INDEX).write_text(json.dumps(index))


def edit_index(draft: Path, change) -> None:
    index = index_of(draft)
    change(index)
    write_index(draft, index)


def errors(draft: Path, **options) -> Counter:
    report = check_checkpoint(draft, **options)
    return Counter(f.code for f in report.errors)


def test_a_sharded_draft_passes_and_lists_every_shard(sharded):
    report = check_checkpoint(sharded)
    assert report.passed(strict=True)
    assert report.format == "safetensors-sharded"
    assert [f.name for f in report.files] == [SHARD.format(i) for i in (1, 2, 3)]
    assert sum(f.tensors for f in report.files) == report.tensor_count == 37
    assert sum(f.nbytes for f in report.files) == report.total_bytes == index_of(sharded)["metadata"]["total_size"]


def test_the_index_file_itself_may_be_named(sharded):
    # Named directly it is a file, which the engine does not load: the
    # contents pass, the served verdict asks for the folder.
    report = check_checkpoint(sharded / SAFETENSORS_INDEX, verdict="contents")
    assert report.passed(strict=True) and report.tensor_count == 37
    assert [f.code for f in check_checkpoint(sharded / SAFETENSORS_INDEX).errors] == ["SRV001"]


def test_idx002_a_shard_named_in_the_index_is_missing(sharded):
    (sharded / SHARD.format(2)).unlink()
    report = check_checkpoint(sharded)
    missing = [f for f in report.findings if f.code == "IDX002"]
    assert [f.file for f in missing] == [SHARD.format(2)]
    # what it held is missing from the draft: that is what refuses it, and
    # each missing tensor names the missing shard as the cause
    assert Counter(f.code for f in report.errors)["INV001"] > 0
    assert all(f"The index puts it in {SHARD.format(2)}, which is missing (IDX002)" in f.message
               for f in report.errors if f.code == "INV001")


def test_a_missing_tensor_is_blamed_on_a_missing_shard_only_when_the_index_puts_it_there(sharded):
    """A tensor the index lists in no missing shard is missing for another
    reason: its INV001 does not send the user to restore the shard."""
    name = "model.context_norm.weight"
    first = load_file(sharded / SHARD.format(1))
    if name not in first:
        pytest.skip(f"{name} is not in shard 1 of this fixture")
    del first[name]
    save_file(first, str(sharded / SHARD.format(1)), metadata={"format": "pt"})
    edit_index(sharded, lambda ix: ix["weight_map"].pop(name))
    (sharded / SHARD.format(3)).unlink()
    report = check_checkpoint(sharded)
    missing = {f.tensor: f for f in report.errors if f.code == "INV001"}
    assert "context_norm.weight" in missing and "missing_shards" not in missing["context_norm.weight"].detail
    assert any(f.detail.get("missing_shards") == [SHARD.format(3)] for f in missing.values())


def test_a_truncated_shard_is_the_error_and_what_it_hid_is_not_judged(sharded):
    """A shard whose header cannot be read hides every tensor in it: they
    are not reported missing with advice to re-export or change the config,
    but noted as not judged beside the shard's own error."""
    path = sharded / SHARD.format(2)
    path.write_bytes(path.read_bytes()[:-200])
    report = check_checkpoint(sharded)
    assert [(f.code, f.file) for f in report.errors] == [("STF001", SHARD.format(2))]
    unjudged = [f for f in report.findings if f.code == "INV001"]
    assert unjudged and all(f.severity is Severity.INFO and f.message.startswith(
        f"not judged: {SHARD.format(2)} cannot be read (STF001)") for f in unjudged)


def test_idx002_a_stale_index_whose_missing_shard_held_nothing_needed_is_a_warning(sharded):
    """TokenSpeed reads the files present that the index names
    (weight_utils.py@4b9766f6:254-272) and never opens a missing one; when
    every tensor the draft needs is in the others, it serves the draft."""
    def stale(index):
        name = next(n for n, s in index["weight_map"].items() if s == SHARD.format(3))
        index["weight_map"][name] = "model-00004-of-00003.safetensors"  # moved there, never written

    edit_index(sharded, stale)
    report = check_checkpoint(sharded)
    assert report.errors == []
    assert [(f.code, f.file) for f in report.warnings] == [("IDX002", "model-00004-of-00003.safetensors")]


def test_idx003_a_listed_tensor_is_absent_from_its_shard(sharded):
    edit_index(sharded, lambda ix: ix["weight_map"].update({"model.ghost.weight": SHARD.format(1)}))
    report = check_checkpoint(sharded)
    assert [(f.code, f.tensor, f.file) for f in report.warnings] == [("IDX003", "model.ghost.weight", SHARD.format(1))]


def test_idx003_a_tensor_listed_in_the_wrong_shard(sharded):
    def move(index):
        name = next(n for n, s in index["weight_map"].items() if s == SHARD.format(1))
        index["weight_map"][name] = SHARD.format(3)

    report = check_checkpoint(sharded)
    assert not report.errors
    edit_index(sharded, move)
    report = check_checkpoint(sharded)
    assert [f.code for f in report.warnings] == ["IDX003"]
    assert f"(it is in {SHARD.format(1)})" in report.warnings[0].message


def test_idx004_a_tensor_in_a_shard_is_not_listed(sharded):
    edit_index(sharded, lambda ix: ix["weight_map"].pop("model.final_norm.weight"))
    report = check_checkpoint(sharded)
    assert [(f.code, f.tensor) for f in report.warnings] == [("IDX004", "model.final_norm.weight")]


def test_idx004_a_stray_shard_the_index_does_not_name(sharded):
    save_file({"model.extra.weight": load_file(sharded / SHARD.format(1))["model.final_norm.weight"]},
              str(sharded / "model-extra.safetensors"))
    report = check_checkpoint(sharded)
    assert sorted(f.code for f in report.errors) == ["IDX004", "INV002"]


@pytest.mark.parametrize("scale", [1, 3], ids=["same-values", "other-values"])
def test_a_stale_file_beside_the_index_is_never_opened(sharded, scale):
    """A consolidated model.safetensors left beside the shards: the loader
    opens only the files the index names (model_loader/weight_utils.py@f4d8ec6e:
    254-272), so its copies are never read, never served twice, whatever
    their values; a warning names the file, not an IDX005 error."""
    tensors = {}
    for i in (1, 2, 3):
        tensors.update(load_file(sharded / SHARD.format(i)))
    save_file({n: t * scale for n, t in tensors.items()}, str(sharded / "model.safetensors"))
    report = check_checkpoint(sharded)
    assert report.errors == [], [(f.code, f.message) for f in report.errors]
    [stale] = [f for f in report.warnings if f.code == "IDX004"]
    assert stale.file == "model.safetensors" and stale.detail["tensors_also_indexed"] == 37
    assert "IDX005" not in {f.code for f in report.findings}
    # the inventory is the indexed shards' copies
    assert {e.file for e in open_checkpoint(sharded).entries} == {SHARD.format(i) for i in (1, 2, 3)}


def test_idx004_a_shard_the_index_does_not_name_whose_tensors_it_lists_elsewhere(sharded):
    """Every tensor of shard 2 listed in a shard that is missing, shard 2
    named by no entry: TokenSpeed opens only the named files, so shard 2's
    tensors never load and the engine refuses the draft. The missing shard
    alone would be a warning; the unopened file is the error."""
    edit_index(sharded, lambda ix: ix["weight_map"].update(
        {n: SHARD.format(3) for n, s in ix["weight_map"].items() if s == SHARD.format(2)}))
    (sharded / SHARD.format(3)).rename(sharded / "moved-away.safetensors")
    # shard 3's own tensors now live in a file the index does not name either
    report = check_checkpoint(sharded)
    [stray] = [f for f in report.errors if f.code == "IDX004"]  # one finding for every tensor of both files
    assert stray.detail["files"] == ["model-00002-of-00003.safetensors", "moved-away.safetensors"]
    assert stray.detail["first"]["stray_shard"]
    assert "does not name model-00002-of-00003.safetensors at all" in stray.message
    assert [f.code for f in report.warnings if f.code == "IDX002"] == ["IDX002"]


def store_a_second_copy(draft: Path, name: str, change=lambda t: t.clone()) -> None:
    """Add `name`, as shard 1 holds it (through `change`), to shard 3."""
    first = load_file(draft / SHARD.format(1))
    third = load_file(draft / SHARD.format(3))
    assert name in first
    third[name] = change(first[name])
    save_file(third, str(draft / SHARD.format(3)), metadata={"format": "pt"})


@pytest.mark.parametrize("listed_in", [1, 3], ids=["listed-in-first", "listed-in-second"])
@pytest.mark.parametrize("change, how", [
    (lambda t: t * 3, "with different bytes"),
    (lambda t: (t * 3).double(), "as BF16[32] and F64[32], with different values"),
    (lambda t: t.float() + 2 ** -9, "as BF16[32] and F32[32], with different values"),
    (lambda t: t.reshape(1, -1), "as BF16[32] and BF16[1, 32], with different values"),
], ids=["other-values", "other-dtype-other-values", "fp32-other-in-fp16", "other-shape"])
def test_idx005_a_tensor_in_two_shards_that_differ(sharded, listed_in, change, how):
    """TokenSpeed loads both copies; the file read last wins, silently."""
    name = "model.final_norm.weight"
    store_a_second_copy(sharded, name, change)
    edit_index(sharded, lambda ix: ix["weight_map"].update({name: SHARD.format(listed_in)}))
    report = check_checkpoint(sharded)
    # one finding for one fault: the index names a shard that does hold it
    assert [(f.code, f.tensor) for f in report.errors] == [("IDX005", name)]
    assert report.errors[0].detail["files"] == [SHARD.format(1), SHARD.format(3)]
    assert how in report.errors[0].message


def test_idx005_identical_copies_in_two_shards_are_a_warning(sharded):
    """Byte for byte the same: whichever copy loads last, the values are right."""
    name = "model.final_norm.weight"
    store_a_second_copy(sharded, name)
    report = check_checkpoint(sharded)
    assert report.errors == []
    assert [(f.code, f.tensor, f.detail["identical"]) for f in report.warnings] == [("IDX005", name, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_idx005_copies_of_the_same_values_in_two_dtypes_are_a_warning(sharded, dtype):
    """A bf16 tensor beside its exact fp32 or fp64 copy: the engine casts
    whichever it reads last into the one parameter, and both hold the same
    numbers, so the draft serves what it was trained with (as INV006 judges
    two names for one parameter)."""
    name = "model.final_norm.weight"
    store_a_second_copy(sharded, name, lambda t: t.to(dtype))
    report = check_checkpoint(sharded)
    assert report.errors == [], [(f.code, f.message) for f in report.errors]
    [copy] = [f for f in report.warnings if f.code == "IDX005"]
    assert copy.detail["comparison"] == "identical"
    assert "with the same values as BF16 and F" in copy.message and copy.detail["serves_same"] is True


@pytest.mark.parametrize("copy", [
    lambda t: t.float() * (1 + 2 ** -20),
    lambda t: t.double() * (1 + 2 ** -30),
], ids=["fp32-extra-low-bit", "fp64-extra-low-bit"])
def test_idx005_copies_that_round_to_the_same_served_values_are_a_warning(sharded, copy):
    """The draft is served in the target's dtype, bf16 or fp16 under "auto",
    never fp32 (configs/model_config.py@f4d8ec6e:766-795): an fp32 copy that
    differs from the bf16 one only below both dtypes' last bit loads the same
    parameter values whichever copy is read last."""
    name = "model.final_norm.weight"
    store_a_second_copy(sharded, name, copy)
    report = check_checkpoint(sharded)
    assert report.errors == [], [(f.code, f.message) for f in report.errors]
    [twice] = [f for f in report.warnings if f.code == "IDX005"]
    assert twice.detail["comparison"] == "identical as served" and twice.detail["identical"] is False
    assert twice.detail["serves_same"] is True and "--dtype float32, would not" in twice.message
    assert "round to the same ones in bf16 and in fp16" in twice.message


@pytest.mark.parametrize("scale, identical", [(1, True), (3, False)], ids=["identical", "different"])
def test_idx005_copies_too_large_to_compare_header_only_wait_for_deep(sharded, monkeypatch, scale, identical):
    """Above the header-only limit the copies are not read (a duplicated
    embedding would be gigabytes, or a download): an error that says so and
    names --deep, which compares them and gives the verdict of smaller copies."""
    monkeypatch.setattr(copies, "COMPARE_LIMIT_HEADER_ONLY", 16)  # final_norm: 64 bytes
    name = "model.final_norm.weight"
    store_a_second_copy(sharded, name, lambda t: t * scale)
    header_only = check_checkpoint(sharded)
    assert [(f.code, f.tensor, f.detail["identical"]) for f in header_only.errors] == [("IDX005", name, None)]
    assert header_only.errors[0].detail["comparison"] == "not compared"
    assert "a header-only check compares; `dspark check --deep` compares them" in header_only.errors[0].message
    deep = check_checkpoint(sharded, deep=True)
    judged = [(f.code, f.severity.value, f.detail["identical"]) for f in deep.findings if f.code == "IDX005"]
    assert judged == [("IDX005", "warning" if identical else "error", identical)]
    if not identical:
        assert "with different bytes" in deep.errors[0].message


def test_convert_compares_copies_too_large_for_a_header_only_check(sharded, monkeypatch, tmp_path):
    """Converting reads every payload anyway: identical copies over the
    header-only limit convert (one copy written), as smaller ones do."""
    monkeypatch.setattr(copies, "COMPARE_LIMIT_HEADER_ONLY", 16)
    name = "model.final_norm.weight"
    store_a_second_copy(sharded, name)
    report = convert_checkpoint(sharded, tmp_path / "out")
    assert any(f.code == "IDX005" and f.detail["identical"] for f in report.plan.findings)
    assert check_checkpoint(tmp_path / "out", deep=True).errors == []


@pytest.mark.parametrize("delta", [1, -2], ids=["too-large", "too-small"])
def test_idx006_total_size_differs_from_the_tensor_bytes(sharded, delta):
    edit_index(sharded, lambda ix: ix["metadata"].update(total_size=ix["metadata"]["total_size"] + delta))
    report = check_checkpoint(sharded)
    assert [f.code for f in report.warnings] == ["IDX006"]
    assert report.warnings[0].detail["actual"] == report.total_bytes


def test_idx006_is_not_claimed_when_a_shard_is_missing(sharded):
    (sharded / SHARD.format(3)).unlink()
    assert "IDX006" not in {f.code for f in check_checkpoint(sharded).findings}


@pytest.mark.parametrize(
    "shard_name",
    [
        pytest.param("../outside.safetensors", id="parent"),
        pytest.param("/tmp/outside.safetensors", id="absolute"),
        pytest.param("sub/model.safetensors", id="subfolder"),
        pytest.param("..", id="dotdot"),
        pytest.param("C:\\weights\\model.safetensors", id="windows-absolute"),
        pytest.param("..\\outside.safetensors", id="windows-parent"),
        pytest.param("", id="empty"),
    ],
)
def test_idx007_shard_name_is_not_a_plain_file_name(sharded, tmp_path, shard_name):
    # A real file sits where the index points, so following it would "work".
    save_file({"model.layers.0.mlp.up_proj.weight": load_file(sharded / SHARD.format(1))["model.final_norm.weight"]},
              str(tmp_path / "outside.safetensors"))

    def point_outside(index):
        for name, shard in index["weight_map"].items():
            if name.startswith("model.layers.0.mlp.up_proj"):
                index["weight_map"][name] = shard_name

    edit_index(sharded, point_outside)
    checkpoint = open_checkpoint(sharded)
    unsafe = [f for f in checkpoint.findings if f.code == "IDX007"]
    assert len(unsafe) == 1 and unsafe[0].detail == {"shard": shard_name}
    assert all(Path(e.file).name == e.file for e in checkpoint.entries)
    assert all(e.file.startswith("model-") for e in checkpoint.entries)
    # one fault, one finding: the tensor itself is still in its real shard
    assert errors(sharded) == Counter({"IDX007": 1})


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{not json", id="not-json"),
        pytest.param("[]", id="not-an-object"),
        pytest.param('{"metadata": {}}', id="no-weight_map"),
        pytest.param('{"weight_map": {"model.final_norm.weight": 3}}', id="shard-not-a-string"),
        pytest.param('{"weight_map": {}, "weight_map": {}}', id="duplicate-key"),
        pytest.param("\udcff", id="not-utf8"),
    ],
)
def test_idx001_index_is_not_valid(sharded, text):
    (sharded / SAFETENSORS_INDEX).write_bytes(text.encode("utf-8", "surrogateescape"))
    report = check_checkpoint(sharded)
    assert report.errors[0].code == "IDX001"
    assert report.errors[0].file == SAFETENSORS_INDEX


def test_idx001_several_files_without_an_index(sharded):
    """TokenSpeed reads every *.safetensors when there is no index
    (model_loader/loader.py@4b9766f6:287-311): the draft loads whole, and
    the missing index is a warning for other loaders."""
    (sharded / SAFETENSORS_INDEX).unlink()
    report = check_checkpoint(sharded)
    assert report.errors == [] and [f.code for f in report.warnings] == ["IDX001"]
    assert report.warnings[0].detail["files"] == [SHARD.format(i) for i in (1, 2, 3)]
    # the shards are still read: every tensor is there
    assert report.tensor_count == 37


@pytest.mark.parametrize("scale, severity", [(1, "warnings"), (2, "errors")], ids=["identical", "different"])
def test_a_tensor_stored_twice_without_an_index(sharded, scale, severity):
    """Without an index every file is read and the last copy wins: an
    error when the copies differ, a warning when they are the same bytes."""
    (sharded / SAFETENSORS_INDEX).unlink()
    first = load_file(sharded / SHARD.format(1))
    name, tensor = next(iter(first.items()))
    second = load_file(sharded / SHARD.format(2))
    second[name] = tensor * scale
    save_file(second, str(sharded / SHARD.format(2)))
    report = check_checkpoint(sharded)
    assert ("IDX005", name) in {(f.code, f.tensor) for f in getattr(report, severity)}
    assert "IDX005" not in {f.code for f in getattr(report, "errors" if severity == "warnings" else "warnings")}


def test_a_corrupt_shard_is_stf001_and_the_others_are_still_checked(sharded):
    path = sharded / SHARD.format(2)
    path.write_bytes(path.read_bytes()[:-1])
    report = check_checkpoint(sharded)
    corrupt = [f for f in report.errors if f.code == "STF001"]
    assert [f.file for f in corrupt] == [SHARD.format(2)]
    assert {f.name for f in report.files if f.tensors} == {SHARD.format(1), SHARD.format(3)}


def test_a_folders_safetensors_are_listed_as_its_glob_lists_them(tmp_path):
    from dspark.converters.layouts.hf import safetensors_entries

    for name in ("model.safetensors", ".hidden.safetensors", "b.safetensors.bak", "A.SAFETENSORS", "c.safetensors"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "folder.safetensors").mkdir()
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "nowhere")
    assert sorted(safetensors_entries(tmp_path)) == sorted(tmp_path.glob("*.safetensors"))
    assert len(safetensors_entries(tmp_path)) == 5
    assert safetensors_entries(tmp_path / "model.safetensors") == [] == safetensors_entries(tmp_path / "missing")
