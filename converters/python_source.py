"""Facts read from an installed engine's Python files without importing
them (importing a serving engine pulls in torch, triton and CUDA): whether a
module binds a name, where it imports one from, what it assigns on `self`,
which strings it uses. Every reader takes a parsed module or a path and
answers None when the file is not there or is not Python."""

from __future__ import annotations

import ast
from pathlib import Path

def parse_file(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def defines(path: Path, name: str) -> int | None:
    """The line where `path` binds `name` at module level (a def, a class,
    an assignment or an import), or None."""
    tree = parse_file(path)
    if tree is None:
        return None
    for node in top_level(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node.lineno
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node.lineno
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[-1]) == name for alias in node.names):
                return node.lineno
    return None


def top_level(tree: ast.Module):
    """Module-level statements, those inside a top-level `try`/`if` too (an
    import guarded there still runs when the module is imported)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        yield node
        if isinstance(node, ast.Try):
            stack[:0] = [*node.body, *node.orelse, *node.finalbody]
        elif isinstance(node, ast.If):
            stack[:0] = [*node.body, *node.orelse]


def import_of(tree: ast.Module | None, name: str) -> tuple[str | None, int | None]:
    """(module, line) of a module-level `from MODULE import name`."""
    if tree is None:
        return None, None
    for node in top_level(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if any(alias.name == name for alias in node.names):
                return node.module, node.lineno
    return None, None


def attribute_assigned(tree: ast.Module | None, attribute: str) -> int | None:
    """The first line assigning `self.<attribute>` anywhere in the file."""
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (isinstance(target, ast.Attribute) and target.attr == attribute
                        and isinstance(target.value, ast.Name) and target.value.id == "self"):
                    return node.lineno
    return None


def function_defined(tree: ast.Module | None, name: str) -> int | None:
    if tree is None:
        return None
    for node in top_level(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node.lineno
    return None


def string_used(tree: ast.Module | None, text: str) -> int | None:
    if tree is None:
        return None
    lines = [node.lineno for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value == text and hasattr(node, "lineno")]
    return min(lines) if lines else None
