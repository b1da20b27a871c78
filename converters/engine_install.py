"""The serving engine installed where dspark runs, and which revision it is.

An engine is found as Python finds it (`importlib.util.find_spec` of its
top-level package, which imports nothing) or in a folder the caller names
(`--engine-path`, `DSPARK_ENGINE_PATH`): a site-packages-like folder holding
the package, or the package folder itself. Its files are read, never
imported: importing a serving engine pulls in torch, triton and CUDA.

The detection is a table, `DETECTORS`: one row per distribution (the name
pip installs), in the order they are tried, each saying which package to
find and how to tell its release. A release is told by its dist-info version
and the fingerprints of the functions dspark's rules cite
(converters/fingerprints.py; the table of each modelled release is
schema/engines/<engine>/fingerprints.py): the version's release (a
post-release or local build: its base) when they match, else the same
engine's nearest modelled release with what differs named. A file the
release holds cited code in that is not there is no evidence: such a tree is
an unknown release. TokenSpeed's git snapshots all install as 0.1.0, so a
0.1.0 whose functions are not the release's is told by the facts of
schema/engines/tokenspeed/revisions.py.

Why this module is long: telling a release takes three readings that feed
one `InstalledEngine` (the version with the cited functions' fingerprints,
TokenSpeed's git-snapshot facts, and the kernel its K3 model imports); split,
each would import the others' result types.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping

from dspark.converters.engine_lists import EngineLists, differences, read_engine_lists, recorded_lists
from dspark.converters.engine_versions import nearest_release
from dspark.converters.fingerprints import Comparison, compare, hashes_in, holds_code, read_installed, split_function
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
    # The cited functions compared with `revision`'s recorded fingerprints
    # (converters/fingerprints.py); None where they were not compared.
    functions: Comparison | None = None
    # Where `functions` differ: another modelled release they all match.
    same_as: str | None = None
    # The version is a release dspark models (or a post-release or local
    # build of one): False when `revision` is only the nearest.
    modelled: bool = True
    # The draft classes and capturing targets read from its files
    # (converters/engine_lists.py), and where they differ from `revision`'s:
    # list -> (added, removed).
    lists: EngineLists | None = None
    list_changes: Mapping[str, tuple] = field(default_factory=dict)

    def describe(self) -> str:
        version = f" {self.version}" if self.version else " (version unknown)"
        return f"{self.distribution}{version} at {self.location}"

    def to_dict(self) -> dict:
        return {
            "distribution": self.distribution, "version": self.version, "location": self.location,
            "profile": self.profile, "revision": self.revision, "exact": self.exact,
            "evidence": [e.to_dict() for e in self.evidence], "differences": list(self.differences),
            "note": self.note or None, "kernel": self.kernel.to_dict() if self.kernel else None,
            "missing": list(self.missing), "modelled": self.modelled, "same_as": self.same_as,
            "functions": self.functions.to_dict() if self.functions is not None else None,
            "lists_differ": {key: {"added": list(added), "removed": list(removed)}
                             for key, (added, removed) in self.list_changes.items()},
        }


@dataclass(frozen=True)
class EngineDetector:
    distribution: str  # the name pip installs, as importlib.metadata knows it
    package: str  # its top-level import name
    # (package folder, version, root folder or None) -> what it is
    identify: Callable[[Path, str | None, Path | None], InstalledEngine]


# ---------------------------------------------------------------------------
# Releases told by their version and the fingerprints of the functions cited


def recorded_fingerprints(distribution: str) -> Mapping[str, Mapping[str, str | None]]:
    """release -> {function: fingerprint} for each release dspark models
    (schema/engines/<engine>/fingerprints.py, generated from the wheels and
    stored as deltas between neighbours: each release's whole table here)."""
    from dspark.schema.engines.fingerprint_tables import fingerprints_of

    return fingerprints_of(importlib.import_module(f"dspark.schema.engines.{distribution}.fingerprints"))


@dataclass(frozen=True)
class ReleaseReading:
    """An installed package read against the recorded releases."""

    release: str | None  # the release it is judged as; None: unknown
    modelled: bool  # the version is that release (or its post/local build)
    comparison: Comparison | None
    missing: tuple[str, ...]  # files the release holds cited code in that are not here (or not Python)
    # Another modelled release whose cited functions these all are, if one.
    same_as: str | None = None


def read_release(distribution: str, package: Path, version: str | None) -> ReleaseReading:
    """Which modelled release an installed package is: its version's (a
    post-release or local build is its base release), else the nearest of the
    same engine; and its cited functions compared with that release's. The
    files are read, never imported. A file the release holds cited code in
    that is not here is no evidence of anything: the release is unknown."""
    table = recorded_fingerprints(distribution)
    functions = list(next(iter(table.values())))
    read = read_installed(package.parent)
    texts: dict[str, str | None] = {}
    for function in functions:
        path, _ = split_function(function)
        if path not in texts:
            texts[path] = read(path)
    readable = {path for path, text in texts.items() if holds_code(text)}
    installed = hashes_in(lambda path: texts.get(path) if path in readable else None, functions)
    comparisons = {release: compare(installed, hashes, readable, release) for release, hashes in table.items()}
    if version:
        release, modelled = nearest_release(version, {r: r for r in table})
    else:  # no version to go by: the release whose functions these are, if one
        release = min(table, key=lambda r: (len(comparisons[r].unreadable), len(comparisons[r].differing),
                                            list(table).index(r)))
        modelled = False
    comparison = comparisons[release] if release else None
    if comparison is not None and not modelled and readable and comparison.unreadable:
        # a release dspark does not model may have moved or dropped a file:
        # what it lacks of the nearest release's cited code differs from it
        comparison = dataclasses.replace(comparison, gone=(*comparison.gone, *comparison.unreadable),
                                         unreadable=())
    missing = tuple(sorted({str(package.parent / split_function(f)[0]) for f in comparison.unreadable})) \
        if comparison else ()
    if not readable or missing:
        return ReleaseReading(None, modelled, comparison, missing or tuple(str(package.parent / p) for p in texts))
    same_as = next((r for r, c in comparisons.items() if r != release and c.matches), None)
    return ReleaseReading(release, modelled, comparison, (), None if comparison.matches else same_as)


def _unknown_note(missing: tuple[str, ...]) -> str:
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return (f"its {shown} {'is' if len(missing) == 1 else 'are'} not there, empty or not Python (an empty or "
            "partial install), so which release it is cannot be told")


def _by_release(distribution: str, package: Path, version: str | None, reading: ReleaseReading) -> InstalledEngine:
    """An InstalledEngine for a package read against the recorded releases."""
    if reading.release is None:
        return InstalledEngine(distribution, version, str(package), None, exact=False, missing=reading.missing,
                               functions=reading.comparison, modelled=reading.modelled,
                               note=_unknown_note(reading.missing))
    comparison = reading.comparison
    return InstalledEngine(
        distribution, version, str(package), f"{distribution}@{reading.release}", revision=reading.release,
        exact=reading.modelled and comparison.matches, functions=comparison, modelled=reading.modelled,
        differences=tuple(comparison.describe()), same_as=reading.same_as)


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


def identify_tokenspeed(package: Path, version: str | None, root: Path | None) -> InstalledEngine:
    # A release (0.1.1, 0.1.0) is told by its version and its cited
    # functions. The git snapshots install as 0.1.0 too (python/pyproject.toml
    # at each), so a 0.1.0 whose functions are not 0.1.0's, or a tree without
    # a version, is told by the facts of revisions.py.
    reading = read_release("tokenspeed", package, version)
    release = reading.release
    if release is not None and reading.comparison.matches:
        return _with_kernel(_by_release("tokenspeed", package, version, reading), package, root)
    if version and version != ts.RELEASE_WITHOUT_K3:
        # no git snapshot installs as this version: a release dspark does not
        # model (judged by the nearest), a build of one whose functions differ,
        # or a partial tree (unknown)
        return _with_kernel(_by_release("tokenspeed", package, version, reading), package, root)
    # main's facts are all absences (no kernel import, no fc_norm, no
    # resolver), so an empty package would match main exactly: a file that
    # is not there, or does not parse, is no evidence of any revision.
    missing = tuple(str(package / name) for name in sorted({fp.file for fp in ts.FINGERPRINTS})
                    if not _holds_its_code(package / name))
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


def _with_kernel(engine: InstalledEngine, package: Path, root: Path | None) -> InstalledEngine:
    """The segmented RMSNorm a release's K3 DSpark model imports, found."""
    model = parse_file(package / ts.K3_MODEL_FILE)
    module, line = import_of(model, ts.KERNEL_FUNCTION)
    if module is None:
        return engine
    revision = engine.revision if module == _call_module(engine.revision or "") else _revision_for_module(str(module))
    kernel = _kernel_install(str(module), f"{package / ts.K3_MODEL_FILE}:{line}", package, root, revision)
    return dataclasses.replace(engine, kernel=kernel, has_kernel_import=True)


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


def _by_version(distribution: str) -> Callable[[Path, str | None, Path | None], InstalledEngine]:
    def identify(package: Path, version: str | None, root: Path | None) -> InstalledEngine:
        return _by_release(distribution, package, version, read_release(distribution, package, version))

    return identify


# Tried in this order; the first found is the engine judged.
DETECTORS: tuple[EngineDetector, ...] = (
    EngineDetector("tokenspeed", "tokenspeed", identify_tokenspeed),
    EngineDetector("vllm", "vllm", _by_version("vllm")),
    EngineDetector("sglang", "sglang", _by_version("sglang")),
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
        engine = detector.identify(folders[0], _version(detector.distribution, root), root)
        recorded = recorded_lists(engine.distribution, engine.revision) if engine.profile else None
        if recorded is not None:
            lists = read_engine_lists(engine.distribution, folders[0])
            engine = dataclasses.replace(engine, lists=lists, list_changes=differences(lists, recorded))
        found.append(engine)
    return found
