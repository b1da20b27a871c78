"""`norm_output`: one key, two meanings.

* SpecForge 0.2.0 (its only EAGLE-3 draft class, `LlamaForCausalLMEagle3`)
  reads it as "the logits go through the final norm", default true
  (specforge/modeling/draft/llama3_eagle.py::LlamaForCausalLMEagle3.__init__
  @specforge==0.2.0:1690, `compute_logits` 1772-1777); across its
  test-time-training steps it always feeds the un-normed state back
  (specforge/algorithms/eagle3/model.py::Eagle3Model@specforge==0.2.0:386-400:
  `backbone` returns the layer's output before the norm).
* speculators 0.9.0 and every engine read it as "feed the post-norm state
  back", default false, and always put the logits through the final norm
  (speculators/models/eagle3/config.py::Eagle3SpeculatorConfig@
  speculators==0.9.0:76-82, models/eagle3/core.py@0.9.0:302-306; each
  engine's citation is its loader's `features["norm_output"]`).

So a SpecForge draft is served as trained only with the key absent or false
in the engine's meaning: `true` written by a SpecForge user is served feeding
the normed state back, and `false` (an un-normed head) cannot be served by
any engine. Who wrote the folder decides the meaning; only a folder that
shows SpecForge's native export and no other trainer's sign is read with
SpecForge's meaning (TorchSpec writes the same `midlayer.*` names, with its
marker or run config; speculators writes its own shape; `dspark convert`
leaves a manifest and writes the engine's meaning).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dspark.converters.layouts.hf import MANIFEST_NAME
from dspark.converters.layouts.markers import TORCHSPEC_EXPORT_MARKER
from dspark.converters.layouts.tap_origin import SPECULATORS, _run_engine
from dspark.converters.readers import Checkpoint
from dspark.schema.errors import CheckpointError
from dspark.schema.families import DraftFamily
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.findings import Finding

KEY = "norm_output"
CODE = "ENG008"
# SpecForge's EAGLE-3 draft module names its decoder layer `midlayer`.
SPECFORGE_LAYER_PREFIX = "midlayer."
# speculators writes it in every EAGLE-3 config (models/eagle3/config.py@
# speculators==0.9.0:43-46); SpecForge's EAGLE-3 draft never reads it: a
# speculators config users flattened into SGLang's shape keeps it.
SPECULATORS_ONLY_KEY = "norm_before_residual"
SPECFORGE_MEANING = (
    "SpecForge reads norm_output as 'the logits go through the final norm' (default true) and trains feeding "
    "the un-normed state back (specforge/modeling/draft/llama3_eagle.py::LlamaForCausalLMEagle3.compute_logits"
    "@specforge==0.2.0:1690, 1772-1777; specforge/algorithms/eagle3/model.py@specforge==0.2.0:386-400)"
)
ENGINE_MEANING = ("reads it as 'feed the post-norm state back' (default false) and always puts the logits "
                  "through the final norm")


def specforge_origin(checkpoint: Checkpoint, family: DraftFamily | None) -> str | None:
    """Why the folder is SpecForge's native EAGLE-3 output, or None when it
    may be another writer's (TorchSpec's marker or run config, speculators'
    shape, a dspark manifest) or is not an EAGLE-3 draft named as SpecForge
    names it."""
    if family is None or family.tap_ids_field != TAP_IDS_FIELD:
        return None
    if any(f.code == "SRC005" and (f.detail or {}).get("trainer") == SPECULATORS for f in checkpoint.config_findings):
        return None
    raw = checkpoint.config if isinstance(checkpoint.config, Mapping) else {}
    if TORCHSPEC_EXPORT_MARKER in raw or SPECULATORS_ONLY_KEY in raw:
        return None
    if not checkpoint.is_remote and checkpoint.root is not None and (Path(checkpoint.root) / MANIFEST_NAME).is_file():
        return None
    if not any(e.stored_name.startswith(SPECFORGE_LAYER_PREFIX) for e in checkpoint.entries):
        return None
    if _run_engine(checkpoint) is not None:
        return None
    return ("its decoder layer is named midlayer.* (SpecForge's draft module) and no TorchSpec marker or run config, "
            "speculators shape or key, or dspark manifest says another writer")


def _declared(config: Mapping[str, Any]) -> Any:
    # Both SpecForge and the engines read the top level only (getattr(config, "norm_output", ...)).
    return config.get(KEY, None) if KEY in config else None


def norm_output_findings(checkpoint: Checkpoint, family: DraftFamily | None, loader, engine: str,
                         config_file: str) -> list[Finding]:
    """ENG008 when the engine serves a SpecForge draft's `norm_output` in
    its own meaning, which is not the one the draft was trained in."""
    feature = getattr(loader, "features", {}).get(KEY) if loader is not None else None
    config = checkpoint.config if isinstance(checkpoint.config, Mapping) else {}
    if feature is None or KEY not in config or specforge_origin(checkpoint, family) is None:
        return []
    value = config[KEY]
    engine_says = f"{engine} {ENGINE_MEANING} ({feature.source.cite()})"
    if value is False:
        message = (f"{config_file}: norm_output: false. {SPECFORGE_MEANING}: this draft was trained with its head "
                   f"reading the un-normed state. {engine_says}: the head is served the normed state, which no "
                   "setting of this engine changes. Retrain with norm_output true (SpecForge's default).")
        served, convertible = "logits through the final norm", False
    elif value:
        message = (f"{config_file}: norm_output: {value!r}. {SPECFORGE_MEANING}: this draft was trained feeding the "
                   f"un-normed state back. {engine_says}: it feeds the normed state back at every drafting step "
                   "after the first. Remove norm_output (or `dspark convert --engine ...`, which writes false).")
        served, convertible = "post-norm state fed back", True
    else:
        return []
    return [Finding(CODE, message, file=config_file, detail={
        "feature": KEY, "declared": value, "trainer": "specforge", "trained_meaning": "logits through the final norm",
        "engine_meaning": "feed the post-norm state back", "served": served, "convertible": convertible})]


def write_norm_output(checkpoint: Checkpoint, family: DraftFamily | None, config: dict[str, Any], loader,
                      engine: str) -> list[str]:
    """Write `norm_output` in the engine's meaning as the SpecForge draft was
    trained (false: the un-normed state fed back), default included, and
    say so; refuse a draft trained with an un-normed head, which no engine
    serves."""
    feature = getattr(loader, "features", {}).get(KEY) if loader is not None else None
    why = specforge_origin(checkpoint, family)
    if feature is None or why is None:
        return []
    source = checkpoint.config if isinstance(checkpoint.config, Mapping) else {}
    declared = source.get(KEY, None)
    if declared is False:
        raise CheckpointError(
            f"{checkpoint.config_display}: norm_output: false. {SPECFORGE_MEANING}: the draft's head was trained on "
            f"the un-normed state, and {engine} {ENGINE_MEANING} ({feature.source.cite()}): no config serves it as "
            "trained.",
            code=CODE, path=checkpoint.config_display, detail={"feature": KEY, "declared": False},
            hint="Retrain with norm_output true (SpecForge's default); convert refuses this draft.")
    before = "absent" if KEY not in source else repr(declared)
    config[KEY] = False
    return [f"{KEY}: {before} -> False (trained by SpecForge, where it means 'logits through the final norm', "
            f"always on in {engine}, with the un-normed state fed back: {engine} reads norm_output as 'feed the "
            f"post-norm state back', so false serves it as trained; {why})"]
