"""`dspark convert` on MLA EAGLE-3 drafts that ship pre-fused tensors the
engine's loader refuses (`fused_qkv_a_proj_with_mqa`: AttributeError;
`gate_up_proj`: dropped): they are written as the parts the loader builds
them from, in its row order (models/deepseek_v3.py@f4d8ec6e:1740-1744,
1839-1861), streamed like every other tensor. Loaders that take a
pre-fused tensor (Llama EAGLE-3) are left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import dspark.converters.convert as convert_module  # noqa: E402
from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.converters.fused_split import iter_rows  # noqa: E402
from dspark.examples.fabricate import EAGLE3_SCALES, eagle3_config, eagle3_tensors  # noqa: E402
from dspark.schema.errors import CheckpointError, UsageError  # noqa: E402

ATTN = "midlayer.self_attn."
MLP = "midlayer.mlp."
QKV_A = ATTN + "fused_qkv_a_proj_with_mqa.weight"
GATE_UP = MLP + "gate_up_proj.weight"
PARTS = {
    QKV_A: (ATTN + "q_a_proj.weight", ATTN + "kv_a_proj_with_mqa.weight"),
    GATE_UP: (MLP + "gate_proj.weight", MLP + "up_proj.weight"),
}


def fused_mla_draft(out: Path, *, fuse=(QKV_A, GATE_UP), layout: str = "midlayer", fmt: str = "safetensors",
                    config_edit=None) -> dict:
    """A tiny MLA EAGLE-3 draft whose `fuse` parameters are stored pre-fused
    (parts stacked in the engine's order, as examples/fabricate.py's
    `_fuse_qkv_a` does); returns the unfused tensors."""
    config = eagle3_config(EAGLE3_SCALES["tiny-mla"], tap_ids=[2, 4, 5])
    original = eagle3_tensors(config)
    stored = dict(original)
    for fused in fuse:
        stored[fused] = torch.cat([stored.pop(part) for part in PARTS[fused]]).contiguous()
    if layout == "layers.0":
        stored = {("layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n): t for n, t in stored.items()}
    if config_edit:
        config_edit(config)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if fmt == "pt":
        torch.save({"draft_model": stored}, out / "draft.pt")
    else:
        save_file(stored, str(out / "model.safetensors"), metadata={"format": "pt"})
    return original


def served(folder: Path) -> dict:
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}


def same_bits(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("chunk", [
    pytest.param(None, id="whole-chunks"),
    pytest.param(96, id="96-byte-chunks"),  # part boundaries fall inside chunks
])
@pytest.mark.parametrize("layout, fmt", [
    pytest.param("midlayer", "safetensors", id="midlayer-safetensors"),
    pytest.param("layers.0", "safetensors", id="layers0-safetensors"),
    pytest.param("midlayer", "pt", id="midlayer-pt"),
])
def test_pre_fused_mla_tensors_are_split_into_the_parts_bit_for_bit(tmp_path, monkeypatch, layout, fmt, chunk):
    if chunk is not None:
        monkeypatch.setattr(convert_module, "CHUNK_BYTES", chunk)
    source = tmp_path / "src"
    original = fused_mla_draft(source, layout=layout, fmt=fmt)
    before = check_checkpoint(source)
    assert {f.tensor for f in before.findings if f.code == "INV002"} == {QKV_A, GATE_UP}

    out = tmp_path / "out"
    report = convert_checkpoint(source, out)
    written = served(out)
    assert QKV_A not in written and GATE_UP not in written
    for parts in PARTS.values():
        for part in parts:
            assert same_bits(written[part], original[part]), part
    notes = [f for f in report.plan.findings if f.code == "SRC006"]
    assert {f.tensor for f in notes} == {QKV_A, GATE_UP}
    assert report.plan.splits and not any(to == ATTN + "q_a_proj.weight" for _, to in report.plan.renames)
    check = check_checkpoint(out, deep=True, verify_hashes=True)
    assert check.passed(strict=True), [(f.code, f.message) for f in check.findings]


def test_the_split_follows_the_engines_row_order_and_the_config_heights(tmp_path):
    source = tmp_path / "src"
    fused_mla_draft(source)
    out = tmp_path / "out"
    plan = convert_checkpoint(source, out).plan
    rows = {t.name: t.rows for t in plan.tensors if t.rows is not None}
    # q_lora_rank 24; kv_lora_rank 16 + qk_rope_head_dim 4; intermediate_size 48 twice
    assert rows == {
        ATTN + "q_a_proj.weight": (0, 24), ATTN + "kv_a_proj_with_mqa.weight": (24, 44),
        MLP + "gate_proj.weight": (0, 48), MLP + "up_proj.weight": (48, 96),
    }
    assert plan.bytes_in == sum(t.planned.nbytes for t in plan.tensors)  # each fused byte read once per part


def test_convert_cli_says_the_tensor_was_split(tmp_path):
    source = tmp_path / "src"
    fused_mla_draft(source)
    result = subprocess.run([sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "split 2" in result.stdout and "SRC006" in result.stdout
    plan = subprocess.run([sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(tmp_path / "p"),
                           "--plan"], capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0 and f"<- rows 24-43 of {QKV_A}" in plan.stdout


@pytest.mark.parametrize("edit, fields", [
    pytest.param(lambda c: c.update(q_lora_rank=20), "q_lora_rank = 20", id="q_lora_rank"),
    pytest.param(lambda c: c.pop("qk_rope_head_dim"), "qk_rope_head_dim = 64 (absent: the engine's default)",
                 id="qk_rope_head_dim-default"),
])
def test_a_fused_height_the_config_does_not_give_is_refused_with_nothing_written(tmp_path, edit, fields):
    source = tmp_path / "src"
    fused_mla_draft(source, fuse=(QKV_A,), config_edit=edit)
    out = tmp_path / "out"
    with pytest.raises(UsageError) as caught:
        convert_checkpoint(source, out)
    message = caught.value.message
    assert QKV_A in message and "[44, 64]" in message and fields in message
    assert "q_a_proj" in message and "kv_a_proj_with_mqa" in message
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())

    result = subprocess.run([sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(out),
                             "--format", "json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert error["tensor"] == QKV_A and "kv_lora_rank" in error["message"]
    assert not out.exists()


def test_a_wrong_gate_up_height_names_intermediate_size(tmp_path):
    source = tmp_path / "src"
    fused_mla_draft(source, fuse=(GATE_UP,), config_edit=lambda c: c.update(intermediate_size=40))
    with pytest.raises(UsageError) as caught:
        convert_checkpoint(source, tmp_path / "out")
    assert "intermediate_size = 40" in caught.value.message and "80 in all" in caught.value.message
    assert not (tmp_path / "out").exists()


def test_a_fused_tensor_shipped_beside_one_of_its_parts_is_refused(tmp_path):
    source = tmp_path / "src"
    original = fused_mla_draft(source, fuse=(GATE_UP,))
    tensors = {**served(source), MLP + "up_proj.weight": original[MLP + "up_proj.weight"]}
    save_file(tensors, str(source / "model.safetensors"))
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out")
    assert caught.value.code == "INV006" and "up_proj" in caught.value.message




def test_llama_pre_fused_tensors_are_taken_by_the_engine_and_left_alone(tmp_path):
    # The Llama EAGLE-3 loader splits a pre-stacked qkv_proj / gate_up_proj
    # itself (schema/engines/tokenspeed/, fused_accepted=True).
    config = eagle3_config(EAGLE3_SCALES["tiny-llama"], tap_ids=[2, 4, 5])
    tensors = eagle3_tensors(config)
    a = "midlayer.self_attn."
    tensors[a + "qkv_proj.weight"] = torch.cat(
        [tensors.pop(a + p) for p in ("q_proj.weight", "k_proj.weight", "v_proj.weight")]).contiguous()
    source = tmp_path / "src"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(source / "model.safetensors"))
    out = tmp_path / "out"
    report = convert_checkpoint(source, out, ConvertOptions())
    assert not report.plan.splits and "SRC006" not in {f.code for f in report.plan.findings}
    assert same_bits(served(out)[a + "qkv_proj.weight"], tensors[a + "qkv_proj.weight"])


def test_iter_rows_takes_a_byte_range_across_chunk_boundaries():
    data = bytes(range(100))
    chunks = (memoryview(data[i:i + 7]) for i in range(0, 100, 7))
    assert b"".join(bytes(c) for c in iter_rows(chunks, 12, 61)) == data[12:61]
    closed = []

    def stream():
        try:
            for i in range(0, 100, 10):
                yield memoryview(data[i:i + 10])
        finally:
            closed.append(True)

    assert b"".join(bytes(c) for c in iter_rows(stream(), 0, 20)) == data[:20] and closed == [True]
