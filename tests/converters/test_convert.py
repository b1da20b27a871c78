"""`convert_checkpoint` on safetensors inputs written by the safetensors
library: the served layout, the values, the config, and the guarantees."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import (
    ConvertOptions,
    clean_stale_temporaries,
    convert_checkpoint,
    plan_conversion,
)
from dspark.converters.readers import open_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors
from dspark.schema.errors import CheckpointError, UsageError

torch = pytest.importorskip("torch")  # to fabricate sources and compute reference casts

SPEC = SCALES["tiny"]
SERVED = set(tensor_shapes(SPEC, fc_norm=True, skipped=False))
SKIPPED = set(tensor_shapes(SPEC, fc_norm=True, skipped=True)) - SERVED
# What convert writes for the default engine, TokenSpeed 0.1.1: the served tensors and the draft's
# embed_tokens, which it loads at --pipeline-parallel-size > 1 (tests/converters/test_convert_launches.py).
WRITTEN = SERVED | {"embed_tokens.weight"}


def fabricate(
    folder: Path,
    *,
    dtype: str = "float32",
    shards: int = 1,
    prefix: str = "model.",
    config: dict | None = None,
    extra: dict | None = None,
    drop: tuple[str, ...] = (),
) -> Path:
    """A TorchSpec-style HF export: every tensor under `prefix`, the frozen
    embedding and the confidence head included, plus `extra` tensors."""
    tensors = make_tensors(tensor_shapes(SPEC), dtype=dtype, seed=11)
    tensors.update(extra or {})
    for name in drop:
        tensors.pop(name)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder, {prefix + n: t for n, t in tensors.items()}, shards=shards)
    (folder / "config.json").write_text(json.dumps(config or draft_config(SPEC), indent=2))
    return folder


def load_output(folder: Path) -> dict:
    tensors = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as handle:
            for name in handle.keys():
                assert name not in tensors, f"{name} stored twice"
                tensors[name] = handle.get_tensor(name)
    return tensors


def load_source(folder: Path) -> dict:
    from dspark.schema.families import strip_wrappers

    return {strip_wrappers(n): t for n, t in load_output(folder).items()}


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


def bf16(**kwargs) -> ConvertOptions:
    return ConvertOptions.from_flags(dtype="bfloat16", **kwargs)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return fabricate(tmp_path / "src", shards=2)


def test_output_is_exactly_the_served_tensor_set(source: Path, tmp_path: Path) -> None:
    report = convert_checkpoint(source, tmp_path / "out", bf16())
    out = load_output(tmp_path / "out")
    assert set(out) == WRITTEN
    assert {d.served_name for d in report.plan.dropped} == SKIPPED - WRITTEN
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "dspark-manifest.json", "model.safetensors"]


@pytest.mark.parametrize(
    "src_dtype,flag",
    [("float32", "bfloat16"), ("float32", "float16"), ("bfloat16", "float32"), ("float16", "bfloat16"), ("float32", "keep")],
)
def test_values_are_the_round_to_nearest_even_cast_of_the_source(tmp_path: Path, src_dtype: str, flag: str) -> None:
    source = fabricate(tmp_path / "src", dtype=src_dtype)
    convert_checkpoint(source, tmp_path / "out", ConvertOptions.from_flags(dtype=flag))
    want_dtype = getattr(torch, src_dtype if flag == "keep" else flag)
    original = load_source(source)
    for name, tensor in load_output(tmp_path / "out").items():
        expected = original[name].to(want_dtype)
        assert tensor.dtype == want_dtype, name
        assert torch.equal(tensor.view(torch.uint8), expected.view(torch.uint8)), name


def test_the_config_is_normalised_and_explicit(tmp_path: Path) -> None:
    config = draft_config(SPEC, fc_norm=True, stream=None)
    del config["architectures"]
    config["torch_dtype"] = "float32"
    config["dflash_config"] = {"aux_hidden_stream": "ATTN_RES"}
    source = fabricate(tmp_path / "src", config=config)
    report = convert_checkpoint(source, tmp_path / "out", bf16())
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == "k3_dspark"
    assert written["architectures"] == ["K3DSparkModel"]
    assert written["fc_norm"] is True
    assert written["aux_hidden_stream"] == "attn_res"
    assert written["dflash_config"]["aux_hidden_stream"] == "attn_res"
    assert written["torch_dtype"] == "bfloat16"
    assert any(c.startswith("torch_dtype: 'float32' -> 'bfloat16'") for c in report.plan.config_changes)
    # everything else is carried over unchanged
    assert {k: v for k, v in written.items() if k in config and k not in ("torch_dtype", "dflash_config")} == {
        k: v for k, v in config.items() if k not in ("torch_dtype", "dflash_config")
    }


def test_absent_fc_norm_and_stream_are_written_as_their_defaults(tmp_path: Path) -> None:
    config = draft_config(SPEC, fc_norm=False, stream=None)
    del config["fc_norm"]
    source = fabricate(tmp_path / "src", config=config, drop=tuple(f"fc_norm.{i}.weight" for i in range(5)))
    convert_checkpoint(source, tmp_path / "out", bf16())
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["fc_norm"] is False and written["aux_hidden_stream"] == "prefix"


def test_a_null_stream_is_not_made_the_default(tmp_path: Path) -> None:
    # check refuses `aux_hidden_stream: null` (STR001); convert must not turn
    # it into "prefix" and pass: the field dspark exists to guard is not decided here
    config = draft_config(SPEC, fc_norm=True)
    config["aux_hidden_stream"] = None
    source = fabricate(tmp_path / "src", config=config)
    plan = plan_conversion(source, tmp_path / "out", bf16())
    assert plan.config["aux_hidden_stream"] is None
    assert [f.code for f in plan.errors] == ["STR001"]
    with pytest.raises(CheckpointError):
        convert_checkpoint(source, tmp_path / "out", bf16())
    assert not (tmp_path / "out").exists()


def test_shipped_fc_norm_weights_without_the_flag_are_not_inferred(tmp_path: Path) -> None:
    config = draft_config(SPEC)
    del config["fc_norm"]
    source = fabricate(tmp_path / "src", config=config)
    plan = plan_conversion(source, tmp_path / "out", bf16())
    assert [f.code for f in plan.errors] == ["FCN002"]
    assert "fc_norm" not in plan.config
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out", bf16())
    assert caught.value.code == "FCN002" and "Nothing was written" in caught.value.message
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]


def test_the_output_passes_dspark_check_deep_with_its_manifest(source: Path, tmp_path: Path) -> None:
    convert_checkpoint(source, tmp_path / "out", bf16())
    report = check_checkpoint(tmp_path / "out", deep=True, verify_hashes=True, environ={})
    assert report.passed(strict=True), [f.message for f in report.findings if f.severity.value != "info"]
    assert "MAN004" in {f.code for f in report.findings}


def test_manifest_records_every_tensor(source: Path, tmp_path: Path) -> None:
    convert_checkpoint(source, tmp_path / "out", bf16())
    manifest = json.loads((tmp_path / "out" / "dspark-manifest.json").read_text())
    assert manifest["source_format"] == "safetensors-sharded"
    assert manifest["dspark_version"]
    data = (tmp_path / "out" / "model.safetensors").read_bytes()
    assert {t["name"] for t in manifest["tensors"]} == WRITTEN
    for tensor in manifest["tensors"]:
        start, end = tensor["byte_range"]
        assert hashlib.sha256(data[start:end]).hexdigest() == tensor["sha256"]


def test_the_same_input_gives_byte_identical_files(source: Path, tmp_path: Path) -> None:
    convert_checkpoint(source, tmp_path / "a", bf16(max_shard_size="20KB"))
    convert_checkpoint(source, tmp_path / "b", bf16(max_shard_size="20KB"))
    first, second = tree_digest(tmp_path / "a"), tree_digest(tmp_path / "b")
    assert len(first) > 4 and first == second


def test_the_input_is_never_modified(source: Path, tmp_path: Path) -> None:
    before = tree_digest(source)
    times = {p: p.stat().st_mtime_ns for p in source.iterdir()}
    convert_checkpoint(source, tmp_path / "out", bf16())
    assert tree_digest(source) == before
    assert {p: p.stat().st_mtime_ns for p in source.iterdir()} == times


def test_an_existing_destination_is_refused_without_force(source: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    with pytest.raises(UsageError, match="already exists"):
        convert_checkpoint(source, tmp_path / "out", bf16())
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep me"


def previous_conversion(source: Path, folder: Path, max_shard_size: str = "5GB") -> Path:
    """An earlier `dspark convert` output (float32, so the new one differs)."""
    convert_checkpoint(source, folder, ConvertOptions.from_flags(dtype="float32", max_shard_size=max_shard_size))
    return folder


@pytest.mark.parametrize("shard_size", ["5GB", "30KB"], ids=["one-file", "sharded-with-index"])
def test_force_replaces_an_earlier_conversion_once_the_new_one_is_complete(
    source: Path, tmp_path: Path, shard_size: str
) -> None:
    previous_conversion(source, tmp_path / "out", shard_size)
    report = convert_checkpoint(source, tmp_path / "out", bf16(force=True))
    assert report.plan.replaces_existing
    assert {t.dtype for t in load_output(tmp_path / "out").values()} == {torch.bfloat16}
    assert set(load_output(tmp_path / "out")) == WRITTEN
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]  # nothing left beside


def test_a_failing_forced_conversion_leaves_the_old_destination_alone(tmp_path: Path) -> None:
    good = fabricate(tmp_path / "good")
    before = tree_digest(previous_conversion(good, tmp_path / "out"))
    source = fabricate(tmp_path / "src", drop=("layers.1.mlp.up_proj.weight",))
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out", bf16(force=True))
    assert caught.value.code == "INV001" and "layers.1.mlp.up_proj.weight" in caught.value.message
    assert tree_digest(tmp_path / "out") == before


def someones_project(folder: Path) -> Path:
    """A folder with a config.json that dspark did not write: a model repo
    with its history, code and notes (or a target model's folder)."""
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "src").mkdir()
    (folder / "src" / "train.py").write_text("print('years of work')\n")
    (folder / "notes.md").write_text("what we learned\n")
    (folder / "config.json").write_text(json.dumps(draft_config(SPEC)))
    return folder


def test_force_never_replaces_a_folder_dspark_did_not_write(source: Path, tmp_path: Path) -> None:
    project = someones_project(tmp_path / "proj")
    before = tree_digest(project)
    with pytest.raises(UsageError) as caught:
        convert_checkpoint(source, project, bf16(force=True))
    message = caught.value.message
    assert "not written by dspark convert" in message
    for entry in (".git/", "config.json", "notes.md", "src/"):
        assert entry in message  # what would be lost is named
    assert tree_digest(project) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj", "src"]


def test_force_never_replaces_a_conversion_with_files_added(source: Path, tmp_path: Path) -> None:
    out = previous_conversion(source, tmp_path / "out")
    (out / "notes.md").write_text("mine\n")
    (out / "eval").mkdir()
    with pytest.raises(UsageError) as caught:
        convert_checkpoint(source, out, bf16(force=True))
    assert "does not list" in caught.value.message
    assert "eval/" in caught.value.message and "notes.md" in caught.value.message
    assert (out / "notes.md").read_text() == "mine\n"


def test_force_names_the_first_few_of_many_entries(source: Path, tmp_path: Path) -> None:
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for index in range(9):
        (crowded / f"file{index}.txt").write_text("x")
    with pytest.raises(UsageError, match=r"file0.txt, file1.txt, file2.txt, file3.txt, file4.txt and 4 more"):
        convert_checkpoint(source, crowded, bf16(force=True))


def test_force_fills_an_empty_folder(source: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    convert_checkpoint(source, tmp_path / "empty", bf16(force=True))
    assert set(load_output(tmp_path / "empty")) == WRITTEN


@pytest.mark.parametrize("where", ["inside", "same", "around"])
def test_destinations_that_overlap_the_source_are_refused(source: Path, tmp_path: Path, where: str) -> None:
    destination = {"inside": source / "converted", "same": source, "around": tmp_path}[where]
    before = tree_digest(source)
    with pytest.raises(UsageError):
        convert_checkpoint(source, destination, bf16(force=True))
    assert tree_digest(source) == before


def test_shards_respect_the_limit_and_the_index_is_true(source: Path, tmp_path: Path) -> None:
    limit = 12_000
    report = convert_checkpoint(source, tmp_path / "out", bf16(max_shard_size=limit))
    out = tmp_path / "out"
    shards = sorted(out.glob("*.safetensors"))
    assert len(shards) == len(report.plan.shards) > 2
    big = {t.name for s in report.plan.shards for t in s.tensors if t.nbytes > limit}
    for shard in shards:
        with safe_open(str(shard), framework="pt") as handle:
            alone_and_big = set(handle.keys()) <= big and len(handle.keys()) == 1
        assert shard.stat().st_size <= limit or alone_and_big, shard.name
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == WRITTEN
    assert set(index["weight_map"].values()) == {p.name for p in shards}
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in load_output(out).values())
    assert check_checkpoint(out, environ={}).passed()


def test_keep_skipped_keeps_the_embedding_and_confidence_head(source: Path, tmp_path: Path) -> None:
    report = convert_checkpoint(source, tmp_path / "out", bf16(keep_skipped=True))
    assert set(load_output(tmp_path / "out")) == SERVED | SKIPPED
    assert not report.plan.dropped


def test_vocab_maps_are_dropped_and_integer_tensors_never_cast(tmp_path: Path) -> None:
    extra = {"t2d": torch.ones(SPEC.vocab_size, dtype=torch.bool), "d2t": torch.arange(SPEC.vocab_size)}
    source = fabricate(tmp_path / "src", extra=extra)
    report = convert_checkpoint(source, tmp_path / "out", bf16())
    assert {d.served_name: d.reason for d in report.plan.dropped if d.served_name in extra} == {
        "t2d": "training-only", "d2t": "training-only",
    }
    plan = plan_conversion(source, tmp_path / "kept", bf16(keep_skipped=True))
    kept = {t.name: t for t in plan.tensors}
    assert kept["d2t"].dtype == "I64" and kept["t2d"].dtype == "BOOL"
    assert set(plan.not_cast) == {"t2d", "d2t"}


def test_names_are_stripped_of_every_wrapper(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src", prefix="_orig_mod.draft_model.model.")
    report = convert_checkpoint(source, tmp_path / "out", bf16())
    assert set(load_output(tmp_path / "out")) == WRITTEN
    assert ("_orig_mod.draft_model.model.final_norm.weight", "final_norm.weight") in report.plan.renames


def test_two_names_for_one_tensor_are_refused(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src", extra={"_orig_mod.final_norm.weight": torch.ones(SPEC.hidden_size)})
    with pytest.raises(CheckpointError) as caught:
        plan_conversion(source, tmp_path / "out", bf16())
    assert caught.value.code == "INV006" and "final_norm.weight" in caught.value.message


def test_config_is_found_in_the_parent_or_given_explicitly(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "run" / "weights")
    (source / "config.json").rename(tmp_path / "run" / "config.json")
    assert plan_conversion(source, tmp_path / "a").config_source == str(tmp_path / "run" / "config.json")
    elsewhere = tmp_path / "configs" / "draft.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text((tmp_path / "run" / "config.json").read_text())
    plan = plan_conversion(source, tmp_path / "b", ConvertOptions(config_path=elsewhere))
    assert plan.config_source == str(elsewhere)


def test_without_a_config_nothing_is_converted(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src")
    (source / "config.json").unlink()
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out")
    assert caught.value.code == "CFG001" and "--config" in caught.value.hint
    assert not (tmp_path / "out").exists()


def test_a_corrupt_input_is_refused_before_writing(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src")
    shard = source / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out")
    assert caught.value.code == "STF001"
    assert not (tmp_path / "out").exists()


def test_plan_decides_everything_and_writes_nothing(source: Path, tmp_path: Path) -> None:
    plan = plan_conversion(source, tmp_path / "out", bf16(max_shard_size="30KB"))
    assert not (tmp_path / "out").exists()
    assert {t.name for t in plan.tensors} == WRITTEN
    assert plan.casts == {"F32->BF16": {"tensors": len(WRITTEN), "bytes_in": plan.bytes_in, "bytes_out": plan.bytes_out}}
    assert plan.bytes_out * 2 == plan.bytes_in
    assert len(plan.shards) > 1 and not plan.errors
    document = plan.to_dict()
    assert json.loads(json.dumps(document)) == document
    assert {d["served_name"] for d in document["dropped"]} == SKIPPED - WRITTEN


def test_stale_temporaries_of_dead_runs_are_removed(source: Path, tmp_path: Path) -> None:
    dead = _dead_pid()
    stale = tmp_path / f".out.dspark-tmp-{dead}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"partial")
    convert_checkpoint(source, tmp_path / "out", bf16())
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def test_a_previous_destination_moved_aside_by_a_killed_run_is_put_back(tmp_path: Path) -> None:
    dead = _dead_pid()
    moved = tmp_path / f".out.dspark-old-{dead}"
    moved.mkdir()
    (moved / "old.txt").write_text("old")
    clean_stale_temporaries(tmp_path / "out")
    assert (tmp_path / "out" / "old.txt").read_text() == "old"
    assert not moved.exists()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_safetensors_conversion_never_imports_torch(source: Path, tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from dspark.converters.convert import ConvertOptions, convert_checkpoint\n"
        f"convert_checkpoint({str(source)!r}, {str(tmp_path / 'out')!r}, ConvertOptions.from_flags(dtype='bfloat16'))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert set(load_output(tmp_path / "out")) == WRITTEN


def test_a_single_file_input_works_too(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src")
    convert_checkpoint(source / "model.safetensors", tmp_path / "out", bf16())
    assert set(load_output(tmp_path / "out")) == WRITTEN
    assert open_checkpoint(tmp_path / "out").format == "safetensors"


def test_environment_is_part_of_the_verification(source: Path, tmp_path: Path) -> None:
    # The engine no longer reads the stream variable: convert warns, and the
    # output is what the checkpoint declares.
    options = ConvertOptions.from_flags(dtype="bfloat16", environ={"TOKENSPEED_DFLASH_AUX_STREAM": "bogus"})
    result = convert_checkpoint(source, tmp_path / "out", options)
    assert "STR004" in {f.code for f in result.verification.findings}
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert os.environ.get("TOKENSPEED_DFLASH_AUX_STREAM") != "bogus"
