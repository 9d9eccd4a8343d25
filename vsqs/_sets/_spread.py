"""How a partitioned queue spreads its work: pure decisions, no I/O.

Nothing is shared per message between partitions (no global lock, counter or listing of
all partitions per call), so N consumers on N partitions take N directory locks in the
kernel, not one.

* **Publishing.** A message with a ``group`` goes to the partition of the group: the
  CRC-32 of its UTF-8 bytes modulo N, the same in every process and on every host, so a
  group's messages keep their order. Without a group, one with a ``dedup_id`` goes to the
  partition of that id, and the others to the publisher's *sticky* partition: each
  handle (in each thread) starts at a free publisher home from a random partition on
  (:mod:`vsqs._sets._homes`) and moves to the next once :data:`STICKY_RUN` messages went
  to it, as Kafka's sticky partitioner does, so one publisher's messages spread over
  every partition in runs that each keep their order. The run counts messages, whatever
  the calls: a batch goes whole to the sticky partition (one directory flush, and a
  ``batch_dedup_id`` batch all or nothing in one directory) and counts for all of its
  messages, so batches of 1,000 go to the partitions in turn, batches of 10 ten at a time.
* **Receiving.** Each handle (in each thread) has a *home* partition: on its first
  receive it takes the first free home lock from a start spread by process id and a
  per-process count of handles (:mod:`vsqs._sets._homes`), so consumers started together
  take distinct partitions; one that finds every home taken has none, and looks for a
  free one again at each look elsewhere (below). It claims at home first (strictly FIFO
  in the partition, exactly as a plain queue: a lost race moves to the next message of
  that partition, never further); when home is empty it takes from the others in turn, and
  stays with the one it found messages in until that one is empty too (each look at an
  empty partition lists its directory: looking at an empty home on every call would
  double the cost of a message; moving to a partition claims through the names it
  listed there last, and lists it afresh only once it loses a race there). Every
  :data:`VISIT_EVERY` calls it looks at another partition first, in turn, home included,
  so no partition starves however the homes fall; a look gives up at its first lost race
  there (another consumer serves that partition: walking on past the names it took
  would cost a failed rename each), and a look that loses a race or finds the partition
  empty doubles the interval, up to :data:`VISIT_MOST`. A look that finds messages
  without a lost race brings it back home, or moves it there (its home too) if its own
  partition lost races meanwhile (two consumers whose homes fell together, on hosts
  whose filesystem shares no lock: one moves). A blocked
  receive waits on every partition at once (one :class:`~vsqs.MultiWaiter`).
* **Order.** FIFO per partition, so per group; across partitions, messages are taken in
  roughly publish order (each consumer drains its home oldest first).
* ``fifo=True``: a group's next message waits until the earlier one is deleted or its
  lease ends (SQS FIFO's one in flight per group); other groups, in the same partition
  or not, are delivered meanwhile (each partition is a plain ``fifo`` queue: see
  :mod:`vsqs._groups`).

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
from typing import TYPE_CHECKING, Final

from .._ids import parse_id
from .._message import Counts

if TYPE_CHECKING:
    from .._reports import Stats

STICKY_RUN: Final = 100
"""Messages a publisher sends to one partition before it moves to the next (a batch that
reaches it goes whole; the next one goes to the next partition)."""
VISIT_EVERY: Final = 16
"""A receiving handle looks at a partition other than its own first once in this many calls
(at first; see :data:`VISIT_MOST`)."""
VISIT_MOST: Final = 1024
"""The longest a receiving handle goes between such looks: each look that loses a race in
the partition looked at (another consumer serves it), or finds it empty, doubles the
interval, up to this."""

_handles = itertools.count()  # spreads the homes of the handles (and threads) of a process


def partition_name(index: int) -> str:
    """The directory name of partition *index* inside the queue directory."""
    return f"partition-{index}"


def group_partition(group: str, partitions: int) -> int:
    """The partition of *group*: CRC-32 of its UTF-8 bytes modulo *partitions* (stable
    across processes, hosts and Python versions, unlike ``hash()``)."""
    return zlib.crc32(group.encode()) % partitions


class Spread:
    """Where one thread's use of one handle is: its home, the partition it claims from
    now (its home until that is empty), when it looks elsewhere next, and its sticky
    partition.

    Each thread of a shared handle has its own (:class:`PerThread`), so threads spread
    as handles do, and no lock is needed.
    """

    def __init__(self, partitions: int) -> None:
        import random  # noqa: PLC0415 -- 0.6 ms at import, for partitioned queues only

        start = (os.getpid() + next(_handles)) % partitions
        self.partitions = partitions
        self.home = start
        self.current = start
        self.homed = False  # holds its home's lock (see settle)
        self.settled = False  # has looked for a home lock (on its first receive)
        # A publisher starts at a random partition (as Kafka's sticky partitioner picks
        # one per batch): one that sends fewer than a run and goes (a CLI call, a
        # request) still lands anywhere, whatever the process.
        self.sticky = random.randrange(partitions)
        self.sticky_settled = False  # has looked for a publisher home (its first publish)
        self.run = 0
        self.calls = 0
        self.visits = 0
        self.visit = -1  # the partition this call looks at first, outside the current one
        self.interval = VISIT_EVERY  # calls between two looks elsewhere (see visited)
        self.next_visit = VISIT_EVERY  # the call that looks elsewhere next
        self.mark = 0  # the current partition's lost races when last looked at

    def settle(self, home: int | None) -> None:
        """Take *home* (whose lock this thread now holds) as home; ``None``: every home
        was taken, keep the spread start and look again later."""
        self.settled = True
        if home is not None:
            self.home = self.current = home
            self.homed = True

    def settle_sticky(self, home: int | None) -> None:
        """Start the sticky runs at *home* (a publisher home this thread holds)."""
        self.sticky_settled = True
        if home is not None:
            self.sticky = home

    def sticky_partition(self, count: int = 1) -> int:
        """The partition of the next *count* messages without a group or key (one
        publish, or one batch): the same one until :data:`STICKY_RUN` messages went to
        it, then the next."""
        if self.run >= STICKY_RUN:
            self.sticky = (self.sticky + 1) % self.partitions
            self.run = 0
        self.run += count
        return self.sticky

    def order(self) -> list[int]:
        """The partitions in the order the next receive looks at them: where this thread
        claimed last, then home, then the following ones; on a call that looks elsewhere
        (:attr:`visit`), another one first, in turn."""
        self.calls += 1
        home, current, count = self.home, self.current, self.partitions
        order = [*range(home, count), *range(home)]
        if current != home:  # no generator: this runs once per 16 receives, or more often
            order.remove(current)
            order.insert(0, current)
        self.visit = -1
        if self.calls >= self.next_visit and count > 1:
            self.visits += 1
            self.visit = order.pop(1 + self.visits % (count - 1))
            order.insert(0, self.visit)
        return order

    def move(self, index: int, misses: int) -> None:
        """This thread's current partition was empty and it claimed from *index* (whose
        lost races so far are *misses*): claim there from now on."""
        self.current = index
        self.mark = misses

    def visited(self, index: int, *, claimed: bool, lost_race: bool, current_misses: int) -> None:
        """After a look at partition *index*: when to look elsewhere next, and whether to
        move there (*current_misses*: the current partition's lost races so far).

        A look gives up at its first lost race, which shows another consumer serving that
        partition; one that found the partition empty shows nothing to serve: either way
        the next look comes twice as late (up to :data:`VISIT_MOST` calls), so consumers
        that each serve a partition seldom step on each other's, and empty partitions
        are seldom listed. A look that claimed without a lost race (a partition nobody
        serves) brings the interval back to :data:`VISIT_EVERY`, and moves this thread
        there if that is its home, or if its current partition lost races since the last
        look (two consumers on one partition: one moves)."""
        if lost_race or not claimed:
            self.interval = min(2 * self.interval, VISIT_MOST)
        else:
            self.interval = VISIT_EVERY
            if index == self.home:
                self.current = index
            elif current_misses > self.mark:
                if self.current == self.home:  # another consumer serves our home: leave it
                    self.home = index
                self.current = index
        self.next_visit = self.calls + self.interval


class PerThread(threading.local):
    """Each thread's own :class:`Spread` of one handle.

    The fields live on a plain object reached by one thread-local lookup per call: each
    attribute of a ``threading.local`` costs a lookup of the thread's dictionary, and a
    receive reads and writes five (about 0.15 µs a call).
    """

    def __init__(self, partitions: int) -> None:
        self.spread = Spread(partitions)


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
    from .._reports import Stats  # noqa: PLC0415 -- a report's dataclass, made when asked

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
