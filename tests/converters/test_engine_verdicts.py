"""One draft judged by several engines at once: one verdict per engine
(pass / refused at load / served wrong, and why), the run failing when any
engine fails, and one finding saying which engine captures which layers
when they differ. The engines here are TokenSpeed's revisions and, for the
tap readings, a profile written inside the test."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors
from dspark.schema.engines import default_engine
from dspark.schema.engines.base import FIRST_TRUTHY, HIDDEN_STATES, Source, TapNumbering, TapPaths

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-k3-dspark"
TAP_IDS = "eagle_aux_hidden_state_layer_ids"


def write_k3(folder: Path, *, fc_norm: bool, edit=None) -> Path:
    config = draft_config(SCALES["tiny"], fc_norm=fc_norm)
    if edit:
        edit(config)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder, make_tensors(tensor_shapes(SCALES["tiny"], fc_norm=fc_norm), dtype="bfloat16", seed=0))
    return folder


def test_one_verdict_per_engine_and_any_failure_fails(tmp_path):
    # main's K3 model has no fc_norm modules: the shipped fc_norm weights have
    # no destination and its loader rejects them (refused at load).
    draft = shutil.copytree(EXAMPLE, tmp_path / "d")
    report = check_checkpoint(draft, engine="tokenspeed,tokenspeed@main")
    rows = report.engine_verdicts()
    assert [(r["engine"], r["outcome"]) for r in rows] == [
        ("tokenspeed@0.1.1", "pass"), ("tokenspeed@main", "refused")]
    assert rows[1]["why"][0]["code"] == "ENG001"
    assert not report.passed()
    assert check_checkpoint(draft, engine="tokenspeed").passed()
    # the finding only main gives is named with it
    [eng] = [f for f in report.findings if f.code == "ENG001"]
    assert eng.message.startswith("[tokenspeed@main] ") and eng.detail["engines"] == ["tokenspeed@main"]
    document = report.to_dict()
    assert document["engines"] == ["tokenspeed@0.1.1", "tokenspeed@main"]
    assert document["engine"] == "tokenspeed@0.1.1,tokenspeed@main"


def test_an_ignored_declaration_is_served_wrong(tmp_path):
    # main captures the prefix stream whatever the draft declares: it loads.
    draft = write_k3(tmp_path / "d", fc_norm=False, edit=lambda c: c.update(aux_hidden_stream="attn_res"))
    rows = check_checkpoint(draft, engine=["tokenspeed@pr1031", "tokenspeed@main"]).engine_verdicts()
    main = rows[1]
    assert main["outcome"] == "served_wrong" and main["outcome_text"] == "served wrong", rows


def test_a_single_engine_report_keeps_its_shape_and_gains_one_verdict(tmp_path):
    document = check_checkpoint(EXAMPLE).to_dict()
    assert document["engine"] == "tokenspeed@0.1.1" and document["engines"] == ["tokenspeed@0.1.1"]
    assert [row["outcome"] for row in document["engine_verdicts"]] == ["pass"]


def _reading_hidden_states_from(path: str):
    """A fake engine: TokenSpeed's EAGLE-3 Llama loader, but reading only
    `path`, raw, as hidden_states[k] (what a speculators-style runner does)."""
    base = default_engine()
    loader = base.loader_for("eagle3_llama")
    taps = dataclasses.replace(
        loader.taps, target=TapPaths((path,), pick=FIRST_TRUTHY), draft=None,
        numbering=TapNumbering(HIDDEN_STATES, "id k is hidden_states[k]", Source("fake.py", "1", "v1")))
    loaders = {**base.loaders, "eagle3_llama": dataclasses.replace(loader, taps=taps)}
    return dataclasses.replace(base, name="fake", revision="1", loaders=loaders)


def test_engines_that_capture_different_layers_are_named_with_what_each_reads(tmp_path):
    pytest.importorskip("torch")
    from dspark.examples.fabricate import write_eagle3_draft

    draft = write_eagle3_draft(tmp_path / "d", tap_ids=[1, 9, 17])
    report = check_checkpoint(draft, engine=[default_engine(), _reading_hidden_states_from(TAP_IDS)])
    [tap] = [f for f in report.findings if f.code == "TAP007"]
    assert ("tokenspeed@0.1.1 taps the outputs of target layers 1, 9, 17 from eagle_aux_hidden_state_layer_ids"
            in tap.message)
    assert "fake@1 taps the outputs of target layers 0, 8, 16 from eagle_aux_hidden_state_layer_ids" in tap.message
    assert tap.detail["engines"]["fake@1"]["tap_layers"] == [0, 8, 16]
    same = check_checkpoint(draft, engine=[default_engine(), dataclasses.replace(default_engine(), name="twin")])
    assert not [f for f in same.findings if f.code == "TAP007"]


def test_several_engines_read_the_payloads_once(tmp_path):
    draft = shutil.copytree(EXAMPLE, tmp_path / "d")
    starts = []
    report = check_checkpoint(draft, deep=True, engine="tokenspeed,tokenspeed@main",
                              progress=lambda total: starts.append(total))
    assert len(starts) == 1 and report.payloads_read
    assert [row["outcome"] for row in report.engine_verdicts()] == ["pass", "refused"]
