"""`dspark doctor` as data: what is installed where dspark runs.

Versions are read from the installed packages' metadata, nothing is
imported for them; the serving kernel package is found and read, not
imported (converters/runtime.py). The GPU and the kernel self-test need
torch and live in the kernels floor; the caller adds their rows.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from dspark.converters.runtime import probe_serving_kernels

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


def serving_kernels_row() -> DoctorRow:
    kernels = probe_serving_kernels()
    status = OK if kernels.has_segmented_rmsnorm else ABSENT
    detail = kernels.describe()
    if not kernels.has_segmented_rmsnorm:
        detail += ": `dspark check --runtime` fails a draft with fc_norm here (RUN001)"
    return DoctorRow("serving kernels", status, detail, kernels.to_dict())
