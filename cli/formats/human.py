"""The human format: a page to read.

One page per report kind (`PAGES`). On a terminal the pages use rich; on a
pipe `write_lines` prints plain text, and rich lays tables out with no width
limit (cli/terminal.py). Under `-q/--quiet` a report that passed prints
nothing and one that failed prints its verdict line only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dspark.cli.formats import JudgedFinding, Report
from dspark.cli.terminal import Segment, escape, human_bytes, stdout, wrap, wrap_width, write_lines
from dspark.schema.findings import Finding, Severity, count_by_severity
from dspark.schema.inventory import printable_name

if TYPE_CHECKING:
    from dspark.converters.check import CheckReport

SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
# `error   INV003 `: the severity, padded, and the code before a message.
_LEAD = 15


def write(report: Report, stream=None) -> None:
    """Print `report`'s page on stdout (`stream` is stdout: the page may use rich)."""
    if report.error is not None:
        return  # errors are told on stderr, by the one place that maps them
    if report.quiet:
        if not report.passed:
            write_lines([verdict_segments(report)])
        return
    PAGES[report.page](report)


# --------------------------------------------------------------------------
# pieces every page uses


def finding_segments(finding: Finding, waived: str | None = None, *, margin: int = 0) -> list[list[Segment]]:
    """A finding as lines: one off a terminal, wrapped to its width on one
    (cli/terminal.py), never breaking the finding's file or tensor name;
    `margin` spaces before each line."""
    text = printable_name(finding.message)
    if waived is not None:
        text += f"  [waived: {printable_name(waived)}]"
    keep = tuple(printable_name(name) for name in (finding.file, finding.tensor) if name)
    width = wrap_width()
    lead = " " * (margin + _LEAD)
    wrapped = wrap(text, width, first=lead, indent=lead, keep=keep)
    lines: list[list[Segment]] = []
    for number, line in enumerate(wrapped):
        if number == 0:
            segments: list[Segment] = [
                (None, " " * margin),
                (SEVERITY_STYLE[finding.severity], f"{finding.severity.value:<7}"),
                (None, " "),
                ("bold", finding.code),
                (None, line[margin + _LEAD - 1:]),
            ]
        else:
            segments = [(None, line)]
        lines.append(segments)
    if waived is not None:
        # the waiver's note in its colour, wherever the wrap left it
        last = lines[-1]
        note = f"  [waived: {printable_name(waived)}]"
        style, tail = last[-1]
        if tail.endswith(note):
            last[-1:] = [(style, tail[: -len(note)]), ("cyan", note)]
    return lines


def findings_lines(findings: list[Finding], *, show_info: bool = True, margin: int = 0) -> list[list[Segment]]:
    """Findings in the order the report holds them: root causes first
    (schema/findings.py, `report_order`), so no sorting here."""
    return [
        line
        for finding in findings
        if show_info or finding.severity is not Severity.INFO
        for line in finding_segments(finding, margin=margin)
    ]


def judged_lines(findings: list[JudgedFinding]) -> list[list[Segment]]:
    return [line for j in findings for line in finding_segments(j.finding, j.waived)]


def render_findings(findings: list[Finding], *, show_info: bool = True) -> None:
    write_lines(findings_lines(findings, show_info=show_info))


def verdict_segments(report: Report) -> list[Segment]:
    """`PASS`/`FAIL` with the counts and, when it failed, the codes that failed it."""
    # a waived finding is counted as waived, not as the error it was: "PASS 1 error(s)" reads as a contradiction
    findings = [j.finding for j in report.findings if j.waived is None]
    counts = count_by_severity(findings)
    failing = sorted({j.finding.code for j in report.findings if j.fails})
    waived = sum(1 for j in report.findings if j.waived is not None)
    text = f"  {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
    if waived:
        text += f", {waived} waived"
    failed_steps = [step for step in getattr(report.data, "steps", ()) if step.status == "failed"]
    if not report.passed and not failing and failed_steps:
        # failed by a step, not a finding (a smoke the policy requires and no GPU): the reason, not "0 error(s)"
        reasons = "; ".join(f"{step.name} failed: {step.detail}" for step in failed_steps)
        text = f"  {reasons}.{text}"
    if report.quiet:
        # the one line a quiet run prints: it says what failed and where
        if failing:
            text += f"; failed by {', '.join(failing)}"
        if failed_steps:
            text += f"; failed step(s): {', '.join(step.name for step in failed_steps)}"
        if report.subject:
            text += f"  ({printable_name(report.subject)})"
    return [("bold green" if report.passed else "bold red", "PASS" if report.passed else "FAIL"), (None, text)]


# --------------------------------------------------------------------------
# check and inspect


# The engine does not load this family (ENG006): it reads none of the
# config, so what it would serve is not "?" but nothing; say so.
NOT_LOADED = "? (this engine does not load the family: ENG006)"


def _summary_rows(report: CheckReport) -> list[tuple[str, str]]:
    resolved = report.resolved
    if any(f.code == "ENG006" for f in report.findings):
        return [("checkpoint", report.checkpoint), ("format", report.format),
                ("family", report.family or "unknown"), ("draft layers", NOT_LOADED), ("taps", NOT_LOADED),
                ("fc_norm", f"{resolved.fc_norm_shipped} weights shipped"),
                ("tensors", f"{report.tensor_count} ({human_bytes(report.total_bytes)})")]
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
        ("taps", f"{resolved.default_taps} [the target's default layers]" if resolved.default_taps
         else f"{len(resolved.target_layer_ids)} [{taps}]"),
        ("fc_norm", fc_norm),
        ("aux_hidden_stream", f"{stream} ({resolved.stream_source})"),
        ("tensors", f"{report.tensor_count} ({human_bytes(report.total_bytes)})"),
    ]


def _shown(value: str) -> str:
    """A value for the page: non-printable characters escaped (a hostile
    path cannot drive the terminal), rich markup neutralised."""
    return escape(printable_name(value))


def _engine_row(report: Report) -> tuple[str, str]:
    # The verdict is the engine's: say which, and who chose it (a settings
    # file found upward changes it without a word on the command line).
    engines = report.document.get("engines") or [report.document.get("engine")]
    return ("engine", ", ".join(str(e) for e in engines)
            + (f" ({report.engine_source})" if report.engine_source else ""))


def check_page(report: Report) -> None:
    check: CheckReport = report.data
    rows = _summary_rows(check)
    rows.insert(1, _engine_row(report))
    if check.target:
        rows.append(("target", check.target))
    if check.payloads_read:
        rows.append(("payload scanned", human_bytes(check.scanned_bytes)))
    lines: list[list[Segment]] = [[("dim", f"{key:>18}"), (None, " " + printable_name(value))] for key, value in rows]
    lines.append([])
    lines += judged_lines(report.findings)
    lines.append([])
    lines += engine_verdict_lines(check, bool(report.document.get("strict")))
    verdict = verdict_segments(report)
    strict = report.document.get("strict")
    if strict and count_by_severity(j.finding for j in report.findings)["warning"]:
        verdict.append((None, "  (--strict: warnings fail)"))
    lines.append(verdict)
    write_lines(lines)


VERDICT_STYLE = {"pass": "bold green", "refused": "bold red", "served_wrong": "bold red", "not_judged": "bold red"}


def engine_verdict_lines(check: CheckReport, strict: bool = False) -> list[list[Segment]]:
    """One row per engine when several were judged: its verdict and the
    codes of the findings that decide it. Codes, not the findings: those
    are printed in full above, and a row that repeats one runs past any
    terminal, broken mid-name (`dspark explain CODE` says more)."""
    if len(check.engine_reports) < 2:
        return []
    rows = check.engine_verdicts(strict)
    width = max(len(row["engine"]) for row in rows)
    lines: list[list[Segment]] = []
    for row in rows:
        line: list[Segment] = [("dim", f"{row['engine']:>{width}}"), (None, "  "),
                               (VERDICT_STYLE[row["outcome"]], row["outcome_text"].upper())]
        codes = list(dict.fromkeys(why["code"] for why in row["why"]))
        if codes:
            line += [(None, "  "), ("bold", ", ".join(codes))]
        lines.append(line)
    lines.append([])
    return lines


def inspect_page(report: Report) -> None:
    from rich.table import Table  # only this page has tables; check stays cheap

    check: CheckReport = report.data
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="dim", justify="right")
    summary.add_column()
    rows = _summary_rows(check)
    rows.insert(1, _engine_row(report))
    for key, value in rows:
        summary.add_row(key, _shown(value))
    stdout.print(summary)

    dtypes = Table(title="bytes by dtype", title_justify="left", show_edge=False)
    dtypes.add_column("dtype")
    dtypes.add_column("bytes", justify="right")
    for dtype, count in check.bytes_by_dtype.items():
        dtypes.add_row(dtype, human_bytes(count))
    stdout.print(dtypes)

    files = Table(title="files", title_justify="left", show_edge=False)
    files.add_column("file")
    files.add_column("tensors", justify="right")
    files.add_column("bytes", justify="right")
    for summary_row in check.files:
        files.add_row(_shown(summary_row.name), str(summary_row.tensors), human_bytes(summary_row.nbytes))
    stdout.print(files)

    if check.skipped:
        skipped = Table(title="skipped by the serving loader", title_justify="left", show_edge=False)
        skipped.add_column("tensor")
        skipped.add_column("dtype")
        skipped.add_column("bytes", justify="right")
        for row in check.skipped:
            skipped.add_row(_shown(row["name"]), row["dtype"], human_bytes(row["nbytes"]))
        stdout.print(skipped)

    if len(check.engine_reports) > 1:
        write_lines(engine_verdict_lines(check))
    counts = count_by_severity(check.findings)
    if counts["error"] or counts["warning"]:
        # the codes, so that a failing inspect says what fails without another run
        codes = {severity: ", ".join(sorted({f.code for f in check.findings if f.severity is severity}))
                 for severity in (Severity.ERROR, Severity.WARNING)}
        said = [f"{counts[key]} {key}(s) ({codes[severity]})" for key, severity in
                (("error", Severity.ERROR), ("warning", Severity.WARNING)) if counts[key]]
        verdict = "[bold red]FAIL[/] " if counts["error"] else ""
        stdout.print(
            f"\n{verdict}[yellow]{'; '.join(said)}:[/] "
            f"run [bold]{_shown(report.next_command or 'dspark check ' + check.checkpoint)}[/] for the findings."
        )
    else:
        stdout.print("\n[green]no errors or warnings[/] (dspark check gives the full report)")


# --------------------------------------------------------------------------
# convert


def _dtype_text(plan) -> str:
    if not plan.casts:
        return "keep" if plan.options.dtype is None else "nothing to cast"
    return ", ".join(f"{row['tensors']} x {pair}" for pair, row in plan.casts.items())


def plan_page(report: Report) -> None:
    plan = report.data
    if plan.replaces_existing:
        where = "replaces the existing folder" if plan.options.force else "exists: convert needs --force to replace it"
    else:
        where = "empty folder, written into" if Path(plan.destination).is_dir() else "new folder"
    rows = [
        ("source", f"{plan.source} ({plan.source_format}, {plan.family})"),
        ("destination", f"{plan.destination} ({where})"),
        ("config", plan.config_source or "-"),
        ("casts", _dtype_text(plan)),
        ("bytes", f"{human_bytes(plan.bytes_in)} read -> {human_bytes(plan.bytes_out)} written"),
    ]
    for key, value in rows:
        stdout.print(f"[dim]{key:>12}[/] {escape(value)}")

    stdout.print(f"\n[bold]tensors to write ({len(plan.tensors)})[/]  name, dtype, shape, shard, <- stored name when renamed")
    width = max((len(printable_name(t.name)) for t in plan.tensors), default=0)
    for tensor in plan.tensors:
        dtype = f"{tensor.source.dtype}->{tensor.dtype}" if tensor.cast else tensor.dtype
        renamed = f"  <- {printable_name(tensor.source.stored_name)}" if tensor.renamed else ""
        if tensor.rows is not None:
            renamed = f"  <- rows {tensor.rows[0]}-{tensor.rows[1] - 1} of {printable_name(tensor.source.stored_name)}"
        line = f"  {printable_name(tensor.name):<{width}}  {dtype:<9}  {str(list(tensor.shape)):<14}  {tensor.shard}{renamed}"
        stdout.print(escape(line))

    if plan.dropped:
        stdout.print(f"\n[bold]dropped ({len(plan.dropped)})[/]" + ("" if plan.options.keep_skipped else "  (--keep-skipped keeps them)"))
        for dropped in plan.dropped:
            stdout.print(f"  {escape(printable_name(dropped.stored_name))}  {dropped.dtype} {human_bytes(dropped.nbytes)}: {dropped.reason}")
    if plan.not_cast:
        stdout.print(f"\n[bold]not cast[/] (not floating point): {escape(', '.join(plan.not_cast))}")
    stdout.print(f"\n[bold]shards ({len(plan.shards)})[/]  max {human_bytes(plan.options.max_shard_size)}")
    for shard in plan.shards:
        stdout.print(f"  {shard.file}  {len(shard.tensors)} tensors  {human_bytes(shard.file_bytes)}")
    for spec, launches in getattr(plan, "serves_launches", {}).items():
        stdout.print(f"\n[bold]serves on {escape(spec)}[/]: {escape(launches)}")
    if plan.config_changes:
        stdout.print(f"\n[bold]config.json changes ({len(plan.config_changes)})[/]")
        for change in plan.config_changes:
            stdout.print(f"  {escape(change)}")
    stdout.print("\n[bold]the output, checked before it is written[/]")
    render_findings(plan.findings, show_info=True)
    if plan.errors:
        stdout.print(f"\n[bold red]WOULD FAIL[/]  {len(plan.errors)} error(s); convert would write nothing.")
    else:
        stdout.print(f"\n[bold green]OK[/]  convert would write {len(plan.tensors)} tensors in {len(plan.shards)} shard(s).")


def convert_page(report: Report) -> None:
    done = report.data
    plan = done.plan
    stdout.print(f"[bold green]converted[/] {escape(plan.source)} -> {escape(plan.destination)}"
                 + ("  (replaced the previous folder)" if plan.replaces_existing else ""))
    lines = [
        f"{len(plan.tensors)} tensors, {human_bytes(plan.bytes_out)} in {len(plan.shards)} shard(s) ({plan.source_format} -> safetensors, {plan.family})",
        f"casts: {_dtype_text(plan)}",
        f"renamed {len(plan.renames)}, split {len(plan.splits)}, dropped {len(plan.dropped)}"
        + (f" ({', '.join(sorted({d.reason for d in plan.dropped}))})" if plan.dropped else ""),
        f"config.json: {len(plan.config_changes)} change(s)",
        f"verified: every value written was read (no NaN/Inf, no all-zero weights) and dspark check passes; "
        f"dspark-manifest.json written ({done.seconds:.2f} s)",
    ]
    for line in lines:
        stdout.print(f"  {escape(line)}")
    notes = [f for f in plan.findings if f.code.startswith("SRC")] + done.warnings
    write_lines(findings_lines([f for f in notes if f.severity is not Severity.ERROR], margin=2))


# --------------------------------------------------------------------------
# smoke


def smoke_page(report: Report) -> None:
    smoke = report.data
    r = smoke.result
    rows = [
        ("checkpoint", smoke.checkpoint),
        ("family", smoke.family),
        ("device", f"{smoke.device} ({r.kernel_backend})"),
        ("taps", f"{smoke.tokens} x {r.num_segments} x {r.target_hidden} {str(r.dtype).removeprefix('torch.')}, {smoke.taps_source}"),
        ("fc_norm", "on" if r.has_fc_norm else "off"),
        # A PASS here is about these weights alone: NaN in a layer or a head
        # passes the smoke, and the page must not read as a verdict on them.
        ("looked at", "the context projection only (its weights and norms); the layers and heads were not "
                      "read: `dspark check --deep` reads every value"),
    ]
    for key, value in rows:
        stdout.print(f"[dim]{key:>11}[/] {escape(value)}")
    stdout.print()
    checks = [r.fused, r.incremental, r.folded]
    if r.engine is not None and r.engine.ran:
        checks += [r.engine.dspark_norm, r.engine.engine_norm, r.engine.engine_projection]
    width = max(12, *(len(check.name) for check in checks))
    stdout.print(f"[dim]{'path':<{width}} {'rel RMS err':>12} {'max abs err':>12} {'cosine':>10}  within tolerance[/]")
    for check in checks:
        ok = "[green]yes[/]" if check.within_tolerance else "[red]no[/]"
        stdout.print(
            f"{escape(check.name):<{width}} {check.rel_rms_error:>12.3e} {check.max_abs_error:>12.3e} "
            f"{check.cosine_similarity:>10.6f}  {ok} (<= {check.tolerance:.0e})"
        )
    stdout.print()
    render_findings(smoke.findings)
    verdict = "[bold green]PASS[/]" if smoke.passed else "[bold red]FAIL[/]"
    stdout.print(f"\n{verdict}")


# --------------------------------------------------------------------------
# gate and doctor

STATUS_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow", "ok": "green", "absent": "yellow",
                "problem": "bold red", "not run": "yellow"}


def _table(rows: list[tuple[str, str, str]], header: tuple[str, str, str]) -> list[list[Segment]]:
    """Three columns as plain segments: no width limit, nothing cut."""
    widths = [max(len(printable_name(row[i])) for row in [header, *rows]) for i in range(2)]
    lines = [[("dim", f"{header[0]:<{widths[0]}}  {header[1]:<{widths[1]}}  {header[2]}")]]
    # On a terminal the detail wraps under its own column (cli/terminal.py).
    offset = widths[0] + widths[1] + 4
    for name, status, detail in rows:
        first, *more = wrap(printable_name(detail), wrap_width(), first=" " * offset, indent=" " * offset)
        lines.append([
            (None, f"{printable_name(name):<{widths[0]}}  "),
            (STATUS_STYLE.get(status), f"{status:<{widths[1]}}"),
            (None, "  " + first[offset:]),
        ])
        lines += [[(None, line)] for line in more]
    return lines


def gate_page(report: Report) -> None:
    gate = report.data
    lines: list[list[Segment]] = [
        [("dim", f"{'draft':>8}"), (None, " " + printable_name(gate.checkpoint))],
        [("dim", f"{'target':>8}"), (None, " " + printable_name(gate.target or "none"))],
        [("dim", f"{'engine':>8}"), (None, " " + gate.engine)],
        [("dim", f"{'policy':>8}"), (None, " " + printable_name(gate.policy.source or "none (defaults)"))],
        [],
    ]
    shown = judged_lines([j for j in report.findings if j.fails or j.waived is not None
                          or j.finding.severity is not Severity.INFO])
    if gate.unused_waivers:
        shown.append([("dim", f"note: waivers that matched no finding: {', '.join(gate.unused_waivers)}")])
    lines += shown + ([[]] if shown else [])
    lines += engine_verdict_lines(gate.check)
    lines += _table([(s.name, s.status, s.detail) for s in gate.steps], ("step", "result", "detail"))
    lines.append([])
    lines.append(verdict_segments(report))
    write_lines(lines)


def doctor_page(report: Report) -> None:
    doctor = report.data
    rows = [(row.name, row.status, row.detail) for row in doctor.rows]
    lines = _table(rows, ("what", "state", "detail"))
    lines.append([])
    lines.append([("bold green", "OK") if report.passed else ("bold red", "PROBLEM"),
                  (None, "  " + doctor.summary)])
    write_lines(lines)


PAGES = {
    "check": check_page,
    "inspect": inspect_page,
    "plan": plan_page,
    "convert": convert_page,
    "smoke": smoke_page,
    "gate": gate_page,
    "doctor": doctor_page,
}
