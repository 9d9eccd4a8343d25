"""How a partitioned queue spreads its work: pure decisions, no I/O.

Nothing is shared per message between partitions (no global lock, counter or listing of
all partitions per call), so N consumers on N partitions take N directory locks in the
kernel, not one.

* **Publishing.** A message with a ``group`` goes to the partition of the group: the
  CRC-32 of its UTF-8 bytes modulo N, the same in every process and on every host, so a
  group's messages keep their order. Without a group, one with a ``dedup_id`` goes to the
  partition of that id, and the others to the publisher's *sticky* partition: each
  handle (in each thread) starts at its own partition and moves to the next after
  :data:`STICKY_RUN` messages, as Kafka's sticky partitioner does, so one publisher's
  messages spread over every partition in runs that each keep their order.
* **Receiving.** Each handle (in each thread) has a *home* partition, spread by process
  id and a per-process count of handles, and claims there first (strictly FIFO in the
  partition, exactly as a plain queue: a lost race moves to the next message of that
  partition, never further); when home is empty it takes from the others in turn, and
  every :data:`VISIT_EVERY` calls it looks at another partition first, so no partition
  starves however the homes fall. A blocked receive waits on every partition at once
  (one :class:`~vsqs.MultiWaiter`).
* **Order.** FIFO per partition, so per group; across partitions, messages are taken in
  roughly publish order (each consumer drains its home oldest first).
* ``fifo=True``: each partition delivers nothing while one of its messages is held, so a
  group's next message waits until the earlier one is deleted or its lease ends (SQS
  FIFO's one in flight per group). Unrelated groups that share a partition wait behind
  each other; a ``fifo=True`` queue created without a count has
  :data:`~vsqs._options.FIFO_PARTITIONS` partitions so that this is rare.

Capacity is a total (one lock and counter in the queue directory, counting every
partition); the deduplication markers are one set, in the queue directory, so a
``dedup_id`` (or ``batch_dedup_id``) is unique across the whole queue, whatever the
groups (publish through the partitioned queue: a handle on one partition directory
alone keeps markers of its own); ``shutdown()`` marks every partition and then the
queue, and the queue is drained when every partition is. Messages found in the queue
directory itself (written there by a vsqs 0.3 producer, or by a handle opened before the
queue was partitioned) are delivered too, after the partitions'.

The functions and the class here make those decisions; :mod:`vsqs._sets._partitioned`
carries them out.
"""

from __future__ import annotations

import itertools
import os
import threading
import zlib
from typing import Final

from .._ids import parse_id
from .._message import Counts
from .._stats import Stats

STICKY_RUN: Final = 100
"""Messages a publisher sends to one partition before it moves to the next."""
VISIT_EVERY: Final = 16
"""A receiving handle looks at a partition other than its home first once in this many calls."""

_handles = itertools.count()  # spreads the homes of the handles (and threads) of a process


def partition_name(index: int) -> str:
    """The directory name of partition *index* inside the queue directory."""
    return f"partition-{index}"


def group_partition(group: str, partitions: int) -> int:
    """The partition of *group*: CRC-32 of its UTF-8 bytes modulo *partitions* (stable
    across processes, hosts and Python versions, unlike ``hash()``)."""
    return zlib.crc32(group.encode()) % partitions


class Spread(threading.local):
    """Where one thread's use of one handle is: its home and its sticky partition.

    A ``threading.local``: each thread of a shared handle has its own, so threads spread
    as handles do, and no lock is needed.
    """

    def __init__(self, partitions: int) -> None:
        start = (os.getpid() + next(_handles)) % partitions
        self.partitions = partitions
        self.home = start
        self.sticky = start
        self.run = 0
        self.calls = 0

    def sticky_partition(self) -> int:
        """The partition of the next message without a group or key: the same one for
        :data:`STICKY_RUN` messages, then the next."""
        if self.run >= STICKY_RUN:
            self.sticky = (self.sticky + 1) % self.partitions
            self.run = 0
        self.run += 1
        return self.sticky

    def order(self) -> list[int]:
        """The partitions in the order the next receive looks at them: home, then the
        following ones; once in :data:`VISIT_EVERY` calls, another one first, in turn."""
        self.calls += 1
        home, count = self.home, self.partitions
        order = [*range(home, count), *range(home)]
        if self.calls % VISIT_EVERY == 0 and count > 1:
            order.insert(0, order.pop(1 + (self.calls // VISIT_EVERY) % (count - 1)))
        return order


def add_counts(every: list[Counts]) -> Counts:
    """The sum of several partitions' counts."""
    return Counts(
        ready=sum(c.ready for c in every),
        held=sum(c.held for c in every),
        delayed=sum(c.delayed for c in every),
        new=sum(c.new for c in every),
    )


def add_stats(each: tuple[Stats, ...], own: Stats) -> Stats:
    """The totals of the partitions' stats (*each*) and of the queue directory's (*own*),
    with *each* kept as the breakdown; the oldest ready message is the oldest of all."""
    every = (*each, own)
    oldest = min(
        (s for s in every if s.oldest_ready_id is not None),
        key=lambda s: parse_id(s.oldest_ready_id or "") or 0,
        default=None,
    )
    return Stats(
        produced_messages=sum(s.produced_messages for s in every),
        produced_bytes=sum(s.produced_bytes for s in every),
        consumed_messages=sum(s.consumed_messages for s in every),
        consumed_bytes=sum(s.consumed_bytes for s in every),
        ready=sum(s.ready for s in every),
        held=sum(s.held for s in every),
        delayed=sum(s.delayed for s in every),
        new=sum(s.new for s in every),
        oldest_ready_age=None if oldest is None else oldest.oldest_ready_age,
        is_shutdown=own.is_shutdown,
        oldest_ready_id=None if oldest is None else oldest.oldest_ready_id,
        held_back=sum(s.held_back for s in every),
        partitions=each,
    )
