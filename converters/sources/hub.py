"""A Hugging Face Hub repository as a `Source`: `hf://ORG/REPO[@REV]`.

`huggingface_hub` resolves the repository, the endpoint (`HF_ENDPOINT`)
and the token (`HF_TOKEN` or the saved login), as the `hf` CLI would. One
call lists the repository with file sizes (`model_info`, the
`/api/models/ORG/REPO/revision/REV` route) and pins the commit it answered
with; every file is then read by range from `/ORG/REPO/resolve/COMMIT/FILE`,
so all reads see one commit even while someone pushes. Top-level files only:
the engine loads the repository's root as the checkpoint folder.
"""

from __future__ import annotations

import os

from dspark.converters.sources.base import REMOTE_EXTRA_HINT, SourceError
from dspark.converters.sources.http import RangeSource, parse_range_response
from dspark.schema.errors import MissingDependencyError, UsageError, first_line
from dspark.schema.inventory import printable_name


def parse_hub_url(url: str) -> tuple[str, str | None]:
    """`hf://ORG/REPO[@REV]` -> (repo id, revision or None). Also accepts
    `hf://models/ORG/REPO`, as `HfFileSystem` spells it."""
    rest = url.split("://", 1)[1].strip("/")
    if rest.startswith("models/"):
        rest = rest[len("models/"):]
    repo, _, revision = rest.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or rest.startswith(("datasets/", "spaces/")):
        raise UsageError(
            f"{printable_name(url)}: not a model repository address.",
            hint="Write hf://ORG/REPO or hf://ORG/REPO@REVISION (a branch, tag or commit).",
        )
    return repo, revision or None


class HubSource(RangeSource):
    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            from huggingface_hub import HfApi, get_session, hf_hub_url
            from huggingface_hub.utils import build_hf_headers, hf_raise_for_status
        except ImportError:
            raise MissingDependencyError(
                f"{printable_name(url)}: reading a Hub repository needs huggingface_hub, which is not installed.",
                hint=REMOTE_EXTRA_HINT,
            ) from None
        self.url = url
        self.repo_id, self.revision = parse_hub_url(url)
        # Read at call time, not at import: huggingface_hub reads it once.
        self.endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or None
        self._api = HfApi(endpoint=self.endpoint)
        self._session = get_session
        self._headers = build_hf_headers
        self._raise = hf_raise_for_status
        self._file_url = hf_hub_url
        self._listing: dict[str, int | None] | None = None
        self._commit: str | None = None

    def list(self) -> list[str]:
        if self._listing is None:
            from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

            try:
                info = self._api.model_info(self.repo_id, revision=self.revision, files_metadata=True)
            except RevisionNotFoundError:
                raise UsageError(f"{self.url}: no revision {self.revision!r} in {self.repo_id}.",
                                 hint="Name a branch, tag or commit of the repository.") from None
            except RepositoryNotFoundError:
                raise UsageError(f"{self.url}: no repository {self.repo_id} (or it is private and you are not "
                                 "logged in).", hint="Check the name; for a private repository set HF_TOKEN or run "
                                 "`hf auth login`.") from None
            except (HfHubHTTPError, OSError) as error:
                raise SourceError(f"{self.url}: cannot list the repository ({first_line(error)})") from None
            except Exception as error:  # noqa: BLE001 - narrowed by _from_http_client below
                if not _from_http_client(error):
                    raise
                raise SourceError(f"{self.url}: cannot reach the Hub at {self.endpoint or 'huggingface.co'} "
                                  f"({type(error).__name__}: {first_line(error)})") from None
            self._commit = info.sha or self.revision or "main"
            self._listing = {
                sibling.rfilename: sibling.size
                for sibling in info.siblings or []
                if "/" not in sibling.rfilename
            }
        return sorted(self._listing)

    def stat(self, name: str) -> int | None:
        self.list()
        listing = self._listing or {}
        if name not in listing:
            return None
        size = listing[name]
        return size if size is not None else self._probe(name)

    def _get(self, name: str, start: int, end: int) -> tuple[bytes, int | None] | None:
        self.list()
        address = self._file_url(self.repo_id, name, revision=self._commit, endpoint=self.endpoint)
        headers = {**self._headers(), "Range": f"bytes={start}-{end - 1}"}
        try:
            with self._session().stream("GET", address, headers=headers) as response:
                if response.status_code == 404:
                    return None
                if response.status_code not in (200, 206, 416):
                    self._raise(response)
                    raise SourceError(f"{address}: HTTP {response.status_code}")
                chunks = response.iter_bytes()

                def read(count: int) -> bytes:
                    data = bytearray()
                    for chunk in chunks:
                        data += chunk
                        if len(data) >= count:
                            break
                    return bytes(data[:count])

                return parse_range_response(response.status_code, response.headers, read, start, end, address)
        except SourceError:
            raise
        except Exception as error:  # the client's own errors (connection, HTTP status): say them plainly
            raise SourceError(f"{address}: {first_line(error)}") from None


# The HTTP clients huggingface_hub has used (httpx, its httpx2 fork,
# requests over urllib3): their errors (connection, timeout) are no OSError.
_HTTP_CLIENT_PACKAGES = frozenset({"httpx", "httpx2", "httpcore", "requests", "urllib3"})


def _from_http_client(error: BaseException) -> bool:
    """Whether `error` is the HTTP client's (a network failure), not a bug."""
    return any(cls.__module__.split(".")[0] in _HTTP_CLIENT_PACKAGES for cls in type(error).__mro__)


def open_hub(url: str) -> HubSource:
    return HubSource(url)
