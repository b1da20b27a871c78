"""The JSON report is a contract: every report kind and every error
document validates against schema/report.schema.json (JSON Schema draft
2020-12, shipped with the package) and carries the dspark version, the
engine and the report_format."""

from __future__ import annotations

import json
from importlib import resources
from importlib.metadata import version

import jsonschema
import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.cli.formats import REPORT_FORMAT

SCHEMA = json.loads((resources.files("dspark.schema") / "report.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def assert_valid(document: dict) -> dict:
    errors = sorted(VALIDATOR.iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    assert document["dspark_version"] == version("dspark")
    assert document["report_format"] == REPORT_FORMAT
    return document


def test_the_schema_is_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(
    "command, defect, exit_code",
    [("check", None, EXIT_OK), ("check", "fc-norm-declared-not-shipped", EXIT_CHECK_FAILED),
     ("inspect", None, EXIT_OK), ("inspect", "nan", EXIT_OK)],
)
def test_check_and_inspect_reports(dspark, tiny_draft, command, defect, exit_code):
    run = dspark(command, tiny_draft(defect=defect), "--format", "json")
    assert run.exit_code == exit_code
    document = assert_valid(run.json())
    assert document["command"] == command and document["engine"] == "tokenspeed@0.1.1"


def test_which_verdict_judged_is_named_judged_as(dspark, tiny_draft):
    # report_format 2: the key was "verdict", which read like a result ("served")
    draft = tiny_draft()
    for args, judged_as in (((), "served"), (("--contents",), "contents")):
        document = assert_valid(dspark("check", draft, *args, "--format", "json").json())
        assert document["judged_as"] == judged_as and "verdict" not in document
    assert SCHEMA["$defs"]["check_body"]["properties"]["judged_as"] == {"enum": ["served", "contents"]}
    assert "verdict" not in SCHEMA["$defs"]["check_body"]["properties"] and REPORT_FORMAT == 2


@pytest.mark.parametrize("command", ["check", "inspect"])
def test_a_report_over_several_engines_carries_one_verdict_each(dspark, tiny_draft, command):
    run = dspark(command, tiny_draft(), "--engine", "tokenspeed,tokenspeed@main", "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED  # main refuses the fc_norm weights
    document = assert_valid(run.json())
    assert [(row["engine"], row["outcome"]) for row in document["engine_verdicts"]] == [
        ("tokenspeed@0.1.1", "pass"), ("tokenspeed@main", "refused")]
    assert document["passed"] is False and document["engines"] == ["tokenspeed@0.1.1", "tokenspeed@main"]


def test_check_deep_strict_runtime_report(dspark, tiny_draft, fabricated_engine):
    run = dspark("check", tiny_draft(), "--deep", "--strict", "--runtime", "--format", "json")
    assert_valid(run.json())
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark("check", tiny_draft("other"), "--runtime", "--engine-path", site, "--format", "json")
    assert {"RUN001", "RUN002", "RUN003"} <= {f["code"] for f in assert_valid(run.json())["findings"]}


def test_smoke_report_with_the_engines_kernel(dspark_process, tiny_draft, fabricated_engine):
    pytest.importorskip("torch")
    run = dspark_process("smoke", tiny_draft(), "--device", "cpu", "--kernel", "both", "--engine-path",
                         fabricated_engine("pr1031"), "--format", "json")
    assert run.exit_code == EXIT_OK, run.stderr
    assert assert_valid(json.loads(run.stdout))["engine_kernel"]["ran"] is True


def test_convert_and_plan_reports(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(prefix="draft_model.")
    plan = dspark("convert", draft, tmp_path / "out", "--plan", "--format", "json")
    assert assert_valid(plan.json())["plan"] is True
    done = dspark("convert", draft, tmp_path / "out", "--format", "json")
    assert done.exit_code == EXIT_OK
    assert assert_valid(done.json())["plan"] is False


def test_gate_report(dspark, tiny_draft):
    document = assert_valid(dspark("gate", tiny_draft(), "--format", "json").json())
    assert [step["name"] for step in document["steps"]] == ["check", "manifest", "smoke"]


def test_smoke_report(dspark_process, tiny_draft):
    pytest.importorskip("torch")
    run = dspark_process("smoke", tiny_draft(), "--device", "cpu", "--format", "json")
    assert run.exit_code == EXIT_OK, run.stderr
    assert_valid(json.loads(run.stdout))


def test_doctor_report(dspark_process):
    run = dspark_process("doctor", "--format", "json")
    assert_valid(json.loads(run.stdout))


@pytest.mark.parametrize(
    "args",
    [["check", "missing"], ["check", "--no-such-flag"], ["inspect", "missing"], ["--format", "json", "bogus"]],
    ids=["no-path", "bad-flag", "inspect-no-path", "no-command"],
)
def test_error_documents(dspark, args):
    run = dspark(*args, "--format", "json")
    assert run.exit_code == EXIT_USAGE
    document = assert_valid(run.json())
    assert document["error"]["type"]


def test_a_checkpoint_error_document(dspark, tiny_draft, tmp_path):
    run = dspark("convert", tiny_draft(defect="fc-norm-declared-not-shipped"), tmp_path / "out", "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    assert assert_valid(run.json())["error"]["code"] == "FCN001"


def test_the_contract_is_not_blind(dspark, tiny_draft):
    document = dspark("check", tiny_draft(), "--format", "json").json()
    for broken in (
        {k: v for k, v in document.items() if k != "report_format"},
        {**document, "exit_code": 1},  # passed says otherwise
        {**document, "findings": [{"code": "bad", "severity": "error", "message": "", "file": None, "tensor": None, "detail": {}}]},
        {k: v for k, v in document.items() if k != "engine"},
    ):
        assert list(VALIDATOR.iter_errors(broken)), broken
