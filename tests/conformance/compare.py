"""dspark's side of a case, and the comparison with the engine's.

dspark is run as a user runs it, `dspark check FOLDER --engine E@V
--format json` (with `--target` where the case names the target: the
engine always serves a draft against one), in a separate process from
the working folder, so no setting of this repository leaks in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from outcomes import LOADED, NO_RUN, Case, Outcome

# How a case compares, in the order the summary line names them.
AGREE = "agree"
AGREE_BY_REASON = "agree_by_reason"  # the run and dspark differ; a recorded reading says dspark is right
FALSE_PASS = "false_pass"            # the engine refuses or serves it wrong; dspark passes it
FALSE_FAIL = "false_fail"            # the engine serves it as trained; dspark fails it
NO_VERDICT = "no_verdict"            # one side gave none (dspark exit 2/3, or the harness could not run)


@dataclass
class DsparkVerdict:
    exit_code: int
    outcome: str = ""            # pass / refused / served_wrong, from engine_verdicts
    codes: list[str] = field(default_factory=list)  # the error codes that decided it
    message: str = ""            # the first reason, or stderr for exit 2/3
    tap_layers: list[int] | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def dspark_command() -> list[str]:
    script = Path(sys.executable).with_name("dspark")
    if script.exists():
        return [str(script)]
    found = shutil.which("dspark")
    if found:
        return [found]
    return [sys.executable, "-m", "dspark.cli.main"]


def run_dspark(arguments: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*dspark_command(), *arguments], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def dspark_check(case: Case, engine: str, cwd: Path) -> DsparkVerdict:
    arguments = ["check", case.folder, "--engine", engine, "--format", "json"]
    if case.target_config and not case.check_without_target:
        arguments += ["--target", case.target_config]
    if case.launch:
        arguments += ["--launch", case.launch]
    result = run_dspark(arguments, cwd)
    if result.returncode not in (0, 1):
        lines = (result.stderr or result.stdout).strip().splitlines()
        return DsparkVerdict(result.returncode, message=" ".join(lines[:3])[:400])
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        return DsparkVerdict(3, message=f"no JSON report: {result.stdout[:200]!r}")
    rows = report.get("engine_verdicts") or []
    row = rows[0] if rows else {}
    why = row.get("why") or [f for f in report.get("findings", []) if f.get("severity") == "error"]
    return DsparkVerdict(result.returncode, outcome=row.get("outcome", "pass" if result.returncode == 0 else "fail"),
                         codes=[w["code"] for w in why], message=(why[0]["message"][:400] if why else ""),
                         tap_layers=row.get("tap_layers"))


def dspark_convert(case: Case, engine: str, destination: Path, cwd: Path) -> bool:
    """`dspark convert SOURCE DST --engine E`; True when it wrote DST."""
    result = run_dspark(["convert", case.folder, str(destination), "--engine", engine, "--format", "json"], cwd)
    return result.returncode == 0 and destination.is_dir()


def classify(engine: Outcome, dspark: DsparkVerdict) -> str:
    if engine.status == NO_RUN or dspark.exit_code not in (0, 1):
        return NO_VERDICT
    engine_passes = engine.status == LOADED
    if engine_passes == dspark.passed:
        return AGREE
    return FALSE_PASS if dspark.passed else FALSE_FAIL
