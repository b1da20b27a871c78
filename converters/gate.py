"""`dspark gate` as a library call: the pre-deploy gate in one run.

Steps, each a row of the summary:

1. check: the served verdict, reading every value (`check --deep`);
2. manifest: the payload hashes against `dspark-manifest.json` (`check
   --verify`), from the same read, when the folder has a manifest; with
   `verify`, a folder without one fails (MAN005);
3. runtime: with `runtime = true` in the policy (or `gate --runtime`), the
   draft is judged with the serving engine installed here, as `check
   --runtime` judges it (converters/runtime.py): its revision's profile,
   and whether it starts at all;
4. smoke: the context projection on a GPU, when the caller hands a smoke
   runner (a GPU is there and torch is installed); skipped with a note
   otherwise, or failed when the policy requires it. Where an engine is
   installed, the runner also runs the engine's own segmented RMSNorm
   beside dspark's.

The policy (schema/policy.py) decides what fails: errors, the warnings it
names (`strict`: every warning), and nothing it waives. The smoke runs through a callable the caller
hands in, so that this floor never imports the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from dspark.converters.check import MANIFEST_NAME, CheckReport, check_checkpoint
from dspark.converters.runtime import Runtime, installed_profile, runtime_engine, with_runtime_findings
from dspark.schema.errors import CheckpointError, UsageError
from dspark.schema.findings import Finding, count_by_severity
from dspark.schema.policy import JudgedFinding, Policy, SmokePolicy, judge, unused_waivers
from dspark.schema.units import human_bytes

# (checkpoint, smoke policy) -> a smoke report: `.passed`, `.findings`, `.to_dict()`, `.device`
SmokeRunner = Callable[[Path, SmokePolicy], Any]

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class GateStep:
    name: str
    status: str  # passed, failed, skipped
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class GateReport:
    checkpoint: str
    target: str | None
    engine: str
    policy: Policy
    check: CheckReport
    steps: list[GateStep]
    judged: list[JudgedFinding]
    smoke: Any = None  # the smoke report, when the smoke ran
    unused_waivers: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [j.finding for j in self.judged]

    @property
    def passed(self) -> bool:
        return not any(j.fails for j in self.judged) and all(s.status != FAILED for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "target": self.target,
            "engine": self.engine,
            "passed": self.passed,
            "policy": self.policy.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "counts": count_by_severity(self.findings),
            "waived": sum(1 for j in self.judged if j.waived is not None),
            "unused_waivers": self.unused_waivers,
            "findings": [{**j.finding.to_dict(), "fails": j.fails, "waived": j.waived} for j in self.judged],
            "check": self.check.to_dict(),
            "smoke": {"ran": self.smoke is not None, "report": self.smoke.to_dict() if self.smoke is not None else None},
        }


def run_gate(
    checkpoint: Path | str,
    *,
    target: Path | str | None = None,
    policy: Policy = Policy(),
    engine: str | None = None,
    launch: str | None = None,
    smoke: SmokeRunner | None = None,
    no_smoke_reason: str = "no smoke runner",
    verify: bool = False,
    strict: bool = False,
    progress=None,
    runtime: Runtime | None = None,
) -> GateReport:
    """Gate `checkpoint` for deploy under `policy`. `engine` (a flag)
    wins over the policy's. `smoke`, when given, runs the smoke test;
    `no_smoke_reason` says why it is not (no GPU, no torch). `verify`
    requires a manifest (MAN005 without one); `strict` fails every
    warning the policy does not waive. `runtime`, what is installed
    here, judges the draft when the policy asks for it (`runtime = true`)."""
    if policy.require_target and target is None:
        raise UsageError(
            f"{policy.source}: require_target = true, and no --target was given.",
            hint="Pass the target model's folder or config.json with --target.",
        )
    if strict:
        policy = replace(policy, fail_on_warnings=True)
    if policy.runtime and runtime is None:
        raise UsageError(f"{policy.source}: runtime = true, and the caller found no runtime to judge.")
    named_by = "--engine" if engine else f"{policy.source}: engine ="
    engine = engine or policy.engine
    launch = launch if launch is not None else policy.launch  # a flag wins over the policy's
    if policy.runtime:
        engine = installed_profile(runtime, runtime_engine(runtime, engine, named_by=named_by))
    has_manifest = (Path(checkpoint) / MANIFEST_NAME).is_file()
    check = check_checkpoint(
        checkpoint, target=target, deep=True, verify_hashes=has_manifest or verify, engine=engine, progress=progress,
        launch=launch,
    )
    if policy.runtime:
        check = with_runtime_findings(check, runtime)
    findings = list(check.findings)
    check_judged = judge(findings, policy)
    steps = [
        _step("check", [j for j in check_judged if not j.finding.code.startswith(("MAN", "RUN"))],
              f"served verdict on {check.engine}, every value read ({human_bytes(check.scanned_bytes)})"),
    ]
    if policy.runtime:
        installed = runtime.serving.describe() if runtime.serving is not None else "no serving engine"
        steps.append(_step("runtime", [j for j in check_judged if j.finding.code.startswith("RUN")],
                           f"the engine installed here: {installed}, judged as {check.engine}"))
    manifest = [j for j in check_judged if j.finding.code.startswith("MAN")]
    if has_manifest or verify:
        steps.append(_step("manifest", manifest, f"payload hashes against {MANIFEST_NAME}"))
    else:
        steps.append(GateStep("manifest", SKIPPED, f"no {MANIFEST_NAME} in the folder (dspark convert writes one)"))

    smoke_report = None
    if any(j.fails for j in check_judged):
        steps.append(GateStep("smoke", SKIPPED, "not run: the check failed"))
    elif smoke is None:
        status = FAILED if policy.smoke.required else SKIPPED
        steps.append(GateStep("smoke", status, f"{no_smoke_reason}" + (" (the policy requires it)" if policy.smoke.required else "")))
    else:
        try:
            smoke_report = smoke(Path(checkpoint), policy.smoke)
        except CheckpointError as error:
            steps.append(GateStep("smoke", FAILED, error.message))
        else:
            findings += smoke_report.findings
            smoke_judged = judge(smoke_report.findings, policy)
            check_judged += smoke_judged
            kernels = "fused kernel" if getattr(smoke_report, "kernel", "dspark") == "dspark" else (
                "dspark's fused kernel and the engine's")
            steps.append(_step("smoke", smoke_judged, f"context projection on {smoke_report.device}, {kernels} against fp32"))

    return GateReport(
        checkpoint=check.checkpoint,
        target=check.target,
        engine=check.engine,
        policy=policy,
        check=check,
        steps=steps,
        judged=check_judged,
        smoke=smoke_report,
        unused_waivers=unused_waivers(findings, policy),
    )


def _step(name: str, judged: list[JudgedFinding], detail: str) -> GateStep:
    failing = sorted({j.finding.code for j in judged if j.fails})
    waived = sorted({j.finding.code for j in judged if j.waived is not None})
    text = detail
    if failing:
        text += f"; failed by {', '.join(failing)}"
    if waived:
        text += f"; waived {', '.join(waived)}"
    return GateStep(name, FAILED if failing else PASSED, text)
