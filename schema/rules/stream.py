"""aux_hidden_stream: which residual stream of the target each tap reads,
as the engine resolves it."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines import EngineProfile, FamilyLoader
from dspark.schema.findings import Finding
from dspark.schema.rules.resolve import ResolvedDraft
from dspark.schema.rules.target import TargetFacts

STREAMS = ("prefix", "attn_res")
DEFAULT_STREAM = "prefix"
STREAM_ENV_VAR = "TOKENSPEED_DFLASH_AUX_STREAM"


def stream_findings(
    config: Mapping[str, Any],
    resolved: ResolvedDraft,
    config_file: str,
    environ: Mapping[str, str],
    target: TargetFacts | None,
    *,
    engine: EngineProfile,
    loader: FamilyLoader | None,
) -> list[Finding]:
    findings: list[Finding] = []
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), Mapping) else {}
    support = loader.stream if loader is not None else None
    reads_nested = not _top_level_only(support)
    # The drafter reads `dflash_config.aux_hidden_stream or aux_hidden_stream`
    # (execution/drafter/dflash.py@4b9766f6:52-58): a null or empty nested
    # value falls through. Bad values are schema findings (STR001). An engine
    # that reads the top level only (TokenSpeed 0.1.1's K3 config class)
    # never sees the nested one (`_nested_unread`).
    if reads_nested and nested.get("aux_hidden_stream"):
        declared, source = nested["aux_hidden_stream"], f"{config_file}: dflash_config.aux_hidden_stream"
    elif "aux_hidden_stream" in config:
        declared, source = config["aux_hidden_stream"], f"{config_file}: aux_hidden_stream"
    else:
        declared, source = None, "default (not declared)"
    if declared is None:
        stream = DEFAULT_STREAM
    elif isinstance(declared, str) and declared.lower() in STREAMS:
        stream = declared.lower()
    else:
        stream = None
    resolved.stream_declared = stream
    resolved.stream_source = source

    served = stream
    findings += _declared_twice(config, nested, config_file, support, engine)
    if not reads_nested:
        findings += _nested_unread(config, nested, stream, config_file, support, engine)
    if support is not None and support.target_decides:
        resolved.stream = _target_decided(stream, source, target)
        return findings + _target_decided_findings(stream, source, target, config_file, engine, resolved, support)
    fixed = support.fixed_stream if support is not None else DEFAULT_STREAM
    if stream is not None and fixed is not None and stream != fixed:
        served = fixed
        findings.append(Finding(
            "ENG001",
            f"{config_file}: the draft reads the {stream} stream ({source}) but {engine.spec} captures "
            f"only {fixed} for a {resolved.family} draft, without a word: the draft is served the "
            "stream it was not trained on. Deploy on an engine that honours aux_hidden_stream.",
            file=config_file,
            detail={"feature": "aux_hidden_stream", "declared": stream, "served": fixed, "engine": engine.spec},
        ))

    served, source = _env_override(findings, support, environ, stream, served, source, engine)

    for variable in engine.ignored_env_vars:
        value = environ.get(variable)
        if value:
            findings.append(Finding(
                "STR004",
                f"{variable}={value!r} is set, but {engine.spec} does not read it (an earlier revision of "
                f"the serving change did); the stream served is {served or 'unresolved'} (from {source}).",
                detail={"env": variable, "value": value, "served": served},
            ))
    resolved.stream = served
    if served is None or support is None:
        # A family without a stream to choose (GQA, EAGLE-3) gets no note:
        # only a declaration the engine would ignore matters (ENG001 above).
        return findings
    findings.append(Finding(
        "STR002",
        f"aux_hidden_stream resolves to {served} (from {source}).",
        file=config_file,
        detail={"stream": served, "source": source},
    ))
    if served == "attn_res":
        if target is None:
            findings.append(Finding(
                "STR005",
                "the draft reads the attn_res stream, which only a Kimi-K3 target with AttnRes enabled "
                "can supply; pass --target to verify it.",
                file=config_file,
                detail={"stream": served},
            ))
        elif not target.can_supply_attn_res():
            findings.append(Finding(
                "STR006",
                f"the draft reads the attn_res stream but the target ({target.source}) cannot supply it "
                f"({target.attn_res_reason()}); the engine refuses to start. Deploy against an AttnRes "
                "target or retrain on the prefix stream.",
                file=target.source,
                detail={"stream": served, "attn_res_block_size": target.attn_res_block_size},
            ))
    return findings


def _top_level_only(support) -> bool:
    """An engine that reads the declaration at the top level alone (one
    that reads none, fixed or target-decided, is judged against the stream
    the trainer declared, nested first)."""
    return (support is not None and not support.nested_truthy_wins and support.fixed_stream is None
            and not support.target_decides)


def unread_nested_stream(findings: list[Finding], loader: FamilyLoader | None) -> list[Finding]:
    """Schema findings without the one on `dflash_config.aux_hidden_stream`
    when the engine never reads it: its value cannot refuse the draft there
    (`_nested_unread` says what is served instead)."""
    if not _top_level_only(loader.stream if loader is not None else None):
        return findings
    return [f for f in findings if not (f.code == "STR001" and f.detail.get("field") == "dflash_config.aux_hidden_stream")]


def _nested_unread(config: Mapping[str, Any], nested: Mapping[str, Any], served: str | None, config_file: str,
                   support, engine: EngineProfile) -> list[Finding]:
    """A stream declared in `dflash_config` on an engine that reads only the
    top level. Declared there alone, it is the stream the draft was trained
    on, and the engine serves the top level's default instead, without a
    word (ENG001). Beside a top-level one that differs, the engine serves the
    top level (validated); which one the draft was trained on cannot be told
    (STR008, a warning: the engine itself is consistent)."""
    inner = nested.get("aux_hidden_stream")
    if not inner or served is None:
        return []
    inner_stream = inner.lower() if isinstance(inner, str) else None
    if inner_stream == served:
        return []
    cite = support.source.cite()
    if "aux_hidden_stream" not in config and inner_stream is not None and inner_stream in STREAMS:
        return [Finding(
            "ENG001",
            f"{config_file}: the draft declares aux_hidden_stream = {inner!r} in dflash_config only, which "
            f"{engine.spec} never reads ({cite}): it serves the top level's default, {served}, without a word. "
            f"Declare aux_hidden_stream = {inner_stream!r} at the top level of config.json.",
            file=config_file,
            detail={"feature": "aux_hidden_stream", "declared": inner_stream, "served": served,
                    "engine": engine.spec, "source": cite},
        )]
    return [Finding(
        "STR008",
        f"{config_file}: dflash_config.aux_hidden_stream = {inner!r} is never read by {engine.spec} ({cite}); "
        f"it serves the top level's {served}. Make the two agree, or remove the nested one, so every reader is "
        "given the stream the draft was trained on.",
        file=config_file,
        detail={"field": "aux_hidden_stream", "nested": inner, "top_level": config.get("aux_hidden_stream"),
                "served": served, "source": cite},
    )]


def _declared_twice(config: Mapping[str, Any], nested: Mapping[str, Any], config_file: str, support,
                    engine: EngineProfile) -> list[Finding]:
    """A config that declares the stream in `dflash_config` and at the top
    level, differently, on a drafter that serves the nested one when truthy,
    lower-cased, and validates neither (a GQA draft on pull requests 1031 and
    1016: execution/drafter/dflash.py@4b9766f6:52-58; @5f1e48b5:53-65, after
    the variable). As for the GQA taps and mask token (OVR001 in
    rules/config.py): the engine agrees with itself, but which stream the
    draft was trained on cannot be told, an error. A drafter that validates
    the top level (K3) is judged there with its taps; one that never reads
    the declaration (fixed or target-decided capture) serves neither."""
    if (support is None or not support.nested_truthy_wins or support.validates_top_level
            or support.fixed_stream is not None or support.target_decides):
        return []
    inner, outer = nested.get("aux_hidden_stream"), config.get("aux_hidden_stream")
    same = inner.lower() == outer.lower() if isinstance(inner, str) and isinstance(outer, str) else inner == outer
    if not inner or outer is None or same:
        return []
    served, cite = str(inner).lower(), support.source.cite()
    first = f"; {support.env_override}, when set, is read before both" if support.env_override else ""
    return [Finding(
        "OVR001",
        f"{config_file}: dflash_config.aux_hidden_stream = {inner!r} but aux_hidden_stream = {outer!r}. "
        f"{engine.spec} serves the nested value, {served}, and validates neither ({cite}){first}. Which stream "
        "the draft was trained on cannot be told here, and whoever reads the top-level one (the trainer, another "
        "engine) was given another draft. Make them equal.",
        file=config_file,
        detail={"field": "aux_hidden_stream", "nested": inner, "top_level": outer, "validated": False,
                "served": served, "source": cite},
    )]


def _env_override(findings, support, environ, declared, served, source, engine):
    """An engine whose drafter reads a variable first (pull request 1016):
    `override.strip().lower()` wins when set, and the target refuses any
    value but prefix and attn_res at startup
    (execution/drafter/dflash.py@5f1e48b5:56-65; models/kimi_k3.py@5f1e48b5:1986-1999)."""
    variable = support.env_override if support is not None else None
    value = environ.get(variable) if variable else None
    if not value:
        return served, source
    chosen = value.strip().lower()
    if chosen not in STREAMS:
        findings.append(Finding(
            "STR003",
            f"{variable}={value!r} is set and {engine.spec} serves the stream it names over the checkpoint's; "
            f"{chosen!r} is not 'prefix' or 'attn_res', so the engine refuses to start. Unset it, or set "
            "prefix or attn_res.",
            detail={"env": variable, "value": value, "engine": engine.spec},
        ))
        return None, f"{variable} (environment)"
    if declared is not None and chosen != declared:
        findings.append(Finding(
            "STR007",
            f"{variable}={value!r} is set and {engine.spec} reads it before the checkpoint: the draft, trained "
            f"on the {declared} stream ({source}), would be served the {chosen} stream without a word. Unset "
            f"{variable} for this deploy, or set it to {declared}.",
            detail={"env": variable, "value": value, "declared": declared, "served": chosen, "engine": engine.spec},
        ))
    return chosen, f"{variable}={value!r} (environment, read before the checkpoint)"


def _target_decided(declared: str | None, source: str, target: TargetFacts | None) -> str | None:
    """The stream a target-decided capture feeds: the AttnRes mixture on a
    Kimi-K3 target whose config sets attn_res_block_size, the prefix stream
    on any other; None without a target."""
    if target is None:
        return None
    supplies = target.is_attn_res_model() and target.attn_res_declared and target.attn_res_block_size is not None
    return "attn_res" if supplies else "prefix"


def _target_decided_findings(declared: str | None, source: str, target: TargetFacts | None, config_file: str,
                             engine: EngineProfile, resolved: ResolvedDraft, support) -> list[Finding]:
    """The draft was trained on the stream it declares (prefix when it
    declares none); the engine never reads the declaration and feeds what
    the target's config makes it capture."""
    if declared is None:
        return []  # an invalid declaration: the schema reports it
    served = resolved.stream
    cite = support.source.cite()
    if served is None:
        if declared == "prefix":
            return [Finding(
                "STR002",
                f"the draft reads the prefix stream ({source}); {engine.spec} never reads aux_hidden_stream and "
                "feeds the prefix stream, except on a Kimi-K3 target whose config sets attn_res_block_size, "
                f"which feeds the AttnRes mixture ({cite}). Pass --target to verify.",
                file=config_file,
                detail={"stream": declared, "source": source, "engine_source": cite},
            )]
        return [Finding(
            "STR005",
            f"the draft reads the attn_res stream ({source}); {engine.spec} never reads aux_hidden_stream and "
            "feeds the AttnRes mixture only from a Kimi-K3 target whose config sets attn_res_block_size, the "
            f"prefix stream from any other ({cite}); pass --target to verify it.",
            file=config_file,
            detail={"stream": declared, "engine_source": cite},
        )]
    if served == declared:
        return [Finding("STR002", f"aux_hidden_stream resolves to {served} (from the target, {target.source}; the "
                        f"draft declares the same, {source}).", file=config_file,
                        detail={"stream": served, "source": source})]
    return [Finding(
        "ENG001",
        f"{config_file}: the draft reads the {declared} stream ({source}) but {engine.spec} never reads "
        f"aux_hidden_stream and feeds the {served} stream from this target ({target.source}: "
        f"{target.attn_res_reason() if served == 'prefix' else 'a Kimi-K3 model with attn_res_block_size set'}), "
        f"without a word: the draft is served the stream it was not trained on ({cite}). Serve it on an engine "
        "that honours aux_hidden_stream, or on a target that captures the stream it was trained on.",
        file=config_file,
        detail={"feature": "aux_hidden_stream", "declared": declared, "served": served, "engine": engine.spec,
                "source": cite},
    )]
