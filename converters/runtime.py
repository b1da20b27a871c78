"""The serving engine installed where dspark runs, judged (`check --runtime`,
`gate` with `runtime = true`, `dspark doctor`).

`converters/engine_install.py` finds the engine and tells its revision from
its files; this module judges a draft with that revision's profile, exactly
as `--engine NAME@REV` would, and adds what the install itself does to it:
whether the engine's K3 DSpark model can import its segmented RMSNorm. An
engine whose module-top import fails does not start at all, whatever it is
asked to serve: it imports every model module when it starts
(python/tokenspeed/runtime/models/registry.py@5f1e48b5:90-101, 123).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.converters.engine_install import (
    DETECTORS,
    ENGINE_PATH_ENV,
    InstalledEngine,
    KernelInstall,
    engine_path_from,
    show_value,
    find_installed_engines,
)
from dspark.schema.engines import DEFAULT_ENGINE, engine_by_spec
from dspark.schema.engines.tokenspeed import revisions as ts
from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding

_REVISION_NAMES = {
    "0.1.1": "TokenSpeed 0.1.1, the PyPI release",
    "0.1.0": "TokenSpeed 0.1.0, the first PyPI release (no K3 DSpark model)",
    "main": f"TokenSpeed main ({ts.MAIN})",
    "pr1016": f"the head of pull request 1016 ({ts.PR1016})",
    "pr1031": f"the head of pull request 1031 ({ts.PR1031})",
}


@dataclass(frozen=True)
class Runtime:
    """What is installed here and the profile a draft is judged with."""

    engines: tuple[InstalledEngine, ...]
    engine_path: str | None = None

    @property
    def serving(self) -> InstalledEngine | None:
        """The engine judged: the first of the detection table found."""
        return self.engines[0] if self.engines else None

    @property
    def profile(self) -> str:
        serving = self.serving
        if serving is None:
            return DEFAULT_ENGINE.spec
        if serving.profile is None:
            # an unknown release is still that engine: never another engine's verdict
            return engine_by_spec(serving.distribution).spec
        return serving.profile

    @property
    def kernel(self) -> KernelInstall | None:
        return self.serving.kernel if self.serving is not None else None

    @property
    def starts(self) -> bool:
        """False when the engine's K3 DSpark model cannot import its kernel."""
        serving = self.serving
        return serving is None or serving.kernel is None or serving.kernel.importable

    def to_dict(self) -> dict[str, Any]:
        return {"engines": [e.to_dict() for e in self.engines], "profile": self.profile,
                "engine_path": self.engine_path}


def probe_runtime(engine_path: Path | str | None = None, environ=None) -> Runtime:
    """Find the serving engine installed here (or under `engine_path`, else
    DSPARK_ENGINE_PATH)."""
    path = engine_path_from(engine_path, environ)
    return Runtime(tuple(find_installed_engines(path)), str(path) if path is not None else None)


def runtime_engine(runtime: Runtime, engine: str | None, *, named_by: str = "--engine") -> str:
    """The profile `check --runtime` judges with. An `--engine` (or a
    policy's `engine`, `named_by`) that names another engine than the one
    installed is a usage error: the two questions have different answers."""
    profile = runtime.profile
    if engine and engine_by_spec(engine).spec != engine_by_spec(profile).spec:
        installed = runtime.serving.describe() if runtime.serving else "no serving engine"
        raise UsageError(
            f"{named_by} {engine} and --runtime disagree: the engine installed here ({installed}) is judged as "
            f"{profile}.",
            hint=f"Drop {named_by} to judge the installed engine, or --runtime to judge the one named.",
        )
    return profile


def describe_kernel(runtime: Runtime) -> str:
    serving = runtime.serving
    if serving is None:
        return "no serving engine installed here"
    kernel = serving.kernel
    if kernel is None:
        if serving.missing:
            return f"{serving.describe()}: unknown, its K3 DSpark model's files are not there to read"
        if serving.distribution == "tokenspeed":
            return (f"{serving.describe()}: its K3 DSpark model imports no {ts.KERNEL_FUNCTION} "
                    f"(it builds no fc_norm)")
        return f"{serving.describe()}: dspark reads no {ts.KERNEL_FUNCTION} for this engine"
    where = "engine-local" if kernel.module.startswith(serving.distribution + ".") else (
        f"from the {kernel.module.split('.')[0]} package")
    if kernel.importable:
        return f"{ts.KERNEL_FUNCTION} from {kernel.module} ({kernel.file}; {where}), imported at {kernel.import_site}"
    return (f"{kernel.import_site} imports {ts.KERNEL_FUNCTION} from {kernel.module} ({where}), and "
            f"{kernel.why_missing}")


def runtime_findings(runtime: Runtime, *, family: str | None, environ=None) -> list[Finding]:
    findings: list[Finding] = []
    serving = runtime.serving
    if serving is None:
        looked = ", ".join(d.distribution for d in DETECTORS)
        where = f" under {runtime.engine_path}" if runtime.engine_path else (
            f" (looked for {looked} on this Python's path; name a folder with --engine-path or {ENGINE_PATH_ENV})")
        findings.append(Finding(
            "RUN005",
            f"no serving engine is installed here{where}: the draft was judged with the default profile, "
            f"{DEFAULT_ENGINE.spec}, not with what this machine would run.",
            detail=runtime.to_dict(),
        ))
        return findings
    for other in runtime.engines[1:]:
        findings.append(Finding(
            "RUN003",
            f"{other.describe()} is installed too; {serving.distribution} comes first and was judged.",
            detail=other.to_dict(),
        ))
    if serving.profile is None:
        findings.append(Finding(
            "RUN004",
            f"{serving.describe()} is installed, but {serving.note}: the draft was judged with "
            f"{runtime.profile}, the newest {serving.distribution} release dspark models, which may not be what "
            "this machine would run. Reinstall the engine, or name the release with --engine.",
            detail=serving.to_dict(),
        ))
    elif serving.functions is not None and not serving.exact:
        findings.append(_release_finding(serving))
    elif serving.exact:
        evidence = "; ".join(f"{e.what}: {show_value(e.value)} ({e.where()})" for e in serving.evidence)
        if serving.functions is not None:
            evidence = (f"its version, {serving.version}, and the source of all {len(serving.functions.same)} "
                        f"functions dspark's rules cite, {serving.revision}'s")
        name = _REVISION_NAMES.get(serving.revision or "", serving.profile)
        findings.append(Finding(
            "RUN003",
            f"{serving.describe()} is {name}, judged as --engine {serving.profile}"
            + (f". Read from its files: {evidence}." if evidence else "."),
            detail=serving.to_dict(),
        ))
    else:
        findings.append(Finding(
            "RUN004",
            f"{serving.describe()} matches no {'release' if serving.distribution != 'tokenspeed' else 'revision'} "
            f"dspark knows; judged as the nearest, --engine {serving.profile}. What differs: "
            f"{'; '.join(serving.differences)}.",
            detail=serving.to_dict(),
        ))
    if serving.list_changes:
        findings.append(_lists_finding(serving))
    findings.append(Finding("RUN002", f"serving kernels here: {describe_kernel(runtime)}.",
                            detail={"kernel": runtime.kernel.to_dict() if runtime.kernel else None,
                                    "engine": serving.profile}))
    if not runtime.starts:
        kernel = runtime.kernel
        fix = (f"Install a {ts.KERNEL_PACKAGE} whose {ts.KERNEL_WHEEL_MODULE} defines {ts.KERNEL_FUNCTION} "
               f"(the one pull request 1016 builds), or an engine with the kernel in its own tree (pull request 1031)"
               if kernel.module == ts.KERNEL_WHEEL_MODULE else "Reinstall the engine")
        findings.append(Finding(
            "RUN001",
            f"the engine installed here will not start: its K3 DSpark model ({kernel.import_site}) imports "
            f"{ts.KERNEL_FUNCTION} from {kernel.module} at module top, and {kernel.why_missing}. The engine "
            f"imports every model module when it starts ({ts.MODEL_IMPORT_SOURCE.cite()}), so it serves no "
            f"draft at all{', this ' + family + ' draft included' if family else ''}. {fix}.",
            detail={"kernel": kernel.to_dict(), "engine": serving.profile},
        ))
    return findings


def _release_finding(serving: InstalledEngine) -> Finding:
    """RUN006 or RUN007: an installed release judged as a modelled one whose
    cited functions were compared with it."""
    functions = serving.functions
    what = (f"{serving.describe()} is a build of {serving.distribution} {serving.revision}" if serving.modelled
            else f"{serving.describe()} is a release dspark does not model; the nearest it models is "
                 f"{serving.revision}")
    if functions.matches:
        return Finding(
            "RUN006",
            f"{what}, and all {len(functions.same)} functions dspark's rules cite have {serving.revision}'s source "
            f"there: judged as --engine {serving.profile}, and the verdict stands.",
            detail=serving.to_dict(),
        )
    differing = serving.differences
    return Finding(
        "RUN007",
        f"{what}, judged as --engine {serving.profile}; {len(differing)} of the functions dspark's rules cite "
        f"differ from {serving.revision}'s, so the rules read there may not hold: {'; '.join(differing)}. "
        + (f"Every cited function is {serving.same_as}'s: --engine {serving.distribution}@{serving.same_as} judges "
           f"it as that release. " if serving.same_as else "")
        + "Check the verdict against these functions, or waive RUN007 in the gate's policy once you have.",
        detail=serving.to_dict(),
    )


def _lists_finding(serving: InstalledEngine) -> Finding:
    """RUN008: what the installed engine registers, or lets capture, that
    the release it is judged as does not (read alike in both)."""
    from dspark.converters.engine_lists import WHAT

    def names(items: tuple[str, ...]) -> str:
        return ", ".join(items[:8]) + (f" and {len(items) - 8} more" if len(items) > 8 else "")

    parts = []
    for key, (added, removed) in serving.list_changes.items():
        said = ([f"{names(added)} added"] if added else []) + ([f"{names(removed)} gone"] if removed else [])
        parts.append(f"{WHAT[key]}: {'; '.join(said)}")
    return Finding(
        "RUN008",
        f"{serving.describe()} differs from {serving.distribution} {serving.revision} in what its files register "
        f"({', '.join(serving.lists.read_from)}): {'. '.join(parts)}. The draft was judged with the installed "
        "engine's lists.",
        detail={"engine": serving.profile, "lists_differ": serving.to_dict()["lists_differ"]},
    )


def installed_profile(runtime: Runtime, spec: str):
    """The profile `spec` names, with the installed engine's own lists of
    draft classes and capturing targets where they differ from its release's."""
    from dspark.converters.engine_lists import as_installed

    profile = engine_by_spec(spec)
    serving = runtime.serving
    if serving is None or not serving.list_changes or serving.profile != profile.spec:
        return profile
    return as_installed(profile, serving.list_changes)


def with_runtime_findings(report, runtime: Runtime | None = None):
    """`report` (a CheckReport, judged with `runtime.profile`) with what the
    installed engine does to it."""
    runtime = probe_runtime() if runtime is None else runtime
    extra = runtime_findings(runtime, family=report.resolved.family)
    return dataclasses.replace(report, findings=[*report.findings, *extra])


def check_with_runtime(path, *, engine: str | None = None, engine_path: Path | str | None = None,
                       runtime: Runtime | None = None, named_by: str = "--engine", **options):
    """`check_checkpoint` judged by the engine installed here: its
    revision's profile, then the install's own findings. `engine`, when
    given (by `named_by`), must be the installed engine's profile."""
    from dspark.converters.check import check_checkpoint

    runtime = probe_runtime(engine_path) if runtime is None else runtime
    spec = runtime_engine(runtime, engine, named_by=named_by)
    report = check_checkpoint(path, engine=installed_profile(runtime, spec), **options)
    return with_runtime_findings(report, runtime)
