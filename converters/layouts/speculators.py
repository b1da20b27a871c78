"""EAGLE-3 drafts saved by vLLM's `speculators` trainer: recognising its
config shape and reading it as the config the serving engine loads.

A speculators checkpoint is a Hugging Face folder (`config.json` +
`model.safetensors`, written by `save_pretrained`,
vllm-project/speculators src/speculators/train/checkpointer.py@c05b95b:346),
but its config is not a transformers config (read at c05b95b):

    {"architectures": ["Eagle3Speculator"] (the default; a trained draft
                      saves its model class, "Eagle3DraftModel"),
                                                     models/eagle3/config.py:28-31
     "speculators_model_type": "eagle3",             models/eagle3/config.py:27
     "transformer_layer_config": {model_type, hidden_size, vocab_size (the
                                  target's), ...},   models/eagle3/config.py:33-36, 117-120
     "draft_vocab_size": 32000,                      models/eagle3/config.py:38-41
     "eagle_aux_hidden_state_layer_ids": [..]|null,  models/eagle3/config.py:53-56
     "target_hidden_size": int|null, "norm_before_fc", "fc_norm", "norm_output",
     "norm_before_residual",                         models/eagle3/config.py:43-81
     "speculators_config": {algorithm, proposal_methods, verifier},
     "speculators_version": ...}                     config.py:277-287

and no top-level `model_type` (`to_dict` removes it, config.py:316-332).
The engine's config loader finds no `model_type` it parses and no
architecture it registers, so the folder is not servable as it is.

Tensor names are the draft module's (models/eagle3/core.py:76, 94, 116;
model.py:54-66; models/eagle3/model_definitions.py:37): `fc.weight`,
`layers.0.*` (with `layers.0.hidden_norm.weight`), `norm.weight`,
`lm_head.weight`, `embed_tokens.weight`, `d2t`/`t2d` when the draft
vocabulary is pruned, `fc_norm.{i}.weight` / `input_norm.weight` when
declared; `verifier_*` are never saved (core.py:39-42). `layers.0.` is the
name the engine maps to `midlayer.` itself, so only the config needs
rewriting.

A training run saves one such folder per epoch under the run's checkpoint
folder (`<path>/<epoch>/`, checkpointer.py@c05b95b:55-70, 122-153), with
`checkpoint_best` a link to the best epoch's (155-199): `locate_epoch`
reads the newest. Everything else here is a pure function of the config
dict.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dspark.converters.layouts.markers import SPECULATORS_TYPE_FIELD
from dspark.schema.families import EAGLE3_LLAMA, EAGLE3_MLA, EAGLE3_QWEN3, PEAGLE_LLAMA, PEAGLE_QWEN3
from dspark.schema.findings import Finding
from dspark.schema.inventory import printable_name

TRAINER = "speculators"
BEST_EPOCH_LINK = "checkpoint_best"
TYPE_FIELD = SPECULATORS_TYPE_FIELD
LAYER_CONFIG_FIELD = "transformer_layer_config"
EAGLE3_TYPE = "eagle3"
TAP_IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
# P-EAGLE (models/peagle/config.py::PEagleSpeculatorConfig@speculators==0.9.0:
# 13-45): Eagle3SpeculatorConfig's fields plus the mask token of its parallel
# groups; vLLM reads it as PeagleLlamaForCausalLM or PeagleQwen3ForCausalLM
# by the layer's model_type, served as EAGLE-3 with parallel drafting
# (vllm/transformers_utils/configs/speculators/algos.py::update_peagle@
# vllm==0.33.0:75-85; base.py::build_vllm_speculative_config:133-134).
PEAGLE_TYPE = "peagle"
PEAGLE_MASK_FIELD = "mask_token_id"

# Top-level fields of Eagle3SpeculatorConfig that mean the same thing in
# the engine's EAGLE-3 config (models/eagle3/config.py@c05b95b:38-81). A
# `null` (speculators' "not set") is left out rather than written.
CARRIED_FIELDS = (
    "draft_vocab_size",
    "target_hidden_size",
    TAP_IDS_FIELD,
    "norm_before_fc",
    "fc_norm",
    "norm_output",
    "norm_before_residual",
    "torch_dtype",
    "dtype",
)
# speculators' own bookkeeping: no serving meaning.
DROPPED_FIELDS = (
    TYPE_FIELD, LAYER_CONFIG_FIELD, "speculators_config", "speculators_version", "embed_requires_grad",
    "architectures", "transformers_version",
)
# Layer configs whose attention is MLA go to the MLA EAGLE-3 model; a qwen3
# layer (speculators builds llama and qwen3 layers,
# models/eagle3/model_definitions.py@c05b95b:135-142) to the Qwen3-layer one,
# as vLLM's own reader picks Eagle3Qwen3ForCausalLM for it
# (vllm/transformers_utils/configs/speculators/algos.py:38-46@vllm==0.33.0);
# the rest to the Llama one.
MLA_MODEL_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2")
QWEN3_MODEL_TYPES = ("qwen3",)


@dataclass(frozen=True)
class TrainerConfig:
    """A trainer's config read as the engine's: `config` is what `convert`
    writes (before normalisation); `findings` say how it was read and what
    the trainer left unsaid."""

    trainer: str
    shape: str  # what the file is, in words
    config: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)


def is_speculators_config(config: Mapping[str, Any]) -> bool:
    return TYPE_FIELD in config and isinstance(config.get(LAYER_CONFIG_FIELD), Mapping)


def read_speculators_config(config: Mapping[str, Any], config_file: str) -> TrainerConfig | None:
    """The engine's config for a speculators `eagle3`, `peagle`, `dflash`,
    `dflash2` or `dspark` config; None for any other speculators model (MTP:
    no family dspark models), which then reads as an unknown family (ENG007).
    A P-EAGLE config is read into vLLM's P-EAGLE class, which only engines
    that register it resolve (ENG006 on the others)."""
    if not is_speculators_config(config):
        return None
    if config.get(TYPE_FIELD) in BLOCK_DRAFT_TYPES:
        return _read_block_draft(config, config_file)
    kind = config.get(TYPE_FIELD)
    if kind not in (EAGLE3_TYPE, PEAGLE_TYPE):
        return None
    layer = dict(copy.deepcopy(config[LAYER_CONFIG_FIELD]))
    out = {k: v for k, v in layer.items() if k not in DROPPED_FIELDS}
    for key in CARRIED_FIELDS + ((PEAGLE_MASK_FIELD,) if kind == PEAGLE_TYPE else ()):
        if config.get(key) is not None:
            out[key] = copy.deepcopy(config[key])
    layer_type = layer.get("model_type")
    if kind == PEAGLE_TYPE:
        # The class vLLM's reader names by the layer's model_type (a P-EAGLE
        # family of that layer; engines without it refuse it, ENG006).
        family = PEAGLE_QWEN3 if layer_type in QWEN3_MODEL_TYPES else PEAGLE_LLAMA
    else:
        family = (EAGLE3_MLA if layer_type in MLA_MODEL_TYPES else EAGLE3_QWEN3 if layer_type in QWEN3_MODEL_TYPES
                  else EAGLE3_LLAMA)
    architecture = family.architectures[0]
    out["architectures"] = [architecture]
    what = "PEagleSpeculatorConfig" if kind == PEAGLE_TYPE else "Eagle3SpeculatorConfig"
    shape = (f"speculators' {what} ({TYPE_FIELD} {kind!r}, architectures "
             f"{config.get('architectures')!r}, the layer under {LAYER_CONFIG_FIELD})")
    read_as = (f"the {family.name} config dspark convert writes" if kind == EAGLE3_TYPE else
               f"the {family.name} config vLLM's own reader builds (algos.py::update_peagle@vllm==0.33.0:53-87)")
    findings = [Finding(
        "SRC005",
        f"{config_file} is {shape}: read as {read_as} "
        f"(the {LAYER_CONFIG_FIELD} fields at the top level, architectures [{architecture!r}], "
        f"model_type {layer.get('model_type')!r}).",
        file=config_file,
        detail={"trainer": TRAINER, "family": family.name, "layer_model_type": layer.get("model_type"),
                # What vLLM's own reader of this shape takes as it is
                # (vllm/transformers_utils/configs/speculators/algos.py:15-50@vllm==0.33.0):
                # the ids in its numbering, norm_before_residual true when absent
                # (false for P-EAGLE: algos.py::update_peagle@vllm==0.33.0:71-73).
                "as_written": {TAP_IDS_FIELD: copy.deepcopy(config.get(TAP_IDS_FIELD)),
                               "norm_before_residual": config.get("norm_before_residual", kind == EAGLE3_TYPE)},
                # speculators' own class defaults it to false
                # (models/eagle3/config.py::Eagle3SpeculatorConfig@0.9.0:43-46): absent, the
                # draft was trained without it, and vLLM's reader serves it with it
                # (P-EAGLE's reader defaults it to false, as its class does:
                # algos.py::update_peagle@vllm==0.33.0:71-73)
                "norm_before_residual_absent": kind == EAGLE3_TYPE and "norm_before_residual" not in config},
    )]
    ids = config.get(TAP_IDS_FIELD)
    if isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        # speculators numbers a tap by its index in the verifier's
        # hidden_states (0 is the embedding output; convert/dflash/
        # converter.py@c05b95b:117-126 adds 1 to z-lab's layer ids for that
        # reason); TokenSpeed numbers it by the layer whose output it is and
        # captures hidden_states[id + 1] (models/base/causal_lm.py@f4d8ec6e:
        # 133-144). Written for the engine, every id is one less.
        out[TAP_IDS_FIELD] = [t - 1 for t in ids]
    # No ids: speculators trains on hidden_states [2, N//2, N-3]
    # (models/utils.py@c05b95b:40-57), the very layers the engine's target
    # captures by default as ids [1, N//2-1, N-4] (execution/factory.py@
    # f4d8ec6e:44-75, causal_lm.py@f4d8ec6e:137-140): nothing to write.
    return TrainerConfig(TRAINER, shape, out, findings)


# speculators' DFlash and DSpark drafts (models/dflash/config.py,
# models/dspark/config.py@0.9.0): the layer under transformer_layer_config,
# the tap ids in `aux_hidden_state_layer_ids` as hidden_states indices, the
# block fields at the top level. vLLM's reader of this shape is the
# reference for what they mean to a serving engine
# (vllm/transformers_utils/configs/speculators/algos.py::update_dflash,
# ::update_dspark@vllm==0.33.0:88-209): DFlashDraftModel with
# dflash_config {mask_token_id, target_layer_ids: each id - 1}; DSpark as
# Qwen3DSparkModel with target_layer_ids (each id - 1), the mask token and
# the Markov and confidence-head fields at the top level.
# DFlash2 (models/dflash2/config.py@0.9.0:14-44) is DFlash's shape plus the
# convolution and selector fields at the top level, which vLLM's reader
# copies into dflash_config when not null, architectures DFlash2DraftModel
# (algos.py::update_dflash2@vllm==0.33.0:129-149).
BLOCK_DRAFT_TYPES = ("dflash", "dflash2", "dspark")
_DFLASH2_NESTED = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
BLOCK_TAP_IDS_FIELD = "aux_hidden_state_layer_ids"
_BLOCK_CARRIED = ("draft_vocab_size", "target_hidden_size", "block_size", "torch_dtype", "dtype")
_DSPARK_CARRIED = ("markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov",
                   "use_aux_hidden_state")


def _read_block_draft(config: Mapping[str, Any], config_file: str) -> TrainerConfig:
    kind = config[TYPE_FIELD]
    layer = dict(copy.deepcopy(config[LAYER_CONFIG_FIELD]))
    out = {k: v for k, v in layer.items() if k not in DROPPED_FIELDS}
    for key in _BLOCK_CARRIED + (_DSPARK_CARRIED if kind == "dspark" else ()):
        if config.get(key) is not None:  # speculators writes null for "not set"
            out[key] = copy.deepcopy(config[key])
    ids = config.get(BLOCK_TAP_IDS_FIELD)
    # hidden_states indices, one above the layer whose output each reads
    layer_ids = ([t - 1 for t in ids] if isinstance(ids, list) and ids
                 and all(isinstance(t, int) and not isinstance(t, bool) for t in ids) else None)
    mask = config.get("mask_token_id")
    if kind == "dspark":
        out["architectures"] = ["Qwen3DSparkModel"]
        if layer_ids is not None:
            out["target_layer_ids"] = layer_ids
        if mask is not None:
            out["mask_token_id"] = mask
    else:
        out["architectures"] = ["DFlash2DraftModel" if kind == "dflash2" else "DFlashDraftModel"]
        nested = {"mask_token_id": mask, "target_layer_ids": layer_ids}
        if kind == "dflash2":
            nested.update({key: copy.deepcopy(config.get(key)) for key in _DFLASH2_NESTED})
            # TokenSpeed's DFlash2 model reads the block nested first, then the
            # top level; written beside the fields it is built with.
            nested["block_size"] = config.get("block_size")
        out["dflash_config"] = {k: v for k, v in nested.items() if v is not None}
    shape = (f"speculators' {kind} config ({TYPE_FIELD} {kind!r}, architectures {config.get('architectures')!r}, "
             f"the layer under {LAYER_CONFIG_FIELD})")
    where = "target_layer_ids" if kind == "dspark" else "dflash_config"
    family = "dflash2" if kind == "dflash2" else "dflash_gqa"
    findings = [Finding(
        "SRC005",
        f"{config_file} is {shape}: read as the {family} config dspark convert writes (the "
        f"{LAYER_CONFIG_FIELD} fields at the top level, architectures {out['architectures']!r}, "
        f"{BLOCK_TAP_IDS_FIELD} {ids!r} as {where}'s layer ids, each one less, as vLLM's reader of this shape "
        "takes them).",
        file=config_file,
        detail={"trainer": TRAINER, "family": family, "layer_model_type": layer.get("model_type"),
                "as_written": {}},
    )]
    return TrainerConfig(TRAINER, shape, out, findings)


def epoch_folders(folder: Path) -> dict[int, Path]:
    """A speculators checkpoint folder's epochs: the subfolders named by a
    number (links, such as `epoch0_step16626` or `checkpoint_best`, are
    names for them, and `interrupted` is not one: checkpointer.py@c05b95b:
    122-141) that hold a model.safetensors."""
    epochs = {}
    try:
        children = list(folder.iterdir())
    except OSError:
        return {}
    for child in children:
        if child.name.isdigit() and not child.is_symlink() and (child / "model.safetensors").is_file():
            epochs[int(child.name)] = child
    return epochs


def holds_epochs(folder: Path) -> bool:
    """Whether `folder` is a speculators run's checkpoint folder: no
    weights of its own (no file a loader or another reader would take),
    epochs, and the newest one's config in speculators' shape. Another
    folder of numbered subfolders is not guessed at."""
    from dspark.converters.layouts.hf import CONFIG_NAME, TORCH_SUFFIXES

    try:
        own = [p.name for p in folder.iterdir() if p.is_file()]
    except OSError:
        return False
    if any(name.endswith((".safetensors", ".metadata", *TORCH_SUFFIXES)) for name in own):
        return False
    epochs = epoch_folders(folder)
    if not epochs:
        return False
    try:
        text = (epochs[max(epochs)] / CONFIG_NAME).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return f'"{TYPE_FIELD}"' in text


def locate_epoch(folder: Path) -> tuple[Path, Finding]:
    """The newest epoch of a speculators checkpoint folder (what the
    checkpointer resumes from, checkpointer.py@c05b95b:122-141), and an
    SRC001 note that says which, and where checkpoint_best points when it
    is another."""
    epochs = epoch_folders(folder)
    newest = max(epochs)
    best = None
    link = folder / BEST_EPOCH_LINK
    if link.is_symlink():
        target = Path(link.readlink()).name
        best = int(target) if target.isdigit() else None
    shown = printable_name(str(folder))
    also = (f" {BEST_EPOCH_LINK} points to epoch {best}: pass {printable_name(str(folder / str(best)))} to read "
            "that one." if best is not None and best != newest else "")
    return epochs[newest], Finding(
        "SRC001",
        f"{shown} is a speculators checkpoint folder with {len(epochs)} epoch"
        f"{'s' if len(epochs) != 1 else ''} ({', '.join(str(n) for n in sorted(epochs))}); reading epoch "
        f"{newest}, the newest (the one speculators resumes from).{also} Pass an epoch folder to read another.",
        file=f"{newest}/",
        detail={"epochs": sorted(epochs), "picked": newest, "best": best},
    )


def as_vllm_reads_it(config: Mapping[str, Any], finding: Finding) -> dict[str, Any]:
    """The engine config read from a speculators config (`finding` is the
    reader's SRC005), as vLLM's own SpeculatorsConfig reads the original:
    the tap ids as written (vLLM numbers them as speculators does) and
    norm_before_residual true unless the file says otherwise
    (vllm/transformers_utils/configs/speculators/algos.py:30-50@vllm==0.33.0)."""
    out = copy.deepcopy(dict(config))
    written = (finding.detail or {}).get("as_written") or {}
    ids = written.get(TAP_IDS_FIELD)
    if ids:
        out[TAP_IDS_FIELD] = copy.deepcopy(ids)
    if written.get("norm_before_residual") is not None:
        out["norm_before_residual"] = written["norm_before_residual"]
    return out
