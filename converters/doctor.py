"""`dspark doctor` as data: what is installed where dspark runs.

Versions are read from the installed packages' metadata, nothing is
imported for them; the serving engine is found and its revision read from
its files, not imported (converters/runtime.py). The GPU and the kernel
self-tests (dspark's and the engine's) need torch and live in the kernels
floor; the caller adds their rows.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from dspark.converters.runtime import Runtime, describe_kernel, runtime_findings

OK, ABSENT, PROBLEM, NOT_RUN = "ok", "absent", "problem", "not run"
PACKAGES = ("dspark", "torch", "triton", "safetensors")


@dataclass
class DoctorRow:
    name: str
    status: str  # ok, absent, not run, problem
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, **({"data": self.data} if self.data else {})}


@dataclass
class DoctorReport:
    rows: list[DoctorRow]

    @property
    def passed(self) -> bool:
        return all(row.status != PROBLEM for row in self.rows)

    @property
    def summary(self) -> str:
        problems = [row.name for row in self.rows if row.status == PROBLEM]
        if problems:
            return f"problem with: {', '.join(problems)}"
        return "nothing wrong found (absent parts are optional)"

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "rows": [row.to_dict() for row in self.rows], "findings": []}


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment_rows() -> list[DoctorRow]:
    rows = [DoctorRow("python", OK, f"{platform.python_version()} ({platform.python_implementation()}, {platform.machine()})")]
    for name in PACKAGES:
        version = package_version(name)
        if version is None:
            extra = " (the torch extra: pip install 'dspark[torch]')" if name in ("torch", "triton") else ""
            rows.append(DoctorRow(name, ABSENT, f"not installed{extra}"))
        else:
            rows.append(DoctorRow(name, OK, version))
    return rows


def serving_engine_rows(runtime: Runtime) -> list[DoctorRow]:
    """The serving engine installed here and the segmented RMSNorm it serves
    with, as `check --runtime` reads them."""
    serving = runtime.serving
    findings = {f.code: f for f in runtime_findings(runtime, family=None)}
    if serving is None:
        return [DoctorRow("serving engine", ABSENT, findings["RUN005"].message, runtime.to_dict()),
                DoctorRow("serving kernels", ABSENT, describe_kernel(runtime))]
    identity = next(findings[code] for code in ("RUN004", "RUN007", "RUN006", "RUN003") if code in findings)
    # A package without the files its release is told from would not serve;
    # one whose cited functions differ is not the code the rules were read in.
    problem = serving.missing or identity.code == "RUN007"
    rows = [DoctorRow("serving engine", PROBLEM if problem else OK, identity.message, serving.to_dict())]
    kernel = runtime.kernel
    if "RUN001" in findings:
        rows.append(DoctorRow("serving kernels", PROBLEM, findings["RUN001"].message, kernel.to_dict()))
    else:
        rows.append(DoctorRow("serving kernels", OK if kernel is not None else ABSENT, describe_kernel(runtime),
                              kernel.to_dict() if kernel is not None else {}))
    return rows
