"""The registry of draft families: one module per family, one line here."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.families.base import (
    MAX_DIMENSION,
    MAX_LAYERS,
    MAX_TAPS,
    DraftFamily,
    ExpectedTensor,
    TensorRule,
    dims_within_bounds,
    evaluate_dim,
    nested_field,
)
from dspark.schema.families.dflash_gqa import DFLASH_GQA
from dspark.schema.families.eagle3_llama import EAGLE3_LLAMA
from dspark.schema.families.eagle3_mla import EAGLE3_MLA
from dspark.schema.families.k3_dspark import K3_DSPARK
from dspark.schema.naming import strip_wrappers

FAMILIES: tuple[DraftFamily, ...] = (K3_DSPARK, DFLASH_GQA, EAGLE3_LLAMA, EAGLE3_MLA)


def family_for_architecture(architecture: Any) -> DraftFamily | None:
    return next(
        (f for f in FAMILIES if architecture in f.architectures or architecture in f.legacy_architectures), None
    )


def family_for_config(config: Mapping[str, Any]) -> DraftFamily | None:
    """The family the config describes: its first architecture dspark knows,
    else its `model_type` (the reference K3 config omits `architectures`).
    Which class an engine actually loads is the engine's decision
    (`EngineProfile.architectures`)."""
    architectures = config.get("architectures")
    if isinstance(architectures, list):
        for architecture in architectures:
            family = family_for_architecture(architecture)
            if family is not None:
                return family
    model_type = config.get("model_type")
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    return None


def family_by_name(name: str) -> DraftFamily | None:
    return next((f for f in FAMILIES if f.name == name), None)


def known_families_text() -> str:
    """`k3_dspark (K3DSparkModel), …`: what a user may declare."""
    return ", ".join(f"{f.name} ({', '.join(f.architectures)})" for f in FAMILIES)


__all__ = [
    "DFLASH_GQA",
    "EAGLE3_LLAMA",
    "EAGLE3_MLA",
    "FAMILIES",
    "K3_DSPARK",
    "MAX_DIMENSION",
    "MAX_LAYERS",
    "MAX_TAPS",
    "DraftFamily",
    "ExpectedTensor",
    "TensorRule",
    "dims_within_bounds",
    "evaluate_dim",
    "family_by_name",
    "family_for_architecture",
    "family_for_config",
    "known_families_text",
    "nested_field",
    "strip_wrappers",
]
