"""aux_hidden_stream: which residual stream of the target each tap reads."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.families import nested_field
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
