"""Reading a gate policy from its file (the policy itself is schema/policy.py).

The same file holds the project's settings for every command: its `engine`
is the engine `check`, `inspect`, `convert` and `gate` judge for when no
`--engine` is given (`settings_engine`).

Found as tools like ruff find theirs: from the working directory upward,
the first folder with a `dspark.toml` (its keys at the top level) or a
`pyproject.toml` with a `[tool.dspark]` table; `--policy FILE` names one
directly. tomllib is imported only here, when a file is found.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark.converters.sources.local import why_not_a_file
from dspark.schema.errors import UsageError

if TYPE_CHECKING:
    from dspark.schema.policy import Policy

POLICY_FILE = "dspark.toml"
PYPROJECT = "pyproject.toml"


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the `tomli` backport, a dependency there
        import tomli as tomllib
    return tomllib


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read the policy ({error}).", path=str(path)) from None
    try:
        return _toml().loads(text)
    except ValueError as error:  # tomllib.TOMLDecodeError
        raise UsageError(f"{path}: not valid TOML ({error}).", path=str(path),
                         hint="Fix the file, or name another with --policy.") from None


def _table_in(path: Path, document: dict[str, Any]) -> dict[str, Any] | None:
    """The policy table a file holds: `[tool.dspark]` in a pyproject.toml,
    the whole file otherwise; None when a pyproject.toml has none."""
    if path.name != PYPROJECT:
        return document
    table = document.get("tool", {}).get("dspark") if isinstance(document.get("tool"), dict) else None
    if table is not None and not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.dspark] must be a table.", path=str(path))
    return table


def find_policy_file(start: Path | None = None) -> Path | None:
    """The policy file that applies in `start` (default: the working directory)."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / POLICY_FILE).is_file():
            return candidate / POLICY_FILE
        pyproject = candidate / PYPROJECT
        if pyproject.is_file():
            try:
                mentions = "dspark" in pyproject.read_text(encoding="utf-8", errors="replace")
            except OSError:
                mentions = False
            # only a pyproject that names dspark is parsed: another project's is none of ours
            if mentions and _table_in(pyproject, _read_toml(pyproject)) is not None:
                return pyproject
    return None


def load_policy(path: Path | str | None = None, *, start: Path | None = None) -> Policy:
    """The policy in `path`, or the one found from `start` upward, or the
    defaults when there is none. Unknown keys and bad values are a
    `UsageError` naming the file and the key."""
    # Imported here: `check` asks for the settings' engine on every run, and
    # most runs have no settings file to parse (see settings_engine).
    from dspark.schema.policy import Policy, parse_policy

    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"--policy {path}: {why_not_a_file(path)}.", path=str(path))
    else:
        path = find_policy_file(start)
        if path is None:
            return Policy()
    table = _table_in(path, _read_toml(path))
    if table is None:
        raise UsageError(f"{path}: no [tool.dspark] table.", path=str(path),
                         hint="Put the policy under [tool.dspark], or in a dspark.toml.")
    source = f"{path} [tool.dspark]" if path.name == PYPROJECT else str(path)
    return parse_policy(table, source)


def settings_launch(flag: str | None, *, start: Path | None = None) -> str | None:
    """The launch a command judges under: its `--launch` flag, else the
    project settings' `launch`, else None (the engine's defaults)."""
    if flag is not None:
        return flag
    if find_policy_file(start) is None:
        return None
    return load_policy(start=start).launch


def settings_engine(flag: str | None, *, start: Path | None = None) -> str | None:
    """The engine a command judges for: its `--engine` flag, else the
    project settings' `engine` (the policy file found from `start`, default
    the working directory, upward), else None (dspark's default). A
    settings file that cannot be read is an error, as for the gate: a
    misspelt engine must not silently judge for another."""
    if flag:
        return flag
    if find_policy_file(start) is None:
        return None  # no settings: the policy module is not even imported
    return load_policy(start=start).engine
