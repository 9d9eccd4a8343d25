"""Waiting on several queues at once, for the kombu transport (see :mod:`vsqs.kombu`).

A queue's own waiter (:meth:`vsqs.Queue.waiter`) waits on one directory. A Celery worker
consumes several queues (its task queues, its remote-control queue, an event queue), so
:class:`Watchers` gives each watched queue a daemon thread blocked in that queue's waiter
(inotify where it works) and wakes whoever waits here when any of them sees a change.
Threads are made once per queue and end when :meth:`Watchers.close` is called, or when
nobody has waited for :data:`IDLE` seconds (a connection that is no longer drained, or
never closed, must not keep threads and inotify watches for ever); the next wait starts
them again. A forked child starts with none, and makes its own.

Usage is the waiter protocol: ``token = watchers.token()`` *before* looking at the
queues, then ``watchers.wait(token, seconds)``: a change in between is never missed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import Final

from .. import Queue

RECHECK: Final = 1.0  # the longest a watching thread blocks before it looks at _stop
IDLE: Final = 10.0  # seconds without a wait after which the watching threads end


class Watchers:
    """One watching thread per queue directory; any change wakes :meth:`wait`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._changes = 0
        self._stop = threading.Event()
        self._watched: set[str] = set()
        self._used = time.monotonic()
        self._waiting = 0  # callers inside wait(): their threads must stay
        self._pid = os.getpid()

    def watch(self, queues: Iterable[Queue]) -> None:
        """Start a watching thread for each of *queues* that has none yet."""
        if os.getpid() != self._pid:  # a forked child: the parent's threads are not here
            self.__init__()  # type: ignore[misc]
        for queue in queues:
            with self._cond:
                self._used = time.monotonic()
                if queue.path in self._watched:
                    continue
                self._watched.add(queue.path)
            # Its own handle: closing the caller's queue must not detach our waiter.
            own = Queue.from_config(queue.path, queue.config)
            name = f"vsqs-kombu-watch {queue.path}"
            threading.Thread(target=self._run, args=(own,), name=name, daemon=True).start()

    def token(self) -> int:
        """How many changes were seen so far (take it before looking at the queues)."""
        with self._cond:
            return self._changes

    def wait(self, token: int, seconds: float) -> None:
        """Return once a change was seen since *token*, or after *seconds*."""
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: self._changes != token or self._stop.is_set(), seconds)
            finally:
                self._waiting -= 1
                self._used = time.monotonic()

    def close(self) -> None:
        """Stop every watching thread (each ends within :data:`RECHECK` seconds)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _changed(self) -> None:
        with self._cond:
            self._changes += 1
            self._cond.notify_all()

    def _run(self, queue: Queue) -> None:
        waiter = queue.waiter()
        seen = waiter.token()
        waiter.wait(seen, 0)  # the first wait sets the watch up; what came before is lost,
        self._changed()  # so whoever waits looks again
        while not self._stop.is_set():
            waiter.wait(seen, RECHECK)
            now = waiter.token()
            if now != seen:
                seen = now
                self._changed()
            with self._cond:
                if not self._waiting and time.monotonic() - self._used > IDLE:
                    self._watched.discard(queue.path)  # the next watch() starts another
                    break
        queue.close()
