"""The junit format: JUnit XML, as CI test dashboards read it.

One `<testsuite>` per checkpoint; in it one `<testcase>` per rule group (the
three letters of a finding code: CFG, FCN, INV, ...) that the command
judges. A group with findings that fail the run gets one `<failure>` naming
them all; the other findings of the group (warnings that do not fail,
notes, waived findings with their reasons) go to its `<system-out>`. A
group with nothing to say passes. An error that ended the run is one test
case with an `<error>`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from dspark.cli.formats import JudgedFinding, Report, dspark_version
from dspark.schema.findings import FINDING_CODES
from dspark.schema.inventory import printable_name

# Groups of codes `smoke` produces, and those only `check --runtime` does:
# the other commands do not judge them, so they are no test case of theirs.
SMOKE_GROUPS = ("SMK",)
RUNTIME_GROUPS = ("RUN",)


def rule_groups(report: Report) -> list[str]:
    """The rule groups the command judged, in the README's order."""
    every = list(dict.fromkeys(code[:3] for code in FINDING_CODES))
    found = {j.finding.code[:3] for j in report.findings}
    if report.command == "smoke":
        judged = set(SMOKE_GROUPS)
    else:
        judged = set(every) - set(SMOKE_GROUPS) - set(RUNTIME_GROUPS)
        if report.command == "gate" and report.document.get("smoke", {}) and report.document["smoke"].get("ran"):
            judged |= set(SMOKE_GROUPS)
    return [group for group in every if group in judged or group in found]


def _line(judged: JudgedFinding) -> str:
    finding = judged.finding
    where = " ".join(part for part in (finding.file, finding.tensor) if part)
    text = f"{finding.severity.value} {finding.code} {finding.message}" + (f" [{where}]" if where else "")
    if judged.waived is not None:
        text += f" [waived: {judged.waived}]"
    # printable_name: a control character in a tensor name is not XML
    return printable_name(text)


def document(report: Report) -> ET.Element:
    subject = printable_name(report.subject or "dspark")
    classname = f"dspark.{report.command or 'run'}"
    suites = ET.Element("testsuites", name="dspark")
    suite = ET.SubElement(suites, "testsuite", name=" ".join(p for p in ("dspark", report.command, report.subject and subject) if p))
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="dspark_version", value=dspark_version())
    ET.SubElement(properties, "property", name="exit_code", value=str(report.exit_code))
    if report.document.get("engine"):
        ET.SubElement(properties, "property", name="engine", value=str(report.document["engine"]))

    tests = failures = errors = 0
    if report.error is not None:
        tests, errors = 1, 1
        case = ET.SubElement(suite, "testcase", classname=classname, name=report.command or "dspark")
        message = printable_name(report.error.message)
        error = ET.SubElement(case, "error", message=message, type=report.error.code or report.error.type)
        error.text = message + (f"\n{printable_name(report.error.hint)}" if report.error.hint else "")
    else:
        for group in rule_groups(report):
            members = [j for j in report.findings if j.finding.code[:3] == group]
            tests += 1
            case = ET.SubElement(suite, "testcase", classname=f"{classname}.{subject}", name=group)
            failing = [j for j in members if j.fails]
            if failing:
                failures += 1
                first = failing[0].finding
                failure = ET.SubElement(
                    case, "failure", type=first.code,
                    message=f"{len(failing)} finding(s) fail: {', '.join(sorted({j.finding.code for j in failing}))}",
                )
                failure.text = "\n".join(_line(j) for j in failing)
            others = [j for j in members if not j.fails]
            if others:
                ET.SubElement(case, "system-out").text = "\n".join(_line(j) for j in others)
    for element in (suites, suite):
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    suite.set("skipped", "0")
    return suites


def write(report: Report, stream) -> None:
    tree = document(report)
    ET.indent(tree)
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(tree, encoding="unicode") + "\n")
