"""`dspark check` from the command line: exit codes, the JSON report, error
output, escaping, and a header-only run that never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from safetensors.numpy import save_file

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from dspark.schema.rules import STREAM_ENV_VAR

# --------------------------------------------------------------------------
# Exit codes


def test_a_good_draft_passes(dspark, tiny_draft):
    run = dspark("check", tiny_draft())
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    assert "PASS  0 error(s), 0 warning(s), 5 note(s)" in run.stdout
    assert "STR002" in run.stdout and "INV005" in run.stdout
    # a header-only PASS says, in one line, that no value was read and how to read them
    [line] = [line for line in run.stdout.splitlines() if "PAY005" in line]
    assert line.startswith("info    PAY005 payloads not read: header-only check") and "--deep" in line
    assert run.stderr == ""


def test_a_deep_pass_has_no_not_read_note(dspark, tiny_draft):
    run = dspark("check", tiny_draft(), "--deep", "--strict", "--format", "json")
    assert run.exit_code == EXIT_OK
    assert run.json()["payloads_read"] is True
    assert "PAY005" not in {f["code"] for f in run.json()["findings"]}


@pytest.mark.parametrize("defect", ["fc-norm-declared-not-shipped", "missing-layer", "no-config", "config-not-object"])
def test_an_error_finding_exits_1(dspark, tiny_draft, defect):
    run = dspark("check", tiny_draft(defect=defect))
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "FAIL" in run.stdout
    assert "Traceback" not in run.stdout + run.stderr


def test_a_corrupt_weight_file_exits_1(dspark, tiny_draft):
    draft = tiny_draft()
    path = draft / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-3])
    run = dspark("check", draft)
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "STF001" in run.stdout and "payload" in run.stdout


def test_deep_finds_what_headers_cannot(dspark, tiny_draft):
    draft = tiny_draft(defect="nan")
    assert dspark("check", draft).exit_code == EXIT_OK
    run = dspark("check", draft, "--deep")
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "PAY001" in run.stdout and "payload scanned" in run.stdout


def test_strict_makes_warnings_fail(dspark, tiny_draft):
    draft = tiny_draft(stream="attn_res")  # STR005: not verified against a target
    run = dspark("check", draft)
    assert run.exit_code == EXIT_OK and "STR005" in run.stdout
    run = dspark("check", draft, "--strict")
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "(--strict: warnings fail)" in run.stdout


def test_the_ignored_stream_variable_is_a_warning(dspark, tiny_draft):
    draft = tiny_draft()
    run = dspark("check", draft, "--strict", env={STREAM_ENV_VAR: "attn_res"})
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "STR004" in run.stdout and "does not read it" in run.stdout
    run = dspark("check", draft, env={STREAM_ENV_VAR: "sideways"})
    assert run.exit_code == 0 and "STR004" in run.stdout


def test_target_is_checked(dspark, tiny_draft, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 7168, "num_hidden_layers": 12, "vocab_size": 96}))
    run = dspark("check", tiny_draft(), "--target", target)
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "TGT002" in run.stdout and str(target / "config.json") in run.stdout


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["check", "no/such/draft"], id="no-such-path"),
        pytest.param(["check", "."], id="not-a-checkpoint-folder"),
        pytest.param(["check", "{draft}", "--bogus"], id="unknown-flag"),
        pytest.param(["check", "{draft}", "--format", "xml"], id="bad-format"),
        pytest.param(["check"], id="missing-argument"),
        pytest.param(["check", "{draft}", "--target", "no/such/target"], id="no-such-target"),
        pytest.param(["check", "{draft}", "--target", "."], id="target-without-config"),
        pytest.param(["check", "{draft}", "--target", "{draft}/model.safetensors"], id="target-not-json"),
        pytest.param(["check", "{draft}", "--config", "nope.json"], id="no-such-config"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(dspark, tiny_draft, args):
    draft = tiny_draft()
    run = dspark(*[a.format(draft=draft) for a in args])
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert run.stderr.strip()


def test_a_usage_error_message_names_the_path(dspark):
    run = dspark("check", "no/such/draft")
    assert run.stderr.splitlines() == [
        "error: no/such/draft: no such file or folder.",
        "hint: Check the checkpoint path.",
    ]



@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("command", ["check", "inspect", "convert"])
def test_a_path_that_is_neither_file_nor_folder_is_a_usage_error(dspark, tmp_path, command):
    pipe = tmp_path / "draft.safetensors"
    os.mkfifo(pipe)
    args = [command, pipe] + ([tmp_path / "out"] if command == "convert" else [])
    run = dspark(*args)
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert "neither a file nor a folder" in run.stderr
    assert "internal error" not in run.stderr


# --------------------------------------------------------------------------
# JSON


def test_json_is_the_same_report_as_data(dspark, tiny_draft):
    draft = tiny_draft(defect="fc-norm-count")
    run = dspark("check", draft, "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    report = run.json()
    assert report["passed"] is False and report["strict"] is False
    assert report["checkpoint"] == str(draft)
    assert report["family"] == "k3_dspark" and report["tensor_count"] == 36
    assert report["counts"] == {"error": 1, "warning": 0, "info": 5}
    assert report["payloads_read"] is False
    assert {"code": "PAY005", "severity": "info"}.items() <= next(
        f for f in report["findings"] if f["code"] == "PAY005").items()
    [error] = [f for f in report["findings"] if f["severity"] == "error"]
    assert error["code"] == "FCN003" and error["tensor"] == "fc_norm.4.weight"
    assert error["detail"] == {"missing": [4], "taps": 5}
    assert report["resolved"]["fc_norm_shipped"] == 4
    assert run.stderr == ""


@pytest.mark.parametrize(
    ("options", "exit_code", "passed"),
    [
        pytest.param([], EXIT_OK, True, id="warning"),
        pytest.param(["--strict"], EXIT_CHECK_FAILED, False, id="warning-strict"),
    ],
)
def test_json_exit_code_matches_the_human_one(dspark, tiny_draft, options, exit_code, passed):
    draft = tiny_draft(defect="fc-norm-identity")
    human = dspark("check", draft, "--deep", *options)
    data = dspark("check", draft, "--deep", "--format", "json", *options)
    assert human.exit_code == data.exit_code == exit_code
    assert data.json()["passed"] is passed
    assert data.json()["deep"] is True and data.json()["scanned_bytes"] == data.json()["total_bytes"]
    assert [f["code"] for f in data.json()["findings"] if f["severity"] == "warning"] == ["FCN006"]


def test_json_usage_error_is_a_json_document(dspark):
    run = dspark("check", "missing", "--format", "json")
    assert run.exit_code == EXIT_USAGE
    document = run.json()
    assert document["exit_code"] == EXIT_USAGE
    assert document["error"]["type"] == "UsageError"
    assert document["error"]["message"] == "missing: no such file or folder."


def test_the_human_output_format_is_reset_between_runs(dspark, tiny_draft):
    dspark("check", tiny_draft(), "--format", "json")
    run = dspark("check", "missing")
    assert run.stdout == "" and run.stderr.startswith("error:")


# --------------------------------------------------------------------------
# Internal errors


def _explode(*args, **kwargs):
    raise ZeroDivisionError("a bug")


def test_an_internal_error_exits_3_without_a_traceback(dspark, tiny_draft, monkeypatch):
    monkeypatch.setattr("dspark.cli.check.check_checkpoint", _explode)
    run = dspark("check", tiny_draft())
    assert run.exit_code == EXIT_INTERNAL
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines() == [
        "error: internal error: ZeroDivisionError: a bug",
        "hint: This is a bug in dspark. Re-run with DSPARK_DEBUG=1 and report the traceback.",
    ]


def test_dspark_debug_shows_the_traceback(dspark, tiny_draft, monkeypatch):
    monkeypatch.setattr("dspark.cli.check.check_checkpoint", _explode)
    run = dspark("check", tiny_draft(), env={"DSPARK_DEBUG": "1"})
    assert run.exit_code == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in run.stderr and "_explode" in run.stderr


def test_internal_error_in_json(dspark, tiny_draft, monkeypatch):
    monkeypatch.setattr("dspark.cli.check.check_checkpoint", _explode)
    run = dspark("check", tiny_draft(), "--format", "json")
    assert run.exit_code == EXIT_INTERNAL
    assert run.json()["error"]["type"] == "ZeroDivisionError"


# --------------------------------------------------------------------------
# Names that could drive a terminal are escaped


def test_control_characters_in_names_are_escaped(dspark_process, tiny_draft, tmp_path):
    draft = tiny_draft("draft\x1b[31mred")
    # A tensor name that is not a control character but still not printable
    # (a right-to-left override) passes the header check and is reported.
    from safetensors.torch import load_file, save_file as save_torch

    tensors = load_file(draft / "model.safetensors")
    tensors["model.evil\u202e.weight"] = tensors["model.final_norm.weight"].clone()
    save_torch(tensors, str(draft / "model.safetensors"))
    # And a second file whose tensor name holds a real escape sequence.
    save_file({"x\x1b]0;pwned\x07": np.zeros(2, np.float32)}, str(draft / "extra\x1b[2J.safetensors"))
    for command in ("check", "inspect"):
        run = dspark_process(command, draft)
        output = run.stdout + run.stderr
        assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output, command
        assert "draft\\x1b[31mred" in output, command
    run = dspark_process("check", draft)
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "evil\\u202e.weight" in run.stdout  # INV002
    assert "STF001" in run.stdout and "extra\\x1b[2J.safetensors" in run.stdout
    missing = dspark_process("check", tmp_path / "gone\x1bx")
    assert missing.exit_code == EXIT_USAGE and "\x1b" not in missing.stderr
    assert "gone\\x1bx" in missing.stderr


# --------------------------------------------------------------------------
# Header-only check never imports torch


IMPORT_PROBE = textwrap.dedent(
    """
    import json, sys
    from dspark.cli.main import main
    sys.argv = ["dspark", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exit:
        code = exit.code
    heavy = sorted(m for m in ("torch", "triton") if m in sys.modules)
    sys.stderr.write(json.dumps({"exit": code, "heavy": heavy}) + "\\n")
    """
)


@pytest.mark.parametrize("options", [[], ["--deep"], ["--format", "json"]], ids=["header-only", "deep", "json"])
def test_check_never_imports_torch(tiny_draft, options):
    draft = tiny_draft()
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, "check", str(draft), *options],
        capture_output=True, text=True, timeout=120,
    )
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result == {"exit": 0, "heavy": []}, done.stdout + done.stderr


def test_inspect_never_imports_torch(tiny_draft):
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, "inspect", str(tiny_draft())],
        capture_output=True, text=True, timeout=120,
    )
    assert json.loads(done.stderr.strip().splitlines()[-1])["heavy"] == []


def test_the_import_probe_would_see_torch(tiny_draft):
    """The probe is not blind: importing torch first is reported."""
    done = subprocess.run(
        [sys.executable, "-c", "import torch\n" + IMPORT_PROBE, "check", str(tiny_draft())],
        capture_output=True, text=True, timeout=120,
    )
    assert json.loads(done.stderr.strip().splitlines()[-1])["heavy"] == ["torch"]


def test_names_print_as_named_not_as_emoji(dspark, tiny_draft):
    from safetensors.torch import load_file, save_file as save_torch

    draft = tiny_draft()
    tensors = load_file(draft / "model.safetensors")
    tensors["model.head:fire:[bold]x[/].weight"] = tensors["model.final_norm.weight"].clone()
    save_torch(tensors, str(draft / "model.safetensors"))
    run = dspark("check", draft)
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "head:fire:[bold]x[/].weight" in run.stdout
    assert "\N{FIRE}" not in run.stdout


def test_usage_errors_escape_control_characters_in_paths(dspark_process, tmp_path):
    hostile = tmp_path / "x\x1b[2Jy"
    hostile.mkdir()
    run = dspark_process("check", hostile)
    assert run.exit_code == 2
    assert "\x1b" not in run.stderr and "x\\x1b[2Jy" in run.stderr


@pytest.mark.parametrize("args", [
    ["check", ""], ["inspect", ""], ["gate", ""], ["smoke", ""], ["convert", "", "out"], ["convert", ".", ""],
    ["check", ".", "--target", ""], ["check", ".", "--config", ""], ["gate", ".", "--policy", ""],
    ["smoke", ".", "--taps", ""], ["check", ".", "--output", ""], ["convert", ".", "out", "--output", ""],
], ids=lambda args: " ".join(repr(a) if not a else a for a in args))
def test_an_empty_path_is_a_usage_error_not_the_working_directory(dspark, tiny_draft, monkeypatch, args):
    # the working directory is a good draft: an empty path must not judge it
    monkeypatch.chdir(tiny_draft())
    run = dspark(*args)
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert "empty path" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("architectures", [None, [], "absent"], ids=["null", "empty", "absent"])
def test_a_k3_config_without_architectures_is_served_as_the_engine_fills_it(dspark, tiny_draft, architectures):
    # configs/kimi_k3_dspark_config.py:121-126@4b9766f6 fills ["K3DSparkModel"] when absent, [] or null
    draft = tiny_draft()
    config = json.loads((draft / "config.json").read_text())
    config.pop("architectures", None)
    if architectures != "absent":
        config["architectures"] = architectures
    (draft / "config.json").write_text(json.dumps(config))
    run = dspark("check", draft, "--strict")
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr


def test_another_family_without_architectures_is_told_to_name_its_class(dspark, tmp_path):
    pytest.importorskip("torch")
    draft = tmp_path / "gqa"
    subprocess.run([sys.executable, "-m", "dspark.examples.fabricate", str(draft), "--family", "dflash_gqa"],
                   check=True, capture_output=True)
    assert dspark("check", draft).exit_code == EXIT_OK
    config = json.loads((draft / "config.json").read_text())
    config["architectures"] = []
    (draft / "config.json").write_text(json.dumps(config))
    run = dspark("check", draft)
    assert run.exit_code == EXIT_CHECK_FAILED and "ENG007" in run.stdout
    assert '"architectures": ["DFlashDraftModel"]' in " ".join(run.stdout.split())


def test_a_folder_of_drafts_names_the_drafts_below_it(dspark, tiny_draft, tmp_path):
    tiny_draft("runs/a")
    tiny_draft("runs/team/b")
    tiny_draft("runs/x/y/too-deep")
    run = dspark("check", tmp_path / "runs")
    assert run.exit_code == EXIT_USAGE
    assert f"Checkpoints below it: {tmp_path / 'runs' / 'a'}, {tmp_path / 'runs' / 'team' / 'b'}." in run.stderr
    assert "too-deep" not in run.stderr and "Pass one of the checkpoint folders below it" in run.stderr


def test_the_search_below_is_bounded(tmp_path, monkeypatch):
    from dspark.converters import readers

    for index in range(5):
        (tmp_path / f"empty{index}").mkdir()
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / "model.safetensors").write_bytes(b"")
    assert readers.checkpoints_below(tmp_path) == [tmp_path / "zz"]
    monkeypatch.setattr(readers, "FOLDERS_LOOKED_AT", 5)
    assert readers.checkpoints_below(tmp_path) == []  # the five empty folders use up the search


def test_several_engines_print_one_verdict_row_each(dspark, tiny_draft):
    run = dspark("check", tiny_draft(), "--engine", "tokenspeed,tokenspeed@main")
    assert run.exit_code == EXIT_CHECK_FAILED
    rows = [line.split() for line in run.stdout.splitlines() if line.strip().startswith("tokenspeed@")]
    assert [row[:2] for row in rows] == [["tokenspeed@0.1.1", "PASS"], ["tokenspeed@main", "REFUSED"]]
    assert rows[1][4] == "ENG001"  # the finding that decides it


def test_an_unknown_engine_is_exit_2_naming_the_choices(dspark, tiny_draft):
    run = dspark("check", tiny_draft(), "--engine", "tokenspeed,trt-llm")
    assert run.exit_code == EXIT_USAGE and "tokenspeed" in run.stderr and "all" in run.stderr
    run = dspark("check", tiny_draft(), "--engine", "tokenspeed@v9")
    assert run.exit_code == EXIT_USAGE and "tokenspeed@pr1031" in run.stderr
