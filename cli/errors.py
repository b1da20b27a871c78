"""The one place where errors become messages and exit codes.

Exit codes: 0 ok; 1 the checkpoint fails a check; 2 bad usage or unreadable
input; 3 an internal error (a bug). Set DSPARK_DEBUG=1 for a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from contextvars import ContextVar

from dspark.schema.errors import (
    CheckpointError,
    DeviceUnavailableError,
    DsparkError,
    MissingDependencyError,
    UsageError,
)
from dspark.schema.inventory import printable_name

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

# Ordered: the first matching class wins, so subclasses must come before
# their bases (CheckpointError's UnsafeInputError is a CheckpointError and
# fails the checkpoint; a bare DsparkError is still the user's input).
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (CheckpointError, EXIT_CHECK_FAILED),
    (UsageError, EXIT_USAGE),
    (MissingDependencyError, EXIT_USAGE),
    (DeviceUnavailableError, EXIT_USAGE),
    (DsparkError, EXIT_USAGE),
    (KeyboardInterrupt, EXIT_INTERRUPTED),
)

# The command sets this once it has parsed --format, so an error is
# reported in the format the caller asked for.
output_format: ContextVar[str] = ContextVar("output_format", default="human")



def exit_code_for(error: BaseException) -> int:
    for error_type, code in EXIT_CODES:
        if isinstance(error, error_type):
            return code
    return EXIT_INTERNAL


def report_error(error: BaseException) -> int:
    code = exit_code_for(error)
    if os.environ.get("DSPARK_DEBUG"):
        traceback.print_exception(error)
    if isinstance(error, KeyboardInterrupt):
        message, hint = "interrupted", None
    elif isinstance(error, DsparkError):
        message, hint = error.message, error.hint
    else:
        message = f"internal error: {type(error).__name__}: {error}"
        hint = "This is a bug in dspark. Re-run with DSPARK_DEBUG=1 and report the traceback."
    if output_format.get() == "json":
        document = {
            "error": {
                "type": type(error).__name__,
                "message": message,
                "hint": hint,
                "file": getattr(error, "path", None),
                "tensor": getattr(error, "tensor", None),
                "code": getattr(error, "code", None),
            },
            "exit_code": code,
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        # Paths and tensor names inside messages come from the input: escape
        # control characters so a hostile name cannot drive the terminal.
        lines = [("bold red", "error:", printable_name(message))]
        if hint:
            lines.append(("dim", "hint:", printable_name(hint)))
        if sys.stderr.isatty():
            # rich only for a person at a terminal; a pipe gets plain text.
            from rich.console import Console
            from rich.text import Text

            console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
            for style, label, text in lines:
                console.print(Text.assemble((label, style), " " + text))
        else:
            sys.stderr.write("".join(f"{label} {text}\n" for _, label, text in lines))
    return code
