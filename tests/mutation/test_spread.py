"""Guarantees of vsqs._sets._spread that ``make mutate`` found unguarded
(docs/reliability.rst, "Mutation testing"): each test fails on the mutants named in its
docstring."""

from __future__ import annotations

from pathlib import Path

import vsqs
from vsqs._sets._spread import group_partition
from vsqs.testing import ManualClock


def _group_of(partition: int, partitions: int) -> str:
    """A group whose messages go to *partition*."""
    return next(g for n in range(1000) if group_partition(g := f"g{n}", partitions) == partition)


def test_the_stats_of_a_partitioned_queue_add_up_every_partition(tmp_path: Path) -> None:
    """Each total of a partitioned queue's ``stats()`` is the sum over its partitions,
    and its oldest ready message is the oldest of all, wherever it is (mutants in
    ``add_stats``: a total left ``None``, the oldest taken by no key or from the first
    partition, ``is_shutdown`` not the queue's)."""
    clock = ManualClock()
    queue = vsqs.Queue(tmp_path / "q", partitions=3, durable=False, clock=clock)
    first, second, third = (_group_of(n, 3) for n in range(3))
    oldest = queue.publish(b"oldest", group=third)
    clock.advance(1)
    queue.publish(b"mid", group=second)
    clock.advance(1)
    queue.publish(b"a" * 10, group=first)
    queue.publish(b"bb", group=first)
    queue.publish(b"d", group=first, delay=60)
    clock.advance(1)
    part = queue.partition_queues[0]
    consumed = part.receive(timeout=0)
    assert consumed is not None and consumed.body == b"a" * 10
    assert part.delete(consumed)
    assert part.receive(timeout=0) is not None  # held
    Path(queue.partition_queues[1].path, f"{clock.time_us()}.new").write_bytes(b"writing")

    stats = queue.stats()
    assert (stats.produced_messages, stats.produced_bytes) == (5, 6 + 3 + 10 + 2 + 1)
    assert (stats.consumed_messages, stats.consumed_bytes) == (1, 10)
    assert (stats.ready, stats.held, stats.delayed, stats.new) == (2, 1, 1, 1)
    assert stats.held_back == 0
    assert stats.is_shutdown is False
    assert stats.oldest_ready_id == oldest
    assert stats.oldest_ready_age == stats.partitions[2].oldest_ready_age
    assert stats.oldest_ready_age is not None and stats.oldest_ready_age >= 3
    queue.shutdown()
    assert queue.stats().is_shutdown is True
