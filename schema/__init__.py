"""The draft contract: config schema, draft families, rules and findings.

The ground floor of dspark: it opens no file and imports nothing else of
dspark.

The names below are imported on first use (PEP 562), not with the package:
`import dspark.schema.errors` (which every command does) must not load every
family, engine and rule module.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it (full names: tests/test_project.py reads
# them as imports)
_EXPORTS = {
    "CheckpointError": "dspark.schema.errors",
    "DeviceUnavailableError": "dspark.schema.errors",
    "DsparkError": "dspark.schema.errors",
    "MissingDependencyError": "dspark.schema.errors",
    "UnsafeInputError": "dspark.schema.errors",
    "UsageError": "dspark.schema.errors",
    "DraftFamily": "dspark.schema.families",
    "FAMILIES": "dspark.schema.families",
    "family_for_config": "dspark.schema.families",
    "strip_wrappers": "dspark.schema.families",
    "FINDING_CODES": "dspark.schema.findings",
    "Finding": "dspark.schema.findings",
    "Severity": "dspark.schema.findings",
    "PayloadStats": "dspark.schema.inventory",
    "TensorEntry": "dspark.schema.inventory",
    "ResolvedDraft": "dspark.schema.rules",
    "TargetFacts": "dspark.schema.rules",
    "check_contract": "dspark.schema.rules",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
