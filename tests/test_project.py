"""Project-level promises: the README documents what the code does, CI runs
what the README says, and the floors of the package only import downward."""

from __future__ import annotations

import ast
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


def test_readme_documents_every_finding_code_with_its_severity():
    documented = dict(re.findall(r"^\| `([A-Z]{3}\d{3})` \| (\w+) \|", README, flags=re.M))
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
