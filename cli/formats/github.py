"""The github format: GitHub Actions workflow commands.

Each failing finding becomes an `::error` annotation, each other warning a
`::warning`, each waived finding a `::notice` that gives the waiver's reason;
notes (info) are left out of the annotations. A last plain line gives the
verdict. Values are escaped as the Actions toolkit escapes them
(actions/toolkit, packages/core/src/command.ts): in the message `%`, CR and
LF; in a property also `:` and `,`.
"""

from __future__ import annotations

from dspark.cli.formats import JudgedFinding, Report, artifact_path
from dspark.schema.findings import Severity, count_by_severity
from dspark.schema.inventory import undecodable_as_bytes


def escape_data(text: str) -> str:
    # The Actions toolkit's escaping, and any other character that does not
    # print percent-encoded the same way (%1B for ESC): a hostile tensor name
    # must not reach the log viewer as a terminal sequence.
    # A byte of a name that is not UTF-8 is `\\xff`, as on the page and in JSON.
    escaped = undecodable_as_bytes(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if escaped.isprintable():
        return escaped
    return "".join(ch if ch.isprintable() else "".join(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
                   for ch in escaped)


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **properties: str | None) -> str:
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items() if value)
    return f"::{kind}{' ' + props if props else ''}::{escape_data(message)}"


def annotation(report: Report, judged: JudgedFinding) -> str | None:
    finding = judged.finding
    if judged.fails:
        kind = "error"
    elif judged.waived is not None:
        kind = "notice"
    elif finding.severity is Severity.WARNING:
        kind = "warning"
    else:
        return None
    message = finding.message
    if finding.tensor and finding.tensor not in message:
        message = f"{finding.tensor}: {message}"
    if judged.waived is not None:
        message += f" [waived: {judged.waived}]"
    return command(kind, message, file=artifact_path(report.subject, finding.file), title=f"dspark {finding.code}")


def _doctor_lines(report: Report) -> list[str]:
    """doctor's checks: a problem is an error annotation, what is absent
    or not run a notice (it may be what this runner lacks on purpose)."""
    lines = []
    for row in report.document.get("rows", ()):
        if row["status"] == "problem":
            lines.append(command("error", f"{row['name']}: {row['detail']}", title="dspark doctor"))
        elif row["status"] in ("absent", "not run"):
            lines.append(command("notice", f"{row['name']}: {row['status']}: {row['detail']}", title="dspark doctor"))
    problems = [row["name"] for row in report.document.get("rows", ()) if row["status"] == "problem"]
    verdict = "PASS" if report.passed else "FAIL"
    lines.append(f"dspark doctor: {verdict} ({len(report.document.get('rows', ()))} check(s)"
                 + (f"; problem with: {', '.join(problems)}" if problems else "") + f"; exit {report.exit_code})")
    return lines


def write(report: Report, stream) -> None:
    if report.command == "doctor" and report.error is None:
        stream.write("".join(line + "\n" for line in _doctor_lines(report)))
        return
    lines = []
    if report.error is not None:
        error = report.error
        text = error.message + (f" {error.hint}" if error.hint else "")
        lines.append(command("error", text, file=artifact_path(None, error.file), title=f"dspark {report.command or ''}".strip()))
    lines += [line for line in (annotation(report, j) for j in report.findings) if line is not None]
    # as on the human page: a waived finding is counted as waived, and a gate failed by a step says which
    counts = count_by_severity(j.finding for j in report.findings if j.waived is None)
    waived = sum(1 for j in report.findings if j.waived is not None)
    failed_steps = [step.name for step in getattr(report.data, "steps", ()) if step.status == "failed"]
    verdict = "PASS" if report.passed else "FAIL"
    lines.append(
        f"dspark {report.command or ''}: {verdict} ({counts['error']} error(s), {counts['warning']} warning(s), "
        f"{counts['info']} note(s)" + (f", {waived} waived" if waived else "")
        + (f"; failed step(s): {', '.join(failed_steps)}" if failed_steps else "") + f"; exit {report.exit_code})"
    )
    stream.write("".join(line + "\n" for line in lines))
