"""Config rules: the JSON Schema of the family, then fields that depend on
each other."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from dspark.schema.families import DraftFamily, nested_field
from dspark.schema.findings import Finding
from dspark.schema.rules.common import is_int


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
    validator_class = validators.extend(Draft202012Validator, type_checker=strict_integers)
    return validator_class(load_config_schema(schema_file))


def schema_findings(config: Mapping[str, Any], family: DraftFamily, config_file: str) -> list[Finding]:
    """JSON-Schema violations, each as a finding naming the field."""
    findings = []
    for error in sorted(_validator(family.schema_file).iter_errors(config), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(part) for part in error.absolute_path)
        leaf = str(error.absolute_path[-1]) if error.absolute_path else ""
        if leaf == "aux_hidden_stream":
            code = "STR001"
            message = (
                f"{config_file}: {path} is {error.instance!r}; it must be 'prefix' or 'attn_res' "
                "(case-insensitive). Declare the stream the draft was trained against."
            )
        elif leaf == "mask_token_id":
            code = "CFG008"
            message = f"{config_file}: {path} is {error.instance!r}; it must be a token id >= 0."
        else:
            code = "CFG003"
            where = path or "(top level)"
            message = (
                f"{config_file}: {where}: {error.message}. Fix the field to match the "
                f"{family.name} config schema ({family.schema_file})."
            )
        findings.append(Finding(code, message, file=config_file, detail={"field": path, "validator": error.validator}))
    return findings


def cross_field_findings(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    findings: list[Finding] = []
    layer_ids, layer_ids_path = nested_field(config, "target_layer_ids")
    tap_count = config.get("num_target_layers")
    target_layers = config.get("target_num_hidden_layers")
    vocab = config.get("vocab_size")

    if isinstance(layer_ids, list) and all(is_int(t) for t in layer_ids):
        if is_int(tap_count) and len(layer_ids) != tap_count:
            findings.append(Finding(
                "CFG005",
                f"{config_file}: {layer_ids_path} lists {len(layer_ids)} taps {layer_ids} but "
                f"num_target_layers is {tap_count}. Make them agree.",
                file=config_file,
                detail={"target_layer_ids": layer_ids, "num_target_layers": tap_count},
            ))
        if any(b <= a for a, b in zip(layer_ids, layer_ids[1:])):
            findings.append(Finding(
                "CFG006",
                f"{config_file}: {layer_ids_path} {layer_ids} must be strictly ascending with no "
                "repeats (the taps are concatenated in layer order).",
                file=config_file,
                detail={"target_layer_ids": layer_ids},
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

    mask, mask_path = nested_field(config, "mask_token_id")
    if mask is None:
        findings.append(Finding(
            "CFG008",
            f"{config_file}: mask_token_id is missing; the draft fills its block with this token. "
            "Set it to the id the draft was trained with.",
            file=config_file,
            detail={"field": "mask_token_id"},
        ))
    elif is_int(mask) and is_int(vocab) and mask >= vocab:
        # (a negative id is a schema finding already; one finding per fault)
        findings.append(Finding(
            "CFG008",
            f"{config_file}: {mask_path} = {mask} is outside [0, vocab_size = {vocab}).",
            file=config_file,
            detail={"mask_token_id": mask, "vocab_size": vocab},
        ))

    draft_vocab = config.get("draft_vocab_size")
    if is_int(draft_vocab) and is_int(vocab) and draft_vocab != vocab:
        findings.append(Finding(
            "CFG009",
            f"{config_file}: draft_vocab_size = {draft_vocab} but vocab_size = {vocab}; the draft "
            "borrows the target's head, so they must be equal.",
            file=config_file,
            detail={"draft_vocab_size": draft_vocab, "vocab_size": vocab},
        ))
    return findings
