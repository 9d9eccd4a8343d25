"""How the kombu transport waits for its consumed queues (see :mod:`vsqs.kombu`).

A Celery worker consumes several queues (its task queues, its remote-control queue, an
event queue). :class:`Watch` waits on all of them with one :class:`~vsqs.MultiWaiter`,
two ways, and starts no thread for either:

* in kombu's event loop (a :class:`kombu.asynchronous.Hub`, what a Celery worker runs),
  as kombu's redis transport does: the waiter's descriptor (the process's one inotify
  descriptor) is registered with ``loop.add_reader``; when it is readable the events are
  read without blocking and ready messages are delivered, one per loop iteration;
* blocking, for ``Connection.drain_events``: ``token()`` before looking at the queues,
  then ``wait()``, so a change in between is never missed.

Either way every queue is looked at again every ``polling_interval`` seconds: that is how
a message whose lease ran out (a dead worker's) is seen, and how another host's publish
is seen where inotify cannot see it (NFS).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import AnyQueue, MultiWaiter, partitions_of


class Watch:
    """One transport's wait on the queues its channels consume.

    :param consumed: the queues consumed now (more may come: each is watched from the
        next look or loop iteration on, and looked at once then).
    :param deliver_one: deliver one ready message, if any (and if the prefetch limit
        allows); whether one was delivered.
    :param interval: seconds between looks whatever the events (``polling_interval``).
    """

    def __init__(
        self,
        consumed: Callable[[], Iterable[AnyQueue]],
        deliver_one: Callable[[], bool],
        interval: float,
    ) -> None:
        self._consumed = consumed
        self._deliver_one = deliver_one
        self.interval = interval
        self._waiter: MultiWaiter | None = None
        self._watched: set[str] = set()
        self._loop: Any = None  # the kombu Hub this watch is registered with
        self._reader_fd = -1
        self.paused = False
        """Whether the loop stopped reading the descriptor until a thread of this process
        has read the events (see :meth:`on_readable`)."""
        self._scheduled = False  # a delivery is scheduled on the loop
        self._timer: Any = None

    @property
    def waiter(self) -> MultiWaiter:
        """The one waiter on every consumed queue (made on first use)."""
        if self._waiter is None:
            self._waiter = MultiWaiter(poll_interval=self.interval, recheck=self.interval)
        return self._waiter

    def close(self) -> None:
        """Stop waiting: leave the loop first, then let go of the watches."""
        self.unregister(self._loop)
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None
            self._watched.clear()

    def _watch_consumed(self) -> bool:
        """Wait on every consumed queue too (each partition's directory of a partitioned
        one, and its own); whether one was added (look at it now)."""
        waiter = self.waiter
        added = False
        for queue in self._consumed():
            if queue.path in self._watched:
                continue
            self._watched.add(queue.path)
            wait = queue.config.wait
            waiter.add(queue.path, wait=wait)
            for part in partitions_of(queue):
                if part is not queue:
                    waiter.add(part.path, wait=wait)
            added = True
        return added

    # -- blocking ---------------------------------------------------------------------

    def drain(self, timeout: float | None) -> None:
        """Deliver one message, blocking up to *timeout* seconds (``None``: forever) for
        one; atomic as each delivery's claim (one rename).

        :raises TimeoutError: nothing came within *timeout* (``socket.timeout``, which
            kombu's callers expect).
        """
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        waiter = self.waiter
        while True:
            self._watch_consumed()
            token = waiter.token()  # before looking: a change made meanwhile wakes the wait
            if self._deliver_one():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            waiter.wait(token, min(left, self.interval))

    # -- in kombu's event loop -----------------------------------------------------------

    def register(self, loop: Any) -> None:
        """Deliver in *loop* (a :class:`kombu.asynchronous.Hub`): the descriptor is read
        by it, queues consumed later are watched from the next iteration on
        (``loop.on_tick``) and looked at once then, and all are looked at again every
        :attr:`interval` seconds (a timer)."""
        self.unregister(self._loop)
        self._loop = loop
        loop.on_tick.add(self._on_tick)
        self._timer = loop.call_repeatedly(self.interval, self._schedule)
        self._on_tick()

    def unregister(self, loop: Any) -> None:
        """Stop delivering in *loop*: its reader, tick and timer go (before the waiter lets
        go of the descriptor, so the loop never polls a closed one)."""
        if loop is None or loop is not self._loop:
            return
        loop.on_tick.discard(self._on_tick)
        if self._reader_fd >= 0:
            loop.remove_reader(self._reader_fd)
            self._reader_fd = -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiter is not None:
            self._waiter.unsubscribe(self._resume_soon)
        self._loop = None
        self.paused = self._scheduled = False

    def _on_tick(self) -> None:
        """Every loop iteration: watch newly consumed queues, and look at them once."""
        if self._watch_consumed():
            self._watch_descriptor()
            self._schedule()

    def _watch_descriptor(self) -> None:
        fd = self.waiter.fileno()
        if fd == self._reader_fd or self.paused:
            return
        if self._reader_fd >= 0:
            self._loop.remove_reader(self._reader_fd)
        if fd >= 0:  # -1: nothing watched (every queue polled): the timer looks
            self._loop.add_reader(fd, self.on_readable)
        self._reader_fd = fd

    def on_readable(self) -> None:
        """The descriptor is readable: read the events, deliver what is ready."""
        waiter = self.waiter
        if waiter.drain() is None:
            # RACE: a thread of this process (a blocked receive) is reading the
            # descriptor; it stays readable until that thread has counted the events:
            # stop watching it until then (or spin), unless the thread is done already.
            waiter.subscribe(self._resume_soon)
            if waiter.drain() is None:
                self._loop.remove_reader(self._reader_fd)
                self._reader_fd, self.paused = -1, True
                return
            waiter.unsubscribe(self._resume_soon)
        self._schedule()

    def _resume_soon(self) -> None:
        """The listener (the reading thread, under its lock): only schedules."""
        loop = self._loop
        if loop is not None:
            loop.call_soon(self._resume)  # thread-safe: it wakes the loop's poll

    def _resume(self) -> None:
        if self._loop is not None and self._waiter is not None:
            self._waiter.unsubscribe(self._resume_soon)
            self.paused = False
            self._watch_descriptor()
            self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._deliver_ready)

    def _deliver_ready(self) -> None:
        """Deliver one ready message, then schedule the next: one per loop iteration, so
        the loop's other work goes on meanwhile; nothing ready ends it until the next
        event or the timer."""
        self._scheduled = False
        if self._loop is not None and self._deliver_one():
            self._schedule()
