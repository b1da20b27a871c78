"""`dspark convert` judges every value it writes: NaN/Inf in the input and
values the cast makes non-finite are refused, as are lost (all-zero)
weights; nothing reaches the destination. Sources are real safetensors and
.pt files with the bad values put in by torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors  # noqa: E402
from dspark.schema.errors import CheckpointError  # noqa: E402

SPEC = SCALES["tiny"]


def fabricate(folder: Path, *, dtype: str = "float32", change=None, as_pt: bool = False) -> Path:
    tensors = make_tensors(tensor_shapes(SPEC), dtype=dtype, seed=4)
    if change is not None:
        change(tensors)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(draft_config(SPEC)))
    if as_pt:
        torch.save({"model." + n: t for n, t in tensors.items()}, folder / "draft.pt")
        return folder / "draft.pt"
    write_safetensors(folder, {"model." + n: t for n, t in tensors.items()})
    return folder


def poke(name: str, value: float, count: int = 1):
    def change(tensors: dict) -> None:
        flat = tensors[name].view(-1)
        flat[3:3 + count] = value
    return change


def refused(source: Path, destination: Path, dtype: str) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, destination, ConvertOptions.from_flags(dtype=dtype))
    assert not destination.exists()
    assert not [p.name for p in destination.parent.iterdir() if ".dspark-" in p.name]  # no temporary left
    assert "Nothing was written" in caught.value.message
    return caught.value


def findings_of(error: CheckpointError) -> list[tuple[str, str, dict]]:
    return [(f["code"], f["tensor"], f["detail"]) for f in error.detail["findings"]]


@pytest.mark.parametrize("dtype", ["keep", "bfloat16", "float16"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_nonfinite_input_is_refused_naming_the_tensor_and_count(tmp_path: Path, dtype: str, value: float) -> None:
    source = fabricate(tmp_path / "src", change=poke("layers.0.mlp.down_proj.weight", value, count=3))
    error = refused(source, tmp_path / "out", dtype)
    assert findings_of(error) == [("PAY001", "layers.0.mlp.down_proj.weight", {"nonfinite": 3})]
    assert error.code == "PAY001" and "3 NaN/Inf" in error.message
    assert "model.safetensors: layers.0.mlp.down_proj.weight" in error.message


def test_a_finite_bf16_value_the_float16_cast_makes_inf_is_refused(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src", dtype="bfloat16", change=poke("context_proj.weight", 1e6, count=2))
    error = refused(source, tmp_path / "out", "float16")
    assert findings_of(error) == [
        ("CNV001", "context_proj.weight", {"made_nonfinite": 2, "source_dtype": "BF16", "dtype": "F16"}),
    ]
    assert "turns 2 finite value(s) into Inf" in error.message and "float16" in error.message
    assert "bfloat16" in error.hint
    # the same value is fine where it fits
    convert_checkpoint(source, tmp_path / "f32", ConvertOptions.from_flags(dtype="float32"))
    convert_checkpoint(source, tmp_path / "bf16", ConvertOptions.from_flags(dtype="bfloat16"))


def test_float32_max_rounds_to_inf_in_bfloat16_and_is_refused(tmp_path: Path) -> None:
    largest = torch.finfo(torch.float32).max
    source = fabricate(tmp_path / "src", change=poke("layers.1.self_attn.o_proj.weight", largest))
    error = refused(source, tmp_path / "out", "bfloat16")
    assert [(code, tensor) for code, tensor, _ in findings_of(error)] == [("CNV001", "layers.1.self_attn.o_proj.weight")]
    assert "--dtype keep" in error.hint and "--dtype bfloat16" not in error.hint


def test_input_nan_and_cast_overflow_in_one_tensor_are_told_apart(tmp_path: Path) -> None:
    def change(tensors: dict) -> None:
        poke("context_proj.weight", float("nan"))(tensors)
        tensors["context_proj.weight"].view(-1)[10:14] = 1e5
    source = fabricate(tmp_path / "src", change=change)
    error = refused(source, tmp_path / "out", "float16")
    assert sorted((code, detail.get("nonfinite") or detail.get("made_nonfinite")) for code, _, detail in findings_of(error)) == [
        ("CNV001", 4), ("PAY001", 1),
    ]


@pytest.mark.parametrize(
    "name,code",
    [
        ("context_proj.weight", "PAY004"),
        ("layers.1.mlp.up_proj.weight", "PAY004"),
        ("layers.0.input_layernorm.weight", "PAY002"),
    ],
)
def test_lost_weights_are_refused(tmp_path: Path, name: str, code: str) -> None:
    def zero(tensors: dict) -> None:
        tensors[name] = torch.zeros_like(tensors[name])
    source = fabricate(tmp_path / "src", change=zero)
    error = refused(source, tmp_path / "out", "bfloat16")
    assert [(c, t) for c, t, _ in findings_of(error)] == [(code, name)]


def test_a_zero_embedding_is_dropped_not_judged(tmp_path: Path) -> None:
    def zero(tensors: dict) -> None:
        tensors["embed_tokens.weight"] = torch.zeros_like(tensors["embed_tokens.weight"])
    source = fabricate(tmp_path / "src", change=zero)
    options = ConvertOptions.from_flags(dtype="bfloat16", engine="tokenspeed@pr1031")
    report = convert_checkpoint(source, tmp_path / "out", options)
    # 1031's loader skips the embedding at every launch: convert drops it and judges nothing of it
    # (0.1.1 loads it at --pipeline-parallel-size > 1: tests/converters/test_convert_launches.py)
    assert "embed_tokens.weight" in {d.served_name for d in report.plan.dropped}
    assert "embed_tokens.weight" not in {t.name for t in report.plan.tensors}
    assert report.verification.passed() and not report.verification.errors
    assert not [f for f in report.verification.findings if f.tensor == "embed_tokens.weight"]
    manifest = json.loads((tmp_path / "out" / "dspark-manifest.json").read_text())
    assert not [t for t in manifest["tensors"] if "embed_tokens" in t["name"]]


def test_an_identity_fc_norm_converts_with_its_warning(tmp_path: Path) -> None:
    def ones(tensors: dict) -> None:
        tensors["fc_norm.2.weight"] = torch.ones_like(tensors["fc_norm.2.weight"])
    source = fabricate(tmp_path / "src", change=ones)
    report = convert_checkpoint(source, tmp_path / "out", ConvertOptions.from_flags(dtype="bfloat16"))
    assert [(f.code, f.tensor) for f in report.warnings] == [("FCN006", "fc_norm.2.weight")]


def test_a_good_conversion_reports_its_values_as_read(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src")
    report = convert_checkpoint(source, tmp_path / "out", ConvertOptions.from_flags(dtype="bfloat16"))
    verification = report.verification
    assert verification.payloads_read and verification.scanned_bytes == verification.total_bytes
    assert "PAY005" not in {f.code for f in verification.findings}
    # and what convert judged while writing is what check --deep finds
    assert check_checkpoint(tmp_path / "out", deep=True, verify_hashes=True, environ={}).passed(strict=True)


def test_a_pt_input_with_nan_is_refused_too(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src", change=poke("final_norm.weight", float("nan")), as_pt=True)
    error = refused(source, tmp_path / "out", "bfloat16")
    assert findings_of(error) == [("PAY001", "final_norm.weight", {"nonfinite": 1})]


def test_the_cli_exits_1_and_says_which_tensor(tmp_path: Path) -> None:
    source = fabricate(tmp_path / "src", dtype="bfloat16", change=poke("layers.0.mlp.gate_proj.weight", 1e6))
    done = subprocess.run(
        [sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(tmp_path / "out"), "--dtype", "float16"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stderr
    text = " ".join((done.stdout + done.stderr).split())
    assert "CNV001" in text and "layers.0.mlp.gate_proj.weight" in text and "Traceback" not in text
    assert not (tmp_path / "out").exists()
