"""Serving a :class:`vsqs.dashboard.Dashboard` in tests: through ``vsqs.serve`` (the
server the dashboard ships with) when it is there, else through a minimal stand-in on
the standard library's threading HTTP server that calls the same ``pages`` callback."""

from __future__ import annotations

import contextlib
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vsqs.dashboard import Dashboard


class _Handler(BaseHTTPRequestHandler):
    server: _PagesServer
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = dict(self.headers.items())
        answer = self.server.pages(self.command, self.path, headers, body)
        if answer is None:
            answer = (404, [("Content-Type", "text/plain")], b"not found")
        status, out_headers, out = answer
        self.send_response(status)
        for key, value in out_headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 - the base's names

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _PagesServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages = pages


@contextlib.contextmanager
def serving(dashboard: Dashboard) -> Iterator[str]:
    """Serve *dashboard* on a free loopback port; yield its base URL."""
    server = _PagesServer(dashboard.handle)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def request(
    url: str,
    *,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` of one request; an HTTP error status is returned too."""
    # Only http:// URLs of the test's own server.
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=30) as response:  # noqa: S310
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), error.read()
