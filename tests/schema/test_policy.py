"""The gate's policy: what it accepts, what it refuses (naming the key),
and what it decides about findings."""

from __future__ import annotations

import pytest

from dspark.schema.findings import Finding
from dspark.schema.policy import Policy, PolicyError, judge, parse_policy, unused_waivers

ERROR = Finding("FCN001", "fc_norm declared, not shipped")
WARNING = Finding("INV007", "float32 weights")
OTHER_WARNING = Finding("TGT003", "layer counts differ")
NOTE = Finding("PAY005", "header-only")


def decisions(policy: Policy) -> dict[str, tuple[bool, str | None]]:
    return {j.finding.code: (j.fails, j.waived) for j in judge([ERROR, WARNING, OTHER_WARNING, NOTE], policy)}


def test_defaults_fail_errors_only():
    assert decisions(Policy()) == {
        "FCN001": (True, None), "INV007": (False, None), "TGT003": (False, None), "PAY005": (False, None),
    }


def test_fail_on_warnings_true_fails_every_warning():
    policy = parse_policy({"fail_on_warnings": True}, "dspark.toml")
    assert decisions(policy)["INV007"] == (True, None) and decisions(policy)["TGT003"] == (True, None)


def test_fail_on_warnings_list_fails_only_those_codes():
    policy = parse_policy({"fail_on_warnings": ["INV007"]}, "dspark.toml")
    assert decisions(policy)["INV007"] == (True, None)
    assert decisions(policy)["TGT003"] == (False, None)


def test_a_waived_error_no_longer_fails_and_keeps_its_reason():
    policy = parse_policy({"fail_on_warnings": True, "waive": {"FCN001": "fc_norm weights ship in the next export",
                                                               "INV007": "fp32 until the bf16 run lands"}}, "dspark.toml")
    assert decisions(policy)["FCN001"] == (False, "fc_norm weights ship in the next export")
    assert decisions(policy)["INV007"] == (False, "fp32 until the bf16 run lands")
    assert decisions(policy)["TGT003"] == (True, None)


def test_unused_waivers_are_named():
    policy = parse_policy({"waive": {"FCN001": "r", "CFG009": "r"}}, "dspark.toml")
    assert unused_waivers([ERROR], policy) == ["CFG009"]


@pytest.mark.parametrize(
    "table, key",
    [
        ({"fail_on_warning": True}, "fail_on_warning"),
        ({"waive": {"FCN001": ""}}, "waive.FCN001"),
        ({"waive": {"FCN001": 3}}, "waive.FCN001"),
        ({"waive": {"XYZ999": "why"}}, "waive.XYZ999"),
        ({"waive": ["FCN001"]}, "waive"),
        ({"fail_on_warnings": "yes"}, "fail_on_warnings"),
        ({"fail_on_warnings": ["NOPE01"]}, "fail_on_warnings"),
        ({"require_target": "true"}, "require_target"),
        ({"engine": "trt-llm"}, "engine"),
        ({"engine": ["tokenspeed", "trt-llm"]}, "engine"),
        ({"engine": ["tokenspeed", 3]}, "engine"),
        ({"engine": []}, "engine"),
        ({"smoke": {"tolerance": 0}}, "smoke.tolerance"),
        ({"smoke": {"tokens": 0}}, "smoke.tokens"),
        ({"smoke": {"tolarance": 0.1}}, "smoke.tolarance"),
        ({"smoke": {"required": 1}}, "smoke.required"),
    ],
)
def test_what_cannot_be_applied_is_refused_naming_the_key(table, key):
    with pytest.raises(PolicyError) as refused:
        parse_policy(table, "pyproject.toml [tool.dspark]")
    assert refused.value.message.startswith(f"pyproject.toml [tool.dspark]: {key}:")


def test_the_policy_takes_a_list_of_engines():
    policy = parse_policy({"engine": ["tokenspeed", "tokenspeed@main"]}, "dspark.toml")
    assert policy.engine == "tokenspeed,tokenspeed@main"
    assert parse_policy({"engine": "all"}, "dspark.toml").engine == "all"


def test_a_full_policy_parses():
    policy = parse_policy({
        "engine": "tokenspeed@pr1031", "require_target": True, "fail_on_warnings": ["INV007"],
        "waive": {"TGT003": " the engine never compares layer counts "},
        "smoke": {"tolerance": 0.02, "tokens": 64, "required": True},
    }, "dspark.toml")
    assert policy.engine == "tokenspeed@pr1031" and policy.require_target
    assert policy.waivers == {"TGT003": "the engine never compares layer counts"}
    assert (policy.smoke.tolerance, policy.smoke.tokens, policy.smoke.required) == (0.02, 64, True)
    assert policy.to_dict()["fail_on_warnings"] == ["INV007"]
