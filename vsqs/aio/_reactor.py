"""How coroutines wait for a queue directory to change, without a thread.

The process has one inotify descriptor (:mod:`vsqs._waiters`); each event loop that waits
registers it once with ``loop.add_reader`` (a :class:`_Reactor` per loop). When it is
readable the loop drains it without blocking; when a *thread* of this process holds the
reader's seat (a sync ``receive`` blocked in ``poll``), that thread reads the events and
the loop hears of them through a listener (``call_soon_threadsafe``), and stops
watching the descriptor until then, so it never spins on a readable descriptor.

Each :class:`~vsqs.aio.AsyncQueue` queues its waiting coroutines in FIFO order
(:class:`Waiters`) and wakes *one* per change; a woken receiver that claimed something
wakes the next (the baton), so a thousand waiting tasks cost one descriptor and no
thundering herd: each event wakes as many tasks as there are messages to take, plus one.
"""

from __future__ import annotations

import asyncio
import collections
import math
import weakref
from dataclasses import dataclass, field
from typing import Final

from .._waiters import InotifyHub

_INFINITE: Final = math.inf


class Waiters:
    """Coroutines waiting for a change, woken in arrival order: one per change
    (receivers, who pass the baton on) or all of them (*broadcast*: publishers waiting
    for room, who each need to look)."""

    def __init__(self, *, broadcast: bool = False) -> None:
        self._futures: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._broadcast = broadcast

    def __len__(self) -> int:
        return len(self._futures)

    def notify(self) -> None:
        """The directory changed: wake one waiter, or all when broadcasting."""
        if self._broadcast:
            futures, self._futures = self._futures, collections.deque()
            for future in futures:
                if not future.done():
                    future.set_result(True)
        else:
            self.wake_one()

    def wake_one(self) -> None:
        """Wake the longest-waiting coroutine, if any (its wait returns ``True``)."""
        while self._futures:
            future = self._futures.popleft()
            if not future.done():
                future.set_result(True)
                return

    async def wait(self, seconds: float) -> bool:
        """Wait for a wake-up (``True``) or *seconds* (``False``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._futures.append(future)
        timer = None if seconds == _INFINITE else loop.call_later(seconds, _expire, future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.result():
                self.wake_one()  # handed the baton and cannot use it: pass it on
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if not future.done() or future.cancelled() or not future.result():
                try:
                    self._futures.remove(future)
                except ValueError:
                    pass  # already taken off by a wake-up


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


@dataclass
class _Watch:
    """One watched directory of a loop: its last seen generation, who waits on it."""

    generation: int
    waiters: list[Waiters] = field(default_factory=list)


class _Reactor:
    """The process's inotify descriptor, watched by one event loop for its queues."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fd = -1
        self._reading = False
        self._scheduled = False
        self._draining = False
        self._watched: dict[InotifyHub, _Watch] = {}

    def attach(self, hub: InotifyHub, *waiters: Waiters) -> None:
        """Watch *hub*'s directory for *waiters*.

        :raises OSError: inotify ran out (its per-user limits); the caller polls.
        """
        fd = hub.watch()
        if not self._watched:
            hub.subscribe(self._heard)  # one listener per loop: the instance is shared
        watch = self._watched.get(hub)
        if watch is None:
            watch = self._watched[hub] = _Watch(hub.token())
        watch.waiters.extend(waiters)
        if self._reading and fd != self._fd:
            self._loop.remove_reader(self._fd)
            self._reading = False
        self._fd = fd
        if not self._reading:
            self._loop.add_reader(fd, self._readable)
            self._reading = True

    def detach(self, hub: InotifyHub, *waiters: Waiters) -> None:
        """Stop watching *hub* for *waiters*; the descriptor too, after the last."""
        watch = self._watched.get(hub)
        if watch is None:
            return
        watch.waiters = [mine for mine in watch.waiters if mine not in waiters]
        if not watch.waiters:
            del self._watched[hub]
        if not self._watched:
            hub.unsubscribe(self._heard)
            if self._reading:
                self._loop.remove_reader(self._fd)
                self._reading = False

    def _readable(self) -> None:
        hub = next(iter(self._watched), None)
        self._draining = True  # _heard needs no wake-up of the loop: we dispatch next
        try:
            drained = hub is not None and hub.drain()
        finally:
            self._draining = False
        if drained:
            self._dispatch()  # reads every generation: nothing counted so far is missed
        else:
            # A thread holds the reader's seat: it reads the events and calls _heard,
            # which watches the descriptor again; until then it would only spin.
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _heard(self) -> None:
        """The listener (any thread, under the instance's lock): events were counted."""
        if self._scheduled or self._draining:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._dispatch)
        except RuntimeError:
            pass  # the loop is closed: nobody waits on it any more

    def _dispatch(self) -> None:
        self._scheduled = False
        if not self._reading and self._watched:
            self._loop.add_reader(self._fd, self._readable)
            self._reading = True
        for hub, watch in list(self._watched.items()):
            generation = hub.token()
            if generation != watch.generation:
                watch.generation = generation
                for waiters in watch.waiters:
                    waiters.notify()


_reactors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Reactor] = (
    weakref.WeakKeyDictionary()
)


def reactor() -> _Reactor:
    """The reactor of the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    found = _reactors.get(loop)
    if found is None:
        found = _reactors[loop] = _Reactor(loop)
    return found
