"""The pre-commit hook: `dspark check` on every draft folder a commit touches.

pre-commit passes the changed files that match the hook's `files` pattern;
their folders are the drafts to check, each once, with the hook's `args`
(dspark check options) before them: a folder that holds weights or a
weight index and in which a config, weight, index or manifest file changed
(a draft that lost its config fails CFG001 rather than being passed over).
A `config.json` in a folder with no weights is some other project's config
(`{}` for a linter, a web app's settings), not a checkpoint, and is left
alone. The exit code is the worst of the checks.

    python -m dspark.cli.precommit [CHECK OPTIONS] FILE...
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from dspark.cli.main import run

# dspark check options that take a value: what follows them is no file.
VALUE_OPTIONS = {"--target", "--engine", "--config", "--format", "--output"}


def split_arguments(args: Sequence[str]) -> tuple[list[str], list[Path]]:
    options, files = [], []
    taking_value = False
    for arg in args:
        if taking_value:
            options.append(arg)
            taking_value = False
        elif arg.startswith("-"):
            options.append(arg)
            taking_value = arg in VALUE_OPTIONS
        else:
            files.append(Path(arg))
    return options, files


# Weights and weight indexes: what makes a folder a checkpoint, config or not.
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.pt", "*.bin", ".metadata", "*.distcp")
# A changed manifest names its folder too: it speaks for the weights beside it.
CHANGED_PATTERNS = (*WEIGHT_PATTERNS, "dspark-manifest.json")


def is_weight_file(path: Path) -> bool:
    return any(path.match(pattern) for pattern in CHANGED_PATTERNS)


def holds_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS)


def draft_folders(files: Sequence[Path]) -> list[Path]:
    """The folders of `files` to check, in order, once each: those of a
    changed weight, index or manifest file, and those of a changed config
    that hold weights or a weight index."""
    folders = []
    for file in files:
        folder = file if file.is_dir() else file.parent
        draft = (not file.is_dir() and is_weight_file(file)) or holds_weights(folder)
        if draft and folder not in folders:
            folders.append(folder)
    return folders


def main(argv: Sequence[str] | None = None) -> int:
    options, files = split_arguments(sys.argv[1:] if argv is None else argv)
    worst = 0
    for folder in draft_folders(files):
        code = run(["check", str(folder), *options])
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
