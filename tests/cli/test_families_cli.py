"""`dspark families`: the contract with the engine code behind each rule."""

from __future__ import annotations

import json
import re


def test_families_cites_a_file_and_commit_for_every_rule(dspark):
    run = dspark("families", "--format", "json")
    assert run.exit_code == 0
    rows = json.loads(run.stdout)
    assert {(r["family"], r["engine"]) for r in rows} >= {
        ("k3_dspark", "tokenspeed@current"), ("k3_dspark", "tokenspeed@main"), ("dflash_gqa", "tokenspeed@current")}
    cite = re.compile(r"^\S+@\S+:")
    for row in [r for r in rows if r["served"]]:
        citations = [f["source"] for f in row["features"].values()] + list(row["sources"].values())
        citations += [s["source"] for s in row["skipped"]] + [f["source"] for f in row["fused"]]
        assert citations and all(cite.match(c) for c in citations), row["family"]
    gqa = next(r for r in rows if r["family"] == "dflash_gqa" and r["engine"].startswith("tokenspeed"))
    assert gqa["features"]["fc_norm"]["honoured"] is False
    assert gqa["unexpected_tensor"] == "drops" and gqa["missing_tensor"] == "uninitialised"


def test_families_reads_as_a_page(dspark):
    run = dspark("families")
    assert run.exit_code == 0
    assert "fc_norm: NOT honoured" in run.stdout and "k3_dspark on tokenspeed@pr1031" in run.stdout


def test_families_fits_an_80_column_terminal(dspark_tty):
    run = dspark_tty("families", columns=80)
    assert run.exit_code == 0
    lines = run.stdout.splitlines()
    assert "fc_norm: NOT honoured" in run.stdout and len(lines) > 100
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    # a citation is never broken inside its path
    cited = [f"{a.strip()}{b.strip()}" for a, b in zip(lines, lines[1:]) if a.startswith("    python/")]
    assert "python/tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.load_weights@4b9766f6:482-553" in cited


def test_families_off_a_terminal_keeps_within_100_columns(dspark_process):
    run = dspark_process("families", env={"COLUMNS": ""})
    assert run.exit_code == 0
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_families_filtered_by_family_and_engine(dspark):
    run = dspark("families", "--family", "eagle3_mla,k3_dspark", "--engine", "tokenspeed@main", "--format", "json")
    assert run.exit_code == 0
    assert [(r["family"], r["engine"]) for r in json.loads(run.stdout)] == [
        ("eagle3_mla", "tokenspeed@main"), ("k3_dspark", "tokenspeed@main")]  # in the order asked
    every_revision = json.loads(dspark("families", "--family", "k3_dspark", "--engine", "tokenspeed",
                                       "--format", "json").stdout)
    assert [r["engine"] for r in every_revision] == [
        "tokenspeed@0.1.1", "tokenspeed@0.1.0", "tokenspeed@current", "tokenspeed@pr1031", "tokenspeed@pr1016",
        "tokenspeed@main"]
    [row] = json.loads(dspark("families", "--family", "eagle3_llama", "--engine", "tokenspeed@current",
                              "--format", "json").stdout)
    assert row["tap_ids"]["numbering"] == "layer_output" and row["tap_ids"]["read_from"][0].startswith("eagle_config.")
    # what TokenSpeed builds from what the trainer wrote, and its token maps
    assert row["builds"]["th"] == "hidden_size" and row["tap_width_field"] == "hidden_size"
    assert row["token_maps"]["d2t"] == "hot_token_map" and "Qwen3ForCausalLM" in row["targets_without_capture"]


def test_an_unknown_family_or_engine_is_a_usage_error_naming_the_choices(dspark):
    run = dspark("families", "--family", "eagle4")
    assert run.exit_code == 2 and "k3_dspark" in run.stderr
    run = dspark("families", "--engine", "trt-llm")
    assert run.exit_code == 2 and "tokenspeed" in run.stderr


def test_families_on_sglang_say_the_target_picks_the_gqa_stream_and_k3_is_not_served(dspark):
    run = dspark("families", "--engine", "sglang")
    assert run.exit_code == 0
    assert "k3_dspark on sglang@0.5.23: NOT served" in run.stdout
    assert "aux_hidden_stream: the target's (AttnRes on a Kimi-K3 target" in run.stdout


def test_a_name_skipped_unless_a_flag_says_when_it_is_loaded(dspark):
    # vLLM's K3 DSpark loader keeps confidence_head when enable_confidence_head (dspark_mla.py@vllm==0.33.0:459-464)
    run = dspark("families", "--family", "k3_dspark", "--engine", "vllm@0.33.0")
    assert "skipped: /confidence_head/ (loaded when enable_confidence_head)" in run.stdout
    [row] = json.loads(dspark("families", "--family", "k3_dspark", "--engine", "vllm@0.33.0", "--format",
                              "json").stdout)
    assert {"pattern": "confidence_head", "unless": "enable_confidence_head"}.items() <= row["skipped"][1].items()


def test_families_lists_the_launch_flags_each_release_reads(dspark):
    """A malformed --launch points the user here for the flags each engine's
    verdicts read: every launch model's flags are listed, with what each changes."""
    from dspark.schema.engines import engine_by_spec

    [row] = json.loads(dspark("families", "--family", "k3_dspark", "--engine", "tokenspeed@0.1.1",
                              "--format", "json").stdout)
    model = engine_by_spec("tokenspeed@0.1.1").launch_model
    assert [flag["flag"] for flag in row["launch"]["flags"]] == [spec.name for spec in model.flags]
    assert "--speculative-num-steps" in [flag["flag"] for flag in row["launch"]["flags"]]
    assert all(flag["changes"] for flag in row["launch"]["flags"])
    page = dspark("families", "--family", "k3_dspark", "--engine", "tokenspeed@0.1.1,tokenspeed@main").stdout
    assert "--launch flags read on tokenspeed@0.1.1" in page and "--speculative-num-steps:" in page
    # a revision whose verdicts read no flag says so
    assert "--launch: no flag read on tokenspeed@main" in page


def test_the_family_option_names_every_modelled_family(dspark):
    from dspark.schema.families import REGISTRY

    run = dspark("families", "--help", env={"COLUMNS": "400"})
    named = " ".join(run.stdout.split())
    missing = [entry.name for entry in REGISTRY if entry.name not in named]
    assert run.exit_code == 0 and not missing, missing
