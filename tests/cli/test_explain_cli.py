"""`dspark explain`: a finding code's meaning, what to do, and its rule's source."""

from __future__ import annotations

import re

from dspark.schema.findings import FINDING_CODES


def test_explain_names_title_severity_why_action_and_the_engine_source(dspark):
    run = dspark("explain", "IDX002")
    assert run.exit_code == 0
    assert run.stdout.startswith("IDX002 (error): shard named in the index is missing\n")
    assert "why:" in run.stdout and "what to do:" in run.stdout
    # the rule is tied to the engine's weight loader, cited path@commit:lines
    assert "python/tokenspeed/runtime/model_loader/weight_utils.py::filter_duplicate_safetensors_files" in run.stdout.replace("\n      @", "@")
    assert "documented in docs/codes.md#IDX002" in run.stdout
    # TokenSpeed loads the shards present, so the engine lowers it
    assert "severity on tokenspeed@0.1.1: warning" in run.stdout


def test_explain_takes_a_code_in_any_case_and_gives_json(dspark):
    run = dspark("explain", "eng001", "--format", "json")
    assert run.exit_code == 0
    entry = run.json()
    assert entry["code"] == "ENG001" and entry["severity"] == "error"
    assert entry["why"] and entry["action"] and entry["documentation"] == "docs/codes.md#ENG001"
    # a git engine cites a commit (TokenSpeed), a released one its version (sglang==0.5.23)
    cite = re.compile(r"^\S+@([0-9a-f]{8}|[a-z]+==[0-9][0-9.]*):")
    assert entry["sources"] and all(cite.match(s["source"]) for s in entry["sources"])
    families = {s["family"] for s in entry["sources"]}
    assert {"k3_dspark", "dflash_gqa"} <= families


def test_a_code_that_is_dsparks_own_check_says_so(dspark):
    run = dspark("explain", "PAY001")
    assert run.exit_code == 0 and "dspark's own check" in run.stdout


def test_explain_without_a_code_lists_every_code(dspark):
    run = dspark("explain")
    assert run.exit_code == 0
    listed = [line.split()[0] for line in run.stdout.splitlines() if line[:1].isupper()]
    assert listed == list(FINDING_CODES)
    as_data = dspark("explain", "--format", "json").json()
    assert [e["code"] for e in as_data] == list(FINDING_CODES)


def test_an_unknown_code_exits_2_with_did_you_mean(dspark):
    run = dspark("explain", "INV03")
    assert run.exit_code == 2
    assert "'INV03' is not a dspark finding code. Did you mean INV003" in run.stderr
    assert run.stdout == ""


def test_an_unknown_code_under_json_is_one_error_document(dspark):
    run = dspark("explain", "XYZ999", "--format", "json")
    assert run.exit_code == 2
    document = run.json()
    assert document["exit_code"] == 2 and "not a dspark finding code" in document["error"]["message"]


def test_a_source_in_json_names_repository_path_lines_and_commit(dspark):
    (source,) = [s for s in dspark("explain", "CTX001", "--format", "json").json()["sources"]
                 if s["family"] == "k3_dspark" or s["family"] == "dflash_gqa"][:1]
    assert source["repository"] == "lightseekorg/tokenspeed"
    assert source["path"].startswith("python/tokenspeed/") and source["lines"] and len(source["commit"]) >= 8
