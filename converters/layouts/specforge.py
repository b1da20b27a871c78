"""EAGLE-3 drafts trained with SpecForge (sgl-project/SpecForge): where its
draft weights sit, which of its checkpoints to read, and where its draft
config is.

Read at a6b6b02 (and the older trainer at 20e2e3f):

* The draft module, `LlamaForCausalLMEagle3`, names its weights as the
  engine does: `midlayer.*`, `fc.weight`, `norm.weight`, `lm_head.weight`,
  `fc_norm.{i}.weight` when declared, and the `t2d`/`d2t` buffers
  (specforge/modeling/draft/llama3_eagle.py@a6b6b02:1654-1699). Its
  `export --to sglang` writes them unchanged and without the embedding
  (specforge/export/to_sglang.py@a6b6b02:33-38, 84-86), with the draft
  config it was trained from: `architectures ["LlamaForCausalLMEagle3"]`,
  `model_type "llama"`, `draft_vocab_size` (configs/*-eagle3.json). Such a
  folder, like the older trainer's `epoch_{e}_step_{s}/` save
  (scripts/train_eagle3.py@20e2e3f:677-724, the same names), is already in
  the engine's layout and is judged as it is.
* Some of its configs give the tap ids only under `eagle_config`
  (configs/deepseek-v3-671b-eagle3.json@a6b6b02): the target reads that
  list, but the Llama draft counts the top-level one only;
  `dspark.schema.normalise` copies it to the top level on convert.
* A training checkpoint is `<output_dir>/{run_id}-step{N}/training_state.pt`,
  a torch.save dict whose draft weights are under `draft_state_dict` beside
  the step counters and (DDP) optimizer state, with one
  `training_state_rank{r}.pt` per rank beside it (that rank's optimizer
  shard and RNG state, no weights). A step folder without
  `training_state.pt` is an unfinished save. `<output_dir>` may hold several
  steps and several runs, with `{run_id}-latest` and `{run_id}-best`
  symlinks to step folders and `{run_id}.best_meta.json`
  (specforge/training/checkpoint.py@a6b6b02:11-15, 32, 55-67, 98-105,
  172-182, 428-442, 468-472; specforge/training/controller.py@a6b6b02:
  843-879). The engine never reads a `.pt`: `dspark check` says so (SRV001)
  and `dspark convert` writes the folder.
* No config is saved with a checkpoint or in the output folder (the
  exporters take it as an argument: specforge/export/checkpoint_io.py@
  a6b6b02:144-161). What the run recorded is its source: under
  `specforge_model_provenance`, `draft_config` is the config file's absolute
  path with the sha256 of its contents
  (specforge/training/provenance.py@a6b6b02:101-120, 263-292;
  specforge/algorithms/common/providers.py@a6b6b02:37, 341-344;
  specforge/training/trainer.py@a6b6b02:194, 266-276). dspark reads that
  file when it is still there with the same contents; otherwise the user
  passes `--config`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding
from dspark.schema.inventory import printable_name

TRAINING_STATE_FILE = "training_state.pt"
# The entry of training_state.pt that holds the draft's weights.
DRAFT_STATE_KEY = "draft_state_dict"
# `training_state_rank{r}.pt`: one rank's optimizer shard and RNG state.
_RANK_STATE = re.compile(r"training_state_rank\d+\.pt")
# `{run_id}-step{N}` (checkpoint.py@a6b6b02:55-56, 459-466).
_STEP_FOLDER = re.compile(r"(?P<run>.+)-step(?P<step>\d+)")
LATEST_LINK = "{run}-latest"
BEST_LINK = "{run}-best"
BEST_META = "{run}.best_meta.json"
PROVENANCE_KEY = "specforge_model_provenance"
DRAFT_CONFIG_FIELD = "draft_config"

NO_CONFIG_SAVED = (
    "SpecForge saves no draft config with its checkpoints (its exporters are given one: "
    "specforge/export/checkpoint_io.py@a6b6b02:144-161)"
)


def is_rank_state(path: Path) -> bool:
    return _RANK_STATE.fullmatch(path.name) is not None


def step_number(folder: Path) -> int | None:
    match = _STEP_FOLDER.fullmatch(folder.name)
    return int(match.group("step")) if match else None


def _step_folders(folder: Path) -> dict[str, dict[int, Path]]:
    """Complete `{run_id}-step{N}` folders under `folder` (those holding
    training_state.pt, as SpecForge counts them), by run id and N."""
    runs: dict[str, dict[int, Path]] = {}
    try:
        children = list(folder.iterdir())
    except OSError:
        return runs
    for child in children:
        match = _STEP_FOLDER.fullmatch(child.name)
        if match and not child.is_symlink() and (child / TRAINING_STATE_FILE).is_file():
            runs.setdefault(match.group("run"), {})[int(match.group("step"))] = child
    return runs


def holds_training_state(folder: Path) -> bool:
    """Whether `folder` is a SpecForge step folder or an output folder
    holding step folders (file names only)."""
    return (folder / TRAINING_STATE_FILE).is_file() or bool(_step_folders(folder))


@dataclass(frozen=True)
class TrainingStateLocation:
    """The training_state.pt to read and what the user's path told about it."""

    state_file: Path
    note: Finding | None  # SRC001 when a step was picked for the user


def refuse_rank_state(path: Path) -> None:
    if is_rank_state(path):
        raise UsageError(
            f"{printable_name(str(path))} is one rank's optimizer and RNG state of a SpecForge checkpoint; it "
            "holds no draft weights.",
            hint=f"Pass the {TRAINING_STATE_FILE} beside it, or the step folder that holds both.",
        )


def locate_training_state(path: Path) -> TrainingStateLocation:
    """Accept a SpecForge step folder or its output folder. From several
    steps of one run the one `{run_id}-latest` points to is read, else the
    highest N (SpecForge's own choice: checkpoint.py@a6b6b02:377-385); a
    SRC001 note says which and why. Several runs in one folder are not
    chosen between (nor does SpecForge: checkpoint.py@a6b6b02:353-372)."""
    if (path / TRAINING_STATE_FILE).is_file():
        return TrainingStateLocation(path / TRAINING_STATE_FILE, None)
    runs = _step_folders(path)
    if not runs:
        raise UsageError(
            f"{printable_name(str(path))}: no SpecForge checkpoint here (no {TRAINING_STATE_FILE} and no "
            f"{{run_id}}-step{{N}}/{TRAINING_STATE_FILE}).",
            hint="Pass the training output folder, a {run_id}-step{N} folder or its training_state.pt.",
        )
    if len(runs) > 1:
        newest = ", ".join(f"{run!r} (newest {steps[max(steps)].name})" for run, steps in sorted(runs.items()))
        raise UsageError(
            f"{printable_name(str(path))} holds the checkpoints of {len(runs)} SpecForge runs: {newest}; dspark "
            "does not choose between runs.",
            hint="Pass the {run_id}-step{N} folder to read.",
        )
    ((run, steps),) = runs.items()
    picked, how, detail = _pick_step(path, run, steps)
    names = [steps[n].name for n in sorted(steps)]
    listed = ", ".join(names[-5:])
    more = f"{len(names) - 5} more and " if len(names) > 5 else ""
    shown = f"{picked.name}/{TRAINING_STATE_FILE}"
    note = Finding(
        "SRC001",
        f"{printable_name(str(path))} is a SpecForge training output with {len(steps)} checkpoint"
        f"{'s' if len(steps) != 1 else ''} of run {printable_name(run)!r} ({more}{listed}); reading {shown}, "
        f"{how}. Pass a {printable_name(run)}-step{{N}} folder to read another.",
        file=shown,
        detail={"steps": names, "picked": picked.name, **detail},
    )
    return TrainingStateLocation(picked / TRAINING_STATE_FILE, note)


def _linked_step(link: Path, steps: dict[int, Path]) -> int | None:
    """The step a `{run_id}-latest` / `-best` symlink points to, when it is
    one of the complete steps here."""
    if not link.is_symlink():
        return None
    try:
        target = link.resolve()
    except (OSError, RuntimeError):
        return None
    return next((n for n, folder in steps.items() if folder.resolve() == target), None)


def _best_step(path: Path, run: str, steps: dict[int, Path]) -> int | None:
    best = _linked_step(path / BEST_LINK.format(run=run), steps)
    if best is not None:
        return best
    try:
        meta = json.loads((path / BEST_META.format(run=run)).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    step = meta.get("step") if isinstance(meta, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step in steps else None


def _pick_step(path: Path, run: str, steps: dict[int, Path]) -> tuple[Path, str, dict]:
    newest = max(steps)
    link_name = LATEST_LINK.format(run=run)
    latest = _linked_step(path / link_name, steps)
    detail: dict[str, Any] = {"latest_link": steps[latest].name if latest is not None else None}
    if latest is not None:
        how = f"the one {link_name} points to"
        if latest != newest:
            how += f" (a higher {steps[newest].name} is also here)"
        picked = steps[latest]
    else:
        reason = (f"{link_name} does not point to a complete step here" if (path / link_name).is_symlink()
                  else f"there is no {link_name} link")
        how = f"the highest step ({reason})"
        picked = steps[newest]
    best = _best_step(path, run, steps)
    if best is not None:
        detail["best"] = steps[best].name
        if steps[best] != picked:
            how += f"; the best by eval is {steps[best].name}"
    return picked, how, detail


# --------------------------------------------------------------------------
# The draft config the run recorded


@dataclass(frozen=True)
class RecordedDraftConfig:
    """The draft config a training_state.pt names: a file that is there
    with the recorded contents, or why none can be used (`problem`, a
    sentence for the user)."""

    path: Path | None
    problem: str | None


def recorded_draft_config(state: Any) -> RecordedDraftConfig:
    """Follow `specforge_model_provenance` -> `draft_config` in a loaded
    training_state.pt. The identity is `(kind, absolute path, record(s))`
    (provenance.py@a6b6b02:101-141, 339-367): a file's record, or for a
    folder one record per file, carries the sha256 of a `.json` file. The
    file is used only when it still has that hash."""
    provenance = state.get(PROVENANCE_KEY) if isinstance(state, Mapping) else None
    if provenance is None:
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE} records no draft config source "
                                         f"(no {PROVENANCE_KEY}: a checkpoint from an older SpecForge)")
    try:
        identity = dict(provenance).get(DRAFT_CONFIG_FIELD)
    except (TypeError, ValueError):
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE}'s {PROVENANCE_KEY} is not a mapping")
    if identity is None:
        return RecordedDraftConfig(None, "the run generated its draft config from the target model "
                                         "(model.draft_model_config unset) and saved it nowhere")
    if not isinstance(identity, (tuple, list)) or len(identity) < 2 or not isinstance(identity[1], str):
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE} records the draft config as {identity!r:.120}, "
                                         "which dspark does not read")
    kind, where = identity[0], identity[1]
    if kind == "reference":
        return RecordedDraftConfig(None, f"the run read its draft config from {printable_name(where)!r}, not a "
                                         "local file")
    records = identity[2] if len(identity) > 2 else None
    if isinstance(kind, str) and kind.startswith("directory"):
        path, sha256 = Path(where) / "config.json", _recorded_sha256(records, "config.json", many=True)
    elif isinstance(kind, str) and kind.startswith("file"):
        path, sha256 = Path(where), _recorded_sha256(records, "", many=False)
    else:
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE} records the draft config as a {kind!r:.40} "
                                         "source, which dspark does not read")
    shown = printable_name(str(path))
    if not path.is_file():
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE} records the draft config as {shown}, which is "
                                         "not found here")
    if sha256 is None:
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE} records the draft config as {shown} without a "
                                         "hash of its contents, so dspark cannot tell it is the file trained with")
    try:
        import hashlib  # here, not at import: a header-only check of any folder loads this module

        actual = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return RecordedDraftConfig(None, f"{shown} cannot be read ({exc.strerror or exc})")
    if actual != sha256:
        return RecordedDraftConfig(None, f"{TRAINING_STATE_FILE} records the draft config as {shown}, but that "
                                         f"file has changed since training (sha256 {actual[:12]}…, recorded "
                                         f"{sha256[:12]}…)")
    return RecordedDraftConfig(path, None)


# The tap list the run captured, recorded beside the draft config: a run
# override (`model.aux_hidden_state_layer_ids`) first, then eagle_config's,
# then the target's defaults (specforge/algorithms/model_providers.py@
# a6b6b02:188-210; specforge/training/provenance.py@a6b6b02:263-292). None in
# offline training, where no capture is resolved.
CAPTURE_LAYERS_FIELD = "capture_layers"


def recorded_capture_layers(state: Any) -> list[int] | None:
    """The capture layers a training_state.pt records, or None."""
    provenance = state.get(PROVENANCE_KEY) if isinstance(state, Mapping) else None
    try:  # saved as a mapping or as its sorted (key, value) pairs
        layers = dict(provenance).get(CAPTURE_LAYERS_FIELD) if provenance is not None else None
    except (TypeError, ValueError):
        return None
    if not isinstance(layers, (tuple, list)) or not layers:
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        return None
    return list(layers)


def _recorded_sha256(records: Any, name: str, *, many: bool) -> str | None:
    """The sha256 recorded for `name`: `("sha256", name, size, hex)` in the
    stat formats, `(name, size, hex)` in the older full-hash one."""
    candidates = records if many else [records]
    if not isinstance(candidates, (tuple, list)):
        return None
    for record in candidates:
        if not isinstance(record, (tuple, list)):
            continue
        if len(record) == 4 and record[0] == "sha256" and record[1] == name:
            digest = record[3]
        elif len(record) == 3 and record[0] == name:
            digest = record[2]
        else:
            continue
        if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest):
            return digest
    return None
