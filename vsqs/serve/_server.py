"""The HTTP server: the standard library's threading server, one thread a connection.

Why not asyncio: every action is a few system calls on files, which block; an event
loop would hand each to a thread anyway (as :mod:`vsqs.aio` does), and a long poll
already waits on vsqs's own waiting, in its thread, without a busy loop. A thread per
connection with HTTP/1.1 keep-alive and ``TCP_NODELAY`` (without it, Nagle's algorithm
and the client's delayed ACK stall each answer up to 40 ms) is the simplest thing
that measures well (see the benchmark in the guide).

**Shutting down** (:meth:`Server.shutdown`, and SIGTERM in ``vsqs serve``): no new
connection is accepted, long polls return empty within half a second, requests in flight
finish and are answered, then idle keep-alive connections are closed.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from http.server import ThreadingHTTPServer
from typing import Any, Final

from .. import QueueRoot
from .._errors import VsqsError
from . import _dispatch
from ._credentials import Credentials, load_credentials
from ._errors import SqsError
from ._http import Handler
from ._origin import BrowserPolicy
from ._service import Service

__all__ = ["Pages", "Server", "UnsafeAddress", "make_server"]

Pages = Callable[
    [str, str, Mapping[str, str], bytes], "tuple[int, list[tuple[str, str]], bytes] | None"
]
"""The dashboard's hook: ``pages(method, target, headers, body)`` -> ``(status,
headers, body)``, or ``None`` for a 404."""

MAX_BODY: Final = 8 << 20
"""The largest request body read (bytes): ten messages of 256 KiB, escaped, fit."""
_DRAIN: Final = 30.0
IDLE_TIMEOUT: Final = 120.0
"""Seconds a connection may stay idle, or a request take to arrive, before it is closed."""
MAX_CONNECTIONS: Final = 512
"""Connections served at once by default (one thread each); more are answered ``503``."""
_BUSY_BODY: Final = (
    b'{"__type":"ServiceUnavailable","message":"too many connections to this server; retry later"}'
)
_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nServer: vsqs\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Type: application/x-amz-json-1.0\r\n"
    b"x-amzn-query-error: ServiceUnavailable;Receiver\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
_TEXT: Final = {"Content-Type": "text/plain; charset=utf-8"}


class UnsafeAddress(VsqsError, PermissionError):
    """``make_server`` on an address other hosts can reach, without credentials."""

    def __init__(self, host: str, message: str | None = None) -> None:
        self.host = host
        super().__init__(
            message
            or f"refusing to serve on {host!r} without --credentials: anyone who can reach "
            "it could read and delete every message (bind 127.0.0.1, or give credentials)"
        )

    def _pickle_args(self) -> dict[str, Any]:
        return {"host": self.host, "message": str(self)}


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server(ThreadingHTTPServer):
    """The SQS API of one root over HTTP (made by :func:`make_server`).

    ``serve_forever()`` serves until ``shutdown()``; ``url`` is the base URL for a
    client's ``endpoint_url``.
    """

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        service: Service,
        *,
        credentials: Credentials | None,
        quiet: bool,
        pages: Pages | None,
        max_connections: int = MAX_CONNECTIONS,
        policy: BrowserPolicy = BrowserPolicy(),  # noqa: B008 - frozen, never changed
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.service = service
        self.credentials = credentials
        self.quiet = quiet
        self.pages = pages
        self.max_connections = max_connections
        self.policy = policy
        self._busy = 0
        self._open = 0  # connections with a thread (at most max_connections)
        self._idle = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._closed = False
        self._serving = False
        super().__init__(address, _Handler)
        self.host_port = self.url.partition("://")[2]
        """``host:port`` for queue URLs when a request's Host header is unusable."""

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def begin(self) -> bool:
        """A request starts; ``False`` once the server is shutting down."""
        with self._idle:
            if self.service.stopping.is_set() and self._busy == 0 and self._closed:
                return False
            self._busy += 1
            return True

    def end(self) -> None:
        with self._idle:
            self._busy -= 1
            if self.service.stopping.is_set():  # only shutdown waits for _busy to fall
                self._idle.notify_all()

    def track(self, connection: socket.socket, *, add: bool) -> None:
        with self._idle:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own, or, with ``max_connections``
        served already, answer ``503`` (SQS's ``ServiceUnavailable``, which SDKs retry
        after a pause) and close it: no client can make the server start threads
        without bound."""
        with self._idle:
            full = self._open >= self.max_connections
            if not full:
                self._open += 1
        if not full:
            super().process_request(request, client_address)
            return
        try:
            request.settimeout(1.0)  # the accepting thread never waits on a slow client
            request.sendall(_BUSY)
        except OSError:
            pass  # RACE: the client went away first
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._idle:
                self._open -= 1

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        """Serve until :meth:`shutdown` (which it notices within *poll_interval*); at once
        after one."""
        with self._idle:
            if self.service.stopping.is_set():
                return
            self._serving = True
        super().serve_forever(poll_interval)

    def shutdown(self) -> None:
        """Stop serving, gracefully: long polls end at once (empty), requests in flight
        finish (up to 30 s), idle keep-alive connections are closed. Safe to call from
        any thread but the one in ``serve_forever``; idempotent."""
        with self._idle:
            self.service.stopping.set()
            serving = self._serving
        if serving:  # the standard library's shutdown waits for serve_forever to end
            super().shutdown()
        deadline = time.monotonic() + _DRAIN
        with self._idle:
            while self._busy and time.monotonic() < deadline:
                self._idle.wait(0.1)
            self._closed = True
            for connection in list(self._connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # RACE: the client closed it first
        self.server_close()

    def server_close(self) -> None:
        self.service.stopping.set()
        super().server_close()

    def log(self, line: str) -> None:
        if not self.quiet:
            sys.stderr.write(line + "\n")


class _Handler(Handler):
    server: Server
    # A connection idle (or a request stalled) this long is closed: no thread is held
    # for ever by a client that went quiet. Longer than any long poll (20 s).
    timeout = IDLE_TIMEOUT
    default_request_version = "HTTP/1.0"  # an unreadable request line still gets a status line

    def version_string(self) -> str:
        return "vsqs"

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        self.server.track(self.connection, add=False)
        try:
            super().finish()
        except OSError:
            pass  # RACE: the client went away; nothing is left to say to it

    def handle_one_request(self) -> None:
        """The standard library's, but every method reaches :meth:`_serve` (no 501)."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True
            return
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        if not self.server.begin():
            self.close_connection = True
            return
        try:
            self._serve()
            self.wfile.flush()
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        finally:
            self.server.end()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A protocol error of the HTTP layer (a bad request line or header), in SQS's
        query-protocol shape rather than the standard library's HTML page."""
        del explain
        code_name = "MalformedRequest" if code < 500 else "InternalFailure"
        error = SqsError(code_name, message or "", status=code)
        self.close_connection = True
        self._send_error(error, json_protocol=False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.quiet:
            return  # nothing formatted for a log nobody reads
        self.server.log(
            f"{self.address_string()} - - [{self.log_date_time_string()}] {format % args}"
        )

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.server.quiet:
            return
        size = getattr(self, "_size", size)
        action = getattr(self, "_action", "-")
        took = (time.monotonic() - getattr(self, "_began", time.monotonic())) * 1000
        self.log_message('"%s" %s %s %s %.1fms', self.requestline, code, size, action, took)

    # -- one request -----------------------------------------------------------------

    def _body(self) -> bytes | None:
        """The request body, or ``None`` after answering an error about it."""
        if self.fields.get("transfer-encoding", "").lower() == "chunked":
            return self._chunked()
        length_text = self.fields.get("content-length")
        if length_text is None:
            return b""
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0:
            self._refuse(SqsError("MalformedRequest", "Content-Length is not a length."))
            return None
        if length > MAX_BODY:
            self._refuse(
                SqsError("RequestEntityTooLarge", f"The request body exceeds {MAX_BODY} bytes.")
            )
            return None
        return self.rfile.read(length)

    def _chunked(self) -> bytes | None:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                self._refuse(SqsError("MalformedRequest", "A chunk size is not hexadecimal."))
                return None
            total += size
            if total > MAX_BODY:
                self._refuse(
                    SqsError("RequestEntityTooLarge", f"The request body exceeds {MAX_BODY} bytes.")
                )
                return None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers: not used by SQS
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(3)

    def _refuse(self, error: SqsError) -> None:
        self.close_connection = True  # the rest of the body is not read
        self._send_error(error, json_protocol="x-amz-target" in self.fields)

    def _serve(self) -> None:
        self._began = time.monotonic()
        self._action = "-"
        self._size = 0
        body = self._body()
        if body is None:
            return
        target = self.path
        path, _, query = target.partition("?")
        headers = self.fields
        if _dispatch.is_page(self.command, path, query):
            self._page(target, headers, body)
            return
        done = _dispatch.answer(
            self.server.service,
            self.server.credentials,
            self.command,
            target,
            headers,
            body,
            self.server.host_port,
            self.server.log,
            self.server.policy,
        )
        self._action = done.action
        self._send(done.status, done.headers, done.body)

    def _page(self, target: str, headers: Mapping[str, str], body: bytes) -> None:
        self._action = "page"
        pages = self.server.pages
        answer = None
        if pages is not None:
            try:
                answer = pages(self.command, target, headers, body)
            except Exception:  # noqa: BLE001 - a page that fails is the dashboard's bug
                self.server.log(traceback.format_exc().rstrip())
                self._send(500, _TEXT, b"the page failed\n")
                return
        if answer is None:
            text = b"Not found. This is the SQS API of vsqs; the dashboard is not on.\n"
            self._send(404, _TEXT, text)
            return
        status, extra, payload = answer
        self._size = len(payload)
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        if not any(name.lower() == "content-length" for name, _ in extra):
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _send_error(self, error: SqsError, *, json_protocol: bool) -> None:
        done = _dispatch.error_answer(error, json_protocol=json_protocol)
        self._send(done.status, done.headers, done.body)

    def _send(self, status: int, headers: Mapping[str, str], payload: bytes) -> None:
        self._size = len(payload)
        self.reply(status, headers.items(), payload, send_body=self.command != "HEAD")


def make_server(
    root: str | os.PathLike[str] | QueueRoot,
    host: str = "127.0.0.1",
    port: int = 9324,
    *,
    credentials: Credentials | str | os.PathLike[str] | None = None,
    quiet: bool = False,
    pages: Pages | None = None,
    max_connections: int = MAX_CONNECTIONS,
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
) -> Server:
    """A server of the SQS API on the queues of *root*, bound and ready to serve.

    Each request is answered in its own thread; the server keeps no state of its own
    that matters (see :mod:`vsqs.serve`), so any number of servers may serve one root.

    :param root: a :class:`~vsqs.QueueRoot` or its directory (created if missing).
    :param port: ``0`` picks a free port (see ``server.server_address``).
    :param credentials: the keys (a :class:`Credentials`, or the path of its JSON file):
        then every request must be signed (SigV4) by one of them, and each key uses only
        the queues its patterns allow. Required on any address but a loopback one.
    :param quiet: no access log on stderr.
    :param pages: the dashboard's hook, called for ``GET``/``HEAD /`` without an
        ``Action`` and for ``/ui`` and everything under it.
    :param max_connections: connections served at once (a thread each); a connection
        beyond them is answered ``503 ServiceUnavailable`` and closed.
    :param allow_hosts: names (or addresses) accepted in a request's ``Host`` beside the
        loopback ones (any port); any other is refused, against DNS rebinding.
    :param allow_origins: origins (``scheme://host[:port]``) of web pages that may
        change queues from a browser (CORS is answered for them alone); a browser
        request from any other origin may only read.
    :raises ValueError: an *allow_hosts* or *allow_origins* entry that is not one.
    :raises UnsafeAddress: *host* is not a loopback address and no credentials are given.
    :raises CredentialsError: the credentials file cannot be used.

    >>> server = make_server(tempfile.mkdtemp(), port=0, quiet=True)  # doctest: +SKIP
    >>> threading.Thread(target=server.serve_forever, daemon=True).start()  # doctest: +SKIP
    >>> boto3.client("sqs", endpoint_url=server.url, ...)  # doctest: +SKIP
    """
    if credentials is not None and not isinstance(credentials, Credentials):
        credentials = load_credentials(credentials)
    if credentials is None and not _loopback(host):
        raise UnsafeAddress(host)
    if isinstance(max_connections, bool) or not (
        isinstance(max_connections, int) and max_connections > 0
    ):
        raise ValueError(f"max_connections must be a positive integer, not {max_connections!r}")
    policy = BrowserPolicy.of(allow_hosts, allow_origins)
    queue_root = root if isinstance(root, QueueRoot) else QueueRoot(root)
    service = Service(queue_root)
    return Server(
        (host, port),
        service,
        credentials=credentials,
        quiet=quiet,
        pages=pages,
        max_connections=max_connections,
        policy=policy,
    )
