"""What the command line asked for its output: the format, the `--output`
file, `--quiet`, the command. Kept apart from the error table so that both
the report writer and the error path can read it."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Sequence

from dspark.schema.errors import UsageError
from dspark.schema.records import record


@record
class OutputSettings:
    """Where a run's report goes: `format` on stdout, or, with `file`, the
    machine format in the file and the human page on the terminal."""

    format: str = "human"
    file: Path | None = None
    quiet: bool = False
    command: str | None = None
    # With `file`: what the terminal gets, the human page or, for a CI job
    # that wants annotations and a report file from one run, the github format.
    terminal: str = "human"


class ReportUnwritableError(UsageError):
    """The report could not be written where the command line sent it
    (stdout or `--output`): a full disk, a closed descriptor. The run's
    verdict never reached its reader, so it must not exit as if it had (0
    or 1): exit 2, naming the place. A reader that closed its pipe (`|
    head`) is not this: it chose to stop reading (BrokenPipeError)."""

    def __init__(self, where: str, reason: str, *, path: str | None = None) -> None:
        # One line, no hint: the place and the system's reason say what to do.
        super().__init__(f"cannot write the report to {where}: {reason}", path=path)
        self.where = where


# The command sets this once it has parsed its options, so an error is
# reported in the format the caller asked for. Before that (a usage error
# is found while parsing) `requested_output` reads it off the command line.
output_settings: ContextVar[OutputSettings] = ContextVar("output_settings", default=OutputSettings())

# Set once the report has been written whole: a Ctrl-C after it (while the
# run winds down) says the run had finished, and adds no error document
# after the report a reader already has.
report_written: ContextVar[bool] = ContextVar("report_written", default=False)

def _option_value(args: Sequence[str], name: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
        if arg == name and index + 1 < len(args):
            return args[index + 1]
    return None


def requested_format(args: Sequence[str]) -> str:
    """The `--format` on a command line that may not parse."""
    from dspark.cli.formats import FORMATS

    value = _option_value(args, "--format")
    return value if value in FORMATS else "human"


def requested_output(args: Sequence[str], commands: Sequence[str] = ()) -> OutputSettings:
    """The output a command line that may not parse asked for: its
    `--format`, `--output` and `--quiet`, and the command it names."""
    from dspark.cli.formats import FORMAT_BY_SUFFIX

    output_format = requested_format(args)
    file = _option_value(args, "--output") or None  # an empty one is a usage error, told on the terminal
    if file is not None and output_format == "human":
        output_format = FORMAT_BY_SUFFIX.get(Path(file).suffix.lower(), "json")
    command = next((arg for arg in args if arg in commands), None)
    quiet = any(arg in ("-q", "--quiet") for arg in args)
    return OutputSettings(output_format, Path(file) if file is not None else None, quiet, command)
