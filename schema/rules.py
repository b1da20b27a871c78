"""The contract rules: a config and a tensor inventory in, findings out.

Nothing here opens a file: callers hand over the parsed config, the
inventory from the readers, and (for `--deep`) payload statistics.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

from dspark.schema.dtypes import is_floating
from dspark.schema.families import DraftFamily, ExpectedTensor, family_for_config, nested_field
from dspark.schema.findings import Finding
from dspark.schema.inventory import PayloadStats, TensorEntry, printable_name

STREAMS = ("prefix", "attn_res")
DEFAULT_STREAM = "prefix"
STREAM_ENV_VAR = "TOKENSPEED_DFLASH_AUX_STREAM"
# Roles of RMSNorm weights, whose all-zero payload is an error.
NORM_ROLES = ("norm", "context_norm", "fc_norm")
# Roles of weight matrices: an all-zero one computes nothing (PAY004).
MATRIX_ROLES = ("matrix", "context_proj")


# --------------------------------------------------------------------------
# Resolved view of a draft


@dataclass
class ResolvedDraft:
    """What the serving side will do with this draft, as far as the config
    and the shipped tensors tell."""

    family: str | None = None
    fc_norm_declared: Any = None  # the raw value; None when absent
    fc_norm_shipped: int = 0  # number of fc_norm.* tensors shipped
    fc_norm: bool = False  # declared true
    stream: str | None = None  # effective stream; None when unresolvable
    stream_declared: str | None = None
    stream_source: str = "default"
    target_layer_ids: list[int] = field(default_factory=list)
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    target_checked: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TargetFacts:
    """The fields of a target model's config that a draft depends on.
    Values nested under `text_config` (K3's multimodal config) count."""

    source: str
    hidden_size: Any = None
    num_hidden_layers: Any = None
    vocab_size: Any = None
    attn_res_block_size: Any = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str) -> "TargetFacts":
        text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}

        def pick(name: str) -> Any:
            return text.get(name, config.get(name))

        return cls(
            source=source,
            hidden_size=pick("hidden_size"),
            num_hidden_layers=pick("num_hidden_layers"),
            vocab_size=pick("vocab_size"),
            attn_res_block_size=pick("attn_res_block_size"),
        )

    def can_supply_attn_res(self) -> bool:
        value = self.attn_res_block_size
        return _is_int(value) and value > 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------
# Config rules


@lru_cache(maxsize=None)
def load_config_schema(schema_file: str) -> dict[str, Any]:
    text = resources.files("dspark.schema").joinpath(schema_file).read_text(encoding="utf-8")
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

    if isinstance(layer_ids, list) and all(_is_int(t) for t in layer_ids):
        if _is_int(tap_count) and len(layer_ids) != tap_count:
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
        if _is_int(target_layers):
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
    elif _is_int(mask) and _is_int(vocab) and mask >= vocab:
        # (a negative id is a schema finding already; one finding per fault)
        findings.append(Finding(
            "CFG008",
            f"{config_file}: {mask_path} = {mask} is outside [0, vocab_size = {vocab}).",
            file=config_file,
            detail={"mask_token_id": mask, "vocab_size": vocab},
        ))

    draft_vocab = config.get("draft_vocab_size")
    if _is_int(draft_vocab) and _is_int(vocab) and draft_vocab != vocab:
        findings.append(Finding(
            "CFG009",
            f"{config_file}: draft_vocab_size = {draft_vocab} but vocab_size = {vocab}; the draft "
            "borrows the target's head, so they must be equal.",
            file=config_file,
            detail={"draft_vocab_size": draft_vocab, "vocab_size": vocab},
        ))
    return findings


# --------------------------------------------------------------------------
# aux_hidden_stream


def stream_findings(
    config: Mapping[str, Any],
    resolved: ResolvedDraft,
    config_file: str,
    environ: Mapping[str, str],
    target: TargetFacts | None,
) -> list[Finding]:
    findings: list[Finding] = []
    declared, declared_path = nested_field(config, "aux_hidden_stream")
    if declared is None:
        stream, source = DEFAULT_STREAM, "default (not declared)"
    elif isinstance(declared, str) and declared.lower() in STREAMS:
        stream, source = declared.lower(), f"{config_file}: {declared_path}"
    else:
        # The schema finding (STR001) already says what is wrong.
        stream, source = None, f"{config_file}: {declared_path}"
    resolved.stream_declared = stream
    resolved.stream_source = source

    override = environ.get(STREAM_ENV_VAR)
    if override is not None and override != "":
        if override.lower() not in STREAMS:
            findings.append(Finding(
                "STR003",
                f"{STREAM_ENV_VAR}={override!r} is not 'prefix' or 'attn_res'; the serving engine "
                "would refuse to start. Unset it or fix its value.",
                detail={"env": STREAM_ENV_VAR, "value": override},
            ))
        elif stream is not None and override.lower() != stream:
            findings.append(Finding(
                "STR004",
                f"{STREAM_ENV_VAR}={override.lower()} overrides the checkpoint's {stream} "
                f"({source}); fine for an A/B run, wrong for a deploy.",
                detail={"env": STREAM_ENV_VAR, "override": override.lower(), "declared": stream},
            ))
            stream, source = override.lower(), f"environment: {STREAM_ENV_VAR}"
    resolved.stream = stream
    resolved.stream_source = source

    if stream is None:
        return findings
    findings.append(Finding(
        "STR002",
        f"aux_hidden_stream resolves to {stream} (from {source}).",
        file=config_file,
        detail={"stream": stream, "source": source},
    ))
    if stream == "attn_res":
        if target is None:
            findings.append(Finding(
                "STR005",
                "the draft reads the attn_res stream, which only a target with a positive "
                "attn_res_block_size can supply; pass --target to verify it.",
                file=config_file,
                detail={"stream": stream},
            ))
        elif not target.can_supply_attn_res():
            findings.append(Finding(
                "STR006",
                f"the draft reads the attn_res stream but the target ({target.source}) has "
                f"attn_res_block_size = {target.attn_res_block_size!r}; it can only supply "
                "'prefix'. Deploy against an AttnRes target or retrain on the prefix stream.",
                file=target.source,
                detail={"stream": stream, "attn_res_block_size": target.attn_res_block_size},
            ))
    return findings


# --------------------------------------------------------------------------
# --target


def target_findings(config: Mapping[str, Any], target: TargetFacts) -> list[Finding]:
    findings: list[Finding] = []
    checks = (
        ("TGT002", "target_hidden_size", target.hidden_size, "hidden_size"),
        ("TGT003", "target_num_hidden_layers", target.num_hidden_layers, "num_hidden_layers"),
        ("TGT004", "vocab_size", target.vocab_size, "vocab_size"),
    )
    for code, draft_field, target_value, target_field in checks:
        draft_value = config.get(draft_field)
        if not _is_int(target_value):
            findings.append(Finding(
                "TGT001",
                f"{target.source}: {target_field} is missing or not an integer "
                f"({target_value!r}); cannot verify the draft's {draft_field}.",
                file=target.source,
                detail={"field": target_field},
            ))
            continue
        if _is_int(draft_value) and draft_value != target_value:
            findings.append(Finding(
                code,
                f"draft {draft_field} = {draft_value} but the target ({target.source}) has "
                f"{target_field} = {target_value}. This draft was trained for another target.",
                file=target.source,
                detail={"draft": draft_value, "target": target_value, "field": draft_field},
            ))
    layer_ids, _ = nested_field(config, "target_layer_ids")
    if _is_int(target.num_hidden_layers) and isinstance(layer_ids, list):
        outside = [t for t in layer_ids if _is_int(t) and not 0 <= t < target.num_hidden_layers]
        if outside:
            findings.append(Finding(
                "TGT005",
                f"taps {outside} do not exist in the target ({target.source}), which has "
                f"{target.num_hidden_layers} layers.",
                file=target.source,
                detail={"outside": outside, "target_layers": target.num_hidden_layers},
            ))
    return findings


# --------------------------------------------------------------------------
# Tensor inventory


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def inventory_findings(
    family: DraftFamily,
    config: Mapping[str, Any],
    entries: Sequence[TensorEntry],
    resolved: ResolvedDraft,
    config_file: str,
) -> tuple[list[Finding], dict[str, ExpectedTensor]]:
    """Compare what is shipped with what the config implies."""
    findings: list[Finding] = []
    dims = family.resolve_dims(config)
    fc_norm_declared = config.get("fc_norm")
    resolved.fc_norm_declared = fc_norm_declared
    resolved.fc_norm = fc_norm_declared is True
    expected, unresolved = family.expected_tensors(dims, {"fc_norm": True})
    # Names of rules a missing dimension left unexpanded: their tensors
    # cannot be judged (the config finding says why), not "unexpected".
    unjudged = [_rule_pattern(rule) for rule in unresolved]

    shipped: dict[str, TensorEntry] = {}
    for entry in entries:
        first = shipped.get(entry.served_name)
        if first is not None:
            findings.append(Finding(
                "INV006",
                f"{entry.file}: {printable_name(entry.stored_name)!s} and {first.file}: "
                f"{printable_name(first.stored_name)} both load as "
                f"{printable_name(entry.served_name)}; keep one.",
                file=entry.file,
                tensor=entry.served_name,
                detail={"stored_names": [first.stored_name, entry.stored_name], "files": [first.file, entry.file]},
            ))
            continue
        shipped[entry.served_name] = entry

    fc_norm_names = {name for name in shipped if name.startswith("fc_norm.")}
    resolved.fc_norm_shipped = len(fc_norm_names)
    findings += _fc_norm_findings(family, shipped, fc_norm_names, fc_norm_declared, dims, config_file)
    fc_norm_expected = {name for name, e in expected.items() if e.role == "fc_norm"}

    for name, entry in shipped.items():
        if name in fc_norm_names:
            continue  # judged by the fc_norm rules above
        if family.is_skipped(name):
            findings.append(Finding(
                "INV005",
                f"{entry.file}: {printable_name(name)} is skipped by the serving loader "
                f"({entry.nbytes:,} bytes shipped for nothing).",
                file=entry.file,
                tensor=name,
                detail={"nbytes": entry.nbytes, "dtype": entry.dtype, "shape": list(entry.shape)},
            ))
            continue
        want = expected.get(name)
        if want is None:
            if any(pattern.fullmatch(name) for pattern in unjudged):
                continue
            findings.append(Finding(
                "INV002",
                f"{entry.file}: {printable_name(name)} (stored as {printable_name(entry.stored_name)}) "
                f"has no destination in a {family.name} draft; the serving loader rejects it. "
                "Remove it, or fix the config if it describes fewer layers/taps than shipped.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "dtype": entry.dtype},
            ))
            continue
        if entry.shape != want.shape:
            if want.role == "context_proj" and len(entry.shape) == 2 and entry.shape[0] == want.shape[0]:
                findings.append(Finding(
                    "CTX001",
                    f"{entry.file}: {name} is {_shape_text(entry.shape)}; its input width must be "
                    f"taps x target_hidden_size = {dims.get('S')} x {dims.get('th')} = {want.shape[1]}.",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "expected": list(want.shape)},
                ))
            else:
                findings.append(Finding(
                    "INV003",
                    f"{entry.file}: {name} is {_shape_text(entry.shape)} but the config implies "
                    f"{_shape_text(want.shape)} ({', '.join(want.rule.shape)}).",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "expected": list(want.shape)},
                ))
        if not is_floating(entry.dtype):
            findings.append(Finding(
                "INV004",
                f"{entry.file}: {name} has dtype {entry.dtype}; weights must be floating point.",
                file=entry.file,
                tensor=name,
                detail={"dtype": entry.dtype},
            ))

    for name, want in expected.items():
        if name in shipped or name in fc_norm_expected:
            continue
        findings.append(Finding(
            "INV001",
            f"{name} {_shape_text(want.shape)} is missing; the serving loader fails on an unfilled "
            "destination. Re-export the checkpoint with every layer.",
            file=None,
            tensor=name,
            detail={"expected_shape": list(want.shape)},
        ))

    served_weights = [e for n, e in shipped.items() if not family.is_skipped(n)]
    f32 = [e for e in served_weights if e.dtype == "F32"]
    if served_weights and len(f32) == len(served_weights):
        total = sum(e.nbytes for e in f32)
        findings.append(Finding(
            "INV007",
            f"all {len(f32)} served tensors are float32 ({total:,} bytes); drafts usually serve in "
            "bfloat16. Convert with `dspark convert --dtype bfloat16` unless float32 is intended.",
            detail={"tensors": len(f32), "nbytes": total},
        ))
    return findings, expected


def _rule_pattern(rule_name: str) -> "re.Pattern[str]":
    """`layers.{n}.mlp.up_proj.weight` -> a regex matching every layer's name."""
    return re.compile(re.escape(rule_name).replace(r"\{n\}", r"\d+").replace(r"\{i\}", r"\d+"))


def _fc_norm_findings(
    family: DraftFamily,
    shipped: Mapping[str, TensorEntry],
    fc_norm_names: set[str],
    declared: Any,
    dims: Mapping[str, int],
    config_file: str,
) -> list[Finding]:
    findings: list[Finding] = []
    taps = dims.get("S")
    target_hidden = dims.get("th")
    if declared is True and not fc_norm_names:
        findings.append(Finding(
            "FCN001",
            f"{config_file} declares fc_norm: true but no fc_norm.{{i}}.weight tensor is shipped "
            f"(expected {taps}). The server would fail to load, or serve identity norms. Export "
            "the fc_norm weights, or set fc_norm: false if the draft has none.",
            file=config_file,
            detail={"expected_count": taps},
        ))
        return findings
    if fc_norm_names and declared is not True:
        state = "absent" if declared is None else f"{declared!r}"
        findings.append(Finding(
            "FCN002",
            f"{len(fc_norm_names)} fc_norm weights are shipped but {config_file} has fc_norm "
            f"{state}; a server would drop them and feed context_proj unnormalised taps. "
            "Set fc_norm: true in config.json.",
            file=config_file,
            tensor=sorted(fc_norm_names)[0],
            detail={"shipped": sorted(fc_norm_names), "declared": declared},
        ))
        return findings
    if not fc_norm_names:
        return findings

    indices = {}
    for name in sorted(fc_norm_names):
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
        if target_hidden is not None and entry.shape != (target_hidden,):
            findings.append(Finding(
                "FCN004",
                f"{entry.file}: {name} is {_shape_text(entry.shape)}; it must be "
                f"[target_hidden_size] = [{target_hidden}].",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "expected": [target_hidden]},
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


# --------------------------------------------------------------------------
# Payloads (--deep)


def payload_findings(
    scanned: Iterable[tuple[TensorEntry, PayloadStats]],
    expected: Mapping[str, ExpectedTensor],
) -> list[Finding]:
    """Findings from payload statistics. The caller streams the payloads and
    hands over (entry, stats) pairs; roles come from the expected inventory."""
    findings: list[Finding] = []
    for entry, stats in scanned:
        name = entry.served_name
        want = expected.get(name)
        role = want.role if want else ("fc_norm" if name.startswith("fc_norm.") else None)
        if stats.nonfinite_count:
            findings.append(Finding(
                "PAY001",
                f"{entry.file}: {name} holds {stats.nonfinite_count:,} NaN/Inf values; the "
                "training run diverged or the export is corrupt. Do not deploy it.",
                file=entry.file,
                tensor=name,
                detail={"nonfinite": stats.nonfinite_count},
            ))
        if role in NORM_ROLES and stats.all_zero and entry.numel:
            findings.append(Finding(
                "PAY002",
                f"{entry.file}: {name} is all zeros; the norm would zero its input. "
                "The weight was never trained or was lost in export.",
                file=entry.file,
                tensor=name,
            ))
        if role in MATRIX_ROLES and len(entry.shape) >= 2 and stats.all_zero and entry.numel:
            # A served matrix is never exactly zero after training; zeros
            # are what a lost tensor, a failed export or a hole in the file
            # reads as. (Skipped tensors have no role and are not judged.)
            findings.append(Finding(
                "PAY004",
                f"{entry.file}: {name} {_shape_text(entry.shape)} is all zeros; the layer would "
                "compute nothing. The weight was lost in export, or the file's payload was never "
                "written (an unfinished download). Re-export or re-download it.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape)},
            ))
        if role == "fc_norm" and stats.all_one and entry.numel:
            findings.append(Finding(
                "FCN006",
                f"{entry.file}: {name} is exactly all ones: an identity norm, which is what "
                "an untrained or re-initialised fc_norm looks like. Check the export.",
                file=entry.file,
                tensor=name,
            ))
    return findings


# --------------------------------------------------------------------------
# Everything from config + inventory


@dataclass
class ContractResult:
    findings: list[Finding]
    resolved: ResolvedDraft
    family: DraftFamily | None
    expected: dict[str, ExpectedTensor]


def check_contract(
    config: Mapping[str, Any],
    entries: Sequence[TensorEntry],
    *,
    config_file: str = "config.json",
    target: TargetFacts | None = None,
    environ: Mapping[str, str] | None = None,
) -> ContractResult:
    """Every config and inventory rule of the draft contract."""
    environ = {} if environ is None else environ
    resolved = ResolvedDraft()
    family = family_for_config(config)
    if family is None:
        finding = Finding(
            "CFG004",
            f"{config_file}: model_type {config.get('model_type')!r} / architectures "
            f"{config.get('architectures')!r} is not a known draft family. Known: k3_dspark "
            "(K3DSparkModel), dflash_gqa (DFlashDraftModel).",
            file=config_file,
            detail={"model_type": config.get("model_type"), "architectures": config.get("architectures")},
        )
        return ContractResult([finding], resolved, None, {})
    resolved.family = family.name
    layer_ids, _ = nested_field(config, "target_layer_ids")
    resolved.target_layer_ids = list(layer_ids) if isinstance(layer_ids, list) else []
    resolved.num_hidden_layers = config.get("num_hidden_layers")
    resolved.hidden_size = config.get("hidden_size")
    resolved.target_hidden_size = config.get("target_hidden_size", config.get("hidden_size"))
    resolved.target_checked = target is not None

    findings = schema_findings(config, family, config_file)
    findings += cross_field_findings(config, config_file)
    findings += stream_findings(config, resolved, config_file, environ, target)
    if target is not None:
        findings += target_findings(config, target)
    inventory, expected = inventory_findings(family, config, entries, resolved, config_file)
    findings += inventory
    return ContractResult(findings, resolved, family, expected)
