"""Fingerprints of the engine code dspark's rules cite: a hash of each cited
function's source, found by its qualified name (`Class.method`), read with
`ast` from the installed files and never imported.

A rule cites `path::Qualified.name@version:lines` (schema/engines/base.py
`Source`). Line numbers move between releases; the function keeps its name.
So an installed engine is compared with a modelled release function by
function: the same source (comments, blank lines and line numbers aside)
means the rule read there still holds; a different one means the rule was
not read against this code. The table of each modelled release's hashes is
generated from the released wheels (tests/conformance/fingerprints.py writes
`schema/engines/<engine>/fingerprints.py`) and read here against the files
installed."""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _children(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements of a body, those under `if`/`try` too (a definition guarded
    there is still the module's or class's)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _children([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            yield from _children([*node.body, *node.orelse, *node.finalbody,
                                  *(s for h in node.handlers for s in h.body)])


statements = _children


def _assigned_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def find_definition(tree: ast.Module, qualname: str) -> ast.stmt | None:
    """The `def`, `class` or assignment `qualname` names (`A.b.c`: class A's
    method b's nested c); the last binding wins, as at import."""
    body: list[ast.stmt] = tree.body
    found: ast.stmt | None = None
    for part in qualname.split("."):
        found = None
        for node in _children(body):
            name = node.name if isinstance(node, _DEFINITIONS) else _assigned_name(node)
            if name == part:
                found = node
        if found is None:
            return None
        body = found.body if isinstance(found, _DEFINITIONS) else []
    return found


def enclosing_qualname(tree: ast.Module, first: int, last: int) -> str:
    """The qualified name of the innermost definition (or module-level
    assignment) holding lines first..last; "" when none does."""
    path: list[str] = []
    body: list[ast.stmt] = tree.body
    while True:
        for node in _children(body):
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            name = node.name if isinstance(node, _DEFINITIONS) else _assigned_name(node)
            if name and start <= first and last <= (node.end_lineno or node.lineno):
                path.append(name)
                body = node.body if isinstance(node, _DEFINITIONS) else []
                break
        else:
            return ".".join(path)


def _normalised(text: str) -> str:
    """The tokens of a definition's source, comments and layout left out:
    a moved or re-indented function hashes the same, an edited one does not.

    The same on every Python: from 3.12 `tokenize` splits an f-string into
    FSTRING_START, its parts and FSTRING_END (3.14: TSTRING_* too), where
    3.11 gives one STRING token. A recorded table, generated on one Python,
    must match an install read on another, so an f-string is kept whole: its
    text from its START to its matching END, which is 3.11's STRING token."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(position: tuple[int, int]) -> int:
        row, column = position
        return offsets[row - 1] + column

    tokens = []
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.ENCODING}
    depth, opened = 0, 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind = tokenize.tok_name.get(token.type, "")
            if kind.endswith("STRING_START"):
                if depth == 0:
                    opened = at(token.start)
                depth += 1
            elif kind.endswith("STRING_END"):
                depth -= 1
                if depth == 0:
                    tokens.append(text[opened:at(token.end)])
            elif depth == 0 and token.type not in skip:
                tokens.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    return " ".join(tokens)


def definition_hash(source: str, tree: ast.Module, qualname: str) -> str | None:
    """The fingerprint of `qualname` in a module (its source and tree); None
    when the module does not define it."""
    node = find_definition(tree, qualname)
    if node is None:
        return None
    lines = source.splitlines(keepends=True)
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    text = "".join(lines[start - 1:node.end_lineno])
    return hashlib.sha256(_normalised(text).encode()).hexdigest()[:16]


def parse_source(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def split_function(function: str) -> tuple[str, str]:
    """`path::Qual.name` -> (path, qualname)."""
    path, _, qualname = function.partition("::")
    return path, qualname


def hashes_in(read: Callable[[str], str | None], functions: Iterable[str]) -> dict[str, str | None]:
    """function -> its fingerprint, reading each file (a path inside the
    install, `vllm/...`) once with `read` (None: no such file)."""
    trees: dict[str, tuple[str, ast.Module] | None] = {}
    result: dict[str, str | None] = {}
    for function in functions:
        path, qualname = split_function(function)
        if path not in trees:
            text = read(path)
            tree = parse_source(text) if text is not None else None
            trees[path] = (text, tree) if tree is not None else None
        parsed = trees[path]
        result[function] = definition_hash(parsed[0], parsed[1], qualname) if parsed else None
    return result


@dataclass(frozen=True)
class Comparison:
    """An installed engine's cited functions against one modelled release."""

    release: str
    same: tuple[str, ...]  # functions whose source is the release's
    changed: tuple[str, ...]  # present in both, another source
    gone: tuple[str, ...]  # the release has it, the install does not (file there)
    added: tuple[str, ...]  # the install has it, the release does not
    unreadable: tuple[str, ...]  # the release has it, and the file holding it is not there or not Python

    @property
    def differing(self) -> tuple[str, ...]:
        return (*self.changed, *self.gone, *self.added)

    @property
    def matches(self) -> bool:
        return not self.differing and not self.unreadable

    def describe(self) -> list[str]:
        """Each differing function in words."""
        return ([f"{f} (another source than {self.release}'s)" for f in self.changed]
                + [f"{f} (not defined here; {self.release} defines it)" for f in self.gone]
                + [f"{f} (defined here; {self.release} does not)" for f in self.added])

    def to_dict(self) -> dict:
        return {"release": self.release, "same": len(self.same), "changed": list(self.changed),
                "gone": list(self.gone), "added": list(self.added), "unreadable": list(self.unreadable)}


def compare(installed: Mapping[str, str | None], recorded: Mapping[str, str | None],
            readable_files: set[str], release: str) -> Comparison:
    same, changed, gone, added, unreadable = [], [], [], [], []
    for function, expected in recorded.items():
        got = installed.get(function)
        path, _ = split_function(function)
        if expected is not None and path not in readable_files:
            unreadable.append(function)
        elif got == expected:
            if expected is not None:
                same.append(function)
        elif expected is None:
            added.append(function)
        elif got is None:
            gone.append(function)
        else:
            changed.append(function)
    return Comparison(release, tuple(same), tuple(changed), tuple(gone), tuple(added), tuple(unreadable))


def holds_code(text: str | None) -> bool:
    """A file that parses and defines something at its top: an empty or
    stub file parses too, and would read as every definition gone."""
    tree = parse_source(text) if text is not None else None
    return tree is not None and any(isinstance(node, (*_DEFINITIONS, ast.Assign)) for node in tree.body)


def read_installed(package_root: Path) -> Callable[[str], str | None]:
    """A reader of files under the folder holding the engine's package
    (`vllm/...` is `package_root / 'vllm/...'`)."""
    def read(path: str) -> str | None:
        try:
            return (package_root / path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    return read


