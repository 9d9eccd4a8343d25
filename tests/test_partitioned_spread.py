"""How a consumer of a partitioned queue moves between partitions, and what that costs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from vsqs import PartitionedQueue, QueueDrained, _scan
from vsqs._sets._spread import VISIT_EVERY
from vsqs.testing import ManualClock


def _home(consumer: PartitionedQueue) -> int:
    """The home partition of *consumer* (the one its first receive takes from)."""
    for part in consumer.partition_queues:
        part.publish(b"probe")
    first = consumer.receive(timeout=0)
    assert first is not None
    while (message := consumer.receive(timeout=0)) is not None:
        consumer.delete(message)
    consumer.delete(first)
    return [part.path for part in consumer.partition_queues].index(first.queue)


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """From now on, count each directory listing, by directory."""
    listed: Counter[str] = Counter()
    real_scan = _scan.scan

    def counting_scan(path: str, *args: Any, **kwargs: Any) -> Any:
        listed[path] += 1
        return real_scan(path, *args, **kwargs)

    monkeypatch.setattr(_scan, "scan", counting_scan)
    return listed


def test_an_empty_home_is_listed_once_per_visit_not_on_every_receive(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer whose home partition is empty claims from the partition it found
    messages in, and looks at its home again once per VISIT_EVERY receives: each look at
    an empty partition lists its directory, which would double the cost of a message."""
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4, durable=False)
    consumer = PartitionedQueue(queue.path, durable=False)
    home = _home(consumer)
    other = consumer.partition_queues[(home + 2) % 4]
    count = 20 * VISIT_EVERY
    other.publish_batch([b"%d" % n for n in range(count)])
    listed = _count_listings(monkeypatch)
    bodies = []
    while (message := consumer.receive(timeout=0)) is not None:
        bodies.append(message.body)
        assert consumer.delete(message)
    assert bodies == [b"%d" % n for n in range(count)]  # FIFO in the partition
    home_path = consumer.partition_queues[home].path
    assert listed[home_path] <= count // VISIT_EVERY + 2, listed


def test_the_polling_receive_still_says_drained_when_every_partition_is(
    fast_tmp_path: Path,
) -> None:
    """``receive(timeout=0)`` (the polling fast path) raises QueueDrained once the queue is
    shut down and every partition empty, whichever partition it was claiming from."""
    clock = ManualClock()
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=3, durable=False, clock=clock)
    home = _home(queue)
    queue.partition_queues[(home + 1) % 3].publish(b"last")
    queue.shutdown()
    message = queue.receive(timeout=0)
    assert message is not None and message.body == b"last"
    assert queue.delete(message)
    clock.advance(60)  # past the grace in which a late publish may still land
    with pytest.raises(QueueDrained):
        queue.receive(timeout=0)


def test_consumers_that_each_serve_a_partition_seldom_look_at_each_others(
    fast_tmp_path: Path,
) -> None:
    """Two consumers with different homes, both busy: a look at the other's partition
    that loses a race there (the other serves it) makes the next look twice as late, so
    over 2,000 receives each takes from the other's partition a handful of times, not
    once per VISIT_EVERY receives (each such look walks past the names the other took)."""
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2, durable=False)
    a, b = PartitionedQueue(queue.path, durable=False), PartitionedQueue(queue.path, durable=False)
    # Each takes a home lock (as its first receive would); looking, not receiving, which
    # would move them.
    homes = a._gatherer.spread().home, b._gatherer.spread().home
    assert homes[0] != homes[1]  # two handles of one process: two homes
    per_partition = 2000
    for part in queue.partition_queues:
        part.publish_batch([b"x"] * per_partition)
    strayed = Counter[str]()
    for _ in range(per_partition - 100):
        for consumer, home in ((a, homes[0]), (b, homes[1])):
            message = consumer.receive(timeout=0)
            assert message is not None
            if message.queue != consumer.partition_queues[home].path:
                strayed[consumer.path + str(home)] += 1
            assert consumer.delete(message)
    assert sum(strayed.values()) <= 2 * 8, strayed  # 16, 32, ..., 1024 calls apart
    # Each look gave up at its first lost race: it did not walk, one failed rename at a
    # time, past the names the other consumer had taken since this one listed.
    for consumer, home in ((a, homes[0]), (b, homes[1])):
        other = consumer.partition_queues[1 - home]
        assert other.claim_misses <= 8, other.claim_misses


def test_empty_partitions_are_looked_at_less_and_less_often(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy consumer's looks at other partitions that find them empty double the
    interval to the next look (up to 1,024 receives): over 2,000 receives it lists the
    three empty partitions of its queue a dozen times or so, not once per 16 receives."""
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4, durable=False)
    consumer = PartitionedQueue(queue.path, durable=False)
    home = consumer.partition_queues[consumer._gatherer.spread().home]
    count = 2000
    home.publish_batch([b"x"] * count)
    listed = _count_listings(monkeypatch)
    for _ in range(count):
        message = consumer.receive(timeout=0)
        assert message is not None and message.queue == home.path
        assert consumer.delete(message)
    empty = sum(n for path, n in listed.items() if path != home.path)
    assert empty <= 16, listed


def _two_backlogs(where: Path) -> tuple[ManualClock, PartitionedQueue, int, int]:
    """A consumer of a new 2-partition queue (on a manual clock) with its home taken (as
    its first receive would, without receiving), VISIT_EVERY + 4 messages ``h<n>`` in
    its home and 100 ``o<n>`` in the other partition: the clock, the consumer, and the
    two partitions' numbers."""
    clock = ManualClock()
    queue = PartitionedQueue(where / "q", partitions=2, durable=False, clock=clock)
    consumer = PartitionedQueue(queue.path, durable=False, clock=clock)
    home = consumer._gatherer.spread().home
    parts = consumer.partition_queues
    parts[home].publish_batch([b"h%d" % n for n in range(VISIT_EVERY + 4)])
    parts[1 - home].publish_batch([b"o%d" % n for n in range(100)])
    clock.advance(1)  # every message older than any listing: none held back for a second
    return clock, consumer, home, 1 - home


def test_moving_on_from_an_empty_home_does_not_list_the_next_partition_again(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone consumer whose home runs empty claims on in the partition it has looked at
    (a visit listed it) without listing it again: nobody else took its names, and a
    listing costs about a microsecond per name. It lists it when its view runs out, as
    any receive does."""
    _, consumer, _, other = _two_backlogs(fast_tmp_path)
    listed = _count_listings(monkeypatch)
    bodies = []
    while (message := consumer.receive(timeout=0)) is not None:
        bodies.append(message.body)
        assert consumer.delete(message)
    assert len(bodies) == len(set(bodies)) == VISIT_EVERY + 104
    assert [b for b in bodies if b[:1] == b"o"] == [b"o%d" % n for n in range(100)]  # FIFO
    # The visit's listing, and the one that finds its view used up: not one on moving.
    assert listed[consumer.partition_queues[other].path] == 2, listed


def test_moving_on_to_a_partition_another_consumer_drained_meanwhile_lists_it_after_one_lost_race(
    fast_tmp_path: Path,
) -> None:
    """The view a consumer has of a partition it moves to may be old: another consumer
    took most of its names since the look that listed it. The first lost race there
    makes it list the partition afresh, so it loses one race, not one per name taken,
    and still claims the rest oldest first."""
    clock, consumer, _, other = _two_backlogs(fast_tmp_path)
    bodies: list[bytes] = []
    while not bodies or bodies[-1][:1] != b"o":  # until the visit to the other partition
        message = consumer.receive(timeout=0)
        assert message is not None
        bodies.append(message.body)
        assert consumer.delete(message)
    assert bodies[-1] == b"o0"  # the visit listed it: its view holds o1 ... o99
    peer = PartitionedQueue(consumer.path, durable=False, clock=clock).partition_queues[other]
    for _ in range(9):  # another consumer takes o1 ... o90 meanwhile
        taken = peer.receive_batch(10, timeout=0)
        assert peer.delete_batch(taken) == 10
    rest: list[bytes] = []
    while (message := consumer.receive(timeout=0)) is not None:
        rest.append(message.body)
        assert consumer.delete(message)
    assert [b for b in rest if b[:1] == b"o"] == [b"o%d" % n for n in range(91, 100)]
    assert len([b for b in rest if b[:1] == b"h"]) == VISIT_EVERY + 4 - (len(bodies) - 1)
    # o1: then it listed, not walked past o2 ... o90
    assert consumer.partition_queues[other].claim_misses <= 1
