"""Several queue directories read as one: a set of queues (dirq's QueueSet), a
partitioned queue (one queue in N directories: :mod:`vsqs._sets._partitioned`), and
:func:`Queue`, which opens a queue directory as whichever its stored shape says.

A :class:`QueueSet` adds no state on disk: each message is claimed from its own queue by
that queue's atomic rename, and deleted or extended there, routed by ``Message.queue``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from typing import Final, TypeAlias

from .. import _scan
from .._errors import InvalidId, QueueDrained
from .._ids import parse_id, parse_name
from .._message import Message
from .._options import batch_size
from .._queue import Queue as PlainQueue
from .._waiters import RECHECK, MultiWaiter
from ._open import Queue, partitions_of
from ._partitioned import PartitionedQueue
from ._wait import receive_until

__all__ = ["AnyQueue", "PartitionedQueue", "PlainQueue", "Queue", "QueueSet", "partitions_of"]

AnyQueue: TypeAlias = PlainQueue | PartitionedQueue
"""What :func:`Queue` returns: a plain queue or a partitioned one (for annotations, and
``isinstance(q, vsqs.AnyQueue)``)."""

ORDERS: Final = ("oldest", "priority")


class QueueSet:
    """Receive from several queues as if they were one.

    ``order="oldest"``: each receive takes the oldest ready messages across all queues,
    by id (publish time). It lists every queue once per call, so its cost grows with the
    backlogs: prefer :meth:`receive_batch` at depth, or priority order.
    ``order="priority"``: the first queue is drained before the second is looked at, and
    so on; it costs what receiving from the first non-empty queue costs.

    Waiting. While every queue is empty, a blocked receive waits on all of them at once
    (one :class:`~vsqs.MultiWaiter`: inotify where available), so a message published
    to any queue of the set wakes it at once. It also looks again when a lease or delay
    it knows of ends, and every *recheck* seconds on queues whose directories cannot be
    watched (network filesystems, ``wait="poll"``): those are polled.

    Atomicity is each queue's: a message is claimed by exactly one consumer.

    :param queues: the queues, in priority order for ``order="priority"``.
    :param recheck: the polling interval of queues that cannot be watched (seconds).
    :raises ValueError: no queue, a queue twice, or an unknown *order*.
    """

    def __init__(self, *queues: AnyQueue, order: str = "oldest", recheck: float = 0.05) -> None:
        if not queues:
            raise ValueError("a QueueSet needs at least one queue")
        for queue in queues:
            if not isinstance(queue, (PlainQueue, PartitionedQueue)):
                raise TypeError(f"expected Queue objects, got {type(queue).__name__}")
        paths = [queue.path for queue in queues]
        if len(set(paths)) != len(paths):
            raise ValueError(f"a queue appears twice in the set: {paths}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
        if isinstance(recheck, bool) or not isinstance(recheck, (int, float)) or recheck <= 0:
            raise ValueError(f"recheck must be a positive number of seconds, not {recheck!r}")
        self.queues: Final = tuple(queues)
        self.order: Final = order
        self.recheck = float(recheck)
        # A message names the directory it came from: a partition's, for a partitioned queue.
        self._by_path = {part.path: q for q in queues for part in (q, *partitions_of(q))}
        self._waiter: MultiWaiter | None = None
        self._waiter_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"QueueSet({', '.join(repr(q) for q in self.queues)}, order={self.order!r})"

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """Claim one message from the set, waiting up to *timeout* (``None``: forever).

        :raises QueueDrained: every queue of the set is shut down and drained.
        """
        got = self.receive_batch(1, visibility_timeout=visibility_timeout, timeout=timeout)
        return got[0] if got else None

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """Claim up to *max_messages* messages from the set, in the set's order.

        Returns as soon as at least one was claimed; waits up to *timeout* while none is.

        :raises QueueDrained: every queue of the set is shut down and drained.
        """
        batch_size(max_messages)
        if timeout is not None and (math.isnan(timeout) or timeout < 0):
            raise ValueError(f"timeout must be >= 0 or None, not {timeout!r}")
        first = self.queues[0]
        return receive_until(
            lambda: self._claim(max_messages, visibility_timeout),
            self.waiter,
            clock=first.clock,
            timeout=timeout,
            # Each queue knows when its own leases, delays and grace end (no I/O).
            next_look=lambda: min(queue.next_look() for queue in self.queues),
            drained=lambda: QueueDrained(
                first.path, "every queue of the set is shut down and drained"
            ),
        )

    def waiter(self) -> MultiWaiter:
        """What a blocked receive of the set waits on: every queue's directory, with each
        queue's ``wait`` mode (made on first use, once, whatever the threads; kept for
        the set's life). Waiting on it is thread-safe (see :class:`~vsqs.MultiWaiter`).
        """
        with self._waiter_lock:
            if self._waiter is None:
                configured = [q.config.poll_interval for q in self.queues]
                waiter = MultiWaiter(
                    poll_interval=self.recheck,
                    recheck=min([RECHECK, *(every for every in configured if every)]),
                    clock=self.queues[0].clock,
                )
                for queue in self.queues:
                    waiter.add(queue.path, wait=queue.config.wait)
                self._waiter = waiter
            return self._waiter

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]:
        """Yield messages as they come; stop when every queue is shut down and drained.

        With a *timeout*, also stop after *timeout* seconds without a message.
        """
        while True:
            try:
                message = self.receive(visibility_timeout=visibility_timeout, timeout=timeout)
            except QueueDrained:
                return
            if message is None:
                return
            yield message

    def _claim(self, limit: int, visibility_timeout: float | None) -> tuple[list[Message], bool]:
        """One non-blocking pass; returns the messages and whether every queue is drained."""
        plan: list[tuple[AnyQueue, int]]
        if self.order == "oldest":
            plan = self._oldest_plan(limit)
        else:
            plan = [(queue, limit) for queue in self.queues]
        got: list[Message] = []
        drained = 0
        for queue, count in plan:
            want = min(count, limit - len(got))
            if want <= 0:
                break
            try:
                got += queue.receive_batch(want, visibility_timeout=visibility_timeout, timeout=0)
            except QueueDrained:
                drained += 1
        if self.order == "oldest":
            got.sort(key=lambda message: parse_id(message.id) or 0)
        return got, drained == len(self.queues)

    def _oldest_plan(self, limit: int) -> list[tuple[AnyQueue, int]]:
        """How many to take from which queue: the *limit* oldest candidates across all."""
        candidates: list[tuple[int, int]] = []
        now_us = self.queues[0].clock.time_us()
        for index, queue in enumerate(self.queues):
            listing = _scan.scan(queue.path)
            keys = [code >> 1 for code in listing.ready[:limit]]
            # Expired leases come back on the next receive with their old id: they count.
            for expires, name in listing.held:
                entry = parse_name(name)
                if expires <= now_us and entry is not None:
                    keys.append(entry.key)
            candidates += [(key, index) for key in keys]
        if not candidates:
            # Nothing listed: still ask each queue, which also tells a drained one.
            return [(queue, limit) for queue in self.queues]
        candidates.sort()
        counts = [0] * len(self.queues)
        for _, index in candidates[:limit]:
            counts[index] += 1
        # Queues in the order of their oldest candidate (the list is sorted by key).
        order = dict.fromkeys(index for _, index in candidates[:limit])
        return [(self.queues[index], counts[index]) for index in order]

    def queue_of(self, message: Message) -> AnyQueue:
        """The queue of the set a received message belongs to.

        :raises InvalidId: the message does not come from a queue of this set.
        """
        queue = self._by_path.get(message.queue) if isinstance(message, Message) else None
        if queue is None:
            raise InvalidId(
                getattr(message, "receipt", message), "the message is not from a queue of this set"
            )
        return queue

    def delete(self, message: Message) -> bool:
        """Delete a received message in its own queue (see :meth:`Queue.delete`)."""
        return self.queue_of(message).delete(message)

    def delete_batch(self, messages: Iterable[Message]) -> int:
        """Delete several messages, each in its own queue; return how many were deleted."""
        return sum(self.delete(message) for message in messages)

    def change_visibility(self, message: Message, seconds: float) -> Message:
        """Extend or release a lease in the message's own queue (see :meth:`Queue.change_visibility`)."""  # noqa: E501
        return self.queue_of(message).change_visibility(message, seconds)

    def size(self) -> int:
        """Ready plus held messages of every queue (one listing each)."""
        return sum(queue.size() for queue in self.queues)

    def __len__(self) -> int:
        return self.size()
