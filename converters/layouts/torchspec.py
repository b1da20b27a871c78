"""TorchSpec training runs on disk: which DCP folder to read, where the
draft's config is, and which keys of a trainer's save are the draft's.

A TorchSpec run's output folder holds (lightseekorg/TorchSpec, read at
6f21829):

    <output_dir>/config.yaml                      the resolved training config
    <output_dir>/checkpoints/latest_checkpointed_iteration.txt
    <output_dir>/checkpoints/best_checkpointed_iteration.txt   (with eval)
    <output_dir>/checkpoints/iter_NNNNNNN/model/  .metadata + __<rank>_<n>.distcp
    <output_dir>/checkpoints/iter_NNNNNNN/{optimizer,lr_scheduler}/, rng.pt, meta.json

The draft's `config.json` is not copied into the run: `config.yaml` only
records its path, under `model.draft_model_config`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from dspark.converters.layouts.markers import TORCHSPEC_EXPORT_MARKER
from dspark.converters.layouts.omegaconf_yaml import read_yaml_key
from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding
from dspark.schema.inventory import printable_name

DCP_METADATA = ".metadata"
# `checkpoint_dir = <output_dir>/checkpoints`
# (lightseekorg/TorchSpec torchspec/config/train_config.py@6f21829:329-331).
CHECKPOINTS_FOLDER = "checkpoints"
# Written after every save as the bare integer step id, no zero padding;
# TorchSpec's own loader rebuilds `iter_{n:07d}` from it
# (torchspec/training/checkpoint.py@6f21829:133-141,336-337).
LATEST_MARKER = "latest_checkpointed_iteration.txt"
# Written when eval improves; its iteration may have been rotated away
# (torchspec/controller/eval.py@6f21829:89-94, torchspec/controller/loop.py@6f21829:80-109).
BEST_MARKER = "best_checkpointed_iteration.txt"
# `_save_config_snapshot` (torchspec/config/train_config.py@6f21829:233-244).
RUN_CONFIG = "config.yaml"
DRAFT_CONFIG_KEY = ("model", "draft_model_config")  # ModelConfig.draft_model_config, train_config.py@6f21829:86

_ITERATION = re.compile(r"iter_(\d+)")


def iteration_number(folder: Path) -> int | None:
    match = _ITERATION.fullmatch(folder.name)
    return int(match.group(1)) if match else None


def _iterations(folder: Path) -> dict[int, Path]:
    """`iter_N` folders under `folder` that hold a DCP `model/`, by N."""
    found: dict[int, Path] = {}
    try:
        children = list(folder.iterdir())
    except OSError:
        return found
    for child in children:
        number = iteration_number(child)
        if number is not None and (child / "model" / DCP_METADATA).is_file():
            # `iter_0002001` and `iter_2001` both name 2001: keep the padded one TorchSpec writes
            if number not in found or child.name == f"iter_{number:07d}":
                found[number] = child
    return found


def holds_dcp(path: Path) -> bool:
    """Whether `path` is a DCP folder, an `iter_N/` folder, a folder of
    `iter_N/` folders, or a TorchSpec run folder (file names only)."""
    if (path / DCP_METADATA).is_file() or (path / "model" / DCP_METADATA).is_file():
        return True
    checkpoints = path / CHECKPOINTS_FOLDER
    if (checkpoints / LATEST_MARKER).is_file() or any((p / "model" / DCP_METADATA).is_file() for p in checkpoints.glob("iter_*")):
        return True
    return any((p / "model" / DCP_METADATA).is_file() for p in path.glob("iter_*"))


@dataclass(frozen=True)
class DcpLocation:
    """The DCP folder to read and what the user's path told about it."""

    model_dir: Path
    # The training run's output folder (holding config.yaml and
    # checkpoints/), or the folder holding iter_N/ when there is no
    # checkpoints/ level; None for a bare DCP folder.
    run_root: Path | None
    note: Finding | None  # SRC001 when an iteration was picked for the user


def locate_dcp(path: Path) -> DcpLocation:
    """Accept a DCP `model/` folder, an `iter_N/` folder, a folder of
    `iter_N/` folders (TorchSpec's `checkpoints/`) or a run's output folder
    holding `checkpoints/`. From several iterations the one
    `latest_checkpointed_iteration.txt` names is read, else the highest N;
    a SRC001 note says which and why."""
    if (path / DCP_METADATA).is_file():
        return DcpLocation(path, _run_root_of(path), None)
    if (path / "model" / DCP_METADATA).is_file():
        return DcpLocation(path / "model", _run_root_of(path / "model"), None)
    checkpoints = path / CHECKPOINTS_FOLDER if (path / CHECKPOINTS_FOLDER).is_dir() else path
    iterations = _iterations(checkpoints)
    if not iterations:
        where = (f"{checkpoints} holds no iter_N/model/{DCP_METADATA}" if checkpoints != path
                 else f"no {DCP_METADATA}, model/{DCP_METADATA} or iter_N/model/{DCP_METADATA}")
        raise UsageError(
            f"{printable_name(str(path))}: no DCP checkpoint here ({where}).",
            hint="Pass the training run's output folder (holding checkpoints/), an iter_N folder or its model/ "
            "folder.",
        )
    picked, how, detail = _pick_iteration(checkpoints, iterations)
    listed = ", ".join(iterations[n].name for n in sorted(iterations)[-5:])
    more = f"{len(iterations) - 5} more and " if len(iterations) > 5 else ""
    shown_model = picked.relative_to(path) / "model"
    note = Finding(
        "SRC001",
        f"{printable_name(str(path))} is a training run with {len(iterations)} checkpoint"
        f"{'s' if len(iterations) != 1 else ''} ({more}{listed}); reading {shown_model}, {how}. "
        "Pass an iter_N folder to read another.",
        file=str(shown_model),
        detail={"iterations": [iterations[n].name for n in sorted(iterations)], "picked": picked.name, **detail},
    )
    return DcpLocation(picked / "model", _run_root_of(picked / "model"), note)


def _read_marker(path: Path) -> tuple[int | None, str | None]:
    """The integer in a TorchSpec marker file, or why there is none."""
    if not path.is_file():
        return None, None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path.name} cannot be read ({exc})"
    if not text.isdigit() or not text.isascii():
        return None, f"{path.name} holds {text[:40]!r}, not an iteration number"
    return int(text), None


def _pick_iteration(checkpoints: Path, iterations: dict[int, Path]) -> tuple[Path, str, dict]:
    newest = max(iterations)
    latest, problem = _read_marker(checkpoints / LATEST_MARKER)
    detail: dict = {"latest_marker": latest}
    best, _ = _read_marker(checkpoints / BEST_MARKER)
    if best is not None:
        detail["best_marker"] = best
    if latest is not None and latest in iterations:
        how = f"the one {LATEST_MARKER} names"
        if latest != newest:
            how += f" (a higher {iterations[newest].name} is also here)"
        picked = iterations[latest]
    else:
        if problem:
            reason = problem
        elif latest is not None:
            reason = f"{LATEST_MARKER} names {latest}, which is not here"
        else:
            reason = f"there is no {LATEST_MARKER}"
        how = f"the highest iteration ({reason})"
        picked = iterations[newest]
    if best is not None and best in iterations and iterations[best] != picked:
        how += f"; the best by eval is {iterations[best].name}"
    elif best is not None and best not in iterations:
        how += (f"; {BEST_MARKER} names iteration {best}, which is no longer here "
                "(TorchSpec's rotation removes older iterations)")
    return picked, how, detail


def _run_root_of(model_dir: Path) -> Path | None:
    """The run's output folder above a DCP `model/` folder: `iter_N/`'s
    parent, or the folder above `checkpoints/`."""
    if iteration_number(model_dir.parent) is None:
        return None
    holder = model_dir.parent.parent
    return holder.parent if holder.name == CHECKPOINTS_FOLDER else holder


# --------------------------------------------------------------------------
# The draft config named in config.yaml


@dataclass(frozen=True)
class RunDraftConfig:
    """What the run's config.yaml says about the draft config: a file that
    exists, or why none can be used (`problem`, a sentence for the user)."""

    path: Path | None
    problem: str | None
    # config.yaml sets draft_model_config to null: TorchSpec generated it.
    generated_at_training: bool = False


def expanded_path(value: str | Path) -> Path | None:
    """`value` with a leading ~ or ~user expanded; None when that user does
    not exist here (pathlib raises RuntimeError)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        return None


def draft_config_from_run(run_root: Path, *, cwd: Path | None = None) -> RunDraftConfig:
    """Follow `model.draft_model_config` in `run_root/config.yaml`. A
    relative path is tried against the run folder, then the current folder
    (TorchSpec resolves it against its working folder at training time)."""
    config_yaml = run_root / RUN_CONFIG
    shown = printable_name(str(config_yaml))
    if not config_yaml.is_file():
        return RunDraftConfig(None, f"there is no {RUN_CONFIG} in the training run ({shown}) to name it")
    try:
        text = config_yaml.read_text(encoding="utf-8")
        value = read_yaml_key(text, *DRAFT_CONFIG_KEY)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return RunDraftConfig(None, f"{shown} could not be parsed for {'.'.join(DRAFT_CONFIG_KEY)} ({exc})")
    if value is None:
        return RunDraftConfig(None, f"{shown} sets no {'.'.join(DRAFT_CONFIG_KEY)}: TorchSpec then generates the "
                                    "draft config from the target model at training time and never saves it. "
                                    "dspark generates it the same way when the run's model.target_model_path is a "
                                    "folder here; otherwise pass --config, or run TorchSpec's tools/convert_to_hf.py "
                                    "--input-dir ITER_FOLDER --target-model-path TARGET, which writes it into the "
                                    "iteration folder, where dspark finds it (tools/convert_to_hf.py@6f21829:170-208)",
                              generated_at_training=True)
    named = expanded_path(value)
    if named is None:
        return RunDraftConfig(None, f"{shown} names {printable_name(value)} as {'.'.join(DRAFT_CONFIG_KEY)}, whose "
                                    "~user part names no user here")
    candidates = [named] if named.is_absolute() else [run_root / named, (cwd or Path.cwd()) / named]
    for candidate in candidates:
        if candidate.is_file():
            return RunDraftConfig(candidate, None)
    return RunDraftConfig(None, f"{shown} names {printable_name(value)} as {'.'.join(DRAFT_CONFIG_KEY)}, which is not "
                                "found" + ("" if named.is_absolute() else " relative to the run folder or the current folder"))


# --------------------------------------------------------------------------
# Which keys of a trainer's save are the draft's


# Entries that are trainer state, never draft weights. TorchSpec saves the
# optimizer and scheduler into folders of their own under the keys
# `optim_state` and `lr_scheduler_state`
# (lightseekorg/TorchSpec torchspec/training/checkpoint.py@6f21829:306-316),
# but a single-folder save may hold them beside the model.
NON_MODEL_PREFIXES = (
    "optim_state.", "optimizer.", "optim.", "lr_scheduler_state.", "lr_scheduler.", "scheduler.", "rng",
    "trainer_state.", "extra_state.",
)
# Sub-dicts that hold the model when no key has a `draft_model.` segment.
MODEL_PREFIXES = ("model_state.", "model.")


def has_draft_segment(fqn: str) -> bool:
    return fqn.startswith("draft_model.") or ".draft_model." in fqn


def draft_keys(fqns: list[str]) -> list[str]:
    """The keys of a training save that are the draft's weights."""
    # TorchSpec's wrapper keeps the draft as its `draft_model` attribute, so
    # its weights are keyed `model_state.model.draft_model.<name>`; its own
    # exporters keep what follows `draft_model.`
    # (lightseekorg/TorchSpec tools/convert_to_hf.py@6f21829:222-247).
    chosen = [k for k in fqns if has_draft_segment(k)]
    if chosen:
        return chosen
    for prefix in MODEL_PREFIXES:
        chosen = [k for k in fqns if k.startswith(prefix)]
        if chosen:
            return chosen
    return [k for k in fqns if not k.startswith(NON_MODEL_PREFIXES)]


# TorchSpec's exporter, in its `--vllm` mode, renames `midlayer.` to
# `layers.0.` and adds 1 to a kimi_k2 draft's tap ids ("vLLM uses 1-indexed
# layer IDs for kimi_k2", tools/convert_to_hf.py@6f21829:129-159); it marks
# its config with `_torchspec_version`. TokenSpeed reads the ids as layer
# ids (models/deepseek_v3.py@f4d8ec6e:1688-1695), so as written every tap
# is captured one layer late.
EXPORT_MARKER = TORCHSPEC_EXPORT_MARKER
VLLM_LAYER_PREFIX = "layers.0."
SHIFTED_MODEL_TYPE = "kimi_k2"
TAP_IDS_FIELD = "eagle_aux_hidden_state_layer_ids"


def vllm_shifted_taps(config: dict | None, stored_names) -> bool:
    """Whether this folder is TorchSpec's `--vllm` export of a kimi_k2
    draft, whose tap ids carry vLLM's +1. The exporter shifts only the id
    lists the config holds (tools/convert_to_hf.py@6f21829:150-157): a draft
    exported without one has nothing shifted and serves the engine's
    default taps."""
    if not isinstance(config, dict) or EXPORT_MARKER not in config:
        return False
    if config.get("model_type") != SHIFTED_MODEL_TYPE:
        return False
    holders = (config, config.get("eagle_config"))
    if not any(isinstance(h, dict) and isinstance(h.get(TAP_IDS_FIELD), list) and h[TAP_IDS_FIELD]
               for h in holders):
        return False
    return any(name.startswith(VLLM_LAYER_PREFIX) for name in stored_names)


def unshift_vllm_taps(config: dict) -> tuple[dict, list[str]]:
    """The config with vLLM's +1 taken off every tap list, and what changed."""
    out = json.loads(json.dumps(config))
    changes = []
    for holder, where in ((out, TAP_IDS_FIELD), (out.get("eagle_config"), f"eagle_config.{TAP_IDS_FIELD}")):
        if isinstance(holder, dict) and isinstance(holder.get(TAP_IDS_FIELD), list):
            before = holder[TAP_IDS_FIELD]
            holder[TAP_IDS_FIELD] = [t - 1 if isinstance(t, int) else t for t in before]
            changes.append(f"{where}: {before!r} -> {holder[TAP_IDS_FIELD]!r} (TorchSpec's --vllm export "
                           "added 1 for vLLM; the engine reads layer ids)")
    return out, changes
