"""The one place where errors become messages and exit codes.

Exit codes: 0 ok; 1 the checkpoint fails a check; 2 bad usage or unreadable
input; 3 an internal error (a bug); 130 interrupted. Set DSPARK_DEBUG=1 for
a traceback.

Every error is told on stderr; under a machine `--format` (json, sarif,
junit, github) stdout, or the `--output` file, also gets the error in that
format: for json one document with the keys every report has (`passed`,
`exit_code`, `findings`) plus `error`, so a program reading it reads one
shape whatever happened.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import typer

from dspark.cli.settings import OutputSettings, ReportUnwritableError, output_settings, report_written
from dspark.schema.errors import (
    CheckpointError,
    DeviceUnavailableError,
    DsparkError,
    MissingDependencyError,
    UsageError,
)
from dspark.schema.engines.launch import LaunchError
from dspark.schema.findings import FINDING_CODES, Finding
from dspark.schema.inventory import printable_name

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


# Ordered: the first matching class wins, so subclasses must come before
# their bases (CheckpointError's UnsafeInputError is a CheckpointError and
# fails the checkpoint; a bare DsparkError is still the user's input).
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (CheckpointError, EXIT_CHECK_FAILED),
    # Before any verdict: a report nobody could read is no verdict.
    (ReportUnwritableError, EXIT_USAGE),
    # A launch string that is not server flags: the user's input, never a verdict.
    (LaunchError, EXIT_USAGE),
    (UsageError, EXIT_USAGE),
    (MissingDependencyError, EXIT_USAGE),
    (DeviceUnavailableError, EXIT_USAGE),
    (DsparkError, EXIT_USAGE),
    # typer's parser: an unknown flag, a bad value, a missing argument
    (typer.TyperException, EXIT_USAGE),
    (KeyboardInterrupt, EXIT_INTERRUPTED),
)


def is_system_refusal(error: BaseException) -> bool:
    """What the system refused on a path the user gave (a name too long, a
    permission, a full disk): about their input and machine, not a bug
    (exit 2). Only an OSError the system raised, with its errno; one dspark
    raises without one is a bug like any other."""
    return isinstance(error, OSError) and not isinstance(error, BrokenPipeError) and error.errno is not None


# The exit code a command has decided on, set before it renders its report:
# a reader that stops early (`dspark check ... | head -1`) closes the pipe
# mid-render, and the run must still exit with the verdict, not as a failure.
verdict: ContextVar[int] = ContextVar("verdict", default=EXIT_OK)


def decide(code: int) -> int:
    """Record a command's exit code before it renders (see `verdict`)."""
    verdict.set(code)
    return code


def finished_message(code: int, signal_name: str = "SIGINT") -> str:
    return f"interrupted ({signal_name}) after the run had finished (exit {code}); its report stands"


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, BrokenPipeError):
        return verdict.get()
    for error_type, code in EXIT_CODES:
        if isinstance(error, error_type):
            return code
    if is_system_refusal(error):
        return EXIT_USAGE
    return EXIT_INTERNAL


def report_error(error: BaseException) -> int:
    """Tell the user about `error`; return the exit code."""
    code = exit_code_for(error)
    if isinstance(error, KeyboardInterrupt) and report_written.get():
        try:
            sys.stderr.write(finished_message(verdict.get()) + "\n")
            sys.stderr.flush()
        except (OSError, AttributeError, ValueError):
            pass  # no stderr: the exit code says it
        return code
    if isinstance(error, BrokenPipeError):
        # The reader went away (`| head`): not a failure of the checkpoint,
        # and nothing left to say. Python's own flush at exit would fail on
        # the closed pipe too, so stdout now points at the null device.
        _silence_stdout()
        return code
    if os.environ.get("DSPARK_DEBUG"):
        traceback.print_exception(error)
    message, hint = _message_and_hint(error)
    settings = output_settings.get()
    _write_stderr(error, message, hint, settings)
    if isinstance(error, ReportUnwritableError):
        # The place the report goes is what failed: nothing more is written
        # there, and what is still buffered for stdout is let go, or
        # Python's own flush at exit would fail on it again.
        if error.where == "stdout":
            _silence_stdout()
        return code
    if settings.format != "human" or settings.file is not None:
        _write_machine_error(error_report(error, code, message, hint, settings), settings)
    return code


def error_report(error: BaseException, code: int, message: str, hint: str | None, settings: OutputSettings):
    """The error as a report, for the machine formats."""
    from dspark.cli.formats import ErrorInfo, Report, judged
    from dspark.schema.findings import Finding as _Finding

    document = error_document(error, code, message, hint)
    findings = [_Finding(f["code"], f["message"], file=f["file"], tensor=f["tensor"], detail=f["detail"])
                for f in document["findings"]]
    return Report(
        command=settings.command,
        exit_code=code,
        document=document,
        findings=judged(findings),
        error=ErrorInfo(**document["error"]),
    )


def _write_machine_error(report, settings: OutputSettings) -> None:
    from dspark.cli.formats import format_module

    if settings.file is None:
        import io

        text = io.StringIO()
        format_module(settings.format).write(report, text)
        _write_stdout(text.getvalue())
        return
    from dspark.cli.output import write_report_file

    if settings.terminal != "human":
        import io

        text = io.StringIO()
        format_module(settings.terminal).write(report, text)
        _write_stdout(text.getvalue())
    try:
        write_report_file(settings.file, settings.format, report)
    except (OSError, DsparkError):
        pass  # told on stderr already; the exit code stands


def _message_and_hint(error: BaseException) -> tuple[str, str | None]:
    if isinstance(error, KeyboardInterrupt):
        # A bare Ctrl-C has no text; a run that finished its output first says so.
        return (str(error) or "interrupted"), None
    if isinstance(error, DsparkError):
        return error.message, error.hint
    if is_system_refusal(error):
        names = [printable_name(_refused_path(error, os.fsdecode(name))) for name in (error.filename, error.filename2)
                 if isinstance(name, (str, bytes, os.PathLike))]
        where = "".join(f"{name}: " for name in names)
        return (f"{where}{error.strerror or error}",
                "Check the path: it must exist, be readable (or writable, for an output), and fit the "
                "filesystem's limits on name length and space.")
    if isinstance(error, typer.TyperException):
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "dspark"
        return error.format_message(), f"Run '{command} --help' for the options."
    return (
        f"internal error: {type(error).__name__}: {error}",
        "This is a bug in dspark. Re-run with DSPARK_DEBUG=1 and report the traceback.",
    )


def _refused_path(error: OSError, name: str) -> str:
    """The path the system refused, which is not always the one asked for:
    a file looked for inside a folder that cannot be entered (`stat
    DRAFT/model.safetensors.index.json` on an unreadable DRAFT) is refused
    at the folder, and the file may not exist at all."""
    if error.errno not in (errno.EACCES, errno.EPERM):
        return name
    path = Path(name)
    for folder in reversed(path.parents):
        if folder.is_dir() and not os.access(folder, os.X_OK):
            return str(folder)
    return name


def _system_refusal_file(error: BaseException) -> str | None:
    if is_system_refusal(error) and isinstance(error.filename, (str, bytes, os.PathLike)):
        return _refused_path(error, os.fsdecode(error.filename))
    return None


def error_document(error: BaseException, code: int, message: str, hint: str | None) -> dict[str, Any]:
    """The JSON an error leaves on stdout: a report's keys, plus `error`. A
    checkpoint error with a finding code lists that finding."""
    findings = []
    finding_code = getattr(error, "code", None)
    if isinstance(error, CheckpointError) and finding_code in FINDING_CODES:
        findings.append(Finding(
            finding_code, message, file=error.path, tensor=error.tensor, detail=dict(error.detail)
        ).to_dict())
    return {
        "passed": False,
        "exit_code": code,
        "findings": findings,
        "error": {
            "type": "Interrupted" if isinstance(error, KeyboardInterrupt) else type(error).__name__,
            "message": message,
            "hint": hint,
            "file": getattr(error, "path", None) or _system_refusal_file(error),
            "tensor": getattr(error, "tensor", None),
            "code": finding_code if isinstance(finding_code, str) else None,
        },
    }


def _write_stderr(error: BaseException, message: str, hint: str | None, settings: OutputSettings) -> None:
    try:
        if isinstance(error, typer.TyperException) and settings.format == "human":
            # typer's own rendering: the usage line, where to get help, the error
            error.show()
            return
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
            sys.stderr.flush()
    except (OSError, AttributeError, ValueError):
        # stderr itself is closed (`2>&-` leaves sys.stderr None): the exit
        # code is all there is left to give
        pass


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except (OSError, DsparkError):
        # stdout cannot take the error document either (a full disk): the
        # line on stderr has said why, and the exit code stands.
        _silence_stdout()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing will flush into a closed pipe
