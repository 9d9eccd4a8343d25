"""The HTTP server under ``vsqs serve``: the ASGI application (:mod:`vsqs.serve._asgi`)
on uvicorn with httptools (llhttp), the ``serve`` extra.

Why uvicorn with httptools (maintained, strict, fast; neither parses a byte here, and
no leniency of llhttp's is on but the one uvicorn sets, which drops what follows a
``Connection: close`` request unread): see docs/sqs-api.rst, with the comparison with
h11, hypercorn and granian.

What is added on top, through uvicorn's public configuration (its ``http`` protocol
class, here one that holds uvicorn's own httptools protocol and forwards every event
to it: :mod:`vsqs.serve._connection`):

* **at most** ``max_connections`` **connections**: one more is answered ``503
  ServiceUnavailable`` with ``Retry-After: 1`` (SDKs retry) and closed at once;
* **a bounded head**: uvicorn keeps a head's URL and fields until they are complete,
  however long; past :data:`MAX_HEAD` (64 KiB) the connection
  is answered ``431`` and closed;
* **deadlines** (:class:`~vsqs.serve.Deadlines`): uvicorn has none on a request's head
  (its keep-alive timer restarts at every byte, so a client trickling one byte a
  minute held a connection for ever); each connection here keeps one from a request's
  first byte to its header fields' end (then ``408`` and closed), one to the end of
  its answer (then closed), the body's (then the application answers ``408``), and
  one while idle: checked by one alarm a connection, never a timer a request;
* an answer's pieces written in one system call (:class:`~vsqs.serve._held.Held`).

The listen backlog is :data:`BACKLOG` (the kernel may cap it). Actions run in a pool
of :data:`~vsqs.serve.THREADS` threads, the short ones on tmpfs on the event loop
(:mod:`vsqs.serve._inline`); long polls hold no thread while they wait. **Shutting
down** (:meth:`Server.shutdown`, SIGTERM): no new connection, long polls return empty
within half a second, requests in flight are answered (up to 30 s), idle ones closed.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from .. import QueueRoot, VsqsError
from .._extras import missing_extra
from ._asgi import MAX_BODY, THREADS, ASGIApp, Deadlines, Pages, stderr_log
from ._connection import MAX_HEAD, Gate, connection_class
from ._credentials import Credentials, load_credentials
from ._origin import BrowserPolicy
from ._service import Service

if TYPE_CHECKING:
    import os


__all__ = [
    "BACKLOG",
    "MAX_BODY",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "Pages",
    "Server",
    "UnsafeAddress",
    "make_server",
]

MAX_CONNECTIONS: Final = 512
"""Connections served at once by default; more are answered ``503``."""
BACKLOG: Final = 1024
"""Connections the kernel queues before they are accepted (a burst of clients)."""
_DRAIN: Final = 30


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


class Server:
    """The SQS API of one root over HTTP (made by :func:`make_server`).

    ``serve_forever()`` serves until ``shutdown()``; ``url`` is the base URL for a
    client's ``endpoint_url``.
    """

    def __init__(
        self,
        address: tuple[str, int],
        service: Service,
        *,
        credentials: Credentials | None,
        quiet: bool,
        pages: Pages | None,
        max_connections: int = MAX_CONNECTIONS,
        deadlines: Deadlines | None = None,
        threads: int = THREADS,
        policy: BrowserPolicy = BrowserPolicy(),  # noqa: B008 - frozen, never changed
    ) -> None:
        try:  # the extra, needed only to serve
            import uvicorn  # noqa: PLC0415
            from uvicorn.protocols.http.httptools_impl import (  # noqa: PLC0415
                HttpToolsProtocol,
            )
        except ModuleNotFoundError as exc:
            raise missing_extra(exc, "serve", "vsqs serve") from None
        self.service = service
        self.credentials = credentials
        self.quiet = quiet
        self.pages = pages
        self.max_connections = max_connections
        self.deadlines = Deadlines() if deadlines is None else deadlines
        self.app = ASGIApp(
            service,
            credentials,
            pages=pages,
            log=None if quiet else stderr_log,
            deadlines=self.deadlines,
            threads=threads,
            policy=policy,
        )
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so (without
        # it, Nagle's algorithm and the client's delayed ACK stall each answer ~40 ms).
        self.socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(BACKLOG)
        except OSError:
            self.socket.close()
            raise
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.host_port = self.url.partition("://")[2]
        """``host:port`` of :attr:`url`."""

        gate = Gate(max_connections, self.deadlines, HttpToolsProtocol)
        self._uvicorn = uvicorn.Server(
            uvicorn.Config(
                self.app,
                http=connection_class(gate),
                ws="none",
                lifespan="on",
                interface="asgi3",
                # uvloop where it is installed (the serve extra, on CPython off Windows):
                # a quarter less CPU a request in the server's HTTP layer; else asyncio's.
                loop="auto",
                log_config=None,
                access_log=False,  # the application's log: escaped, with the action
                proxy_headers=False,  # X-Forwarded-For would change who the client is
                server_header=False,
                headers=[("Server", "vsqs")],
                backlog=BACKLOG,
                # A backstop only: each connection keeps its own idle deadline.
                timeout_keep_alive=int(self.deadlines.idle) + 1,
                timeout_graceful_shutdown=_DRAIN,
            )
        )
        self._lock = threading.Lock()
        self._stopped = False
        self._serving = False
        self._served = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def serve_forever(self, poll_interval: float = 0.1) -> None:
        """Serve until :meth:`shutdown` (noticed within a tenth of a second); return at
        once after one. *poll_interval* is accepted for compatibility and unused."""
        del poll_interval
        with self._lock:
            if self._stopped:
                return
            self._serving = True
        try:
            self._uvicorn.run(sockets=[self.socket])
        finally:
            self._served.set()

    def shutdown(self) -> None:
        """Stop serving, gracefully: long polls end at once (empty), requests in flight
        finish (up to 30 s), idle keep-alive connections are closed. Safe to call from
        any thread but the one in ``serve_forever``; idempotent."""
        with self._lock:
            self._stopped = True
            serving = self._serving
        self.service.stopping.set()  # parked long polls see it within half a second
        if serving:
            self._uvicorn.should_exit = True
            self._served.wait()
        self.server_close()

    def server_close(self) -> None:
        """Close the listening socket and the application's pool (after a shutdown)."""
        self.app.close()
        self.socket.close()

    def log(self, line: str) -> None:
        if not self.quiet:
            stderr_log(line)


def make_server(
    root: str | os.PathLike[str] | QueueRoot,
    host: str = "127.0.0.1",
    port: int = 9324,
    *,
    credentials: Credentials | str | os.PathLike[str] | None = None,
    quiet: bool = False,
    pages: Pages | None = None,
    max_connections: int = MAX_CONNECTIONS,
    deadlines: Deadlines | None = None,
    threads: int = THREADS,
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
) -> Server:
    """A server of the SQS API on the queues of *root*, bound and ready to serve.

    Requests are answered concurrently (see :mod:`vsqs.serve._server`); the server keeps
    no state of its own that matters (see :mod:`vsqs.serve`), so any number of servers
    may serve one root. Needs the ``serve`` extra (uvicorn).

    :param root: a :class:`~vsqs.QueueRoot` or its directory (created if missing).
    :param port: ``0`` picks a free port (see ``server.server_address``).
    :param credentials: the keys (a :class:`Credentials`, or the path of its JSON file):
        then every request must be signed (SigV4) by one of them, and each key uses only
        the queues its patterns allow. Required on any address but a loopback one.
    :param quiet: no access log on stderr.
    :param pages: the dashboard's hook, called for ``GET``/``HEAD /`` without an
        ``Action`` and for ``/ui`` and everything under it.
    :param max_connections: connections served at once; a connection beyond them is
        answered ``503 ServiceUnavailable`` (with ``Retry-After``) and closed.
    :param deadlines: how long each part of a request may take
        (:class:`~vsqs.serve.Deadlines`).
    :param threads: the pool that runs the actions' blocking calls (a long poll holds
        none of its threads while it waits).
    :param allow_hosts: names (or addresses) accepted in a request's ``Host`` beside the
        loopback ones (any port); any other is refused, against DNS rebinding.
    :param allow_origins: origins (``scheme://host[:port]``) of web pages that may
        change queues from a browser (CORS is answered for them alone); a browser
        request from any other origin may only read.
    :raises ValueError: an *allow_hosts* or *allow_origins* entry that is not one.
    :raises UnsafeAddress: *host* is not a loopback address and no credentials are given.
    :raises CredentialsError: the credentials file cannot be used.
    :raises ModuleNotFoundError: the ``serve`` extra is not installed.

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
    if isinstance(threads, bool) or not (isinstance(threads, int) and threads > 0):
        raise ValueError(f"threads must be a positive integer, not {threads!r}")
    policy = BrowserPolicy.of(allow_hosts, allow_origins)
    queue_root = root if isinstance(root, QueueRoot) else QueueRoot(root)
    return Server(
        (host, port),
        Service(queue_root),
        credentials=credentials,
        quiet=quiet,
        pages=pages,
        max_connections=max_connections,
        deadlines=deadlines,
        threads=threads,
        policy=policy,
    )
