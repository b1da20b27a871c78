"""One draft, several engines: each engine's check report merged into one,
and what one engine makes of file-level findings (its severities).

`check_checkpoint(..., engine="tokenspeed,vllm")` (or "all") judges the
folder once per engine and hands the reports here. The merged report keeps
the one-engine shape (the first engine's summary) and carries every
engine's verdict (`engine_verdicts`); its findings are every engine's, a
finding only some engines give named with them, so the run fails when any
named engine fails. A finding built from several engines' tap resolutions
(TAP007) says which engine captures what.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

from dspark.schema.engines.base import EngineProfile
from dspark.schema.findings import Finding, Severity, count_by_severity, report_findings
from dspark.schema.records import record
from dspark.schema.rules.resolve import ResolvedDraft
from dspark.schema.verdicts import OUTCOME_TEXT, outcome

# How many deciding findings a verdict row quotes.
WHY_LIMIT = 3


class EngineReport(Protocol):
    engine: str | None
    family: str | None
    resolved: ResolvedDraft
    findings: list[Finding]
    loader_unexpected: str | None
    loader_missing: str | None


@record
class EngineFindings:
    """One engine's findings on a draft (convert's plan judges a layout for
    each engine asked for)."""

    engine: str
    findings: list[Finding]


def apply_engine_severities(findings: list[Finding], profile: EngineProfile, verdict: str) -> list[Finding]:
    """File-level problems the engine never looks at become warnings
    (its `severity_overrides`); under the contents verdict the layout
    finding is a note."""
    out = []
    for finding in findings:
        severity = profile.severity_overrides.get(finding.code)
        if finding.detail.get("stray_shard"):
            severity = None  # a file the index does not name is never opened: its tensors do not load
        if finding.code == "SRV001" and verdict == "contents":
            severity = "info"
        if severity is not None and severity != finding.severity.value:
            finding = dataclasses.replace(finding, severity=Severity(severity))
        out.append(finding)
    return out


def on_every_engine(profiles: Sequence[Any], first: list[Finding], judge) -> list[Finding]:
    """One layout judged for several engines (convert's plan): the first
    engine's findings and every other's (`judge(profile).findings`), each
    that only some engines give named with them."""
    if len(profiles) < 2:
        return first
    return merged_findings([EngineFindings(p.spec, first if i == 0 else judge(p).findings)
                            for i, p in enumerate(profiles)])


def engine_verdict(report: EngineReport, strict: bool = False) -> dict[str, Any]:
    """One engine's row: pass / refused at load / served wrong, and why."""
    result, deciding = outcome(report.findings, unexpected=report.loader_unexpected,
                               missing=report.loader_missing, strict=strict)
    return {
        "engine": report.engine,
        "family": report.family,
        "passed": not deciding,
        "outcome": result,
        "outcome_text": OUTCOME_TEXT[result],
        "why": [{"code": f.code, "message": f.message} for f in deciding[:WHY_LIMIT]],
        "counts": count_by_severity(report.findings),
        "tap_layers": report.resolved.tap_layers,
        "tap_source": report.resolved.tap_source,
    }


def _key(finding: Finding) -> tuple:
    return (finding.code, finding.severity, finding.message, finding.file, finding.tensor)


def merged_findings(reports: Sequence[EngineReport | EngineFindings]) -> list[Finding]:
    """Every engine's findings, once each: one that every engine gives as it
    is, one that only some give prefixed with their names (and listed in
    detail.engines)."""
    order: list[tuple] = []
    first: dict[tuple, Finding] = {}
    engines: dict[tuple, list[str]] = {}
    for report in reports:
        for finding in report.findings:
            key = _key(finding)
            if key not in first:
                order.append(key)
                first[key] = finding
                engines[key] = []
            if report.engine not in engines[key]:
                engines[key].append(report.engine)
    everyone = len(reports)
    out = []
    for key in order:
        finding, named = first[key], engines[key]
        if len(named) < everyone:
            finding = dataclasses.replace(finding, message=f"[{', '.join(named)}] {finding.message}",
                                          detail={**(finding.detail or {}), "engines": named})
        out.append(finding)
    return out


def _layers_text(layers: list[int]) -> str:
    return ", ".join("the embeddings" if layer < 0 else str(layer) for layer in layers)


def tap_disagreement(reports: Sequence[EngineReport]) -> list[Finding]:
    """TAP007: the engines capture different target layers for this draft,
    said engine by engine from their own tap resolutions."""
    known = [r for r in reports if r.resolved.tap_layers is not None]
    groups: dict[tuple[int, ...], list[EngineReport]] = {}
    for report in known:
        groups.setdefault(tuple(report.resolved.tap_layers), []).append(report)
    unknown_defaults = [r for r in reports if r.resolved.tap_layers is None and r.resolved.tap_source == "defaults"]
    if len(groups) + (1 if unknown_defaults else 0) < 2:
        return []
    parts = []
    for layers, group in groups.items():
        names = " and ".join(r.engine for r in group)
        source = group[0].resolved.tap_source
        where = "from the target's defaults" if source == "defaults" else f"from {source}"
        parts.append(f"{names} tap{'s' if len(group) == 1 else ''} the outputs of target layers "
                     f"{_layers_text(list(layers))} {where}")
    if unknown_defaults:
        names = " and ".join(r.engine for r in unknown_defaults)
        parts.append(f"{names} tap{'s' if len(unknown_defaults) == 1 else ''} the target's default layers "
                     "(pass --target to name them)")
    return [Finding(
        "TAP007",
        f"the engines capture different layers for this draft: {'; '.join(parts)}. Only an engine that captures "
        "the layers the draft was trained on serves it right; write the tap ids where each engine you serve "
        "with reads them (see TAP004/TAP005 for the layers it was trained on).",
        detail={"engines": {r.engine: {"tap_layers": r.resolved.tap_layers, "tap_source": r.resolved.tap_source,
                                       "numbering": r.resolved.tap_numbering} for r in reports}},
        severity=Severity.WARNING,
    )]


def merge_engine_reports(reports: Sequence[Any]) -> Any:
    """The first report, its findings replaced by every engine's (grouped
    past a few dozen) and the cross-engine ones, with every report kept for
    the verdict rows."""
    primary = reports[0]
    findings = report_findings(merged_findings(reports) + tap_disagreement(reports))
    return dataclasses.replace(primary, findings=findings, engine_reports=list(reports))
