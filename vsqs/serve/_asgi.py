"""The SQS API (and the dashboard's pages) as an ASGI application: what ``vsqs serve``
runs on uvicorn (:mod:`vsqs.serve._server`), and what anyone may run under another
ASGI server.

>>> app = vsqs.serve.asgi_app("/srv/queues")  # doctest: +SKIP
>>> # uvicorn module:app --port 9324

Each request is answered by :func:`vsqs.serve._dispatch.answer` (the dashboard's by
its ``pages`` hook) in a bounded thread pool (every action is system calls that
block); a long poll holds no thread while it waits (:mod:`vsqs.serve._longpoll`).
Before anything runs, the body is read whole, within its deadline and at most
:data:`MAX_BODY` bytes whatever its framing; a client that goes away first runs
nothing (a truncated body is never published). A ``Content-Length`` beside a
``Transfer-Encoding`` is refused (a smuggling attempt: RFC 9112 6.3). Refusals close
the connection (the rest of the body is never read). The ASGI server chooses the
address: give *credentials* whenever it listens beyond loopback. A lifespan shutdown
ends the long polls (empty).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import math
import os
import re
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol

from .. import QueueRoot
from . import _dispatch, _inline
from ._credentials import Credentials, load_credentials
from ._errors import SqsError
from ._longpoll import Parked, Poll, Waiting
from ._origin import BrowserPolicy
from ._service import Service
from ._shapes import HEADER_NAMES, header_name

__all__ = [
    "CONNECTION",
    "MAX_BODY",
    "THREADS",
    "ASGIApp",
    "Deadlines",
    "Expiring",
    "Pages",
    "asgi_app",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Pages = Callable[
    [str, str, Mapping[str, str], bytes], "tuple[int, list[tuple[str, str]], bytes] | None"
]
"""The dashboard's hook: ``pages(method, target, headers, body)`` -> ``(status,
headers, body)``, or ``None`` for a 404."""

MAX_BODY: Final = 8 << 20
"""The largest request body read (bytes): ten messages of 256 KiB, escaped, fit."""
THREADS: Final = 32
"""Threads of the pool that runs the actions' blocking calls (waiting holds none)."""
CONNECTION: Final = "vsqs.connection"
"""The key, in a request's ``scope["state"]``, of its connection's :class:`Watched`
(set by :func:`~vsqs.serve.make_server`'s connections; absent under other servers)."""
_TEXT: Final = [("Content-Type", "text/plain; charset=utf-8")]
# Control characters (C0, DEL, C1) and the backslash that escapes them: never written
# raw to a log, where they would reach an operator's terminal (ESC sequences, BEL...).
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")
_DIGITS: Final = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True)
class Deadlines:
    """Seconds each part of a request may take; a client that goes quiet (or trickles
    a byte at a time) is cut off by the first deadline it misses.

    :param header: from a request's first byte to the end of its header fields; a
        connection that misses it is answered ``408`` and closed.
    :param body: from the end of the header fields to the end of the body; then
        ``408 RequestTimeout`` and the connection is closed.
    :param request: from a request's first byte to the end of its answer (a long poll
        waits up to 20 s of it); then the connection is closed, unanswered.
    :param idle: a keep-alive connection (a new one too) waiting for its next request.

    ``header``, ``request`` and ``idle`` are enforced by :func:`~vsqs.serve.make_server`'s
    connections; ``body`` by the ASGI application itself.
    """

    header: float = 10.0
    body: float = 30.0
    request: float = 75.0
    idle: float = 60.0

    def __post_init__(self) -> None:
        for name in ("header", "body", "request", "idle"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value < math.inf
            ):
                raise ValueError(f"the {name} deadline must be a positive number, not {value!r}")


class Expiring(Protocol):
    """A timeout being waited under (:func:`asyncio.timeout`): ``reschedule(now)``
    expires it."""

    def reschedule(self, when: float | None) -> None: ...


class Watched(Protocol):
    """A connection that keeps deadlines on its requests: told when the application
    starts on one (its header fields have arrived), while it reads the body (under a
    timeout the connection expires when the body's deadline passes), when its body has
    arrived whole, when its answer starts (the connection may then write the answer's
    pieces together) and when it has been answered. Asked whether the body is in
    already (then reading it cannot wait, and needs no deadline)."""

    def started(self) -> None: ...
    def arrived(self) -> bool: ...
    def reading(self, limit: Expiring | None) -> None: ...
    def received(self) -> None: ...
    def answering(self) -> None: ...
    def finished(self) -> None: ...


class _Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    action: str = "-"
    close: bool = False


def escape(text: str) -> str:
    r"""*text* with every control character as ``\xNN`` (and ``\`` as ``\x5c``)."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


class ASGIApp:
    """An ASGI 3 application serving the SQS API of one root (see :func:`asgi_app`).

    Concurrency: requests run at once, each action in a thread of a pool of *threads*;
    the service they share is thread-safe.
    """

    def __init__(
        self,
        service: Service,
        credentials: Credentials | None,
        *,
        pages: Pages | None = None,
        log: Callable[[str], None] | None = None,
        deadlines: Deadlines | None = None,
        threads: int = THREADS,
        policy: BrowserPolicy = BrowserPolicy(),  # noqa: B008 - frozen, never changed
    ) -> None:
        self.service = service
        self.credentials = credentials
        self.policy = policy
        self.pages = pages
        self.deadlines = Deadlines() if deadlines is None else deadlines
        self._log = log
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, "vsqs-serve")
        # The short actions on a memory filesystem run on the event loop (see
        # vsqs.serve._inline): never where the root is on a disk or a network.
        self._inline = _inline.in_memory(service.root.path)
        self._waiting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Waiting] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    def close(self) -> None:
        """Stop: long polls end (empty), the pool takes no more work. Idempotent."""
        self.service.stopping.set()
        self._pool.shutdown(wait=False)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        began = time.monotonic() if self._log is not None else 0.0
        connection: Watched | None = (scope.get("state") or {}).get(CONNECTION)
        if connection is not None:
            connection.started()
        try:
            reply = await self._reply(scope, receive, connection)
            if self._log is not None:  # before the answer: a client that has it sees it
                self._access(scope, reply, time.monotonic() - began)
            if reply is not None:  # else the client left before its body arrived: nothing ran
                if connection is not None:
                    connection.answering()
                await self._send(send, reply)
        finally:
            if connection is not None:
                connection.finished()

    async def _reply(
        self, scope: Scope, receive: Receive, connection: Watched | None
    ) -> _Reply | None:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name = HEADER_NAMES.get(raw_name) or header_name(raw_name)
            # Trimmed: a parser may keep the whitespace that ends a value (llhttp does),
            # which is no part of it (RFC 9110 5.5); every value read here is compared.
            value = raw_value.decode("latin-1").strip(" \t")
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        json_protocol = "x-amz-target" in headers
        error = _framing(scope["method"], headers)
        if error is not None:
            return _refusal(error, json_protocol)
        body = await self._body(receive, json_protocol, connection)
        if not isinstance(body, bytes):
            return body
        if connection is not None:
            connection.received()
        method = scope["method"]
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        target = f"{path}?{query}" if query else path
        if _dispatch.is_page(method, path, query):
            return await self._page(method, target, headers, body)
        host, port = scope.get("server") or ("127.0.0.1", 9324)
        call = functools.partial(
            _dispatch.answer,
            self.service,
            self.credentials,
            method,
            target,
            headers,
            body,
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            self._traceback,
            self.policy,
        )
        done = None
        if self._inline:
            # The actions allowed on the loop never park (a receive is never one): no
            # Waiting unless the request is offloaded (or, were one to park, waits).
            try:
                with _inline.on_loop():
                    done = Poll().run(call)
            except (_inline.Offload, Parked):
                pass  # nothing was changed: the request runs again, whole, below
        if done is None:
            loop = asyncio.get_running_loop()

            async def run(poll: Poll) -> _dispatch.Answer:
                return await loop.run_in_executor(self._pool, poll.run, call)

            waiting = self._waiting.get(loop)
            if waiting is None:
                waiting = self._waiting[loop] = Waiting(self.service.stopping)
            done = await waiting.answer(run)
        return _Reply(done.status, list(done.headers.items()), done.body, done.action)

    async def _body(
        self, receive: Receive, json_protocol: bool, connection: Watched | None
    ) -> bytes | _Reply | None:
        """The whole body; a refusal (too large, too slow); ``None``: the client left.
        The body's deadline is the connection's to keep where there is one (no timer a
        request), else this timeout's."""
        if connection is not None and connection.arrived():
            # The body came with the head (the usual case): reading it cannot wait, so no
            # deadline is set up (asyncio's timeout asks for the running loop, which costs
            # a system call on Python 3.11); the request's deadline still bounds it all.
            return await _read(receive, json_protocol)
        try:
            async with _timeout(self.deadlines.body if connection is None else None) as limit:
                if connection is not None:
                    connection.reading(limit)
                try:
                    return await _read(receive, json_protocol)
                finally:
                    if connection is not None:
                        connection.reading(None)  # before the timeout is left
        except TimeoutError:
            late = SqsError("RequestTimeout", "The body did not arrive in time.", status=408)
            return _refusal(late, json_protocol)

    async def _page(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> _Reply:
        pages = self.pages
        if pages is None:
            text = b"Not found. This is the SQS API of vsqs; the dashboard is not on.\n"
            return _Reply(404, _TEXT, text, "page")
        call = functools.partial(pages, method, target, headers, body)
        try:
            answer = await asyncio.get_running_loop().run_in_executor(self._pool, call)
        except Exception:  # noqa: BLE001 - a page that fails is the dashboard's bug
            self._traceback(traceback.format_exc().rstrip())
            return _Reply(500, _TEXT, b"the page failed\n", "page")
        if answer is None:
            text = b"Not found. This is the SQS API of vsqs; the dashboard is not on.\n"
            return _Reply(404, _TEXT, text, "page")
        status, extra, payload = answer
        return _Reply(status, extra, payload, "page")

    @staticmethod
    async def _send(send: Send, reply: _Reply) -> None:
        # uvicorn's httptools protocol writes the names in lower case; HTTP's names are
        # case-blind, and so is every client tested (botocore, the JS SDK, browsers).
        headers = [(name.encode(), value.encode("latin-1")) for name, value in reply.headers]
        if not any(name.lower() == b"content-length" for name, _ in headers):
            headers.append((b"Content-Length", str(len(reply.body)).encode()))
        if reply.close:
            headers.append((b"Connection", b"close"))
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    def _traceback(self, text: str) -> None:
        if self._log is not None:
            self._log("\n".join(escape(line) for line in text.split("\n")))

    def _access(self, scope: Scope, reply: _Reply | None, took: float) -> None:
        assert self._log is not None
        client = scope.get("client") or ("-", 0)
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        line = f"{scope['method']} {path}{'?' if query else ''}{query} HTTP/{scope['http_version']}"
        status, size, action = (
            ("-", "-", "gone") if reply is None else (reply.status, len(reply.body), reply.action)
        )
        when = time.strftime("%d/%b/%Y %H:%M:%S")
        self._log(
            escape(
                f'{client[0]} - - [{when}] "{line}" {status} {size} {action} {took * 1000:.1f}ms'
            )
        )


if sys.version_info >= (3, 11):
    _timeout = asyncio.timeout
else:  # pragma: no cover - Python 3.10
    import async_timeout  # type: ignore[import-not-found]

    _timeout = async_timeout.timeout


async def _read(receive: Receive, json_protocol: bool) -> bytes | _Reply | None:
    """The body to its end, refused past :data:`MAX_BODY` (``None``: the client left)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return _refusal(_too_large(), json_protocol)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)  # one chunk: itself, not a copy


def _framing(method: str, headers: Mapping[str, str]) -> SqsError | None:
    """Why a request's framing is refused before its body is read (``None``: it is not)."""
    coding = headers.get("transfer-encoding")
    if coding is not None and "content-length" in headers:
        return SqsError("MalformedRequest", "Content-Length and Transfer-Encoding both.")
    if coding is not None and coding.lower() != "chunked":
        # llhttp decodes a list that ends in chunked ("gzip, chunked", "chunked, chunked")
        return SqsError("MalformedRequest", "A Transfer-Encoding other than chunked.")
    if "upgrade" in headers or method == "CONNECT":
        # llhttp reads no body after an upgrade's head: what the client sent as its
        # body would be read as the next request (this server upgrades to nothing).
        return SqsError("MalformedRequest", "Upgrade and CONNECT are not served.")
    length = headers.get("content-length", "0")
    if not _DIGITS.fullmatch(length):  # "+17", "1_7", "2,2": int() would take some
        return SqsError("MalformedRequest", "Content-Length is not one length in digits.")
    if int(length) > MAX_BODY:
        return _too_large()
    return None


def _too_large() -> SqsError:
    return SqsError("RequestEntityTooLarge", f"The request body exceeds {MAX_BODY} bytes.")


def _refusal(error: SqsError, json_protocol: bool) -> _Reply:
    """An error answered before the body was read whole: the connection closes after it
    (whatever is left of the body is never read as a request)."""
    done = _dispatch.error_answer(error, json_protocol=json_protocol)
    return _Reply(done.status, list(done.headers.items()), done.body, done.action, close=True)


def stderr_log(line: str) -> None:
    """Write one line of log to stderr (lines from the pool's threads never interleave)."""
    with _STDERR:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


_STDERR: Final = threading.Lock()


def asgi_app(
    root: str | os.PathLike[str] | QueueRoot,
    *,
    credentials: Credentials | str | os.PathLike[str] | None = None,
    pages: Pages | None = None,
    log: Callable[[str], None] | None = None,
    deadlines: Deadlines | None = None,
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
) -> ASGIApp:
    """The SQS API of *root* as an ASGI application (both wire protocols, all actions).

    :param credentials: as for :func:`~vsqs.serve.make_server`: every request must then
        be signed by one of the keys, each limited to its queues.
    :param pages: the dashboard's hook (as for :func:`~vsqs.serve.make_server`).
    :param log: called with each access-log line and each server failure's traceback,
        control characters escaped (``None``: nothing is logged).
    :param deadlines: the body's deadline applies here; the others are the ASGI
        server's business (uvicorn: ``timeout_keep_alive``; see :class:`Deadlines`).
    :param allow_hosts: ``Host`` names accepted beside the loopback ones, as for
        :func:`~vsqs.serve.make_server` (behind a proxy: the name clients use).
    :param allow_origins: web-page origins that may change queues from a browser.
    :raises ValueError: an *allow_hosts* or *allow_origins* entry that is not one.
    """
    if credentials is not None and not isinstance(credentials, Credentials):
        credentials = load_credentials(credentials)
    policy = BrowserPolicy.of(allow_hosts, allow_origins)
    queue_root = root if isinstance(root, QueueRoot) else QueueRoot(root)
    return ASGIApp(
        Service(queue_root), credentials, pages=pages, log=log, deadlines=deadlines, policy=policy
    )
