"""EAGLE-3 drafts from the other trainers: vLLM's `speculators` (config in
its Eagle3SpeculatorConfig shape, `layers.0.*` names) and SpecForge (the
engine's names already; taps under eagle_config; training_state.pt). Each
is fabricated as its trainer writes it, checked as it is (a clear served
verdict), converted, and the output judged by TokenSpeed's loader rules."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.convert import ConvertOptions, convert_checkpoint  # noqa: E402
from dspark.examples.fabricate import EAGLE3_SCALES, eagle3_config, eagle3_tensors, write_eagle3_draft  # noqa: E402
from dspark.schema.engines import DEFAULT_ENGINE  # noqa: E402
from dspark.schema.families import EAGLE3_LLAMA  # noqa: E402

TAPS = [2, 4, 5]
LOADER = DEFAULT_ENGINE.loader_for("eagle3_llama")


def speculators_config(flat: dict, *, taps: list[int] | None = TAPS, model_type: str = "eagle3") -> dict:
    """config.json as speculators' save_pretrained writes it
    (src/speculators/models/eagle3/config.py@c05b95b:27-81, config.py@c05b95b:277-332):
    the layer's transformers config nested, no top-level model_type."""
    layer_keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "hidden_act",
                  "tie_word_embeddings", "rope_theta", "max_position_embeddings", "model_type")
    layer = {k: flat[k] for k in layer_keys}
    layer.update(attention_bias=False, mlp_bias=False, use_cache=True, architectures=None)
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": model_type,
        "speculators_version": "0.3.0",
        "transformer_layer_config": layer,
        "draft_vocab_size": flat["draft_vocab_size"],
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "embed_requires_grad": False,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": taps,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "architectures": ["LlamaForCausalLM"]},
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.56.0",
    }


def write_speculators_draft(out: Path, **config_options) -> Path:
    """A speculators EAGLE-3 save: layers.0.* (with hidden_norm), fc, norm,
    lm_head, the frozen embedding, d2t and t2d (core.py@c05b95b:76-116,
    model.py@c05b95b:54-66)."""
    flat = eagle3_config(EAGLE3_SCALES["tiny-llama"], tap_ids=TAPS)
    tensors = eagle3_tensors(flat)
    tensors = {("layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n): t for n, t in tensors.items()}
    tensors["embed_tokens.weight"] = torch.randn(flat["vocab_size"], flat["hidden_size"]).to(torch.bfloat16)
    tensors["t2d"] = torch.zeros(flat["vocab_size"], dtype=torch.bool)
    out.mkdir(parents=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(speculators_config(flat, **config_options), indent=2))
    return out


def dspark(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dspark.cli.main", *args], capture_output=True, text=True, timeout=120)


def served_names(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        return set(handle.keys())


def assert_tokenspeed_accepts(folder: Path, expected_taps=TAPS) -> dict:
    """The config and names are what TokenSpeed's Llama EAGLE-3 loader
    takes as they are: a model_type its config loader parses, the class it
    registers first, every name one it maps to itself and one the family
    expects."""
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] in LOADER.model_types
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_aux_hidden_state_layer_ids"] == expected_taps
    assert not any(key.startswith("speculators") or key == "transformer_layer_config" for key in config)
    expected, unresolved = EAGLE3_LLAMA.expected_tensors(EAGLE3_LLAMA.resolve_dims(config))
    assert not unresolved
    for name in served_names(folder):
        assert LOADER.engine_name(name) == name, name
        assert name in expected, name
    return config


def test_speculators_folder_gets_srv001_with_the_convert_command(tmp_path):
    source = write_speculators_draft(tmp_path / "spec")
    report = check_checkpoint(source)
    codes = {f.code for f in report.findings}
    assert report.family == "eagle3_llama"
    assert "SRC005" in codes
    layout = [f for f in report.findings if f.code == "SRV001"]
    assert len(layout) == 1 and f"dspark convert {source}" in layout[0].message
    assert "speculators" in layout[0].message
    # the contents are sound: only the layout keeps it from being served
    assert report.verdicts() == {"served": False, "contents": True}, [(f.code, f.message) for f in report.errors]

    result = dspark("check", str(source))
    assert result.returncode == 1 and "SRV001" in result.stdout and "dspark convert" in result.stdout


def test_speculators_folder_converts_to_what_tokenspeed_loads(tmp_path):
    source = write_speculators_draft(tmp_path / "spec")
    out = tmp_path / "served"
    convert_checkpoint(source, out)
    config = assert_tokenspeed_accepts(out, expected_taps=[t - 1 for t in TAPS])
    assert config["draft_vocab_size"] == 40 and config["vocab_size"] == 96
    names = served_names(out)
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "midlayer.hidden_norm.weight",
            "midlayer.self_attn.q_proj.weight"} <= names
    assert "t2d" not in names  # never read by the engine
    report = check_checkpoint(out, deep=True)
    assert report.passed(strict=True), [(f.code, f.message) for f in report.findings]
    assert dspark("check", str(out), "--deep", "--strict").returncode == 0


def test_a_speculators_run_reads_its_newest_epoch(tmp_path):
    """speculators' checkpointer saves `<path>/<epoch>/` each epoch and links
    checkpoint_best to the best (checkpointer.py@c05b95b:55-70, 122-199):
    the run's folder reads the newest epoch, says so and where the best
    one is, and converts with one command."""
    run = tmp_path / "ckpt"
    write_speculators_draft(run / "0")
    write_speculators_draft(run / "2")
    (run / "interrupted").mkdir()
    (run / "checkpoint_best").symlink_to(run / "0")
    (run / "epoch2_step40").symlink_to(run / "2")
    report = check_checkpoint(run)
    [note] = [f for f in report.findings if f.code == "SRC001"]
    assert note.detail["picked"] == 2 and note.detail["epochs"] == [0, 2] and note.detail["best"] == 0
    assert "checkpoint_best points to epoch 0" in note.message
    [layout] = [f for f in report.findings if f.code == "SRV001"]
    assert f"dspark convert {run}" in layout.message
    assert report.verdicts()["served"] is False
    out = tmp_path / "served"
    convert_checkpoint(run, out)
    assert check_checkpoint(out, deep=True).passed(strict=True)


def test_numbered_folders_of_engine_drafts_are_not_a_servable_folder(tmp_path):
    """Only a folder whose newest epoch is in speculators' shape is read as
    a run; numbered folders of engine-layout drafts are not guessed at, and
    a folder with weights of its own is read as those weights."""
    from dspark.examples.fabricate import write_eagle3_draft
    from dspark.schema.errors import UsageError

    plain = tmp_path / "plain"
    write_eagle3_draft(plain / "0")
    write_eagle3_draft(plain / "3")
    with pytest.raises(UsageError, match="not a checkpoint folder"):
        check_checkpoint(plain)
    # a speculators epoch beside weights of the folder's own: the own weights are what loads
    import torch
    from safetensors.torch import load_file

    draft = write_eagle3_draft(tmp_path / "draft")
    mixed = tmp_path / "mixed"
    write_speculators_draft(mixed / "1")
    (mixed / "config.json").write_text((draft / "config.json").read_text())
    torch.save(load_file(draft / "model.safetensors"), mixed / "pytorch_model.bin")
    report = check_checkpoint(mixed)
    assert report.format == "pt" and report.verdicts() == {"served": True, "contents": True}


def test_speculators_tap_ids_are_renumbered_for_the_engine(tmp_path):
    # speculators' id k is hidden_states[k] (convert/dflash/converter.py@c05b95b:117-126);
    # TokenSpeed's id k captures hidden_states[k + 1] (causal_lm.py@f4d8ec6e:133-144).
    source = write_speculators_draft(tmp_path / "spec")
    out = tmp_path / "served"
    convert_checkpoint(source, out)
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [t - 1 for t in TAPS]


def test_speculators_draft_without_tap_ids_converts_to_the_engines_defaults(tmp_path):
    # speculators' default hidden_states [2, N//2, N-3] are the layers the
    # engine captures by default ([1, N//2-1, N-4] as layer ids).
    source = write_speculators_draft(tmp_path / "spec", taps=None)
    assert check_checkpoint(source, verdict="contents").passed()
    out = tmp_path / "served"
    convert_checkpoint(source, out)
    config = json.loads((out / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in config
    assert check_checkpoint(out, deep=True).passed()


def test_a_speculators_model_of_a_family_dspark_does_not_model_fails_unjudged(tmp_path):
    source = write_speculators_draft(tmp_path / "spec", model_type="mtp")
    result = dspark("check", str(source))
    assert result.returncode == 1 and "ENG007" in result.stdout and "does not model" in result.stdout


def write_speculators_dflash(out: Path, aux_ids: list[int], kind: str = "dflash") -> Path:
    """A GQA DFlash draft saved as speculators 0.9.0 writes it
    (models/dflash/config.py@0.9.0): the layer nested, the tap ids as
    hidden_states indices in aux_hidden_state_layer_ids, target_hidden_size
    null, the mask token and block size at the top level."""
    from dspark.examples.fabricate import fabricate

    draft = fabricate(out, family="dflash_gqa")
    flat = json.loads((draft / "config.json").read_text())
    nested = flat.pop("dflash_config", {}) or {}
    layer = {k: v for k, v in flat.items() if k not in ("architectures", "target_layer_ids", "num_target_layers")}
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["DFlashDraftModel" if kind == "dflash" else "DSparkDraftModel"],
        "speculators_model_type": kind, "speculators_version": "0.9.0", "transformer_layer_config": layer,
        "aux_hidden_state_layer_ids": aux_ids, "mask_token_id": nested.get("mask_token_id", 0),
        "block_size": 8, "draft_vocab_size": flat["vocab_size"], "target_hidden_size": None,
        "speculators_config": {"algorithm": kind},
    }))
    return draft


def test_a_speculators_dflash_draft_is_read_with_its_nested_layer_and_hidden_states_ids(tmp_path):
    # vLLM's reader of this shape: dflash_config.target_layer_ids = each id - 1
    # (vllm/transformers_utils/configs/speculators/algos.py::update_dflash@vllm==0.33.0:88-126)
    aux_ids = [3, 12, 23]
    draft = write_speculators_dflash(tmp_path / "spec", aux_ids)
    report = check_checkpoint(draft, engine="vllm")
    [note] = [f for f in report.findings if f.code == "SRC005"]
    assert note.detail["family"] == "dflash_gqa" and report.family == "dflash_gqa"
    assert report.resolved.tap_layers == [i - 1 for i in aux_ids]
    assert not [f for f in report.errors if f.code in ("CFG003", "CFG005", "SRV001")], report.errors
    # TokenSpeed and SGLang parse no speculators config: convert first, then the same layers
    served = check_checkpoint(draft, engine="tokenspeed")
    assert "SRV001" in {f.code for f in served.errors} and served.resolved.tap_layers == [i - 1 for i in aux_ids]


def specforge_config() -> dict:
    """SpecForge's draft config with the taps under eagle_config only
    (configs/deepseek-v3-671b-eagle3.json@a6b6b02)."""
    config = eagle3_config(EAGLE3_SCALES["tiny-llama"])
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": TAPS, "use_aux_hidden_state": True}
    return config


def test_specforge_export_is_judged_as_it_is_and_convert_writes_the_taps_at_the_top(tmp_path):
    # export --to sglang: midlayer.*, t2d/d2t, no embedding (to_sglang.py@a6b6b02:33-38, 84-86)
    source = write_eagle3_draft(tmp_path / "sf", config_edit=lambda c: c.update(specforge_config()),
                                tensor_edit=lambda t: t.update(t2d=torch.zeros(96, dtype=torch.bool)))
    report = check_checkpoint(source)
    assert report.family == "eagle3_llama" and "SRV001" not in {f.code for f in report.findings}
    assert report.passed(), [(f.code, f.message) for f in report.errors]
    out = tmp_path / "served"
    convert_checkpoint(source, out)
    assert_tokenspeed_accepts(out)
    assert check_checkpoint(out, deep=True).passed(strict=True)


def test_specforge_training_state_is_srv001_and_converts(tmp_path):
    # {run_id}-step{N}/training_state.pt (training/checkpoint.py@a6b6b02:11-15, controller.py@a6b6b02:845-866)
    config = specforge_config()
    step = tmp_path / "run-step100"
    step.mkdir()
    tensors = eagle3_tensors(config)
    tensors["t2d"] = torch.zeros(96, dtype=torch.bool)
    torch.save({
        "draft_state_dict": tensors,
        "global_step": 100, "epoch": 0, "strategy": "eagle3", "run_id": "run", "world_size": 1,
        "replicated_optimizer_state": {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"lr": 1e-4}]},
    }, step / "training_state.pt")
    torch.save({"rng": {"cpu": torch.zeros(4, dtype=torch.uint8)}}, step / "training_state_rank0.pt")
    draft_config = tmp_path / "draft-config.json"
    draft_config.write_text(json.dumps(config))

    report = check_checkpoint(step / "training_state.pt", config_path=draft_config)
    layout = [f for f in report.findings if f.code == "SRV001"]
    assert layout and "dspark convert" in layout[0].message
    assert report.verdicts()["contents"], [(f.code, f.message) for f in report.errors]

    out = tmp_path / "served"
    convert_checkpoint(step / "training_state.pt", out, ConvertOptions(config_path=draft_config))
    assert_tokenspeed_accepts(out)
    assert check_checkpoint(out, deep=True).passed(strict=True)


# --------------------------------------------------------------------------
# SpecForge training checkpoints: step folders and the output folder


def file_identity(path: Path) -> tuple:
    """SpecForge's stat-v2 identity of a JSON file: (kind, absolute path,
    ("sha256", "", size, hex)) (training/provenance.py@a6b6b02:78-114)."""
    data = path.read_bytes()
    return ("file-stat-v2", str(path.resolve()), ("sha256", "", len(data), hashlib.sha256(data).hexdigest()))


def write_specforge_step(output: Path, run: str, step: int, *, draft_config: Path | None, seed: int = 0,
                         world_size: int = 2, provenance: bool = True, latest: bool = True,
                         capture: tuple | None = tuple(TAPS)) -> dict:
    """One `{run_id}-step{N}/` as CheckpointManager.save writes it: the
    shared training_state.pt (controller.py@a6b6b02:849-871, with the
    trainer's resume contract, trainer.py@a6b6b02:247-276) and one
    training_state_rank{r}.pt per rank (optimizer shard and RNG), then the
    `{run_id}-latest` symlink (checkpoint.py@a6b6b02:98-105, 428-442).
    Returns the draft tensors saved."""
    folder = output / f"{run}-step{step}"
    folder.mkdir(parents=True)
    config = specforge_config()
    tensors = eagle3_tensors(config, seed=seed)
    tensors["t2d"] = torch.zeros(96, dtype=torch.bool)
    state = {
        "draft_state_dict": tensors,
        "global_step": step, "epoch": 0, "epoch_batch": step, "epoch_samples": step * 4,
        "strategy": "eagle3", "run_id": run, "world_size": world_size,
        "dataset_size": 4000, "batch_size": 4, "accumulation_steps": 1, "num_epochs": 1,
        "effective_total_steps": 1000, "tp_size": 1, "sp_ulysses_size": 1, "sp_ring_size": 1,
        "specforge_step_options": (("ttt_length", 7),),
        "offline_sampler_version": 1, "sampler_seed": 0, "source_dataset_size": 4000,
    }
    if provenance:
        state["specforge_model_provenance"] = (
            ("capture_layers", capture),
            ("draft_config", file_identity(draft_config) if draft_config is not None else None),
            ("draft_revision", None),
            ("embedding_key", "model.embed_tokens.weight"),
            ("input_modality", "text"),
            ("lm_head_key", "lm_head.weight"),
            ("load_target_embedding", True),
            ("source_identity_format", "stat-v2"),
            ("target_model", ("reference", "meta-llama/Llama-3.1-8B-Instruct")),
            ("target_revision", None),
            ("torch_dtype", "bfloat16"),
            ("vocab_mapping", None),
        )
    torch.save(state, folder / "training_state.pt")
    for rank in range(world_size):
        torch.save({
            "optimizer": {"state": {0: {"exp_avg": torch.zeros(8), "step": torch.tensor(float(step))}},
                          "param_groups": [{"lr": 1e-4, "params": [0]}]},
            "rng": {"cpu": torch.get_rng_state()},
        }, folder / f"training_state_rank{rank}.pt")
    if latest:
        link = output / f"{run}-latest"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(folder.name)
    return tensors


def draft_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "configs" / "llama3-8b-eagle3.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(specforge_config(), indent=2))
    return path


def assert_weights_of(out: Path, tensors: dict) -> None:
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        assert torch.equal(handle.get_tensor("fc.weight"), tensors["fc.weight"])


def test_specforge_output_folder_reads_the_latest_step_with_the_recorded_config(tmp_path):
    config = draft_config_file(tmp_path)
    output = tmp_path / "outputs" / "llama3-8b-eagle3"
    for n, step in enumerate((100, 200, 300)):
        newest = write_specforge_step(output, "run", step, draft_config=config, seed=n)
    (output / "run-best").symlink_to("run-step200")

    report = check_checkpoint(output)
    codes = {f.code for f in report.findings}
    note = next(f for f in report.findings if f.code == "SRC001")
    assert "reading run-step300/training_state.pt, the one run-latest points to" in note.message
    assert "the best by eval is run-step200" in note.message and "Pass a run-step{N} folder" in note.message
    assert note.detail["steps"] == ["run-step100", "run-step200", "run-step300"]
    # the file read is named from the folder given, in every finding and in the inventory
    assert {f.file for f in report.findings if f.code in ("SRC002", "INV005")} == {"run-step300/training_state.pt"}
    assert [file.name for file in report.files] == ["run-step300/training_state.pt"]
    assert "CFG001" not in codes and report.family == "eagle3_llama"
    layout = [f for f in report.findings if f.code == "SRV001"]
    assert len(layout) == 1 and layout[0].detail["command"] == f"dspark convert {output} {output}-served"
    assert report.verdicts() == {"served": False, "contents": True}, [(f.code, f.message) for f in report.errors]

    # the command SRV001 prints is the one that works
    result = dspark("check", str(output))
    assert result.returncode == 1 and "SRV001" in result.stdout
    command = shlex.split(layout[0].detail["command"])
    converted = subprocess.run([sys.executable, "-m", "dspark.cli.main", *command[1:]],
                               capture_output=True, text=True, timeout=120)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    served = Path(f"{output}-served")
    assert_tokenspeed_accepts(served)
    assert_weights_of(served, newest)
    assert check_checkpoint(served, deep=True).passed(strict=True)


def test_an_error_in_the_step_read_from_an_output_folder_names_that_step(tmp_path):
    """Given the output folder, an unreadable tensor in the step picked is
    named with its step folder, not as a bare training_state.pt."""
    config = draft_config_file(tmp_path)
    output = tmp_path / "out"
    write_specforge_step(output, "run", 100, draft_config=config, seed=1)
    write_specforge_step(output, "run", 200, draft_config=config, seed=2)
    state_file = output / "run-step200" / "training_state.pt"
    state = torch.load(state_file, weights_only=False)
    state["draft_state_dict"]["fc.weight"] = state["draft_state_dict"]["fc.weight"].to_sparse()
    torch.save(state, state_file)

    result = dspark("check", str(output))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "run-step200/training_state.pt: fc.weight is stored as sparse_coo" in result.stdout + result.stderr


def test_specforge_step_folder_is_read_as_named_and_rank_files_are_never_opened(tmp_path):
    config = draft_config_file(tmp_path)
    output = tmp_path / "out"
    older = write_specforge_step(output, "run", 100, draft_config=config, seed=1)
    write_specforge_step(output, "run", 200, draft_config=config, seed=2)
    step = output / "run-step100"
    # a rank file that is not even a torch file: reading it would fail
    (step / "training_state_rank1.pt").write_bytes(b"not a torch file")

    report = check_checkpoint(step)
    assert "SRC001" not in {f.code for f in report.findings}  # nothing was picked for the user
    assert [f.detail["command"] for f in report.findings if f.code == "SRV001"] == [
        f"dspark convert {step} {step}-served"]
    out = tmp_path / "served"
    convert_checkpoint(step, out)
    assert_weights_of(out, older)
    assert check_checkpoint(out, deep=True).passed(strict=True)


def test_specforge_output_without_a_latest_link_reads_the_highest_step(tmp_path):
    config = draft_config_file(tmp_path)
    output = tmp_path / "out"
    write_specforge_step(output, "run", 90, draft_config=config, seed=1, latest=False)
    newest = write_specforge_step(output, "run", 100, draft_config=config, seed=2, latest=False)
    (output / "run-step110").mkdir()  # an unfinished save: no training_state.pt yet

    note = next(f for f in check_checkpoint(output).findings if f.code == "SRC001")
    assert "reading run-step100/training_state.pt, the highest step (there is no run-latest link)" in note.message
    out = tmp_path / "served"
    convert_checkpoint(output, out)
    assert_weights_of(out, newest)


def test_specforge_output_with_two_runs_is_not_guessed_at(tmp_path):
    config = draft_config_file(tmp_path)
    output = tmp_path / "out"
    write_specforge_step(output, "alpha", 100, draft_config=config)
    write_specforge_step(output, "beta", 50, draft_config=config)
    result = dspark("check", str(output))
    assert result.returncode == 2
    text = result.stdout + result.stderr
    assert "2 SpecForge runs" in text and "alpha-step100" in text and "beta-step50" in text


def test_a_specforge_rank_file_named_directly_is_exit_2(tmp_path):
    output = tmp_path / "out"
    write_specforge_step(output, "run", 100, draft_config=draft_config_file(tmp_path))
    result = dspark("check", str(output / "run-step100" / "training_state_rank0.pt"))
    assert result.returncode == 2
    assert "optimizer and RNG state" in result.stdout + result.stderr


def test_specforge_config_beside_the_checkpoints_wins_over_the_recorded_one(tmp_path):
    recorded = draft_config_file(tmp_path)
    output = tmp_path / "out"
    write_specforge_step(output, "run", 100, draft_config=recorded)
    (output / "config.json").write_text(json.dumps(specforge_config()))
    checkpoint_config = check_checkpoint(output).to_dict()
    assert "CFG001" not in {f["code"] for f in checkpoint_config["findings"]}
    from dspark.converters.readers import open_checkpoint

    assert open_checkpoint(output).config_path == output / "config.json"
    assert open_checkpoint(recorded.parent.parent / "out" / "run-step100").config_path == output / "config.json"


@pytest.mark.parametrize("case, expected", [
    pytest.param("edited", "has changed since training", id="config-edited-since-training"),
    pytest.param("moved", "which is not found here", id="config-gone"),
    pytest.param("generated", "generated its draft config from the target model", id="config-generated"),
    pytest.param("old", "no specforge_model_provenance", id="no-provenance"),
])
def test_specforge_checkpoint_without_a_usable_config_asks_for_config(tmp_path, case, expected):
    config = draft_config_file(tmp_path)
    output = tmp_path / "out"
    write_specforge_step(output, "run", 100, draft_config=None if case == "generated" else config,
                         provenance=case != "old")
    if case == "edited":
        config.write_text(json.dumps({**specforge_config(), "hidden_size": 64}))
    elif case == "moved":
        config.unlink()

    report = check_checkpoint(output)
    missing = [f for f in report.findings if f.code == "CFG001"]
    assert len(missing) == 1 and expected in missing[0].message and "pass --config" in missing[0].message

    result = dspark("convert", str(output), str(tmp_path / "served"))
    assert result.returncode == 1 and "--config" in result.stdout + result.stderr
    assert not (tmp_path / "served").exists()

    # --config is the way out, and check's SRV001 then prints it in the command
    good = tmp_path / "good.json"
    good.write_text(json.dumps(specforge_config()))
    report = check_checkpoint(output, config_path=good)
    (layout,) = [f for f in report.findings if f.code == "SRV001"]
    assert layout.detail["command"] == f"dspark convert {output} {output}-served --config {good}"
    assert report.verdicts()["contents"]
    assert dspark(*shlex.split(layout.detail["command"])[1:]).returncode == 0
    assert check_checkpoint(Path(f"{output}-served"), deep=True).passed(strict=True)


def test_specforge_taps_are_the_capture_layers_the_run_recorded(tmp_path):
    """A run override (`model.aux_hidden_state_layer_ids`) wins over the
    draft config's eagle_config list at training time, and the checkpoint
    records the list it captured (model_providers.py@a6b6b02:188-210;
    provenance.py@a6b6b02:263-292): convert writes that one."""
    config = draft_config_file(tmp_path)
    output = tmp_path / "outputs" / "run"
    write_specforge_step(output, "run", 100, draft_config=config, capture=(1, 3, 6))
    report = check_checkpoint(output, verdict="contents")
    [note] = [f for f in report.findings if f.code == "SRC007"]
    assert "[1, 3, 6]" in note.message and "capture_layers" in note.message and "[2, 4, 5]" in note.message
    out = tmp_path / "served"
    result = dspark("convert", str(output), str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    written = json.loads((out / "config.json").read_text())
    assert written["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]
    assert dspark("check", str(out), "--deep").returncode == 0


def test_specforge_offline_training_records_no_capture_and_keeps_the_config(tmp_path):
    """An offline run resolves no capture layers (assembly.py@a6b6b02:
    210-212): its hidden states were made beforehand, with whatever list,
    a run override included. The config's list is kept, and a warning says
    the checkpoint cannot confirm it."""
    config = draft_config_file(tmp_path)
    output = tmp_path / "outputs" / "run"
    write_specforge_step(output, "run", 100, draft_config=config, capture=None)
    [warning] = [f for f in check_checkpoint(output, verdict="contents").findings if f.code == "SRC007"]
    assert warning.severity.value == "warning" and "the run recorded no capture layers" in warning.message
    assert "[2, 4, 5]" in warning.message



def test_a_speculators_folder_is_read_as_hidden_states_indices(tmp_path):
    # speculators numbers taps by hidden_states index; the check reads them
    # one lower, as convert writes them, so TokenSpeed captures the layers
    # the draft was trained on (no TAP006).
    report = check_checkpoint(write_speculators_draft(tmp_path / "spec"))
    [note] = [f for f in report.findings if f.code == "TAP004"]
    assert "speculators" in note.message and note.detail["numbering"] == "hidden_states"
    assert note.detail["layers"] == [t - 1 for t in TAPS] == report.resolved.tap_layers
    assert not [f for f in report.findings if f.code == "TAP006"]


def test_an_engine_that_parses_speculators_configs_judges_the_folder_as_it_is(tmp_path):
    # A profile written here: TokenSpeed's, but parsing speculators' shape
    # and numbering ids as hidden_states indices, as speculators does.
    import dataclasses

    from dspark.schema.engines.base import HIDDEN_STATES, Source, TapNumbering

    base = DEFAULT_ENGINE
    loader = base.loader_for("eagle3_llama")
    numbering = TapNumbering(HIDDEN_STATES, "id k is hidden_states[k]", Source("fake.py", "1", "v1"))
    fake = dataclasses.replace(base, name="fake", revision="1", native_config_shapes=("speculators",), loaders={
        **base.loaders, "eagle3_llama": dataclasses.replace(loader, taps=dataclasses.replace(
            loader.taps, numbering=numbering))})
    report = check_checkpoint(write_speculators_draft(tmp_path / "spec"), engine=[base, fake])
    rows = {r.engine: r for r in report.engine_reports}
    assert "SRV001" in {f.code for f in rows["tokenspeed@0.1.1"].findings}
    assert "SRV001" not in {f.code for f in rows["fake@1"].findings}
    assert rows["fake@1"].resolved.target_layer_ids == TAPS  # read as written
    assert rows["fake@1"].resolved.tap_layers == rows["tokenspeed@0.1.1"].resolved.tap_layers == [t - 1 for t in TAPS]
    assert not [f for f in report.findings if f.code in ("TAP006", "TAP007")]


def test_an_absent_norm_before_residual_is_served_true_by_vllm_and_converted_as_trained(tmp_path):
    # vLLM's reader of speculators' shape takes it as true when absent (algos.py::update_eagle3@vllm==0.33.0:33-35);
    # speculators' own class defaults it to false (models/eagle3/config.py@speculators==0.9.0:43-46)
    source = write_speculators_draft(tmp_path / "spec")
    config = json.loads((source / "config.json").read_text())
    del config["norm_before_residual"]
    (source / "config.json").write_text(json.dumps(config))
    report = check_checkpoint(source, engine="vllm")
    [served] = [f for f in report.errors if f.code == "ENG001"]
    assert served.detail["feature"] == "norm_before_residual" and served.detail["served"] is True
    out = tmp_path / "out"
    converted = convert_checkpoint(source, out, ConvertOptions(engine="vllm"))
    assert json.loads((out / "config.json").read_text())["norm_before_residual"] is False
    assert any(c.startswith("norm_before_residual: absent -> False") for c in converted.plan.config_changes)
    assert check_checkpoint(out, engine="vllm").passed()
    # an engine that parses no speculators config says nothing of the reader's default
    assert "ENG001" not in {f.code for f in check_checkpoint(source, engine="tokenspeed").findings}
