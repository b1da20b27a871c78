"""The draft contract: config schema, draft families, rules and findings.

The ground floor of dspark: it opens no file and imports nothing else of
dspark.
"""

from dspark.schema.errors import (
    CheckpointError,
    DeviceUnavailableError,
    DsparkError,
    MissingDependencyError,
    UnsafeInputError,
    UsageError,
)
from dspark.schema.families import FAMILIES, DraftFamily, family_for_config, strip_wrappers
from dspark.schema.findings import FINDING_CODES, Finding, Severity
from dspark.schema.inventory import PayloadStats, TensorEntry
from dspark.schema.rules import ResolvedDraft, TargetFacts, check_contract

__all__ = [
    "CheckpointError",
    "DeviceUnavailableError",
    "DraftFamily",
    "DsparkError",
    "FAMILIES",
    "FINDING_CODES",
    "Finding",
    "MissingDependencyError",
    "PayloadStats",
    "ResolvedDraft",
    "Severity",
    "TargetFacts",
    "TensorEntry",
    "UnsafeInputError",
    "UsageError",
    "check_contract",
    "family_for_config",
    "strip_wrappers",
]
