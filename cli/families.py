"""`dspark families`."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from dspark.cli.options import DataFormat, QuietOption
from dspark.schema.engines import PROFILES
from dspark.schema.families import FAMILIES


def contract_table() -> list[dict]:
    """Family x engine revision x feature, with where each rule was read."""
    rows = []
    for family in FAMILIES:
        for engine in PROFILES:
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
    for row in rows:
        typer.echo(f"{row['family']} on {row['engine']} ({row['model_class']})")
        typer.echo(f"  model_type: {', '.join(row['model_types'])}")
        typer.echo(f"  a tensor without a destination: {row['unexpected_tensor']}; "
                   f"a destination left empty: {row['missing_tensor']}")
        for name, feature in row["features"].items():
            state = "honoured" if feature["honoured"] else "NOT honoured"
            typer.echo(f"  {name}: {state}  [{feature['source']}]")
        if row["stream"] is not None:
            fixed = row["stream"]["fixed"]
            typer.echo(f"  aux_hidden_stream: {'only ' + fixed if fixed else 'as declared'}  [{row['stream']['source']}]")
        for fused in row["fused"]:
            typer.echo(f"  {fused['parameter']} <- {' + '.join(fused['parts'])}"
                       f"{' (or pre-fused)' if fused['pre_fused_accepted'] else ''}  [{fused['source']}]")
            if fused["pre_fused"]:
                typer.echo(f"    pre-fused: {fused['pre_fused']}")
        for skip in row["skipped"]:
            typer.echo(f"  skipped: /{skip['pattern']}/  [{skip['source']}]")
        typer.echo(f"  taps accepted by the target: [{row['taps'][0]}, {row['taps'][1]}]")
        for key, source in row["sources"].items():
            typer.echo(f"  {key}: {source}")
        typer.echo("")
