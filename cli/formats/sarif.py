"""The sarif format: SARIF 2.1.0 (OASIS), for code-scanning dashboards.

One run; the tool's rules are the finding codes the results use, each with
its title from schema/findings.py as description and, as help, the page
`dspark explain CODE` prints (why the engine cares, what to do, where the
rule was read). No `helpUri`: SARIF wants an absolute URI there, and the
project publishes its documentation at none (a path inside the repository
is no URI, and a dashboard's link to it is dead). A result's
physical location is the file it is about (relative to the working
directory where it lies below it, else an absolute file URI); its logical
location is the tensor. A waived finding carries an accepted external
suppression with the waiver's reason as justification. An error that ended
the run is a tool execution notification of an unsuccessful invocation.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dspark.cli.formats import JudgedFinding, Report, artifact_path, dspark_version
from dspark.cli.explain import explain_page
from dspark.cli.terminal import json_text
from dspark.schema.explanations import EXPLANATIONS
from dspark.schema.findings import FINDING_CODES, Severity

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def artifact_location(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    # bytes, so a file name that is not UTF-8 (held as surrogates) is percent-encoded as stored
    return {"uri": quote(os.fsencode(Path(path).as_posix())), "uriBaseId": "%SRCROOT%"}


def rule(code: str) -> dict[str, Any]:
    spec = FINDING_CODES[code]
    explanation = EXPLANATIONS[code]
    return {
        "id": code,
        "shortDescription": {"text": spec.title},
        "fullDescription": {"text": f"{spec.title}. {explanation.why}"},
        "help": {
            "text": explain_page(code),
            "markdown": f"**{code}**: {spec.title}\n\n{explanation.why}\n\n**What to do:** {explanation.action}"
                        f"\n\nRun `dspark explain {code}` for where the rule was read.",
        },
        "defaultConfiguration": {"level": LEVEL[spec.severity]},
        "properties": {"group": code[:3]},
    }


def result(report: Report, judged: JudgedFinding, rule_index: int) -> dict[str, Any]:
    finding = judged.finding
    location: dict[str, Any] = {}
    where = artifact_location(artifact_path(report.subject, finding.file))
    if where is not None:
        location["physicalLocation"] = {"artifactLocation": where}
    if finding.tensor:
        location["logicalLocations"] = [{"name": finding.tensor, "fullyQualifiedName": finding.tensor, "kind": "variable"}]
    out: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": LEVEL[finding.severity],
        "message": {"text": finding.message},
        "properties": {"fails": judged.fails, "detail": finding.detail},
    }
    if location:
        out["locations"] = [location]
    if judged.waived is not None:
        out["suppressions"] = [{"kind": "external", "status": "accepted", "justification": judged.waived}]
    return out


def document(report: Report) -> dict[str, Any]:
    codes = list(dict.fromkeys(j.finding.code for j in report.findings))
    index = {code: i for i, code in enumerate(codes)}
    invocation: dict[str, Any] = {"executionSuccessful": report.error is None, "exitCode": report.exit_code}
    steps = [step for step in report.document.get("steps", ()) if step.get("status") != "passed"]
    if report.command == "gate" and steps and report.error is None:
        # The gate's steps that did not pass, so a log whose results are all
        # notes does not read as a gate that ran everything and passed.
        invocation["toolExecutionNotifications"] = [{
            "level": "error" if step["status"] == "failed" else "note",
            "message": {"text": f"step {step['name']} {step['status']}: {step.get('detail') or ''}".rstrip(": ")},
            "descriptor": {"id": f"step/{step['name']}"},
        } for step in steps]
    if report.error is not None:
        error = report.error
        invocation["toolExecutionNotifications"] = [{
            "level": "error",
            "message": {"text": error.message + (f" {error.hint}" if error.hint else "")},
            "descriptor": {"id": error.code or error.type},
        }]
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "dspark", "version": dspark_version(), "rules": [rule(c) for c in codes]}},
        "invocations": [invocation],
        "results": [result(report, j, index[j.finding.code]) for j in report.findings],
        "properties": {"command": report.command, "passed": report.passed},
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def write(report: Report, stream) -> None:
    stream.write(json_text(document(report)))
