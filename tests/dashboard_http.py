"""Serving a :class:`vsqs.dashboard.Dashboard` in tests as ``vsqs serve`` does: its
``handle`` as the ``pages`` callback of :func:`vsqs.serve.make_server` on a free
loopback port (the SQS API answers on the same port)."""

from __future__ import annotations

import contextlib
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping

from vsqs.dashboard import Dashboard
from vsqs.serve import make_server


@contextlib.contextmanager
def serving(dashboard: Dashboard) -> Iterator[str]:
    """Serve *dashboard* (and the SQS API of its root); yield the base URL."""
    server = make_server(
        dashboard.root, port=0, credentials=dashboard.credentials, quiet=True,
        pages=dashboard.handle,
    )  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        thread.join()


def request(
    url: str,
    *,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` of one request; an HTTP error status is returned too.
    The headers' names are in lower case (HTTP's are case-blind: the server writes
    them in lower case)."""
    # Only http:// URLs of the test's own server.
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=30) as response:  # noqa: S310
            return response.status, _lower(response.headers.items()), response.read()
    except urllib.error.HTTPError as error:
        return error.code, _lower(error.headers.items()), error.read()


def _lower(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}
