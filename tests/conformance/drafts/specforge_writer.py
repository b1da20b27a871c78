"""Write drafts with SpecForge 0.2.0's own code, as a user of that release
would: a draft config (generated from the target by the trainer, or written
by hand like the release's example configs), the draft class built from it
(`AutoDraftModel`), the training checkpoint the controller saves through
`CheckpointManager`, then `specforge export --to hf|sglang`. Then the edits
users make to an export. Runs in an environment with SpecForge's released
code on the path; writes `manifest.json` (one entry per folder) for the
suite.

Tap numbering (what `trained_layers` records): SpecForge's ids are layer
outputs, the suite's own numbering.
- EAGLE-3 ids go to SGLang's `set_eagle3_layers_to_capture`
  (specforge/offline_capture/sglang_backend/capture.py::
  OfflineSGLangCaptureBackend.set_capture_layers@0.2.0:89-113), which
  captures the input of layer id+1, the output of layer id
  (sglang/srt/models/llama.py::LlamaForCausalLM.set_eagle3_layers_to_capture
  @0.5.23:929-941). Their source: the run's model.aux_hidden_state_layer_ids,
  else the draft config's eagle_config, else [1, n/2-1, n-4]
  (specforge/algorithms/model_providers.py::resolve_eagle_capture_layers
  @0.2.0:188-211), so ids given in the run config never reach the export.
- DFlash-family ids are read as HF hidden_states[id + 1], the output of
  layer id (specforge/modeling/draft/dflash.py::extract_context_feature
  @0.2.0:284-293), from dflash_config.target_layer_ids
  (model_providers.py::resolve_dflash_capture_layers@0.2.0:230-241).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from drafts import edits_writer as edits
from drafts.targets_writer import HIDDEN_SIZE, MASK_TOKEN_ID, NUM_LAYERS, VOCAB_SIZE, write_targets

ORIGIN = "specforge@0.2.0"
DRAFT_VOCAB_SIZE = 256
STEP = 100

# Sizes every hand-written draft config shares (the tiny targets' width).
_LAYER = dict(hidden_size=HIDDEN_SIZE, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
              head_dim=32, hidden_act="silu", rms_norm_eps=1e-6, max_position_embeddings=2048,
              initializer_range=0.02, attention_bias=False, attention_dropout=0.0, rope_theta=10000.0,
              rope_scaling=None, tie_word_embeddings=False, use_cache=True, vocab_size=VOCAB_SIZE,
              bos_token_id=0, eos_token_id=1, pad_token_id=2, torch_dtype="bfloat16")


def trained_norm(draft: Any) -> dict[str, bool] | None:
    """How an EAGLE-3 draft was trained to norm its states, read off the
    class SpecForge built: the head reads the normed state when its
    `norm_output` (default true) is set (modeling/draft/llama3_eagle.py::
    LlamaForCausalLMEagle3.compute_logits@0.2.0:1690, 1772-1777); each
    test-time-training step feeds the backbone's un-normed output back
    (algorithms/eagle3/model.py@0.2.0:386-400). None for other classes."""
    if type(draft).__name__ != "LlamaForCausalLMEagle3":
        return None
    return {"logits_normed": bool(draft.norm_output), "normed_state_fed_back": False}


def eagle3_config(**extra: Any) -> dict[str, Any]:
    """An EAGLE-3 draft config as the release's example configs spell it
    (configs/deepseek-v3-671b-eagle3.json, kimi-k2-eagle3.json)."""
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "draft_vocab_size": DRAFT_VOCAB_SIZE, **_LAYER, **extra}


def dflash_family_config(architecture: str, target_layer_ids: list[int], method: dict[str, Any]) -> dict[str, Any]:
    """A DFlash-family draft config as configs/qwen3-8b-dspark.json spells it."""
    return {"architectures": [architecture], "model_type": "qwen3", "num_hidden_layers": 2, "block_size": 8,
            "num_target_layers": NUM_LAYERS, "layer_types": ["full_attention"] * 2, "sliding_window": None,
            "use_sliding_window": False, "max_window_layers": 2, **_LAYER,
            "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": target_layer_ids, **method}}


class Writer:
    def __init__(self, root: Path, targets: dict[str, Path]) -> None:
        self.root = root
        self.targets = targets
        self.manifest: list[dict[str, Any]] = []
        self.vocab_mapping = self._vocab_mapping()
        # How each run's EAGLE-3 draft normed its states, as its own class
        # read the config (trained_norm), by config file, run dir and export.
        self.trained_norms: dict[str, dict[str, bool] | None] = {}

    def _vocab_mapping(self) -> Path:
        """The t2d/d2t file the trainer builds from token counts
        (specforge/data/preprocessing.py::generate_vocab_mapping_file@0.2.0:587-640)."""
        from specforge.data.preprocessing import process_token_dict_to_mappings

        counts = Counter({token: VOCAB_SIZE - token for token in range(0, VOCAB_SIZE, 2)})
        d2t, t2d = process_token_dict_to_mappings(counts, DRAFT_VOCAB_SIZE, VOCAB_SIZE)
        path = self.root / "work" / "vocab_mapping.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"d2t": d2t, "t2d": t2d}, path)
        return path

    def record(self, case_id: str, folder: Path, *, family: str | None, target: str,
               trained_layers: list[int] | None, expect: str, source: str | None = None,
               check_without_target: bool = False) -> Path:
        trained_norm = self.trained_norms.get(str(folder)) or self.trained_norms.get(str(folder.parent))
        if source is not None:  # a user's edit was trained as its source was
            trained_norm = next((e["trained_norm"] for e in self.manifest if e["id"] == source), None)
        self.manifest.append({"id": case_id, "folder": str(folder), "family": family, "target": target,
                              "trained_layers": trained_layers, "expect": expect, "source": source,
                              "trained_norm": trained_norm, "check_without_target": check_without_target})
        return folder

    # -- the trainer's own steps ------------------------------------------
    def generated_config(self, strategy: str, target: str, **model_options: Any) -> dict[str, Any]:
        """The draft config SpecForge derives from the target when the run
        names none (training/model_loading.py::resolve_draft_config@0.2.0:275-301),
        with the mask token the DFlash builder writes into it
        (model_providers.py::_build_dflash_family_model@0.2.0:329-345)."""
        from specforge.algorithms.builtin import builtin_algorithm_registry
        from specforge.config import Config
        from specforge.training.model_loading import resolve_draft_config

        run = Config.model_validate({
            "model": {"target_model_path": str(self.targets[target]), "mask_token_id": MASK_TOKEN_ID, **model_options},
            "training": {"strategy": strategy}, "data": {"hidden_states_path": str(self.root / "work" / "features")}})
        provider = builtin_algorithm_registry().resolve(strategy).providers.model.draft_config
        config = resolve_draft_config(run, provider=provider).to_dict()
        if "dflash_config" in config:
            config["dflash_config"]["mask_token_id"] = MASK_TOKEN_ID
        return config

    def capture_layers(self, strategy: str, config: dict[str, Any], target: str,
                       run_layers: list[int] | None = None) -> list[int]:
        """The layers the trainer captures for this run (the algorithm's own resolver)."""
        from transformers import AutoConfig

        from specforge.algorithms.builtin import builtin_algorithm_registry
        from specforge.config import Config

        run = Config.model_validate({
            "model": {"target_model_path": str(self.targets[target]), "aux_hidden_state_layer_ids": run_layers},
            "training": {"strategy": strategy}, "data": {"hidden_states_path": "features"}})
        model_provider = builtin_algorithm_registry().resolve(strategy).providers.model
        return list(model_provider.resolve_capture_layers(run, config, AutoConfig.from_pretrained(self.targets[target])))

    def train_checkpoint(self, name: str, strategy: str, config: dict[str, Any], target: str) -> tuple[Path, Path]:
        """Build the draft (its initial weights stand for trained ones:
        training changes values, never names, shapes or dtypes) and save the
        checkpoint the controller saves (training/controller.py::TrainerController.
        save_checkpoint@0.2.0:839-866) through CheckpointManager. Returns the
        run output dir and the draft config file the user passes to export."""
        from torch import nn

        from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig
        from specforge.training.strategies import base as strategies
        from specforge.training.checkpoint import CheckpointManager

        work = self.root / "work" / name
        work.mkdir(parents=True, exist_ok=True)
        config_file = work / "draft_config.json"
        config_file.write_text(json.dumps(config, indent=2))
        torch.manual_seed(0)
        draft = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(str(config_file)), torch_dtype=torch.bfloat16)
        if hasattr(draft, "load_embedding"):  # model.load_target_embedding (default true), then frozen
            draft.load_embedding(str(self.targets[target]))
            draft.embed_tokens.weight.requires_grad_(strategy == "peagle")
        if strategy == "eagle3" and int(config["draft_vocab_size"]) != VOCAB_SIZE:
            draft.load_vocab_mapping(str(self.vocab_mapping))
        # The online model wraps the draft as `draft_model` (algorithms/eagle3/model.py::
        # OnlineEagle3Model.__init__@0.2.0:130); the strategy's own filter picks the saved keys.
        online = nn.Module()
        online.draft_model = draft
        strategy_class = {"eagle3": strategies.Eagle3TrainStrategy, "peagle": strategies.PEagleTrainStrategy,
                          "dflash": strategies.DFlashTrainStrategy, "dspark": strategies.DSparkTrainStrategy,
                          "domino": strategies.DominoTrainStrategy}[strategy]
        run_dir = work / "run"
        shared = {"draft_state_dict": strategy_class(online).checkpoint_state_filter(online.state_dict()),
                  "global_step": STEP, "epoch": 0, "epoch_batch": 0, "epoch_samples": 0,
                  "strategy": strategy, "run_id": name, "world_size": 1}
        CheckpointManager(str(run_dir), name).save(shared, STEP)
        self.trained_norms[str(config_file)] = self.trained_norms[str(run_dir)] = trained_norm(draft)
        return run_dir, config_file

    def export(self, to: str, run_dir: Path, config_file: Path, folder: Path, target: str,
               vocab_mapping: bool = False) -> Path:
        """`specforge export --to hf|sglang` (specforge/cli.py::main@0.2.0:199-212, 277-299)."""
        from specforge.cli import main

        argv = ["export", "--to", to, "--checkpoint", str(run_dir), "--draft-config", str(config_file),
                "--output-dir", str(folder)]
        if to == "hf":
            argv += ["--embedding-source", str(self.targets[target])]
        if vocab_mapping:
            argv += ["--vocab-mapping", str(self.vocab_mapping)]
        if main(argv) != 0:
            raise RuntimeError(f"specforge export {' '.join(argv)} failed")
        self.trained_norms[str(folder)] = self.trained_norms.get(str(config_file))
        return folder


def write_eagle3(w: Writer) -> None:
    out = w.root / "eagle3_llama"
    taps = [1, 3, 4]
    config = eagle3_config(eagle_config={"eagle_aux_hidden_state_layer_ids": taps, "use_aux_hidden_state": True})
    run, config_file = w.train_checkpoint("eagle3", "eagle3", config, "llama")
    hf = w.record("trainers/specforge/eagle3_llama/export-hf", w.export("hf", run, config_file, out / "export-hf", "llama", True),
                  family="eagle3_llama", target="llama", trained_layers=taps,
                  expect="specforge export --to hf of an EAGLE-3 run: embed_tokens from the target, t2d/d2t, eagle_config tap ids")
    sglang = w.record("trainers/specforge/eagle3_llama/export-sglang",
                      w.export("sglang", run, config_file, out / "export-sglang", "llama", True),
                      family="eagle3_llama", target="llama", trained_layers=taps,
                      expect="specforge export --to sglang: no embedding, t2d/d2t always shipped, eagle_config tap ids")
    w.record("trainers/specforge/eagle3_llama/checkpoint-dir", next(run.glob("eagle3-step*")), family="eagle3_llama",
             target="llama", trained_layers=taps,
             expect="the CheckpointManager step folder itself (training_state.pt, no config.json): not exported")

    def edited(name: str, source: Path, edit, expect: str, *, trained=taps, source_id: str) -> None:
        folder = edits.copy_and_edit(source, out / name, edit)
        w.record(f"trainers/specforge/eagle3_llama/{name}", folder, family="eagle3_llama", target="llama",
                 trained_layers=trained, expect=f"user edit of {source_id}: {expect}", source=source_id)

    sg_id, hf_id = "trainers/specforge/eagle3_llama/export-sglang", "trainers/specforge/eagle3_llama/export-hf"
    edited("edit-shard-2", hf, edits.shard(2), "split into two safetensors files with an index", source_id=hf_id)
    edited("edit-cast-float32", sglang, edits.cast_floats("float32"), "every float tensor upcast to float32", source_id=sg_id)
    edited("edit-cast-float16", sglang, edits.cast_floats("float16"), "every float tensor cast to float16", source_id=sg_id)
    edited("edit-drop-d2t-t2d", sglang, edits.drop_tensors("d2t", "t2d"),
           "d2t/t2d deleted though draft_vocab_size (256) < vocab_size (512)", source_id=sg_id)
    edited("edit-remove-draft-vocab-size", sglang, edits.remove_config_key("draft_vocab_size"),
           "draft_vocab_size removed from config.json (lm_head still 256 rows)", source_id=sg_id)
    edited("edit-rename-architecture", sglang, edits.set_config(architectures=["Eagle3LlamaForCausalLM"]),
           "architectures renamed to vLLM's Eagle3LlamaForCausalLM", source_id=sg_id)
    edited("edit-declare-fc-norm", sglang, edits.set_config(fc_norm=True),
           "fc_norm: true added to config.json, no fc_norm weights", source_id=sg_id)
    edited("edit-remove-eagle-config", sglang, edits.remove_config_key("eagle_config"),
           "eagle_config (the tap ids) removed; trained on [1, 3, 4], the engines' default", source_id=sg_id)

    # Taps other than the engines' defaults, declared where SpecForge's example configs put them.
    custom = [0, 3, 6]
    custom_config = eagle3_config(eagle_config={"eagle_aux_hidden_state_layer_ids": custom, "use_aux_hidden_state": True})
    run, config_file = w.train_checkpoint("eagle3-custom-taps", "eagle3", custom_config, "llama")
    for to in ("hf", "sglang"):
        w.record(f"trainers/specforge/eagle3_llama/export-{to}-custom-taps",
                 w.export(to, run, config_file, out / f"export-{to}-custom-taps", "llama", True),
                 family="eagle3_llama", target="llama", trained_layers=w.capture_layers("eagle3", custom_config, "llama"),
                 expect=f"--to {to}; eagle_config tap ids [0, 3, 6], not the engines' defaults")

    # Tap ids given in the run config, not the draft config: trained on them, shipped without them.
    run_taps = [0, 3, 6]
    plain = eagle3_config()
    trained = w.capture_layers("eagle3", plain, "llama", run_taps)
    run, config_file = w.train_checkpoint("eagle3-run-taps", "eagle3", plain, "llama")
    no_ids = w.record("trainers/specforge/eagle3_llama/export-sglang-run-config-taps",
                      w.export("sglang", run, config_file, out / "export-sglang-run-config-taps", "llama", True),
                      family="eagle3_llama", target="llama", trained_layers=trained,
                      expect="taps set by model.aux_hidden_state_layer_ids in the run config: the export carries no tap ids")
    run_id = "trainers/specforge/eagle3_llama/export-sglang-run-config-taps"
    edited("edit-set-tap-ids", no_ids, edits.set_config(eagle_config={"eagle_aux_hidden_state_layer_ids": run_taps}),
           "eagle_config.eagle_aux_hidden_state_layer_ids set by hand to the trained ids", trained=trained, source_id=run_id)
    edited("edit-set-tap-ids-vllm-numbering", no_ids,
           edits.set_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [i + 1 for i in run_taps]}),
           "tap ids set by hand one higher (vLLM's hidden_states numbering) than the trained layer outputs",
           trained=trained, source_id=run_id)

    default_taps = w.capture_layers("eagle3", plain, "llama")
    run, config_file = w.train_checkpoint("eagle3-default-taps", "eagle3", plain, "llama")
    w.record("trainers/specforge/eagle3_llama/export-sglang-default-taps",
             w.export("sglang", run, config_file, out / "export-sglang-default-taps", "llama", True),
             family="eagle3_llama", target="llama", trained_layers=default_taps,
             expect="no tap ids anywhere: trained on the trainer's default [1, n/2-1, n-4]")

    fc_norm = eagle3_config(fc_norm=True, eagle_config={"eagle_aux_hidden_state_layer_ids": taps})
    run, config_file = w.train_checkpoint("eagle3-fc-norm", "eagle3", fc_norm, "llama")
    fc = w.record("trainers/specforge/eagle3_llama/fc-norm-export-sglang",
                  w.export("sglang", run, config_file, out / "fc-norm-export-sglang", "llama", True),
                  family="eagle3_llama", target="llama", trained_layers=taps,
                  expect="fc_norm: true in the draft config; three fc_norm.{i}.weight of target_hidden_size")
    w.record("trainers/specforge/eagle3_llama/fc-norm-export-hf",
             w.export("hf", run, config_file, out / "fc-norm-export-hf", "llama", True),
             family="eagle3_llama", target="llama", trained_layers=taps, expect="fc_norm draft, --to hf")
    edited("edit-remove-fc-norm-key", fc, edits.remove_config_key("fc_norm"),
           "fc_norm key removed from config.json, fc_norm weights still shipped",
           source_id="trainers/specforge/eagle3_llama/fc-norm-export-sglang")

    # SpecForge's norm_output (default true) applies the final norm before lm_head in
    # compute_logits (modeling/draft/llama3_eagle.py::LlamaForCausalLMEagle3.compute_logits@0.2.0:1772-1777).
    no_norm = eagle3_config(norm_output=False, eagle_config={"eagle_aux_hidden_state_layer_ids": taps})
    run, config_file = w.train_checkpoint("eagle3-norm-output-false", "eagle3", no_norm, "llama")
    w.record("trainers/specforge/eagle3_llama/norm-output-false-export-sglang",
             w.export("sglang", run, config_file, out / "norm-output-false-export-sglang", "llama", True),
             family="eagle3_llama", target="llama", trained_layers=taps,
             expect="norm_output: false (SpecForge: lm_head reads the un-normed hidden state)")
    # norm_output: true, SpecForge's default written out: the engines read the key as
    # "feed the post-norm state back" (sglang/srt/models/llama_eagle3.py@0.5.23:207, 264-269).
    normed = eagle3_config(norm_output=True, eagle_config={"eagle_aux_hidden_state_layer_ids": taps})
    run, config_file = w.train_checkpoint("eagle3-norm-output-true", "eagle3", normed, "llama")
    w.record("trainers/specforge/eagle3_llama/norm-output-true-export-sglang",
             w.export("sglang", run, config_file, out / "norm-output-true-export-sglang", "llama", True),
             family="eagle3_llama", target="llama", trained_layers=taps,
             expect="norm_output: true written out (SpecForge: logits through the final norm, its default; "
                    "the engines: feed the post-norm state back)")

    full = eagle3_config(draft_vocab_size=VOCAB_SIZE, eagle_config={"eagle_aux_hidden_state_layer_ids": taps})
    run, config_file = w.train_checkpoint("eagle3-full-vocab", "eagle3", full, "llama")
    full_folder = w.record("trainers/specforge/eagle3_llama/full-vocab-export-sglang",
                           w.export("sglang", run, config_file, out / "full-vocab-export-sglang", "llama"),
                           family="eagle3_llama", target="llama", trained_layers=taps,
                           expect="draft_vocab_size == vocab_size: the exporter still ships identity t2d/d2t")
    edited("edit-full-vocab-drop-d2t-t2d", full_folder, edits.drop_tensors("d2t", "t2d"),
           "identity d2t/t2d deleted from a full-vocabulary draft",
           source_id="trainers/specforge/eagle3_llama/full-vocab-export-sglang")

    for target in ("qwen3", "deepseek_v3"):
        run, config_file = w.train_checkpoint(f"eagle3-{target}", "eagle3", config, target)
        w.record(f"trainers/specforge/eagle3_llama/{target}-target-export-sglang",
                 w.export("sglang", run, config_file, out / f"{target}-target-export-sglang", target, True),
                 family="eagle3_llama", target=target, trained_layers=taps,
                 expect=f"a Llama EAGLE-3 layer trained against a {target} target")


def write_dflash_family(w: Writer) -> None:
    out = w.root / "dflash_gqa"

    def draft(name: str, strategy: str, config: dict[str, Any], target: str, expect: str,
              family: str | None = "dflash_gqa") -> Path:
        trained = w.capture_layers(strategy, config, target)
        run, config_file = w.train_checkpoint(f"{strategy}-{name}", strategy, config, target)
        folder = w.export("hf", run, config_file, (out if family else w.root / strategy) / name, target)
        case_id = f"trainers/specforge/{family or strategy}/{name}"
        return w.record(case_id, folder, family=family, target=target, trained_layers=trained, expect=expect)

    generated = w.generated_config("dflash", "qwen3", draft_num_hidden_layers=2)
    dflash = draft("dflash-generated-config-export-hf", "dflash", generated, "qwen3",
                   "DFlash draft config generated from the target by the trainer (2 layers, its default tap ids)")
    draft("dflash-qwen3-moe-target-export-hf", "dflash", w.generated_config("dflash", "qwen3_moe"), "qwen3_moe",
          "DFlash draft generated from a Qwen3-MoE target (1 layer)")
    last = dflash_family_config("DFlashDraftModel", [1, 4, 7], {})
    last_folder = draft("dflash-last-layer-tap-export-hf", "dflash", last, "qwen3",
                        "hand-written DFlash config whose taps include the target's last layer (7)")
    # The same folder judged without --target: its num_target_layers (the
    # target's layer count, as SpecForge writes it) bounds the taps alone.
    w.record("trainers/specforge/dflash_gqa/dflash-last-layer-tap-export-hf-stated-target", last_folder,
             family="dflash_gqa", target="qwen3", trained_layers=w.capture_layers("dflash", last, "qwen3"),
             expect="the last-layer tap, checked without --target (num_target_layers states 8 layers)",
             check_without_target=True)
    method = {"projector_type": "dspark", "markov_rank": 32, "markov_head_type": "vanilla",
              "confidence_head_alpha": 1.0, "enable_confidence_head": True, "confidence_head_with_markov": True}
    dspark = draft("dspark-export-hf", "dspark", dflash_family_config("DSparkDraftModel", [1, 3, 5], method), "qwen3",
                   "DSpark draft (Markov head, confidence head with Markov) as configs/qwen3-8b-dspark.json")
    no_confidence = {"projector_type": "dspark", "markov_rank": 32, "markov_head_type": "gated"}
    draft("dspark-gated-markov-no-confidence-export-hf", "dspark",
          dflash_family_config("DSparkDraftModel", [1, 3, 5], no_confidence), "qwen3",
          "DSpark draft with a gated Markov head and no confidence head")
    domino = {"projector_type": "domino", "pure_draft_prefix_len": 1, "emb_dim": 32, "gru_hidden_dim": 64,
              "shift_label": True}
    draft("export-hf", "domino", dflash_family_config("DominoDraftModel", [1, 3, 5], domino), "qwen3",
          "Domino draft (GRU projector) as configs/qwen3-8b-domino.json", family=None)

    def edited(name: str, source: Path, source_id: str, edit, expect: str, trained: list[int]) -> None:
        folder = edits.copy_and_edit(source, out / name, edit)
        w.record(f"trainers/specforge/dflash_gqa/{name}", folder, family="dflash_gqa", target="qwen3",
                 trained_layers=trained, expect=f"user edit of {source_id}: {expect}", source=source_id)

    dflash_id = "trainers/specforge/dflash_gqa/dflash-generated-config-export-hf"
    dspark_id = "trainers/specforge/dflash_gqa/dspark-export-hf"
    dflash_taps = generated["dflash_config"]["target_layer_ids"]
    edited("dflash-edit-remove-mask-token-id", dflash, dflash_id, edits.remove_config_key("dflash_config", "mask_token_id"),
           "dflash_config.mask_token_id removed", dflash_taps)
    edited("dflash-edit-remove-target-layer-ids", dflash, dflash_id,
           edits.remove_config_key("dflash_config", "target_layer_ids"),
           "dflash_config.target_layer_ids removed (num_target_layers stays)", dflash_taps)
    edited("dflash-edit-cast-float32", dflash, dflash_id, edits.cast_floats("float32"), "upcast to float32", dflash_taps)
    edited("dspark-edit-drop-confidence-head", dspark, dspark_id, edits.drop_tensors("confidence_head."),
           "training-only confidence_head.* tensors deleted, config unchanged", [1, 3, 5])
    edited("dspark-edit-drop-markov-head", dspark, dspark_id, edits.drop_tensors("markov_head."),
           "markov_head.* tensors deleted, config still declares markov_rank", [1, 3, 5])
    edited("dspark-edit-hoist-markov-fields", dspark, dspark_id,
           edits.hoist_from("dflash_config", "markov_rank", "markov_head_type", "enable_confidence_head",
                            "confidence_head_with_markov"),
           "markov_rank, markov_head_type and the confidence-head flags copied to the top level", [1, 3, 5])
    edited("dspark-edit-shard-2", dspark, dspark_id, edits.shard(2), "split into two files with an index", [1, 3, 5])


def write_peagle(w: Writer) -> None:
    config = eagle3_config(architectures=["PEagleDraftModel"], num_hidden_layers=2, draft_vocab_size=VOCAB_SIZE)
    trained = w.capture_layers("peagle", config, "llama")
    run, config_file = w.train_checkpoint("peagle", "peagle", config, "llama")
    w.record("trainers/specforge/peagle/export-hf", w.export("hf", run, config_file, w.root / "peagle" / "export-hf", "llama"),
             family=None, target="llama", trained_layers=trained,
             expect="P-EAGLE draft (trained embedding, mask_hidden) as configs/qwen3-8b-peagle.json, default taps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="folder to write the drafts under")
    parser.add_argument("--targets", type=Path, required=True, help="folder of the tiny targets")
    args = parser.parse_args()
    targets = write_targets(args.targets)
    writer = Writer(args.root, targets)
    failures = {}
    for part in (write_eagle3, write_dflash_family, write_peagle):
        try:
            part(writer)
        except Exception as error:  # one family failing must not lose the others' drafts
            failures[part.__name__] = f"{type(error).__name__}: {error}"
    (args.root / "manifest.json").write_text(json.dumps({"drafts": writer.manifest, "failures": failures}, indent=1))


if __name__ == "__main__":
    main()
