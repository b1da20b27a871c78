"""A local folder as a `Source`. `dspark check` on a local path does not go
through it (the readers use `pread` on the path directly, the fast path);
it is here so that code written against a `Source` can be given a local
folder, and so that tests can compare a remote read with a local one."""

from __future__ import annotations

from pathlib import Path

from dspark.converters.readers import positional
from dspark.converters.sources.base import SourceError


class LocalSource:
    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        self.url = str(self.folder)

    def list(self) -> list[str]:
        try:
            return sorted(p.name for p in self.folder.iterdir() if p.is_file())
        except OSError as error:
            raise SourceError(f"{self.url}: cannot list the folder ({error.strerror or error})") from None

    def stat(self, name: str) -> int | None:
        path = self.folder / name
        return path.stat().st_size if path.is_file() else None

    def read_range(self, name: str, start: int, end: int) -> bytes:
        try:
            with open(self.folder / name, "rb", buffering=0) as handle:
                return positional.pread(handle.fileno(), max(end - start, 0), start)
        except OSError as error:
            raise SourceError(f"{self.url}/{name}: cannot read ({error.strerror or error})") from None


def why_not_a_file(path: Path) -> str:
    """What is at `path` instead of the regular file an option asked for:
    said plainly, since "no such file" for a folder or a device sends the
    user looking for something that is there."""
    if path.is_dir():
        return "a folder, not a file"
    if path.exists():
        return "not a regular file"
    return "no such file"
