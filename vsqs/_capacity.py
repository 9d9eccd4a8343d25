"""Bounded queues: a capacity that holds across processes and hosts.

Publishers of a bounded queue take one cross-process lock (``filelock`` on
``.vsqs/capacity.lock``) around the whole publish, so concurrent producers can never push
the queue past its capacity. Under that lock they keep an *upper bound* of the message
count in ``.vsqs/capacity.count``: publishes raise it, deletes (which take no lock) only
make it pessimistic. While ``bound + n <= capacity`` a publish needs no listing; when the
bound says "full", one listing replaces it with the true count. So a bounded publish costs
a lock and two tiny file operations, and a listing only when the queue is (nearly) full.

Every producer of a bounded queue must open it with the same ``capacity``: a producer that
does not take the lock is not bounded by it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import filelock

from . import _scan
from ._errors import QueueFull

if TYPE_CHECKING:
    from ._queue import Queue

_NEW_GRACE_US = 60_000_000  # a `.new` older than this belongs to a crashed publisher


class Capacity:
    """The bound of one queue object (the lock file is created on first publish)."""

    def __init__(self, queue: Queue, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, not {capacity!r}")
        self.capacity = capacity
        self._queue = queue
        self._lock: filelock.BaseFileLock | None = None

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
                if bound + need > self.capacity:
                    bound = self.count()
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


def _read_int(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return int(handle.read() or b"0")
    except (FileNotFoundError, ValueError):
        return 0  # no bound recorded yet (or a torn hand edit): assume empty, then verify
