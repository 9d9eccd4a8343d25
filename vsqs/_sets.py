"""Several queues read as one (dirq's QueueSet), and a queue that discards (QueueNull).

A :class:`QueueSet` adds no state on disk: each message is claimed from its own queue by
that queue's atomic rename, and deleted or extended there, routed by ``Message.queue``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from . import _scan
from ._clock import SYSTEM_CLOCK, Clock
from ._errors import InvalidId, LeaseLost, QueueDrained
from ._ids import IDS, Precision, parse_id, parse_name
from ._lifecycle import History
from ._message import Counts, Message
from ._queue import Queue
from ._stats import Stats

ORDERS: Final = ("oldest", "priority")


class QueueSet:
    """Receive from several queues as if they were one.

    ``order="oldest"``: each receive takes the oldest ready messages across all queues,
    by id (publish time). It lists every queue once per call, so its cost grows with the
    backlogs: prefer :meth:`receive_batch` at depth, or priority order.
    ``order="priority"``: the first queue is drained before the second is looked at, and
    so on; it costs what receiving from the first non-empty queue costs.

    Waiting. While every queue is empty, a blocked receive waits on the first queue's
    waiter (inotify where available), re-checking every queue every *recheck* seconds.
    So a message published to the first queue is seen at once, and one published to any
    other queue within *recheck* seconds (0.05 by default).

    Atomicity is each queue's: a message is claimed by exactly one consumer.

    :param queues: the queues, in priority order for ``order="priority"``.
    :raises ValueError: no queue, a queue twice, or an unknown *order*.
    """

    def __init__(self, *queues: Queue, order: str = "oldest", recheck: float = 0.05) -> None:
        if not queues:
            raise ValueError("a QueueSet needs at least one queue")
        for queue in queues:
            if not isinstance(queue, Queue):
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
        self._by_path = dict(zip(paths, queues, strict=True))

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
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise ValueError(f"max_messages must be a positive int, not {max_messages!r}")
        if timeout is not None and (math.isnan(timeout) or timeout < 0):
            raise ValueError(f"timeout must be >= 0 or None, not {timeout!r}")
        first = self.queues[0]
        clock = first.clock
        deadline = None if timeout is None else clock.monotonic() + timeout
        waiter = None if timeout == 0 else first._get_waiter()
        while True:
            token = waiter.token() if waiter is not None else 0
            got, drained = self._claim(max_messages, visibility_timeout)
            if got:
                return got
            if drained == len(self.queues):
                raise QueueDrained(first.path, "every queue of the set is shut down and drained")
            remaining = math.inf if deadline is None else deadline - clock.monotonic()
            if waiter is None or remaining <= 0:
                return []
            waiter.wait(token, min(remaining, self.recheck))

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

    def _claim(self, limit: int, visibility_timeout: float | None) -> tuple[list[Message], int]:
        """One non-blocking pass; returns the messages and how many queues are drained."""
        plan: list[tuple[Queue, int]]
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
        return got, drained

    def _oldest_plan(self, limit: int) -> list[tuple[Queue, int]]:
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

    def queue_of(self, message: Message) -> Queue:
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


class NullQueue:
    """A queue that accepts everything and keeps nothing (dirq's QueueNull).

    It has :class:`Queue`'s methods, so it can stand in for one to switch a pipeline
    stage off or in tests: publishing returns a fresh id and discards the body, receiving
    finds nothing, counts are zero. :meth:`publish_file` removes the file, as if it was
    published and consumed at once. Nothing is created on disk.
    """

    path: Final = os.devnull

    def __init__(self, *, precision: str | Precision = Precision.US, clock: Clock | None = None):
        self.precision = Precision(precision)
        self.clock: Clock = clock or SYSTEM_CLOCK

    def __repr__(self) -> str:
        return "NullQueue()"

    def __enter__(self) -> NullQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release."""

    detach = close

    def __bool__(self) -> bool:
        return True

    def _new_id(self) -> str:
        return IDS.next(self.clock.time_us(), self.precision)

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """Discard *data*; return a fresh id."""
        return self._new_id()

    def publish_batch(
        self,
        bodies: Iterable[bytes | bytearray | memoryview],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        timeout: float | None = None,
    ) -> list[str]:
        """Discard *bodies*; return one fresh id for each."""
        return [self._new_id() for _ in bodies]

    def publish_file(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
    ) -> str:
        """Remove the file at *path* (it was "moved into" the null queue); return an id."""
        os.unlink(path)
        return self._new_id()

    def publish_stream(
        self,
        readable: object,
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> str:
        """Return a fresh id without reading *readable*."""
        return self._new_id()

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """Always ``None``, at once (nothing will ever arrive, so it never waits)."""
        return None

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """Always empty, at once."""
        return []

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]:
        """Yields nothing."""
        return iter(())

    def delete(self, message: Message | str) -> bool:
        """Nothing to delete: ``False``."""
        return False

    def delete_batch(self, messages: Iterable[Message | str]) -> int:
        """Nothing to delete: ``0``."""
        return 0

    def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """No message is ever held here.

        :raises LeaseLost: always.
        """
        receipt = message.receipt if isinstance(message, Message) else str(message)
        raise LeaseLost(receipt, f"the null queue holds no lease {receipt!r}")

    def size(self) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    def counts(self) -> Counts:
        return Counts(ready=0, held=0, delayed=0, new=0)

    def browse(self) -> Iterator[Message]:
        return iter(())

    __iter__ = browse

    def peek(self) -> Message | None:
        return None

    def peek_oldest_key(self) -> int | None:
        return None

    @property
    def is_shutdown(self) -> bool:
        return False

    def shutdown(self) -> None:
        """A null queue never shuts down: it keeps accepting."""

    def stats(self) -> Stats:
        return Stats(
            produced_messages=0,
            produced_bytes=0,
            consumed_messages=0,
            consumed_bytes=0,
            ready=0,
            held=0,
            delayed=0,
            new=0,
            oldest_ready_age=None,
            is_shutdown=False,
        )

    def requeue_expired(self) -> int:
        return 0

    def purge(self) -> int:
        return 0

    def clean(self, older_than: float = 3600.0) -> int:
        return 0

    def redrive(self, to: object = None, limit: int | None = None) -> int:
        return 0

    def history(self, message: Message | str) -> History:
        """Nothing is known: a message never received, sent now."""
        name = message.id if isinstance(message, Message) else message
        entry = parse_name(name)
        if entry is None:
            raise InvalidId(name)
        return History(receive_count=0, first_sent=entry.key / 1e6, last_received=None)
