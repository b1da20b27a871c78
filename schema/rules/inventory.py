"""The tensor inventory: what is shipped against what the engine builds.

Names here are the canonical served names the readers give (wrappers
stripped, trainer module names renamed): the contents of the checkpoint.
Whether the engine would find them under the names actually stored is the
layout rule's question (`layout.py`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from dspark.schema.dtypes import is_floating
from dspark.schema.engines import EngineProfile, FamilyLoader
from dspark.schema.families import DraftFamily, ExpectedTensor
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.rules.common import shape_text
from dspark.schema.rules.features import feature_findings, feature_tensor_names
from dspark.schema.rules.resolve import ResolvedDraft
from dspark.schema.rules.token_map import TokenMapValues
from dspark.schema.rules.vocab import VOCAB_ROLES, vocab_findings

_UNEXPECTED = {
    "rejects": "has no destination in a {family} draft; the serving loader rejects the draft",
    "drops": "has no destination in a {family} draft; the engine drops it without a word, so whatever "
    "it was trained to do is lost",
    "drops_logged": "has no destination in a {family} draft; the engine logs it as not in the model and "
    "drops it, so whatever it was trained to do is lost",
}
_MISSING = {
    "rejects": "the serving loader fails on an unfilled destination",
    "uninitialised": "the engine serves the parameter uninitialised (garbage, or ones for a norm) "
    "without a word",
}


def inventory_findings(
    family: DraftFamily,
    loader: FamilyLoader | None,
    engine: EngineProfile,
    config: Mapping[str, Any],
    entries: Sequence[TensorEntry],
    resolved: ResolvedDraft,
    features: Mapping[str, bool],
    config_file: str,
    *,
    training_output: bool = False,
    token_map: TokenMapValues | None = None,
    stored_token_map: TokenMapValues | None = None,
) -> tuple[list[Finding], dict[str, ExpectedTensor]]:
    """Compare what is shipped with what the config implies. `token_map`
    hands over d2t's values where the caller reads payloads,
    `stored_token_map` where a rule needs them header-only (rules/token_map.py)."""
    findings: list[Finding] = []
    dims = family.resolve_dims(config, loader.dims if loader is not None else None)
    expected_all, unresolved = family.expected_tensors(dims, None)
    required = {
        name: want for name, want in expected_all.items()
        if want.rule.when is None or features.get(want.rule.when, False)
    }
    # Names of rules a missing dimension left unexpanded: their tensors
    # cannot be judged (the config finding says why), not "unexpected". A
    # rule whose feature is off has no destination whatever its dimensions.
    when_of = {rule.name: rule.when for rule in family.tensors}
    unjudged = [_rule_pattern(name) for name in unresolved
                if when_of.get(name) is None or features.get(when_of[name], False)]
    unexpected_text = _UNEXPECTED["rejects" if loader is None else loader.unexpected]

    shipped: dict[str, TensorEntry] = {}
    for entry in entries:
        first = shipped.get(entry.served_name)
        if first is not None:
            findings.append(Finding(
                "INV006",
                f"{entry.file}: {printable_name(entry.stored_name)!s} and {first.file}: "
                f"{printable_name(first.stored_name)} both load as "
                f"{printable_name(entry.served_name)}; the engine keeps whichever it reads last. Keep one.",
                file=entry.file,
                tensor=entry.served_name,
                detail={"stored_names": [first.stored_name, entry.stored_name], "files": [first.file, entry.file]},
            ))
            continue
        shipped[entry.served_name] = entry

    feature_names = feature_tensor_names(family, shipped, expected_all)
    # The draft's own head and its token map: whether they are served at
    # all depends on the vocabulary fields (rules/vocab.py).
    findings += vocab_findings(family, loader, config, shipped, expected_all, config_file, token_map,
                               stored_token_map)
    vocab_names = {n for n, e in expected_all.items() if e.role in VOCAB_ROLES}
    resolved.fc_norm_shipped = sum(1 for n in feature_names if n.startswith("fc_norm."))
    for feature in family.declared_features:
        findings += feature_findings(
            feature, family, loader, engine, config, shipped, expected_all, dims, config_file
        )

    fused_groups = _fused_groups(loader, dims)
    findings += fused_collision_findings(loader, dims, shipped)
    covered: set[str] = set()
    for name, entry in shipped.items():
        if name in feature_names or name in vocab_names:
            continue
        skip = loader.skip_rule(name, config) if loader is not None else None
        if skip is not None or (loader is None and family.is_skipped(name)):
            launch = loader.launch_loading(name) if loader is not None else None
            cost = (f"; loaded with {launch}, which needs it" if launch else
                    f"; {entry.nbytes:,} bytes shipped for nothing")
            findings.append(Finding(
                "INV005",
                f"{entry.file}: {printable_name(name)} is skipped by the serving loader"
                + (f" ({skip.why})" if skip else "") + (" at its default launch" if launch else "")
                + f"{cost}.",
                file=entry.file,
                tensor=name,
                detail={"nbytes": entry.nbytes, "dtype": entry.dtype, "shape": list(entry.shape),
                        "source": skip.source.cite() if skip else None},
            ))
            continue
        if training_output and family.is_training_only(name):
            findings.append(Finding(
                "SRC002",
                f"{entry.file}: {printable_name(name)} is training-only; dspark convert leaves it behind.",
                file=entry.file,
                tensor=name,
                detail={"nbytes": entry.nbytes},
            ))
            continue
        group = fused_groups.get(name)
        if group is not None:
            parts, fused_accepted, when_pre_fused = group
            if not fused_accepted:
                findings.append(Finding(
                    "INV002",
                    f"{entry.file}: {printable_name(name)} (stored as {printable_name(entry.stored_name)}) is "
                    f"pre-fused; the {family.name} loader only builds it from {', '.join(parts)}, and it "
                    f"{when_pre_fused}. Ship the parts separately; dspark convert splits it into them.",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "dtype": entry.dtype, "parts": parts},
                ))
                continue
            part_shapes = [required[p].shape for p in parts if p in required]
            if fused_accepted and len(part_shapes) == len(parts):
                want_shape = (sum(s[0] for s in part_shapes),) + tuple(part_shapes[0][1:])
                covered.update(parts)
                if entry.shape != want_shape:
                    findings.append(Finding(
                        "INV003",
                        f"{entry.file}: {name} is {shape_text(entry.shape)} but the engine stacks "
                        f"{', '.join(parts)} into {shape_text(want_shape)}.",
                        file=entry.file,
                        tensor=name,
                        detail={"shape": list(entry.shape), "expected": list(want_shape)},
                    ))
                findings += _dtype_findings(entry, name)
                continue
        want = expected_all.get(name)
        if want is not None and want.rule.when is not None and not features.get(want.rule.when, False):
            want = None  # a tensor of a derived feature that is off (biases, a DFlash Markov head)
        if want is None:
            if any(pattern.fullmatch(name) for pattern in unjudged):
                continue
            if loader is not None and loader.unexpected != "rejects" and is_training_state(name):
                # Optimizer or scheduler state: the loader drops it like any
                # name without a destination, and no weight is lost with it.
                findings.append(Finding(
                    "INV005",
                    f"{entry.file}: {printable_name(name)} is training state (optimizer or scheduler), which "
                    f"the {family.name} loader drops; {entry.nbytes:,} bytes shipped for nothing. dspark convert "
                    "leaves it behind.",
                    file=entry.file,
                    tensor=name,
                    detail={"nbytes": entry.nbytes, "dtype": entry.dtype, "shape": list(entry.shape),
                            "training_state": True},
                ))
                continue
            dropped = loader.dropped_unexpected(name) if loader is not None else None
            rejected = loader.rejected_unexpected(name, features) if loader is not None else None
            rule = dropped or rejected
            text = _UNEXPECTED["drops"] if dropped is not None else (
                _UNEXPECTED["rejects"] if rejected is not None else unexpected_text)
            findings.append(Finding(
                "INV002",
                f"{entry.file}: {printable_name(name)} (stored as {printable_name(entry.stored_name)}) "
                + text.format(family=family.name)
                + (f" ({rule.why}, {rule.source.cite()})" if rule is not None else "")
                + ". Remove it, or fix the config if it describes fewer layers/taps than shipped.",
                file=entry.file,
                tensor=name,
                detail={"shape": list(entry.shape), "dtype": entry.dtype,
                        **({"rejected": True} if rejected is not None else {})},
            ))
            continue
        if entry.shape != want.shape and not (want.rule.flat and _numel(entry.shape) == _numel(want.shape)):
            if want.role == "context_proj" and len(entry.shape) == 2 and entry.shape[0] == want.shape[0]:
                findings.append(Finding(
                    "CTX001",
                    f"{entry.file}: {name} is {shape_text(entry.shape)}; the engine builds its input "
                    f"width as {want.rule.shape[1]} = {want.shape[1]} (taps = {dims.get('S')}) and fails "
                    "to load another width.",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "expected": list(want.shape)},
                ))
            else:
                findings.append(Finding(
                    "INV003",
                    f"{entry.file}: {name} is {shape_text(entry.shape)} but the config implies "
                    f"{shape_text(want.shape)} ({', '.join(want.rule.shape)}).",
                    file=entry.file,
                    tensor=name,
                    detail={"shape": list(entry.shape), "expected": list(want.shape)},
                ))
        findings += _dtype_findings(entry, name)

    partial_note = _partial_fused_notes(loader, dims, shipped)
    for name, want in required.items():
        if (name in shipped or name in covered or want.rule.when in family.declared_features
                or want.rule.optional):
            continue
        note = partial_note.get(name, "")
        missing_text = _MISSING["rejects" if loader is None else loader.missing_action(name)]
        findings.append(Finding(
            "INV001",
            f"{name} {shape_text(want.shape)} is missing; {missing_text}.{note} Ship it, or fix the "
            "config if it describes more layers or taps than the draft was trained with.",
            file=None,
            tensor=name,
            detail={"expected_shape": list(want.shape)},
        ))

    served_weights = [e for n, e in shipped.items()
                      if is_floating(e.dtype) and not (loader.skip_rule(n, config) if loader else family.is_skipped(n))]
    f32 = [e for e in served_weights if e.dtype == "F32"]
    if served_weights and len(f32) == len(served_weights):
        total = sum(e.nbytes for e in f32)
        findings.append(Finding(
            "INV007",
            f"all {len(f32)} served tensors are float32 ({total:,} bytes); drafts usually serve in "
            "bfloat16. Convert with `dspark convert --dtype bfloat16` unless float32 is intended.",
            detail={"tensors": len(f32), "nbytes": total},
        ))
    return findings, required


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _dtype_findings(entry: TensorEntry, name: str) -> list[Finding]:
    if is_floating(entry.dtype):
        return []
    return [Finding(
        "INV004",
        f"{entry.file}: {name} has dtype {entry.dtype}; weights must be floating point (the engine "
        "casts it silently).",
        file=entry.file,
        tensor=name,
        detail={"dtype": entry.dtype},
    )]


def _layer_names(pattern: str, dims: Mapping[str, int]) -> list[str]:
    if "{n}" not in pattern:
        return [pattern]
    return [pattern.replace("{n}", str(n)) for n in range(dims.get("N", 0))]


def _fused_groups(loader: FamilyLoader | None, dims: Mapping[str, int]) -> dict[str, tuple[list[str], bool, str]]:
    """Engine fused name -> (its part names, whether it loads pre-fused,
    what the loader does with it when not)."""
    groups: dict[str, tuple[list[str], bool, str]] = {}
    if loader is None:
        return groups
    for fused in loader.fused:
        for n, name in enumerate(_layer_names(fused.fused, dims)):
            parts = [p.replace("{n}", str(n)) for p in fused.parts]
            groups[name] = (parts, fused.fused_accepted, fused.when_pre_fused)
    return groups


# The order TokenSpeed's default loader reads a draft's tensors in, which
# decides what a parameter written twice holds: it globs `*.safetensors`
# without sorting (the order the file system lists the folder; an index only
# drops files it does not name) and reads the files one after the other,
# each with safetensors' `load_file` (model_loader/loader.py@f4d8ec6e:288-311,
# model_loader/weight_utils.py@f4d8ec6e:569-580; the same at 4b9766f6), with
# the default load format (`--load-format instanttensor` reads its own way).
# `load_file` yields a file's tensors in name order in older safetensors
# releases (`for k in f.keys()`, sorted) and in storage order since
# safetensors/safetensors#571 (`get_tensors`, by offset; 0.8 here); the
# engine pins no version. Each stacked part's loader writes
# its own rows and the pre-fused tensor's writes them all, so every part's
# rows hold whichever of the two was read last.
READ_ORDER_SOURCE = ("model_loader/loader.py@f4d8ec6e:288-311; model_loader/weight_utils.py@f4d8ec6e:569-580; "
                     "safetensors load_file: name order, storage order since safetensors#571")


def fused_collision_findings(loader: FamilyLoader | None, dims: Mapping[str, int],
                             shipped: Mapping[str, TensorEntry]) -> list[Finding]:
    """INV008: a pre-fused tensor the loader takes, shipped beside one or
    more of the parts it also stacks into that parameter. The loader writes
    the parameter from each (its load_weights routes the parts to their row
    blocks and the fused name to the whole parameter), so each part's rows
    are served from whichever it read last: named where the read order is
    fixed, "depends on file order" where it is not. A loader that does not
    take the pre-fused name (`fused_accepted` False) never writes it; that
    tensor is INV002 as on its own."""
    findings: list[Finding] = []
    if loader is None:
        return findings
    for fused in loader.fused:
        if not fused.fused_accepted:
            continue
        for n, name in enumerate(_layer_names(fused.fused, dims)):
            whole = shipped.get(name)
            if whole is None:
                continue
            parts = [shipped[p] for p in (q.replace("{n}", str(n)) for q in fused.parts) if p in shipped]
            if parts:
                findings.append(_collision(whole, parts, fused.source.cite()))
    return findings


def _collision(whole: TensorEntry, parts: list[TensorEntry], loader_source: str) -> Finding:
    verdicts = []
    for part in parts:
        last, why = read_last(whole, part)
        short = part.served_name.rsplit(".", 2)[-2]
        if last is None:
            verdicts.append(f"{short}'s rows: depends on file order ({why})")
        else:
            verdicts.append(f"{short}'s rows: the value from {last.file} ({printable_name(last.stored_name)}, "
                            f"read last) is served")
    listed = ", ".join(f"{p.file}: {printable_name(p.stored_name)}" for p in parts)
    return Finding(
        "INV008",
        f"{whole.file}: {printable_name(whole.stored_name)} is shipped pre-fused beside {listed}, which the "
        f"engine stacks into the same parameter {printable_name(whole.served_name)}: it writes the parameter "
        f"from each and the last one read wins ({loader_source}); " + "; ".join(verdicts) + ". Ship either "
        "the parts or the pre-fused tensor, not both.",
        file=whole.file,
        tensor=whole.served_name,
        detail={
            "fused": {"stored_name": whole.stored_name, "file": whole.file},
            "parts": [{"name": p.served_name, "stored_name": p.stored_name, "file": p.file,
                       "served_from": _served_from(whole, p)} for p in parts],
            "source": f"{loader_source}; {READ_ORDER_SOURCE}",
        },
    )


def read_last(first: TensorEntry, second: TensorEntry) -> tuple[TensorEntry | None, str]:
    """Which of two tensors TokenSpeed's loader reads last (READ_ORDER_SOURCE),
    or None and why it cannot be told: in two files, the file system's
    listing decides; in one, name order and storage order must agree (the
    safetensors version decides otherwise)."""
    if first.file != second.file:
        return None, (f"{first.file} and {second.file} are read in the order the file system lists them, "
                      "which the loader does not sort")
    by_name = max(first, second, key=lambda e: e.stored_name)
    if first.byte_range is None or second.byte_range is None:
        return None, f"the order within {first.file} is not known from its header"
    by_offset = max(first, second, key=lambda e: e.byte_range[0])
    if by_name is not by_offset:
        return None, (f"in {first.file} name order and storage order differ, and safetensors' load_file reads "
                      "in name order in older releases and in storage order in newer ones")
    return by_name, ""


def _served_from(whole: TensorEntry, part: TensorEntry) -> str | None:
    last, _ = read_last(whole, part)
    return None if last is None else ("fused" if last is whole else "part")


def _partial_fused_notes(loader, dims, shipped) -> dict[str, str]:
    """Missing parts of a fused parameter whose other part is shipped: the
    loader marks the parameter loaded after one part and does not notice."""
    notes: dict[str, str] = {}
    if loader is None:
        return notes
    for fused in loader.fused:
        if not fused.partial_passes:
            continue
        for n in range(dims.get("N", 0) if "{n}" in fused.fused else 1):
            parts = [p.replace("{n}", str(n)) for p in fused.parts]
            present = [p for p in parts if p in shipped]
            if present and len(present) < len(parts):
                for part in parts:
                    if part not in shipped:
                        notes[part] = (
                            f" The engine stacks it into {fused.fused.replace('{n}', str(n))} and counts that "
                            f"parameter loaded once {present[0]} arrives, so its rows stay uninitialised "
                            f"without an error ({fused.source.cite()})."
                        )
    return notes


# Names of optimizer and scheduler state saved beside the weights
# (TorchSpec keeps its optimizer under `optim_state`).
_TRAINING_STATE = frozenset(("optimizer", "optim", "optim_state", "optimizer_state", "opt_state", "lr_scheduler",
                             "scheduler"))
# Parts that change what a loader does with a name wherever they sit: the
# EAGLE-3 loaders take any name holding `d2t` for the token map, and the MLA
# one stops loading the target's head for any name holding `lm_head`
# (models/llama_eagle3.py@f4d8ec6e:691-698, models/deepseek_v3.py@f4d8ec6e:2358-2373).
_LOADER_SUBSTRINGS = ("d2t", "t2d", "lm_head", "embed_tokens")


def is_training_state(served_name: str) -> bool:
    """Optimizer or scheduler state saved beside the weights, by its name,
    and nothing in the name a loader acts on."""
    first, dot, _ = served_name.partition(".")
    return (dot == "." and first in _TRAINING_STATE
            and not any(part in served_name for part in _LOADER_SUBSTRINGS))


def _rule_pattern(rule_name: str) -> "re.Pattern[str]":
    """`layers.{n}.mlp.up_proj.weight` -> a regex matching every layer's name."""
    return re.compile(re.escape(rule_name).replace(r"\{n\}", r"\d+").replace(r"\{i\}", r"\d+"))

