"""Bounded queues: a capacity that holds across processes and hosts.

Publishers of a bounded queue take one cross-process lock (``filelock`` on
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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import filelock

from . import _scan
from ._errors import QueueFull

if TYPE_CHECKING:
    from ._queue import Queue

_NEW_GRACE_US = 60_000_000  # a `.new` older than this belongs to a crashed publisher
VERIFY_INTERVAL: Final = 1.0
"""Seconds this process trusts the shared counter before checking it with a listing."""


class Capacity:
    """The bound of one queue object (the lock file is created on first publish)."""

    def __init__(self, queue: Queue, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, not {capacity!r}")
        self.capacity = capacity
        self._queue = queue
        self._lock: filelock.BaseFileLock | None = None
        self._verified_at = -math.inf  # monotonic time of this process's last listing

    def _filelock(self) -> filelock.BaseFileLock:
        if self._lock is None:
            store = self._queue._meta
            store.ensure(store.root)
            self._lock = filelock.FileLock(store.path("capacity.lock"), mode=0o666)
        return self._lock

    def count(self) -> int:
        """The true number of messages (one listing), crashed publishers' debris excluded."""
        queue = self._queue
        listing = _scan.scan(queue.path)
        young = queue.clock.time_us() - _NEW_GRACE_US
        return len(listing.ready) + len(listing.held) + sum(1 for c, _ in listing.new if c > young)

    def publish(
        self,
        views: list[memoryview],
        attrs: dict[str, str],
        delay_us: int,
        dedup: list[str | None],
        timeout: float | None,
    ) -> list[str]:
        """Publish when there is room for all of *views*, waiting up to *timeout*."""
        queue = self._queue
        need = len(views)
        if need > self.capacity:
            raise ValueError(f"a batch of {need} can never fit a queue of capacity {self.capacity}")
        clock = queue.clock
        deadline = None if timeout is None else clock.monotonic() + timeout
        waiter = None if timeout == 0 else queue._get_waiter()
        lock = self._filelock()
        counter = queue._meta.path("capacity.count")
        while True:
            token = waiter.token() if waiter is not None else 0
            remaining = math.inf if deadline is None else deadline - clock.monotonic()
            try:
                lock.acquire(timeout=-1 if math.isinf(remaining) else max(0.0, remaining))
            except filelock.Timeout:
                raise QueueFull(queue.path, self.capacity) from None
            try:
                bound = _read_int(counter)
                now = clock.monotonic()
                if (
                    bound is None
                    or bound + need > self.capacity
                    or now - self._verified_at > VERIFY_INTERVAL
                ):
                    bound = self.count()
                    self._verified_at = now
                if bound + need <= self.capacity:
                    ids = queue._publish_views(views, attrs, delay_us, dedup)
                    queue._meta.write_file(
                        queue._meta.root,
                        "capacity.count",
                        str(bound + need).encode(),
                        durable=False,
                    )
                    return ids
            finally:
                lock.release()
            remaining = math.inf if deadline is None else deadline - clock.monotonic()
            if waiter is None or remaining <= 0:
                raise QueueFull(queue.path, self.capacity)
            waiter.wait(token, remaining)  # a delete in any process wakes us


def _read_int(path: str) -> int | None:
    """The recorded bound, or ``None`` when there is none to trust."""
    try:
        with open(path, "rb") as handle:
            return int(handle.read())
    except (FileNotFoundError, ValueError):
        return None  # never recorded (or a hand edit): the caller counts with a listing
