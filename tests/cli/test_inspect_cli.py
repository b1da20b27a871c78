"""`dspark inspect`: the page a person reads before deploying a draft."""

from __future__ import annotations

import json
import shlex

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE

SHARDED_PAGE = """\
       checkpoint  draft
           engine  tokenspeed@0.1.1 (dspark's default)
           format  safetensors-sharded
           family  k3_dspark
     draft layers  2
             taps  5 [1, 4, 7, 9, 11]
          fc_norm  on (5 weights shipped)
aux_hidden_stream  prefix (config.json: aux_hidden_stream)
          tensors  37 (52.99 KiB)
bytes by dtype
 dtype ┃     bytes
━━━━━━━╇━━━━━━━━━━━
 BF16  │ 52.99 KiB
files
 file                             ┃ tensors ┃     bytes
━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━
 model-00001-of-00002.safetensors │      19 │ 23.22 KiB
 model-00002-of-00002.safetensors │      18 │ 29.77 KiB
skipped by the serving loader
 tensor                      ┃ dtype ┃    bytes
━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━
 confidence_head.proj.bias   │ BF16  │      2 B
 confidence_head.proj.weight │ BF16  │     64 B
 embed_tokens.weight         │ BF16  │ 6.00 KiB

no errors or warnings (dspark check gives the full report)
"""


def page(run) -> str:
    return "".join(line.rstrip() + "\n" for line in run.stdout.splitlines())


def test_the_page_of_a_sharded_draft(dspark_process, tiny_draft, tmp_path):
    tiny_draft(shards=2)
    run = dspark_process("inspect", "draft", cwd=tmp_path)
    assert run.exit_code == EXIT_OK, run.stderr
    assert page(run) == SHARDED_PAGE
    assert run.stderr == ""


def test_a_family_the_engine_does_not_load_says_so_instead_of_question_marks(dspark, tmp_path):
    # TokenSpeed has no P-EAGLE loader (ENG006): it reads none of the config,
    # so the page must not suggest the layer count or taps are merely unknown.
    from dspark.examples.fabricate import main as fabricate

    fabricate([str(tmp_path / "draft"), "--family", "peagle_llama", "--engine", "vllm"])
    run = dspark("inspect", str(tmp_path / "draft"), "--engine", "tokenspeed")
    assert run.exit_code == EXIT_CHECK_FAILED
    lines = page(run).splitlines()
    assert lines[1] == "      engine  tokenspeed@0.1.1 (--engine)"
    assert lines[4:6] == ["draft layers  ? (this engine does not load the family: ENG006)",
                          "        taps  ? (this engine does not load the family: ENG006)"]
    vllm = page(dspark("inspect", str(tmp_path / "draft"), "--engine", "vllm")).splitlines()
    assert vllm[4].split() == ["draft", "layers", "1"]


def test_the_page_of_a_float32_draft_without_fc_norm(dspark, tiny_draft):
    tiny_draft(fc_norm=False, stream=None, dtype="float32", skipped=False)
    run = dspark("inspect", "draft")
    assert run.exit_code == EXIT_OK
    lines = page(run).splitlines()
    assert lines[6:9] == [
        "          fc_norm  off (0 weights shipped)",
        "aux_hidden_stream  prefix (default (not declared))",
        "          tensors  29 (93.06 KiB)",
    ]
    assert " F32   │ 93.06 KiB" in lines
    assert "skipped by the serving loader" not in lines
    # a warning (all float32) is pointed at, not listed
    # (LCH003: no embed_tokens, which TokenSpeed 0.1.1 loads at --pipeline-parallel-size > 1)
    assert lines[-1] == "2 warning(s) (INV007, LCH003): run dspark check draft for the findings."


def test_inspect_reads_a_broken_draft_and_points_to_check(dspark, tiny_draft):
    tiny_draft(defect="fc-norm-shipped-declared-false")
    run = dspark("inspect", "draft")
    # the page is printed in full, and the exit code is check's verdict
    assert run.exit_code == EXIT_CHECK_FAILED
    text = page(run)
    assert "          fc_norm  off (5 weights shipped)" in text
    # the failing codes are named on the page itself
    assert text.endswith("FAIL 1 error(s) (FCN002): run dspark check draft for the findings.\n")


def test_the_pointer_to_check_carries_the_engine_and_config_inspect_was_given(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(defect="fc-norm-shipped-declared-false")
    config = tmp_path / "my config.json"
    config.write_text((draft / "config.json").read_text())
    run = dspark("inspect", "draft", "--engine", "tokenspeed@main", "--config", str(config))
    assert run.exit_code == EXIT_CHECK_FAILED
    command = page(run).rstrip("\n").rsplit(": run ", 1)[1].removesuffix(" for the findings.")
    assert command == f"dspark check draft --engine tokenspeed@main --config '{config}'"
    # the command it names gives the same verdict, from the same folder
    assert dspark(*shlex.split(command)[1:]).exit_code == EXIT_CHECK_FAILED


def test_inspect_json_is_the_check_report(dspark, tiny_draft):
    draft = tiny_draft()
    inspected = dspark("inspect", draft, "--format", "json")
    checked = dspark("check", draft, "--format", "json")
    assert inspected.exit_code == checked.exit_code == EXIT_OK
    # the same report; only the envelope's `command` names which command wrote it
    assert {**inspected.json(), "command": "check"} == checked.json()
    assert json.loads(inspected.stdout)["files"] == [{"name": "model.safetensors", "tensors": 37, "nbytes": 54258}]


def test_inspect_of_a_missing_path_is_a_usage_error(dspark):
    run = dspark("inspect", "nowhere")
    assert run.exit_code == EXIT_USAGE
    assert run.stderr.startswith("error: nowhere: no such file or folder.")


def test_inspect_help_is_the_docstring(dspark):
    run = dspark("inspect", "--help")
    assert run.exit_code == EXIT_OK
    help_text = " ".join(run.stdout.split())
    assert "Show what a checkpoint holds: family, taps, fc_norm, stream, tensors, shards." in help_text


def test_an_eagle3_draft_without_a_tap_list_shows_the_targets_defaults(dspark, tmp_path):
    # EAGLE-3 targets capture three default layers when no list is read
    # (models/base/causal_lm.py@f4d8ec6e:137-140).
    from dspark.examples.fabricate import write_eagle3_draft

    def no_list(config):
        config.pop("eagle_aux_hidden_state_layer_ids", None)

    write_eagle3_draft(tmp_path / "d", config_edit=no_list)
    run = dspark("inspect", str(tmp_path / "d"))
    assert "             taps  3 [the target's default layers]" in page(run).splitlines()
    write_eagle3_draft(tmp_path / "l", tap_ids=[1, 4, 7])
    assert "             taps  3 [1, 4, 7]" in page(dspark("inspect", str(tmp_path / "l"))).splitlines()
