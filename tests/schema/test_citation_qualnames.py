"""Every citation of vLLM's, SGLang's and TokenSpeed's code names the
function (or class, or module-level name) that holds its lines:
`path::Qualified.name@version:lines`. Line numbers move with every release;
the name is how a reviewer finds the code again and what the fingerprint
check (converters/fingerprints.py) compares an installed engine by. A
citation that names no function is listed in UNNAMED with why.

Two ways a citation is written, both checked: a `Source` the profiles hold
(walked by schema/engines/citations.py), and a `Source` a config rule builds
when it runs, which no walk reaches: those are found in the code, as calls
to `Source` or to a helper returning one, and checked for a qualname there."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path
from typing import Iterator

import pytest

import dspark.schema
from dspark.schema.engines.base import Source
from dspark.schema.engines.citations import engine_sources

ENGINES = ("vllm", "sglang", "tokenspeed")
SCHEMA = Path(dspark.schema.__file__).parent

_MODULE_IMPORT = ("module-level code: the import of kimi_k3_dspark.py that tells an installed TokenSpeed "
                  "revision from another (revisions.py reads which module it imports)")
_ABSENCE = "cites what the file does not hold: no function holds it"

# (the module under schema/ that writes the citation, its lines as written): why it names no function.
UNNAMED: dict[tuple[str, str], str] = {
    ("engines/tokenspeed/common.py", "(never read)"): _ABSENCE + " (no model reads norm_before_residual)",
    ("engines/tokenspeed/k3_dspark.py", "(no fc_norm)"): _ABSENCE + " (main builds no fc_norm)",
    ("engines/tokenspeed/k3_dspark.py", "(prefix capture only)"): _ABSENCE + " (main has no stream resolver)",
    ("engines/tokenspeed/revisions.py", "62"): _MODULE_IMPORT,
    ("engines/tokenspeed/revisions.py", "37-66 (no such import)"): _MODULE_IMPORT,
    ("engines/tokenspeed/revisions.py", "43"): _MODULE_IMPORT,
    ("engines/tokenspeed/revisions.py", "59"): _MODULE_IMPORT,
    ("engines/tokenspeed/revisions.py", "(not defined; models/kimi_k3_dspark.py:421-436 hands the top level's)"):
        _ABSENCE + " (the drafter defines no stream resolver)",
    ("engines/tokenspeed/revisions.py", "(not read)"): _ABSENCE + " (the drafter never reads the stream field)",
}


def _source_builders(module) -> dict[str, list[str]]:
    """The names in `module` that build a Source, each with its parameters
    in order: `Source` itself and every function returning one that takes
    a qualname."""
    builders = {}
    for name, value in vars(module).items():
        if value is Source:
            builders[name] = [field.name for field in dataclasses.fields(Source)]
        elif inspect.isfunction(value):
            signature = inspect.signature(value)
            if signature.return_annotation in (Source, "Source") and "qualname" in signature.parameters:
                builders[name] = list(signature.parameters)
    return builders


def _strings(node: ast.expr) -> list[str]:
    """The strings a lines argument can be: a literal, either branch of a
    conditional, else its source."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return [ast.unparse(node)]


def unnamed_calls() -> Iterator[tuple[str, int, str]]:
    """(module under schema/, line, lines as written) of every call that
    builds a Source without a qualname (none passed, or a literal "")."""
    for path in sorted(SCHEMA.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        relative = path.relative_to(SCHEMA).as_posix()
        module = importlib.import_module("dspark.schema." + relative.removesuffix(".py").replace("/", "."))
        builders = _source_builders(module)
        if not builders:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in builders):
                continue
            arguments = dict(zip(builders[node.func.id], node.args))
            arguments.update({keyword.arg: keyword.value for keyword in node.keywords if keyword.arg})
            qualname = arguments.get("qualname")
            if qualname is None or (isinstance(qualname, ast.Constant) and not qualname.value):
                lines = arguments.get("lines")
                for text in _strings(lines) if lines is not None else ["?"]:
                    yield relative, node.lineno, text


def test_every_citation_written_in_the_code_names_its_function():
    unnamed = [f"schema/{module}:{line}: lines {text!r}" for module, line, text in unnamed_calls()
               if (module, text) not in UNNAMED]
    assert not unnamed, ("a citation without `::Qualified.name` (pass the qualname of the function whose body "
                         "holds the lines, or list it in UNNAMED with why):\n" + "\n".join(unnamed))


@pytest.mark.parametrize("engine", ENGINES)
def test_every_citation_a_profile_holds_names_its_function(engine):
    allowed = {text for _, text in UNNAMED}
    unnamed = [source.cite() for source in engine_sources(engine)
               if source.path.endswith(".py") and not source.qualname and source.lines not in allowed]
    assert not unnamed, "\n".join(unnamed)


def test_every_unnamed_citation_listed_is_still_written():
    written = {(module, text) for module, _, text in unnamed_calls()}
    walked = {source.lines for engine in ENGINES for source in engine_sources(engine) if not source.qualname}
    stale = [key for key in UNNAMED if key not in written and key[1] not in walked]
    assert not stale, f"UNNAMED lists citations no longer written: {stale}"


def test_a_qualname_is_never_written_into_the_path():
    inside = [source.cite() for engine in ENGINES for source in engine_sources(engine) if "::" in source.path]
    assert not inside, inside
