"""A pre-fused tensor shipped beside its parts (INV008).

TokenSpeed's loaders stack `gate_proj`/`up_proj` (and `q_a_proj`/
`kv_a_proj_with_mqa`, `q/k/v_proj`) into one parameter and also take the
pre-fused name whole, so a draft that ships both has the parameter written
twice and every part's rows hold whichever was read last
(models/kimi_k3_dspark.py@4b9766f6:482-553, models/dflash.py@f4d8ec6e:479-514,
models/llama_eagle3.py@f4d8ec6e:675-719). Files are read in the order the
file system lists them, each with safetensors' `load_file`
(model_loader/loader.py@f4d8ec6e:288-311, weight_utils.py@f4d8ec6e:569-580).
Every case is a real safetensors folder written by the safetensors library.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_eagle3_draft
from dspark.schema.errors import CheckpointError
from dspark.schema.findings import Severity

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

TINY = SCALES["tiny"]
MLP, ATTN = "layers.{n}.mlp.", "layers.{n}.self_attn."


def errors(report) -> Counter:
    return Counter(f.code for f in report.findings if f.severity is Severity.ERROR)


def k3_tensors() -> dict:
    return make_tensors(tensor_shapes(TINY, fc_norm=True), dtype="bfloat16", seed=0)


def write_folder(folder: Path, config: dict, files: dict[str, dict]) -> Path:
    """`files`: file name -> tensors; more than one file gets an index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name, tensors in files.items():
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
    if len(files) > 1:
        weight_map = {t: name for name, tensors in files.items() for t in tensors}
        total = sum(v.numel() * v.element_size() for tensors in files.values() for v in tensors.values())
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return folder


def fused(tensors: dict, parts: tuple[str, ...], whole: str, n: int, *, pop: bool = False, dtype=None):
    stacked = torch.cat([(tensors.pop if pop else tensors.get)(p.format(n=n)) for p in parts]).contiguous()
    tensors[whole.format(n=n)] = stacked if dtype is None else stacked.to(dtype)


GATE_UP = ((MLP + "gate_proj.weight", MLP + "up_proj.weight"), MLP + "gate_up_proj.weight")
QKV_A = ((ATTN + "q_a_proj.weight", ATTN + "kv_a_proj_with_mqa.weight"), ATTN + "fused_qkv_a_proj_with_mqa.weight")


def test_k3_gate_up_beside_its_parts_in_one_file_names_what_is_served(tmp_path):
    # One file, one dtype: name order and storage order agree. The loader reads
    # gate_proj, gate_up_proj, up_proj: gate's rows come from the fused tensor,
    # up's from up_proj.
    tensors = k3_tensors()
    fused(tensors, *GATE_UP, n=0)
    report = check_checkpoint(write_folder(tmp_path / "d", draft_config(TINY), {"model.safetensors": tensors}))
    assert errors(report) == Counter({"INV008": 1})
    [finding] = [f for f in report.findings if f.code == "INV008"]
    assert finding.tensor == "layers.0.mlp.gate_up_proj.weight"
    assert ("gate_proj's rows: the value from model.safetensors (layers.0.mlp.gate_up_proj.weight, read last) "
            "is served") in finding.message
    assert ("up_proj's rows: the value from model.safetensors (layers.0.mlp.up_proj.weight, read last) "
            "is served") in finding.message
    assert [p["served_from"] for p in finding.detail["parts"]] == ["fused", "part"]
    assert "loader.py@f4d8ec6e:288-311" in finding.detail["source"]


def test_k3_fused_qkv_a_beside_its_parts_is_served_from_the_parts(tmp_path):
    # fused_qkv_a_proj_with_mqa sorts before kv_a_proj_with_mqa and q_a_proj.
    tensors = k3_tensors()
    fused(tensors, *QKV_A, n=1)
    report = check_checkpoint(write_folder(tmp_path / "d", draft_config(TINY), {"model.safetensors": tensors}))
    [finding] = [f for f in report.errors]
    assert finding.code == "INV008" and finding.tensor == "layers.1.self_attn.fused_qkv_a_proj_with_mqa.weight"
    assert [p["served_from"] for p in finding.detail["parts"]] == ["part", "part"]


def test_a_fused_tensor_and_its_part_in_two_files_depend_on_file_order(tmp_path):
    tensors = k3_tensors()
    fused(tensors, *GATE_UP, n=0)
    whole = "layers.0.mlp.gate_up_proj.weight"
    other = {whole: tensors.pop(whole)}
    draft = write_folder(tmp_path / "d", draft_config(TINY),
                         {"model-00001-of-00002.safetensors": tensors, "model-00002-of-00002.safetensors": other})
    [finding] = check_checkpoint(draft).errors
    assert finding.code == "INV008" and finding.file == "model-00002-of-00002.safetensors"
    assert finding.message.count("depends on file order") == 2
    assert "the loader does not sort" in finding.message
    assert [p["served_from"] for p in finding.detail["parts"]] == [None, None]


def test_name_order_and_storage_order_that_disagree_leave_it_to_the_safetensors_version(tmp_path):
    # save_file stores wider dtypes first: an fp32 gate_up_proj sits before its
    # bf16 parts though its name sorts after gate_proj.
    tensors = k3_tensors()
    fused(tensors, *GATE_UP, n=0, dtype=torch.float32)
    [finding] = check_checkpoint(write_folder(tmp_path / "d", draft_config(TINY),
                                              {"model.safetensors": tensors})).errors
    assert finding.code == "INV008"
    assert "gate_proj's rows: depends on file order (in model.safetensors name order and storage order" \
        in finding.message
    assert [p["served_from"] for p in finding.detail["parts"]] == [None, "part"]


def test_a_fused_tensor_beside_only_one_part_is_still_a_collision(tmp_path):
    tensors = k3_tensors()
    fused(tensors, *GATE_UP, n=0)
    del tensors["layers.0.mlp.gate_proj.weight"]
    [finding] = check_checkpoint(write_folder(tmp_path / "d", draft_config(TINY),
                                              {"model.safetensors": tensors})).errors
    assert finding.code == "INV008" and [p["name"] for p in finding.detail["parts"]] == ["layers.0.mlp.up_proj.weight"]


def test_every_layer_of_a_gqa_draft_is_named(tmp_path):
    from dspark.schema.families import DFLASH_GQA

    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "dflash_config": {"target_layer_ids": [1, 11, 22], "mask_token_id": 127},
    }
    features = {"markov_head": False, "fc_norm": False, "attention_bias": False}
    expected, _ = DFLASH_GQA.expected_tensors(DFLASH_GQA.resolve_dims(config), features)
    tensors = {name: torch.full(e.shape, 0.5, dtype=torch.bfloat16) for name, e in expected.items()}
    qkv = tuple(ATTN + f"{x}_proj.weight" for x in "qkv")
    for n in range(2):
        fused(tensors, qkv, ATTN + "qkv_proj.weight", n=n)
    report = check_checkpoint(write_folder(tmp_path / "d", config, {"model.safetensors": tensors}))
    assert errors(report) == Counter({"INV008": 2})
    # k_proj < q_proj < qkv_proj < v_proj
    first = next(f for f in report.errors if f.tensor == "layers.0.self_attn.qkv_proj.weight")
    assert [p["served_from"] for p in first.detail["parts"]] == ["fused", "fused", "part"]


def test_llama_eagle3_qkv_beside_its_parts(tmp_path):
    def edit(tensors):
        a = "midlayer.self_attn."
        tensors[a + "qkv_proj.weight"] = torch.cat([tensors[a + f"{x}_proj.weight"] for x in "qkv"]).contiguous()

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", tensor_edit=edit))
    assert errors(report) == Counter({"INV008": 1})


def test_an_mla_pre_fused_tensor_the_loader_never_takes_stays_unexpected(tmp_path):
    # DS3:1740-1747: the MLA EAGLE-3 loader never writes the pre-fused name
    # (fused_accepted False): it is INV002 as on its own, not a collision.
    def edit(tensors):
        m = "midlayer.mlp."
        tensors[m + "gate_up_proj.weight"] = torch.cat([tensors[m + "gate_proj.weight"],
                                                        tensors[m + "up_proj.weight"]]).contiguous()

    report = check_checkpoint(write_eagle3_draft(tmp_path / "d", scale="tiny-mla", tensor_edit=edit))
    assert errors(report) == Counter({"INV002": 1})


def test_convert_refuses_a_fused_tensor_beside_its_parts_and_writes_nothing(tmp_path):
    from dspark.converters.convert import convert_checkpoint

    tensors = k3_tensors()
    fused(tensors, *GATE_UP, n=0)
    source = write_folder(tmp_path / "src", draft_config(TINY), {"model.safetensors": tensors})
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(source, tmp_path / "out")
    assert caught.value.code == "INV008" and "Nothing was written" in caught.value.message
    assert not (tmp_path / "out").exists()
