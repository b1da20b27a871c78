"""The json format: the report as data, one document.

The document is a contract (schema/report.schema.json): every report and
every error document carries `dspark_version`, `report_format` (the version
of this shape), `command`, `passed`, `exit_code` and `findings`; the
command's own keys sit beside them.
"""

from __future__ import annotations

from typing import Any

from dspark.cli.formats import REPORT_FORMAT, Report, dspark_version
from dspark.cli.terminal import json_text


def document(report: Report) -> dict[str, Any]:
    envelope = {"dspark_version": dspark_version(), "report_format": REPORT_FORMAT, "command": report.command}
    return {**envelope, **report.document, "exit_code": report.exit_code}


def write(report: Report, stream) -> None:
    stream.write(json_text(document(report)))
