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
from dspark.converters.sources.base import REMOTE_EXTRA_HINT, Source, SourceError
from dspark.schema.errors import UsageError
from dspark.schema.inventory import printable_name

# scheme://…: two or more letters, so a Windows drive (C:\…) is a path.
# Compiled on first use (by `re`): a local path never needs it.
_URL = r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)://"

# scheme -> "module:factory", factory(url) -> Source. Any other scheme is
# handed to fsspec (objstore.py), which knows s3, gs, az, memory, file, …
_OPENERS = {
    "http": "dspark.converters.sources.http:open_http",
    "https": "dspark.converters.sources.http:open_http",
    "hf": "dspark.converters.sources.hub:open_hub",
}
_FSSPEC_OPENER = "dspark.converters.sources.objstore:open_objstore"

def url_scheme(text: str) -> str | None:
    """The scheme of a URL (`hf`, `https`, `s3`, …), or None for a local path."""
    match = re.match(_URL, text) if "://" in text else None
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


__all__ = ["REMOTE_EXTRA_HINT", "Source", "SourceError", "is_url", "open_source", "url_scheme"]
