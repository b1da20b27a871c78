"""What every source shares: the `Source` protocol its readers call, the
error a failed remote read raises, and the hint for the `remote` extra. The
registry that picks a source for a URL is the package (`__init__.py`)."""

from __future__ import annotations

from typing import Protocol

REMOTE_EXTRA_HINT = "Install the remote extra: pip install 'dspark[remote]'."


class Source(Protocol):
    """A folder of files, read by byte range. Names are plain file names
    inside the folder (`layouts.hf.is_plain_file_name`)."""

    url: str  # what the user named, for messages and reports

    def list(self) -> list[str]:
        """The file names at the top of the folder (no sub-folders)."""

    def stat(self, name: str) -> int | None:
        """The size of `name` in bytes, or None when there is no such file."""

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """The bytes [start, end) of `name`; fewer only where the file ends.
        Raises `SourceError` when the source cannot be read."""


class SourceError(OSError):
    """A remote read that failed (network, permissions, server): the
    message names the URL and the reason."""
