"""CI formats describe the run that happened: a test case per gate step as
it went, only rule groups that applied, doctor's own checks, and SARIF
help that is `dspark explain`'s page with no link that goes nowhere."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from dspark.cli.errors import EXIT_USAGE


def _cases(xml_text: str) -> dict[str, ET.Element]:
    (suite,) = ET.fromstring(xml_text).findall("testsuite")
    return {case.get("name"): case for case in suite.findall("testcase")}


def test_gate_junit_has_a_case_per_step_skipped_where_skipped(dspark, tiny_draft):
    draft = tiny_draft()
    steps = dspark("gate", draft, "--format", "json").json()["steps"]
    run = dspark("gate", draft, "--format", "junit")
    root = ET.fromstring(run.stdout)
    cases = _cases(run.stdout)
    assert [step["name"] for step in steps] == ["check", "manifest", "smoke"]
    for step in steps:
        case = cases[f"step {step['name']}"]
        assert (case.find("skipped") is not None) == (step["status"] == "skipped"), step
        assert (case.find("failure") is not None) == (step["status"] == "failed"), step
    assert cases["step manifest"].find("skipped").get("message").startswith("no dspark-manifest.json")
    skipped = sum(step["status"] == "skipped" for step in steps)
    assert root.get("skipped") == str(skipped) and skipped >= 1
    assert "MAN" not in cases  # no manifest was read
    assert "PAY" in cases  # the gate reads every value


def test_a_header_only_check_has_no_payload_case(dspark, tiny_draft):
    cases = _cases(dspark("check", tiny_draft(), "--format", "junit").stdout)
    assert "PAY" not in cases and "CFG" in cases
    assert "PAY" in _cases(dspark("check", tiny_draft(), "--deep", "--format", "junit").stdout)


def test_doctor_junit_and_github_hold_doctors_checks(dspark):
    rows = json.loads(dspark("doctor", "--format", "json").stdout)["rows"]
    cases = _cases(dspark("doctor", "--format", "junit").stdout)
    assert list(cases) == [row["name"] for row in rows]
    assert "CFG" not in cases
    annotations = dspark("doctor", "--format", "github").stdout.splitlines()
    assert annotations[-1].startswith("dspark doctor: ")
    absent = [row["name"] for row in rows if row["status"] in ("absent", "not run")]
    assert len(annotations) - 1 == len(absent) + sum(row["status"] == "problem" for row in rows)


def test_doctor_refuses_sarif(dspark):
    run = dspark("doctor", "--format", "sarif")
    assert run.exit_code == EXIT_USAGE
    assert "doctor has no SARIF form" in run.stderr


def test_sarif_rules_carry_the_explain_page_and_no_relative_link(dspark, tiny_draft):
    draft = tiny_draft(defect="unexpected-tensor")
    rules = dspark("check", draft, "--format", "sarif").json()["runs"][0]["tool"]["driver"]["rules"]
    assert rules
    for rule in rules:
        assert "helpUri" not in rule
        # wrapped at the terminal's width (a long citation broken inside its path); the help is not
        page = dspark("explain", rule["id"]).stdout
        assert "".join(rule["help"]["text"].split()) == "".join(page.split())


def test_gate_sarif_says_which_steps_did_not_run(dspark, tiny_draft):
    from test_formats import assert_valid_sarif

    draft = tiny_draft()
    steps = {s["name"]: s for s in dspark("gate", draft, "--format", "json").json()["steps"]}
    log = dspark("gate", draft, "--format", "sarif").json()
    assert_valid_sarif(log)
    (invocation,) = log["runs"][0]["invocations"]
    told = {n["descriptor"]["id"]: n for n in invocation.get("toolExecutionNotifications", [])}
    assert set(told) == {f"step/{name}" for name, step in steps.items() if step["status"] != "passed"}
    assert told["step/manifest"]["level"] == "note" and "skipped" in told["step/manifest"]["message"]["text"]
