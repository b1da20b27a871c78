"""The serving engine installed where dspark runs, and which revision it is.

An engine is found as Python finds it (`importlib.util.find_spec` of its
top-level package, which imports nothing) or in a folder the caller names
(`--engine-path`, `DSPARK_ENGINE_PATH`): a site-packages-like folder holding
the package, or the package folder itself. Its files are read, never
imported: importing a serving engine pulls in torch, triton and CUDA.

The detection is a table, `DETECTORS`: one row per distribution (the name
pip installs), in the order they are tried, each saying which package to
find and how to tell its revision. TokenSpeed installs as 0.1.0 at every
revision dspark knows, so its code decides: the fingerprints of
schema/engines/tokenspeed/revisions.py are read from its files. vLLM and
SGLang are told by their distribution version.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping

from dspark.converters.engine_versions import nearest_release
from dspark.converters.python_source import (
    attribute_assigned,
    defines,
    function_defined,
    import_of,
    parse_file,
    top_level,
    string_used,
)
from dspark.schema.engines.tokenspeed import revisions as ts
from dspark.schema.errors import UsageError

ENGINE_PATH_ENV = "DSPARK_ENGINE_PATH"


@dataclass(frozen=True)
class Evidence:
    """One fingerprint as read from the installed files."""

    name: str
    what: str
    file: str  # the installed file read (absolute), or the path it was looked for at
    line: int | None  # where the fact sits; None when it is absent
    value: object
    # revision -> (value there, where it was read)
    known: Mapping[str, tuple[object, str]] = field(default_factory=dict)

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else f"{self.file} (absent)"

    def to_dict(self) -> dict:
        return {"name": self.name, "what": self.what, "file": self.file, "line": self.line, "value": self.value,
                "known": {rev: {"value": value, "source": source} for rev, (value, source) in self.known.items()}}


@dataclass(frozen=True)
class KernelInstall:
    """The segmented RMSNorm the installed engine's K3 DSpark model imports."""

    module: str  # the dotted module the model imports it from
    import_site: str  # file:line of the model's import
    file: str | None  # the module's installed file; None: not found
    root: str | None  # the folder to put on sys.path to import `module`
    defines: bool  # the file defines (or imports) segmented_rmsnorm at top level
    revision: str | None  # the revision whose call convention applies
    why_missing: str = ""  # when not `defines`: what is missing, in words

    @property
    def importable(self) -> bool:
        return self.defines

    def to_dict(self) -> dict:
        return {"module": self.module, "import_site": self.import_site, "file": self.file, "root": self.root,
                "defines_segmented_rmsnorm": self.defines, "revision": self.revision,
                "why_missing": self.why_missing or None}


@dataclass(frozen=True)
class InstalledEngine:
    distribution: str
    version: str | None
    location: str  # the package folder
    # The profile it is judged with (`tokenspeed@pr1031`); None: dspark models
    # no profile for it (the default profile judges instead).
    profile: str | None
    revision: str | None = None  # the known revision matched (or the nearest)
    exact: bool = True  # every fingerprint matched `revision`
    evidence: tuple[Evidence, ...] = ()
    differences: tuple[str, ...] = ()  # fingerprints that differ from `revision`, in words
    note: str = ""  # why there is no profile
    # The kernel its K3 DSpark model imports; None when it imports none (main).
    kernel: KernelInstall | None = None
    # False when the engine imports no segmented RMSNorm at all.
    has_kernel_import: bool = False
    # Files the revision is told from that are not there (or do not parse):
    # an empty or half-installed package, whose revision is unknown.
    missing: tuple[str, ...] = ()

    def describe(self) -> str:
        version = f" {self.version}" if self.version else " (version unknown)"
        return f"{self.distribution}{version} at {self.location}"

    def to_dict(self) -> dict:
        return {
            "distribution": self.distribution, "version": self.version, "location": self.location,
            "profile": self.profile, "revision": self.revision, "exact": self.exact,
            "evidence": [e.to_dict() for e in self.evidence], "differences": list(self.differences),
            "note": self.note or None, "kernel": self.kernel.to_dict() if self.kernel else None,
            "missing": list(self.missing),
        }


@dataclass(frozen=True)
class EngineDetector:
    distribution: str  # the name pip installs, as importlib.metadata knows it
    package: str  # its top-level import name
    # (package folder, version, root folder or None) -> what it is
    identify: Callable[[Path, str | None, Path | None], InstalledEngine]


# ---------------------------------------------------------------------------
# TokenSpeed


def _tokenspeed_facts(package: Path) -> dict[str, tuple[object, int | None, Path]]:
    """fingerprint name -> (value, line, file) read from the installed files."""
    model_file = package / ts.K3_MODEL_FILE
    drafter_file = package / ts.DRAFTER_FILE
    model, drafter = parse_file(model_file), parse_file(drafter_file)
    module, module_line = import_of(model, ts.KERNEL_FUNCTION)
    fc_norm_line = attribute_assigned(model, "fc_norm")
    resolver_line = function_defined(drafter, "_resolve_aux_hidden_stream")
    env_line = string_used(drafter, ts.STREAM_ENV_VAR)
    return {
        "kernel_import": (module, module_line, model_file),
        "fc_norm_built": (fc_norm_line is not None, fc_norm_line, model_file),
        "stream_resolver": (resolver_line is not None, resolver_line, drafter_file),
        "stream_env_read": (env_line is not None, env_line, drafter_file),
    }


def _nearest(observed: Mapping[str, object]) -> tuple[str, list[str]]:
    """The known revision most fingerprints match (ties: the newer), and
    the names of those that differ from it."""
    def differing(revision: str) -> list[str]:
        return [fp.name for fp in ts.FINGERPRINTS if fp.values[revision] != observed[fp.name]]

    best = min(ts.REVISIONS, key=lambda rev: (len(differing(rev)), ts.REVISIONS.index(rev)))
    return best, differing(best)


def show_value(value: object) -> str:
    """A fingerprint's value in words."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _holds_its_code(path: Path) -> bool:
    """Whether `path` is the engine's file and not a stub: it parses and
    defines something at the top (the K3 DSpark model file, its model
    class). An empty file parses, and would read as main's absences."""
    tree = parse_file(path)
    if tree is None:
        return False
    if path.name == Path(ts.K3_MODEL_FILE).name:
        return defines(path, "K3DSparkModel") is not None
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in top_level(tree))


def _is_release_without_k3(package: Path) -> bool:
    """TokenSpeed 0.1.0's files: its GQA DFlash and EAGLE-3 models and its
    drafter hold code, and no K3 DSpark model is there."""
    return (not (package / ts.K3_MODEL_FILE).exists()
            and all(_holds_its_code(package / name) for name in ts.RELEASE_WITHOUT_K3_FILES))


def identify_tokenspeed(package: Path, version: str | None, root: Path | None) -> InstalledEngine:
    # main's facts are all absences (no kernel import, no fc_norm, no
    # resolver), so an empty package would match main exactly: a file that
    # is not there, or does not parse, is no evidence of any revision.
    missing = tuple(str(package / name) for name in sorted({fp.file for fp in ts.FINGERPRINTS})
                    if not _holds_its_code(package / name))
    if version == ts.RELEASE_WITHOUT_K3 and _is_release_without_k3(package):
        # the first release ships no K3 DSpark model at all: its absence is
        # that release's fact, told with its version and the models it has
        return InstalledEngine(
            distribution="tokenspeed", version=version, location=str(package),
            profile=f"tokenspeed@{ts.RELEASE_WITHOUT_K3}", revision=ts.RELEASE_WITHOUT_K3,
            evidence=tuple(Evidence(name, f"its {name}", str(package / name), 1, True)
                           for name in ts.RELEASE_WITHOUT_K3_FILES))
    if missing:
        return InstalledEngine(
            distribution="tokenspeed", version=version, location=str(package), profile=None, exact=False,
            missing=missing,
            note=(f"its {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not there, empty or not "
                  "Python (an empty or partial install), so which release it is cannot be told"),
        )
    facts = _tokenspeed_facts(package)
    evidence = tuple(
        Evidence(fp.name, fp.what, str(facts[fp.name][2]), facts[fp.name][1], facts[fp.name][0],
                 {rev: (fp.values[rev], fp.cite(rev)) for rev in ts.REVISIONS})
        for fp in ts.FINGERPRINTS
    )
    observed = {name: value for name, (value, _, _) in facts.items()}
    revision, differing = _nearest(observed)
    by_name = {e.name: e for e in evidence}
    differences = tuple(
        f"{by_name[name].what}: {show_value(observed[name])} here ({by_name[name].where()}), "
        f"{show_value(by_name[name].known[revision][0])} at {revision} ({by_name[name].known[revision][1]})"
        for name in differing
    )
    module, line, model_file = facts["kernel_import"]
    kernel = None
    if module is not None:
        kernel = _kernel_install(str(module), f"{model_file}:{line}", package, root,
                                 revision if module == _call_module(revision) else _revision_for_module(str(module)))
    return InstalledEngine(
        distribution="tokenspeed", version=version, location=str(package), profile=f"tokenspeed@{revision}",
        revision=revision, exact=not differing, evidence=evidence, differences=differences,
        kernel=kernel, has_kernel_import=module is not None,
    )


def _call_module(revision: str) -> str | None:
    call = ts.KERNEL_CALLS.get(revision)
    return call.module if call else None


def _revision_for_module(module: str) -> str | None:
    return next((rev for rev, call in ts.KERNEL_CALLS.items() if call.module == module), None)


def _kernel_install(module: str, import_site: str, engine_package: Path, root: Path | None,
                    revision: str | None) -> KernelInstall:
    """Find `module`'s file as Python would import it: inside the engine's
    own package, or in another installed package (found, not imported)."""
    head, *rest = module.split(".")
    if head == engine_package.name:
        folders = [engine_package]
    elif root is not None and (root / head).is_dir():
        folders = [root / head]
    else:
        folders = _package_folders(head)
    if not folders:
        return KernelInstall(module, import_site, None, None, False, revision,
                             f"{head} is not installed")
    for folder in folders:
        base = folder.joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                found = defines(candidate, ts.KERNEL_FUNCTION) is not None
                return KernelInstall(module, import_site, str(candidate), str(folder.parent), found, revision,
                                     "" if found else f"{candidate} has no top-level {ts.KERNEL_FUNCTION}")
    return KernelInstall(module, import_site, None, str(folders[0].parent), False, revision,
                         f"{head} at {folders[0]} has no {module}")


def _package_folders(name: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(name)  # a top-level name: imports nothing
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    folders = [Path(folder) for folder in (spec.submodule_search_locations or [])]
    if not folders and spec.origin:
        folders = [Path(spec.origin).parent]
    return folders


# ---------------------------------------------------------------------------
# engines told by their version


def _by_version(distribution: str, versions: Mapping[str, str]) -> Callable[[Path, str | None, Path | None], InstalledEngine]:
    def identify(package: Path, version: str | None, root: Path | None) -> InstalledEngine:
        known = ", ".join(f"{distribution}=={v}" for v in versions)
        release, same = nearest_release(version, versions)
        if release is None:
            return InstalledEngine(distribution, version, str(package), None, note=f"dspark models {known} only")
        from dspark.schema.engines import engine_by_spec

        try:
            spec = engine_by_spec(versions[release]).spec
        except UsageError:
            return InstalledEngine(distribution, version, str(package), None,
                                   note=f"dspark has no {versions[release]!r} engine profile in this install")
        if same:
            return InstalledEngine(distribution, version, str(package), spec, revision=release)
        # Never another engine's verdict: the same engine's nearest release
        # judges, and the report says the two were not compared.
        return InstalledEngine(distribution, version, str(package), spec, revision=release, exact=False,
                               differences=(f"dspark models {known} only; {distribution} "
                                            f"{version or '(version unknown)'} is judged as {release}, the "
                                            "nearest, without comparing what changed between the two",))

    return identify


# Tried in this order; the first found is the engine judged.
DETECTORS: tuple[EngineDetector, ...] = (
    EngineDetector("tokenspeed", "tokenspeed", identify_tokenspeed),
    EngineDetector("vllm", "vllm", _by_version("vllm", {f"0.{n}.0": f"vllm@0.{n}.0" for n in (33, 32, 31, 30)})),
    EngineDetector("sglang", "sglang", _by_version("sglang", {f"0.5.{n}": f"sglang@0.5.{n}" for n in (23, 22, 21, 20)})),
)


# ---------------------------------------------------------------------------
# finding them


def engine_path_from(flag: Path | str | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder named by `--engine-path`, else by DSPARK_ENGINE_PATH; it
    must exist."""
    environ = os.environ if environ is None else environ
    if flag is not None:
        where, path = "--engine-path", Path(flag)
    elif environ.get(ENGINE_PATH_ENV):
        where, path = ENGINE_PATH_ENV, Path(environ[ENGINE_PATH_ENV])
    else:
        return None
    if not path.is_dir():
        raise UsageError(f"{where} {path}: not a folder.",
                         hint="Name the site-packages folder the engine is installed in, or its package folder.")
    return path


def _version(distribution: str, root: Path | None) -> str | None:
    if root is not None:
        for dist in metadata.distributions(path=[str(root)]):
            if (dist.metadata.get("Name") or "").lower().replace("_", "-") == distribution:
                return dist.version
        return _source_tree_version(distribution, root / "pyproject.toml")
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _source_tree_version(distribution: str, pyproject: Path) -> str | None:
    """The version a source checkout declares (its python/ folder named as
    the engine path holds pyproject.toml beside the package)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the `tomli` backport, a dependency there
        import tomli as tomllib
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(project, dict) or str(project.get("name", "")).lower().replace("_", "-") != distribution:
        return None
    version = project.get("version")
    return version if isinstance(version, str) else None


def find_installed_engines(engine_path: Path | None = None) -> list[InstalledEngine]:
    """Every engine of `DETECTORS` installed here (or in `engine_path`), in
    the table's order."""
    found = []
    for detector in DETECTORS:
        root = None
        if engine_path is not None:
            if (engine_path / detector.package).is_dir():
                root, folders = engine_path, [engine_path / detector.package]
            elif engine_path.name == detector.package:
                root, folders = engine_path.parent, [engine_path]
            else:
                continue
        else:
            folders = _package_folders(detector.package)
        if not folders:
            continue
        found.append(detector.identify(folders[0], _version(detector.distribution, root), root))
    return found
