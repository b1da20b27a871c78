"""Where a command's report goes: the format on stdout, or with `--output
FILE` the machine report in FILE and the human page on the terminal (the
github annotations instead, with `--format github`)."""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from dspark.cli.settings import OutputSettings, ReportUnwritableError, output_settings, report_written
from dspark.cli.formats import FORMAT_BY_SUFFIX, MACHINE_FORMATS, Report, format_module
from dspark.converters.writers.overwrite_guard import RunInput, report_overwrites
from dspark.schema.errors import UsageError


def configure_output(
    command: str,
    output_format: str,
    file: Path | None,
    quiet: bool,
    *,
    reads: Sequence[RunInput] = (),
    writes_into: Path | None = None,
) -> OutputSettings:
    """Record what the command line asked for (errors are told the same
    way). `--output` with the human format takes the file's format from its
    suffix; with the github format too, and the annotations go to the
    terminal, so that one run both annotates a pull request and leaves, say,
    a SARIF file to upload. `reads` are the run's inputs and `writes_into`
    the folder it writes: a report file that would land on either is
    refused before any work."""
    terminal = "human"
    if file is not None and output_format in ("human", "github"):
        inferred = FORMAT_BY_SUFFIX.get(file.suffix.lower())
        if inferred is None:
            settings = OutputSettings(output_format if output_format == "github" else "human", None, quiet, command)
            output_settings.set(settings)
            raise UsageError(
                f"--output {file}: which format? End the file name in {', '.join(FORMAT_BY_SUFFIX)}"
                + (" (with --format github the annotations go to the terminal and the file's format comes "
                   "from its suffix)." if output_format == "github"
                   else f", or name one with --format ({', '.join(MACHINE_FORMATS)})."),
            )
        terminal = output_format
        output_format = inferred
    settings = OutputSettings(output_format, file, quiet, command, terminal)
    output_settings.set(settings)
    if file is not None:
        _refuse_unwritable_report_path(file, reads, writes_into)
    return settings


def _refuse_unwritable_report_path(path: Path, reads: Sequence[RunInput], writes_into: Path | None) -> None:
    """Before any work: a report file that could never be written (a
    folder's name, a name too long, a folder that does not exist, a full
    disk, a folder this user may not write) must not cost a conversion, nor
    end a finished one as an error after DST was written. The
    error itself goes to the terminal (`settings.file` is not written).
    convert may name a file inside the folder it is about to create."""
    from dspark.converters.writers.atomic import name_limit

    settings = output_settings.get()
    folder = path.parent if str(path.parent) else Path(".")
    problem = None
    try:
        limit = name_limit(folder if folder.is_dir() else Path("."))
        if len(os.fsencode(path.name)) > limit:
            problem = f"the file name is longer than this filesystem allows ({limit} bytes)"
        elif path.is_dir():
            problem = "is a folder; name the file to write, e.g. " + str(path / "report.json")
        elif not folder.is_dir():
            if settings.command != "convert":
                problem = f"the folder {folder} does not exist"
        if problem is None:
            problem = report_overwrites(path, reads, writes_into=writes_into)
        if problem is None and folder.is_dir():
            _prove_room_for_a_report(path, folder)
    except OSError as error:
        problem = f"cannot be written ({error.strerror or error})"
    if problem is not None:
        output_settings.set(dataclasses.replace(settings, file=None, format=settings.terminal))
        raise UsageError(f"--output {path}: {problem}.", path=str(path))


# What a report may take: reports stay small whatever the input (one
# finding counts 100,000 tensors), well under this.
REPORT_ROOM = 1 << 20
# What posix_fallocate says where the filesystem cannot preallocate.
_NOT_SUPPORTED = {getattr(errno, name) for name in ("EOPNOTSUPP", "ENOTSUP", "EINVAL", "ENOSYS") if hasattr(errno, name)}


def _prove_room_for_a_report(path: Path, folder: Path) -> None:
    """Create and size a file where the report will go, then remove it: a
    folder that is read-only, or a disk that is full, is found before a
    conversion is written, not after. A device or a pipe named as the
    report (`--output /dev/stdout`) is written into as it is, and cannot
    be tried without writing into it."""
    if path.exists() and not path.is_file():
        return
    handle, temporary = tempfile.mkstemp(prefix=".dspark-report.", suffix=".tmp", dir=folder)
    try:
        try:
            os.posix_fallocate(handle, 0, REPORT_ROOM)
        except (AttributeError, OSError) as error:
            # No posix_fallocate (macOS, Windows) or a filesystem without it:
            # write the room instead, which a full disk refuses too.
            if isinstance(error, OSError) and error.errno not in _NOT_SUPPORTED:
                raise
            os.write(handle, bytes(REPORT_ROOM))
            os.fsync(handle)
    finally:
        os.close(handle)
        os.unlink(temporary)



def emit(report: Report) -> None:
    """Hand `report` to the format(s) the command line asked for."""
    _emit(report)
    report_written.set(True)


def _emit(report: Report) -> None:
    settings = output_settings.get()
    report.quiet = settings.quiet
    if settings.file is not None:
        write_report_file(settings.file, settings.format, report)
        if settings.terminal == "human":
            format_module("human").write(report)
        else:
            format_module(settings.terminal).write(report, sys.stdout)
            sys.stdout.flush()
        return
    if settings.format == "human":
        format_module("human").write(report)
        return
    format_module(settings.format).write(report, sys.stdout)
    sys.stdout.flush()


def write_report_file(path: Path, output_format: str, report: Report) -> None:
    """Write the report whole or not at all: a CI step that reads the file
    never sees half of it. What the system refuses (a full disk, a
    permission) is the report not written (exit 2, naming the file)."""
    text = io.StringIO()
    format_module(output_format).write(report, text)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"--output {path}: the folder {folder} does not exist.", path=str(path))
    try:
        if path.exists() and not path.is_file():
            # A device or a pipe (/dev/stdout, a FIFO a CI step reads):
            # written into, never replaced by a file of the same name.
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(text.getvalue())
            return
        _replace_with(path, folder, text.getvalue())
    except OSError as error:
        raise ReportUnwritableError(str(path), error.strerror or str(error), path=str(path)) from error


def _replace_with(path: Path, folder: Path, text: str) -> None:
    # A short temporary name beside it: any name the filesystem takes for the report fits.
    handle, temporary = tempfile.mkstemp(prefix=".dspark-report.", suffix=".tmp", dir=folder)
    try:
        # mkstemp creates 0600; the report is for other users too (a SARIF
        # uploader, a JUnit publisher): give it the mode open() would, the
        # old file's on an overwrite, else what the umask leaves of 0666.
        os.fchmod(handle, _mode_open_would_give(path))
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _mode_open_would_give(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
