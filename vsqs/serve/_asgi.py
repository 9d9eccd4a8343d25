"""The SQS API as an ASGI application, for those who run it under uvicorn or hypercorn.

>>> app = vsqs.serve.asgi_app("/srv/queues")  # doctest: +SKIP
>>> # uvicorn module:app --port 9324

Each request is answered by :func:`vsqs.serve._dispatch.answer`, exactly as by
:func:`~vsqs.serve.make_server`, in the event loop's default thread pool (every action
is system calls that block; a long poll waits there too, on vsqs's own waiting). The
ASGI server chooses the address: give *credentials* whenever it listens beyond
loopback. A lifespan shutdown ends the long polls (empty). The dashboard's pages are
not served here.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from .. import QueueRoot
from . import _dispatch
from ._credentials import Credentials, load_credentials
from ._errors import SqsError
from ._origin import BrowserPolicy
from ._server import MAX_BODY
from ._service import Service

__all__ = ["ASGIApp", "asgi_app"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ASGIApp:
    """An ASGI 3 application serving the SQS API of one root (see :func:`asgi_app`)."""

    def __init__(
        self,
        service: Service,
        credentials: Credentials | None,
        policy: BrowserPolicy = BrowserPolicy(),  # noqa: B008 - frozen, never changed
    ) -> None:
        self.service = service
        self.credentials = credentials
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.service.stopping.set()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = bool(message.get("more_body"))
            if len(body) > MAX_BODY:
                error = SqsError("RequestEntityTooLarge", f"The body exceeds {MAX_BODY} bytes.")
                await self._send(send, _dispatch.error_answer(error, json_protocol=False))
                return
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", []):
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        target = f"{path}?{query}" if query else path
        host, port = scope.get("server") or ("127.0.0.1", 9324)
        call = functools.partial(
            _dispatch.answer,
            self.service,
            self.credentials,
            scope["method"],
            target,
            headers,
            bytes(body),
            f"{host}:{port}",
            lambda line: None,
            self.policy,
        )
        await self._send(send, await asyncio.get_running_loop().run_in_executor(None, call))

    @staticmethod
    async def _send(send: Send, done: _dispatch.Answer) -> None:
        headers = [(b"content-length", str(len(done.body)).encode())]
        headers += [(k.lower().encode(), v.encode("latin-1")) for k, v in done.headers.items()]
        await send({"type": "http.response.start", "status": done.status, "headers": headers})
        await send({"type": "http.response.body", "body": done.body})


def asgi_app(
    root: str | os.PathLike[str] | QueueRoot,
    *,
    credentials: Credentials | str | os.PathLike[str] | None = None,
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
) -> ASGIApp:
    """The SQS API of *root* as an ASGI application (both wire protocols, all actions).

    :param credentials: as for :func:`~vsqs.serve.make_server`: every request must then
        be signed by one of the keys, each limited to its queues.
    :param allow_hosts: ``Host`` names accepted beside the loopback ones, as for
        :func:`~vsqs.serve.make_server` (behind a proxy: the name clients use).
    :param allow_origins: web-page origins that may change queues from a browser.
    """
    if credentials is not None and not isinstance(credentials, Credentials):
        credentials = load_credentials(credentials)
    policy = BrowserPolicy.of(allow_hosts, allow_origins)
    queue_root = root if isinstance(root, QueueRoot) else QueueRoot(root)
    return ASGIApp(Service(queue_root), credentials, policy)
