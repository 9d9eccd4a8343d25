"""The one inotify descriptor of a process, shared by every directory it waits on.

:class:`InotifyHub` is one watched directory; all hubs of a process read one
descriptor (``poll(2)``, so any descriptor number works), created on the first wait and
closed with the last watch. One waiting thread reads it; the others sleep on a
condition. Each read is recorded as generations (what changed since a token) and the
digit-only names moved in (messages made ready). How a queue waits, and what it falls
back to when inotify runs out, is :mod:`vsqs._wait`'s.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final

from . import _inotify


class _Instance:
    """The one inotify descriptor of this process, with one watch per watched directory.

    Created on the first wait, closed when the last directory is let go of. One waiting
    thread at a time reads it (``poll(2)``, so any descriptor number works); the others
    sleep on a condition and wake only when their own directory changed or the reader's
    seat is free. Each watch has a generation, bumped by every event on its directory.
    """

    def __init__(self) -> None:
        # `with self.lock` where no wait or notify follows: the condition's own
        # __enter__/__exit__ are Python calls around the same (re-entrant) lock.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.fd = -1
        self.reader = False
        self.sleepers = 0  # threads asleep on the condition (the reader's seat was taken)
        self.generations: dict[int, int] = {}
        self.users: dict[int, int] = {}  # watch -> hubs using it
        # Generations are drawn from one counter for all watches, so a token never
        # matches a later watch on a reused descriptor number.
        self.serial = 0
        # Per watch: the (generation, name) of each digit-only name moved in (a message
        # made ready), and the generation from which that record is complete.
        self.moved_in: dict[int, list[tuple[int, str]]] = {}
        self.complete_since: dict[int, int] = {}
        # Called (under cond, from any thread) whenever a read of the descriptor ends:
        # how an event loop that watches it hears of events a thread read first.
        self.listeners: set[Callable[[], None]] = set()

    def add(self, path: str) -> int:
        """Watch *path*; its watch descriptor. Raises :class:`OSError` at a limit."""
        if self.fd < 0:
            self.fd = _inotify.init()  # EMFILE: the per-user instance limit (128)
        try:
            wd = _inotify.add_watch(self.fd, path)  # ENOSPC: the per-user watch limit
        except OSError:
            if not self.users:
                self._close()
            raise
        self.users[wd] = self.users.get(wd, 0) + 1
        if wd not in self.generations:
            # A new watch: events before it are unknown, so tokens taken before now
            # (smaller: generations only grow, across watches too) get no names.
            self.serial += 1
            self.generations[wd] = self.complete_since[wd] = self.serial
            self.moved_in[wd] = []
        return wd

    def remove(self, wd: int) -> None:
        """Let go of a watch; the descriptor closes with the last one."""
        left = self.users.get(wd, 0) - 1
        if left > 0:
            self.users[wd] = left
            return
        self.users.pop(wd, None)
        self.generations.pop(wd, None)
        self.moved_in.pop(wd, None)
        self.complete_since.pop(wd, None)
        if self.fd >= 0:
            _inotify.rm_watch(self.fd, wd)  # EINVAL if the directory is gone: fine
        if not self.users:
            self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def wait(self, wd: int, token: int, seconds: float) -> tuple[int, list[str] | None]:
        """Return after an event on *wd* since *token*, or after *seconds*: the token for
        the next wait and the names made ready since *token* (:meth:`since`)."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            with self.cond:
                while self.generations.get(wd, token + 1) == token:
                    if deadline <= time.monotonic():
                        return token, self.since(wd, token)
                    if not self.reader:
                        break
                    self.sleepers += 1
                    try:
                        self.cond.wait(deadline - time.monotonic())
                    finally:
                        self.sleepers -= 1
                else:
                    # Something happened since the caller looked.
                    return self.generations.get(wd, 0), self.since(wd, token)
                self.reader = True
                fd = self.fd
            found = self._read(fd, deadline, wd, token)
            if found is not None:
                return found  # our own directory changed: no need to look again

    def _read(
        self, fd: int, deadline: float, wd: int, token: int
    ) -> tuple[int, list[str] | None] | None:
        """As the reader: wait for events until *deadline*, then hand them out. If *wd*
        changed, its next token and names since *token*, taken under the same lock as
        the events were counted; ``None`` if it did not."""
        changed: dict[int, list[str]] = {}
        found = None
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                changed = _inotify.read_events(fd)
        finally:
            with self.lock:
                self.reader = False
                self._handed_out(changed)
                if wd in changed or -1 in changed:
                    found = self.generations.get(wd, 0), self.since(wd, token)
        return found

    def _handed_out(self, changed: dict[int, list[str]]) -> None:
        """Under cond, after a read: record it, wake sleeping threads, tell listeners."""
        if changed:
            self._bump(changed)
        if self.sleepers:
            self.cond.notify_all()
        if self.listeners:
            for listener in list(self.listeners):
                listener()

    def drain(self) -> bool:
        """Read the events already queued, without blocking (for an event loop).

        ``False`` when a thread holds the reader's seat: that thread reads them and
        tells the listeners; the caller should stop watching the descriptor until then
        (it stays readable). Never blocks on anything but the condition's lock.
        """
        with self.cond:
            if self.reader or self.fd < 0:
                return False
            self._handed_out(_inotify.read_events(self.fd))
            return True

    def _bump(self, changed: dict[int, list[str]]) -> None:
        """Record a read's events (under the condition): new generations, names moved in."""
        lost = -1 in changed  # the event queue overflowed: anything may have changed
        generations, moved_in = self.generations, self.moved_in
        self.serial += 1
        generation = self.serial
        for watched in generations:
            names = changed.get(watched)
            if names is None and not lost:
                continue
            generations[watched] = generation
            if lost:
                moved_in[watched] = []  # what happened is unknown up to this generation
                self.complete_since[watched] = generation
            elif names:
                record = moved_in[watched]
                for name in names:
                    record.append((generation, name))
                if len(record) > _MOVED_IN_KEPT:  # forget the oldest: older tokens get None
                    self.complete_since[watched] = record[-_MOVED_IN_KEPT - 1][0]
                    del record[:-_MOVED_IN_KEPT]

    def since(self, wd: int, token: int) -> list[str] | None:
        """The digit-only names moved into *wd* since *token*, or ``None`` if not all known
        (the caller holds the lock)."""
        if token < self.complete_since.get(wd, token + 1):
            return None
        record = self.moved_in.get(wd, ())
        # From the newest end: a woken waiter wants the last few of up to 4,096.
        start = len(record)
        while start and record[start - 1][0] > token:
            start -= 1
        return [name for _, name in record[start:]]


_MOVED_IN_KEPT: Final = 4096


_instances: dict[int, _Instance] = {}  # by process id: a forked child opens its own
_instances_lock = threading.Lock()


def _instance() -> _Instance:
    with _instances_lock:
        instance = _instances.get(os.getpid())
        if instance is None:
            _instances.clear()  # a forked child must not read its parent's events
            instance = _instances[os.getpid()] = _Instance()
        return instance


class InotifyHub:
    """One watched directory of this process, shared by every thread and queue object."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._instance = _instance()
        self._wd = -1

    def token(self) -> int:
        # One dict lookup is atomic: no lock on this path of every blocked call.
        return self._instance.generations.get(self._wd, 0)

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[str] | None]:
        instance = self._instance
        if self._wd < 0:
            with instance.cond:
                if self._wd < 0:  # RACE: another thread of this process may have added it
                    self._wd = instance.add(self.path)
                    self._finalizer = weakref.finalize(self, _release, instance, self._wd)
                    # Events before the watch existed are lost: make the caller look again.
                    return instance.generations[self._wd], None
        return instance.wait(self._wd, token, seconds)

    # -- the non-blocking side, for an event loop (vsqs.aio) ----------------------------

    def watch(self) -> int:
        """Make sure the directory is watched; the process's inotify descriptor.

        Events before this call are not seen: look at the queue after it. The
        descriptor is shared (one per process, whatever the number of waiters); watch
        it for reading and call :meth:`drain` when it is readable.

        :raises OSError: inotify ran out (its per-user limits).
        """
        instance = self._instance
        with instance.cond:
            if self._wd < 0:
                self._wd = instance.add(self.path)
                self._finalizer = weakref.finalize(self, _release, instance, self._wd)
            return instance.fd

    def drain(self) -> bool:
        """Read queued events without blocking (see :meth:`_Instance.drain`)."""
        return self._instance.drain()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call *listener* (from any thread, holding a lock: it must only schedule
        work) whenever events are counted, whoever read them."""
        with self._instance.cond:
            self._instance.listeners.add(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        with self._instance.cond:
            self._instance.listeners.discard(listener)


def _release(instance: _Instance, wd: int) -> None:
    with instance.cond:
        instance.remove(wd)
