"""The tensor inventory: what is shipped against what the config implies."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from dspark.schema.dtypes import is_floating
from dspark.schema.families import DraftFamily, ExpectedTensor
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.rules.common import shape_text
from dspark.schema.rules.features import fc_norm_findings
from dspark.schema.rules.resolve import ResolvedDraft


def inventory_findings(
    family: DraftFamily,
    config: Mapping[str, Any],
    entries: Sequence[TensorEntry],
    resolved: ResolvedDraft,
    config_file: str,
) -> tuple[list[Finding], dict[str, ExpectedTensor]]:
    """Compare what is shipped with what the config implies."""
    findings: list[Finding] = []
    dims = family.resolve_dims(config)
    fc_norm_declared = config.get("fc_norm")
    resolved.fc_norm_declared = fc_norm_declared
    resolved.fc_norm = fc_norm_declared is True
    expected, unresolved = family.expected_tensors(dims, {"fc_norm": True})
    # Names of rules a missing dimension left unexpanded: their tensors
    # cannot be judged (the config finding says why), not "unexpected".
    unjudged = [_rule_pattern(rule) for rule in unresolved]

    shipped: dict[str, TensorEntry] = {}
    for entry in entries:
        first = shipped.get(entry.served_name)
        if first is not None:
            findings.append(Finding(
                "INV006",
                f"{entry.file}: {printable_name(entry.stored_name)!s} and {first.file}: "
                f"{printable_name(first.stored_name)} both load as "
                f"{printable_name(entry.served_name)}; keep one.",
                file=entry.file,
                tensor=entry.served_name,
                detail={"stored_names": [first.stored_name, entry.stored_name], "files": [first.file, entry.file]},
            ))
            continue
        shipped[entry.served_name] = entry

    fc_norm_names = {name for name in shipped if name.startswith("fc_norm.")}
    resolved.fc_norm_shipped = len(fc_norm_names)
    findings += fc_norm_findings(family, shipped, fc_norm_names, fc_norm_declared, dims, config_file)
    fc_norm_expected = {name for name, e in expected.items() if e.role == "fc_norm"}

    for name, entry in shipped.items():
        if name in fc_norm_names:
            continue  # judged by the fc_norm rules above
        if family.is_skipped(name):
            findings.append(Finding(
                "INV005",
                f"{entry.file}: {printable_name(name)} is skipped by the serving loader "
                f"({entry.nbytes:,} bytes shipped for nothing).",
                file=entry.file,
                tensor=name,
                detail={"nbytes": entry.nbytes, "dtype": entry.dtype, "shape": list(entry.shape)},
            ))
            continue
        want = expected.get(name)
        if want is None:
            if any(pattern.fullmatch(name) for pattern in unjudged):
                continue
            findings.append(Finding(
                "INV002",
                f"{entry.file}: {printable_name(name)} (stored as {printable_name(entry.stored_name)}) "
                f"has no destination in a {family.name} draft; the serving loader rejects it. "
                "Remove it, or fix the config if it describes fewer layers/taps than shipped.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "dtype": entry.dtype},
            ))
            continue
        if entry.shape != want.shape:
            if want.role == "context_proj" and len(entry.shape) == 2 and entry.shape[0] == want.shape[0]:
                findings.append(Finding(
                    "CTX001",
                    f"{entry.file}: {name} is {shape_text(entry.shape)}; its input width must be "
                    f"taps x target_hidden_size = {dims.get('S')} x {dims.get('th')} = {want.shape[1]}.",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "expected": list(want.shape)},
                ))
            else:
                findings.append(Finding(
                    "INV003",
                    f"{entry.file}: {name} is {shape_text(entry.shape)} but the config implies "
                    f"{shape_text(want.shape)} ({', '.join(want.rule.shape)}).",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "expected": list(want.shape)},
                ))
        if not is_floating(entry.dtype):
            findings.append(Finding(
                "INV004",
                f"{entry.file}: {name} has dtype {entry.dtype}; weights must be floating point.",
                file=entry.file,
                tensor=name,
                detail={"dtype": entry.dtype},
            ))

    for name, want in expected.items():
        if name in shipped or name in fc_norm_expected:
            continue
        findings.append(Finding(
            "INV001",
            f"{name} {shape_text(want.shape)} is missing; the serving loader fails on an unfilled "
            "destination. Re-export the checkpoint with every layer.",
            file=None,
            tensor=name,
            detail={"expected_shape": list(want.shape)},
        ))

    served_weights = [e for n, e in shipped.items() if not family.is_skipped(n)]
    f32 = [e for e in served_weights if e.dtype == "F32"]
    if served_weights and len(f32) == len(served_weights):
        total = sum(e.nbytes for e in f32)
        findings.append(Finding(
            "INV007",
            f"all {len(f32)} served tensors are float32 ({total:,} bytes); drafts usually serve in "
            "bfloat16. Convert with `dspark convert --dtype bfloat16` unless float32 is intended.",
            detail={"tensors": len(f32), "nbytes": total},
        ))
    return findings, expected


def _rule_pattern(rule_name: str) -> "re.Pattern[str]":
    """`layers.{n}.mlp.up_proj.weight` -> a regex matching every layer's name."""
    return re.compile(re.escape(rule_name).replace(r"\{n\}", r"\d+").replace(r"\{i\}", r"\d+"))
