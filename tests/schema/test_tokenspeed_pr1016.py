"""TokenSpeed pull request 1016 (`tokenspeed@pr1016`): the K3 DSpark loader
of 1031 with the stream read from TOKENSPEED_DFLASH_AUX_STREAM first
(execution/drafter/dflash.py@5f1e48b5:53-65)."""

from __future__ import annotations

import pytest

from dspark.examples.fabricate import SCALES, draft_config, tensor_shapes
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
