"""Bounded queues: a capacity that holds across processes and hosts.

Publishers of a bounded queue take one cross-process lock (``flock`` on
``.vsqs/capacity.lock``) around the whole publish, so concurrent producers can never push
the queue past its capacity. Under that lock they keep an *upper bound* of the message
count in ``.vsqs/capacity.count``: publishes raise it, deletes (which take no lock) only
make it pessimistic. While ``bound + n <= capacity`` a publish needs no listing; when the
bound says "full", one listing replaces it with the true count. So a bounded publish costs
a lock and two tiny file operations, and a listing only when the queue is (nearly) full.

The bound is trusted only once it was checked: a missing or unreadable counter (the
first bounded publish to a queue that already holds messages, published without a
capacity or by vsqs 0.3) is rebuilt from a listing, and so is any counter this process
has not checked against a listing for ``VERIFY_INTERVAL`` seconds. So messages that
unbounded producers add are counted within that interval; a bounded queue's listing is
short, so this costs little.

Every producer of a bounded queue must open it with the same ``capacity``: a producer that
does not take the lock is not bounded by it.

Moves are producers too: a message dead-lettered into a bounded queue, or redriven into
one, takes room there under the same lock (:func:`room_for_move`), and never waits for
it: a move that finds the queue full leaves the message where it was (the caller says
how it is held back) and is tried again later.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from . import _scan
from ._clock import Clock
from ._errors import QueueFull
from ._ids import is_hold
from ._layout import CAPACITY_COUNT, CAPACITY_LOCK, ROOT, Layout
from ._lock import FileLock
from ._meta import report_once
from ._scan import NEW_GRACE_US
from ._waiters import Waiter

VERIFY_INTERVAL: Final = 1.0
"""Seconds this process trusts the shared counter before checking it with a listing."""
MOVE_LOCK_WAIT: Final = 0.1
"""Seconds a move waits for the capacity lock of the queue it moves into; it is held
back (and tried again later, as for a full queue) if the lock's holder is slower."""


class Capacity:
    """The bound of one queue object (the lock file is created on first publish)."""

    def __init__(
        self, layout: Layout, clock: Clock, capacity: int, counted: tuple[str, ...] = ()
    ) -> None:
        self.capacity = capacity
        self._layout = layout
        self._dirs = (layout.path, *counted)  # a partitioned queue counts its partitions too
        self._clock = clock
        # No I/O until acquired (vsqs._lock: the lock's policy, and why not filelock).
        self._lock = FileLock.in_queue(layout, CAPACITY_LOCK, clock)
        self._verified_at = -math.inf  # monotonic time of this process's last listing

    @property
    def layout(self) -> Layout:
        """The queue directory whose lock and counter this bound keeps."""
        return self._layout

    def through(self, layout: Layout) -> Capacity:
        """This bound with its lock and counter reached through *layout* (a move's
        pinned layout, see :func:`room_for_move`); it checks the counter with a listing."""
        return Capacity(layout, self._clock, self.capacity, self._dirs[1:])

    def count(self) -> int:
        """The true number of messages (one listing), crashed publishers' debris excluded."""
        young = self._clock.time_us() - NEW_GRACE_US
        total = 0
        for path in self._dirs:
            listing = _scan.scan(path)
            total += len(listing.ready) + len(listing.held)
            total += sum(1 for created, _ in listing.new if created > young)
        return total

    @contextmanager
    def room(self, need: int, timeout: float | None, waiter: Waiter | None) -> Iterator[None]:
        """Hold the queue's capacity lock while there is room for *need* more messages.

        The body of the ``with`` publishes them; on leaving it, the bound is raised by
        *need*. Waits up to *timeout* seconds for room (``None``: forever), woken by
        deletes in any process through *waiter*; ``waiter=None`` does not wait.

        :raises QueueFull: no room came within *timeout*.
        :raises ValueError: *need* is larger than the capacity itself.
        """
        if need > self.capacity:
            raise ValueError(f"a batch of {need} can never fit a queue of capacity {self.capacity}")
        clock = self._clock
        deadline = None if timeout is None else clock.monotonic() + timeout
        lock = self._lock
        while True:
            token = waiter.token() if waiter is not None else 0
            # The lock too is waited for within the publish's timeout (its holder may be
            # stopped), and a timeout spent waiting for it is a full queue's.
            if not lock.acquire(None if deadline is None else deadline - clock.monotonic()):
                raise QueueFull(self._layout.path, self.capacity)
            try:
                bound = self._bound(need)
                if bound + need <= self.capacity:
                    try:
                        yield
                    except BaseException:
                        # A batch that failed after a prefix: count what is there now.
                        self._record(self.count())
                        raise
                    self._record(bound + need)
                    return
            finally:
                lock.release()
            remaining = math.inf if deadline is None else deadline - clock.monotonic()
            if waiter is None or remaining <= 0:
                raise QueueFull(self._layout.path, self.capacity)
            waiter.wait(token, remaining)  # a delete in any process wakes us

    def _record(self, bound: int) -> None:
        """Rewrite the counter; never raises, since the publish it follows has happened.

        If the rewrite fails (a full disk, a quota: the new content needs a block), the
        counter is removed instead (an unlink needs no space), so the next bounded
        publisher in any process recounts with a listing: a stale, too low count is
        never left behind to let the queue overfill.
        """
        layout = self._layout
        try:
            layout.write(ROOT, CAPACITY_COUNT, str(bound).encode(), durable=False)
        except OSError as exc:
            self._verified_at = -math.inf  # this process recounts next time in any case
            try:
                layout.remove(ROOT, CAPACITY_COUNT)
            except OSError:
                pass  # e.g. read-only meanwhile: nobody can publish then, nor overfill it
            report_once(layout.path, "could not record the capacity count", str(exc))

    def _bound(self, need: int) -> int:
        """An upper bound of the message count, from the counter when it can be trusted."""
        bound = _read_int(self._layout)
        now = self._clock.monotonic()
        unchecked = now - self._verified_at > VERIFY_INTERVAL
        if bound is None or bound + need > self.capacity or unchecked:
            bound = self.count()
            self._verified_at = now
        return bound


@contextmanager
def room_for_move(capacity: Capacity | None, layout: Layout) -> Iterator[None]:
    """Room for one message moved into a queue of *capacity* (``None``: unbounded).

    The body of the ``with`` moves it, under that queue's capacity lock, as a bounded
    publish does; a move never waits for room, and waits for the lock at most
    :data:`MOVE_LOCK_WAIT` seconds (a receive makes it, on its own time). The lock and
    the counter are reached through *layout*, the target's, pinned to the descriptor the
    move goes through (see ``Queue._opened_target``), never by the target's path.

    :raises QueueFull: the queue is full now, or its lock stayed held.
    """
    if capacity is None:
        yield
        return
    with capacity.through(layout).room(1, MOVE_LOCK_WAIT, None):
        yield


def held_back(held: list[tuple[int, str]]) -> int:
    """How many of the *held* names (a listing's) are requeue holds ``<id>.<end>.0``.

    Such a hold is taken for an instant by every requeue; it lasts when the message
    is kept back for want of room in its dead-letter queue (full, or a full disk), or
    when its requeuer died: each is tried again when its hold ends.
    """
    return sum(1 for _, name in held if is_hold(name))


def _read_int(layout: Layout) -> int | None:
    """The recorded bound, or ``None`` when there is none to trust."""
    try:
        raw = layout.read(ROOT, CAPACITY_COUNT)
        return None if raw is None else int(raw)
    except (OSError, ValueError):
        return None  # never recorded, a hand edit or a planted non-file: count instead
