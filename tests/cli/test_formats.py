"""Every report format, over the one report protocol: SARIF validated
against the SARIF 2.1.0 schema, JUnit parsed with xml.etree, GitHub
annotations escaped as the Actions toolkit escapes them; `--output`,
`--quiet`, colour and full paths."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.cli.formats.github import escape_data, escape_property
from dspark.schema.explanations import EXPLANATIONS
from dspark.schema.findings import FINDING_CODES

SARIF_SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "sarif-schema-2.1.0-subset.json").read_text())


def assert_valid_sarif(document: dict) -> None:
    validator = jsonschema.Draft7Validator(SARIF_SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


# --------------------------------------------------------------------------
# SARIF


def test_sarif_names_rule_file_and_tensor(dspark, tiny_draft):
    draft = tiny_draft(defect="unexpected-tensor")
    run = dspark("check", draft, "--format", "sarif")
    assert run.exit_code == EXIT_CHECK_FAILED
    document = run.json()
    assert_valid_sarif(document)
    (sarif_run,) = document["runs"]
    assert sarif_run["tool"]["driver"]["name"] == "dspark"
    assert sarif_run["invocations"] == [{"executionSuccessful": True, "exitCode": EXIT_CHECK_FAILED}]
    rules = sarif_run["tool"]["driver"]["rules"]
    (result,) = [r for r in sarif_run["results"] if r["ruleId"] == "INV002"]
    rule = rules[result["ruleIndex"]]
    assert rule["id"] == "INV002"
    assert rule["shortDescription"]["text"] == FINDING_CODES["INV002"].title
    assert FINDING_CODES["INV002"].title in rule["help"]["text"]
    assert "helpUri" not in rule  # a path in the repository is no URI: code scanning's link would be dead
    assert EXPLANATIONS["INV002"].action in rule["help"]["text"] and "dspark explain INV002" in rule["help"]["markdown"]
    assert result["level"] == "error" and result["properties"]["fails"] is True
    (location,) = result["locations"]
    assert location["physicalLocation"]["artifactLocation"] == {"uri": "draft/model.safetensors", "uriBaseId": "%SRCROOT%"}
    assert location["logicalLocations"][0]["name"] == "layers.0.self_attn.q_proj.weight"


def test_sarif_of_a_passing_check_is_valid_and_has_no_errors(dspark, tiny_draft):
    run = dspark("check", tiny_draft(), "--format", "sarif")
    assert run.exit_code == EXIT_OK
    document = run.json()
    assert_valid_sarif(document)
    assert {r["level"] for r in document["runs"][0]["results"]} == {"note"}


def test_sarif_outside_the_working_directory_is_an_absolute_file_uri(dspark, tiny_draft, tmp_path, monkeypatch):
    draft = tiny_draft(defect="unexpected-tensor")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    document = dspark("check", draft, "--format", "sarif").json()
    assert_valid_sarif(document)
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in document["runs"][0]["results"] for loc in r["locations"]}
    assert (draft / "model.safetensors").as_uri() in uris


def test_an_error_is_a_sarif_log_of_a_failed_invocation(dspark, tmp_path):
    run = dspark("check", tmp_path / "missing", "--format", "sarif")
    assert run.exit_code == EXIT_USAGE
    document = run.json()
    assert_valid_sarif(document)
    (invocation,) = document["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == EXIT_USAGE
    assert "no such file" in invocation["toolExecutionNotifications"][0]["message"]["text"]


def test_the_sarif_subset_is_not_blind():
    """The schema kept as test data rejects what SARIF 2.1.0 rejects."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]}, SARIF_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": "2.0.0", "runs": []}, SARIF_SCHEMA)
    bad_level = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                                "results": [{"message": {"text": "m"}, "level": "info"}]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_level, SARIF_SCHEMA)


# --------------------------------------------------------------------------
# JUnit


def test_junit_has_one_case_per_rule_group_and_findings_as_failures(dspark, tiny_draft):
    draft = tiny_draft(defect="unexpected-tensor")
    run = dspark("check", draft, "--format", "junit")
    assert run.exit_code == EXIT_CHECK_FAILED
    root = ET.fromstring(run.stdout)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert {"CFG", "FCN", "INV", "STR"} <= set(cases)
    assert "SMK" not in cases  # check does not run the smoke test
    # a header-only check reads no value and no manifest: those rules did not apply
    assert "PAY" not in cases and "MAN" not in cases and "TGT" not in cases
    assert len(cases) == int(suite.get("tests")) == int(root.get("tests"))
    failure = cases["INV"].find("failure")
    assert failure is not None and failure.get("type") == "INV002"
    assert "layers.0.self_attn.q_proj.weight" in failure.text
    assert suite.get("failures") == "1"
    assert all(case.find("failure") is None for name, case in cases.items() if name != "INV")
    assert "PAY005" in suite.find("system-out").text


def test_junit_of_a_passing_check_has_no_failures(dspark, tiny_draft):
    root = ET.fromstring(dspark("check", tiny_draft(), "--format", "junit").stdout)
    assert root.get("failures") == "0" and int(root.get("tests")) > 10


def test_junit_of_an_error_is_one_errored_case(dspark, tmp_path):
    run = dspark("inspect", tmp_path / "missing", "--format", "junit")
    assert run.exit_code == EXIT_USAGE
    root = ET.fromstring(run.stdout)
    (case,) = root.iter("testcase")
    assert case.find("error") is not None and root.get("errors") == "1"


def test_junit_stays_xml_whatever_the_tensor_names(dspark, tiny_draft):
    from safetensors.torch import load_file, save_file

    draft = tiny_draft()
    tensors = load_file(draft / "model.safetensors")
    tensors["model.evil\x1b[2J\x07.weight"] = tensors["model.final_norm.weight"].clone()
    save_file(tensors, str(draft / "model.safetensors"))
    run = dspark("check", draft, "--format", "junit")
    assert run.exit_code == EXIT_CHECK_FAILED
    failure = ET.fromstring(run.stdout).find(".//testcase[@name='STF']/failure")
    assert "evil\\x1b[2J\\x07.weight" in failure.text


# --------------------------------------------------------------------------
# GitHub annotations


def test_github_escaping_follows_the_actions_toolkit():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    # beyond the toolkit: other control characters are written out, not passed to the log viewer
    assert escape_data("x\x1b[2Jy\x07") == "x%1B[2Jy%07"
    assert escape_data("a\\x1b") == "a\\x1b"  # the four characters stay as they are, told apart from ESC


def test_github_annotates_failing_findings_and_warnings(dspark, tiny_draft):
    bad = dspark("check", tiny_draft(name="bad", defect="unexpected-tensor"), "--format", "github")
    assert bad.exit_code == EXIT_CHECK_FAILED
    (error,) = [line for line in bad.stdout.splitlines() if line.startswith("::error")]
    assert error.startswith("::error file=bad/model.safetensors,title=dspark INV002::")
    assert "\n" not in error and "::notice" not in bad.stdout  # notes are no annotations
    assert bad.stdout.splitlines()[-1].startswith("dspark check: FAIL")

    warned = dspark("check", tiny_draft(name="f32", dtype="float32"), "--format", "github")
    assert warned.exit_code == EXIT_OK
    assert any(line.startswith("::warning file=f32,title=dspark INV007::") for line in warned.stdout.splitlines())
    strict = dspark("check", tiny_draft(name="f32b", dtype="float32"), "--format", "github", "--strict")
    assert any(line.startswith("::error file=f32b,title=dspark INV007::") for line in strict.stdout.splitlines())


def test_github_escapes_a_message_that_could_forge_a_command(dspark, tiny_draft):
    from safetensors.torch import load_file, save_file

    draft = tiny_draft(name="dr,aft")
    tensors = load_file(draft / "model.safetensors")
    tensors["model.x\n::error::forged.weight"] = tensors["model.final_norm.weight"].clone()
    save_file(tensors, str(draft / "model.safetensors"))
    run = dspark("check", draft, "--format", "github")
    lines = run.stdout.splitlines()
    assert not any(line.startswith("::error::forged") for line in lines)
    assert any(line.startswith("::error file=dr%2Caft/model.safetensors,") for line in lines)


# --------------------------------------------------------------------------
# --output, --quiet


def test_output_writes_the_machine_report_and_the_terminal_keeps_the_page(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(defect="unexpected-tensor")
    run = dspark("check", draft, "--format", "sarif", "--output", tmp_path / "check.sarif")
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "FAIL  1 error(s)" in run.stdout and not run.stdout.lstrip().startswith("{")
    assert_valid_sarif(json.loads((tmp_path / "check.sarif").read_text()))
    # no --format: the file's suffix names it
    run = dspark("check", draft, "--output", tmp_path / "check.xml", "-q")
    assert ET.parse(tmp_path / "check.xml").getroot().tag == "testsuites"
    assert run.stdout.startswith("FAIL") and len(run.stdout.splitlines()) == 1


def test_output_without_a_format_it_can_tell_is_a_usage_error(dspark, tiny_draft, tmp_path):
    run = dspark("check", tiny_draft(), "--output", tmp_path / "report.txt")
    assert run.exit_code == EXIT_USAGE
    assert "--output" in run.stderr and not (tmp_path / "report.txt").exists()


def test_github_with_output_annotates_the_terminal_and_writes_the_file_by_its_suffix(dspark, tiny_draft, tmp_path):
    run = dspark("check", tiny_draft(defect="unexpected-tensor"), "--format", "github",
                 "--output", tmp_path / "check.sarif")
    assert run.exit_code == EXIT_CHECK_FAILED
    assert any(line.startswith("::error ") and "INV002" in line for line in run.stdout.splitlines())
    assert_valid_sarif(json.loads((tmp_path / "check.sarif").read_text()))
    # an error: annotated, and in the file
    run = dspark("check", tmp_path / "missing", "--format", "github", "--output", tmp_path / "error.json")
    assert run.exit_code == EXIT_USAGE
    assert run.stdout.startswith("::error ")
    assert json.loads((tmp_path / "error.json").read_text())["error"]["type"] == "UsageError"
    # github is no file format: the suffix must name one
    run = dspark("check", tiny_draft(), "--format", "github", "--output", tmp_path / "report.txt")
    assert run.exit_code == EXIT_USAGE and not (tmp_path / "report.txt").exists()
    assert "End the file name in .json, .sarif, .xml" in run.stdout and "name one with --format" not in run.stdout


def test_an_error_goes_to_the_output_file_too(dspark, tmp_path):
    run = dspark("check", tmp_path / "missing", "--output", tmp_path / "report.json")
    assert run.exit_code == EXIT_USAGE
    document = json.loads((tmp_path / "report.json").read_text())
    assert document["error"]["type"] == "UsageError" and document["exit_code"] == EXIT_USAGE


@pytest.mark.parametrize("command", ["check", "inspect", "gate"])
def test_quiet_prints_nothing_on_success_and_the_verdict_on_failure(dspark, tiny_draft, command):
    assert dspark(command, tiny_draft(name="good"), "-q").stdout == ""
    failed = dspark(command, tiny_draft(name="bad", defect="fc-norm-declared-not-shipped"), "--quiet")
    assert failed.exit_code == EXIT_CHECK_FAILED
    (line,) = failed.stdout.splitlines()
    assert line.startswith("FAIL") and "FCN001" in line and "bad" in line


def test_quiet_leaves_machine_reports_whole(dspark, tiny_draft):
    run = dspark("check", tiny_draft(), "-q", "--format", "json")
    assert run.json()["passed"] is True


# --------------------------------------------------------------------------
# colour, paths, completion (real processes: a pipe, the environment)

ANSI = re.compile(r"\x1b\[")


@pytest.mark.parametrize(
    "env, coloured",
    [
        ({"NO_COLOR": "", "FORCE_COLOR": ""}, False),  # a pipe: no colour
        ({"NO_COLOR": "", "FORCE_COLOR": "1"}, True),
        ({"NO_COLOR": "", "FORCE_COLOR": "0"}, False),  # 0 never means on
        ({"NO_COLOR": "1", "FORCE_COLOR": ""}, False),
        ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, True),  # force-color.org: FORCE_COLOR is read last
    ],
    ids=["pipe", "force", "force-0", "no-color", "both"],
)
def test_colour_follows_no_color_and_force_color(dspark_process, tiny_draft, env, coloured):
    run = dspark_process("check", tiny_draft(), env=env)
    assert run.exit_code == EXIT_OK
    assert bool(ANSI.search(run.stdout)) is coloured, run.stdout


def test_a_ci_log_gets_every_path_in_full(dspark_process, tmp_path):
    from dspark.examples.fabricate import write_draft

    deep = tmp_path / ("a_long_folder_name_that_a_ci_runner_might_use_" * 2) / "nested" / "draft"
    write_draft(deep)
    for command in ("inspect", "check"):
        run = dspark_process(command, deep, env={"COLUMNS": "80"})
        assert run.exit_code == EXIT_OK
        assert str(deep) in run.stdout and "…" not in run.stdout, run.stdout


def test_shell_completion_installs_and_answers(dspark_process):
    # typer finds the shell among the process's parents: run dspark under
    # bash (not exec'd by it), whatever started pytest.
    bash = shutil.which("bash") or pytest.skip("needs bash")
    environment = {k: v for k, v in os.environ.items() if k not in ("DSPARK_DEBUG", "FORCE_COLOR")}
    done = subprocess.run(
        [bash, "-c", '"$@"; exit $?', "bash", sys.executable, "-c", "from dspark.cli.main import main; main()",
         "--show-completion"],
        capture_output=True, text=True, timeout=120, env={**environment, "SHELL": bash},
    )
    assert done.returncode == 0 and "_DSPARK_COMPLETE=complete_bash" in done.stdout, done.stderr
    answer = dspark_process(env={"_DSPARK_COMPLETE": "complete_bash", "COMP_WORDS": "dspark ga", "COMP_CWORD": "1"})
    assert answer.exit_code == 0 and answer.stdout.split() == ["gate"]


def test_a_waived_finding_is_a_suppressed_sarif_result_and_a_notice(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(defect="fc-norm-declared-not-shipped")
    (tmp_path / "dspark.toml").write_text('[waive]\nFCN001 = "fc_norm ships in the next export"\n')
    run = dspark("gate", draft, "--format", "sarif")
    assert run.exit_code == EXIT_OK
    document = run.json()
    assert_valid_sarif(document)
    (waived,) = [r for r in document["runs"][0]["results"] if r["ruleId"] == "FCN001"]
    assert waived["suppressions"] == [{"kind": "external", "status": "accepted", "justification": "fc_norm ships in the next export"}]
    notices = [line for line in dspark("gate", draft, "--format", "github").stdout.splitlines() if line.startswith("::notice")]
    assert len(notices) == 1 and "title=dspark FCN001::" in notices[0] and "[waived: fc_norm ships in the next export]" in notices[0]


@pytest.mark.parametrize(("make", "says"), [
    pytest.param(lambda root: (root / "reports.json").mkdir() or root / "reports.json", "is a folder", id="a-folder"),
    pytest.param(lambda root: root / ("r" * 251 + ".json"), "longer than this filesystem allows", id="too-long"),
])
def test_a_report_path_that_cannot_be_written_is_refused_before_any_work(dspark, tiny_draft, tmp_path, make, says):
    draft = tiny_draft()
    report = make(tmp_path)
    run = dspark("convert", draft, tmp_path / "out", "--output", report)
    assert run.exit_code == EXIT_USAGE, run.stderr
    assert "--output" in run.stderr and says in run.stderr and "internal error" not in run.stderr
    assert not (tmp_path / "out").exists()  # refused before converting
    run = dspark("check", draft, "--output", report, "--format", "json")
    assert run.exit_code == EXIT_USAGE and says in run.stderr


def test_a_report_in_a_folder_that_does_not_exist(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    run = dspark("check", draft, "--output", tmp_path / "absent" / "report.json")
    assert run.exit_code == EXIT_USAGE and "does not exist" in run.stderr
    # convert may name one inside the destination it creates
    run = dspark("convert", draft, tmp_path / "out", "--output", tmp_path / "out" / "convert.json", "-q")
    assert run.exit_code == EXIT_OK, run.stderr
    assert json.loads((tmp_path / "out" / "convert.json").read_text())["exit_code"] == EXIT_OK
    # the longest name the filesystem takes is written (its temporary sibling's name is short)
    longest = tmp_path / ("n" * 250 + ".json")
    assert dspark("check", draft, "--output", longest, "-q").exit_code == EXIT_OK and longest.is_file()


def test_sarif_percent_encodes_a_file_name_that_is_not_utf8(dspark, tiny_draft):
    import os

    draft = tiny_draft()
    odd = os.fsdecode(b"x\xff.safetensors")  # held as a surrogate, as Python lists such a name
    (draft / odd).write_bytes((draft / "model.safetensors").read_bytes())
    run = dspark("check", draft, "--format", "sarif")
    assert run.exit_code in (EXIT_OK, EXIT_CHECK_FAILED), run.stderr
    log = json.loads(run.stdout)
    assert_valid_sarif(log)
    uris = {location["physicalLocation"]["artifactLocation"]["uri"]
            for result in log["runs"][0]["results"] for location in result.get("locations", [])}
    assert "draft/x%FF.safetensors" in uris


@pytest.mark.parametrize("named", ["relative", "absolute"])
def test_check_and_convert_name_a_refused_tensors_file_the_same_way(dspark, tiny_draft, tmp_path, named):
    """A CI log links a finding to the file it names: `convert` must name
    the input file as `check` does (from the working directory), not bare
    `model.safetensors` at the repository root."""
    draft = tiny_draft("drafts/nan", defect="nan")
    given = draft if named == "absolute" else draft.relative_to(tmp_path)
    check = dspark("check", given, "--deep", "--format", "github")
    convert = dspark("convert", given, tmp_path / "out", "--format", "github")
    assert check.exit_code == convert.exit_code == 1

    def files(stdout):
        return {part.split("=", 1)[1] for line in stdout.splitlines() if line.startswith("::error")
                for part in line.split("::")[1].split(" ", 1)[1].split(",") if part.startswith("file=")}

    assert files(check.stdout) == files(convert.stdout) == {"drafts/nan/model.safetensors"}
    sarif = dspark("convert", given, tmp_path / "out", "--format", "sarif").json()
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for result in sarif["runs"][0]["results"] for loc in result.get("locations", [])}
    assert uris == {"drafts/nan/model.safetensors"}
