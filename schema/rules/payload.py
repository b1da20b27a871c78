"""Payload rules (`--deep`): the caller streams, the rules judge."""

from __future__ import annotations

from typing import Collection, Iterable, Mapping

from dspark.schema.families import ExpectedTensor
from dspark.schema.findings import Finding
from dspark.schema.inventory import PayloadStats, TensorEntry
from dspark.schema.rules.common import shape_text

# Roles of RMSNorm weights, whose all-zero payload is an error.
NORM_ROLES = ("norm", "context_norm", "fc_norm")
# Roles of weight matrices: an all-zero one computes nothing (PAY004).
MATRIX_ROLES = ("matrix", "context_proj")


def payload_findings(
    scanned: Iterable[tuple[TensorEntry, PayloadStats]],
    expected: Mapping[str, ExpectedTensor],
    *,
    values_judged: Collection[str] = (),
) -> list[Finding]:
    """Findings from payload statistics. The caller streams the payloads and
    hands over (entry, stats) pairs; roles come from the expected inventory.
    `values_judged`: served names of token maps whose values the contract
    rules judged on the entries the engine reads (rules/token_map.py); the
    whole-table range here is their fallback."""
    findings: list[Finding] = []
    for entry, stats in scanned:
        name = entry.served_name
        want = expected.get(name)
        role = want.role if want else ("fc_norm" if name.startswith("fc_norm.") else None)
        if stats.nonfinite_count:
            findings.append(Finding(
                "PAY001",
                f"{entry.file}: {name} holds {stats.nonfinite_count:,} NaN/Inf values; the "
                "training run diverged or the export is corrupt. Do not deploy it.",
                file=entry.file,
                tensor=name,
                detail={"nonfinite": stats.nonfinite_count},
            ))
        if role in NORM_ROLES and stats.all_zero and entry.numel:
            findings.append(Finding(
                "PAY002",
                f"{entry.file}: {name} is all zeros; the norm would zero its input. "
                "The weight was never trained or was lost in export.",
                file=entry.file,
                tensor=name,
            ))
        if role in MATRIX_ROLES and len(entry.shape) >= 2 and stats.all_zero and entry.numel:
            # A served matrix is never exactly zero after training; zeros
            # are what a lost tensor, a failed export or a hole in the file
            # reads as. (Skipped tensors have no role and are not judged.)
            findings.append(Finding(
                "PAY004",
                f"{entry.file}: {name} {shape_text(entry.shape)} is all zeros; the layer would "
                "compute nothing. The weight was lost in export, or the file's payload was never "
                "written (an unfinished download). Re-export or re-download it.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape)},
            ))
        below = want.values_below if want else None
        if below is not None and name not in values_judged and stats.index_offset_min is not None and (
            stats.index_offset_min < 0 or stats.index_offset_max >= below
        ):
            findings.append(Finding(
                "VOC003",
                f"{entry.file}: {name} sends draft tokens to target ids from {stats.index_offset_min} to "
                f"{stats.index_offset_max} (i + {name}[i]), outside [0, vocab_size = {below}); the engine "
                "never checks it and feeds those ids to the embedding. The table was built for another "
                "vocabulary or is not offset-encoded (target id = i + d2t[i]).",
                file=entry.file,
                tensor=name,
                detail={"min": stats.index_offset_min, "max": stats.index_offset_max, "vocab_size": below},
            ))
        if role == "fc_norm" and stats.all_one and entry.numel:
            findings.append(Finding(
                "FCN006",
                f"{entry.file}: {name} is exactly all ones: an identity norm, which is what "
                "an untrained or re-initialised fc_norm looks like. Check the export.",
                file=entry.file,
                tensor=name,
            ))
    return findings
