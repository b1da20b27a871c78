"""Declared features against the tensors shipped for them (fc_norm)."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.dtypes import is_floating
from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.rules.common import shape_text


def fc_norm_findings(
    family: DraftFamily,
    shipped: Mapping[str, TensorEntry],
    fc_norm_names: set[str],
    declared: Any,
    dims: Mapping[str, int],
    config_file: str,
) -> list[Finding]:
    findings: list[Finding] = []
    taps = dims.get("S")
    target_hidden = dims.get("th")
    if declared is True and not fc_norm_names:
        findings.append(Finding(
            "FCN001",
            f"{config_file} declares fc_norm: true but no fc_norm.{{i}}.weight tensor is shipped "
            f"(expected {taps}). The server would fail to load, or serve identity norms. Export "
            "the fc_norm weights, or set fc_norm: false if the draft has none.",
            file=config_file,
            detail={"expected_count": taps},
        ))
        return findings
    if fc_norm_names and declared is not True:
        state = "absent" if declared is None else f"{declared!r}"
        findings.append(Finding(
            "FCN002",
            f"{len(fc_norm_names)} fc_norm weights are shipped but {config_file} has fc_norm "
            f"{state}; a server would drop them and feed context_proj unnormalised taps. "
            "Set fc_norm: true in config.json.",
            file=config_file,
            tensor=sorted(fc_norm_names)[0],
            detail={"shipped": sorted(fc_norm_names), "declared": declared},
        ))
        return findings
    if not fc_norm_names:
        return findings

    indices = {}
    for name in sorted(fc_norm_names):
        index = family.fc_norm_index(name)
        entry = shipped[name]
        if index is None or (taps is not None and index >= taps):
            findings.append(Finding(
                "FCN003",
                f"{entry.file}: {printable_name(name)} does not name a tap in [0, {taps}); "
                f"fc_norm ships exactly one fc_norm.{{i}}.weight per tap.",
                file=entry.file,
                tensor=name,
                detail={"taps": taps},
            ))
            continue
        indices[index] = entry
        if target_hidden is not None and entry.shape != (target_hidden,):
            findings.append(Finding(
                "FCN004",
                f"{entry.file}: {name} is {shape_text(entry.shape)}; it must be "
                f"[target_hidden_size] = [{target_hidden}].",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "expected": [target_hidden]},
            ))
        if not is_floating(entry.dtype):
            findings.append(Finding(
                "FCN005",
                f"{entry.file}: {name} has dtype {entry.dtype}; a norm weight must be floating point.",
                file=entry.file,
                tensor=name,
                detail={"dtype": entry.dtype},
            ))
    if taps is not None:
        missing = [i for i in range(taps) if i not in indices]
        if missing:
            findings.append(Finding(
                "FCN003",
                f"fc_norm weights for taps {missing} are missing: {len(indices)} of {taps} shipped. "
                "Every tap needs its own norm weight.",
                file=config_file,
                tensor=f"fc_norm.{missing[0]}.weight",
                detail={"missing": missing, "taps": taps},
            ))
    return findings
