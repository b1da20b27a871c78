"""An HTTP(S) folder as a `Source`: files read with `Range` requests.

HTTP has no folder listing, so `list` names the files an HF-style folder
holds by probing (config.json, the index, model.safetensors); a sharded
folder's shards come from its index. Each probe is a range request for the
first `HEAD_BYTES` of the file, kept: a config or a safetensors header is
then read with no further request. A server that ignores `Range` (answers
200 with the whole file) is refused after the first bytes: dspark never
downloads a weight file to read its header. Uses the standard library only.
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.parse
import urllib.request

from dspark.converters.layouts.hf import CONFIG_NAME, MANIFEST_NAME, SAFETENSORS_INDEX, SINGLE_SAFETENSORS
from dspark.converters.sources.base import SourceError

HEAD_BYTES = 64 * 1024
TIMEOUT_S = 60
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED = re.compile(r"bytes \*/(\d+)")
_PROBED = (CONFIG_NAME, SAFETENSORS_INDEX, SINGLE_SAFETENSORS, MANIFEST_NAME)


class RangeSource:
    """What every HTTP-based source shares: a per-file cache of the first
    `HEAD_BYTES` and the file's size, both learnt from one range request.
    Subclasses say how to `_get(name, start, end)` -> (status, bytes,
    total size or None); `None` status means no such file."""

    url: str

    def __init__(self) -> None:
        self._heads: dict[str, bytes] = {}
        self._sizes: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def _get(self, name: str, start: int, end: int) -> tuple[bytes, int | None] | None:
        raise NotImplementedError

    def _probe(self, name: str) -> int | None:
        with self._lock:
            if name in self._sizes:
                return self._sizes[name]
        got = self._get(name, 0, HEAD_BYTES)
        size = None
        if got is not None:
            data, size = got
            self._heads[name] = data
        with self._lock:
            self._sizes[name] = size
        return size

    def stat(self, name: str) -> int | None:
        return self._probe(name)

    def read_range(self, name: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        head = self._heads.get(name)
        if head is not None and end <= len(head):
            return head[start:end]
        got = self._get(name, start, end)
        if got is None:
            raise SourceError(f"{self.url}: {name} is gone (404) while being read")
        return got[0]


def parse_range_response(status: int, headers, body_reader, start: int, end: int, where: str) -> tuple[bytes, int | None]:
    """The bytes of a range answer and the file's total size. 206 is the
    answer asked for; 416 is an empty file (or a start past its end); a 200
    means the server ignores Range."""
    if status == 416:
        unsatisfied = _UNSATISFIED.match(headers.get("Content-Range") or "")
        return b"", int(unsatisfied.group(1)) if unsatisfied else 0
    if status == 200:
        length = headers.get("Content-Length")
        if start == 0 and length is not None and int(length) <= end:
            return body_reader(int(length)), int(length)  # the whole file is smaller than asked
        raise SourceError(
            f"{where}: the server ignores Range requests (it answered 200 with the whole file); dspark reads "
            "remote checkpoints by range only. Download the checkpoint and check the copy."
        )
    if status != 206:
        raise SourceError(f"{where}: HTTP {status}")
    match = _CONTENT_RANGE.match(headers.get("Content-Range") or "")
    if not match:
        raise SourceError(f"{where}: a 206 answer without a valid Content-Range header")
    first, last, total = int(match.group(1)), int(match.group(2)), match.group(3)
    if first != start:
        raise SourceError(f"{where}: asked for bytes from {start}, the server sent from {first}")
    return body_reader(last - first + 1), (None if total == "*" else int(total))


class HttpSource(RangeSource):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.base = url if url.endswith("/") else url + "/"

    # A server lists no folder: these names are asked for one by one, and
    # none found means the address itself was not found (404 for each).
    probed = _PROBED

    def list(self) -> list[str]:
        return [name for name in _PROBED if self.stat(name) is not None]

    def _get(self, name: str, start: int, end: int) -> tuple[bytes, int | None] | None:
        address = self.base + urllib.parse.quote(name)
        request = urllib.request.Request(address, headers={"Range": f"bytes={start}-{end - 1}"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return parse_range_response(response.status, response.headers, response.read, start, end, address)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code == 416:
                return parse_range_response(416, error.headers, None, start, end, address)
            raise SourceError(f"{address}: HTTP {error.code} {error.reason}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise SourceError(f"{address}: cannot connect ({reason})") from None


def open_http(url: str) -> HttpSource:
    return HttpSource(url)
