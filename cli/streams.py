"""stdout as the run's report place: a write the system refuses there (a
full disk, `> /dev/full`) is the report not written, told as such (exit 2,
naming stdout), not an error about the checkpoint, and never a run that
ends as if its reader had the verdict."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from dspark.cli.settings import ReportUnwritableError


class _GuardedStdout:
    """The real stdout, with the system's refusals of a write or a flush
    raised as `ReportUnwritableError`. A closed pipe stays a
    BrokenPipeError: its reader chose to stop (`| head`)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise ReportUnwritableError("stdout", error.strerror or str(error)) from error

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise ReportUnwritableError("stdout", error.strerror or str(error)) from error

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """stdout guarded for the length of a run, as it was afterwards. A
    closed stdout (`>&-`: Python starts with sys.stdout None) is refused
    before any work, so no convert writes its output for a verdict that
    cannot be told."""
    real = sys.stdout
    if real is None:
        raise ReportUnwritableError("stdout", "it is closed (redirected with >&-?); send it to a file or /dev/null")
    sys.stdout = _GuardedStdout(real)
    try:
        yield
    finally:
        sys.stdout = real
