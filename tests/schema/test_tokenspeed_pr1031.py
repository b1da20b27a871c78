"""TokenSpeed pull request 1031 (`tokenspeed@pr1031`, and `tokenspeed`, the
build a deploy assumes) on GQA DFlash/DSpark drafts: the DFlash drafter,
which the DSpark drafter subclasses, resolves the stream of every draft it
serves from the declaration alone, `dflash_config.aux_hidden_stream or
aux_hidden_stream`, lower-cased (execution/drafter/dflash.py@4b9766f6:52-58),
and hands it to the target, which must take it or stop the engine (258-271;
models/kimi_k3.py@4b9766f6:2660-2680). Main's drafter hands the target no
stream (execution/drafter/dflash.py@f4d8ec6e:227-248). Drafts and targets
are real fabricated folders."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from test_tokenspeed_pr1016 import counted, gqa_draft, k3_attn_res_target, qwen35_target

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import fabricate
from dspark.schema.engines import engine_by_spec
from dspark.schema.explanations import rule_sources
from dspark.schema.findings import Severity
from dspark.schema.rules import STREAM_ENV_VAR
from draft_edits import without_qualname


SERVING_CHANGE = ("tokenspeed@pr1031", "tokenspeed")
DRAFTER_1031 = "python/tokenspeed/runtime/execution/drafter/dflash.py@4b9766f6:"


def k3_draft(folder, stream: str):
    """A fabricated K3 DSpark draft declaring `stream`."""
    fabricate(folder, family="k3_dspark")
    config = json.loads((folder / "config.json").read_text())
    config["aux_hidden_stream"] = stream
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def stream_findings(report) -> list[tuple[str, str, dict]]:
    return [(f.code, f.severity.name, f.detail) for f in report.findings if f.code.startswith("STR")]


@pytest.mark.parametrize("engine", SERVING_CHANGE)
@pytest.mark.parametrize("variant", ["dflash", "dspark"])
def test_a_declared_attn_res_without_a_target_reads_as_a_k3_drafts(tmp_path, engine, variant):
    """Not ENG001 (prefix served without a word): the engine hands the
    declaration to the target; without --target dspark says what it says
    for a K3 draft declaring the same, under the same profile."""
    gqa = check_checkpoint(gqa_draft(tmp_path / "gqa", variant=variant, aux_hidden_stream="attn_res"),
                           engine=engine, environ={})
    k3 = check_checkpoint(k3_draft(tmp_path / "k3", "attn_res"), engine=engine, environ={})
    assert counted(gqa) == Counter({"STR005": 1})
    assert gqa.resolved.stream == k3.resolved.stream == "attn_res"
    assert stream_findings(gqa) == stream_findings(k3)
    assert [f.code for f in gqa.findings if f.code.startswith("STR")] == ["STR002", "STR005"]


@pytest.mark.parametrize("engine", SERVING_CHANGE)
def test_a_declared_attn_res_on_a_qwen35_target_stops_the_engine(tmp_path, engine):
    """Qwen3.5 has no set_dflash_aux_hidden_stream: a stream but prefix
    raises in wire_target (execution/drafter/dflash.py@4b9766f6:263-271)."""
    qwen = qwen35_target(tmp_path / "qwen")
    refused = check_checkpoint(gqa_draft(tmp_path / "d", aux_hidden_stream="attn_res"), target=qwen, engine=engine,
                               environ={})
    assert counted(refused) == Counter({"STR006": 1}) and refused.resolved.stream == "attn_res"
    (stop,) = [f for f in refused.findings if f.code == "STR006"]
    assert "refuses to start" in stop.message and stop.file == str(qwen / "config.json")
    # The prefix stream needs no setter: the same target serves a prefix draft.
    prefix = check_checkpoint(gqa_draft(tmp_path / "p", aux_hidden_stream="prefix"), target=qwen, engine=engine,
                              environ={})
    assert counted(prefix) == Counter() and prefix.resolved.stream == "prefix"


@pytest.mark.parametrize("engine", SERVING_CHANGE)
def test_a_declared_attn_res_on_a_kimi_k3_attn_res_target_is_served(tmp_path, engine):
    draft = gqa_draft(tmp_path / "d", aux_hidden_stream="attn_res")
    served = check_checkpoint(draft, target=k3_attn_res_target(tmp_path / "k3"), engine=engine, environ={})
    assert counted(served) == Counter() and served.passed()
    assert served.resolved.stream == "attn_res"
    assert served.resolved.stream_source == "config.json: aux_hidden_stream"


@pytest.mark.parametrize("nested, top, stream, source, declared_twice", [
    ("ATTN_RES", "prefix", "attn_res", "dflash_config.aux_hidden_stream", 1),
    ("", "Attn_Res", "attn_res", "aux_hidden_stream", 0),
    (None, "attn_res", "attn_res", "aux_hidden_stream", 0),
], ids=["nested-wins", "empty-nested-falls-through", "null-nested-falls-through"])
def test_the_declaration_is_read_as_the_drafter_reads_it(tmp_path, nested, top, stream, source, declared_twice):
    """`dflash_config.aux_hidden_stream or aux_hidden_stream`, lower-cased
    (execution/drafter/dflash.py@4b9766f6:52-58); two different declarations
    are OVR001 besides."""
    draft = gqa_draft(tmp_path / "d", nested={"aux_hidden_stream": nested}, aux_hidden_stream=top)
    report = check_checkpoint(draft, engine="tokenspeed@pr1031", environ={})
    assert (report.resolved.stream, report.resolved.stream_source) == (stream, f"config.json: {source}")
    assert counted(report) == Counter({"STR005": 1, "OVR001": declared_twice}) - Counter()


RESOLVING = ("tokenspeed@pr1031", "tokenspeed", "tokenspeed@pr1016")


@pytest.mark.parametrize("engine", RESOLVING)
@pytest.mark.parametrize("variant", ["dflash", "dspark"])
@pytest.mark.parametrize("nested, top, served", [("Attn_Res", "prefix", "attn_res"), ("prefix", "ATTN_RES", "prefix")])
def test_a_stream_declared_twice_differently_is_ovr001(tmp_path, engine, variant, nested, top, served):
    """The drafter serves the nested stream and validates neither
    (execution/drafter/dflash.py@4b9766f6:52-58; @5f1e48b5:53-65): which one
    the draft was trained on cannot be told, an error as for the GQA taps."""
    draft = gqa_draft(tmp_path / "d", variant=variant, aux_hidden_stream=top, nested={"aux_hidden_stream": nested})
    report = check_checkpoint(draft, target=k3_attn_res_target(tmp_path / "k3"), engine=engine, environ={})
    assert counted(report) == Counter({"OVR001": 1}) and report.resolved.stream == served
    (finding,) = [f for f in report.findings if f.code == "OVR001"]
    cite = engine_by_spec(engine).loader_for("dflash_gqa").stream.source.cite()
    assert finding.severity is Severity.ERROR
    assert finding.detail == {"field": "aux_hidden_stream", "nested": nested, "top_level": top,
                              "validated": False, "served": served, "source": cite}
    assert f"dflash_config.aux_hidden_stream = {nested!r} but aux_hidden_stream = {top!r}" in finding.message
    assert f"serves the nested value, {served}," in finding.message and cite in finding.message


@pytest.mark.parametrize("engine", RESOLVING)
@pytest.mark.parametrize("nested, top", [("prefix", "PREFIX"), ("ATTN_RES", "attn_res")])
def test_a_stream_declared_twice_alike_is_nothing(tmp_path, engine, nested, top):
    """The drafter lower-cases what it serves: one stream, however spelt."""
    draft = gqa_draft(tmp_path / "d", aux_hidden_stream=top, nested={"aux_hidden_stream": nested})
    report = check_checkpoint(draft, target=k3_attn_res_target(tmp_path / "k3"), engine=engine, environ={})
    assert counted(report) == Counter() and report.resolved.stream == nested.lower()


@pytest.mark.parametrize("engine", ["tokenspeed@main", "vllm", "sglang"])
def test_engines_that_never_read_the_stream_say_nothing_of_two(tmp_path, engine):
    """Main's drafter hands the target no stream (execution/drafter/dflash.py@
    f4d8ec6e:227-248); no vLLM or SGLang model reads aux_hidden_stream (the
    target or a server variable decides): the declarations are not served."""
    twice = gqa_draft(tmp_path / "t", aux_hidden_stream="prefix", nested={"aux_hidden_stream": "attn_res"})
    once = gqa_draft(tmp_path / "o", nested={"aux_hidden_stream": "attn_res"})
    reports = [check_checkpoint(draft, engine=engine, environ={}) for draft in (twice, once)]
    assert "OVR001" not in counted(reports[0]) and counted(reports[0]) == counted(reports[1])


@pytest.mark.parametrize("engine", SERVING_CHANGE)
def test_the_variable_is_not_read(tmp_path, engine):
    """1031's drafter reads no environment variable: the declared stream is
    served, and the variable only earns the STR004 note."""
    draft = gqa_draft(tmp_path / "d", aux_hidden_stream="attn_res")
    report = check_checkpoint(draft, target=k3_attn_res_target(tmp_path / "k3"), engine=engine,
                              environ={STREAM_ENV_VAR: "prefix"})
    assert counted(report) == Counter({"STR004": 1}) and report.resolved.stream == "attn_res"
    assert engine_by_spec(engine).loader_for("dflash_gqa").stream.env_override is None


def test_every_stream_rule_cites_the_1031_drafter():
    resolved = "52-58, 258-271 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)"
    loader = engine_by_spec("tokenspeed@pr1031").loader_for("dflash_gqa")
    assert without_qualname(loader.stream.source.cite()) == DRAFTER_1031 + resolved
    assert loader.features["aux_hidden_stream"].supported
    assert without_qualname(loader.features["aux_hidden_stream"].source.cite()) == DRAFTER_1031 + resolved
    assert without_qualname(loader.sources["stream vs target"].cite()).startswith(
        "python/tokenspeed/runtime/models/kimi_k3.py@4b9766f6:2660-2680")
    assert engine_by_spec("tokenspeed@current").loader_for("dflash_gqa") == loader
    # 0.1.1 resolves the GQA stream as 1031's drafter did, read where it now sits: the model
    # (its block size is judged against the launch instead: tests/schema/test_launch.py)
    released = engine_by_spec("tokenspeed@0.1.1").loader_for("dflash_gqa")
    # ...and adds only the citation of its drafter's sliding-window check
    assert dataclasses.replace(released, stream=loader.stream, config_limits=loader.config_limits,
                               sources=loader.sources) == loader
    assert set(released.sources) - set(loader.sources) == {"sliding window backend"}
    assert released.stream.source.cite().startswith(
        "tokenspeed/runtime/models/dflash.py::DFlashDraftModel._checkpoint_capture_field@tokenspeed==0.1.1:316-319")
    cited = {(s.family, s.source) for s in rule_sources("STR006", [engine_by_spec("tokenspeed@pr1031")])}
    assert ("dflash_gqa", loader.sources["stream vs target"].cite()) in cited


def test_main_still_serves_a_declared_attn_res_as_prefix_without_a_word(tmp_path):
    """Main's drafter hands the target no stream and every target captures
    the prefix stream (execution/drafter/dflash.py@f4d8ec6e:227-248;
    models/kimi_k3.py@f4d8ec6e:2488-2503): ENG001 whatever the target."""
    draft = gqa_draft(tmp_path / "d", aux_hidden_stream="attn_res")
    for target in (None, qwen35_target(tmp_path / "qwen"), k3_attn_res_target(tmp_path / "k3")):
        report = check_checkpoint(draft, target=target, engine="tokenspeed@main", environ={})
        assert counted(report) == Counter({"ENG001": 1}) and report.resolved.stream == "prefix"
    feature = engine_by_spec("tokenspeed@main").loader_for("dflash_gqa").features["aux_hidden_stream"]
    assert not feature.supported
    assert without_qualname(feature.source.cite()).startswith("python/tokenspeed/runtime/execution/drafter/dflash.py@f4d8ec6e:227-248")
