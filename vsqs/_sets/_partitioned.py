"""Partitioned queues: one queue whose messages live in N plain queue directories.

A queue created with ``partitions=N`` (N > 1) stores the count in its settings and keeps
its messages in ``partition-0`` ... ``partition-<N-1>``, each an ordinary queue directory
(the same state machine; vsqs 0.3 reads one on its own). Nothing is shared per message
between partitions: each publish, claim and delete is one operation in one partition's
directory. How messages and consumers spread over them: :mod:`vsqs._sets._spread`.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import nullcontext
from typing import Final

from .. import _fs
from .._capacity import Capacity
from .._dedup import Deduplicator
from .._errors import InvalidId, QueueDrained
from .._history import History
from .._ids import parse_id
from .._message import Counts, Message
from .._meta import check_group
from .._options import batch_size
from .._options import seconds as _seconds
from .._queue import Queue
from .._renewal import Lease
from .._stats import Stats
from .._stored import Settings
from .._waiters import RECHECK, MultiWaiter
from ._spread import PerThread, add_counts, add_stats, group_partition, partition_name
from ._wait import receive_until


class PartitionedQueue(Queue, partitioned=True):
    """A queue whose messages live in ``partitions`` plain queue directories.

    Made by :class:`~vsqs.Queue` itself when the queue has (or is created with) more
    than one partition: ``vsqs.Queue(path, partitions=8)`` creates one, and
    ``vsqs.Queue(path)`` opens it with its stored count. Every method of
    :class:`~vsqs.Queue` works on it with the same guarantees, per partition: each
    message is published, claimed, extended and deleted atomically in its own
    partition's directory; a message is claimed by exactly one consumer.

    The count is fixed when the queue is created: a handle given another one, or
    ``configure(partitions=...)``, is refused with an error saying how to move the
    messages to a new queue (``old.redrive(to=new)``), which keeps each group's order.
    """

    def __init__(self, path: str | os.PathLike[str], **options: object) -> None:
        super().__init__(path, **options)  # type: ignore[arg-type]
        config = self.config
        dead_letter = self.dead_letter
        shared = {
            **config.options(),
            "partitions": 1,
            "capacity": None,
            "dead_letter": dead_letter,
            "max_receives": config.max_receives if dead_letter is not None else None,
        }
        paths = [os.path.join(self.path, partition_name(i)) for i in range(config.partitions)]
        # One set of deduplication markers (this directory's) for every partition.
        self._dedup = Deduplicator(
            self.layout,
            self.clock,
            config.dedup_window,
            lambda name: any(_fs.exists(q.layout.message(name)) for q in (*self._parts, self)),
        )
        self._parts: Final = tuple(
            self._partition(path, shared)  # type: ignore[arg-type]
            for path in paths
        )
        self._by_path: Final = {part.path: part for part in self._parts}
        if config.capacity is not None:  # one bound for the whole queue
            counted = tuple(part.path for part in self._parts)
            self._capacity = Capacity(self.layout, self.clock, config.capacity, counted)
        self._threads = PerThread(config.partitions)

    def _adopt(self, shape: dict[str, object]) -> None:
        """Refuse to partition a queue that already holds messages (its order would be
        lost), then store the count (and ``fifo``) as a plain queue does."""
        if "partitions" in shape:
            held = Queue.counts(self).total
            if held:
                raise ValueError(
                    f"queue {self.path!r} holds {held} messages and is not partitioned: "
                    f"create a new queue with partitions={shape['partitions']} and move "
                    "them there (``old.redrive(to=new)``; ``vsqs redrive``)"
                )
        super()._adopt(shape)

    def __repr__(self) -> str:
        return f"PartitionedQueue({self.path!r}, partitions={self.partitions})"

    # -- partitions -----------------------------------------------------------------------

    @property
    def partition_queues(self) -> tuple[Queue, ...]:
        """A plain :class:`~vsqs.Queue` on each partition directory, in order (for a
        consumer of one partition: a Spark task, a dedicated worker)."""
        return self._parts

    def partition_for(self, group: str | None = None, *, key: str | None = None) -> Queue:
        """The partition a message is published to: its *group*'s, else its dedup
        *key*'s, else this handle's sticky partition (see the module's text)."""
        parts = self._parts
        if group is not None:
            return parts[group_partition(check_group(group), len(parts))]
        if isinstance(key, str):  # anything else is refused by the publish itself
            return parts[group_partition(key, len(parts))]
        return parts[self._threads.spread.sticky_partition()]

    def _owner(self, message: Message | str) -> Queue | None:
        """The partition that holds *message*; ``None`` for the queue's own directory."""
        if isinstance(message, Message) and message.queue:  # else: found by its receipt
            if message.queue == self.path:
                return None
            part = self._by_path.get(message.queue)
            if part is None:
                raise InvalidId(message.receipt, f"the message belongs to {message.queue!r}")
            return part
        if isinstance(message, Message):
            message = message.receipt
        if not isinstance(message, str) or "/" in message or "\0" in message:
            raise InvalidId(message, "expected a Message, a receipt or an id")
        for part in self._parts:  # a bare receipt: the partition that has that name
            if _fs.exists(part.layout.message(message)):
                return part
        return None

    # -- publishing -----------------------------------------------------------------------

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> str:
        """Publish one message to its partition (see :meth:`partition_for`); its id.

        Atomic in that partition, as :meth:`Queue.publish`."""
        part = self.partition_for(group, key=dedup_id)
        # A bound is the whole queue's (held here); the partition itself has none.
        with nullcontext() if self._capacity is None else self._room(1, timeout):
            return part.publish(
                data, delay=delay, attributes=attributes, dedup_id=dedup_id, timeout=timeout,
                group=group,
            )  # fmt: skip

    def publish_batch(
        self,
        bodies: Iterable[bytes | bytearray | memoryview],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        batch_dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> list[str]:
        """Publish several messages, in order; their ids.

        A batch goes to one partition (its group's, its ``batch_dedup_id``'s, or the
        sticky one), as one :meth:`Queue.publish_batch` there; with per-message
        ``dedup_ids`` and no group, each message goes to its id's partition (in order
        within each)."""
        bodies = list(bodies)
        keys = None if dedup_ids is None else list(dedup_ids)
        if keys is not None and len(keys) != len(bodies):
            raise ValueError(f"{len(keys)} dedup_ids for {len(bodies)} bodies")
        with self._room(len(bodies), timeout) if bodies else nullcontext():
            if keys is None or group is not None:
                part = self.partition_for(group, key=batch_dedup_id)
                return part.publish_batch(
                    bodies, delay=delay, attributes=attributes, dedup_ids=keys,
                    batch_dedup_id=batch_dedup_id, group=group,
                )  # fmt: skip
            if batch_dedup_id is not None:
                raise ValueError("give dedup_ids or batch_dedup_id, not both")
            routed: dict[int, list[int]] = {}
            for index, key in enumerate(keys):
                part = self.partition_for(None, key=key)
                routed.setdefault(self._parts.index(part), []).append(index)
            ids: list[str] = [""] * len(bodies)
            for number, indices in routed.items():
                got = self._parts[number].publish_batch(
                    [bodies[i] for i in indices], delay=delay, attributes=attributes,
                    dedup_ids=[keys[i] for i in indices],
                )  # fmt: skip
                for index, message_id in zip(indices, got, strict=True):
                    ids[index] = message_id
            return ids

    # -- receiving ------------------------------------------------------------------------

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """Claim one message: from this handle's home partition first (see the class)."""
        if timeout == 0 and visibility_timeout is None:  # the polling fast path
            spread = self._threads.spread
            if spread.calls + 1 < spread.next_visit:  # not a visit: the current one first
                tried = spread.current
                try:
                    message = self._parts[tried].receive(timeout=0)
                except QueueDrained:  # the others may not be: the full pass below decides
                    message, tried = None, -1
                if message is not None:
                    spread.calls += 1
                    return message
                got, drained = self._gather(1, None, tried=tried)
                if drained:
                    raise QueueDrained(self.path)
                return got[0] if got else None
        got = self.receive_batch(1, visibility_timeout=visibility_timeout, timeout=timeout)
        return got[0] if got else None

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """Claim up to *max_messages*: the home partition's oldest first, then the others'.

        Returns as soon as at least one was claimed; while none is, waits up to *timeout*
        on every partition at once.

        :raises QueueDrained: the queue is shut down and every partition is empty.
        """
        batch_size(max_messages)
        if visibility_timeout is not None:
            _seconds(visibility_timeout, "visibility_timeout")
        return receive_until(
            lambda: self._gather(max_messages, visibility_timeout),
            self.waiter,
            clock=self.clock,
            timeout=None if timeout is None else _seconds(timeout, "timeout"),
            next_look=self.next_look,
            drained=lambda: QueueDrained(self.path),
        )

    def _gather(
        self, limit: int, visibility_timeout: float | None, *, tried: int = -1
    ) -> tuple[list[Message], bool]:
        """One pass without waiting: the messages, and whether the whole queue is drained
        (*tried*: a partition the caller has just found empty, not looked at again)."""
        parts = self._parts
        spread = self._threads.spread
        order = spread.order()
        visit = spread.visit
        got: list[Message] = []
        drained = 0
        for index in order:
            if index == tried:
                continue
            if index not in (spread.current, visit):  # moving on: list afresh, not walk
                parts[index].refresh()
            if index == visit:
                claimed, done = self._look(index, limit - len(got), visibility_timeout)
                drained += done
            else:
                try:
                    claimed = parts[index].receive_batch(
                        limit - len(got), visibility_timeout=visibility_timeout, timeout=0
                    )
                except QueueDrained:
                    drained += 1
                    claimed = []
                if claimed and index != spread.current:  # the current one was empty: move
                    spread.move(index, parts[index].claim_misses)
            got += claimed
            if len(got) >= limit:
                return got, False
        if not got:  # strays in the queue directory itself (a vsqs 0.3 producer's)
            try:
                got = super().receive_batch(limit, visibility_timeout=visibility_timeout)
            except QueueDrained:
                return [], drained == len(parts)
        return got, False

    def _look(
        self, index: int, limit: int, visibility_timeout: float | None
    ) -> tuple[list[Message], bool]:
        """A look at partition *index* outside the current one (see Spread.visited): its
        claims, none once it loses a race there, and whether that partition is drained."""
        parts, spread = self._parts, self._threads.spread
        part = parts[index]
        lost = part.claim_misses
        try:
            claimed = part.try_receive(limit, visibility_timeout=visibility_timeout)
        except QueueDrained:
            claimed, drained = [], True
        else:
            drained = False
        current = parts[spread.current].claim_misses
        spread.visited(
            index, claimed=bool(claimed), lost_race=part.claim_misses > lost, current_misses=current
        )
        spread.mark = parts[spread.current].claim_misses
        return claimed, drained

    def next_look(self, deadline: float | None = None) -> float:
        """Seconds until a lease or delay this handle knows of ends in any partition."""
        own = Queue.next_look(self, deadline)
        return min(own, *(part.next_look(deadline) for part in self._parts))

    def waiter(self) -> MultiWaiter:
        """What a blocked call waits on: every partition's directory and the queue's
        own (made on first use, once per handle)."""
        waiter = self._waiter
        if waiter is None:
            with self._lock:
                waiter = self._waiter
                if waiter is None:
                    config = self.config
                    waiter = MultiWaiter(
                        poll_interval=config.poll_interval or RECHECK,
                        recheck=min(RECHECK, config.poll_interval or RECHECK),
                        clock=self.clock,
                    )
                    for path in (self.path, *self._by_path):
                        waiter.add(path, wait=config.wait)
                    self._waiter = waiter
        return waiter

    # -- leases: routed to the message's partition ----------------------------------------

    def delete(self, message: Message | str) -> bool:
        """:meth:`Queue.delete` in the message's partition."""
        if isinstance(message, Message):  # the common case first: one dictionary lookup
            part = self._by_path.get(message.queue)
            if part is not None:
                return part.delete(message)
        owner = self._owner(message)
        return Queue.delete(self, message) if owner is None else owner.delete(message)

    def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """:meth:`Queue.change_visibility` in the message's partition."""
        owner = self._owner(message)
        if owner is None:
            return Queue.change_visibility(self, message, seconds)
        return owner.change_visibility(message, seconds)

    def lease(
        self,
        message: Message,
        *,
        max_duration: float = 3600.0,
        visibility_timeout: float | None = None,
    ) -> Lease:
        """:meth:`Queue.lease` by the message's partition."""
        owner = self._owner(message) if isinstance(message, Message) else None
        return Queue.lease(  # a plain queue's lease, in the partition (or this directory)
            owner or self, message, max_duration=max_duration, visibility_timeout=visibility_timeout
        )

    def history(self, message: Message | str) -> History:
        """:meth:`Queue.history` of a message of any partition."""
        owner = self._owner(message)
        return Queue.history(self, message) if owner is None else owner.history(message)

    # -- looking --------------------------------------------------------------------------

    def counts(self) -> Counts:
        """The counts of every partition (and the queue directory), added up."""
        return add_counts([part.counts() for part in self._parts] + [Queue.counts(self)])

    def size(self) -> int:
        """Ready plus held messages of every partition (one listing each)."""
        counts = self.counts()
        return counts.ready + counts.held

    def browse(self) -> Iterator[Message]:
        """The ready messages of every partition merged oldest first, none claimed."""
        sources = [part.browse() for part in self._parts] + [Queue.browse(self)]
        return heapq.merge(*sources, key=lambda message: (parse_id(message.id) or 0, message.queue))

    __iter__ = browse

    def peek_oldest_key(self) -> int | None:
        """The publish time (µs) of the oldest ready message of any partition."""
        keys = [key for part in self._parts if (key := part.peek_oldest_key()) is not None]
        own = Queue.peek_oldest_key(self)
        return min([*keys, *([] if own is None else [own])], default=None)

    def stats(self) -> Stats:
        """The totals of every partition, and each partition's own in ``partitions``."""
        return add_stats(tuple(part.stats() for part in self._parts), Queue.stats(self))

    # -- housekeeping ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """Shut every partition down, then the queue (see :meth:`Queue.shutdown`)."""
        for part in self._parts:
            part.shutdown()
        super().shutdown()

    def close(self) -> None:
        """Release this handle and its partitions' (see :meth:`Queue.close`)."""
        for part in self._parts:
            part.close()
        super().close()

    detach = close
    """An alias of :meth:`close` (as :attr:`Queue.detach`)."""

    def requeue_expired(self) -> int:
        """:meth:`Queue.requeue_expired` in every partition; how many came back."""
        return sum(part.requeue_expired() for part in self._parts) + super().requeue_expired()

    def purge(self) -> int:
        """:meth:`Queue.purge` of every partition; how many were removed."""
        return sum(part.purge() for part in self._parts) + super().purge()

    def clean(self, older_than: float = 3600.0) -> int:
        """:meth:`Queue.clean` of every partition."""
        return sum(part.clean(older_than) for part in self._parts) + super().clean(older_than)

    def redrive(
        self, to: Queue | str | os.PathLike[str] | None = None, limit: int | None = None
    ) -> int:
        """:meth:`Queue.redrive` of every partition in turn (a partitioned dead-letter
        queue); at most *limit* in all."""
        moved = 0
        for part in self._parts:
            left = None if limit is None else limit - moved
            if left is not None and left <= 0:
                return moved
            moved += part.redrive(to, left)
        left = None if limit is None else limit - moved
        return moved + (Queue.redrive(self, to, left) if left is None or left > 0 else 0)

    def _store(self, changes: dict[str, object]) -> Settings:
        """As a plain queue's; a change of ``fifo`` is stored in every partition first
        (a partition directory also works on its own)."""
        if "fifo" in changes:
            for part in self._parts:
                part.configure(fifo=changes["fifo"])  # type: ignore[arg-type]
        return super()._store(changes)
