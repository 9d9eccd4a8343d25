"""Partitioned queues: one queue whose messages live in N plain queue directories,
``partition-0`` ... ``partition-<N-1>`` (each an ordinary queue directory).

A :class:`PartitionedQueue` *holds* a :class:`~vsqs.PlainQueue` per partition and one on
the queue directory itself (settings, shutdown marker, deduplication markers, capacity
lock, and any message a vsqs 0.3 producer wrote there), and forwards each call, as
diskcache's ``FanoutCache`` holds its ``Cache`` shards. Nothing is shared per message
between partitions. How messages and consumers spread: :mod:`vsqs._sets._spread`.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Final

from .. import _stored
from .._capacity import Capacity
from .._ids import parse_id
from .._ingest import DEFAULT_CHUNK
from .._message import Counts, Message
from .._options import UNSET, HandleOptions, Unset, queue_path
from .._queue import MoveTarget
from .._queue import Queue as PlainQueue
from .._renewal import Lease, until_entered
from .._stored import Settings
from .._waiters import MultiWaiter
from ._gather import Gatherer
from ._homes import Homes
from ._route import Router
from ._shape import build, open_target
from ._spread import add_counts, add_stats
from ._wait import consuming

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._reports import History, Stats


class PartitionedQueue:
    """A queue whose messages live in ``partitions`` plain queue directories.

    ``vsqs.Queue(path, partitions=8)`` creates one; ``vsqs.Queue(path)`` (or
    ``PartitionedQueue(path)``) opens it with its stored count, which is fixed. It offers
    every method of :class:`~vsqs.QueueLike` with the same guarantees, per partition:
    each message is published, claimed, extended and deleted atomically in its own
    partition's directory, by that partition's :class:`~vsqs.PlainQueue`, and claimed by
    exactly one consumer. Safe to share between threads, as a plain queue.

    :param partitions: the count, when creating the queue (default: the stored one).
    :param dead_letter: as :class:`~vsqs.PlainQueue`'s (a partitioned one too).
    :param options: every other option of :func:`vsqs.Queue`.
    :raises ValueError: the queue is not partitioned, holds messages and would be
        partitioned in place, or stores another shape.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        partitions: int | Unset = UNSET,
        dead_letter: MoveTarget | str | os.PathLike[str] | Unset | None = UNSET,
        **options: Unpack[HandleOptions],
    ) -> None:
        built = build(queue_path(path), partitions, dead_letter, options, PartitionedQueue)
        root, parts = built.root, built.parts
        self._root: Final = root
        self.path: Final = root.path
        self.config: Final = root.config
        self.layout: Final = root.layout
        self.clock: Final = root.clock
        self.durable: Final = root.durable
        self.precision: Final = root.precision
        self.visibility_timeout: Final = root.visibility_timeout
        self.retention: Final = root.retention
        self.dedup_window: Final = root.dedup_window
        self.max_receives: Final = root.max_receives
        self.dead_letter: Final = built.dead_letter
        self._parts: Final = parts
        self._by_path: Final = {part.path: part for part in parts}
        self._capacity: Final = built.capacity
        count = len(parts)
        homes = Homes(root.layout, "sticky", count)
        self._router: Final = Router(parts, root, homes, built.capacity, self.waiter)
        self._gatherer: Final = Gatherer(self._parts, root, Homes(root.layout, "home", count))

    def __repr__(self) -> str:
        return f"PartitionedQueue({self.path!r}, partitions={self.partitions})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # A path plus its options; another process opens its own handle and partitions.
        return (partial(PartitionedQueue, **self.config.options()), (self.path,))

    def __enter__(self) -> PartitionedQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __bool__(self) -> bool:
        return True  # as a plain queue: ``if queue.dead_letter:`` lists nothing

    # -- partitions -----------------------------------------------------------------------

    @property
    def partitions(self) -> int:
        """How many partition directories hold this queue's messages (stored; fixed)."""
        return len(self._parts)

    @property
    def fifo(self) -> bool:
        """Whether a message group's next message waits while an earlier one is held."""
        return self._root.fifo

    @property
    def partition_queues(self) -> tuple[PlainQueue, ...]:
        """A :class:`~vsqs.PlainQueue` on each partition directory, in order (for a
        consumer of one partition: a Spark task, a dedicated worker)."""
        return self._parts

    def partition_for(self, group: str | None = None, *, key: str | None = None) -> PlainQueue:
        """The partition a message is published to: its *group*'s, else its dedup
        *key*'s, else this thread's sticky partition (see :mod:`vsqs._sets._spread`)."""
        return self._router.partition_for(group, key)

    def landing(self, group: str | None) -> tuple[PlainQueue, Capacity | None]:
        """Where a moved message of *group* lands (its group's partition, or the sticky
        one), and the bound it counts against (the whole queue's)."""
        return self.partition_for(group), self._capacity

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
        """Publish one message to its partition (:meth:`partition_for`), atomically as
        :meth:`PlainQueue.publish <vsqs.PlainQueue.publish>`; its id."""
        part = self.partition_for(group, key=dedup_id)
        with self._router.room(1, timeout):  # the bound is the whole queue's, held here
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

        A batch goes whole to one partition (its group's, its ``batch_dedup_id``'s, or
        the sticky one, whose run counts each of its messages), as one
        :meth:`PlainQueue.publish_batch <vsqs.PlainQueue.publish_batch>` there (one
        flush); with per-message ``dedup_ids`` and no group, each message goes to its
        id's partition (in order within each)."""
        bodies = list(bodies)
        keys = None if dedup_ids is None else list(dedup_ids)
        if keys is not None and len(keys) != len(bodies):
            raise ValueError(f"{len(keys)} dedup_ids for {len(bodies)} bodies")
        with self._router.room(len(bodies), timeout):
            if keys is None or group is not None:
                if group is None and batch_dedup_id is None:
                    part = self._router.sticky(len(bodies))
                else:
                    part = self.partition_for(group, key=batch_dedup_id)
                return part.publish_batch(
                    bodies, delay=delay, attributes=attributes, dedup_ids=keys,
                    batch_dedup_id=batch_dedup_id, group=group,
                )  # fmt: skip
            if batch_dedup_id is not None:
                raise ValueError("give dedup_ids or batch_dedup_id, not both")
            ids: list[str] = [""] * len(bodies)
            for number, indices in self._router.by_key(keys).items():
                got = self._parts[number].publish_batch(
                    [bodies[i] for i in indices], delay=delay, attributes=attributes,
                    dedup_ids=[keys[i] for i in indices],
                )  # fmt: skip
                for index, message_id in zip(indices, got, strict=True):
                    ids[index] = message_id
            return ids

    def publish_file(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
    ) -> str:
        """:meth:`PlainQueue.publish_file <vsqs.PlainQueue.publish_file>` in the
        message's partition (:meth:`partition_for`)."""
        part = self.partition_for(group, key=dedup_id)
        with self._router.room(1, None):
            return part.publish_file(
                path, attributes=attributes, delay=delay, dedup_id=dedup_id, group=group
            )

    def publish_stream(
        self,
        readable: object,
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> str:
        """:meth:`PlainQueue.publish_stream <vsqs.PlainQueue.publish_stream>` in the
        message's partition (:meth:`partition_for`)."""
        part = self.partition_for(group, key=dedup_id)
        with self._router.room(1, None):
            return part.publish_stream(
                readable, attributes=attributes, delay=delay, dedup_id=dedup_id, group=group,
                chunk_size=chunk_size,
            )  # fmt: skip

    # -- receiving ------------------------------------------------------------------------

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """Claim one message: from this thread's home partition first (see the module)."""
        if timeout == 0 and visibility_timeout is None:  # the polling fast path
            return self._gatherer.poll_one()
        got = self.receive_batch(1, visibility_timeout=visibility_timeout, timeout=timeout)
        return got[0] if got else None

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """Claim up to *max_messages*, home partition first; as soon as one is claimed,
        or after waiting up to *timeout* on every partition at once.

        :raises QueueDrained: the queue is shut down and every partition is empty."""
        return self._gatherer.receive_batch(max_messages, visibility_timeout, timeout)

    def try_receive(
        self, max_messages: int = 1, *, visibility_timeout: float | None = None
    ) -> list[Message]:
        """:meth:`PlainQueue.try_receive <vsqs.PlainQueue.try_receive>` in each partition,
        home first, until *max_messages* are claimed; none there, in the queue directory.

        :raises QueueDrained: the queue is shut down and every partition is empty."""
        return self._gatherer.try_receive(max_messages, visibility_timeout)

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]:
        """Yield messages as :meth:`PlainQueue.consume <vsqs.PlainQueue.consume>` does."""
        return consuming(self.receive, visibility_timeout, timeout)

    def next_look(self, deadline: float | None = None) -> float:
        """Seconds until a lease or delay this handle knows of ends in any partition."""
        return self._gatherer.next_look(deadline)

    def waiter(self) -> MultiWaiter:
        """What a blocked call waits on: every partition's directory and the queue's
        own (made on first use, once per handle; thread-safe)."""
        return self._gatherer.waiter()

    @property
    def claim_misses(self) -> int:
        """Claims this handle lost to another consumer, in every partition."""
        return self._gatherer.claim_misses()

    # -- leases: in the message's partition -----------------------------------------------

    def delete(self, message: Message | str) -> bool:
        """:meth:`PlainQueue.delete <vsqs.PlainQueue.delete>` in the message's partition."""
        try:  # the common case first: a Message of a partition, one dictionary lookup
            part = self._by_path[message.queue]  # type: ignore[union-attr]
        except (AttributeError, KeyError):  # a receipt or id (a str), or of no partition
            return self._router.owner(message, self.path).delete(message)
        return part.delete(message)

    def delete_batch(self, messages: Iterable[Message | str]) -> int:
        """Delete several messages, each in its partition; how many this call deleted."""
        return sum(self.delete(message) for message in messages)

    def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """:meth:`PlainQueue.change_visibility <vsqs.PlainQueue.change_visibility>` in
        the message's partition."""
        return self._router.owner(message, self.path).change_visibility(message, seconds)

    def lease(
        self,
        message: Message,
        *,
        max_duration: float = 3600.0,
        visibility_timeout: float | None = None,
    ) -> Lease:
        """:meth:`PlainQueue.lease <vsqs.PlainQueue.lease>` by the message's partition."""
        owner = (
            self._router.owner(message, self.path) if isinstance(message, Message) else self._root
        )
        return owner.lease(
            message, max_duration=max_duration, visibility_timeout=visibility_timeout
        )

    def consume_leases(
        self,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = None,
        max_duration: float = 3600.0,
    ) -> Iterator[Lease]:
        """A self-renewing lease per message, as :meth:`PlainQueue.consume_leases
        <vsqs.PlainQueue.consume_leases>`."""
        return until_entered(
            self.lease(message, max_duration=max_duration, visibility_timeout=visibility_timeout)
            for message in self.consume(visibility_timeout=visibility_timeout, timeout=timeout)
        )

    def history(self, message: Message | str) -> History:
        """:meth:`PlainQueue.history <vsqs.PlainQueue.history>` of a message of any partition."""
        return self._router.owner(message, self.path).history(message)

    # -- looking --------------------------------------------------------------------------

    def counts(self) -> Counts:
        """The counts of every partition (and the queue directory), added up."""
        return add_counts([part.counts() for part in (*self._parts, self._root)])

    def size(self) -> int:
        """Ready plus held messages of every partition (one listing each)."""
        counts = self.counts()
        return counts.ready + counts.held

    def __len__(self) -> int:
        return self.size()

    def browse(self) -> Iterator[Message]:
        """The ready messages of every partition merged oldest first, none claimed."""
        sources = [part.browse() for part in (*self._parts, self._root)]
        return heapq.merge(*sources, key=lambda message: (parse_id(message.id) or 0, message.queue))

    __iter__ = browse

    def peek(self) -> Message | None:
        """The oldest ready message of any partition, not claimed; ``None`` if none."""
        return next(self.browse(), None)

    def peek_oldest_key(self, *, known: bool = False) -> int | None:
        """The publish time (µs) of the oldest ready message of any partition (*known*:
        of any partition's handle, as :meth:`PlainQueue.peek_oldest_key
        <vsqs.PlainQueue.peek_oldest_key>`)."""
        keys = [part.peek_oldest_key(known=known) for part in (*self._parts, self._root)]
        return min((key for key in keys if key is not None), default=None)

    def check(self, *, allow_new: bool = False) -> list[str]:
        """:meth:`PlainQueue.check <vsqs.PlainQueue.check>` of each partition, then its own."""
        return [p for q in (*self._parts, self._root) for p in q.check(allow_new=allow_new)]

    def stats(self) -> Stats:
        """The totals of every partition, and each partition's own in ``partitions``."""
        return add_stats(tuple(part.stats() for part in self._parts), self._root.stats())

    # -- housekeeping ---------------------------------------------------------------------

    @property
    def is_shutdown(self) -> bool:
        """Whether the queue was shut down (its directory's marker)."""
        return self._root.is_shutdown

    def shutdown(self) -> None:
        """Shut every partition down, then the queue (see :meth:`PlainQueue.shutdown
        <vsqs.PlainQueue.shutdown>`)."""
        for part in (*self._parts, self._root):
            part.shutdown()

    def close(self) -> None:
        """Release this handle, its partitions' and its homes (see :meth:`PlainQueue.close
        <vsqs.PlainQueue.close>`); the object may be used again."""
        for part in (*self._parts, self._root):
            part.close()
        self._gatherer.reset()  # every thread looks for a home again; the waiter goes
        self._router.reset()

    detach = close
    """An alias of :meth:`close`."""

    def requeue_expired(self) -> int:
        """:meth:`PlainQueue.requeue_expired <vsqs.PlainQueue.requeue_expired>` in every
        partition; how many came back."""
        return sum(part.requeue_expired() for part in (*self._parts, self._root))

    def purge(self) -> int:
        """:meth:`PlainQueue.purge <vsqs.PlainQueue.purge>` of every partition."""
        return sum(part.purge() for part in (*self._parts, self._root))

    def clean(self, older_than: float = 3600.0) -> int:
        """:meth:`PlainQueue.clean <vsqs.PlainQueue.clean>` of every partition."""
        return sum(part.clean(older_than) for part in (*self._parts, self._root))

    def redrive(
        self, to: MoveTarget | str | os.PathLike[str] | None = None, limit: int | None = None
    ) -> int:
        """:meth:`PlainQueue.redrive <vsqs.PlainQueue.redrive>` of every partition in
        turn (a partitioned dead-letter queue); at most *limit* in all."""
        if to is not None and isinstance(to, (str, os.PathLike)):
            to = open_target(
                self.path, to, PartitionedQueue, durable=self.durable, clock=self.clock
            )
        moved = 0
        for part in (*self._parts, self._root):
            left = None if limit is None else limit - moved
            if left is not None and left <= 0:
                break
            moved += part.redrive(to, left)
        return moved

    def configure(self, *, partitions: int | Unset | None = UNSET, **settings: object) -> Settings:
        """:meth:`PlainQueue.configure <vsqs.PlainQueue.configure>`; a change of ``fifo``
        is stored in every partition first (a partition directory also works on its
        own). ``partitions`` is refused: it is fixed when the queue is created."""
        if partitions is not UNSET:
            _stored.update(self.layout, self.clock, {"partitions": partitions})  # raises
        if "fifo" in settings:
            for part in self._parts:
                part.configure(fifo=settings["fifo"])  # type: ignore[arg-type]
        return self._root.configure(**settings)  # type: ignore[arg-type]

    def settings(self) -> Settings:
        """The settings stored with the queue (its count included); one read."""
        return self._root.settings()
