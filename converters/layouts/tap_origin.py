"""Where a draft folder comes from, as far as its tap numbering goes: which
trainer wrote its tap ids, and so what an id means (schema/rules/
trained_taps.py). Read from what the folder says, in this order:

1. a TorchSpec run's `config.yaml` above the weights: TorchSpec's ids are
   layer outputs whichever inference engine captured the training states
   (`inference.inference_engine_type`, torchspec/config/inference_config.py@
   6f21829:113; its vLLM engine adds vLLM's +1 itself, torchspec/inference/
   engine/vllm_engine.py@6f21829:151-165; SGLang takes them as they are,
   sgl_engine.py@6f21829:172-177);
2. a config in speculators' shape: hidden_states indices (speculators adds
   1 to layer ids for that reason, convert/dflash/converter.py@c05b95b:
   117-126);
3. TorchSpec's `--vllm` export (its marker, `layers.0.` names, kimi_k2):
   hidden_states indices, vLLM's numbering (tools/convert_to_hf.py@6f21829:
   129-159); any other TorchSpec export (the marker): layer outputs;
4. ids under `eagle_config` (SpecForge; TorchSpec's native MLA export):
   layer outputs (specforge/algorithms/model_providers.py@a6b6b02:188-204);
5. an EAGLE-3 block named `midlayer.` (TorchSpec's and SpecForge's native
   names): layer outputs (named `layers.0.` with no other sign it is
   speculators' layout or an export for vLLM from layer outputs alike:
   unknown);
6. a DFlash-style draft's `target_layer_ids` (TorchSpec, SpecForge): layer
   outputs.

0. a dspark manifest: `dspark convert` wrote the config, with the ids as
   layer outputs (it takes speculators' and the --vllm export's 1 off);

Nothing else says: the numbering is unknown (TAP005 gives both readings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dspark.converters.layouts.hf import MANIFEST_NAME
from dspark.converters.layouts.markers import TORCHSPEC_EXPORT_MARKER
from dspark.converters.readers import Checkpoint
from dspark.schema.engines.base import HIDDEN_STATES, LAYER_OUTPUT
from dspark.schema.families import DraftFamily, nested_field
from dspark.schema.families.base import is_int
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.findings import Finding
from dspark.schema.rules.resolve import ResolvedDraft
from dspark.schema.rules.trained_taps import TrainedTaps, served_layers_finding, trained_numbering_finding

ENGINE_KEY = ("inference", "inference_engine_type")
# A TorchSpec run's config (layouts/torchspec.py RUN_CONFIG) and the trainer
# name speculators' reader gives its SRC005 note (layouts/speculators.py
# TRAINER): spelled here so a check of an engine-layout folder loads neither
# layout module (tests/converters/test_tap_origin.py holds them equal).
RUN_CONFIG = "config.yaml"
SPECULATORS = "speculators"
# How far above the weights a run's config.yaml sits (run/checkpoints/iter_N/model).
RUN_LEVELS = 4


def _ids(value: Any) -> list[int] | None:
    return list(value) if isinstance(value, list) and value and all(is_int(i) for i in value) else None


def _declared(config: Mapping[str, Any], family: DraftFamily) -> tuple[list[int] | None, str | None]:
    """The list the trainer wrote, and where: eagle_config's before the top
    level's (the one the trainer that writes eagle_config trains on), a
    DFlash draft's as its drafter reads it."""
    if family.tap_ids_field == TAP_IDS_FIELD:
        eagle = config.get("eagle_config")
        if isinstance(eagle, Mapping) and _ids(eagle.get(TAP_IDS_FIELD)):
            return _ids(eagle[TAP_IDS_FIELD]), f"eagle_config.{TAP_IDS_FIELD}"
        if _ids(config.get(TAP_IDS_FIELD)):
            return _ids(config[TAP_IDS_FIELD]), TAP_IDS_FIELD
        return None, None
    ids, path = nested_field(config, family.tap_ids_field)
    return _ids(ids), path


def _run_engine(checkpoint: Checkpoint) -> tuple[Path, str | None] | None:
    """The TorchSpec run's config.yaml above the weights, and the inference
    engine it names (None: its default, hf)."""
    if checkpoint.is_remote or checkpoint.root is None:
        return None
    folder = Path(checkpoint.root).resolve()
    for candidate in [folder, *folder.parents][:RUN_LEVELS + 1]:
        path = candidate / RUN_CONFIG
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "inference:" not in text:
            continue  # some other tool's config.yaml
        from dspark.converters.layouts.omegaconf_yaml import read_yaml_key

        try:
            return path, read_yaml_key(text, *ENGINE_KEY)
        except ValueError:
            return path, None
    return None


def _written_for(manifest: Path, family: DraftFamily, config: Mapping[str, Any], path: str) -> str | None:
    """The engine a manifest says convert wrote for, when that engine reads
    `path` as hidden_states indices (convert keeps such ids as they are)."""
    import json

    from dspark.schema.engines import engine_by_spec
    from dspark.schema.errors import UsageError

    try:
        spec = json.loads(manifest.read_text(encoding="utf-8")).get("engine")
        loader = engine_by_spec(spec).loader_for(family.name) if isinstance(spec, str) and spec else None
    except (OSError, ValueError, UsageError, AttributeError):
        return None
    if loader is None or loader.taps is None or loader.taps.numbering_for(path).base != HIDDEN_STATES:
        return None
    return spec


# The manifest's record of the taps the draft was trained on (convert_plan).
MANIFEST_TAPS_KEY = "trained_taps"


def taps_record(trained: TrainedTaps | None) -> dict[str, Any] | None:
    """What convert records in its manifest: the trainer's list, where and
    how it was numbered, and the layers it means."""
    if trained is None or trained.layers() is None:
        return None
    return {"layers": trained.layers(), "ids": list(trained.ids), "path": trained.path,
            "numbering": trained.numbering, "why": trained.why}


def _recorded(manifest: Path) -> TrainedTaps | None:
    import json

    try:
        record = json.loads(manifest.read_text(encoding="utf-8")).get(MANIFEST_TAPS_KEY)
        layers, ids = record["layers"], record["ids"]
        if not (_ids(ids) and isinstance(layers, list) and len(layers) == len(ids)
                and all(is_int(i) for i in layers) and record["numbering"] in (LAYER_OUTPUT, HIDDEN_STATES)):
            return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    why = (f"{MANIFEST_NAME}, where dspark convert recorded the trainer's {record['path']} = {ids!r} "
           f"(inferred from {record['why']})")
    return TrainedTaps(list(ids), str(record["path"]), record["numbering"], why, list(ids),
                       recorded_layers=[int(i) for i in layers])


def write_trained_taps(trained: TrainedTaps | None, config: dict[str, Any], loader, engine: str) -> list[str]:
    """Rewrite, in the config convert writes, the tap list the engine's
    target reads so that it captures the layers the draft was trained on,
    in that engine's numbering for that path (SpecForge's layer outputs are
    one lower than vLLM's hidden_states ids); say each change. Nothing when
    the trained layers are unknown (TAP005 says so) or no exact ids exist."""
    layers = trained.layers() if trained is not None else None
    taps = getattr(loader, "taps", None)
    if layers is None or taps is None:
        return []
    ids, path = taps.target_ids(config)
    if path is None or not _ids(ids):
        return []
    numbering = taps.numbering_for(path)
    if numbering.layer_outputs(ids) == layers:
        return []
    wanted = _ids_for(numbering, layers)
    if wanted is None:
        return []
    holder = config
    *sections, key = path.split(".")
    for section in sections:
        holder = holder[section]
    holder[key] = wanted
    return [f"{path}: {ids!r} -> {wanted!r} (the draft was trained on the outputs of target layers "
            f"{', '.join(map(str, layers))}; {engine} reads {path} as {numbering.text})"]


def _ids_for(numbering, layers: list[int]) -> list[int] | None:
    """The ids whose reading by `numbering` is `layers` (a shift that
    depends on the ids themselves is tried both ways)."""
    base = [layer - numbering.layer_outputs([0])[0] for layer in layers]
    for candidate in (base, [i - 1 for i in base], [i + 1 for i in base]):
        if all(i >= 0 for i in candidate) and numbering.layer_outputs(candidate) == layers:
            return candidate
    return None


def trained_taps(checkpoint: Checkpoint, family: DraftFamily, judged: Mapping[str, Any]) -> TrainedTaps | None:
    """What the folder says of the tap ids its draft was trained on; None
    when it writes no list (the defaults are TAP003's to describe)."""
    raw = checkpoint.config if isinstance(checkpoint.config, Mapping) else {}
    translated = any(f.code == "SRC005" and (f.detail or {}).get("trainer") == SPECULATORS
                     for f in checkpoint.config_findings)
    names = [e.stored_name for e in checkpoint.entries]
    shifted = False
    if isinstance(raw, dict) and TORCHSPEC_EXPORT_MARKER in raw:
        from dspark.converters.layouts.torchspec import vllm_shifted_taps

        shifted = vllm_shifted_taps(raw, names)
    ids, path = _declared(judged, family)
    if ids is None:
        return None
    judged_ids = ids
    read = _declared(raw, family)[0] or ids  # as dspark's reader gives them
    if translated:
        # speculators' reader has taken the 1 off: the folder's ids are one higher
        ids = [i + 1 for i in read]
    elif shifted:
        # the folder's own ids, whether or not this engine's view took the 1 off
        ids = read

    def found(numbering: str | None, why: str, worth_saying: bool = True) -> TrainedTaps:
        return TrainedTaps(ids, path, numbering, why, judged_ids, worth_saying)

    if not checkpoint.is_remote and checkpoint.root is not None and (Path(checkpoint.root) / MANIFEST_NAME).is_file():
        recorded = _recorded(Path(checkpoint.root) / MANIFEST_NAME)
        if recorded is not None:
            return recorded
        # a manifest from before convert recorded the trained layers: it
        # rewrote the ids (speculators', the --vllm export's) for the engine
        # it wrote for: layer outputs, or that engine's numbering
        written_for = _written_for(Path(checkpoint.root) / MANIFEST_NAME, family, judged, path)
        if written_for is not None:
            return found(HIDDEN_STATES, f"{MANIFEST_NAME}: dspark convert wrote this config for {written_for}, in "
                         "its numbering (hidden_states indices)")
        return found(LAYER_OUTPUT, f"{MANIFEST_NAME}: dspark convert wrote this config, and writes ids as layer "
                     "outputs")
    run = _run_engine(checkpoint)
    if run is not None:
        where, engine = run
        return found(LAYER_OUTPUT, f"the TorchSpec run's {where.name} (inference engine {engine or 'hf'}): "
                     "TorchSpec numbers taps by layer output whichever engine captured its training states")
    if translated:
        return found(HIDDEN_STATES, "config.json in speculators' shape (speculators numbers taps by hidden_states "
                     "index)")
    if shifted:
        return found(HIDDEN_STATES, "TorchSpec's --vllm export (its marker, layers.0. names, kimi_k2), which "
                     "writes vLLM's numbering")
    if TORCHSPEC_EXPORT_MARKER in raw:
        return found(LAYER_OUTPUT, "TorchSpec's export marker: TorchSpec writes layer outputs (its --vllm export "
                     "shifts only a kimi_k2 draft's ids, tools/convert_to_hf.py@6f21829:129-159)")
    if path.startswith("eagle_config."):
        return found(LAYER_OUTPUT, "the ids under eagle_config, where SpecForge and TorchSpec write them")
    if family.tap_ids_field != TAP_IDS_FIELD:
        return found(LAYER_OUTPUT, f"{family.name}'s {family.tap_ids_field}, which its trainers (TorchSpec, "
                     "SpecForge) write as layer outputs", worth_saying=False)
    if any(n.startswith("midlayer.") for n in names):
        return found(LAYER_OUTPUT, "the midlayer.* names of TorchSpec's and SpecForge's native export")
    if any(n.startswith("layers.0.") for n in names):
        # speculators' and vLLM's layout, but also what a converter writes
        # for vLLM from a layer-output list: the name alone does not say.
        return found(None, "layers.0.* names are written by speculators (hidden_states indices) and by exports "
                     "for vLLM from layer-output lists alike")
    return found(None, "no run config, trainer config shape or layer naming tells")


def trained_tap_findings(checkpoint: Checkpoint, family: DraftFamily, resolved: ResolvedDraft,
                         judged: Mapping[str, Any], engine: str) -> list[Finding]:
    """Which layers the draft was trained on (TAP004/TAP005), and TAP006
    when `engine` captures others from the same list."""
    trained = trained_taps(checkpoint, family, judged)
    if trained is None:
        return []
    shown = checkpoint.config_display
    said = [trained_numbering_finding(trained, shown)] if trained.worth_saying else []
    return said + served_layers_finding(trained, resolved, engine, shown)
