"""Report formats: one report protocol, one module per format.

Every command hands its outcome to the format asked for as a `Report`: the
command's result as data (`document`, what `--format json` prints), its
findings each judged (does it fail the run? was it waived, and why?), the
exit code already decided, and the library object for the human page. A
format module has one function, `write(report, stream)`:

    human   the page to read (rich on a terminal, plain text on a pipe)
    json    the report as data, under the contract schema/report.schema.json
    sarif   SARIF 2.1.0, for code-scanning dashboards
    junit   JUnit XML, one test case per rule group per checkpoint
    github  GitHub Actions workflow commands (annotations)

Format modules are imported when used: `dspark check` on a pipe pays only
for the one it prints.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import field
from pathlib import Path
from typing import Any, Iterable

# JudgedFinding lives with the findings, not the gate's policy, so that a
# plain check does not import the policy module.
from dspark.schema.findings import Finding, JudgedFinding, Severity
from dspark.schema.records import record

__all__ = ["FORMATS", "MACHINE_FORMATS", "ErrorInfo", "JudgedFinding", "Report", "artifact_path", "format_module", "judged"]

FORMATS = ("human", "json", "sarif", "junit", "github")
# Formats a program reads; `--output FILE` writes one of these.
MACHINE_FORMATS = ("json", "sarif", "junit", "github")
# What `--output FILE` with no machine --format writes, by the file's suffix.
FORMAT_BY_SUFFIX = {".json": "json", ".sarif": "sarif", ".xml": "junit"}

# The version of the JSON report's shape (schema/report.schema.json). Keys
# may be added within a version; one removed or changed in meaning bumps it.
REPORT_FORMAT = 2


@record
class ErrorInfo:
    """An error that ended the run before a report: what `report_error` tells."""

    type: str
    message: str
    hint: str | None
    file: str | None
    tensor: str | None
    code: str | None


@record(frozen=False)
class Report:
    """What a command hands its format."""

    command: str | None  # check, inspect, convert, smoke, gate, doctor (None: an error before one ran)
    exit_code: int
    document: dict[str, Any]  # the command's report as data, without the envelope
    findings: list[JudgedFinding] = field(default_factory=list)
    subject: str | None = None  # the checkpoint the findings are about
    data: Any = None  # the library's result object, for the human page
    kind: str | None = None  # the human page to draw, when not the command's own (convert's plan)
    # The command line that says more, with the options this run was given
    # (inspect's `dspark check ... --engine ... --config ...`).
    next_command: str | None = None
    quiet: bool = False
    error: ErrorInfo | None = None
    # Where the engine judged for was chosen (--engine, a settings file
    # found upward, dspark's default), for the page to say.
    engine_source: str | None = None

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def page(self) -> str:
        return self.kind or self.command or "error"


def judged(findings: Iterable[Finding], *, strict: bool = False) -> list[JudgedFinding]:
    """Findings as `check` judges them: errors fail, warnings only when strict."""
    return [
        JudgedFinding(f, f.severity is Severity.ERROR or (strict and f.severity is Severity.WARNING))
        for f in findings
    ]


def artifact_path(subject: str | None, file: str | None) -> str | None:
    """The file a finding is about (`file` is relative to the checkpoint
    folder), as a path from the working directory, the repository root in a
    workflow; a path outside it stays as it was given."""
    if subject is None:
        if not file:
            return file
        path = Path(file)
    else:
        base = Path(subject)
        path = base / file if file and base.is_dir() else base
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return str(path)
    return str(path) if relative.split(os.sep, 1)[0] == ".." else relative


def format_module(name: str):
    """The module of format `name` (imported on first use)."""
    if name not in FORMATS:
        raise ValueError(f"unknown report format {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def dspark_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dspark")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
