"""Config rules: the JSON Schema of the family, then fields that depend on
each other."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from dspark.schema.engines.base import FamilyLoader
from dspark.schema.families import DraftFamily, nested_field
from dspark.schema.findings import Finding, Severity
from dspark.schema.rules.common import bounded_taps, is_int
from dspark.schema.rules.quick_validation import certainly_valid


@lru_cache(maxsize=None)
def load_config_schema(schema_file: str) -> dict[str, Any]:
    text = resources.files("dspark.schema.families").joinpath(schema_file).read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=None)
def _validator(schema_file: str):
    # jsonschema is imported here, not at module import, so that code paths
    # that never validate a config stay cheap.
    from jsonschema import Draft202012Validator, validators

    # JSON Schema counts 2.0 as an integer; the serving code does not
    # (`range(2.0)` raises), so a count or size must be a JSON integer.
    strict_integers = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    validator_class = validators.extend(
        Draft202012Validator,
        {keyword: _within_max_items(Draft202012Validator.VALIDATORS[keyword]) for keyword in ("items", "contains")},
        type_checker=strict_integers,
    )
    return validator_class(load_config_schema(schema_file))


def _within_max_items(check):
    """A keyword over a list's items that skips a list past its maxItems:
    maxItems reports it, and going over every item would take time in
    proportion to a length the input made up."""

    def check_within_bound(validator, value, instance, schema):
        if isinstance(instance, list) and len(instance) > schema.get("maxItems", len(instance)):
            return
        yield from check(validator, value, instance, schema)

    return check_within_bound


def _schema_message(error) -> str:
    """jsonschema's message, which quotes the value: a list far too long is
    counted instead of quoted, and no message runs on for pages."""
    if error.validator == "maxItems" and isinstance(error.instance, list):
        return f"{len(error.instance):,} items, more than the {error.validator_value} allowed"
    return error.message if len(error.message) <= 500 else error.message[:500] + " ..."


def schema_findings(config: Mapping[str, Any], family: DraftFamily, config_file: str,
                    unread: tuple[str, ...] = ()) -> list[Finding]:
    """JSON-Schema violations, each as a finding naming the field. A field
    the engine never reads (`unread`, its loader's `ignored_fields`) is not
    required of the config: its absence breaks nothing there."""
    if certainly_valid(config, load_config_schema(family.schema_file)):
        return []  # proved valid without importing jsonschema (quick_validation.py)
    findings = []
    for error in sorted(_validator(family.schema_file).iter_errors(config), key=lambda e: list(e.absolute_path)):
        if error.validator == "required" and not error.absolute_path and _missing_field(error.message) in unread:
            continue
        path = ".".join(str(part) for part in error.absolute_path)
        leaf = str(error.absolute_path[-1]) if error.absolute_path else ""
        if leaf == "aux_hidden_stream":
            code = "STR001"
            message = (
                f"{config_file}: {path} is {error.instance!r}; it must be 'prefix' or 'attn_res' "
                "(case-insensitive). Declare the stream the draft was trained against."
            )
        elif leaf == "fc_norm" and path == "fc_norm":
            # The engine reads bool(value) and loads by it
            # (models/llama_eagle3.py@f4d8ec6e:496, models/deepseek_v3.py@f4d8ec6e:2173,
            # configs/kimi_k3_dspark_config.py@4b9766f6:112); whether the draft
            # ships the weights that reading needs is judged by the fc_norm
            # rules (FCN001/FCN002), so the spelling itself is a warning.
            code = "ENG003"
            message = (
                f"{config_file}: fc_norm is {error.instance!r}, not a boolean. The engine reads "
                f"bool({error.instance!r}) = {bool(error.instance)}"
                + (", so the string 'false' turns fc_norm ON" if error.instance == "false" else "")
                + ". Write true or false."
            )
        elif leaf == "mask_token_id":
            code = "CFG008"
            message = f"{config_file}: {path} is {error.instance!r}; it must be a token id >= 0 (and below vocab_size)."
        else:
            code = "CFG003"
            where = path or "(top level)"
            message = (
                f"{config_file}: {where}: {_schema_message(error)}. Fix the field to match the "
                f"{family.name} config schema ({family.schema_file})."
            )
        findings.append(Finding(code, message, file=config_file, detail={"field": path, "validator": error.validator}))
    return findings


def _missing_field(message: str) -> str | None:
    """The property a `required` error names (jsonschema: "'name' is a required property")."""
    if message.startswith("'") and message.endswith("' is a required property"):
        return message[1:-len("' is a required property")]
    return None


def integer_fields(family: DraftFamily) -> tuple[str, ...]:
    """Top-level fields the family's schema types as integers: those the
    engine's config class runs int() over."""
    properties = load_config_schema(family.schema_file).get("properties", {})
    defs = load_config_schema(family.schema_file).get("$defs", {})

    def is_integer(spec: Mapping[str, Any]) -> bool:
        if spec.get("type") == "integer":
            return True
        ref = spec.get("$ref", "")
        return ref.startswith("#/$defs/") and defs.get(ref.rsplit("/", 1)[-1], {}).get("type") == "integer"

    return tuple(name for name, spec in properties.items() if isinstance(spec, Mapping) and is_integer(spec))


def cross_field_findings(config: Mapping[str, Any], family: DraftFamily, config_file: str,
                         loader: FamilyLoader | None = None) -> list[Finding]:
    findings: list[Finding] = []
    layer_ids, layer_ids_path = bounded_taps(family, config, loader)
    tap_count = config.get(family.tap_count_field) if family.tap_count_field else None
    target_layers = config.get("target_num_hidden_layers") if family.tap_count_field else None
    vocab = config.get("vocab_size")

    taps = loader.taps if loader is not None else None
    derives = taps is not None and (taps.defaults is not None or taps.count_fallback_field is not None)
    if layer_ids is None and family.tap_count_field is None and family.needs_mask_token and not derives:
        findings.append(Finding(
            "CFG005",
            f"{config_file}: no target_layer_ids (top level or non-empty dflash_config.target_layer_ids); "
            "the engine derives no default and refuses the draft. List the taps the draft was trained on.",
            file=config_file,
            detail={"target_layer_ids": None},
        ))
    if isinstance(layer_ids, list) and all(is_int(t) for t in layer_ids):
        if is_int(tap_count) and len(layer_ids) != tap_count:
            findings.append(Finding(
                "CFG005",
                f"{config_file}: {layer_ids_path} lists {len(layer_ids)} taps {layer_ids} but "
                f"{family.tap_count_field} is {tap_count}. Make them agree.",
                file=config_file,
                detail={"target_layer_ids": layer_ids, family.tap_count_field: tap_count},
            ))
        if any(b <= a for a, b in zip(layer_ids, layer_ids[1:])):
            findings.append(Finding(
                "CFG006",
                f"{config_file}: {layer_ids_path} {layer_ids} must be strictly ascending with no "
                "repeats: the engine refuses repeats and captures taps in ascending layer order, so "
                "any other order feeds fc's column blocks the wrong layers.",
                file=config_file,
                detail={"target_layer_ids": layer_ids},
            ))
        # Where the family's schema admits ids below what an engine captures
        # (DFlash: -1, the embeddings), the engine's loader says its lowest
        # id, tap_low (vLLM's runner adds 1 to a DFlash id and captures id 0,
        # the embeddings; TokenSpeed and SGLang refuse ids below 0); without
        # a loader, 0.
        floor = load_config_schema(family.schema_file).get("$defs", {}).get("layerId", {}).get("minimum")
        low = loader.tap_low if loader is not None else 0
        below = [t for t in layer_ids if t < low] if is_int(floor) and floor < low else []
        if below:
            cited = loader.sources.get("taps vs target") if loader is not None else None
            where = f" ({cited.cite()})" if cited is not None else ""
            findings.append(Finding(
                "CFG003",
                f"{config_file}: {layer_ids_path}: {below} below {low}, the lowest tap id this engine captures"
                f"{where}. List the layers the draft was trained on, numbered from {low}.",
                file=config_file,
                detail={"field": layer_ids_path, "validator": "engine", "below": below, "tap_low": low},
            ))
        if is_int(target_layers):
            outside = [t for t in layer_ids if not 0 <= t < target_layers]
            if outside:
                findings.append(Finding(
                    "CFG007",
                    f"{config_file}: taps {outside} are outside [0, {target_layers}) "
                    f"(target_num_hidden_layers = {target_layers}).",
                    file=config_file,
                    detail={"outside": outside, "target_num_hidden_layers": target_layers},
                ))

    if family.needs_mask_token:
        mask, mask_path = nested_field(config, "mask_token_id")
        top_level_only = family.tap_count_field is not None and config.get("mask_token_id") is None
        if top_level_only:
            # The K3 config class validates the top-level field alone and
            # refuses the draft without it, whatever dflash_config holds
            # (configs/kimi_k3_dspark_config.py@4b9766f6:114, 230-234).
            mask, mask_path = None, None
        fallback = loader.mask_token_fallback if loader is not None else ""
        if mask is None and fallback:
            findings.append(Finding(
                "CFG008",
                f"{config_file}: mask_token_id is missing; {fallback}, which may not be the token the draft was "
                "trained with. Set it to the id the draft was trained with.",
                file=config_file,
                detail={"field": "mask_token_id", "fallback": fallback},
                severity=Severity.WARNING,
            ))
        elif mask is None:
            where = (" at the top level (the engine's config validator reads only that one and refuses the "
                     "draft without it, whatever dflash_config holds)" if top_level_only else "")
            findings.append(Finding(
                "CFG008",
                f"{config_file}: mask_token_id is missing{where}; the draft fills its block with this token. "
                "Set it to the id the draft was trained with.",
                file=config_file,
                detail={"field": "mask_token_id"},
            ))
        elif is_int(mask) and is_int(vocab) and mask >= vocab:
            findings.append(Finding(
                "CFG008",
                f"{config_file}: {mask_path} = {mask} is outside [0, vocab_size = {vocab}).",
                file=config_file,
                detail={"mask_token_id": mask, "vocab_size": vocab},
            ))
        findings += _override_findings(config, family, config_file, loader)

    draft_vocab = config.get("draft_vocab_size")
    if "draft_vocab" not in family.dims and is_int(draft_vocab) and is_int(vocab) and draft_vocab != vocab:
        findings.append(Finding(
            "CFG009",
            f"{config_file}: draft_vocab_size = {draft_vocab} but vocab_size = {vocab}; a "
            f"{family.name} draft borrows the target's head and the engine never reads "
            "draft_vocab_size. Set it to vocab_size or drop it, so other loaders agree.",
            file=config_file,
            detail={"draft_vocab_size": draft_vocab, "vocab_size": vocab},
        ))
    for rule in family.config_rules:
        findings += rule(config, config_file)
    return findings


def _override_findings(config: Mapping[str, Any], family: DraftFamily, config_file: str,
                       loader: FamilyLoader | None = None) -> list[Finding]:
    """A value in `dflash_config` that differs from the top-level one.

    The K3 model validates the top-level taps, mask token and stream, while
    its drafter serves `dflash_config`'s first (taps and stream when truthy,
    the mask token when not None; execution/drafter/dflash.py@4b9766f6:52-58,
    146-162): the nested value is served unvalidated, an error. The GQA model
    and drafter read the nested taps and mask token first and never the
    top-level ones (models/dflash.py@f4d8ec6e:382-385;
    execution/drafter/dflash.py@f4d8ec6e:137-150): the engine agrees with
    itself, but the config says two things, and whoever reads the top-level
    one (the trainer, another engine) was given another draft. Both are
    errors: which value the draft was trained with cannot be known here."""
    nested = config.get("dflash_config")
    if not isinstance(nested, Mapping):
        return []
    if family.tap_count_field is not None:
        fields, validated = ("target_layer_ids", "mask_token_id", "aux_hidden_stream"), True
    elif family.tap_ids_section == "dflash_config":
        fields, validated = ("target_layer_ids", "mask_token_id"), False
    else:
        return []
    if loader is not None and loader.nested_overrides is not None:
        fields = tuple(name for name in fields if name in loader.nested_overrides)
    findings = []
    for name in fields:
        inner, outer = nested.get(name), config.get(name)
        served = inner is not None if name == "mask_token_id" else bool(inner)
        same = (inner.lower() == outer.lower() if isinstance(inner, str) and isinstance(outer, str)
                else inner == outer)
        if served and outer is not None and not same:
            said = ("The engine validates the top-level value and serves the nested one" if validated
                    else "The engine serves the nested value and never reads the top-level one")
            findings.append(Finding(
                "OVR001",
                f"{config_file}: dflash_config.{name} = {inner!r} but {name} = {outer!r}. {said}. "
                "Make them equal.",
                file=config_file,
                detail={"field": name, "nested": inner, "top_level": outer, "validated": validated},
            ))
    return findings


_YARN_TYPES = ("yarn", "deepseek_yarn")


def rope_findings(config: Mapping[str, Any], config_file: str, *, rope_scaling_wins: bool = True) -> list[Finding]:
    """YaRN as the engine's rotary setup reads it: `rope_parameters`,
    replaced wholesale by a top-level `rope_scaling`; `factor` is required,
    `original_max_position_embeddings` is required except for lowercase
    "yarn", where transformers fills it from max_position_embeddings
    (configs/kimi_k3_dspark_config.py@4b9766f6:148-174;
    layers/rotary_embedding.py@4b9766f6:1436-1437).

    `rope_scaling_wins` False: TokenSpeed's own Qwen2/Qwen3 config classes
    (the GQA drafts' model types qwen2 and qwen3), which take only
    `rope_scaling` for themselves and hand `rope_parameters` to transformers
    unfilled (configs/qwen3_config.py@f4d8ec6e:189, 240;
    configs/qwen2_config.py@f4d8ec6e:103): there a "yarn" block in
    `rope_parameters` without original_max_position_embeddings fails
    transformers' validation when the config is loaded (a KeyError naming
    the key, transformers 5.12), the draft refused at startup."""
    findings: list[Finding] = []
    parameters = config.get("rope_parameters")
    field_name = "rope_parameters"
    # (`rope_scaling_wins` False: a model that reads rope_parameters first,
    # the GQA drafts on TokenSpeed's Qwen config classes; their limits say
    # what a differing rope_scaling costs.)
    if isinstance(config.get("rope_scaling"), Mapping) and (rope_scaling_wins or not isinstance(parameters, Mapping)):
        if isinstance(parameters, Mapping) and parameters != config["rope_scaling"]:
            findings.append(Finding(
                "ROP002",
                f"{config_file}: rope_scaling replaces rope_parameters entirely in the engine's config "
                "loader; the keys only rope_parameters holds are lost. Keep one of them.",
                file=config_file,
                detail={"field": "rope_scaling"},
            ))
        parameters, field_name = config["rope_scaling"], "rope_scaling"
    if not isinstance(parameters, Mapping):
        return findings
    rope_type = str(parameters.get("rope_type", parameters.get("type", "default")))
    if rope_type.lower() not in _YARN_TYPES:
        return findings
    if "factor" not in parameters:
        findings.append(Finding(
            "ROP001",
            f"{config_file}: {field_name} declares {rope_type} but has no factor; the engine's rotary "
            "setup needs it and refuses the draft. Add the YaRN factor the draft was trained with.",
            file=config_file,
            detail={"field": f"{field_name}.factor"},
        ))
    elif not isinstance(parameters["factor"], (int, float)) or isinstance(parameters["factor"], bool):
        findings.append(Finding(
            "ROP001",
            f"{config_file}: {field_name}.factor is {parameters['factor']!r}, not a number; the "
            "engine's YaRN setup fails on it.",
            file=config_file,
            detail={"field": f"{field_name}.factor"},
        ))
    if "original_max_position_embeddings" not in parameters:
        if rope_type == "yarn" and not rope_scaling_wins and field_name == "rope_parameters":
            findings.append(Finding(
                "ROP001",
                f"{config_file}: rope_parameters (yarn) has no original_max_position_embeddings; the engine's "
                f"{config.get('model_type')} config class hands rope_parameters to transformers' validation "
                "unfilled, which refuses it when the config is loaded. Write the value the draft was trained "
                "with (or give the block as rope_scaling, which the class fills from "
                "max_position_embeddings).",
                file=config_file,
                detail={"field": "rope_parameters.original_max_position_embeddings",
                        "source": "configs/qwen3_config.py@f4d8ec6e:189, 240; configs/qwen2_config.py@f4d8ec6e:103"},
            ))
        elif rope_type == "yarn":
            findings.append(Finding(
                "ROP002",
                f"{config_file}: {field_name} has no original_max_position_embeddings; the engine's "
                f"config loader fills it from max_position_embeddings = "
                f"{config.get('max_position_embeddings')!r}, a different YaRN than one trained on a "
                "shorter original context. Write the value the draft was trained with.",
                file=config_file,
                detail={"field": f"{field_name}.original_max_position_embeddings"},
            ))
        else:
            findings.append(Finding(
                "ROP001",
                f"{config_file}: {field_name} ({rope_type}) has no original_max_position_embeddings; the "
                "engine's rotary setup needs it and refuses the draft.",
                file=config_file,
                detail={"field": f"{field_name}.original_max_position_embeddings"},
            ))
    return findings
