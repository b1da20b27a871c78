"""TokenSpeed pull request 1016 (`tokenspeed@pr1016`): the K3 DSpark loader
of 1031 with the stream read from TOKENSPEED_DFLASH_AUX_STREAM first
(execution/drafter/dflash.py@5f1e48b5:53-65); the same drafter picks the
stream of a GQA DFlash/DSpark draft (242-277)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, fabricate, target_config, tensor_shapes
from dspark.schema.engines import engine_by_spec
from dspark.schema.findings import Severity
from dspark.schema.inventory import TensorEntry
from dspark.schema.rules import STREAM_ENV_VAR, check_contract

TINY = SCALES["tiny"]


def judged(stream=None, environ=None, engine="tokenspeed@pr1016", fc_norm=False):
    config = draft_config(TINY, stream=stream, fc_norm=fc_norm)
    entries = [TensorEntry(name, "model." + name, "BF16", shape, "model.safetensors")
               for name, shape in tensor_shapes(TINY, fc_norm=fc_norm).items()]
    return check_contract(config, entries, environ=environ or {}, engine=engine_by_spec(engine))


def errors(result) -> list[str]:
    return [f.code for f in result.findings if f.severity is Severity.ERROR]


def test_pr1016_serves_fc_norm_and_the_declared_stream_without_the_variable():
    result = judged("attn_res", fc_norm=True)
    assert errors(result) == []
    assert result.resolved.stream == "attn_res"
    assert not any(f.code in ("STR003", "STR004", "STR007") for f in result.findings)


def test_pr1016_serves_the_variable_over_the_checkpoint():
    result = judged("prefix", environ={STREAM_ENV_VAR: " ATTN_RES "})
    assert result.resolved.stream == "attn_res"
    (override,) = [f for f in result.findings if f.code == "STR007"]
    assert override.severity is Severity.ERROR
    assert override.detail["declared"] == "prefix" and override.detail["served"] == "attn_res"
    assert "STR004" not in {f.code for f in result.findings}  # it reads it: not "ignored"


def test_pr1016_with_the_variable_naming_the_declared_stream_passes():
    result = judged("attn_res", environ={STREAM_ENV_VAR: "attn_res"})
    assert errors(result) == [] and result.resolved.stream == "attn_res"
    note = next(f for f in result.findings if f.code == "STR002")
    assert STREAM_ENV_VAR in note.message


@pytest.mark.parametrize("value", ["residual", "   "])
def test_pr1016_refuses_to_start_on_a_value_the_target_refuses(value):
    result = judged("prefix", environ={STREAM_ENV_VAR: value})
    assert "STR003" in errors(result)


def test_pr1031_still_ignores_the_variable():
    result = judged("prefix", environ={STREAM_ENV_VAR: "attn_res"}, engine="tokenspeed@pr1031")
    assert result.resolved.stream == "prefix"
    assert {f.code for f in result.findings} >= {"STR004"} and "STR007" not in {f.code for f in result.findings}


# GQA DFlash/DSpark drafts: the DFlash drafter, which the DSpark drafter
# subclasses, resolves the stream for every draft it serves, the variable
# first, and hands it to the target: only a Kimi-K3 target takes a stream
# but prefix (execution/drafter/dflash.py@5f1e48b5:56-65, 264-277;
# models/kimi_k3.py@5f1e48b5:1986-1999). Drafts are real safetensors
# folders; the variable is set in the process environment the check reads.

OTHER_PROFILES = ("tokenspeed", "tokenspeed@pr1031", "tokenspeed@main", "vllm", "sglang")


def gqa_draft(folder: Path, *, variant: str = "dflash", nested: dict | None = None, **config_fields) -> Path:
    """A fabricated GQA draft, its config given `config_fields` and
    `nested` entries in dflash_config."""
    fabricate(folder, family="dflash_gqa", variant=variant)
    config = json.loads((folder / "config.json").read_text())
    config.update(config_fields)
    config["dflash_config"].update(nested or {})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def qwen35_target(folder: Path) -> Path:
    """The fabricator's own target for its GQA drafts: Qwen3.5, which has
    no set_dflash_aux_hidden_stream."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(target_config("dflash_gqa")))
    return folder


def k3_attn_res_target(folder: Path) -> Path:
    """A Kimi-K3 target with AttnRes, sized for the tiny GQA draft."""
    text = target_config("dflash_gqa")["text_config"]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "text_config": {key: text[key] for key in ("hidden_size", "num_hidden_layers", "vocab_size")}
        | {"attn_res_block_size": 12}}))
    return folder


def counted(report) -> Counter:
    """Codes of the errors and warnings (notes left out; so is LCH003, the
    block size a launch must match on 0.1.1, tests/schema/test_launch.py)."""
    return Counter(f.code for f in report.findings if f.severity is not Severity.INFO and f.code != "LCH003")


def findings_but(report, code: str) -> list:
    return [f for f in report.findings if f.code != code]


@pytest.mark.parametrize("variant", ["dflash", "dspark"])
def test_pr1016_serves_a_gqa_draft_the_variables_stream(tmp_path, monkeypatch, variant):
    draft = gqa_draft(tmp_path / "d", variant=variant)  # declares no stream: trained on prefix
    before = {spec: check_checkpoint(draft, engine=spec) for spec in OTHER_PROFILES}
    monkeypatch.setenv(STREAM_ENV_VAR, " ATTN_RES ")
    report = check_checkpoint(draft, engine="tokenspeed@pr1016")
    assert counted(report) == Counter({"STR007": 1, "STR005": 1})
    assert report.resolved.stream == "attn_res"
    (override,) = [f for f in report.findings if f.code == "STR007"]
    assert override.detail["declared"] == "prefix" and override.detail["served"] == "attn_res"
    loader = engine_by_spec("tokenspeed@pr1016").loader_for("dflash_gqa")
    assert loader.stream.source.cite().startswith(
        "python/tokenspeed/runtime/execution/drafter/dflash.py::_resolve_aux_hidden_stream@5f1e48b5:")
    # The other profiles: the variable changes nothing but their STR004 note.
    for spec, without in before.items():
        with_variable = check_checkpoint(draft, engine=spec)
        assert "STR007" not in counted(with_variable), spec
        assert findings_but(with_variable, "STR004") == findings_but(without, "STR004"), spec
        assert with_variable.resolved.stream == without.resolved.stream, spec


def test_pr1016_gqa_variable_against_the_target(tmp_path, monkeypatch):
    draft = gqa_draft(tmp_path / "d")
    qwen, k3 = qwen35_target(tmp_path / "qwen"), k3_attn_res_target(tmp_path / "k3")
    monkeypatch.setenv(STREAM_ENV_VAR, "attn_res")
    # Qwen3.5 has no stream setter: a stream but prefix stops the engine.
    refused = check_checkpoint(draft, target=qwen, engine="tokenspeed@pr1016")
    assert counted(refused) == Counter({"STR007": 1, "STR006": 1})
    # Kimi-K3 with AttnRes takes it: the draft is served the other stream without a word.
    served = check_checkpoint(draft, target=k3, engine="tokenspeed@pr1016")
    assert counted(served) == Counter({"STR007": 1}) and served.resolved.stream == "attn_res"
    for spec in ("tokenspeed", "tokenspeed@pr1031"):
        assert counted(check_checkpoint(draft, target=k3, engine=spec)) == Counter({"STR004": 1}), spec


@pytest.mark.parametrize("value", ["residual", "   "])
def test_pr1016_gqa_variable_the_engine_refuses(tmp_path, monkeypatch, value):
    draft = gqa_draft(tmp_path / "d")
    monkeypatch.setenv(STREAM_ENV_VAR, value)
    assert counted(check_checkpoint(draft, engine="tokenspeed@pr1016")) == Counter({"STR003": 1})
    assert counted(check_checkpoint(draft, engine="tokenspeed@pr1031")) == Counter({"STR004": 1})


def test_pr1016_gqa_variable_naming_prefix_over_an_attn_res_draft(tmp_path, monkeypatch):
    draft = gqa_draft(tmp_path / "d", aux_hidden_stream="attn_res")
    k3 = k3_attn_res_target(tmp_path / "k3")
    assert counted(check_checkpoint(draft, target=k3, engine="tokenspeed@pr1016")) == Counter()
    monkeypatch.setenv(STREAM_ENV_VAR, "prefix")
    report = check_checkpoint(draft, target=k3, engine="tokenspeed@pr1016")
    assert counted(report) == Counter({"STR007": 1}) and report.resolved.stream == "prefix"
    (override,) = [f for f in report.findings if f.code == "STR007"]
    assert override.detail["declared"] == "attn_res" and override.detail["served"] == "prefix"


def test_pr1016_gqa_declared_stream_is_handed_to_the_target(tmp_path):
    """Without the variable the drafter serves the declaration, nested
    first when truthy, lower-cased (dflash.py@5f1e48b5:61-65): not the
    prefix-only capture of main, which would serve it without a word. The
    two declarations differ: OVR001 besides, wherever it is served."""
    draft = gqa_draft(tmp_path / "d", aux_hidden_stream="prefix", nested={"aux_hidden_stream": "ATTN_RES"})
    qwen, k3 = qwen35_target(tmp_path / "qwen"), k3_attn_res_target(tmp_path / "k3")
    no_target = check_checkpoint(draft, engine="tokenspeed@pr1016", environ={})
    assert counted(no_target) == Counter({"STR005": 1, "OVR001": 1}) and no_target.resolved.stream == "attn_res"
    assert no_target.resolved.stream_source == "config.json: dflash_config.aux_hidden_stream"
    assert counted(check_checkpoint(draft, target=qwen, engine="tokenspeed@pr1016", environ={})) == Counter(
        {"STR006": 1, "OVR001": 1})
    served = check_checkpoint(draft, target=k3, engine="tokenspeed@pr1016", environ={})
    assert counted(served) == Counter({"OVR001": 1}) and served.resolved.stream == "attn_res"
    assert counted(check_checkpoint(draft, target=k3, engine="tokenspeed@main", environ={})) == Counter(
        {"ENG001": 1})
