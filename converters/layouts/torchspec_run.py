"""What a TorchSpec run trained with that its draft config does not say.

Read at lightseekorg/TorchSpec 6f21829:

* **Taps.** The inference engine that produces the training hidden states
  captures `inference.aux_hidden_states_layers` from the run's config when
  it is set, and `[1, N//2 - 1, N - 4]` only when it is null
  (torchspec/inference/engine/sgl_engine.py@6f21829:172-177,
  vllm_engine.py@6f21829:136-137, whose own +1 for vLLM's indexing is made
  inside the engine at 159-165; torchspec/utils/misc.py@6f21829:76-88). The
  ids are in the serving engine's convention (the default is the one
  TokenSpeed captures without ids). For DFlash an empty value is filled
  from the draft config (torchspec/train_entry.py@6f21829:220-230). So when
  the run sets a list, that list, not the draft config's, is what the draft
  was trained on, and convert must write it.
* **DFlash block size.** `training.dflash_block_size` (default 16,
  torchspec/config/train_config.py@6f21829:143) is the block the draft was
  trained to fill; the draft config never carries it. Written into the
  converted config, the engine's drafter can refuse a launch with another
  number of draft tokens (dspark says which, ENG004).
* **DFlash taps the config leaves out.** `DFlashConfig.target_layer_ids`
  defaults to None, and the model then captures
  `build_target_layer_ids(num_target_layers, target_num_hidden_layers)`
  (defaults 5 and 36), SpecForge's spacing
  (torchspec/models/draft/dflash.py@6f21829:47-80, 324-344, 365-367). The
  serving engine derives nothing, so convert writes the list.

Each value taken this way is an SRC007 note naming where it came from.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dspark.converters.json_input import parse_json_object
from dspark.converters.layouts.markers import TORCHSPEC_DFLASH_MODEL_TYPE
from dspark.converters.layouts.omegaconf_yaml import read_yaml_int_list, read_yaml_key
from dspark.converters.layouts.torchspec import RUN_CONFIG, expanded_path
from dspark.converters.layouts.trained_taps import with_trained_taps
from dspark.schema.families import DFLASH_GQA, DraftFamily
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import printable_name

AUX_LAYERS_KEY = ("inference", "aux_hidden_states_layers")
TARGET_PATH_KEY = ("model", "target_model_path")
DFLASH_BLOCK_KEY = ("training", "dflash_block_size")
_DFLASH_DEFAULT_TAP_COUNT = 5
_DFLASH_DEFAULT_TARGET_LAYERS = 36


@dataclass(frozen=True)
class RunTraining:
    """The run's config.yaml values that decide what the draft learned.
    None where the run does not set one; `problems` where a key is there
    but cannot be read with certainty."""

    aux_layers: list[int] | None = None
    block_size: int | None = None
    problems: tuple[str, ...] = ()
    # The target's layer count, where model.target_model_path is a local
    # folder with its config.json: what TorchSpec's default taps are made of.
    target_layers: int | None = None
    target_path: str | None = None


def run_training(run_root: Path) -> RunTraining:
    path = run_root / RUN_CONFIG
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return RunTraining()  # no config.yaml: the draft config is all there is
    shown = printable_name(str(path))
    problems: list[str] = []
    aux = block = None
    try:
        aux = read_yaml_int_list(text, *AUX_LAYERS_KEY)
    except ValueError as exc:
        if not str(exc).startswith("there is no"):
            problems.append(f"{shown}: {exc}")
    try:
        value = read_yaml_key(text, *DFLASH_BLOCK_KEY)  # its errors name the key
        if value is not None:
            block = int(value) if re.fullmatch(r"[+-]?\d+", value) else None
            if block is None:
                problems.append(f"{shown}: {'.'.join(DFLASH_BLOCK_KEY)} is {value!r}, not an integer")
    except ValueError as exc:
        if not str(exc).startswith("there is no"):
            problems.append(f"{shown}: {exc}")
    target_path = target_layers = None
    try:
        target_path = read_yaml_key(text, *TARGET_PATH_KEY)
    except ValueError:
        pass
    if target_path:
        target_layers = _local_target_layers(target_path, run_root)
    return RunTraining(aux or None, block, tuple(problems), target_layers, target_path)


def local_target_folder(named: str | Path, run_root: Path) -> Path | None:
    """The run's model.target_model_path as a folder on this machine holding
    a config.json (relative: to the run folder, then the current folder, as
    TorchSpec resolved it from its working folder); None for a Hub id or a
    folder that is not here."""
    named = expanded_path(named)
    if named is None:
        return None
    for folder in ([named] if named.is_absolute() else [run_root / named, Path.cwd() / named]):
        if (folder / "config.json").is_file():
            return folder
    return None


def _local_target_layers(named: str | Path, run_root: Path) -> int | None:
    """num_hidden_layers (or text_config's) of a target folder on this
    machine; None for a Hub id or a folder that is not here."""
    folder = local_target_folder(named, run_root)
    if folder is None:
        return None
    try:
        data = parse_json_object(folder / "config.json", max_bytes=16 * 1024 * 1024)
    except (ValueError, OSError):
        data = None
    if isinstance(data, dict):
        text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
        layers = text.get("num_hidden_layers")
        # below 5 layers the default [1, N//2-1, N-4] is no list of taps
        if isinstance(layers, int) and not isinstance(layers, bool) and layers > 4:
            return layers
    return None


def torchspec_default_taps(target_layers: int) -> list[int]:
    """The layers TorchSpec captures for an EAGLE-3 run that sets none
    (torchspec/utils/misc.py@6f21829:76-88)."""
    return [1, target_layers // 2 - 1, target_layers - 4]


def with_dflash_default_taps(config: Mapping[str, Any], config_file: str) -> tuple[dict[str, Any], list[Finding]]:
    """A TorchSpec DFlash config without tap ids, given the ids its model
    derives; any other config as it is."""
    out = dict(config)
    nested = out.get("dflash_config")
    if (out.get("model_type") != TORCHSPEC_DFLASH_MODEL_TYPE or out.get("target_layer_ids")
            or (isinstance(nested, Mapping) and nested.get("target_layer_ids"))):
        return out, []
    count = out.get("num_target_layers", _DFLASH_DEFAULT_TAP_COUNT)
    layers = out.get("target_num_hidden_layers", _DFLASH_DEFAULT_TARGET_LAYERS)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (count, layers)) or count > layers:
        return out, []  # the config rules say what is wrong with these
    out["target_layer_ids"] = build_target_layer_ids(count, layers)
    return out, [Finding(
        "SRC007",
        f"{config_file}: no target_layer_ids; TorchSpec's DFlash model captures build_target_layer_ids("
        f"{count}, {layers}) = {out['target_layer_ids']} (torchspec/models/draft/dflash.py@6f21829:324-344, "
        "365-367), and convert writes that list: the serving engine derives none.",
        file=config_file,
        detail={"field": "target_layer_ids", "value": out["target_layer_ids"], "source": "trainer default"},
    )]


def build_target_layer_ids(count: int, target_layers: int) -> list[int]:
    """TorchSpec's (and SpecForge's) evenly spaced DFlash taps."""
    if count == 1:
        return [target_layers // 2]
    start, end = 1, target_layers - 3
    return [int(round(start + index * (end - start) / (count - 1))) for index in range(count)]


def with_run_training(
    config: Mapping[str, Any], family: DraftFamily, training: RunTraining, config_file: str
) -> tuple[dict[str, Any], list[Finding]]:
    """The config as the run trained it: its tap list, and a DFlash
    draft's block size, where the run's config.yaml sets them."""
    out = copy.deepcopy(dict(config))
    findings: list[Finding] = []
    for problem in training.problems:
        # What the run trained with is then unknown: a warning, as for taps
        # that cannot be told apart (_default_taps).
        findings.append(Finding(
            "SRC007",
            f"{problem}. The draft config's value is used; check it is what the run trained with, or write "
            f"the value plainly in {RUN_CONFIG}.",
            file=RUN_CONFIG,
            detail={"problem": problem},
            severity=Severity.WARNING,
        ))
    if training.aux_layers:
        out, taken = with_trained_taps(
            out, family, training.aux_layers, config_file=config_file,
            source=f"the run's {RUN_CONFIG} ({'.'.join(AUX_LAYERS_KEY)})",
            cite="torchspec/inference/engine/sgl_engine.py@6f21829:172-177",
        )
        findings += taken
    elif family.tap_ids_field == TAP_IDS_FIELD and not training.problems:
        # An EAGLE-3 run that sets no list trains on TorchSpec's default
        # taps of the target, whatever the draft config lists.
        findings += _default_taps(out, family, training, config_file)
        if training.target_layers is not None:
            out, taken = with_trained_taps(
                out, family, torchspec_default_taps(training.target_layers), config_file=config_file,
                source=f"TorchSpec's default for the run's {training.target_layers}-layer target "
                       f"({'.'.join(TARGET_PATH_KEY)}; the run's {RUN_CONFIG} sets no "
                       f"{'.'.join(AUX_LAYERS_KEY)})",
                cite="torchspec/utils/misc.py@6f21829:76-88",
            )
            findings += taken
    if training.block_size is not None and family.name == DFLASH_GQA.name:
        nested = out.get("dflash_config")
        declared = nested.get("block_size") if isinstance(nested, Mapping) else None
        declared = out.get("block_size") if declared is None else declared
        if declared != training.block_size:
            out["block_size"] = training.block_size
            if isinstance(nested, dict) and "block_size" in nested:
                nested["block_size"] = training.block_size
            findings.append(Finding(
                "SRC007",
                f"{config_file}: block_size {training.block_size} from the run's {RUN_CONFIG} "
                f"({'.'.join(DFLASH_BLOCK_KEY)}), the block the draft was trained to fill "
                f"(torchspec/config/train_config.py@6f21829:143); the draft config "
                f"{'says ' + repr(declared) if declared is not None else 'gives none'}. Convert writes it.",
                file=config_file,
                detail={"field": "block_size", "value": training.block_size, "declared": declared,
                        "source": ".".join(DFLASH_BLOCK_KEY)},
            ))
    return out, findings


def _default_taps(config: Mapping[str, Any], family: DraftFamily, training: RunTraining,
                  config_file: str) -> list[Finding]:
    """Where the target is not on this machine and the draft config lists
    taps: TorchSpec trained on its default, which dspark cannot compute, so
    the list is only as good as its agreement with that default."""
    declared, where = family.tap_ids(config)
    if training.target_layers is not None or not declared:
        return []
    return [Finding(
        "SRC007",
        f"{config_file}: the run's {RUN_CONFIG} sets no {'.'.join(AUX_LAYERS_KEY)}, so TorchSpec captured its "
        f"default [1, N//2 - 1, N - 4] of the target's N layers (torchspec/utils/misc.py@6f21829:76-88), not the "
        f"draft config's list, which it never reads; the draft config says {declared} ({where}). The target "
        f"({training.target_path or 'model.target_model_path'}) is not a folder here, so dspark cannot tell them "
        "apart. Check the list is that default, or convert where the target's config.json can be read.",
        file=config_file,
        detail={"declared": declared, "source": ".".join(TARGET_PATH_KEY)},
        severity=Severity.WARNING,
    )]

