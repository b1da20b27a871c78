"""Every layout TorchSpec writes, fabricated with torch itself, opened by
`dspark check` and `dspark convert`.

* the trainer's DCP folders, keys `model_state.model.draft_model.<name>`,
  inside a run's output folder (`config.yaml`, `checkpoints/`,
  `latest_checkpointed_iteration.txt`, `iter_NNNNNNN/{model,optimizer,
  lr_scheduler}/`, `rng.pt`, `meta.json`);
* `tools/convert_to_hf.py` output, native (`midlayer.*`) and `--vllm`
  (`layers.0.*`), and for a DFlash draft;
* `scripts/tools/extract_dflash_checkpoint.py`'s single `.pt` (no config);
* `Trainer.save_draft_model_for_serving`'s `pytorch_model.bin` + config.json.

Layouts as read from lightseekorg/TorchSpec at 6f21829.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from safetensors.torch import save_file  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.converters.readers import open_checkpoint  # noqa: E402
from dspark.converters.layouts.omegaconf_yaml import read_yaml_key  # noqa: E402
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes  # noqa: E402
from dspark.schema.errors import CheckpointError, UsageError  # noqa: E402
from dspark.schema.families import DFLASH_GQA  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

SPEC = SCALES["tiny"]


def k3_draft(seed: int = 0) -> dict:
    """The tiny K3 draft as TorchSpec's training module holds it: bf16 (the
    trainer casts the draft), the frozen embedding, the confidence head and
    the vocab maps (t2d bool [vocab], d2t int64 [draft vocab])."""
    tensors = make_tensors(tensor_shapes(SPEC), dtype="bfloat16", seed=seed)
    tensors["t2d"] = torch.ones(SPEC.vocab_size, dtype=torch.bool)
    tensors["d2t"] = torch.arange(SPEC.vocab_size, dtype=torch.int64) % 7
    return tensors


def save_iteration(checkpoints: Path, step_id: int, draft: dict, *, optimizer_beside: bool = False) -> Path:
    """One `iter_NNNNNNN/` as TorchSpec's `checkpoint.save` writes it."""
    iteration = checkpoints / f"iter_{step_id:07d}"
    trainable = {k: v for k, v in draft.items() if k not in ("embed_tokens.weight", "t2d", "d2t")}
    optim_state = {
        "optim": {
            "state": {str(i): {"step": torch.tensor(float(step_id)), "exp_avg": torch.zeros(v.shape),
                               "exp_avg_sq": torch.zeros(v.shape)} for i, v in enumerate(list(trainable.values())[:3])},
            "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.95), "params": [0, 1, 2]}],
        },
        "fp32_params": {str(i): v.float() for i, v in enumerate(list(trainable.values())[:3])},
    }
    state = {"model_state": {"model": {"draft_model": draft}}}
    if optimizer_beside:
        state["optim_state"] = optim_state
    dcp.save(state, checkpoint_id=str(iteration / "model"), no_dist=True)
    dcp.save({"optim_state": optim_state}, checkpoint_id=str(iteration / "optimizer"), no_dist=True)
    dcp.save({"lr_scheduler_state": {"lr_scheduler": {"last_epoch": step_id, "base_lrs": [1e-4]}}},
             checkpoint_id=str(iteration / "lr_scheduler"), no_dist=True)
    torch.save({"torch": torch.get_rng_state()}, iteration / "rng.pt")
    (iteration / "meta.json").write_text(json.dumps({"iteration": step_id, "step": step_id - 1}))
    return iteration


RUN_CONFIG_YAML = """\
model:
  target_model_path: moonshotai/Kimi-K3
  trust_remote_code: true
  draft_model_config: {draft_config}
  embedding_key: model.embed_tokens.weight
dataset:
  train_data_path: ../examples/data/sample_conversations.jsonl
  eval_data_path: null
training:
  learning_rate: 0.0006
  dflash_block_size: 16
output_dir: {output_dir}
"""


def make_run(
    root: Path,
    steps: tuple[int, ...] = (1001, 2001),
    *,
    latest: str | None = "2001",
    draft_config_entry: str | None = None,
    optimizer_beside: bool = True,
) -> Path:
    """A TorchSpec run output folder; iteration N holds the draft made
    with seed N, so a test can tell which was read."""
    checkpoints = root / "checkpoints"
    for step_id in steps:
        save_iteration(checkpoints, step_id, k3_draft(seed=step_id), optimizer_beside=optimizer_beside)
    if latest is not None:
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(latest)
    if draft_config_entry is not None:
        (root / "config.yaml").write_text(RUN_CONFIG_YAML.format(draft_config=draft_config_entry, output_dir=root))
    return root


def write_k3_config(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(draft_config(SPEC), indent=2))
    return path


def dspark(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dspark.cli.main", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def codes(report) -> list[str]:
    return sorted(f.code for f in report.findings)


# --------------------------------------------------------------------------
# The trainer's DCP keys


def test_trainer_keys_lose_every_wrapper_and_keep_the_vocab_maps(tmp_path: Path) -> None:
    iteration = save_iteration(tmp_path / "checkpoints", 7, k3_draft(), optimizer_beside=True)
    write_k3_config(iteration / "config.json")
    checkpoint = open_checkpoint(iteration)
    served = {e.served_name for e in checkpoint.entries}
    assert served == set(k3_draft())  # 26 + the 25 the old reader missed, t2d and d2t included
    assert all(e.stored_name == "model_state.model.draft_model." + e.served_name for e in checkpoint.entries)
    dtypes = {e.served_name: e.dtype for e in checkpoint.entries}
    assert (dtypes["t2d"], dtypes["d2t"], dtypes["context_proj.weight"]) == ("BOOL", "I64", "BF16")
    [left] = [f for f in checkpoint.findings if f.code == "SRC002"]
    assert left.detail["names"] and all(n.startswith("optim_state.") for n in left.detail["names"])
    assert "optim_state.fp32_params.0" in left.detail["names"]
    assert "optim_state.optim.param_groups.0.lr" in left.detail["names"]  # a non-tensor entry


def test_the_vocab_maps_read_back_exactly(tmp_path: Path) -> None:
    iteration = save_iteration(tmp_path / "checkpoints", 7, k3_draft())
    checkpoint = open_checkpoint(iteration)
    for name in ("t2d", "d2t", "context_proj.weight"):
        entry = checkpoint.entry(name)
        assert checkpoint.reader.read_raw(entry) == k3_draft()[name].view(torch.uint8).numpy().tobytes(), name


# --------------------------------------------------------------------------
# The run's output folder


@pytest.mark.parametrize("given", ["run", "checkpoints"])
def test_a_run_folder_reads_the_iteration_the_marker_names(tmp_path: Path, given: str) -> None:
    run = make_run(tmp_path / "run", steps=(1001, 2001, 3001), latest="2001")
    write_k3_config(run / "config.json")
    checkpoint = open_checkpoint(run if given == "run" else run / "checkpoints")
    assert checkpoint.root == run / "checkpoints" / "iter_0002001" / "model"
    [note] = [f for f in checkpoint.findings if f.code == "SRC001"]
    assert "iter_0002001" in note.message and "latest_checkpointed_iteration.txt names" in note.message
    assert "iter_0003001 is also here" in note.message
    assert note.detail["picked"] == "iter_0002001" and note.detail["latest_marker"] == 2001
    entry = checkpoint.entry("final_norm.weight")
    assert checkpoint.reader.read_raw(entry) == k3_draft(seed=2001)["final_norm.weight"].view(torch.uint8).numpy().tobytes()
    assert checkpoint.config_path == run / "config.json"


@pytest.mark.parametrize(
    "marker,reason",
    [(None, "there is no latest_checkpointed_iteration.txt"), ("4001", "names 4001, which is not here"),
     ("soon", "not an iteration number")],
    ids=["no-marker", "marker-points-nowhere", "marker-garbled"],
)
def test_without_a_usable_marker_the_highest_iteration_is_read(tmp_path: Path, marker, reason) -> None:
    run = make_run(tmp_path / "run", steps=(1001, 3001), latest=marker)
    checkpoint = open_checkpoint(run)
    assert checkpoint.root.parent.name == "iter_0003001"
    [note] = [f for f in checkpoint.findings if f.code == "SRC001"]
    assert "the highest iteration" in note.message and reason in note.message


def test_the_best_iteration_is_mentioned_when_it_differs(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=(1001, 2001), latest="2001")
    (run / "checkpoints" / "best_checkpointed_iteration.txt").write_text("1001")
    [note] = [f for f in open_checkpoint(run).findings if f.code == "SRC001"]
    assert "the best by eval is iter_0001001" in note.message and note.detail["best_marker"] == 1001
    (run / "checkpoints" / "best_checkpointed_iteration.txt").write_text("501")  # rotated away
    [note] = [f for f in open_checkpoint(run).findings if f.code == "SRC001"]
    assert "names iteration 501, which is no longer here" in note.message


def test_a_run_folder_without_iterations_is_a_usage_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1001")
    with pytest.raises(UsageError) as caught:
        open_checkpoint(run)
    assert "checkpoints holds no iter_N/model/.metadata" in caught.value.message


# --------------------------------------------------------------------------
# The draft config: beside the weights, up the tree, or named in config.yaml


@pytest.mark.parametrize("entry", ["relative", "absolute", "quoted"])
def test_the_draft_config_is_found_through_config_yaml(tmp_path: Path, entry: str) -> None:
    config = write_k3_config(tmp_path / "run" / "configs" / "draft_models" / "k3_dspark.json")
    value = {"relative": "configs/draft_models/k3_dspark.json", "absolute": str(config),
             "quoted": "'configs/draft_models/k3_dspark.json'"}[entry]
    run = make_run(tmp_path / "run", steps=(1001,), latest="1001", draft_config_entry=value)
    checkpoint = open_checkpoint(run)
    assert checkpoint.config_path.resolve() == config.resolve()
    assert checkpoint.family.name == "k3_dspark" and not checkpoint.config_findings
    assert checkpoint.metadata["config_from"] == "config.yaml: model.draft_model_config"


def test_a_config_json_up_the_tree_wins_over_config_yaml(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=(1001,), latest="1001", draft_config_entry="elsewhere.json")
    beside = write_k3_config(run / "checkpoints" / "iter_0001001" / "config.json")
    assert open_checkpoint(run).config_path == beside


@pytest.mark.parametrize(
    "entry,says",
    [
        ("null", "sets no model.draft_model_config: TorchSpec then generates the draft config"),
        ("configs/draft_models/gone.json", "names configs/draft_models/gone.json"),
        ("|\n    multi-line", "could not be parsed for model.draft_model_config"),
        (None, "there is no config.yaml"),
    ],
    ids=["null", "missing-file", "unreadable-yaml", "no-yaml"],
)
def test_without_a_draft_config_the_finding_says_why_and_asks_for_config(tmp_path: Path, entry, says: str) -> None:
    run = make_run(tmp_path / "run", steps=(1001,), latest="1001", draft_config_entry=entry)
    checkpoint = open_checkpoint(run)
    assert checkpoint.config is None
    [finding] = checkpoint.config_findings
    assert finding.code == "CFG001" and says in finding.message and "--config" in finding.message
    with pytest.raises(CheckpointError) as caught:
        convert_checkpoint(run, tmp_path / "out", ConvertOptions.from_flags())
    assert caught.value.code == "CFG001" and says in caught.value.message and "--config" in caught.value.hint
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------
# convert RUN OUT, then check --deep


@pytest.mark.parametrize("how", ["--config", "config.yaml"])
def test_a_run_converts_to_a_folder_that_passes_check_deep(tmp_path: Path, how: str) -> None:
    config = write_k3_config(tmp_path / "drafts" / "k3_dspark.json")
    run = make_run(tmp_path / "run", draft_config_entry=str(config) if how == "config.yaml" else None)
    flags = ["--config", str(config)] if how == "--config" else []
    result = dspark("convert", str(run), str(tmp_path / "out"), *flags, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["source_format"] == "dcp"
    result = dspark("check", str(tmp_path / "out"), "--deep", "--format", "json")
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["passed"] and not [f for f in report["findings"] if f["severity"] != "info"]
    # the converted weights are iteration 2001's, bit for bit
    from safetensors.torch import load_file

    written = load_file(tmp_path / "out" / "model.safetensors")
    assert torch.equal(written["context_proj.weight"], k3_draft(seed=2001)["context_proj.weight"])
    assert "t2d" not in written and "d2t" not in written  # training-only: left behind on convert


def test_check_opens_a_run_folder_and_judges_the_draft(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    write_k3_config(run / "config.json")
    report = check_checkpoint(run, deep=True)
    # Every served tensor is found (no INV001). The engine cannot open a run
    # (SRV001); the vocab maps convert leaves behind are notes (SRC002).
    assert "INV001" not in codes(report)
    assert [f.code for f in report.errors] == ["SRV001"]
    assert {"t2d", "d2t"} <= {f.tensor for f in report.findings if f.code == "SRC002"}
    assert check_checkpoint(run, deep=True, verdict="contents").passed()
    assert {"SRC001", "SRC002"} <= set(codes(report))


# --------------------------------------------------------------------------
# The exporters' outputs


def dflash_config() -> dict:
    """A TorchSpec DFlash draft config (torchspec/config/dflash_draft_config.json's keys)."""
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "dflash", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "rope_theta": 1000000.0, "num_target_layers": 3,
        "target_hidden_size": 80, "target_num_hidden_layers": 24, "target_layer_ids": [1, 11, 22],
        "mask_token_id": 127, "tie_word_embeddings": False,
    }


def dflash_training_state() -> dict:
    """DFlashDraftModel's state dict: context_proj / context_norm /
    final_norm, per-layer GQA attention and MLP, the frozen embedding."""
    config = dflash_config()
    expected, _ = DFLASH_GQA.expected_tensors(DFLASH_GQA.resolve_dims(config), {"fc_norm": False})
    training = {"fc.weight": "context_proj.weight", "hidden_norm.weight": "context_norm.weight",
                "norm.weight": "final_norm.weight"}
    generator = torch.Generator().manual_seed(3)
    tensors = {}
    for name, want in expected.items():
        values = torch.randn(want.shape, generator=generator) * 0.02
        if want.role == "norm" or want.role == "context_norm":
            values += 1.0
        tensors[training.get(name, name)] = values.to(torch.bfloat16)
    tensors["embed_tokens.weight"] = torch.zeros(config["vocab_size"], config["hidden_size"], dtype=torch.bfloat16)
    return tensors


def eagle3_tensors(*, vllm: bool) -> dict:
    """An EAGLE-3 draft as convert_to_hf.py exports it."""
    layer = "layers.0." if vllm else "midlayer."
    h = 32
    tensors = {
        "embed_tokens.weight": torch.zeros(96, h), "fc.weight": torch.zeros(h, 3 * h), "norm.weight": torch.ones(h),
        "lm_head.weight": torch.zeros(96, h),
        layer + "self_attn.q_proj.weight": torch.zeros(h, 2 * h), layer + "hidden_norm.weight": torch.ones(h),
    }
    return {k: v.to(torch.bfloat16) for k, v in tensors.items()}


def write_convert_to_hf_output(folder: Path, tensors: dict, config: dict) -> Path:
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"torchspec_version": "0.1.0"})
    exported = {**config, "draft_vocab_size": config.get("vocab_size"), "_torchspec_version": "0.1.0",
                "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(exported, indent=2))
    return folder


@pytest.mark.parametrize("vllm", [False, True], ids=["native-midlayer", "vllm-layers0"])
def test_convert_to_hf_eagle3_output_opens_and_gets_a_verdict(tmp_path: Path, vllm: bool) -> None:
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 32,
              "vocab_size": 96}
    folder = write_convert_to_hf_output(tmp_path / "iter_0001001_hf", eagle3_tensors(vllm=vllm), config)
    checkpoint = open_checkpoint(folder)
    # Both exports name the one decoder layer as the engine does: midlayer.
    assert "midlayer.self_attn.q_proj.weight" in {e.served_name for e in checkpoint.entries}
    # A verdict on the EAGLE-3 family (this toy config leaves num_hidden_layers
    # to LlamaConfig's default of 32, which the engine refuses), not "unreadable".
    result = dspark("check", str(folder))
    assert result.returncode == 1 and "eagle3_llama" in result.stdout, result.stdout + result.stderr
    assert "one layer" in result.stdout


def test_convert_to_hf_dflash_output_converts_and_passes(tmp_path: Path) -> None:
    folder = write_convert_to_hf_output(tmp_path / "iter_0001001_hf", dflash_training_state(), dflash_config())
    result = dspark("convert", str(folder), str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    result = dspark("check", str(tmp_path / "out"), "--deep")
    assert result.returncode == 0, result.stdout


def test_extract_dflash_pt_needs_config_and_says_so(tmp_path: Path) -> None:
    pt = tmp_path / "dflash_draft.pt"
    torch.save(dflash_training_state(), pt)
    result = dspark("convert", str(pt), str(tmp_path / "out"))
    assert result.returncode == 1
    assert "--config" in result.stderr and "extract_dflash_checkpoint.py writes none" in result.stderr
    assert not (tmp_path / "out").exists()

    config = tmp_path / "dflash_draft_config.json"
    config.write_text(json.dumps(dflash_config()))
    result = dspark("convert", str(pt), str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    result = dspark("check", str(tmp_path / "out"), "--deep")
    assert result.returncode == 0, result.stdout


def test_save_draft_model_for_serving_output_converts_and_passes(tmp_path: Path) -> None:
    folder = tmp_path / "scratch_draft_model"
    folder.mkdir()
    torch.save(dflash_training_state(), folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(dflash_config()))
    checkpoint = open_checkpoint(folder)
    assert checkpoint.format == "pt" and checkpoint.family.name == "dflash_gqa"
    result = dspark("convert", str(folder), str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    result = dspark("check", str(tmp_path / "out"), "--deep")
    assert result.returncode == 0, result.stdout


def test_a_dflash_dcp_run_converts_and_passes(tmp_path: Path) -> None:
    """The DFlash trainer's DCP layout (same wrapper keys)."""
    model = tmp_path / "run" / "checkpoints" / "iter_0000101" / "model"
    dcp.save({"model_state": {"model": {"draft_model": dflash_training_state()}}}, checkpoint_id=str(model),
             no_dist=True)
    config = tmp_path / "dflash_draft_config.json"
    config.write_text(json.dumps(dflash_config()))
    result = dspark("convert", str(tmp_path / "run"), str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    result = dspark("check", str(tmp_path / "out"), "--deep")
    assert result.returncode == 0, result.stdout


# --------------------------------------------------------------------------
# The config.yaml line reader


OMEGACONF_STYLE = """\
model:
  target_model_path: Qwen/Qwen3-8B
  trust_remote_code: true
  draft_model_config: torchspec/config/dflash_draft_config.json
  embedding_key: model.embed_tokens.weight
dataset:
  draft_model_config: not/this/one.json
training:
  model:
    draft_model_config: nor/this.json
"""


@pytest.mark.parametrize(
    "text,value",
    [
        pytest.param(OMEGACONF_STYLE, "torchspec/config/dflash_draft_config.json", id="omegaconf"),
        pytest.param("model:\n  a:\n    draft_model_config: deeper.json\n  draft_model_config: x.json # a note\n",
                     "x.json", id="deeper-keys-and-comment"),
        pytest.param("# run\n---\nmodel:\n    draft_model_config: 'it''s.json'\n", "it's.json", id="single-quoted"),
        pytest.param('model:\n  draft_model_config: "a\\"b.json"\n', 'a"b.json', id="double-quoted"),
        pytest.param("model:\n  draft_model_config: null\n", None, id="null"),
        pytest.param("model:\n  draft_model_config: ~\n", None, id="tilde"),
        pytest.param("model:\n  draft_model_config:\nother: 1\n", None, id="empty"),
    ],
)
def test_the_yaml_reader_reads_the_one_key(text: str, value) -> None:
    assert read_yaml_key(text, "model", "draft_model_config") == value


@pytest.mark.parametrize(
    "text,reason",
    [
        pytest.param("model: {draft_model_config: x.json}\n", "flow style", id="flow-section"),
        pytest.param("model:\n  draft_model_config: [x.json]\n", "is not read", id="flow-value"),
        pytest.param("model:\n  draft_model_config: |\n    x.json\n", "multi-line", id="block-scalar"),
        pytest.param("model:\n  draft_model_config: x\n    .json\n", "multi-line", id="continued"),
        pytest.param("model:\n  draft_model_config: *anchor\n", "is not read", id="alias"),
        pytest.param("model:\n\tdraft_model_config: x.json\n", "tab", id="tab"),
        pytest.param("model:\n  draft_model_config: a\n  draft_model_config: b\n", "twice", id="duplicate-key"),
        pytest.param("model:\n  a: 1\nmodel:\n  draft_model_config: b\n", "twice", id="duplicate-section"),
        pytest.param("model:\n    a: 1\n  draft_model_config: b\n", "indented less", id="ragged"),
        pytest.param("model:\n  draft_model_config: 'open\n", "unterminated", id="unterminated"),
        pytest.param("model:\n  target_model_path: x\n", "no model.draft_model_config", id="absent"),
        pytest.param("training:\n  lr: 1\n", "no model section", id="no-section"),
    ],
)
def test_the_yaml_reader_refuses_what_it_cannot_read_for_sure(text: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        read_yaml_key(text, "model", "draft_model_config")
    assert reason in str(caught.value)
