"""Write drafts with speculators 0.9.0's own code, as a user of that release
would: `speculators train --dry-run` (it saves the initialised draft in the
served layout and exits before training: speculators/train/cli.py::main
@0.9.0:676-696) for every algorithm the release trains, its Python API
(`Eagle3SpeculatorConfig`, `Eagle3DraftModel`, `save_pretrained`), and
`speculators convert` over SpecForge's exports; then the edits users make.
Runs in an environment with speculators' (and hs-connectors') released code
on the path; writes `manifest.json` (one entry per folder) for the suite.

Tap numbering: speculators' ids are vLLM's hidden_states indices, the
input of target layer id, so the suite's layer (an output) is id - 1. The
release says so where it converts SpecForge/z-lab ids ("z-lab reads
hidden_states[layer_id + 1] ... while speculators uses the layer id
directly", speculators/convert/dflash/converter.py::DFlashConverter.
_build_config@0.9.0:110-126) and in its defaults [2, n/2, n-3] with id n
(the final hidden state) allowed (speculators/models/utils.py::
resolve_target_layer_ids@0.9.0:99-140).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from drafts import edits_writer as edits
from drafts.targets_writer import MASK_TOKEN_ID, NUM_LAYERS, VOCAB_SIZE, write_targets

DRAFT_VOCAB_SIZE = 256


def as_layer_outputs(ids: list[int]) -> list[int]:
    return [i - 1 for i in ids]


def default_ids() -> list[int]:
    """The ids the trainer picks when none are given (resolve_target_layer_ids),
    which a Python API user copies into the config."""
    return [2, NUM_LAYERS // 2, NUM_LAYERS - 3]


class Writer:
    def __init__(self, root: Path, targets: dict[str, Path], specforge_manifest: Path | None) -> None:
        self.root = root
        self.targets = targets
        self.manifest: list[dict[str, Any]] = []
        self.failures: dict[str, str] = {}
        self.refusals: dict[str, str] = {}  # refusals the release's own code is read to make
        self.specforge = {}
        if specforge_manifest and specforge_manifest.exists():
            self.specforge = {d["id"]: d for d in json.loads(specforge_manifest.read_text())["drafts"]}

    def record(self, case_id: str, folder: Path, *, family: str | None, target: str,
               trained_layers: list[int] | None, expect: str, source: str | None = None) -> Path:
        if source is not None:  # an edit or a convert was trained as its source was
            sources = {e["id"]: e for e in self.manifest} | self.specforge
            trained_norm = sources.get(source, {}).get("trained_norm")
        else:
            trained_norm = eagle3_trained_norm(folder)
        self.manifest.append({"id": case_id, "folder": str(folder), "family": family, "target": target,
                              "trained_layers": trained_layers, "expect": expect, "source": source,
                              "trained_norm": trained_norm})
        return folder

    def cli(self, *argv: str) -> None:
        """The `speculators` console script (speculators/__main__.py::app@0.9.0)."""
        from speculators.cli import app

        app(list(argv), prog_name="speculators", standalone_mode=False)

    def data_path(self) -> Path:
        """A data folder holding the token counts `speculators train` builds
        its t2d/d2t from when --draft-vocab-size asks for a smaller draft
        vocabulary (speculators/train/cli.py::_generate_vocab_mappings@0.9.0:360-395)."""
        data = self.root / "work" / "data"
        if not (data / "token_freq.pt").exists():
            data.mkdir(parents=True, exist_ok=True)
            torch.save({token: VOCAB_SIZE - token for token in range(0, VOCAB_SIZE, 2)}, data / "token_freq.pt")
        return data

    def dry_run(self, name: str, algorithm: str, target: str, *flags: str) -> Path:
        folder = self.root / name
        self.cli("train", "--dry-run", "--speculator-type", algorithm,
                 "--verifier-name-or-path", str(self.targets[target]), "--data-path", str(self.data_path()),
                 "--save-path", str(folder), "--log-dir", str(self.root / "work" / "logs"),
                 "--mask-token-id", str(MASK_TOKEN_ID), *flags)
        return folder


def eagle3_trained_norm(folder: Path) -> dict[str, bool] | None:
    """How a speculators EAGLE-3 draft was trained to norm its states: its
    norm_output (the class default when absent) feeds the normed state back
    across test-time-training steps, and the head always reads the normed
    state (speculators/models/eagle3/config.py::Eagle3SpeculatorConfig@0.9.0:
    76-82; models/eagle3/core.py@0.9.0:302-306). None for other algorithms."""
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig

    path = folder / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if config.get("speculators_model_type") != "eagle3":
        return None
    default = Eagle3SpeculatorConfig.model_fields["norm_output"].default
    return {"logits_normed": True, "normed_state_fed_back": bool(config.get("norm_output", default))}


def write_train_dry_runs(w: Writer) -> None:
    def draft(family: str | None, algorithm: str, how: str, target: str, ids: list[int] | None, expect: str,
              *flags: str) -> Path | None:
        """One dry run; `ids` None leaves --target-layer-ids to the trainer's default."""
        layer_flags = ["--target-layer-ids", *map(str, ids)] if ids else []
        try:
            folder = w.dry_run(f"{family or algorithm}/{how}", algorithm, target, *layer_flags, *flags)
        except Exception as error:  # the trainer refusing its own options is a finding, not a draft
            w.failures[f"train --dry-run {family or algorithm}/{how}"] = f"{type(error).__name__}: {error}"
            return None
        # The ids the trainer resolved and wrote (speculators/models/utils.py::resolve_target_layer_ids).
        written = json.loads((folder / "config.json").read_text())
        written_ids = written.get("eagle_aux_hidden_state_layer_ids") or written.get("aux_hidden_state_layer_ids")
        return w.record(f"trainers/speculators/{family or algorithm}/{how}", folder, family=family, target=target,
                        trained_layers=as_layer_outputs(written_ids), expect=expect)

    ids = None
    # The CLI's EAGLE-3 defaults: norm_before_fc and norm_output on, norm_before_residual on,
    # every draft layer sliding-window (speculators/train/config/schema.py@0.9.0:145-183, 785-800).
    eagle = draft("eagle3_llama", "eagle3", "train-dry-run", "llama", ids,
                  "speculators train --dry-run, EAGLE-3 with a Llama layer; the release's defaults "
                  "(norm_before_fc, norm_before_residual, norm_output on; sliding-window attention)",
                  "--draft-arch", "llama", "--num-layers", "1")
    draft("eagle3_qwen3", "eagle3", "train-dry-run", "qwen3", ids, "EAGLE-3 with a Qwen3 layer on a Qwen3 target",
          "--draft-arch", "qwen3", "--num-layers", "1")
    draft("eagle3_qwen3", "eagle3", "train-dry-run-qwen3-moe-target", "qwen3_moe", ids,
          "EAGLE-3 with a Qwen3 layer on a Qwen3-MoE target", "--draft-arch", "qwen3", "--num-layers", "1")
    custom = draft("eagle3_llama", "eagle3", "train-dry-run-target-layer-ids", "llama", [1, 4, 7],
                   "--target-layer-ids 1 4 7 (vLLM indices: outputs of layers 0, 3, 6)",
                   "--draft-arch", "llama", "--num-layers", "1")
    draft("eagle3_llama", "eagle3", "train-dry-run-include-last-layer", "llama", [2, 5, NUM_LAYERS],
          "a tap id equal to the target's layer count (its final hidden state), which the release allows",
          "--draft-arch", "llama", "--num-layers", "1")
    fc_norm = draft("eagle3_llama", "eagle3", "train-dry-run-fc-norm", "llama", ids,
                    "--fc-norm (per-tap RMSNorm, so norm_before_fc off)", "--draft-arch", "llama", "--num-layers", "1",
                    "--fc-norm", "--no-norm-before-fc")
    draft("eagle3_llama", "eagle3", "train-dry-run-plain", "llama", ids,
          "two layers, norm_before_fc and norm_output off, full attention (norm_before_residual stays on: "
          "the CLI has no switch for it)",
          "--draft-arch", "llama", "--num-layers", "2", "--no-norm-before-fc", "--no-norm-output",
          "--full-attention-indices", "0", "1")
    draft("eagle3_llama", "eagle3", "train-dry-run-deepseek-v3-target", "deepseek_v3", ids,
          "EAGLE-3 with a Llama layer on a DeepSeek-V3 (MLA) target", "--draft-arch", "llama", "--num-layers", "1")
    pruned = draft("eagle3_llama", "eagle3", "train-dry-run-draft-vocab", "llama", ids,
                   "--draft-vocab-size 256: t2d/d2t built from token counts", "--draft-arch", "llama",
                   "--num-layers", "1", "--draft-vocab-size", str(DRAFT_VOCAB_SIZE))
    draft("peagle_llama", "peagle", "train-dry-run", "llama", ids, "P-EAGLE draft, two Llama layers",
          "--draft-arch", "llama", "--num-layers", "2")
    peagle = draft("peagle_llama", "peagle", "train-dry-run-one-layer", "llama", ids,
                   "P-EAGLE draft, one Llama layer (mask_hidden, mask token, trained embedding)",
                   "--draft-arch", "llama", "--num-layers", "1")
    draft("peagle_llama", "peagle", "train-dry-run-fc-norm", "llama", ids,
          "P-EAGLE with --fc-norm (vLLM's P-EAGLE reader never copies fc_norm)", "--draft-arch", "llama",
          "--num-layers", "1", "--fc-norm", "--no-norm-before-fc")
    peagle_qwen3 = draft("peagle_qwen3", "peagle", "train-dry-run", "qwen3", ids,
                         "P-EAGLE draft, one Qwen3 layer on a Qwen3 target", "--draft-arch", "qwen3",
                         "--num-layers", "1")
    dflash = draft("dflash_gqa", "dflash", "dflash-train-dry-run", "qwen3", ids, "DFlash draft (Qwen3 layers)",
                   "--num-layers", "2", "--block-size", "8")
    draft("dflash_gqa", "dflash", "dflash-train-dry-run-qwen3-moe-target", "qwen3_moe", [1, 3, 5, 7],
          "DFlash draft on a Qwen3-MoE target, four taps", "--num-layers", "2", "--block-size", "8")
    dflash2 = draft("dflash2", "dflash2", "train-dry-run", "qwen3", ids, "DFlash2 draft (conv + selector)",
          "--num-layers", "2", "--block-size", "8", "--selector-rank", "32", "--selector-top-k", "4")
    dspark = draft("dflash_gqa", "dspark", "dspark-train-dry-run", "qwen3", ids,
                   "speculators' DSpark draft (DFlash backbone, Markov and confidence heads)",
                   "--num-layers", "2", "--block-size", "8", "--markov-rank", "32")
    draft(None, "xpress", "train-dry-run", "qwen3", ids, "XPress draft", "--num-layers", "2", "--block-size", "8",
          "--xpress-rank", "32")

    def edited(source: Path | None, family: str, name: str, edit, expect: str, target: str = "llama") -> None:
        """A copy of `source` edited; it was trained on what `source` was."""
        if source is None:
            return
        entry = next(e for e in w.manifest if e["folder"] == str(source))
        folder = edits.copy_and_edit(source, w.root / family / name, edit)
        w.record(f"trainers/speculators/{family}/{name}", folder, family=family, target=target,
                 trained_layers=entry["trained_layers"], expect=f"user edit of {entry['id']}: {expect}",
                 source=entry["id"])

    edited(eagle, "eagle3_llama", "edit-cast-float16", edits.cast_floats("float16"), "cast to float16")
    edited(dflash2, "dflash2", "edit-remove-selector-top-k", edits.remove_config_key("selector_top_k"),
           "selector_top_k removed (vLLM's reader copies only the fields present into dflash_config)", "qwen3")
    edited(dflash2, "dflash2", "edit-drop-candidate-selector", edits.drop_tensors("candidate_selector."),
           "candidate_selector.* deleted, taken for a training head", "qwen3")
    edited(eagle, "eagle3_llama", "edit-shard-2", edits.shard(2), "split into two files with an index")
    edited(eagle, "eagle3_llama", "edit-rename-architecture", edits.set_config(architectures=["LlamaForCausalLMEagle3"]),
           "architectures renamed to SGLang's LlamaForCausalLMEagle3 (still the speculators layout)")
    edited(eagle, "eagle3_llama", "edit-blank-verifier", edits.set_config(speculators_config={
        "verifier": {"name_or_path": None, "architectures": ["LlamaForCausalLM"]}}),
           "speculators_config.verifier.name_or_path blanked before publishing")
    edited(eagle, "eagle3_llama", "edit-flatten-for-sglang", edits.flatten_speculators_eagle3(id_shift=0),
           "rewritten in SGLang's shape (top-level layer config, eagle_config, midlayer.*), ids copied as written "
           "(hidden_states indices)")
    edited(eagle, "eagle3_llama", "edit-flatten-for-sglang-ids-as-outputs",
           edits.flatten_speculators_eagle3(id_shift=-1),
           "rewritten in SGLang's shape with the ids converted to layer outputs")
    edited(eagle, "eagle3_llama", "edit-drop-embed-tokens", edits.drop_tensors("embed_tokens."),
           "embed_tokens.weight deleted (a copy of the target's)")
    edited(custom, "eagle3_llama", "edit-remove-tap-ids", edits.remove_config_key("eagle_aux_hidden_state_layer_ids"),
           "eagle_aux_hidden_state_layer_ids removed; trained on outputs of 0, 3, 6")
    edited(fc_norm, "eagle3_llama", "edit-remove-fc-norm-key", edits.remove_config_key("fc_norm"),
           "fc_norm key removed, fc_norm weights still shipped")
    edited(pruned, "eagle3_llama", "edit-drop-d2t-t2d", edits.drop_tensors("d2t", "t2d"),
           "d2t/t2d deleted from a 256-token draft vocabulary")
    edited(dflash, "dflash_gqa", "dflash-edit-remove-tap-ids", edits.remove_config_key("aux_hidden_state_layer_ids"),
           "aux_hidden_state_layer_ids removed from config.json", "qwen3")
    edited(dflash, "dflash_gqa", "dflash-edit-cast-float32", edits.cast_floats("float32"), "upcast to float32",
           "qwen3")
    edited(peagle, "peagle_llama", "edit-remove-mask-token-id", edits.remove_config_key("mask_token_id"),
           "mask_token_id removed (vLLM's reader indexes it)")
    edited(peagle, "peagle_llama", "edit-null-mask-token-id", edits.set_config(mask_token_id=None),
           "mask_token_id null, as PEagleSpeculatorConfig defaults it")
    edited(peagle, "peagle_llama", "edit-drop-mask-hidden", edits.drop_tensors("mask_hidden"),
           "mask_hidden deleted, taken for training state")
    edited(peagle, "peagle_llama", "edit-flatten-mask-hidden", edits.reshape_tensor("mask_hidden", (-1,)),
           "mask_hidden stored flat, [taps x hidden]")
    edited(peagle_qwen3, "peagle_qwen3", "edit-remove-tap-ids", edits.remove_config_key("eagle_aux_hidden_state_layer_ids"),
           "eagle_aux_hidden_state_layer_ids removed; trained on the CLI's default layers", "qwen3")
    edited(dspark, "dflash_gqa", "dspark-edit-remove-mask-token-id", edits.remove_config_key("mask_token_id"),
           "mask_token_id removed from config.json", "qwen3")
    edited(dspark, "dflash_gqa", "dspark-edit-drop-confidence-head", edits.drop_tensors("confidence_head."),
           "training-only confidence_head.* deleted", "qwen3")


def write_python_api(w: Writer) -> None:
    """The release's Python API as its README shows it: a config object,
    the draft class, `save_pretrained`; with and without the verifier's
    embedding and head loaded (DraftVocabMixin fills them with NaN until
    then: speculators/model.py::DraftVocabMixin._init_vocab@0.9.0:37-80)."""
    from transformers import LlamaConfig, Qwen3Config

    from speculators import Eagle3DraftModel, Eagle3SpeculatorConfig, SpeculatorsConfig, VerifierConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    ids = default_ids()
    for family, layer_class, target in (("eagle3_llama", LlamaConfig, "llama"), ("eagle3_qwen3", Qwen3Config, "qwen3")):
        layer = layer_class(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                            max_position_embeddings=2048, tie_word_embeddings=False)
        for load_verifier in (True, False):
            config = Eagle3SpeculatorConfig(
                transformer_layer_config=layer, draft_vocab_size=VOCAB_SIZE, eagle_aux_hidden_state_layer_ids=ids,
                speculators_config=SpeculatorsConfig(
                    algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
                    default_proposal_method="greedy", verifier=VerifierConfig.from_pretrained(str(w.targets[target]))))
            torch.manual_seed(0)
            model = Eagle3DraftModel(config)
            how = "python-api-save-pretrained" if load_verifier else "python-api-save-pretrained-no-verifier-weights"
            if load_verifier:
                model.load_verifier_weights()
            model.save_pretrained(w.root / family / how)
            w.record(f"trainers/speculators/{family}/{how}", w.root / family / how, family=family, target=target,
                     trained_layers=as_layer_outputs(ids),
                     expect="Eagle3SpeculatorConfig + Eagle3DraftModel + save_pretrained"
                     + ("" if load_verifier else ", verifier weights never loaded: embed_tokens and lm_head are NaN"))


def write_converts(w: Writer) -> None:
    """`speculators convert` over SpecForge 0.2.0's exports (an EAGLE-3 and a
    DFlash checkpoint from another trainer, the command's purpose)."""
    plans = [
        ("eagle3_llama", "convert-specforge-export", "trainers/specforge/eagle3_llama/export-hf-custom-taps", "eagle3",
         None, "speculators convert --algorithm eagle3 of SpecForge's export; its eagle_config tap ids are not read"),
        ("eagle3_llama", "convert-specforge-export-with-layer-ids", "trainers/specforge/eagle3_llama/export-hf-custom-taps",
         "eagle3", {"eagle_aux_hidden_state_layer_ids": [i + 1 for i in [0, 3, 6]]},
         "convert with --algorithm-kwargs giving the tap ids in speculators' numbering"),
        ("eagle3_llama", "convert-specforge-fc-norm-export", "trainers/specforge/eagle3_llama/fc-norm-export-hf", "eagle3",
         {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]},
         "convert of an fc_norm EAGLE-3 export: the legacy model it loads into has no fc_norm"),
        ("dflash_gqa", "convert-specforge-dflash-export", "trainers/specforge/dflash_gqa/dflash-generated-config-export-hf",
         "dflash", None, "speculators convert --algorithm dflash of SpecForge's DFlash export"),
        ("dflash_gqa", "convert-specforge-dflash-last-layer-tap",
         "trainers/specforge/dflash_gqa/dflash-last-layer-tap-export-hf", "dflash", None,
         "convert of a DFlash export tapping the last target layer, which the converter leaves out of the ids"),
    ]
    # Sources the release's converter refuses, and why: a user gets no
    # draft to deploy, so there is no case, and the run says it was expected.
    refused = {
        "trainers/specforge/dflash_gqa/dflash-last-layer-tap-export-hf":
            "the converter drops the last target layer from the tap ids (it is fed to the draft apart in "
            "speculators' training) but keeps fc sized for every tap, so loading the weights into the model "
            "it builds fails on fc's size (speculators/convert/dflash/converter.py::DFlashConverter."
            "_build_config@0.9.0:120-126; _remap_weights:151-165 slices fc only for fused qkv)",
    }
    for family, how, source_id, algorithm, kwargs, expect in plans:
        source = w.specforge.get(source_id)
        if source is None:
            continue
        folder = w.root / family / how
        argv = ["convert", source["folder"], "--verifier", str(w.targets[source["target"]]),
                "--algorithm", algorithm, "--output-path", str(folder)]
        if kwargs:
            argv += ["--algorithm-kwargs", json.dumps(kwargs)]
        try:
            w.cli(*argv)
        except Exception as error:  # the converter refusing a source is a finding, not a draft
            if source_id in refused:
                w.refusals[f"convert {source_id}"] = f"{refused[source_id]}; it raised {type(error).__name__}"
            else:
                w.failures[f"convert {source_id}"] = f"{type(error).__name__}: {error}"
            continue
        w.record(f"trainers/speculators/{family}/{how}", folder, family=family, target=source["target"],
                 trained_layers=source["trained_layers"], expect=expect, source=source_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="folder to write the drafts under")
    parser.add_argument("--targets", type=Path, required=True, help="folder of the tiny targets")
    parser.add_argument("--specforge-manifest", type=Path, help="SpecForge's drafts, for speculators convert")
    args = parser.parse_args()
    writer = Writer(args.root, write_targets(args.targets), args.specforge_manifest)
    for part in (write_train_dry_runs, write_python_api, write_converts):
        try:
            part(writer)
        except Exception as error:  # one part failing must not lose the others' drafts
            writer.failures[part.__name__] = f"{type(error).__name__}: {error}"
    (args.root / "manifest.json").write_text(
        json.dumps({"drafts": writer.manifest, "failures": writer.failures, "refusals": writer.refusals}, indent=1))


if __name__ == "__main__":
    main()
