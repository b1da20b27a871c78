"""Any fsspec filesystem as a `Source`: `s3://`, `gs://`, `az://`, … and
`memory://`, `file://`. fsspec picks the backend from the URL's scheme
(`s3fs` for s3, `gcsfs` for gs, installed on their own) and its usual
credentials (environment, profile files); dspark lists the folder once and
reads each file by range (`cat_file(path, start, end)`).
"""

from __future__ import annotations

from dspark.converters.sources.base import REMOTE_EXTRA_HINT, SourceError
from dspark.schema.errors import MissingDependencyError, UsageError
from dspark.schema.inventory import printable_name


class FsspecSource:
    def __init__(self, url: str) -> None:
        try:
            import fsspec.core
        except ImportError:
            raise MissingDependencyError(
                f"{printable_name(url)}: reading this address needs fsspec, which is not installed.",
                hint=REMOTE_EXTRA_HINT,
            ) from None
        self.url = url
        scheme = url.split("://", 1)[0]
        try:
            self.fs, self.path = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as error:
            # fsspec names the package its backend needs (s3fs, gcsfs, …)
            raise MissingDependencyError(
                f"{printable_name(url)}: no filesystem for {scheme}:// ({error}).",
                hint=f"Install fsspec's backend for {scheme}:// (for s3: pip install s3fs).",
            ) from None
        except OSError as error:  # some backends connect here (ftp://): a host that does not answer
            raise SourceError(f"{printable_name(url)}: cannot connect ({error})") from None
        self.path = self.path.rstrip("/")
        self._sizes: dict[str, int] | None = None

    def list(self) -> list[str]:
        if self._sizes is None:
            try:
                found = self.fs.ls(self.path, detail=True)
            except FileNotFoundError:
                raise UsageError(f"{printable_name(self.url)}: no such folder.",
                                 hint="Check the address of the checkpoint folder.") from None
            except Exception as error:  # each backend raises its own: say it plainly
                raise SourceError(f"{self.url}: cannot list the folder ({error})") from None
            self._sizes = {
                item["name"].rstrip("/").rsplit("/", 1)[-1]: int(item.get("size") or 0)
                for item in found
                if item.get("type") == "file"
            }
        return sorted(self._sizes)

    def stat(self, name: str) -> int | None:
        self.list()
        return (self._sizes or {}).get(name)

    def read_range(self, name: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            return self.fs.cat_file(f"{self.path}/{name}", start=start, end=end)
        except Exception as error:
            raise SourceError(f"{self.url}/{name}: cannot read [{start:,}, {end:,}) ({error})") from None


def open_objstore(url: str) -> FsspecSource:
    return FsspecSource(url)
