"""The one inotify descriptor of a process, shared by every directory it waits on.

:class:`InotifyHub` is one watched directory; all hubs of a process read one
descriptor (``poll(2)``, so any descriptor number works), created on the first wait and
closed with the last watch. One waiting thread reads it; the others sleep on a
condition. Each read is recorded as generations (what changed since a token) and the
messages made ready (packed ids: :func:`vsqs._inotify.read_events`). How a queue waits,
and what it falls back to when inotify runs out, is :mod:`vsqs._waiters`'s.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from bisect import bisect_right
from collections.abc import Callable
from typing import Final

from . import _host, _inotify
from ._mountinfo import renames_without_replacing


class _Watch:
    """What one watched directory's events left: its generation (bumped by every read
    that saw an event on it) and the messages made ready (packed ids and announcements,
    :func:`vsqs._inotify.read_events`), each beside the generation that recorded it
    (sorted: bisected, never scanned), complete from generation *complete_since* on."""

    __slots__ = ("complete_since", "generation", "moved_at", "moved_in", "users")

    def __init__(self, generation: int) -> None:
        self.generation = self.complete_since = generation
        self.moved_in: list[int] = []
        self.moved_at: list[int] = []
        self.users = 0  # hubs using it

    def lose(self, generation: int) -> None:
        """Count a read that lost events: what happened is unknown up to *generation*."""
        self.generation = self.complete_since = generation
        self.moved_in, self.moved_at = [], []

    def forget_oldest(self) -> None:
        """Keep the last :data:`_MOVED_IN_KEPT` ids: older tokens get ``None``."""
        self.complete_since = self.moved_at[-_MOVED_IN_KEPT - 1]
        del self.moved_in[:-_MOVED_IN_KEPT], self.moved_at[:-_MOVED_IN_KEPT]

    def since(self, token: int) -> list[int] | None:
        """The ids made ready since *token*, or ``None`` if not all are known."""
        if token < self.complete_since:
            return None
        return self.moved_in[bisect_right(self.moved_at, token) :]


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
        self.watches: dict[int, _Watch] = {}
        # Watches whose filesystem always renames atomically: a removal there is never
        # the unseen end of a move (``_inotify.read_events``).
        self.exact: set[int] = set()
        # Generations are drawn from one counter for all watches, so a token never
        # matches a later watch on a reused descriptor number.
        self.serial = 0
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
            if not self.watches:
                self._close()
            raise
        watch = self.watches.get(wd)
        if watch is None:
            # A new watch: events before it are unknown, so tokens taken before now
            # (smaller: generations only grow, across watches too) get no names.
            self.serial += 1
            watch = self.watches[wd] = _Watch(self.serial)
            if renames_without_replacing(_host.filesystem_type(path)):
                self.exact.add(wd)
            else:
                self.exact.discard(wd)  # a reused number
        watch.users += 1
        return wd

    def generation(self, wd: int) -> int:
        """The current generation of *wd* (0 if not watched): one dict lookup, atomic."""
        watch = self.watches.get(wd)
        return 0 if watch is None else watch.generation

    def remove(self, wd: int) -> None:
        """Let go of a watch; the descriptor closes with the last one."""
        watch = self.watches.get(wd)
        if watch is not None and watch.users > 1:
            watch.users -= 1
            return
        self.watches.pop(wd, None)
        if self.fd >= 0:
            _inotify.rm_watch(self.fd, wd)  # EINVAL if the directory is gone: fine
        if not self.watches:
            self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            _inotify.close(self.fd)
            self.fd = -1

    def wait(self, wd: int, token: int, seconds: float) -> tuple[int, list[int] | None]:
        """Return after an event on *wd* since *token*, or after *seconds*: the token for
        the next wait and the ids made ready since *token* (:meth:`_Watch.since`)."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            with self.cond:
                watch = self.watches.get(wd)
                if watch is None:
                    return 0, None  # RACE: let go of meanwhile (a closed queue): look again
                while watch.generation == token:
                    if deadline <= time.monotonic():
                        return token, watch.since(token)
                    if not self.reader:
                        break
                    self.sleepers += 1
                    try:
                        self.cond.wait(deadline - time.monotonic())
                    finally:
                        self.sleepers -= 1
                else:
                    # Something happened since the caller looked.
                    return watch.generation, watch.since(token)
                self.reader = True
                fd = self.fd
            # As the reader: wait for events, then hand them out.
            changed: dict[int, list[int] | None] = {}
            found = None
            try:
                if _inotify.wait_readable(fd, deadline - time.monotonic()):
                    changed = _inotify.read_events(fd, self.exact)
            finally:
                with self.lock:
                    self.reader = False
                    self._handed_out(changed)
                    if watch.generation != token:
                        # Only this read moved the generation on since *token*: the
                        # ids since *token* are its own, unless some were forgotten.
                        complete = token >= watch.complete_since
                        found = watch.generation, changed[wd] if complete else None
            if found is not None:
                return found  # our own directory changed: no need to look again

    def newest(self, wds: tuple[int, ...]) -> int:
        """The largest generation of *wds* (0 if none is watched): a token for several
        directories at once. Generations come from one counter, so it moves exactly when
        one of them saw an event. Each lookup is atomic; no lock."""
        watches = self.watches
        newest = 0
        for wd in wds:
            watch = watches.get(wd)
            if watch is not None and watch.generation > newest:
                newest = watch.generation
        return newest

    def wait_any(self, wds: tuple[int, ...], token: int, seconds: float) -> int:
        """Return after an event on any of *wds* since *token* (:meth:`newest`), or after
        *seconds*: the token for the next wait. The reader's seat is shared with
        :meth:`wait`, so threads waiting on one directory and on several read the one
        descriptor in turn."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            with self.cond:
                while (newest := self.newest(wds)) == token:
                    if deadline <= time.monotonic():
                        return token
                    if not self.reader:
                        break
                    self.sleepers += 1
                    try:
                        self.cond.wait(deadline - time.monotonic())
                    finally:
                        self.sleepers -= 1
                else:
                    return newest  # something happened since the caller looked
                if self.fd < 0:
                    return 0  # RACE: every watch was let go of meanwhile: look again
                self.reader = True
                fd = self.fd
            changed: dict[int, list[int] | None] = {}
            try:
                if _inotify.wait_readable(fd, deadline - time.monotonic()):
                    changed = _inotify.read_events(fd, self.exact)
            finally:
                with self.lock:
                    self.reader = False
                    self._handed_out(changed)

    def _handed_out(self, changed: dict[int, list[int] | None]) -> None:
        """Under cond, after a read: record it, wake sleeping threads, tell listeners."""
        if changed:
            self._count(changed)
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
            self._handed_out(_inotify.read_events(self.fd, self.exact))
            return True

    def _count(self, changed: dict[int, list[int] | None]) -> None:
        """Record a read's events (under the condition): a new generation for each watch
        that saw one (for all of them if events were lost: key -1), ids made ready; a
        watch whose read may have made something ready unnamed (``None``) lost track."""
        self.serial += 1
        generation = self.serial
        watches = self.watches
        if -1 in changed:  # the event queue overflowed: anything may have changed
            for every in watches.values():
                every.lose(generation)
            return
        for wd, made_ready in changed.items():
            watch = watches.get(wd)
            if watch is None:  # RACE: events of a watch let go of meanwhile: dropped
                continue
            if made_ready is None:  # see _inotify.read_events: a link-then-unlink move
                watch.lose(generation)
                continue
            watch.generation = generation
            if made_ready:  # inline, not a method: the hot path of a woken receive
                moved_in = watch.moved_in
                moved_in += made_ready
                watch.moved_at += [generation] * len(made_ready)
                if len(moved_in) > _MOVED_IN_KEPT:
                    watch.forget_oldest()


_MOVED_IN_KEPT: Final = 4096


_instances: dict[int, _Instance] = {}  # by process id: a forked child opens its own
_instances_lock = threading.Lock()


def process_instance() -> _Instance:
    """This process's inotify instance (its descriptor is opened by the first watch)."""
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
        self._instance = process_instance()
        self._wd = -1
        self.wait_ready: Callable[[int, float], tuple[int, list[int] | None]] = self._first_wait
        """Wait for an event since *token* (a ``(token, seconds)`` call): the token for the
        next wait and the ids made ready since *token*, ``None`` if not all are known.
        Once the directory is watched, the process instance's own wait, bound to the
        watch: one Python call less on every wake-up."""

    def token(self) -> int:
        # One dict lookup is atomic: no lock on this path of every blocked call.
        return self._instance.generation(self._wd)

    @property
    def wd(self) -> int:
        """The watch descriptor of the directory (-1 until it is watched)."""
        return self._wd

    @property
    def instance(self) -> _Instance:
        """The process's inotify descriptor this directory is watched on."""
        return self._instance

    def _first_wait(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        instance = self._instance
        with instance.cond:
            if self._wd < 0:  # RACE: another thread of this process may have added it
                self._add()
                # Events before the watch existed are lost: make the caller look again.
                return instance.generation(self._wd), None
        return instance.wait(self._wd, token, seconds)

    def _add(self) -> None:
        """Watch the directory (under the instance's condition)."""
        instance = self._instance
        self._wd = instance.add(self.path)
        self._finalizer = weakref.finalize(self, _release, instance, self._wd)
        self.wait_ready = functools.partial(instance.wait, self._wd)

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
                self._add()
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
