"""The junit format: JUnit XML, as CI test dashboards read it.

One `<testsuite>` per checkpoint; in it, for `gate`, one `<testcase>` per
gate step (check, manifest, smoke: `<skipped>` with the reason where it did
not run), then one per rule group (the three letters of a finding code:
CFG, FCN, INV, ...) that applied to this run: no payload group (PAY) for a
header-only check, no manifest group (MAN) where none was read, no target
group (TGT) without a target; their notes go to the suite's `<system-out>`.
`doctor` has one test case per check it made (a problem fails, what is
absent or not run is skipped). A group with findings that fail the run gets one `<failure>` naming
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
# Groups whose rules run only when the run did something: the payload rules
# when values were read, the manifest's when one was read, the target's
# with a target, the cast's and the source's in a conversion. A run that did
# not do it has no such test case: it was not passed, it was not tried.
CONDITIONAL_GROUPS = ("PAY", "MAN", "TGT", "CNV", "SRC")
# Notes that say a group's rules did not run: no case of theirs.
NOT_RUN_NOTES = ("PAY005",)


def _check_document(report: Report) -> dict:
    """The check's part of the report: the gate nests it under `check`."""
    nested = report.document.get("check")
    return nested if isinstance(nested, dict) else report.document


def _applied_conditional(report: Report) -> set[str]:
    check = _check_document(report)
    applied = set()
    if report.command == "convert" or check.get("payloads_read"):
        applied.add("PAY")
    if report.command == "convert":
        applied |= {"CNV", "MAN"}
    if any(step.get("name") == "manifest" and step.get("status") != "skipped"
           for step in report.document.get("steps", ())):
        applied.add("MAN")
    if check.get("target") or report.document.get("target"):
        applied.add("TGT")
    return applied


def rule_groups(report: Report) -> list[str]:
    """The rule groups the command judged, in the README's order: those
    that applied to this run, and any other with a finding (a hole in a
    weight file is a payload finding a header-only check makes; MAN004 says
    a manifest was verified) other than a note that its rules did not run."""
    every = list(dict.fromkeys(code[:3] for code in FINDING_CODES))
    if report.command == "smoke":
        judged = set(SMOKE_GROUPS)
    else:
        judged = set(every) - set(SMOKE_GROUPS) - set(RUNTIME_GROUPS) - set(CONDITIONAL_GROUPS)
        judged |= _applied_conditional(report)
        if report.command == "gate" and report.document.get("smoke", {}) and report.document["smoke"].get("ran"):
            judged |= set(SMOKE_GROUPS)
    said = {j.finding.code[:3] for j in report.findings if j.finding.code not in NOT_RUN_NOTES}
    return [group for group in every if group in judged or group in said]


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

    tests = failures = errors = skipped = 0
    if report.error is not None:
        tests, errors = 1, 1
        case = ET.SubElement(suite, "testcase", classname=classname, name=report.command or "dspark")
        message = printable_name(report.error.message)
        error = ET.SubElement(case, "error", message=message, type=report.error.code or report.error.type)
        error.text = message + (f"\n{printable_name(report.error.hint)}" if report.error.hint else "")
    elif report.command == "doctor":
        tests, failures, skipped = _doctor_cases(suite, report, classname)
    else:
        if report.command == "gate":
            step_tests, step_failures, step_skipped = _step_cases(suite, report, f"{classname}.{subject}")
            tests, failures, skipped = tests + step_tests, failures + step_failures, skipped + step_skipped
        groups = rule_groups(report)
        for group in groups:
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
        # Notes of groups that did not apply (PAY005: the values were not read) are the run's, not a case's.
        unplaced = [j for j in report.findings if j.finding.code[:3] not in groups]
        if unplaced:
            ET.SubElement(suite, "system-out").text = "\n".join(_line(j) for j in unplaced)
    for element in (suites, suite):
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
        element.set("skipped", str(skipped))
    return suites


def _step_cases(suite: ET.Element, report: Report, classname: str) -> tuple[int, int, int]:
    """One test case per gate step (check, manifest, smoke), as it went:
    passed, failed, or skipped with the reason."""
    tests = failures = skipped = 0
    for step in report.document.get("steps", ()):
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name=f"step {step['name']}")
        detail = printable_name(str(step.get("detail") or ""))
        if step["status"] == "failed":
            failures += 1
            ET.SubElement(case, "failure", type="step", message=detail).text = detail
        elif step["status"] == "skipped":
            skipped += 1
            ET.SubElement(case, "skipped", message=detail)
        elif detail:
            ET.SubElement(case, "system-out").text = detail
    return tests, failures, skipped



def _doctor_cases(suite: ET.Element, report: Report, classname: str) -> tuple[int, int, int]:
    """doctor's own checks, one test case each: ok passes, a problem
    fails, what is absent or was not run is skipped with the reason."""
    tests = failures = skipped = 0
    for row in report.document.get("rows", ()):
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name=printable_name(row["name"]))
        detail = printable_name(row["detail"])
        if row["status"] == "problem":
            failures += 1
            ET.SubElement(case, "failure", type="problem", message=detail).text = detail
        elif row["status"] in ("absent", "not run"):
            skipped += 1
            ET.SubElement(case, "skipped", message=f"{row['status']}: {detail}")
        else:
            ET.SubElement(case, "system-out").text = detail
    return tests, failures, skipped

def write(report: Report, stream) -> None:
    tree = document(report)
    ET.indent(tree)
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(tree, encoding="unicode") + "\n")
