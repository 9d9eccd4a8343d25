"""One connection of ``vsqs serve``: uvicorn's httptools protocol, held and fed every
event, plus the server's connection limit, the bound on a request's head and the
request deadlines (see :mod:`vsqs.serve._server`, which gives uvicorn this class as its
``http`` protocol)."""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

from ._asgi import CONNECTION, Deadlines, Expiring
from ._held import Held

if TYPE_CHECKING:
    import uvicorn

__all__ = ["MAX_HEAD", "Gate", "connection_class"]

MAX_HEAD: Final = 64 << 10
"""The largest request head (request line and header fields, together, in bytes); a
longer one is answered ``431`` and the connection closed."""

# An alarm may ring this early (timers' resolution: libuv's, under uvloop, is 1 ms); a
# deadline this close counts as passed rather than setting the alarm again at once.
_EARLY: Final = 0.001
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
_LONG_BODY: Final = b"the request's head is longer than %d bytes\n" % MAX_HEAD
_LONG: Final = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nServer: vsqs\r\nConnection: close\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_LONG_BODY), _LONG_BODY)
)
_LATE_BODY: Final = b"the request's header fields did not arrive in time\n"
_LATE: Final = (
    b"HTTP/1.1 408 Request Timeout\r\nServer: vsqs\r\nConnection: close\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_LATE_BODY), _LATE_BODY)
)


class Gate:
    """The connections of one server (counted on its event loop only: no lock), and
    what each is made of."""

    def __init__(self, limit: int, deadlines: Deadlines, protocol: type[Any]) -> None:
        self.limit = limit
        self.deadlines = deadlines
        self.protocol = protocol  # uvicorn's HttpToolsProtocol
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
    """One connection: uvicorn's httptools protocol, which it holds and forwards every
    event to, plus the connection limit, the head's bound and the deadlines (see the
    module's docstring).

    The head's bound: uvicorn's httptools protocol keeps a request's URL and header
    fields until they are complete, however long (llhttp sets no limit). So the bytes
    fed to it while no body is arriving (its current request cycle, ``cycle``, is
    complete or there is none yet) count towards the next head, until a new cycle
    starts (uvicorn makes one when a head is complete); past :data:`MAX_HEAD` the
    connection is answered ``431`` and closed, with at most ``MAX_HEAD`` bytes of the
    head fed. What follows the end of a head or a body in the same read is not counted
    (a pipelined head), so a head may hold one read more before it is refused: bounded
    all the same. A body is the application's to bound (:data:`~vsqs.serve.MAX_BODY`),
    and uvicorn stops reading while it holds 64 KiB of one unread.

    The deadlines cost no timer a request: a phase records when it began, and one alarm
    a connection checks them when it rings, then sleeps until the next one is due, or
    for :attr:`Gate.step` at most (the shortest deadline). A phase that starts after
    the alarm was set has a deadline at least ``step`` away, so the alarm is never
    late for it, and is never moved. Runs on the event loop only.
    """

    gate: ClassVar[Gate]
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
        self._head = 0  # bytes fed to the parser of the head it has not finished

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
        self._feed(data)

    def _feed(self, data: bytes | memoryview) -> None:
        """Feed *data* to uvicorn's protocol, a head at most :data:`MAX_HEAD` bytes."""
        inner = self._inner
        while True:
            cycle = inner.cycle  # uvicorn's current request (a new one for each head)
            if cycle is not None and cycle.more_body:  # a body: not the head's to count
                inner.data_received(data)
                return
            room = MAX_HEAD - self._head
            if len(data) <= room:
                inner.data_received(data)
                self._head = 0 if inner.cycle is not cycle else self._head + len(data)
                return
            # Only as much as the head may still take, then the rest if it ended there.
            inner.data_received(memoryview(data)[:room])
            if inner.cycle is cycle:
                self._too_long()
                return
            self._head = 0
            data = memoryview(data)[room:]
            if self._transport is None or self._transport.is_closing():
                return

    def _too_long(self) -> None:
        """The head went past :data:`MAX_HEAD`: ``431``, and the connection closes."""
        transport = self._transport
        if transport is not None and not transport.is_closing():  # else a 400 is written
            transport.write(_LONG)
            transport.close()

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

    def arrived(self) -> bool:
        """Whether the running request's body is in whole (its end parsed). uvicorn's
        current cycle is that request's, or a later one's (a pipelined head follows a
        whole body): either way, a cycle whose body is complete says this one is."""
        cycle = self._inner.cycle
        return cycle is not None and not cycle.more_body

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


def connection_class(gate: Gate) -> type[asyncio.Protocol]:
    """The protocol class of one server's connections, all counted by *gate*."""

    class Connection(_Connection):
        pass

    Connection.gate = gate
    return Connection
