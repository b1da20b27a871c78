"""Readers, writers and the convert plan: every byte dspark reads or writes
passes through here."""

from dspark.converters.check import CheckReport, check_checkpoint, inspect_checkpoint
from dspark.converters.readers import Checkpoint, detect_format, open_checkpoint

__all__ = [
    "CheckReport",
    "Checkpoint",
    "check_checkpoint",
    "detect_format",
    "inspect_checkpoint",
    "open_checkpoint",
]
