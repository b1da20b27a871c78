"""`dspark families`."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from dspark.cli.options import DataFormat, QuietOption
from dspark.cli.terminal import page_width, wrap
from dspark.schema import engines as engine_registry
from dspark.schema import families as family_registry


def contract_table() -> list[dict]:
    """Family x engine revision x feature, with where each rule was read."""
    rows = []
    # Every family and engine is imported here, when they are listed, not
    # when the command is registered (the registries are lazy).
    for family in family_registry.FAMILIES:
        for engine in engine_registry.PROFILES:
            loader = engine.loader_for(family.name)
            if loader is None:
                continue
            rows.append({
                "family": family.name,
                "engine": engine.spec,
                "model_class": loader.model_class,
                "model_types": list(loader.model_types),
                "unexpected_tensor": loader.unexpected,
                "missing_tensor": loader.missing,
                "features": {
                    name: {"honoured": support.supported, "source": support.source.cite()}
                    for name, support in loader.features.items()
                },
                "stream": None if loader.stream is None else {
                    "fixed": loader.stream.fixed_stream, "source": loader.stream.source.cite()},
                "skipped": [{"pattern": s.pattern, "source": s.source.cite()} for s in loader.skips],
                "fused": [{"parameter": f.fused, "parts": list(f.parts), "pre_fused_accepted": f.fused_accepted,
                           "pre_fused": f.when_pre_fused or None, "source": f.source.cite()} for f in loader.fused],
                "taps": [loader.tap_low, f"N{loader.tap_high_offset:+d}"],
                "sources": {key: source.cite() for key, source in loader.sources.items()},
            })
    return rows


def families(
    output: Annotated[DataFormat, typer.Option("--format", help="human: a page to read; json: the table as data.")] = DataFormat.human,
    quiet: QuietOption = False,
) -> None:
    """List draft families x engine revisions x features, with the engine code each rule was read from."""
    rows = contract_table()
    if output is DataFormat.json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if quiet:
        return  # nothing to judge, so nothing to say
    typer.echo("\n".join(page_lines(rows, page_width())))


def page_lines(rows: list[dict], width: int) -> list[str]:
    """One block per family and engine revision, within `width` columns:
    each rule on its own lines, the engine code it was read from indented
    below it (a citation is never broken inside its path)."""
    lines: list[str] = []

    def rule(text: str, source: str | None = None) -> None:
        lines.extend(wrap(text, width, first="  ", indent="    "))
        if source:
            lines.extend(wrap(source, width, first="    ", indent="      "))

    for row in rows:
        lines.extend(wrap(f"{row['family']} on {row['engine']} ({row['model_class']})", width, indent="  "))
        rule(f"model_type: {', '.join(row['model_types'])}")
        rule(f"a tensor without a destination: {row['unexpected_tensor']}; "
             f"a destination left empty: {row['missing_tensor']}")
        for name, feature in row["features"].items():
            rule(f"{name}: {'honoured' if feature['honoured'] else 'NOT honoured'}", feature["source"])
        if row["stream"] is not None:
            fixed = row["stream"]["fixed"]
            rule(f"aux_hidden_stream: {'only ' + fixed if fixed else 'as declared'}", row["stream"]["source"])
        for fused in row["fused"]:
            rule(f"{fused['parameter']} <- {' + '.join(fused['parts'])}"
                 f"{' (or pre-fused)' if fused['pre_fused_accepted'] else ''}", fused["source"])
            if fused["pre_fused"]:
                lines.extend(wrap(f"pre-fused: {fused['pre_fused']}", width, first="    ", indent="      "))
        for skip in row["skipped"]:
            rule(f"skipped: /{skip['pattern']}/", skip["source"])
        rule(f"taps accepted by the target: [{row['taps'][0]}, {row['taps'][1]}]")
        for key, source in row["sources"].items():
            rule(f"{key}:", source)
        lines.append("")
    return lines
