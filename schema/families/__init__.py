"""The registry of draft families: one module per family, one line here.

Lazy: a family's module is imported when a checkpoint asks for it (its
`architectures` or `model_type` names it, or a caller names the family),
not when the registry is imported, so a check of one draft loads one
family. `FAMILIES` (every family, for `dspark families` and the tests) and
the constants `K3_DSPARK`, `DFLASH_GQA`, ... import on first use. A
registry line repeats the names a config is recognised by, so that
recognition needs no import; tests/schema/test_lazy_registries.py keeps
each line equal to its family's own fields.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

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
from dspark.schema.naming import strip_wrappers

if TYPE_CHECKING:
    FAMILIES: tuple[DraftFamily, ...]
    K3_DSPARK: DraftFamily
    DFLASH_GQA: DraftFamily
    DFLASH2: DraftFamily
    EAGLE3_LLAMA: DraftFamily
    EAGLE3_MLA: DraftFamily
    EAGLE3_QWEN3: DraftFamily
    PEAGLE_LLAMA: DraftFamily
    PEAGLE_QWEN3: DraftFamily


class FamilyEntry(NamedTuple):
    """Where a family lives and what names it is recognised by."""

    name: str
    module: str  # its full name (tests/test_project.py reads it as an import)
    attribute: str
    architectures: tuple[str, ...]
    legacy_architectures: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()


REGISTRY: tuple[FamilyEntry, ...] = (
    FamilyEntry("k3_dspark", "dspark.schema.families.k3_dspark", "K3_DSPARK",
                ("K3DSparkModel",), model_types=("k3_dspark",)),
    FamilyEntry("dflash_gqa", "dspark.schema.families.dflash_gqa", "DFLASH_GQA",
                ("DFlashDraftModel", "DSparkDraftModel"), legacy_architectures=("Qwen3DSparkModel",),
                model_types=("dflash", "dspark", "dflash_draft")),
    FamilyEntry("dflash2", "dspark.schema.families.dflash2", "DFLASH2", ("DFlash2DraftModel",)),
    FamilyEntry("eagle3_llama", "dspark.schema.families.eagle3_llama", "EAGLE3_LLAMA",
                ("LlamaForCausalLMEagle3",), legacy_architectures=("Eagle3LlamaForCausalLM",)),
    FamilyEntry("eagle3_mla", "dspark.schema.families.eagle3_mla", "EAGLE3_MLA",
                ("Eagle3DeepseekV2ForCausalLM",),
                legacy_architectures=("DeepSeekForCausalLMEagle3", "Eagle3DeepseekV3ForCausalLM")),
    FamilyEntry("eagle3_qwen3", "dspark.schema.families.eagle3_qwen3", "EAGLE3_QWEN3",
                ("Eagle3Qwen3ForCausalLM",)),
    FamilyEntry("peagle_llama", "dspark.schema.families.peagle_llama", "PEAGLE_LLAMA",
                ("PeagleLlamaForCausalLM",)),
    FamilyEntry("peagle_qwen3", "dspark.schema.families.peagle_qwen3", "PEAGLE_QWEN3",
                ("PeagleQwen3ForCausalLM",)),
)
_BY_ATTRIBUTE = {entry.attribute: entry for entry in REGISTRY}


def _load(entry: FamilyEntry) -> DraftFamily:
    module = importlib.import_module(entry.module)
    return getattr(module, entry.attribute)


def __getattr__(name: str) -> Any:
    # PEP 562: the names that need every family (or one by its constant)
    # import them here, once; later lookups find them in the module's dict.
    if name == "FAMILIES":
        value: Any = tuple(_load(entry) for entry in REGISTRY)
    elif name in _BY_ATTRIBUTE:
        value = _load(_BY_ATTRIBUTE[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


# Every name a family is recognised by -> its registry line (the first line
# naming it): one lookup per `architectures` entry, however long the list.
_BY_ARCHITECTURE: dict[str, FamilyEntry] = {}
for _entry in REGISTRY:
    for _name in _entry.architectures + _entry.legacy_architectures:
        _BY_ARCHITECTURE.setdefault(_name, _entry)


def family_for_architecture(architecture: Any) -> DraftFamily | None:
    entry = _BY_ARCHITECTURE.get(architecture) if isinstance(architecture, str) else None
    return None if entry is None else _load(entry)


def family_for_model_type(model_type: Any) -> DraftFamily | None:
    """The family whose `model_type` this is (`k3_dspark`), or None."""
    entry = next((e for e in REGISTRY if model_type in e.model_types), None)
    return None if entry is None else _load(entry)


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
    return family_for_model_type(config.get("model_type"))


def family_by_name(name: str) -> DraftFamily | None:
    entry = next((e for e in REGISTRY if e.name == name), None)
    return None if entry is None else _load(entry)


def known_families_text() -> str:
    """`k3_dspark (K3DSparkModel), …`: what a user may declare."""
    return ", ".join(f"{e.name} ({', '.join(e.architectures)})" for e in REGISTRY)


__all__ = [
    "DFLASH2",
    "DFLASH_GQA",
    "EAGLE3_LLAMA",
    "EAGLE3_MLA",
    "EAGLE3_QWEN3",
    "FAMILIES",
    "PEAGLE_LLAMA",
    "PEAGLE_QWEN3",
    "K3_DSPARK",
    "MAX_DIMENSION",
    "MAX_LAYERS",
    "MAX_TAPS",
    "REGISTRY",
    "DraftFamily",
    "ExpectedTensor",
    "FamilyEntry",
    "TensorRule",
    "dims_within_bounds",
    "evaluate_dim",
    "family_by_name",
    "family_for_architecture",
    "family_for_config",
    "family_for_model_type",
    "known_families_text",
    "nested_field",
    "strip_wrappers",
]
