"""`dspark convert` as a user runs it: exit codes, output, refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # to fabricate drafts, .pt files and DCP folders

from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_draft  # noqa: E402

SERVED = set(tensor_shapes(SCALES["tiny"], skipped=False))


def dspark(*args: str, env: dict | None = None, prelude: str | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter; `prelude` runs first (to hide torch)."""
    if prelude is None:
        command = [sys.executable, "-m", "dspark.cli.main", *args]
    else:
        command = [sys.executable, "-c", f"{prelude}\nimport sys\nfrom dspark.cli.main import main\nsys.argv = ['dspark', *{list(args)!r}]\nmain()"]
    environment = {k: v for k, v in os.environ.items() if k not in ("DSPARK_DEBUG", "TOKENSPEED_DFLASH_AUX_STREAM")}
    environment.update(env or {})
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_draft(tmp_path / "src", dtype="float32")


def test_convert_succeeds_and_says_what_it_did(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--dtype", "bfloat16")
    assert result.returncode == 0, result.stderr
    assert "converted" in result.stdout and "F32->BF16" in result.stdout and "dspark check passes" in result.stdout
    assert result.stderr == ""
    check = dspark("check", str(tmp_path / "out"), "--verify")
    assert check.returncode == 0, check.stdout


def test_json_summary_is_data(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--dtype", "bfloat16", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["passed"] is True
    # the default engine, TokenSpeed 0.1.1, loads embed_tokens at --pipeline-parallel-size > 1: kept
    assert summary["tensors_written"] == len(SERVED) + 1
    assert summary["casts"]["F32->BF16"]["tensors"] == len(SERVED) + 1
    assert {d["served_name"] for d in summary["dropped"]} == {"confidence_head.proj.weight", "confidence_head.proj.bias"}
    assert [f["name"] for f in summary["files"]] == ["config.json", "dspark-manifest.json", "model.safetensors"]
    assert summary["verification"]["counts"]["error"] == 0


def test_quiet_prints_nothing_on_success(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--quiet")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_plan_prints_renames_drops_casts_and_shards_and_writes_nothing(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--dtype", "bfloat16", "--max-shard-size", "20KB", "--plan")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out").exists()
    text = result.stdout
    assert "<- model.layers.1.mlp.up_proj.weight" in text  # a rename
    assert "model.embed_tokens.weight" in text and "skipped by the serving loader" in text  # a drop
    assert "F32->BF16" in text  # a cast
    assert "model-00001-of-0000" in text  # shards
    assert "OK" in text


def test_plan_as_json(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--plan", "--format", "json")
    plan = json.loads(result.stdout)
    assert result.returncode == 0 and plan["passed"] is True
    assert {t["name"] for t in plan["tensors"]} == SERVED | {"embed_tokens.weight"}
    assert plan["dtype"] == "keep" and not plan["casts"]


def test_plan_of_a_failing_draft_exits_1(tmp_path: Path) -> None:
    source = write_draft(tmp_path / "src", defect="missing-layer")
    result = dspark("convert", str(source), str(tmp_path / "out"), "--plan")
    assert result.returncode == 1
    assert "INV001" in result.stdout and "WOULD FAIL" in result.stdout


def test_a_failing_draft_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    source = write_draft(tmp_path / "src", defect="fc-norm-declared-not-shipped")
    result = dspark("convert", str(source), str(tmp_path / "out"))
    assert result.returncode == 1
    assert "FCN001" in result.stderr and "Nothing was written" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "case,args_for,fragment",
    [
        ("missing-source", lambda s, t: [str(t / "nope"), str(t / "out")], "no such file"),
        ("existing-destination", lambda s, t: [str(s), str(t / "existing")], "--force"),
        ("inside-source", lambda s, t: [str(s), str(s / "out")], "inside the input"),
        ("bad-shard-size", lambda s, t: [str(s), str(t / "out"), "--max-shard-size", "lots"], "not a size"),
        ("missing-config-file", lambda s, t: [str(s), str(t / "out"), "--config", str(t / "none.json")], "no such file"),
    ],
)
def test_usage_errors_exit_2(source: Path, tmp_path: Path, case: str, args_for, fragment: str) -> None:
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing" / "notes.txt").write_text("an empty folder is written into; this one is not empty")
    result = dspark("convert", *args_for(source, tmp_path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert fragment in result.stderr and "Traceback" not in result.stderr


def test_an_unknown_dtype_is_a_usage_error(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--dtype", "int8")
    assert result.returncode == 2


def test_errors_come_as_json_when_asked(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path), "--format", "json")
    document = json.loads(result.stdout)
    assert result.returncode == 2 and document["exit_code"] == 2
    assert document["error"]["type"] == "UsageError"


def test_force_replaces_an_earlier_conversion(source: Path, tmp_path: Path) -> None:
    assert dspark("convert", str(source), str(tmp_path / "out"), "--dtype", "float32").returncode == 0
    result = dspark("convert", str(source), str(tmp_path / "out"), "--force")
    assert result.returncode == 0, result.stderr


def test_force_refuses_a_folder_dspark_did_not_write_with_exit_2(source: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "config.json").write_text("{}")
    (project / "notes.txt").write_text("notes")
    result = dspark("convert", str(source), str(project), "--force")
    assert result.returncode == 2
    assert "would delete .git/, config.json, notes.txt, src/" in " ".join(result.stderr.split())
    assert sorted(p.name for p in project.iterdir()) == [".git", "config.json", "notes.txt", "src"]


def _write_pt(folder: Path, obj) -> Path:
    folder.mkdir(parents=True)
    torch.save(obj, folder / "draft.pt")
    (folder / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
    return folder / "draft.pt"


class _Shell:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pt_with_a_code_payload_exits_1_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "PAYLOAD_RAN"
    tensors = make_tensors(tensor_shapes(SCALES["tiny"]), dtype="float32")
    path = _write_pt(tmp_path / "ckpt", {"state_dict": tensors, "callback": _Shell(str(marker))})
    result = dspark("convert", str(path), str(tmp_path / "out"))
    assert result.returncode == 1
    assert "refusing to load" in result.stderr and "draft.pt" in result.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_pt_state_dict_converts(tmp_path: Path) -> None:
    tensors = make_tensors(tensor_shapes(SCALES["tiny"]), dtype="float32")
    path = _write_pt(tmp_path / "ckpt", {"draft_model." + k: v for k, v in tensors.items()})
    result = dspark("convert", str(path), str(tmp_path / "out"), "--dtype", "bfloat16", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["source_format"] == "pt"


_HIDE_TORCH = "import sys\nsys.modules['torch'] = None  # as if the torch extra were not installed"


def test_a_pt_input_without_torch_exits_2_naming_the_extra(tmp_path: Path) -> None:
    path = _write_pt(tmp_path / "ckpt", {"w": torch.ones(2)})
    result = dspark("convert", str(path), str(tmp_path / "out"), prelude=_HIDE_TORCH)
    assert result.returncode == 2, result.stderr
    assert "dspark[torch]" in result.stderr and "PyTorch" in result.stderr


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_dcp_input_converts_and_checks_without_torch(tmp_path: Path) -> None:
    """DCP metadata and tensor chunks are read in place: torch saves the
    folder here, but the dspark processes run with torch hidden."""
    import torch.distributed.checkpoint as dcp

    tensors = make_tensors(tensor_shapes(SCALES["tiny"]), dtype="bfloat16")
    model = tmp_path / "run" / "checkpoints" / "iter_0000002" / "model"
    model.mkdir(parents=True)
    dcp.save({"model_state": {"model": {"draft_model": tensors}}}, checkpoint_id=str(model), no_dist=True)
    (model.parent / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
    result = dspark("convert", str(tmp_path / "run"), str(tmp_path / "out"), prelude=_HIDE_TORCH)
    assert result.returncode == 0, result.stderr
    result = dspark("check", str(tmp_path / "run"), "--deep", "--contents", prelude=_HIDE_TORCH)
    assert result.returncode == 0, result.stdout + result.stderr


def test_safetensors_input_converts_without_torch(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), "--dtype", "bfloat16", prelude=_HIDE_TORCH)
    assert result.returncode == 0, result.stderr


_SMALL_FILES_ONLY = (
    "import resource, signal\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write then fails with EFBIG\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))"
)


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXFSZ"), reason="needs POSIX file-size limits")
def test_a_write_error_exits_2_and_leaves_nothing(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "out"), prelude=_SMALL_FILES_ONLY)
    assert result.returncode == 2, result.stderr
    assert "File too large" in result.stderr and "nothing was written" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_cli_default_shard_size_is_the_library_default() -> None:
    from dspark.cli.convert import DEFAULT_MAX_SHARD_SIZE as cli_default
    from dspark.converters.convert import DEFAULT_MAX_SHARD_SIZE as library_default

    assert cli_default == library_default


def test_convert_writes_and_verifies_for_the_engine_named(source: Path, tmp_path: Path) -> None:
    # TokenSpeed main's K3 DSpark model has no fc_norm: an fc_norm draft
    # cannot be made servable there, and convert says so instead of writing it.
    result = dspark("convert", str(source), str(tmp_path / "main"), "--engine", "tokenspeed@main")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ENG001" in result.stdout + result.stderr and "tokenspeed@main" in result.stdout + result.stderr
    assert not (tmp_path / "main").exists()
    result = dspark("convert", str(source), str(tmp_path / "pr"), "--engine", "tokenspeed@pr1031")
    assert result.returncode == 0, result.stdout + result.stderr
    assert dspark("convert", str(source), str(tmp_path / "x"), "--engine", "trt-llm").returncode == 2
    # vLLM's K3 DSpark model has no fc_norm either (vllm/models/kimi_k3/nvidia/dspark_mla.py:134-208@vllm==0.33.0).
    assert dspark("convert", str(source), str(tmp_path / "x"), "--engine", "vllm").returncode == 1


def test_convert_for_several_engines_says_which_one_a_layout_fails(source: Path, tmp_path: Path) -> None:
    result = dspark("convert", str(source), str(tmp_path / "both"), "--engine", "tokenspeed@pr1031,tokenspeed@main")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ENG001 [tokenspeed@main]" in result.stdout + result.stderr
    assert not (tmp_path / "both").exists()
