"""Long polls (``ReceiveMessage`` with ``WaitTimeSeconds``) that hold no thread while
they wait.

Every action runs in a thread of the server's bounded pool (its system calls block),
but a long poll that finds nothing gives its thread back: :func:`receive` raises
:class:`Parked` out of the request (a :class:`BaseException`, so that the dispatcher's
``except Exception``, which turns failures into a 500, lets it through: the request is
unfinished, not failed), and :class:`Waiting`, on the event loop, awaits a change of
the queue's directories on the loop's one :class:`~vsqs.MultiWaiter`
(:mod:`vsqs._reactor`, shared with :mod:`vsqs.aio`), then runs the request again in
the pool. The request's deadline is kept across runs (:class:`Poll`), so the wait is
``WaitTimeSeconds`` in all. A run that finds nothing claims nothing, so running again
is harmless.

One change wakes one parked poll; a woken poll that was answered wakes the next (the
baton, as in :mod:`vsqs.aio`): a thousand parked polls cost one descriptor and no
thundering herd. Outside :class:`Waiting` (a :class:`~vsqs.serve._service.Service`
called directly), :func:`receive` waits in its thread, as the library does.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from .. import AnyQueue, Message, QueueDrained, Waiters, partitions_of, reactor

__all__ = ["Parked", "Poll", "Waiting", "receive"]

_SLICE: Final = 0.5
"""A wait re-checks the server's shutdown this often (seconds)."""
_RECHECK: Final = 1.0
"""Under inotify, a parked poll looks again at least this often (a lost event costs no
more), as :mod:`vsqs.aio` does."""
_POLL: contextvars.ContextVar[Poll | None] = contextvars.ContextVar("vsqs_serve_poll", default=None)

T = TypeVar("T")


class Parked(BaseException):
    """A long poll found nothing: wait for *paths* to change (or *seconds*), then run
    the request again. Carries what the event loop needs to wait, nothing else."""

    def __init__(self, paths: tuple[str, ...], wait: str, interval: float, seconds: float) -> None:
        super().__init__(paths, wait, interval, seconds)
        self.paths = paths
        self.wait = wait
        """The queue's ``wait`` option (``"auto"``, ``"inotify"``, ``"poll"``)."""
        self.interval = interval
        """Seconds between looks where the directory cannot be watched."""
        self.seconds = seconds
        """At most this long: the deadline, or something the queue knows will change."""


class Poll:
    """One request across its runs: the deadline of its long poll, set by the first."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def run(self, call: Callable[[], T]) -> T:
        """*call* (in a pool thread) with this poll's receives parking, not blocking."""
        token = _POLL.set(self)
        try:
            return call()
        finally:
            _POLL.reset(token)


def receive(
    stopping: threading.Event, queue: AnyQueue, count: int, visibility: int | None, wait: int
) -> list[Message]:
    """Up to *count* messages of *queue*, waiting up to *wait* seconds for one.

    Each claim is atomic (one rename); each message goes to exactly one receiver.
    Under :meth:`Poll.run`, finding nothing raises :class:`Parked` instead of waiting;
    otherwise it waits in this thread, in slices, so that *stopping* (the server's
    shutdown) ends the wait within half a second. A shut-down, drained queue: ``[]``.
    """
    poll = _POLL.get()
    if poll is None:
        return _blocking(stopping, queue, count, visibility, wait)
    now = time.monotonic()
    if poll.deadline is None:
        poll.deadline = now + wait
    try:
        got = queue.receive_batch(count, visibility_timeout=visibility, timeout=0)
    except QueueDrained:
        return []
    remaining = poll.deadline - now
    if got or remaining <= 0 or stopping.is_set():
        return got
    config = queue.config
    paths = (queue.path, *(part.path for part in partitions_of(queue) if part is not queue))
    pause = queue.next_look(queue.clock.monotonic() + remaining)
    interval = 0.05 if config.poll_interval is None else config.poll_interval
    raise Parked(paths, config.wait, interval, min(remaining, pause))


def _blocking(
    stopping: threading.Event, queue: AnyQueue, count: int, visibility: int | None, wait: int
) -> list[Message]:
    deadline = time.monotonic() + wait
    while True:
        remaining = deadline - time.monotonic()
        timeout = 0.0 if stopping.is_set() else max(0.0, min(remaining, _SLICE))
        try:
            got = queue.receive_batch(count, visibility_timeout=visibility, timeout=timeout)
        except QueueDrained:
            return []
        if got or timeout == 0 or remaining <= _SLICE:
            return got


class _Changes(Waiters):
    """The parked polls of one queue, and how many changes it had (a poll's token)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.users = 0

    def notify(self) -> None:
        self.count += 1
        super().notify()


class Waiting:
    """The parked long polls of one event loop (see the module's docstring). Used only
    on that loop; a request's runs are sequential, so no lock is needed."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._queues: dict[tuple[str, ...], _Changes] = {}

    async def answer(self, run: Callable[[Poll], Awaitable[T]]) -> T:
        """What *run* (a request, run in the pool under the given :class:`Poll`) answers,
        running it again after each :class:`Parked` once its queue changed."""
        poll = Poll()
        changes: _Changes | None = None
        paths: tuple[str, ...] = ()
        woken = False
        try:
            while True:
                token = None if changes is None else changes.count
                try:
                    done = await run(poll)
                except Parked as parked:
                    if parked.paths != paths:
                        self._leave(paths)
                        paths, changes = parked.paths, self._enter(parked)
                        if changes is not None:
                            continue  # watched only now: an earlier change may be missed
                    if changes is None:  # not watchable: look again after an interval
                        await asyncio.sleep(min(parked.seconds, parked.interval))
                    elif changes.count == token:  # else a change came during the run
                        woken = await self._wait(changes, min(parked.seconds, _RECHECK))
                    continue
                if woken and changes is not None:
                    changes.wake_one()  # there may be more: the next parked poll looks
                return done
        finally:
            self._leave(paths)

    async def _wait(self, changes: _Changes, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not self._stopping.is_set():
            remaining = end - loop.time()
            if remaining <= 0:
                return False
            if await changes.wait(min(remaining, _SLICE)):
                return True
        return False

    def _enter(self, parked: Parked) -> _Changes | None:
        changes = self._queues.get(parked.paths)
        if changes is None:
            changes = _Changes()
            hub, attached = reactor(), list[str]()
            for path in parked.paths:
                try:
                    watched = hub.attach(path, parked.wait, changes)
                except FileNotFoundError:  # RACE: another server deleted the queue
                    watched = False  # the next run answers QueueDoesNotExist
                if not watched:
                    for done in attached:  # one partition unwatched: poll them all
                        hub.detach(done, changes)
                    return None
                attached.append(path)
            self._queues[parked.paths] = changes
        changes.users += 1
        return changes

    def _leave(self, paths: tuple[str, ...]) -> None:
        changes = self._queues.get(paths)
        if changes is None:
            return
        changes.users -= 1
        if changes.users == 0:
            del self._queues[paths]
            hub = reactor()
            for path in paths:
                hub.detach(path, changes)
