"""The HTTP server under ``vsqs serve``: the ASGI application (:mod:`vsqs.serve._asgi`)
on uvicorn with h11, the ``serve`` extra.

Why uvicorn with h11 (strict HTTP/1.1, maintained; neither parses a byte here): see
docs/sqs-api.rst, with the comparison with httptools, hypercorn and granian.

What is added on top, through uvicorn's public configuration (its ``http`` protocol
class, here one that holds uvicorn's own h11 protocol and forwards every event to it):

* **at most** ``max_connections`` **connections**: one more is answered ``503
  ServiceUnavailable`` with ``Retry-After: 1`` (SDKs retry) and closed at once;
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

import asyncio
import enum
import ipaddress
import socket
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

from .. import QueueRoot, VsqsError
from .._extras import missing_extra
from ._asgi import (
    CONNECTION,
    MAX_BODY,
    THREADS,
    ASGIApp,
    Deadlines,
    Expiring,
    Pages,
    stderr_log,
)
from ._credentials import Credentials, load_credentials
from ._held import Held
from ._origin import BrowserPolicy
from ._service import Service

if TYPE_CHECKING:
    import os

    import uvicorn

__all__ = [
    "BACKLOG",
    "MAX_BODY",
    "MAX_CONNECTIONS",
    "Pages",
    "Server",
    "UnsafeAddress",
    "make_server",
]

MAX_CONNECTIONS: Final = 512
"""Connections served at once by default; more are answered ``503``."""
BACKLOG: Final = 1024
"""Connections the kernel queues before they are accepted (a burst of clients)."""
MAX_HEAD: Final = 64 << 10
"""The largest request line and header fields, together (bytes); more is a ``400``."""
_DRAIN: Final = 30
_EARLY: Final = 0.001  # an alarm may ring this early (the loop's clock resolution)
_BUSY_BODY: Final = (
    b'{"__type":"ServiceUnavailable","message":"too many connections to this server; retry later"}'
)
# Written before the request is read, by the connection that is refused: no parser
# has anything to say yet, and the answer must cost nothing.
_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nServer: vsqs\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Type: application/x-amz-json-1.0\r\n"
    b"x-amzn-query-error: ServiceUnavailable;Receiver\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
_LATE_BODY: Final = b"the request's header fields did not arrive in time\n"
_LATE: Final = (
    b"HTTP/1.1 408 Request Timeout\r\nServer: vsqs\r\nConnection: close\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_LATE_BODY), _LATE_BODY)
)


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


class _Gate:
    """The connections of one server (counted on its event loop only: no lock), and
    what each is made of."""

    def __init__(self, limit: int, deadlines: Deadlines, protocol: type[Any]) -> None:
        self.limit = limit
        self.deadlines = deadlines
        self.protocol = protocol  # uvicorn's H11Protocol
        self.open = 0
        # The longest a connection's alarm sleeps: no deadline is shorter, so a phase
        # that starts later never has a deadline before the alarm (see _Connection).
        self.step = min(deadlines.header, deadlines.body, deadlines.request, deadlines.idle)


class _Phase(enum.Enum):
    """Where a connection is, and so which deadlines run."""

    IDLE = "idle"  # waiting for a request: the idle deadline
    HEAD = "head"  # a request's head is arriving: the header and the request deadlines
    APP = "app"  # the application runs the request: the request's (and the body's)


class _Connection(asyncio.Protocol):
    """One connection: uvicorn's h11 protocol, which it holds and forwards every event
    to, plus the connection limit and the deadlines (see the module's docstring).

    The deadlines cost no timer a request: a phase records when it began, and one alarm
    a connection checks them when it rings, then sleeps until the next one is due, or
    for :attr:`_Gate.step` at most (the shortest deadline). A phase that starts after
    the alarm was set has a deadline at least ``step`` away, so the alarm is never
    late for it, and is never moved. Runs on the event loop only.
    """

    gate: ClassVar[_Gate]
    _held: Held  # what uvicorn writes to (set when the connection is counted)

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: Any,  # uvicorn.server.ServerState, passed through
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._loop = _loop or asyncio.get_running_loop()
        # Each request's scope["state"] is a copy of this: the application finds the
        # connection there (ASGI's lifespan state), to say when a request starts and ends.
        state = {**app_state, CONNECTION: self}
        self._inner = self.gate.protocol(config, server_state, state, self._loop)
        self._transport: asyncio.Transport | None = None
        self._alarm: asyncio.TimerHandle | None = None
        self._phase = _Phase.IDLE
        self._since = 0.0  # when the phase began (HEAD, APP: the request's first byte)
        self._body: tuple[float, Expiring] | None = None  # the body's deadline, its timeout
        self._received = False  # the application has read the request's body whole
        self._eof = False  # the client has half-closed: close once answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass
        gate = self.gate
        if gate.open >= gate.limit:
            transport.write(_BUSY)
            transport.close()
            return
        gate.open += 1
        self._transport = transport
        self._since = now = self._loop.time()
        self._alarm = self._loop.call_at(now + gate.step, self._ring)
        self._held = Held(transport)
        self._inner.connection_made(self._held)

    def data_received(self, data: bytes) -> None:
        if self._phase is _Phase.IDLE:  # the first bytes of a request
            self._phase = _Phase.HEAD
            self._since = self._loop.time()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        """The client half-closed: answer the request it finished sending (``nc -N``
        and some scripts do so), then close; a request cut short (its head or body
        incomplete) is never run: the connection closes now."""
        if self._transport is None or self._phase is _Phase.IDLE:
            return None  # idle: asyncio closes the transport
        self._eof = True
        if not self._received:
            # Everything sent before the EOF is parsed already; the application reads
            # what was buffered in its next step, queued before this.
            self._loop.call_soon(self._cut_short)
        return True

    def _cut_short(self) -> None:
        if not self._received and self._transport is not None:
            self._transport.close()  # the application sees a disconnect: nothing runs

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is None:
            return  # refused: never counted, never handed to uvicorn
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        self.gate.open -= 1
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._inner.resume_writing()

    # -- told by the application (Watched) ----------------------------------------------

    def started(self) -> None:
        """The head has arrived: the application runs the request."""
        if self._phase is _Phase.IDLE:  # a pipelined request, read from the buffer
            self._since = self._loop.time()
        self._phase = _Phase.APP
        self._received = False

    def reading(self, limit: Expiring | None) -> None:
        """The application reads the body under *limit*, expired by this connection
        when the body's deadline passes (``None``: the reading is over)."""
        self._body = (
            None if limit is None else (self._loop.time() + self.gate.deadlines.body, limit)
        )

    def received(self) -> None:
        """The body has arrived whole."""
        self._received = True

    def answering(self) -> None:
        """The answer is being written: keep its pieces, to write them together."""
        self._held.hold()

    def finished(self) -> None:
        """The answer is written: idle until the next request."""
        self._held.release()
        self._received = False
        self._body = None
        self._phase = _Phase.IDLE
        if self._transport is None or self._transport.is_closing():
            return
        if self._eof:
            self._transport.close()  # after what is written
        else:
            self._since = self._loop.time()

    # -- deadlines ------------------------------------------------------------------------

    def _ring(self) -> None:
        """The alarm: act on the deadline that has passed, else sleep until the next."""
        self._alarm = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        deadlines = self.gate.deadlines
        now = self._loop.time()
        late = now + _EARLY  # what counts as passed
        if self._phase is _Phase.IDLE:
            due = self._since + deadlines.idle
            if late >= due:
                transport.close()
                return
        elif late >= self._since + deadlines.request:
            transport.abort()  # nothing flushed: the client may not be reading
            return
        elif self._phase is _Phase.HEAD:
            due = self._since + min(deadlines.header, deadlines.request)
            if late >= due:
                transport.write(_LATE)
                transport.close()
                return
        else:
            due = self._since + deadlines.request
            if self._body is not None:
                until, limit = self._body
                if late >= until:
                    self._body = None
                    limit.reschedule(now)  # the application answers 408
                else:
                    due = min(due, until)
        self._alarm = self._loop.call_at(min(due, now + self.gate.step), self._ring)


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
            from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415
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

        class Connection(_Connection):
            gate = _Gate(max_connections, self.deadlines, H11Protocol)

        self._uvicorn = uvicorn.Server(
            uvicorn.Config(
                self.app,
                http=Connection,
                ws="none",
                lifespan="on",
                interface="asgi3",
                # uvloop where it is installed (the serve extra, on CPython off Windows):
                # a third less CPU a request in the server's HTTP layer; else asyncio's.
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
                h11_max_incomplete_event_size=MAX_HEAD,
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
