"""Every config and inventory rule of the draft contract, in one call."""

from __future__ import annotations

import dataclasses

from typing import Any, Mapping, Sequence

from dspark.schema.engines import EngineProfile, FamilyLoader, default_engine
from dspark.schema.families import DraftFamily, ExpectedTensor
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry
from dspark.schema.families.eagle3_common import default_taps, unread_list_finding
from dspark.schema.records import record
from dspark.schema.rules.common import bounded_taps, default_tap_count, is_int, tap_ids, tap_width_fields
from dspark.schema.rules.config import cross_field_findings, integer_fields, rope_findings, schema_findings
from dspark.schema.rules.features import quantization_findings, text_config_findings, unread_flag_findings
from dspark.schema.rules.inventory import inventory_findings
from dspark.schema.rules.resolve import ResolvedDraft, resolve_family, unmodelled_family_finding
from dspark.schema.rules.stream import stream_findings, unread_nested_stream
from dspark.schema.rules.stated_target import stated_target_tap_findings
from dspark.schema.rules.target import TargetFacts, declared_width_on_target, target_findings
from dspark.schema.rules.values import engine_view
from dspark.schema.rules.token_map import TokenMapValues, served_token_map


@record(frozen=False)
class ContractResult:
    """What the contract rules found, with the family, loader and config they judged."""

    findings: list[Finding]
    resolved: ResolvedDraft
    family: DraftFamily | None
    expected: dict[str, ExpectedTensor]
    loader: FamilyLoader | None = None
    config: Mapping[str, Any] | None = None  # as the engine reads it


def unread_taps_on(target: TargetFacts, finding: Finding, config_file: str) -> Finding:
    """A TAP002 for a tap list the target does not read, judged on this
    target: its defaults are known once its layer count is."""
    detail = finding.detail or {}
    if (finding.code != "TAP002" or "defaults_for_layers" not in detail
            or not is_int(target.num_hidden_layers)):
        return finding
    if detail.get("rejudge") == "layer_outputs":
        # an engine whose own message stands (vLLM): the defaults it captures
        # on this target are the list's layers, or they are not
        ids = next(iter(detail["declared"].values()))
        served = default_taps(target.num_hidden_layers)
        same = served == ids
        return dataclasses.replace(
            finding, severity=Severity.INFO if same else Severity.ERROR,
            message=f"{finding.message} On this {target.num_hidden_layers}-layer target the defaults are the "
            f"outputs of layers {served!r}: " + ("the list, served as trained." if same else "not the list."),
            detail={**detail, "target_layers": target.num_hidden_layers, "served": served})
    return unread_list_finding(list(detail["declared"].items()), config_file, detail["source"],
                               target_layers=target.num_hidden_layers)


def _resolve_tap_layers(resolved: ResolvedDraft, loader: FamilyLoader | None, layer_ids: Any,
                        tap_path: str | None, target: TargetFacts | None) -> None:
    """The layers the engine captures, in the engine-neutral numbering
    (`TapNumbering.layer_outputs`): from the list it reads, else from the
    target's defaults when the target's layer count is known."""
    taps = loader.taps if loader is not None else None
    if taps is None:
        return
    resolved.tap_numbering = taps.numbering_for(tap_path).base
    target_class = target.architectures[0] if target is not None and target.architectures else None
    if isinstance(layer_ids, list) and all(is_int(i) for i in layer_ids):
        resolved.tap_source = tap_path
        resolved.tap_layers = taps.numbering_for(tap_path).layer_outputs(layer_ids, target_class)
    elif layer_ids is None and taps.defaults is not None:
        resolved.tap_source = "defaults"
        if target is not None and is_int(target.num_hidden_layers):
            resolved.tap_layers = taps.numbering.layer_outputs(taps.defaults(target.num_hidden_layers), target_class)


def check_contract(
    config: Mapping[str, Any],
    entries: Sequence[TensorEntry],
    *,
    config_file: str = "config.json",
    target: TargetFacts | None = None,
    environ: Mapping[str, str] | None = None,
    engine: EngineProfile | None = None,
    training_output: bool = False,
    token_map: TokenMapValues | None = None,
    payloads_read: bool = False,
) -> ContractResult:
    """Every config and inventory rule of the draft contract, as `engine`
    loads the draft. `family` is None when dspark knows no family the
    config could describe: ENG007 is the one finding (no other rule ran).
    `training_output`: the checkpoint is in a layout the engine cannot open
    (a DCP run, a .pt), so training-only entries convert leaves behind are
    notes, not tensors without a destination. `token_map(count)` gives the
    first values of the shipped d2t (the caller reads them; rules call it
    only where their verdict depends on them: TGT004 always, a float table
    an engine copies into an integer buffer always (VOC002), VOC003 when
    `payloads_read`)."""
    environ = {} if environ is None else environ
    engine = engine if engine is not None else default_engine()
    resolved = ResolvedDraft(engine=engine.spec, target_checked=target is not None)
    resolution = resolve_family(config, engine, config_file)
    family, loader = resolution.family, resolution.loader
    if family is None:
        unmodelled = unmodelled_family_finding(config, engine, config_file, resolution.architecture,
                                               resolution.unmodelled_here)
        return ContractResult([unmodelled], resolved, None, {}, None, config)
    resolved.family = family.name
    resolved.architecture = resolution.architecture
    findings = list(resolution.findings)
    if loader is None and any(f.code == "ENG006" for f in findings):
        return ContractResult(findings, resolved, family, {}, None, config)
    view, coerced = engine_view(config, loader, integer_fields(family), config_file)
    findings += coerced

    layer_ids, tap_path = bounded_taps(family, view, loader)
    resolved.target_layer_ids = list(layer_ids) if isinstance(layer_ids, list) else []
    if default_tap_count(family, loader) is not None and tap_ids(family, loader, view)[0] is None:
        resolved.default_taps = default_tap_count(family, loader)
    _resolve_tap_layers(resolved, loader, layer_ids, tap_path, target)
    resolved.num_hidden_layers = view.get("num_hidden_layers")
    resolved.hidden_size = view.get("hidden_size")
    resolved.target_hidden_size = view.get(tap_width_fields(family, loader)[0])
    resolved.fc_norm_declared = config.get("fc_norm")
    resolved.fc_norm = bool(config.get("fc_norm"))
    features = {name: bool(view.get(name)) for name in family.declared_features}
    features.update(family.derived_features(view, resolution.architecture))
    features.update(loader.fixed_features if loader is not None else {})
    resolved.features = dict(features)

    unread = loader.ignored_fields if loader is not None else ()
    findings += unread_nested_stream(schema_findings(view, family, config_file, unread), loader)
    findings += cross_field_findings(view, family, config_file, loader)
    findings += rope_findings(view, config_file, rope_scaling_wins=not (
        loader is not None and loader.family in ("dflash_gqa", "dflash2") and view.get("model_type") in ("qwen2", "qwen3")))
    findings += unread_flag_findings(loader, engine, view, config_file)
    for limit in (loader.config_limits if loader is not None else ()):
        findings += limit(view, config_file)
    findings += quantization_findings(engine, view, config_file)
    findings += text_config_findings(engine, view, config_file)
    findings += stream_findings(view, resolved, config_file, environ, target, engine=engine, loader=loader)
    if target is not None:
        findings += target_findings(view, target, family, loader, frozenset(e.served_name for e in entries),
                                    token_map=served_token_map(token_map, family, loader, view, entries))
        findings = [declared_width_on_target(unread_taps_on(target, finding, config_file), target, view)
                    for finding in findings]
    else:
        findings += stated_target_tap_findings(view, family, loader, config_file)
    inventory, expected = inventory_findings(
        family, loader, engine, view, entries, resolved, features, config_file,
        training_output=training_output, token_map=token_map if payloads_read else None,
        stored_token_map=token_map,
    )
    findings += inventory
    return ContractResult(findings, resolved, family, expected, loader, view)
