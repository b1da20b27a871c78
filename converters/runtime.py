"""The serving kernels installed where dspark runs (`check --runtime`,
`dspark doctor`).

A draft with `fc_norm` is served right only by an engine whose kernels
include the segmented RMSNorm; an install without it loads the draft and
serves it without its norms. The package is found and read, never imported:
importing a serving kernel package pulls in torch, triton and CUDA.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from dspark.schema.findings import Finding

SERVING_KERNEL_PACKAGE = "tokenspeed_kernel"
# The module of the serving engine's segmented RMSNorm, and its name there.
SEGMENTED_RMSNORM_MODULE = ("ops", "layernorm", "triton")
SEGMENTED_RMSNORM = "segmented_rmsnorm"


@dataclass(frozen=True)
class ServingKernels:
    package: str
    installed: bool
    location: str | None = None  # the package folder
    module: str | None = None  # the layernorm module's file, when it exists
    has_segmented_rmsnorm: bool = False

    @property
    def module_name(self) -> str:
        return ".".join((self.package, *SEGMENTED_RMSNORM_MODULE))

    def describe(self) -> str:
        if not self.installed:
            return f"{self.package} is not installed"
        if self.module is None:
            return f"{self.package} at {self.location} has no {self.module_name}"
        state = "exposes" if self.has_segmented_rmsnorm else "does not expose"
        return f"{self.module_name} ({self.module}) {state} {SEGMENTED_RMSNORM}"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "module_name": self.module_name}


def probe_serving_kernels(package: str = SERVING_KERNEL_PACKAGE) -> ServingKernels:
    """Find `package` and read (not import) its layernorm module for a
    top-level `segmented_rmsnorm` (a function, an assignment or an import)."""
    try:
        spec = importlib.util.find_spec(package)  # a top-level name: imports nothing
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return ServingKernels(package, False)
    folders = list(spec.submodule_search_locations or [])
    location = folders[0] if folders else spec.origin
    for folder in folders:
        base = Path(folder).joinpath(*SEGMENTED_RMSNORM_MODULE)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return ServingKernels(package, True, str(folder), str(candidate), _defines(candidate, SEGMENTED_RMSNORM))
    return ServingKernels(package, True, location)


def _defines(path: Path, name: str) -> bool:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[-1]) == name for alias in node.names):
                return True
    return False


def runtime_findings(fc_norm: bool, kernels: ServingKernels) -> list[Finding]:
    findings = [Finding(
        "RUN002",
        f"serving kernels here: {kernels.describe()}.",
        detail=kernels.to_dict(),
    )]
    if fc_norm and not kernels.has_segmented_rmsnorm:
        findings.append(Finding(
            "RUN001",
            f"the draft declares fc_norm, but {kernels.describe()}: the engine installed here would serve it "
            f"without its per-tap norms. Install a serving kernel package whose {kernels.module_name} "
            f"provides {SEGMENTED_RMSNORM}, or deploy where one is.",
            detail=kernels.to_dict(),
        ))
    return findings


def with_runtime_findings(report, kernels: ServingKernels | None = None):
    """`report` (a CheckReport) with what the installed serving kernels do to it."""
    kernels = probe_serving_kernels() if kernels is None else kernels
    extra = runtime_findings(bool(report.resolved.fc_norm), kernels)
    return dataclasses.replace(report, findings=[*report.findings, *extra])
