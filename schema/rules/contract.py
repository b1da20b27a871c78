"""Every config and inventory rule of the draft contract, in one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dspark.schema.families import DraftFamily, ExpectedTensor, family_for_config, nested_field
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry
from dspark.schema.rules.config import cross_field_findings, schema_findings
from dspark.schema.rules.inventory import inventory_findings
from dspark.schema.rules.resolve import ResolvedDraft
from dspark.schema.rules.stream import stream_findings
from dspark.schema.rules.target import TargetFacts, target_findings


@dataclass
class ContractResult:
    findings: list[Finding]
    resolved: ResolvedDraft
    family: DraftFamily | None
    expected: dict[str, ExpectedTensor]


def check_contract(
    config: Mapping[str, Any],
    entries: Sequence[TensorEntry],
    *,
    config_file: str = "config.json",
    target: TargetFacts | None = None,
    environ: Mapping[str, str] | None = None,
) -> ContractResult:
    """Every config and inventory rule of the draft contract."""
    environ = {} if environ is None else environ
    resolved = ResolvedDraft()
    family = family_for_config(config)
    if family is None:
        finding = Finding(
            "CFG004",
            f"{config_file}: model_type {config.get('model_type')!r} / architectures "
            f"{config.get('architectures')!r} is not a known draft family. Known: k3_dspark "
            "(K3DSparkModel), dflash_gqa (DFlashDraftModel).",
            file=config_file,
            detail={"model_type": config.get("model_type"), "architectures": config.get("architectures")},
        )
        return ContractResult([finding], resolved, None, {})
    resolved.family = family.name
    layer_ids, _ = nested_field(config, "target_layer_ids")
    resolved.target_layer_ids = list(layer_ids) if isinstance(layer_ids, list) else []
    resolved.num_hidden_layers = config.get("num_hidden_layers")
    resolved.hidden_size = config.get("hidden_size")
    resolved.target_hidden_size = config.get("target_hidden_size", config.get("hidden_size"))
    resolved.target_checked = target is not None

    findings = schema_findings(config, family, config_file)
    findings += cross_field_findings(config, config_file)
    findings += stream_findings(config, resolved, config_file, environ, target)
    if target is not None:
        findings += target_findings(config, target)
    inventory, expected = inventory_findings(family, config, entries, resolved, config_file)
    findings += inventory
    return ContractResult(findings, resolved, family, expected)
