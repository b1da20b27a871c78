"""Declared features against the tensors shipped for them.

A feature (`fc_norm`, `norm_before_fc`) is a boolean config flag that adds
tensors (family rules with `when=feature`). The engine reads the flag with
`bool()` and either honours it or not. Declared and shipped must agree, and
the engine must honour what the draft needs; anything else is a draft that
fails to load or loads and serves wrong. Each feature has its own pair of finding
codes (`fc_norm`: FCN001/FCN002).
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.dtypes import is_floating
from dspark.schema.engines import EngineProfile, FamilyLoader
from dspark.schema.engines.base import ANY_MODEL_TYPE
from dspark.schema.families import DraftFamily, ExpectedTensor
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.rules.common import shape_text

# (declared without weights, weights without declaration), per feature: a
# family that adds a feature adds its codes here.
_CODES = {
    "fc_norm": ("FCN001", "FCN002"),
    "norm_before_fc": ("FEA001", "FEA002"),
}


def feature_findings(
    feature: str,
    family: DraftFamily,
    loader: FamilyLoader | None,
    engine: EngineProfile,
    config: Mapping[str, Any],
    shipped: Mapping[str, TensorEntry],
    expected_all: Mapping[str, ExpectedTensor],
    dims: Mapping[str, int],
    config_file: str,
) -> list[Finding]:
    findings: list[Finding] = []
    raw = config.get(feature)
    declared = bool(raw)  # what the engine reads (a non-boolean is a schema finding)
    names = sorted(n for n in shipped if _feature_of(n, family, expected_all) == feature)
    if loader is not None and not loader.supports(feature):
        if declared or names:
            support = loader.features[feature]
            findings.append(Finding(
                "ENG001",
                f"{engine.spec} does not honour {feature} for a {family.name} draft "
                f"({support.when_unsupported}). This draft "
                + ("declares it" if declared else "")
                + (" and " if declared and names else "")
                + (f"ships {len(names)} {feature} weight(s)" if names else "")
                + ". Serve it on an engine that honours the feature, or retrain without it.",
                file=config_file,
                tensor=names[0] if names else None,
                detail={"feature": feature, "engine": engine.spec, "declared": raw, "shipped": names,
                        "source": support.source.cite()},
            ))
        return findings
    missing_code, unexpected_code = _CODES[feature]
    rules = [e for e in expected_all.values() if e.rule.when == feature]
    expected_count = len(rules)
    engine_word = "fails to load it" if loader is not None and loader.missing == "rejects" else (
        "serves the norm with its initial weights (ones), without a word")
    if declared and not names:
        findings.append(Finding(
            missing_code,
            f"{config_file} declares {feature}: {raw!r} but no {feature} weight is shipped (expected "
            f"{expected_count}); the engine {engine_word}. Export the {feature} weights, or set "
            f"{feature}: false if the draft has none.",
            file=config_file,
            detail={"feature": feature, "expected_count": expected_count},
        ))
        return findings
    if names and not declared:
        state = "absent" if raw is None else f"{raw!r}"
        drop = {"rejects": "rejects them as unexpected",
                "drops_logged": "logs them as not in the model and drops them"}.get(
            loader.unexpected if loader is not None else "rejects", "drops them without a word")
        findings.append(Finding(
            unexpected_code,
            f"{len(names)} {feature} weights are shipped but {config_file} has {feature} {state}; the "
            f"engine {drop}, and the draft is not served as it was trained. Set {feature}: true in "
            "config.json.",
            file=config_file,
            tensor=names[0],
            detail={"feature": feature, "shipped": names, "declared": raw},
        ))
        return findings
    if feature == "fc_norm" and names:
        findings += _fc_norm_shape_findings(family, shipped, names, dims, config_file, rules)
    elif names:
        findings += _feature_shape_findings(shipped, names, expected_all)
    return findings


def _feature_shape_findings(
    shipped: Mapping[str, TensorEntry], names: list[str], expected_all: Mapping[str, ExpectedTensor]
) -> list[Finding]:
    """Shape and dtype of a feature's tensors other than fc_norm's
    (`input_norm` for norm_before_fc): the engine's norm loader refuses
    another shape."""
    findings: list[Finding] = []
    for name in names:
        entry, want = shipped[name], expected_all.get(name)
        if want is not None and entry.shape != want.shape:
            findings.append(Finding(
                "INV003",
                f"{entry.file}: {name} is {shape_text(entry.shape)} but the config implies "
                f"{shape_text(want.shape)} ({', '.join(want.rule.shape)}); the engine fails to load it.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "expected": list(want.shape)},
            ))
        if not is_floating(entry.dtype):
            findings.append(Finding(
                "INV004",
                f"{entry.file}: {name} has dtype {entry.dtype}; a norm weight must be floating point.",
                file=entry.file,
                tensor=name,
                detail={"dtype": entry.dtype},
            ))
    return findings


def _feature_of(name: str, family: DraftFamily, expected_all: Mapping[str, ExpectedTensor]) -> str | None:
    want = expected_all.get(name)
    if want is not None:
        return want.rule.when
    if family.fc_norm_index(name) is not None or name.startswith("fc_norm."):
        return "fc_norm"
    return None


def feature_tensor_names(family: DraftFamily, names, expected_all: Mapping[str, ExpectedTensor]) -> set[str]:
    """Shipped names that belong to a declared feature (judged here, not by
    the inventory)."""
    return {n for n in names if _feature_of(n, family, expected_all) in family.declared_features}


def _fc_norm_shape_findings(
    family: DraftFamily,
    shipped: Mapping[str, TensorEntry],
    names: list[str],
    dims: Mapping[str, int],
    config_file: str,
    rules: list[ExpectedTensor],
) -> list[Finding]:
    findings: list[Finding] = []
    taps = dims.get("S")
    width = rules[0].shape if rules else None
    indices = {}
    for name in names:
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
        if width is not None and entry.shape != width:
            findings.append(Finding(
                "FCN004",
                f"{entry.file}: {name} is {shape_text(entry.shape)}; the engine builds it "
                f"{shape_text(width)} ({rules[0].rule.shape[0]}) and fails to load another shape.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "expected": list(width)},
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


def unread_flag_findings(
    loader: FamilyLoader | None, engine: EngineProfile, config: Mapping[str, Any], config_file: str
) -> list[Finding]:
    """A flag that changes the draft's arithmetic, set true, where this
    engine never reads it: the draft loads and is served wrong."""
    findings: list[Finding] = []
    for flag, support in (loader.unread_flags.items() if loader is not None else ()):
        if support.fixed_value is None:
            unread = bool(config.get(flag))
            retrain = "retrain without it"
        else:
            unread = (config.get(flag) is not None and config.get(flag) != support.fixed_value
                      and config.get(flag) not in support.same_as_fixed)
            retrain = f"retrain with {flag} = {support.fixed_value!r}"
        if unread:
            findings.append(Finding(
                "ENG001",
                f"{config_file}: {flag} is {config[flag]!r}, but {engine.spec} does not honour it "
                f"({support.when_unsupported}). Serve the draft on an engine that reads {flag}, or {retrain}.",
                file=config_file,
                detail={"feature": flag, "engine": engine.spec, "declared": config[flag],
                        "source": support.source.cite()},
            ))
    return findings


def quantization_findings(engine: EngineProfile, config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """A quantization block makes the engine build quantized layers with
    scale parameters; no draft family dspark models ships them, so such a
    draft fails to load or serves unscaled weights."""
    declared = [key for key in engine.quantization_keys if config.get(key)]
    if not declared:
        return []
    source = engine.quantization_source.cite() if engine.quantization_source else None
    return [Finding(
        "ENG005",
        f"{config_file}: {', '.join(declared)} is set, so {engine.spec} builds every linear layer quantized, "
        "with scale parameters this draft's floating-point tensors do not fill. Drop the block for a "
        "bf16/fp16 draft.",
        file=config_file,
        detail={"fields": declared, "engine": engine.spec, "source": source},
    )]


def _adopted_text_config_findings(engine: EngineProfile, config: Mapping[str, Any],
                                  config_file: str) -> list[Finding]:
    """A text_config the engine takes as the draft's text config, whose
    shape fields it then reads from there alone (not from the top level):
    one left out stops it at startup."""
    text = config.get("text_config")
    if not engine.text_config_requires:
        return []
    missing = [key for key in engine.text_config_requires
               if not (isinstance(text, Mapping) and text.get(key) is not None)]
    if not missing:
        return []
    source = engine.text_config_requires_source.cite() if engine.text_config_requires_source else None
    return [Finding(
        "CFG011",
        f"{config_file}: has a text_config, which {engine.spec} takes as the draft's text config and reads "
        f"{', '.join(engine.text_config_requires)} from, not from the top level; it has no "
        f"{', '.join(missing)}, so the engine stops at startup. Remove text_config from the draft's "
        "config.json (a copy of the target's multimodal config), keeping the draft's fields at the top level.",
        file=config_file,
        detail={"field": "text_config", "missing": missing, "engine": engine.spec, "source": source},
    )]


def text_config_findings(engine: EngineProfile, config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """A `text_config` key in the draft's own config.json: the engine's
    config loader refuses the draft at startup unless its model_type's
    config class builds the key into a config (EngineProfile.
    text_config_model_types). A key copied from a multimodal target's
    config is the usual way it gets there."""
    if "text_config" not in config or (config["text_config"] is None and engine.text_config_null_is_absent):
        return []
    if config.get("model_type") in engine.text_config_model_types or ANY_MODEL_TYPE in engine.text_config_model_types:
        return _adopted_text_config_findings(engine, config, config_file)
    source = engine.text_config_source.cite() if engine.text_config_source else None
    return [Finding(
        "CFG011",
        f"{config_file}: has a text_config, which the config class of model_type {config.get('model_type')!r} "
        f"keeps as a plain value; {engine.spec}'s config loader requires text_config to be a config with "
        f"num_attention_heads and refuses the draft at startup{f' ({source})' if source else ''}. Remove "
        "text_config from the draft's config.json, moving any field the draft needs (eagle_config, its tap ids) "
        "to the top level.",
        file=config_file,
        detail={"field": "text_config", "model_type": config.get("model_type"), "engine": engine.spec,
                "source": source},
    )]
