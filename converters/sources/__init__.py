"""Where a checkpoint's bytes come from: a local folder, an HTTP folder, a
Hugging Face Hub repository or an object store, each a `Source` with the
same three verbs (`list`, `stat`, `read_range`).

A URL is recognised here, from its text, before anything else looks at it:
`pathlib` collapses `//`, so `s3://bucket/draft` must never become a
`Path`. Each remote source's module is imported only when its scheme is
named, so a check of a local folder never loads an HTTP client, the Hub
client or fsspec.
"""

from __future__ import annotations

import importlib
import re
from typing import Protocol

from dspark.schema.errors import UsageError
from dspark.schema.inventory import printable_name

# scheme://…: two or more letters, so a Windows drive (C:\…) is a path.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)://")

# scheme -> "module:factory", factory(url) -> Source. Any other scheme is
# handed to fsspec (objstore.py), which knows s3, gs, az, memory, file, …
_OPENERS = {
    "http": "dspark.converters.sources.http:open_http",
    "https": "dspark.converters.sources.http:open_http",
    "hf": "dspark.converters.sources.hub:open_hub",
}
_FSSPEC_OPENER = "dspark.converters.sources.objstore:open_objstore"

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


def url_scheme(text: str) -> str | None:
    """The scheme of a URL (`hf`, `https`, `s3`, …), or None for a local path."""
    match = _URL.match(text)
    return match.group("scheme").lower() if match else None


def is_url(value: object) -> bool:
    return isinstance(value, str) and url_scheme(value) is not None


def open_source(url: str) -> Source:
    """The source a URL names; its client is imported now, not before."""
    scheme = url_scheme(url)
    if scheme is None:
        raise UsageError(f"{printable_name(url)}: not a URL.")
    module, _, name = _OPENERS.get(scheme, _FSSPEC_OPENER).partition(":")
    return getattr(importlib.import_module(module), name)(url)


def refuse_url(value: object, what: str) -> None:
    """A usage error for commands that read local files only."""
    if is_url(value):
        raise UsageError(
            f"{printable_name(str(value))}: {what} reads a local checkpoint; remote ones are read by "
            "`dspark check` and `dspark inspect` only.",
            hint="Download the checkpoint first (e.g. `hf download ORG/REPO --local-dir DIR`), then pass DIR.",
        )
