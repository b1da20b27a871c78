"""Whether the engine opens a checkpoint as it sits on disk (the served
verdict's layout question, `ServedLayout`), and the config its contents are
judged with: as `dspark convert` would write it.

The engine loads a folder's top-level `*.safetensors`, else its `*.bin`
(model_loader/loader.py@f4d8ec6e:258-318); a training output (DCP, `.pt`),
a file named directly, a config in another trainer's shape or TorchSpec's
`--vllm` tap shift gets one SRV001 with the convert command instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dspark.converters.layouts.markers import TORCHSPEC_EXPORT_MARKER
from dspark.converters.readers import Checkpoint
from dspark.schema.engines import FamilyLoader
from dspark.schema.engines.base import HIDDEN_STATES, LAYER_OUTPUT
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD, target_capture_ids
from dspark.schema.findings import Finding
from dspark.schema.inventory import printable_name
from dspark.schema.rules import ServedLayout

# The reader's note that config.json was in another trainer's shape
# (converters/layouts/speculators.py).
TRAINER_CONFIG_CODE = "SRC005"


def _torchspec_vllm_export(checkpoint: Checkpoint) -> bool:
    if not isinstance(checkpoint.config, dict) or TORCHSPEC_EXPORT_MARKER not in checkpoint.config:
        return False  # not TorchSpec's export: its layout module need not load
    from dspark.converters.layouts.torchspec import vllm_shifted_taps

    return vllm_shifted_taps(checkpoint.config, (e.stored_name for e in checkpoint.entries))


def reads_vllm_numbering(loader: FamilyLoader | None, config: Any) -> bool:
    """Whether the engine reads the list the target captures as
    hidden_states ids (vLLM's numbering, which TorchSpec's --vllm export
    and speculators write), by the numbering of the path it reads."""
    if loader is None or loader.taps is None or not isinstance(config, dict):
        return False
    _, path = loader.taps.target_ids(config)
    return loader.taps.numbering_for(path).base == HIDDEN_STATES


def _numbers_by_layer_output(loader) -> bool:
    """Whether the engine reads tap ids as layer outputs (TokenSpeed, and
    any loader that does not say): the --vllm export's ids, written in
    vLLM's hidden_states numbering, are then one too high for it."""
    taps = getattr(loader, "taps", None)
    return taps is None or taps.numbering.base == LAYER_OUTPUT


def _target_reads_the_shifted_list(checkpoint: Checkpoint, loader: FamilyLoader | None) -> bool:
    """Whether the target reads a tap list of this config (the engine's
    reading, `loader.taps`; TokenSpeed's without a loader): a shifted list
    it never reads captures nothing one layer late (SGLang's target reads
    eagle_config's alone, which the export leaves null)."""
    if loader is not None and loader.taps is not None:
        return loader.taps.target_ids(checkpoint.config)[0] is not None
    return bool(target_capture_ids(checkpoint.config)[0])


def config_as_convert_writes_it(checkpoint: Checkpoint, loader=None, *, vllm_numbering: bool = False) -> dict:
    """The config the contents are judged with: as convert would write it.
    TorchSpec's --vllm export of a kimi_k2 draft carries taps one higher
    than the layers the draft was trained on; for an engine that numbers
    ids by layer output (`loader`'s TapNumbering) SRV001 says so, and the
    taps are judged (against `--target` too) as convert writes them, 1
    lower. An engine that numbers them as the export does reads them as
    they are, and a speculators config as vLLM's own reader takes it."""
    vllm_numbering = vllm_numbering or reads_vllm_numbering(loader, checkpoint.config)
    trainer_shape = _trainer_shape(checkpoint)
    if trainer_shape is not None and (vllm_numbering or not _numbers_by_layer_output(loader)):
        if trainer_shape.detail.get("trainer") == "speculators":
            from dspark.converters.layouts.speculators import as_vllm_reads_it

            return as_vllm_reads_it(checkpoint.config, trainer_shape)
        # dspark reads a trainer's shape into layer-output ids (speculators'
        # are one lower than written); this engine numbers them as written
        return _with_taps_shifted(checkpoint.config, +1)
    if vllm_numbering or not _torchspec_vllm_export(checkpoint) or not _numbers_by_layer_output(loader):
        return checkpoint.config
    from dspark.converters.layouts.torchspec import unshift_vllm_taps

    return unshift_vllm_taps(checkpoint.config)[0]


def _trainer_shape(checkpoint: Checkpoint):
    return next((f for f in checkpoint.config_findings if f.code == TRAINER_CONFIG_CODE), None)


def _with_taps_shifted(config: dict, by: int) -> dict:
    out = json.loads(json.dumps(config))
    for holder in (out, out.get("eagle_config")):
        ids = holder.get(TAP_IDS_FIELD) if isinstance(holder, dict) else None
        if isinstance(ids, list):
            holder[TAP_IDS_FIELD] = [i + by if isinstance(i, int) and not isinstance(i, bool) else i for i in ids]
    return out


def config_for_engine(checkpoint: Checkpoint, loader: FamilyLoader | None) -> tuple[dict, list[str]]:
    """The config convert starts from for an engine, and what changed: as
    vLLM's numbering reads it (speculators' ids as written, the --vllm
    export as it is), or with TorchSpec's --vllm shift taken off."""
    if reads_vllm_numbering(loader, checkpoint.config):
        config = config_as_convert_writes_it(checkpoint, vllm_numbering=True)
        trainer = _trainer_shape(checkpoint)
        if trainer is not None and trainer.detail.get("norm_before_residual_absent"):
            # written out as trained: the engine reads the converted config as
            # its own, where an absent one means false too
            config["norm_before_residual"] = False
            return config, ["norm_before_residual: absent -> False (speculators' default, as the draft was "
                            "trained; vLLM's reader of speculators' shape would take an absent one as true)"]
        return config, []
    from dspark.converters.layouts.torchspec import unshift_vllm_taps, vllm_shifted_taps

    if vllm_shifted_taps(checkpoint.config, [e.stored_name for e in checkpoint.entries]):
        return unshift_vllm_taps(checkpoint.config)
    return checkpoint.config, []


def speculators_default_findings(checkpoint: Checkpoint, native_shapes: tuple[str, ...],
                                 config_file: str) -> list[Finding]:
    """ENG001 for a speculators EAGLE-3 config without norm_before_residual,
    on an engine that parses that shape itself (vLLM): its reader takes an
    absent one as true (vllm/transformers_utils/configs/speculators/algos.py::
    update_eagle3@vllm==0.33.0:33-35) where speculators' own class defaults it
    to false, so the draft is served the norm it was not trained with."""
    trainer = _trainer_shape(checkpoint)
    if (trainer is None or trainer.detail.get("trainer") not in native_shapes
            or not trainer.detail.get("norm_before_residual_absent")):
        return []
    return [Finding(
        "ENG001",
        f"{config_file}: norm_before_residual is absent; speculators' Eagle3SpeculatorConfig defaults it to false "
        "(models/eagle3/config.py@speculators==0.9.0:43-46), so the draft was trained without it, but the engine's "
        "reader of speculators' shape takes an absent one as true "
        "(vllm/transformers_utils/configs/speculators/algos.py@vllm==0.33.0:33-35) and serves the norm before "
        "the residual without a word. Write norm_before_residual: false in config.json (or convert).",
        file=config_file,
        detail={"feature": "norm_before_residual", "declared": None, "trained": False, "served": True},
    )]


def served_layout(checkpoint: Checkpoint, *, rejects_unknown_names: bool = True, loader=None,
                  native_shapes: tuple[str, ...] = (), reads_pt: bool = False) -> ServedLayout:
    """Whether the engine's loader would find weights where the user
    pointed: a folder with top-level `*.safetensors`, or `*.bin` when there
    are none; never `.pt`, DCP or a single file named directly
    (model_loader/loader.py@f4d8ec6e:258-318)."""
    source = str(checkpoint.source)
    if (_torchspec_vllm_export(checkpoint) and _numbers_by_layer_output(loader)
            and _target_reads_the_shifted_list(checkpoint, loader)):
        # only a shifted list the target reads captures the wrong layers
        return ServedLayout(source, checkpoint.format, False,
                            "TorchSpec's --vllm export added 1 to this kimi_k2 draft's tap ids for vLLM "
                            "(tools/convert_to_hf.py@6f21829:146-159); the engine reads them as layer ids and "
                            "would capture every tap one layer late; convert takes the 1 off")
    trainer_shape = _trainer_shape(checkpoint)
    if trainer_shape is not None and trainer_shape.detail.get("trainer") not in native_shapes:
        return ServedLayout(source, checkpoint.format, False,
                            f"{checkpoint.config_display} is in {trainer_shape.detail['trainer']}' shape, which "
                            "the engine's config loader does not parse (no model_type it knows, no architecture "
                            "it registers)")
    only = loader.native_shape_only if loader is not None else None
    if only is not None and (trainer_shape is None or trainer_shape.detail.get("trainer") != only):
        cited = loader.sources.get("native config only")
        return ServedLayout(source, checkpoint.format, False,
                            f"the engine reaches its {loader.family} class only through its reader of {only}' own "
                            "config: a plain config naming the class is renamed at launch to one it does not "
                            f"register and refused ({cited.cite() if cited else 'its config reader'}); keep the "
                            f"draft in {only}' shape")
    # a remote folder (a Hub repository, an HTTP or object-store folder) is
    # judged as the folder the engine loads once it is downloaded
    if not checkpoint.is_remote and checkpoint.source.is_file():
        return ServedLayout(source, checkpoint.format, False,
                            "the engine loads a folder, not a single file")
    if checkpoint.format.startswith("safetensors"):
        if not checkpoint.is_remote and Path(checkpoint.source).resolve() != Path(checkpoint.root).resolve():
            # a run's checkpoint folder read at one of its epochs
            return ServedLayout(source, checkpoint.format, False,
                                f"its weights are in {printable_name(str(checkpoint.root))}, not in the folder "
                                "named, and the engine loads only the folder it is given (point it at that "
                                "folder, or convert)")
        return ServedLayout(source, checkpoint.format, True)
    if checkpoint.format == "pt" and all(name.endswith(".bin") or (reads_pt and name.endswith(".pt"))
                                         for name in checkpoint.weight_files):
        # The engine yields a .bin's top-level entries as they are
        # (model_loader/weight_utils.py@f4d8ec6e:703-704): a state dict
        # nested under a key, or other entries beside the tensors, reach
        # the model as names it has no parameter for. A loader that drops
        # such names (GQA, EAGLE-3) still loads the tensors at the top;
        # one that refuses them (K3) does not.
        nested = checkpoint.metadata.get("state_dict_key")
        left = next((f for f in checkpoint.findings if f.code == "SRC002"), None) if rejects_unknown_names else None
        if nested or left is not None:
            what = (f"its tensors sit under the entry {nested!r}" if nested else
                    f"{left.detail.get('count', 'some')} of its entries are not tensors")
            return ServedLayout(source, checkpoint.format, False,
                                f"the engine reads a .bin's top-level entries as they are, and {what}")
        return ServedLayout(source, checkpoint.format, True)
    why = {
        "dcp": "a torch.distributed.checkpoint folder, which the engine does not read",
        "pt": "a .pt state dict, which the engine never reads (only *.safetensors, else *.bin)",
    }.get(checkpoint.format)
    return ServedLayout(source, checkpoint.format, False, why, destination=_outside_the_run(checkpoint))


def _outside_the_run(checkpoint: Checkpoint) -> str | None:
    """For a folder inside a TorchSpec run's `checkpoints/`, a destination
    beside the run: TorchSpec's rotation deletes whole iterations
    (torchspec/controller/loop.py@6f21829:80-109), a converted draft inside
    one with it."""
    if checkpoint.format != "dcp" or checkpoint.is_remote:
        return None
    from dspark.converters.layouts.torchspec import locate_dcp

    location = locate_dcp(checkpoint.source)
    if location.run_root is None or checkpoint.source.resolve() == location.run_root.resolve():
        return None
    iteration = next((p.name for p in (location.model_dir, *location.model_dir.parents)
                      if p.name.startswith("iter_")), None)
    suffix = f"-{iteration}-served" if iteration else "-served"
    return str(location.run_root).rstrip("/") + suffix
