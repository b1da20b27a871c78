"""Project-level promises: the README documents what the code does, CI runs
what the README says, and the floors of the package only import downward."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

from dspark.schema.findings import FINDING_CODES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# Each floor may import only the floors listed for it (DESIGN §4).
ALLOWED_IMPORTS = {
    "schema": {"schema"},
    "converters": {"schema", "converters"},
    "kernels": {"schema", "converters", "kernels"},
    "cli": {"schema", "converters", "kernels", "cli"},
    "examples": {"schema", "examples"},
}


def test_the_codes_page_documents_every_finding_code_with_its_severity():
    codes_page = (ROOT / "docs" / "codes.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| `([A-Z]{3}\d{3})` \| (\w+) \|", codes_page, flags=re.M))
    expected = {code: spec.severity.value for code, spec in FINDING_CODES.items()}
    assert documented == expected


def _fenced_commands(text: str) -> list[str]:
    return [line.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S) for line in block.splitlines()]


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in _fenced_commands(README) if "pytest" in c)
    ci_lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # The README chains the steps with && on one line; CI runs them one per line.
    assert " && ".join(ci_lines[-3:]) == test_command


def test_the_readme_ci_command_reads_every_value():
    """A header-only gate cannot see NaN, Inf or lost weights: every gate
    command the README gives reads the payloads."""
    gates = [c for c in _fenced_commands(README) if c.startswith("dspark check") and "--strict" in c]
    assert gates
    for command in gates:
        assert "--deep" in command.split() or "--verify" in command.split(), command


def _guarantee_bullets() -> list[str]:
    section = README.split("## What the gate guarantees", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


def test_every_gate_guarantee_names_tests_that_exist():
    """Each bullet of "What the gate guarantees" cites its tests as
    `tests/file.py::test_name`, `::test_name` (same file as the one before)
    or `tests/file.py` followed by bare `test_name`s."""
    bullets = _guarantee_bullets()
    assert bullets
    for bullet in bullets:
        cited, current = [], None
        for token in re.findall(r"`([^`]+)`", bullet):
            path, _, name = token.partition("::")
            if path.startswith("tests/") and path.endswith(".py"):
                current = path
            if name or (not path.startswith("tests/") and re.fullmatch(r"test_\w+", path)):
                assert current, f"{token!r} cites no file: {bullet}"
                cited.append((current, name or path))
        assert cited, f"no test cited: {bullet}"
        for file, name in cited:
            source = (ROOT / file).read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, flags=re.M), f"{file}::{name} does not exist"


def test_readme_first_command_runs_the_bundled_example():
    first = _fenced_commands(README)[0]
    assert "dspark check examples/tiny-k3-dspark" in first
    assert (ROOT / "examples" / "tiny-k3-dspark" / "config.json").is_file()


def _dspark_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    floors = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "dspark" and len(parts) > 1:
                floors.add(parts[1])
    return floors


@pytest.mark.parametrize("floor", sorted(ALLOWED_IMPORTS))
def test_imports_run_one_way(floor):
    offenders = {
        str(path.relative_to(ROOT)): sorted(_dspark_imports(path) - ALLOWED_IMPORTS[floor])
        for path in (ROOT / floor).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_schema_opens_no_file():
    for path in (ROOT / "schema").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert "open(" not in source.replace("# open(", ""), path


# --------------------------------------------------------------------------
# The module graph: no cycles, at any distance


MODULE_ROOT = "dspark"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([MODULE_ROOT, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for floor in ALLOWED_IMPORTS for path in (ROOT / floor).rglob("*.py")}


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is a module of ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The dspark modules `path` imports. Every import counts, wherever it
    stands: at the top, inside a function, under `TYPE_CHECKING`. A
    deferred import only moves a cycle's failure from import time to call
    time; the two modules still cannot be understood, tested or moved one
    without the other. A registry's import by name (`"dspark.x.y:func"`,
    or the module's full name as a string) counts too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from package import module` imports the module, not only the package
            targets.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            by_name = re.fullmatch(r"(dspark(?:\.\w+)+)(?::\w+)?", node.value)
            if by_name and by_name.group(1) in modules:
                targets.add(by_name.group(1))
    found = {_known(target, modules) for target in targets}
    return {module for module in found if module and module != name}


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports_of(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_two_modules_import_each_other():
    """Within a floor and across floors, at any distance (a -> b -> c -> a)."""
    assert _cycles(_import_graph()) == []


def test_the_cycle_test_sees_deferred_and_by_name_imports():
    graph = _import_graph()
    # inside a function: check verifies a manifest only when there is one
    assert "dspark.converters.writers.manifest" in graph["dspark.converters.check"]
    # by name: the reader registry imports a reader when its format is opened
    assert "dspark.converters.readers.dcp" in graph["dspark.converters.readers"]
    # relative: the kernels import each other with `from .smoke import ...`
    assert "dspark.kernels.smoke" in graph["dspark.kernels.smoke_checkpoint"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# --------------------------------------------------------------------------
# Module size


LONG_MODULE_LINES = 450
LONG_MODULE_REASON = "Why this module is long:"


@pytest.mark.parametrize("floor", ["schema", "converters", "cli"])
def test_a_long_module_says_why_at_its_top(floor):
    """A module over ~450 lines does several jobs, or says in its docstring
    (`Why this module is long: ...`) why it is one."""
    unexplained = {
        str(path.relative_to(ROOT)): length
        for path in (ROOT / floor).rglob("*.py")
        if (length := len(path.read_text(encoding="utf-8").splitlines())) > LONG_MODULE_LINES
        and LONG_MODULE_REASON not in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")
    }
    assert unexplained == {}


# --------------------------------------------------------------------------
# Packaging: what the wheel holds


def _setuptools_config() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the check needs no third-party parser
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Every folder with an __init__.py under the top-level folders, by package name."""
    return {
        _module_name(init): init.parent for floor in ALLOWED_IMPORTS for init in (ROOT / floor).rglob("__init__.py")
    }


def test_every_package_folder_is_in_the_wheel():
    """setuptools packages only the listed packages: a subpackage left off
    the list is missing from a wheel while an editable install still finds it."""
    config = _setuptools_config()
    assert sorted(config["packages"]) == sorted(_package_folders())
    assert config["package-dir"] == {f"{MODULE_ROOT}.{floor}": floor for floor in ALLOWED_IMPORTS}


def test_every_folder_with_python_code_is_a_package():
    for floor in ALLOWED_IMPORTS:
        for folder in [ROOT / floor, *(p for p in (ROOT / floor).rglob("*") if p.is_dir())]:
            if folder.name != "__pycache__" and any(folder.glob("*.py")):
                assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)} has code but no __init__.py"


def test_every_data_file_is_package_data():
    """Files the code reads at run time (the families' JSON Schemas, the
    bundled example) are in the wheel: each is matched by a package-data
    pattern of the package folder above it."""
    config = _setuptools_config()
    packages = _package_folders()
    data_files = [
        path for floor in ALLOWED_IMPORTS for path in (ROOT / floor).rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    ]
    assert any(p.name.endswith(".schema.json") for p in data_files)
    assert any("tiny-k3-dspark" in p.parts for p in data_files)
    unshipped = []
    for path in data_files:
        package = max((name for name, folder in packages.items() if folder in path.parents), key=len)
        relative = path.relative_to(packages[package]).as_posix()
        if not any(fnmatch.fnmatchcase(relative, pattern) for pattern in config["package-data"].get(package, [])):
            unshipped.append(str(path.relative_to(ROOT)))
    assert unshipped == []
