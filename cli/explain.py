"""`dspark explain [CODE]`."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from dspark.cli.options import DataFormat, QuietOption
from dspark.cli.terminal import page_width, wrap
from dspark.schema.engines import all_profiles
from dspark.schema.errors import UsageError
from dspark.schema.findings import FINDING_CODES


def _known(code: str) -> str:
    from dspark.schema.explanations import similar_codes

    wanted = code.strip().upper()
    if wanted in FINDING_CODES:
        return wanted
    close = similar_codes(code)
    raise UsageError(
        f"{code!r} is not a dspark finding code." + (f" Did you mean {', '.join(close)}?" if close else ""),
        hint="Run 'dspark explain' for the list of codes.",
    )


def _page(entry: dict, width: int | None) -> list[str]:
    lines = [f"{entry['code']} ({entry['severity']}): {entry['title']}"]
    if entry["severity_by_engine"]:
        lines += wrap("; ".join(f"{spec}: {level}" for spec, level in entry["severity_by_engine"].items()), width,
                      first="severity on ", indent="  ")
    lines.append("")
    for label, text in (("why", entry["why"]), ("what to do", entry["action"])):
        lines += wrap(text, width, first=f"{label + ':':<12}", indent=" " * 12)
    if entry["sources"]:
        lines += ["", "the rule's source (engine code):"]
        for source in entry["sources"]:
            where = f"{', '.join(source['engines'])}" + (f", {source['family']}" if source["family"] else "")
            lines += wrap(f"{source['fact']} ({where})", width, first="  ", indent="    ")
            lines.append(f"    {source['source']}")
    else:
        lines += ["", "the rule's source: dspark's own check (no engine fact)"]
    lines += ["", f"documented in {entry['documentation']}"]
    return lines


def explain_page(code: str, width: int | None = None) -> str:
    """The page `dspark explain CODE` prints (one line per paragraph with
    `width` None): SARIF's help for the rule is the same text."""
    from dspark.schema.explanations import explain as explanation

    return "\n".join(_page(explanation(code, all_profiles()), width))


def explain(
    code: Annotated[Optional[str], typer.Argument(metavar="[CODE]", help="A finding code, e.g. INV003; none: list every code.", show_default=False)] = None,
    output: Annotated[DataFormat, typer.Option("--format", help="human: a page to read; json: the same as data.")] = DataFormat.human,
    quiet: QuietOption = False,
) -> None:
    """Say what a finding code means, why the engine cares, what to do, and where its rule was read."""
    # Imported when the command runs: the explanations (about 25 ms) and
    # every engine's profiles (all_profiles(), below) are not for the
    # other commands to load.
    from dspark.schema.explanations import explain as explanation

    if code is None:
        entries = [explanation(c, all_profiles()) for c in FINDING_CODES]
        if output is DataFormat.json:
            typer.echo(json.dumps(entries, indent=2))
        elif not quiet:
            width = page_width()
            for entry in entries:
                for line in wrap(entry["title"], width, first=f"{entry['code']}  {entry['severity']:<8}",
                                 indent=" " * 16):
                    typer.echo(line)
        return
    entry = explanation(_known(code), all_profiles())
    if output is DataFormat.json:
        typer.echo(json.dumps(entry, indent=2))
    elif not quiet:
        typer.echo("\n".join(_page(entry, page_width())))
