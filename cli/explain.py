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


def _wrap_path(text: str, width: int | None, *, first: str, indent: str) -> list[str]:
    """A source citation (`path::qualname@commit:lines; other.py:lines`) in
    lines of at most `width`: broken at spaces, and a path longer than the
    line after a `/` (or a `.` of its qualified name) or before its
    `::function` or `@commit`, where a reader
    sees it continue."""
    out: list[str] = []
    more = indent + "  "
    for line in wrap(text, width, first=first, indent=more):
        while width is not None and len(line) > width:
            # after a `/` or a `.` of the qualified name, or before `::` or `@`
            cut = max(line.rfind("/", len(more) + 1, width), line.rfind("@", len(more) + 1, width + 1) - 1,
                      line.rfind("::", len(more) + 1, width + 1) - 1)
            if cut <= len(more) and "::" in line:
                cut = line.rfind(".", line.find("::") + 2, width)
            if cut <= len(more):
                break  # nowhere to break it: the line stays whole
            out.append(line[:cut + 1])
            line = more + line[cut + 1:]
        out.append(line)
    return out


def _page(entry: dict, width: int | None) -> list[str]:
    lines = wrap(entry["title"], width, first=f"{entry['code']} ({entry['severity']}): ", indent="  ")
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
            lines += _wrap_path(source["source"], width, first="    ", indent="    ")
    else:
        lines += [""] + wrap("the rule's source: dspark's own check (no engine fact)", width, indent="  ")
    lines += [""] + wrap(f"documented in {entry['documentation']}", width)
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
    # -q quiets a verdict's page; an explanation is what was asked for, not
    # a report on success, so it is printed whatever -q says.
    # Imported when the command runs: the explanations (about 25 ms) and
    # every engine's profiles (all_profiles(), below) are not for the
    # other commands to load.
    from dspark.schema.explanations import explain as explanation

    if code is None:
        entries = [explanation(c, all_profiles()) for c in FINDING_CODES]
        if output is DataFormat.json:
            typer.echo(json.dumps(entries, indent=2))
        else:
            width = page_width()
            for entry in entries:
                for line in wrap(entry["title"], width, first=f"{entry['code']}  {entry['severity']:<8}",
                                 indent=" " * 16):
                    typer.echo(line)
        return
    entry = explanation(_known(code), all_profiles())
    if output is DataFormat.json:
        typer.echo(json.dumps(entry, indent=2))
    else:
        typer.echo("\n".join(_page(entry, page_width())))
