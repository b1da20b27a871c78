"""Rendering reports for people (rich) or programs (JSON).

rich is imported only when something is drawn on a terminal: `dspark check`
in CI writes to a pipe, and importing rich's console and markup machinery
would cost it a sixth of its start-up. Lines are built as styled segments;
`write_lines` prints them through rich on a terminal and as plain text
otherwise.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from contextlib import contextmanager
from typing import Any

from dspark.converters.check import CheckReport
from dspark.schema.findings import Finding, Severity, count_by_severity
from dspark.schema.inventory import printable_name

# (rich style or None, text): a piece of a line, never parsed as markup.
Segment = tuple[str | None, str]


def is_terminal(stream=None) -> bool:
    stream = sys.stdout if stream is None else stream
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


@functools.lru_cache(maxsize=None)
def console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 here, as if the checkpoint had failed; the
            # closed pipe goes to the one place that maps errors instead.
            self.quiet = True
            raise BrokenPipeError

    # emoji=False: a tensor named `x:fire:y` must print as it is named.
    return _Console(highlight=False, soft_wrap=True, emoji=False)


class _LazyConsole:
    """`stdout.print(...)` for the renderers that always use rich (inspect's
    tables, convert, smoke); rich is imported on first use."""

    def __getattr__(self, name: str):
        return getattr(console(), name)


stdout = _LazyConsole()


def escape(text: str) -> str:
    """rich's markup escape, imported when needed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def write_lines(lines: list[list[Segment]]) -> None:
    if is_terminal():
        from rich.text import Text

        for segments in lines:
            console().print(Text.assemble(*[(text, style) if style else text for style, text in segments]))
        return
    sys.stdout.write("".join("".join(text for _, text in segments) + "\n" for segments in lines))
    sys.stdout.flush()


SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}


def _strict_json(value: Any) -> Any:
    """NaN and Inf are not JSON; they are written as null so that every
    consumer can parse the report (the finding says what was non-finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(item) for item in value]
    return value


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(_strict_json(document), indent=2, allow_nan=False) + "\n")


def print_report(document: dict[str, Any], exit_code: int) -> None:
    """A command's one JSON document: its report with the exit code beside
    `passed` and `findings`, the keys an error document has too."""
    print_json({**document, "exit_code": exit_code})


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    return f"{count} B"


def finding_line(finding: Finding) -> str:
    style = SEVERITY_STYLE[finding.severity]
    return f"[{style}]{finding.severity.value:<7}[/] [bold]{finding.code}[/] {escape(printable_name(finding.message))}"


def finding_segments(finding: Finding) -> list[Segment]:
    return [
        (SEVERITY_STYLE[finding.severity], f"{finding.severity.value:<7}"),
        (None, " "),
        ("bold", finding.code),
        (None, " " + printable_name(finding.message)),
    ]


def findings_lines(findings: list[Finding], *, show_info: bool = True) -> list[list[Segment]]:
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return [
        finding_segments(finding)
        for finding in sorted(findings, key=lambda f: order[f.severity])
        if show_info or finding.severity is not Severity.INFO
    ]


def render_findings(findings: list[Finding], *, show_info: bool = True) -> None:
    write_lines(findings_lines(findings, show_info=show_info))


def _summary_rows(report: CheckReport) -> list[tuple[str, str]]:
    resolved = report.resolved
    taps = ", ".join(str(t) for t in resolved.target_layer_ids) or "?"
    if resolved.fc_norm:
        fc_norm = f"on ({resolved.fc_norm_shipped} weights shipped)"
    else:
        fc_norm = f"off ({resolved.fc_norm_shipped} weights shipped)"
    stream = resolved.stream or "unresolved"
    return [
        ("checkpoint", report.checkpoint),
        ("format", report.format),
        ("family", report.family or "unknown"),
        ("draft layers", str(resolved.num_hidden_layers if resolved.num_hidden_layers is not None else "?")),
        ("taps", f"{len(resolved.target_layer_ids)} [{taps}]"),
        ("fc_norm", fc_norm),
        ("aux_hidden_stream", f"{stream} ({resolved.stream_source})"),
        ("tensors", f"{report.tensor_count} ({human_bytes(report.total_bytes)})"),
    ]


def _shown(value: str) -> str:
    """A value for the page: non-printable characters escaped (a hostile
    path cannot drive the terminal), rich markup neutralised."""
    return escape(printable_name(value))


def render_check(report: CheckReport, *, strict: bool) -> None:
    rows = _summary_rows(report)
    if report.target:
        rows.append(("target", report.target))
    if report.payloads_read:
        rows.append(("payload scanned", human_bytes(report.scanned_bytes)))
    lines: list[list[Segment]] = [[("dim", f"{key:>18}"), (None, " " + printable_name(value))] for key, value in rows]
    lines.append([])
    lines += findings_lines(report.findings)
    counts = count_by_severity(report.findings)
    passed = report.passed(strict)
    lines.append([])
    lines.append([
        ("bold green" if passed else "bold red", "PASS" if passed else "FAIL"),
        (None, f"  {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
         + ("  (--strict: warnings fail)" if strict and counts["warning"] else "")),
    ])
    write_lines(lines)


def render_inspect(report: CheckReport) -> None:
    from rich.table import Table  # only this page has tables; check stays cheap

    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="dim", justify="right")
    summary.add_column()
    for key, value in _summary_rows(report):
        summary.add_row(key, _shown(value))
    stdout.print(summary)

    dtypes = Table(title="bytes by dtype", title_justify="left", show_edge=False)
    dtypes.add_column("dtype")
    dtypes.add_column("bytes", justify="right")
    for dtype, count in report.bytes_by_dtype.items():
        dtypes.add_row(dtype, human_bytes(count))
    stdout.print(dtypes)

    files = Table(title="files", title_justify="left", show_edge=False)
    files.add_column("file")
    files.add_column("tensors", justify="right")
    files.add_column("bytes", justify="right")
    for summary_row in report.files:
        files.add_row(_shown(summary_row.name), str(summary_row.tensors), human_bytes(summary_row.nbytes))
    stdout.print(files)

    if report.skipped:
        skipped = Table(title="skipped by the serving loader", title_justify="left", show_edge=False)
        skipped.add_column("tensor")
        skipped.add_column("dtype")
        skipped.add_column("bytes", justify="right")
        for row in report.skipped:
            skipped.add_row(_shown(row["name"]), row["dtype"], human_bytes(row["nbytes"]))
        stdout.print(skipped)

    counts = count_by_severity(report.findings)
    if counts["error"] or counts["warning"]:
        stdout.print(
            f"\n[yellow]{counts['error']} error(s), {counts['warning']} warning(s):[/] "
            f"run [bold]dspark check {_shown(report.checkpoint)}[/] for the findings."
        )
    else:
        stdout.print("\n[green]no errors or warnings[/] (dspark check gives the full report)")


# Payloads under this size stream faster than a bar can draw.
PROGRESS_MIN_BYTES = 256 * 1024 * 1024


@contextmanager
def progress_bar(wanted: bool, label: str):
    """A `progress` callable for the library (called once with the total
    bytes, it returns a callable told each chunk's size) that draws a bar on
    a terminal once the payload is large enough. The bar is gone when the
    block ends, whether the work finished, stopped short or failed."""
    bars = []

    def start(total: int):
        if total < PROGRESS_MIN_BYTES or not is_terminal():
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

        bar = Progress(
            label, BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console(), transient=True,
        )
        task = bar.add_task(label, total=total)
        bars.append(bar)
        bar.start()
        return lambda count: bar.update(task, advance=count)

    try:
        yield start if wanted else None
    finally:
        for bar in bars:
            bar.stop()
