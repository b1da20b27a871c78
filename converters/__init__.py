"""Readers, writers and the convert plan: every byte dspark reads or writes
passes through here.

`readers/` open a checkpoint of any format as a lazy inventory; `layouts/`
say where files sit (an HF folder, a TorchSpec run); `writers/` stream
safetensors shards, the manifest and the atomic move; `check.py` and
`convert.py` (with `convert_plan.py`) orchestrate them.
"""

from __future__ import annotations

import importlib
from typing import Any

from dspark.converters.check import CheckReport, check_checkpoint, inspect_checkpoint
from dspark.converters.readers import Checkpoint, detect_format, open_checkpoint

# Convert's names load the writers, hashing and package metadata: they are
# imported on first use, so that `dspark check` does not pay for them.
_CONVERT_NAMES = {
    "ConvertOptions": "dspark.converters.convert_plan",
    "ConvertPlan": "dspark.converters.convert_plan",
    "plan_conversion": "dspark.converters.convert_plan",
    "ConvertReport": "dspark.converters.convert",
    "convert_checkpoint": "dspark.converters.convert",
    "execute_plan": "dspark.converters.convert",
}


def __getattr__(name: str) -> Any:
    module = _CONVERT_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "CheckReport",
    "Checkpoint",
    "ConvertOptions",
    "ConvertPlan",
    "ConvertReport",
    "check_checkpoint",
    "convert_checkpoint",
    "detect_format",
    "execute_plan",
    "inspect_checkpoint",
    "open_checkpoint",
    "plan_conversion",
]
