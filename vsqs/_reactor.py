"""How coroutines wait for a queue directory to change, without a thread.

Each event loop that waits has one :class:`~vsqs.MultiWaiter` (a :class:`Reactor` per
loop) on the directories of its queues, and registers its descriptor (the process's one
inotify descriptor) with ``loop.add_reader``. When it is readable the loop drains it
without blocking and wakes the queues whose directories changed; when a *thread* of
this process holds the reader's seat (a sync ``receive`` blocked in ``poll``), that
thread reads the events and
the loop hears of them through a listener (``call_soon_threadsafe``), and stops
watching the descriptor until then, so it never spins on a readable descriptor.

Used by :class:`~vsqs.aio.AsyncQueue` and by ``vsqs serve``'s long polls (here, below
both, so that neither imports the other). Each queue's waiting coroutines are queued
in FIFO order (:class:`Waiters`) and *one* is woken per change; a woken receiver that
claimed something wakes the next (the baton), so a thousand waiting tasks cost one
descriptor and no thundering herd: each event wakes as many tasks as there are
messages to take, plus one.
"""

from __future__ import annotations

import collections
import math
import weakref
from typing import TYPE_CHECKING, Final

from ._waiters import MultiWaiter

if TYPE_CHECKING:
    import asyncio

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
        import asyncio  # noqa: PLC0415 -- a coroutine runs: imported already, not by `import vsqs`

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


class Reactor:
    """One event loop's watch of its queue directories: a :class:`~vsqs.MultiWaiter`
    whose descriptor (the process's inotify descriptor) the loop reads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiter = MultiWaiter()
        self._fd = -1
        self._reading = False
        self._scheduled = False
        self._draining = False
        self._waiters: dict[str, list[Waiters]] = {}

    def attach(self, path: str, wait: str, *waiters: Waiters) -> bool:
        """Watch the directory *path* for *waiters*; ``False`` where it cannot be
        watched (a network filesystem, ``wait="poll"``, inotify's limits): poll it."""
        if not self._waiter.add(path, wait=wait):
            self._waiter.remove(path)  # polled: the caller sleeps instead
            return False
        if not self._waiters:
            self._waiter.subscribe(self._heard)
        self._waiters.setdefault(path, []).extend(waiters)
        fd = self._waiter.fileno()
        if self._reading and fd != self._fd:
            self._loop.remove_reader(self._fd)
            self._reading = False
        self._fd = fd
        if not self._reading:
            self._loop.add_reader(fd, self._readable)
            self._reading = True
        return True

    def detach(self, path: str, *waiters: Waiters) -> None:
        """Stop watching *path* for *waiters*; the descriptor too, after the last."""
        mine = self._waiters.get(path)
        if mine is None:
            return
        mine[:] = [waiting for waiting in mine if waiting not in waiters]
        if not mine:
            del self._waiters[path]
            if not self._waiters:
                self._waiter.unsubscribe(self._heard)
                if self._reading:
                    self._loop.remove_reader(self._fd)
                    self._reading = False
            # After remove_reader: the descriptor closes with the process's last watch.
            self._waiter.remove(path)

    def _readable(self) -> None:
        self._draining = True  # _heard needs no wake-up of the loop: we dispatch next
        try:
            changed = self._waiter.drain()
        finally:
            self._draining = False
        if changed is not None:
            self._notify(changed)
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
        if not self._reading and self._waiters:
            self._loop.add_reader(self._fd, self._readable)
            self._reading = True
        self._notify(self._waiter.changed())

    def _notify(self, changed: list[str]) -> None:
        for path in changed:
            for waiters in self._waiters.get(path, ()):
                waiters.notify()


_reactors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Reactor] = (
    weakref.WeakKeyDictionary()
)


def reactor() -> Reactor:
    """The reactor of the running event loop (made on first use)."""
    import asyncio  # noqa: PLC0415 -- an event loop runs; `import vsqs` never imports asyncio

    loop = asyncio.get_running_loop()
    found = _reactors.get(loop)
    if found is None:
        found = _reactors[loop] = Reactor(loop)
    return found
