"""A deploy gate's policy, and the decision it makes on findings.

The policy is data a team keeps beside its drafts (`[tool.dspark]` in
pyproject.toml, or dspark.toml; converters/policy.py reads the file):

    engine = "tokenspeed@pr1031"          # the engine whose loader is the contract, or a list:
                                          # ["tokenspeed", "vllm"] (every one must pass), "all"
    require_target = true                 # the gate refuses to run without --target
    runtime = true                        # judge with the engine installed here (as check --runtime)
    fail_on_warnings = true               # or a list of warning codes: ["INV007", "CFG009"]
    launch = "--speculative-num-steps 7"  # the server flags the draft is deployed with (--launch wins)

    [waive]                               # code = "reason" (the reason is mandatory)
    TGT003 = "the engine never compares layer counts; tracked in INFRA-123"

    [smoke]
    tolerance = 0.02                      # relative RMS error the fused path may show
    tokens = 4096                         # rows of synthetic taps
    required = false                      # true: no GPU here fails the gate

A key the policy does not know is an error naming it: a misspelt waiver
must never silently waive nothing, nor a misspelt `fail_on_warnings` let
warnings through. Pure: this module opens no file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from dspark.schema.errors import UsageError
from dspark.schema.findings import FINDING_CODES, Finding, JudgedFinding, Severity


class PolicyError(UsageError):
    """The policy cannot be applied as written (exit 2)."""


@dataclass(frozen=True)
class SmokePolicy:
    tolerance: float | None = None
    tokens: int | None = None
    required: bool = False


@dataclass(frozen=True)
class Policy:
    source: str | None = None  # where it was read; None: the defaults
    engine: str | None = None
    # The server flags the draft is deployed with, in the engine's spelling.
    launch: str | None = None
    require_target: bool = False
    # Judge the draft with the serving engine installed where the gate runs.
    runtime: bool = False
    # True: every warning fails; a set: the warnings of these codes fail
    fail_on_warnings: bool | frozenset[str] = False
    waivers: Mapping[str, str] = field(default_factory=dict)  # code -> reason
    smoke: SmokePolicy = SmokePolicy()

    def to_dict(self) -> dict[str, Any]:
        fail = self.fail_on_warnings
        return {
            "source": self.source,
            "engine": self.engine,
            "launch": self.launch,
            "require_target": self.require_target,
            "runtime": self.runtime,
            "fail_on_warnings": sorted(fail) if isinstance(fail, frozenset) else fail,
            "waivers": [{"code": code, "reason": reason} for code, reason in self.waivers.items()],
            "smoke": {"tolerance": self.smoke.tolerance, "tokens": self.smoke.tokens, "required": self.smoke.required},
        }


POLICY_KEYS = ("engine", "launch", "require_target", "runtime", "fail_on_warnings", "waive", "smoke")
SMOKE_KEYS = ("tolerance", "tokens", "required")


def parse_policy(table: Mapping[str, Any], source: str | None) -> Policy:
    """A `Policy` from the table read from `source`; `PolicyError` names
    the first key it cannot use and says what it takes."""
    where = source or "the policy"

    def fail(key: str, problem: str) -> PolicyError:
        return PolicyError(f"{where}: {key}: {problem}", path=source,
                           hint="The policy keys are documented in README.md#in-ci (the gate's policy).")

    unknown = [key for key in table if key not in POLICY_KEYS]
    if unknown:
        raise fail(unknown[0], f"unknown policy key{_did_you_mean(unknown[0], POLICY_KEYS)}. Known: {', '.join(POLICY_KEYS)}.")

    engine = table.get("engine")
    if engine is not None:
        # One engine, or a list of them (every one must pass): kept as the
        # comma-joined spec `--engine` takes.
        if isinstance(engine, list) and engine and all(isinstance(e, str) for e in engine):
            engine = ",".join(engine)
        if not isinstance(engine, str):
            raise fail("engine", f"must be a string such as 'tokenspeed@pr1031' or a list of them, not {engine!r}.")
        from dspark.schema.engines import engine_specs

        try:
            engine_specs(engine)
        except UsageError as error:
            raise fail("engine", f"{error.message} {error.hint or ''}".strip()) from None

    launch = table.get("launch")
    if launch is not None:
        if not isinstance(launch, str):
            raise fail("launch", f"must be the server flags as one string, such as '--speculative-num-steps 7', "
                       f"not {launch!r}.")
        import shlex

        try:
            shlex.split(launch)
        except ValueError as error:
            raise fail("launch", f"cannot be split into flags ({error}).") from None

    require_target = table.get("require_target", False)
    if not isinstance(require_target, bool):
        raise fail("require_target", f"must be true or false, not {require_target!r}.")

    runtime = table.get("runtime", False)
    if not isinstance(runtime, bool):
        raise fail("runtime", f"must be true or false, not {runtime!r}.")

    fail_on = table.get("fail_on_warnings", False)
    if isinstance(fail_on, list):
        for code in fail_on:
            _known_code(code, "fail_on_warnings", fail)
        fail_on = frozenset(fail_on)
    elif not isinstance(fail_on, bool):
        raise fail("fail_on_warnings", f"must be true, false or a list of finding codes, not {fail_on!r}.")

    waive = table.get("waive", {})
    if not isinstance(waive, Mapping):
        raise fail("waive", 'must be a table of CODE = "reason".')
    waivers = {}
    for code, reason in waive.items():
        _known_code(code, f"waive.{code}", fail)
        if not isinstance(reason, str) or not reason.strip():
            raise fail(f"waive.{code}", "a waiver needs a reason: CODE = \"why this finding may ship\".")
        waivers[code] = reason.strip()

    smoke_table = table.get("smoke", {})
    if not isinstance(smoke_table, Mapping):
        raise fail("smoke", "must be a table (tolerance, tokens, required).")
    unknown = [key for key in smoke_table if key not in SMOKE_KEYS]
    if unknown:
        raise fail(f"smoke.{unknown[0]}",
                   f"unknown policy key{_did_you_mean(unknown[0], SMOKE_KEYS)}. Known: {', '.join(SMOKE_KEYS)}.")
    tolerance = smoke_table.get("tolerance")
    if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
                                  or not math.isfinite(tolerance) or tolerance <= 0):
        raise fail("smoke.tolerance", f"must be a number > 0, not {tolerance!r}.")
    tokens = smoke_table.get("tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise fail("smoke.tokens", f"must be an integer >= 1, not {tokens!r}.")
    required = smoke_table.get("required", False)
    if not isinstance(required, bool):
        raise fail("smoke.required", f"must be true or false, not {required!r}.")

    return Policy(
        source=source,
        engine=engine,
        launch=launch,
        require_target=require_target,
        runtime=runtime,
        fail_on_warnings=fail_on,
        waivers=waivers,
        smoke=SmokePolicy(float(tolerance) if tolerance is not None else None, tokens, required),
    )


def _did_you_mean(given: Any, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the nearest known spelling, or nothing."""
    import difflib

    close = difflib.get_close_matches(str(given), list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _known_code(code: Any, key: str, fail) -> None:
    if not isinstance(code, str) or code not in FINDING_CODES:
        raise fail(key, f"{code!r} is not a finding code{_did_you_mean(code, FINDING_CODES)} (see docs/codes.md, "
                        "or run 'dspark explain').")


# Warnings that fail the gate unless the policy waives them: the installed
# engine's cited functions differ from the release it is judged as (RUN007),
# so its verdict is a guess until someone has read them.
FAIL_UNLESS_WAIVED = frozenset({"RUN007"})


def judge(findings: Iterable[Finding], policy: Policy) -> list[JudgedFinding]:
    """What each finding does to the gate: an error fails it, a warning
    fails it when `fail_on_warnings` names it (or is true) or it is one of
    `FAIL_UNLESS_WAIVED`, and a waived finding fails nothing, whatever its
    severity; its reason is kept."""
    judged = []
    for finding in findings:
        waived = policy.waivers.get(finding.code)
        if waived is not None:
            judged.append(JudgedFinding(finding, False, waived))
            continue
        fails = finding.severity is Severity.ERROR
        if finding.severity is Severity.WARNING:
            fail_on = policy.fail_on_warnings
            fails = (fail_on is True or (isinstance(fail_on, frozenset) and finding.code in fail_on)
                     or finding.code in FAIL_UNLESS_WAIVED)
        judged.append(JudgedFinding(finding, fails))
    return judged


def unused_waivers(findings: Iterable[Finding], policy: Policy) -> list[str]:
    """Waived codes no finding has: a waiver left behind after its cause was fixed."""
    found = {f.code for f in findings}
    return [code for code in policy.waivers if code not in found]
