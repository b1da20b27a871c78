"""A local HTTP server for remote-checkpoint tests and benchmarks: serves a
folder with `Range` support, plus the few Hugging Face Hub routes
`huggingface_hub` calls for `dspark check hf://…` (pointed at it with
`HF_ENDPOINT`). Binds 127.0.0.1 only; counts requests and body bytes sent.

    /files/<path>                                  a file, by range
    /api/models/<org>/<repo>[/revision/<rev>]      model_info: sha, siblings (name, size)
    /<org>/<repo>/resolve/<rev>/<file>             a repository file, by range

A Hub repository `org/repo` is the folder `<root>/hub/org/repo`; its one
revision is "main" (commit `HUB_COMMIT`). Served folders may be symbolic
links (a full-size sparse draft is served without copying it).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
_CHUNK = 1 << 20


@dataclass
class Traffic:
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, body bytes sent)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, path: str, sent: int) -> None:
        with self.lock:
            self.requests.append((method, path, sent))

    @property
    def bytes_sent(self) -> int:
        return sum(sent for _, _, sent in self.requests)

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()


class RangeServer:
    """`with RangeServer(root) as server:` … `server.url`, `server.traffic`."""

    def __init__(self, root: Path, *, honour_range: bool = True) -> None:
        self.root = Path(root)
        self.honour_range = honour_range
        self.traffic = Traffic()
        self._in_flight = 0
        self._idle = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                server._counted(self, head=True)

            def do_GET(self) -> None:
                server._counted(self, head=False)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "RangeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until every request is answered and counted: a client has its
        last byte before the server has counted it."""
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def _counted(self, handler, *, head: bool) -> None:
        with self._idle:
            self._in_flight += 1
        try:
            self._answer(handler, head=head)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    # -- routes ---------------------------------------------------------

    def _answer(self, handler: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") or "\\" in p for p in parts):
            return self._error(handler, 404, "EntryNotFound")  # nothing outside the served folder
        if parts[:1] == ["files"]:
            return self._send_file(handler, self.root.joinpath(*parts[1:]), head)
        if parts[:2] == ["api", "models"] and len(parts) in (4, 6):
            return self._model_info(handler, parts[2], parts[3], parts[5] if len(parts) == 6 else "main")
        if len(parts) >= 5 and parts[2] == "resolve":
            org, repo, _, revision, *name = parts
            if revision not in ("main", HUB_COMMIT):
                return self._error(handler, 404, "RevisionNotFound")
            return self._send_file(handler, self.root.joinpath("hub", org, repo, *name), head)
        return self._error(handler, 404, "EntryNotFound")

    def _model_info(self, handler, org: str, repo: str, revision: str) -> None:
        folder = self.root / "hub" / org / repo
        if not folder.is_dir():
            return self._error(handler, 404, "RepoNotFound")
        if revision not in ("main", HUB_COMMIT):
            return self._error(handler, 404, "RevisionNotFound")
        siblings = [{"rfilename": p.name, "size": p.stat().st_size} for p in sorted(folder.iterdir()) if p.is_file()]
        body = json.dumps({"id": f"{org}/{repo}", "sha": HUB_COMMIT, "siblings": siblings}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        self.traffic.add(handler.command, handler.path, len(body))

    def _error(self, handler, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        self.traffic.add(handler.command, handler.path, len(body))

    def _send_file(self, handler, file: Path, head: bool) -> None:
        if not file.is_file():
            return self._error(handler, 404, "EntryNotFound")
        total = file.stat().st_size
        start, end = 0, total  # [start, end)
        wanted = handler.headers.get("Range")
        status = 200
        if wanted and self.honour_range:
            match = _RANGE.match(wanted.strip())
            if match:
                start = int(match.group(1))
                end = min(total, int(match.group(2)) + 1) if match.group(2) else total
                if start >= total:
                    handler.send_response(416)
                    handler.send_header("Content-Range", f"bytes */{total}")
                    handler.send_header("Content-Length", "0")
                    handler.end_headers()
                    self.traffic.add(handler.command, handler.path, 0)
                    return
                status = 206
        handler.send_response(status)
        handler.send_header("Content-Length", str(end - start))
        handler.send_header("Accept-Ranges", "bytes")
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{total}")
        handler.end_headers()
        sent = 0
        if not head:
            try:
                with open(file, "rb") as stream:
                    stream.seek(start)
                    while sent < end - start:
                        chunk = stream.read(min(_CHUNK, end - start - sent))
                        if not chunk:
                            break
                        handler.wfile.write(chunk)
                        sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading (a refused 200): what it took is counted
        self.traffic.add(handler.command, handler.path, sent)
