"""Without `--target`: the taps against the layer count the draft's own
config states for its target, on the engine's capture range (TGT009).

For DFlash-style drafts the count is a trainer's (SpecForge's
num_target_layers, K3's target_num_hidden_layers). An EAGLE-3 config has
no such field in any trainer dspark reads: speculators
(models/eagle3/config.py::Eagle3SpeculatorConfig@speculators==0.9.0:15-95,
the verifier named by path only), SpecForge (its EAGLE-3 draft configs and
export, specforge/modeling/draft/llama3_eagle.py@specforge==0.2.0) and
TorchSpec (configs/draft_models/*_eagle3_*.json@a31111e) write none, and
no engine reads one (vLLM 0.33.0, SGLang 0.5.23 and TokenSpeed 0.1.1 size
the capture from the loaded target alone). A user who writes one (often
copied from a DFlash config) states the target all the same, so an
EAGLE-3 draft is judged on it as a DFlash draft is: its list on the
engine's range, and with no list the engine reads, the target's default
taps on a target of that depth.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines import FamilyLoader
from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding
from dspark.schema.rules.common import bounded_taps, is_int
from dspark.schema.rules.target import TargetFacts, colliding_default_taps, tap_range_findings

# A DFlash-style draft's num_target_layers is its target's layer count
# where SpecForge writes it (specforge/algorithms/model_providers.py::
# populate_dflash_generated_config@specforge==0.2.0:461-467) and SGLang reads
# it (sglang/srt/models/dflash.py::DFlashDraftModel.__init__@sglang==0.5.23:
# 750-751; model_executor/model_runner_components/spec_aux_hidden_state.py@
# sglang==0.5.23:221-245 compares it with the target's), but TorchSpec's
# training config counts the taps in it: only a value other than the tap
# count is read as a layer count. Where the family counts its taps in it
# (K3, `tap_count_field`), CFG007 bounds the taps by target_num_hidden_layers.
STATED_LAYER_COUNT = "target_num_hidden_layers"
STATED_TARGET_LAYERS = "num_target_layers"


def stated_target_layers(config: Mapping[str, Any], family: DraftFamily, layer_ids: Any) -> tuple[int, str] | None:
    """The target's layer count as the draft's config states it, and the
    field; None when it states none, or only a count that may be its taps'."""
    value = config.get(STATED_LAYER_COUNT)
    if is_int(value) and value > 0:
        return value, STATED_LAYER_COUNT
    value = config.get(STATED_TARGET_LAYERS)
    # With no list, a count other than the engine's default tap count (EAGLE-3's 3).
    taps = len(layer_ids) if isinstance(layer_ids, list) else family.default_tap_count
    if (family.tap_count_field != STATED_TARGET_LAYERS and is_int(value) and value > 0
            and taps is not None and value != taps):
        return value, STATED_TARGET_LAYERS
    return None


def stated_target_tap_findings(config: Mapping[str, Any], family: DraftFamily, loader: FamilyLoader | None,
                               config_file: str) -> list[Finding]:
    """TGT009 without --target: the taps against the engine's capture range
    on a target of the layer count the config states (the target class
    unknown: its own range, and id N allowed where some target classes
    capture their final residual)."""
    if loader is None or family.tap_count_field is not None:
        return []
    layer_ids, path = bounded_taps(family, config, loader)
    stated = stated_target_layers(config, family, layer_ids)
    if stated is None:
        return []
    layers, field_name = stated
    facts = TargetFacts(source=f"{config_file} ({field_name} = {layers})", num_hidden_layers=layers)
    findings = [Finding("TGT009", f"{config_file}: the config states a {layers}-layer target ({field_name} = "
                        f"{layers}), and on it " + finding.message.split(", so ", 1)[-1],
                        file=config_file, detail={**finding.detail, "stated_by": field_name})
                for finding in colliding_default_taps(config, facts, family, loader)]
    for finding in tap_range_findings(config, facts, family, loader):
        if finding.code != "TGT005":
            continue
        outside = [t for t in finding.detail["outside"] if not (loader.tap_final_residual and t == layers)]
        if not outside:
            continue
        low, high = finding.detail["range"]
        findings.append(Finding(
            "TGT009",
            f"{config_file}: {path} {outside} cannot be captured from the {layers}-layer target the config states "
            f"({field_name} = {layers}): the engine accepts tap ids in [{low}, {high}] for a {family.name} draft on "
            f"such a target and {loader.taps_outside_range}. List the layers the draft was trained on (or, if "
            f"{field_name} is not the target's layer count, check with --target).",
            file=config_file,
            detail={**finding.detail, "outside": outside, "stated_by": field_name},
        ))
    return findings
