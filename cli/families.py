"""`dspark families`."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from dspark.cli.options import DataFormat, QuietOption, engine_names
from dspark.cli.terminal import page_width, wrap
from dspark.schema import families as family_registry
from dspark.schema.engines import all_profiles, engine_by_spec, engine_specs, profiles_of
from dspark.schema.errors import UsageError


def _profiles(engine: str | None):
    """Every revision of every engine; `--engine NAME` every revision of
    that engine, `NAME@REV` that one, several with commas (or all)."""
    if not engine:
        return all_profiles()
    chosen = []
    for item in [part.strip() for part in engine.split(",") if part.strip()]:
        if item.lower() == "all":
            found = list(all_profiles())
        elif "@" in item:
            found = [engine_by_spec(item)]
        else:
            engine_by_spec(item)  # an unknown name is a usage error naming the choices
            found = list(profiles_of(item.lower()))
        chosen += [p for p in found if not any(p is q for q in chosen)]
    return tuple(chosen) or engine_specs(None)


def _families(family: str | None):
    # The registries are lazy: a family is imported here, when the command
    # lists it, not when the CLI registers the command.
    if not family:
        return family_registry.FAMILIES
    chosen = []
    for name in [part.strip() for part in family.split(",") if part.strip()]:
        found = family_registry.family_by_name(name)
        if found is None:
            raise UsageError(f"--family {name!r} is not a family dspark models.",
                             hint=f"Choices: {', '.join(e.name for e in family_registry.REGISTRY)}.")
        chosen.append(found)
    return tuple(chosen) or family_registry.FAMILIES


def launch_flags(profile) -> dict:
    """The server flags this release's verdicts read (`--launch`), each with
    what it changes; any other flag given is named as ignored (LCH004)."""
    model = profile.launch_model
    if model is None:
        return {"summary": "", "flags": []}
    return {"summary": model.summary,
            "flags": [{"flag": spec.name, "aliases": list(spec.aliases), "changes": spec.changes}
                      for spec in model.flags]}


def contract_table(family: str | None = None, engine: str | None = None) -> list[dict]:
    """Family x engine revision x feature, with where each rule was read;
    a family an engine does not serve is a row saying so."""
    rows = []
    for draft_family in _families(family):
        for profile in _profiles(engine):
            loader = profile.loader_for(draft_family.name)
            if loader is None:
                # registered: the engine loads the family's class, dspark has no rules for it there (ENG007)
                rows.append({"family": draft_family.name, "engine": profile.spec, "served": False,
                             "registered": profile.registers_unjudged(draft_family.architectures)})
                continue
            rows.append({
                "served": True,
                "family": draft_family.name,
                "engine": profile.spec,
                "model_class": loader.model_class,
                "model_types": list(loader.model_types),
                "unexpected_tensor": loader.unexpected,
                "missing_tensor": loader.missing,
                "features": {
                    name: {"honoured": support.supported, "source": support.source.cite()}
                    for name, support in loader.features.items()
                },
                "stream": None if loader.stream is None else {
                    "fixed": loader.stream.fixed_stream, "target_decides": loader.stream.target_decides,
                    "env_override": loader.stream.env_override, "source": loader.stream.source.cite()},
                "skipped": [{"pattern": s.pattern, "source": s.source.cite(), "unless": s.unless}
                            for s in loader.skips],
                "fused": [{"parameter": f.fused, "parts": list(f.parts), "pre_fused_accepted": f.fused_accepted,
                           "pre_fused": f.when_pre_fused or None, "source": f.source.cite()} for f in loader.fused],
                "taps": [loader.tap_low, f"N{loader.tap_high_offset:+d}"],
                "tap_ids": None if loader.taps is None else {
                    "read_from": list(loader.taps.target.paths),
                    "draft_reads": list((loader.taps.draft or loader.taps.target).paths),
                    "numbering": loader.taps.numbering.base,
                    "meaning": loader.taps.numbering.text,
                    "when_absent": loader.taps.defaults_text or None,
                    "source": loader.taps.source.cite(),
                },
                "builds": {symbol: source if isinstance(source, str)
                           else ((source.__doc__ or "").strip().splitlines() or ["derived"])[0].rstrip(".")
                           for symbol, source in loader.dims.items()},
                "tap_width_field": loader.target_width_field or draft_family.target_width_field,
                "token_maps": None if loader.vocab is None else {
                    "d2t": loader.vocab.d2t, "t2d": loader.vocab.t2d, "embedding": loader.vocab.embedding,
                    "source": loader.vocab.source.cite()},
                "targets_without_capture": sorted(loader.targets_without_capture),
                "sources": {key: source.cite() for key, source in loader.sources.items()},
                "launch": launch_flags(profile),
            })
    return rows


def families(
    output: Annotated[DataFormat, typer.Option("--format", help="human: a page to read; json: the table as data.")] = DataFormat.human,
    family: Annotated[Optional[str], typer.Option(
        "--family", metavar="NAME[,...]", help=f"Only these families ({', '.join(entry.name for entry in family_registry.REGISTRY)}).")] = None,
    engine: Annotated[Optional[str], typer.Option(
        "--engine", metavar="NAME[@REV][,...]|all", parser=engine_names,
        help="Only these engines: a name lists every revision modelled, NAME@REV one.")] = None,
    quiet: QuietOption = False,
) -> None:
    """List draft families x engine revisions x features, with the engine code each rule was read from."""
    rows = contract_table(family, engine)
    if output is DataFormat.json:
        typer.echo(json.dumps(rows, indent=2))
        return
    # -q quiets a verdict's page; the table is what was asked for, not a
    # report on success, so it is printed whatever -q says.
    typer.echo("\n".join(page_lines(rows, page_width())))


def page_lines(rows: list[dict], width: int) -> list[str]:
    """One block per family and engine revision, within `width` columns:
    each rule on its own lines, the engine code it was read from indented
    below it (a citation is never broken inside its path)."""
    lines: list[str] = []

    def rule(text: str, source: str | None = None) -> None:
        lines.extend(wrap(text, width, first="  ", indent="    "))
        if source:
            if width is not None and len(source.split(" ", 1)[0]) > width - 4:
                # a path too long for the line: its function and version go below it, the path stays whole
                source = source.replace("::", " ::", 1) if "::" in source else source.replace("@", " @", 1)
                if "::" in source and len(source.split(" ")[1]) > width - 6:
                    source = source.replace("@", " @", 1)
            lines.extend(wrap(source, width, first="    ", indent="      "))

    for row in rows:
        if not row["served"] and row.get("registered"):
            lines.extend(wrap(f"{row['family']} on {row['engine']}: registered but NOT judged (the engine loads "
                              "the class; dspark has no rules for it there: ENG007)", width, indent="  "))
            lines.append("")
            continue
        if not row["served"]:
            lines.extend(wrap(f"{row['family']} on {row['engine']}: NOT served (the engine has no model for it; "
                              "ENG006)", width, indent="  "))
            lines.append("")
            continue
        lines.extend(wrap(f"{row['family']} on {row['engine']} ({row['model_class']})", width, indent="  "))
        rule(f"model_type: {', '.join(row['model_types'])}")
        rule(f"a tensor without a destination: {row['unexpected_tensor']}; "
             f"a destination left empty: {row['missing_tensor']}")
        for name, feature in row["features"].items():
            rule(f"{name}: {'honoured' if feature['honoured'] else 'NOT honoured'}", feature["source"])
        if row["stream"] is not None:
            fixed = row["stream"]["fixed"]
            served = ("the target's (AttnRes on a Kimi-K3 target that sets attn_res_block_size, else prefix)"
                      if row["stream"]["target_decides"] else "only " + fixed if fixed else "as declared")
            if row["stream"]["env_override"]:
                served += f", unless {row['stream']['env_override']} is set (it wins)"
            rule(f"aux_hidden_stream: {served}", row["stream"]["source"])
        for fused in row["fused"]:
            rule(f"{fused['parameter']} <- {' + '.join(fused['parts'])}"
                 f"{' (or pre-fused)' if fused['pre_fused_accepted'] else ''}", fused["source"])
            if fused["pre_fused"]:
                lines.extend(wrap(f"pre-fused: {fused['pre_fused']}", width, first="    ", indent="      "))
        for skip in row["skipped"]:
            # a name the loader keeps when a flag is set is loaded then: say so
            unless = f" (loaded when {skip['unless']})" if skip.get("unless") else ""
            rule(f"skipped: /{skip['pattern']}/{unless}", skip["source"])
        rule(f"taps accepted by the target: [{row['taps'][0]}, {row['taps'][1]}]")
        if row["tap_ids"] is not None:
            taps = row["tap_ids"]
            rule(f"tap ids read from: {', '.join(taps['read_from'])}; {taps['meaning']}"
                 f"{'; when absent: ' + taps['when_absent'] if taps['when_absent'] else ''}", taps["source"])
        if row["token_maps"] is not None:
            maps = row["token_maps"]
            rule(f"d2t: {maps['d2t']}; t2d: {maps['t2d']}; embedding: {maps['embedding']}", maps["source"])
        if row["builds"]:
            rule("builds: " + "; ".join(f"{k}: {v}" for k, v in row["builds"].items()))
        for key, source in row["sources"].items():
            rule(f"{key}:", source)
        launch = row["launch"]
        if launch["flags"]:
            rule(f"--launch flags read on {row['engine']}: {launch['summary']}" if launch["summary"]
                 else f"--launch flags read on {row['engine']}:")
            for flag in launch["flags"]:
                spelled = " / ".join([flag["flag"], *flag["aliases"]])
                lines.extend(wrap(f"{spelled}: {flag['changes']}", width, first="    ", indent="      "))
        else:
            rule(f"--launch: no flag read on {row['engine']} (each one given is named as ignored)")
        lines.append("")
    return lines
