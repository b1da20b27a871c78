"""The resolved view of a draft: what the serving engine will do with it.

`resolve_family` asks the engine profile which model class it loads for the
config (the first registered entry of `architectures`, after the draft
worker's rewrite), then which dspark family describes that class.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Mapping

from dspark.schema.engines import EngineProfile, FamilyLoader
from dspark.schema.families import (
    DraftFamily,
    family_for_architecture,
    family_for_config,
    family_for_model_type,
    known_families_text,
)
from dspark.schema.findings import Finding
from dspark.schema.records import record
from dspark.schema.verdicts import UNMODELLED_FAMILY


@record(frozen=False)
class ResolvedDraft:
    """What the serving side will do with this draft, as far as the config
    and the shipped tensors tell."""

    family: str | None = None
    engine: str | None = None
    architecture: str | None = None  # the class the engine loads
    fc_norm_declared: Any = None  # the raw value; None when absent
    fc_norm_shipped: int = 0  # number of fc_norm.* tensors shipped
    fc_norm: bool = False  # what the engine reads: bool(declared)
    stream: str | None = None  # effective stream; None when unresolvable
    stream_declared: str | None = None
    stream_source: str = "default"
    target_layer_ids: list[int] = field(default_factory=list)
    # No tap list the target reads: the count it captures by its defaults.
    default_taps: int | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    target_checked: bool = False
    features: dict[str, bool] = field(default_factory=dict)
    # The target layers the engine captures, as 0-based layer outputs (-1:
    # the embeddings), whatever its own numbering: what two engines compare.
    # None when unknown (no list and no target to take defaults from).
    tap_layers: list[int] | None = None
    # Where the engine read the ids ("defaults": the target's own), and how
    # it numbers them (base.LAYER_OUTPUT / base.HIDDEN_STATES).
    tap_source: str | None = None
    tap_numbering: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@record
class Resolution:
    """The family and loader an architecture resolves to, with the findings on the way."""

    family: DraftFamily | None
    architecture: str | None
    loader: FamilyLoader | None
    findings: list[Finding]
    # A family dspark models for other engines, which this engine registers
    # but dspark has no rules for here (`family` is then None: ENG007).
    unmodelled_here: str | None = None


def not_served_finding(family: DraftFamily, engine: EngineProfile, config_file: str) -> Finding:
    """ENG006: the engine has no model for this family at all (its profile
    has no loader for it); nothing else about the draft matters to it."""
    served = ", ".join(sorted(engine.loaders)) or "none"
    return Finding(
        "ENG006",
        f"{config_file}: {engine.spec} does not serve {family.name} drafts ({', '.join(family.architectures)}): "
        f"it has no model for them and refuses the draft. Serve it on an engine that does (`dspark families "
        f"--family {family.name}` lists them). {engine.spec} serves: {served}.",
        file=config_file,
        detail={"family": family.name, "engine": engine.spec, "served_families": sorted(engine.loaders)},
    )


def unmodelled_family_finding(config: Mapping[str, Any], engine: EngineProfile, config_file: str,
                              architecture: str | None, family: str | None = None) -> Finding:
    """ENG007: no family dspark models describes this config. Whether the
    engine serves it at all is its registry's answer (`architecture`, as
    `ArchitectureResolution.resolve` picks it): a class it registers that
    dspark has no rules for is loaded unjudged; none is refused at load."""
    named = f"model_type {config.get('model_type')!r} / architectures {config.get('architectures')!r}"
    if family is not None:
        # A family dspark models on other engines: it says which ones.
        return Finding(
            UNMODELLED_FAMILY,
            f"{config_file}: {named}: a {family} draft; {engine.spec} registers {architecture} and loads the draft "
            f"as that class, but dspark has no rules for how {engine.spec} serves {family} drafts and cannot vouch "
            f"for it: whether it is served as trained is not judged. `dspark families --family {family}` lists the "
            "engines dspark judges it on.",
            file=config_file,
            detail={"model_type": config.get("model_type"), "architectures": config.get("architectures"),
                    "engine": engine.spec, "engine_loads": architecture, "family": family,
                    "source": engine.architectures.source.cite()},
        )
    if architecture is not None:
        what = (f"{engine.spec} registers {architecture} and loads the draft as that class, for which dspark has "
                "no rules: whether it is served as trained is not judged")
    else:
        what = f"{engine.spec} registers no class it names either, so it refuses the draft at load"
    # The engine picks the model class from `architectures`; only the K3
    # DSpark config class fills it in when it is missing.
    fix = ("" if config.get("architectures") else
           " Name the draft's class in config.json, e.g. \"architectures\": [\"DFlashDraftModel\"]: the engine loads "
           "the class it names, and only a k3_dspark config gets one when it is missing.")
    return Finding(
        UNMODELLED_FAMILY,
        f"{config_file}: {named}: dspark does not model this draft family and cannot vouch for it; {what}. "
        f"dspark models: {known_families_text()}.{fix}",
        file=config_file,
        detail={"model_type": config.get("model_type"), "architectures": config.get("architectures"),
                "engine": engine.spec, "engine_loads": architecture,
                "source": engine.architectures.source.cite()},
    )


def resolve_family(config: Mapping[str, Any], engine: EngineProfile, config_file: str) -> Resolution:
    """The family the engine will serve this config as, or findings saying
    why it will not serve it. `family` is None only when dspark knows no
    family the config could describe."""
    # What the author meant: model_type names a family outright (k3_dspark);
    # otherwise the first architecture dspark knows.
    described = family_for_model_type(config.get("model_type")) or family_for_config(config)
    if described is not None and engine.loader_for(described.name) is None:
        loads, _ = engine.architectures.resolve(config.get("architectures"), config.get("model_type"))
        if loads is not None and family_for_architecture(loads) is described:
            # The engine registers the family's class; dspark has no loader
            # of this engine for it: unjudged (ENG007), not refused.
            return Resolution(None, loads, None, [], unmodelled_here=described.name)
        return Resolution(described, None, None, [not_served_finding(described, engine, config_file)])
    architecture, rewritten = engine.architectures.resolve(config.get("architectures"), config.get("model_type"))
    cite = engine.architectures.source.cite()
    if described is None and family_for_architecture(architecture) is None:
        return Resolution(None, architecture, None, [])
    if architecture is None:
        family = described
        finding = Finding(
            "ENG002",
            f"{config_file}: architectures {config.get('architectures')!r} (as the engine rewrites them: "
            f"{rewritten!r}) name no model class {engine.spec} registers; it refuses to load the draft. "
            f"List {', '.join(family.architectures)} first.",
            file=config_file,
            detail={"architectures": config.get("architectures"), "rewritten": rewritten, "source": cite},
        )
        return Resolution(family, None, engine.loader_for(family.name), [finding])
    family = family_for_architecture(architecture)
    findings: list[Finding] = []
    if family is None:
        findings.append(Finding(
            "ENG002",
            f"{config_file}: {engine.spec} loads the first registered entry of architectures "
            f"{rewritten!r}: {architecture}, which is not a draft model. List "
            f"{', '.join(described.architectures)} first.",
            file=config_file,
            detail={"architectures": config.get("architectures"), "loads": architecture, "source": cite},
        ))
        return Resolution(described, architecture, engine.loader_for(described.name), findings)
    if described is not None and described is not family:
        findings.append(Finding(
            "ENG002",
            f"{config_file}: {engine.spec} loads {architecture} (the first registered entry of "
            f"{config.get('architectures')!r}) as a {family.name} draft, while the config describes a "
            f"{described.name} draft; it is judged as the engine will load it. Put "
            f"{described.architectures[0]} first, or drop {architecture}.",
            file=config_file,
            detail={"architectures": config.get("architectures"), "loads": architecture, "source": cite},
        ))
    loader = engine.loader_for(family.name)
    return Resolution(family, architecture, loader, findings)
