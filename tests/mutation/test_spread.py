"""Guarantees of vsqs._sets._spread that ``make mutate`` found unguarded
(docs/reliability.rst, "Mutation testing"): each test fails on the mutants named in its
docstring."""

from __future__ import annotations

from pathlib import Path

import vsqs
from vsqs._sets._spread import (
    STICKY_RUN,
    VISIT_EVERY,
    VISIT_MOST,
    Spread,
    group_partition,
)
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
    queue = vsqs.PartitionedQueue(tmp_path / "q", partitions=3, durable=False, clock=clock)
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


# Spread makes the spreading decisions and does no I/O (its module docstring states
# them); the tests below hold it to them directly, call by call, where a test through a
# partitioned queue would need many consumers and could only see their sum.


def test_settling_takes_the_home_and_says_it_holds_the_lock() -> None:
    """Before its first receive a spread has looked for no home and holds no lock; a
    home found then becomes home and current, and the spread says it holds its lock;
    none found keeps the start, current included, and holds none (mutants: ``homed``
    set ``None`` or ``False`` in ``Spread.settle``; ``homed``, ``sticky_settled`` true
    and ``current`` ``None`` in ``Spread.__init__``)."""
    fresh = Spread(4)
    assert not (fresh.settled or fresh.homed or fresh.sticky_settled)
    spread = Spread(4)
    spread.settle(2)
    assert spread.settled and spread.homed and (spread.home, spread.current) == (2, 2)
    other = Spread(4)
    start = other.home
    other.settle(None)
    assert other.settled and not other.homed and other.home == start
    assert other.order()[0] == start


def test_a_publisher_home_starts_the_sticky_runs() -> None:
    """The first publish's publisher home is where the sticky runs start; without one,
    the random start stays (mutant: ``is None`` for ``is not None`` in
    ``Spread.settle_sticky``)."""
    spread = Spread(4)
    spread.settle_sticky((spread.sticky + 1) % 4)
    start = spread.sticky
    assert spread.sticky_settled and spread.sticky_partition() == start
    other = Spread(4)
    random_start = other.sticky
    other.settle_sticky(None)
    assert other.sticky_settled and other.sticky_partition() == random_start


def test_single_publishes_stay_for_a_run_then_move_to_the_next_partition() -> None:
    """``STICKY_RUN`` single publishes go to one partition, the next run to the
    following one, upwards (mutants in ``Spread.sticky_partition``: a default count of
    2, the previous partition for the next)."""
    spread = Spread(4)
    start = spread.sticky
    assert {spread.sticky_partition() for _ in range(STICKY_RUN)} == {start}
    assert spread.sticky_partition() == (start + 1) % 4


def test_every_visit_every_calls_another_partition_is_looked_at_first_in_turn() -> None:
    """Calls 1 to ``VISIT_EVERY - 1`` look at the current partition first and visit
    none; call ``VISIT_EVERY`` looks at another first, and the visits that follow go
    round the others in turn (mutants in ``Spread.order``: calls counted twice, ``>``
    for ``>=``, visits counted ``= 1``, ``-= 1``, ``+= 2``)."""
    spread = Spread(4)
    spread.settle(0)
    for _ in range(VISIT_EVERY - 1):
        assert spread.order() == [0, 1, 2, 3]
        assert spread.visit not in range(4)  # no partition visited
    visits = []
    for _ in range(6):
        order = spread.order()
        visits.append(spread.visit)
        assert order[0] == spread.visit != 0
        assert sorted(order) == [0, 1, 2, 3]
        spread.visited(spread.visit, claimed=True, lost_race=False, current_misses=0)
        for _ in range(VISIT_EVERY - 1):  # back to plain calls until the next visit
            assert spread.order()[0] == 0 and spread.visit not in range(4)
    assert visits == [2, 3, 1, 2, 3, 1]


def test_a_single_partition_is_never_visited() -> None:
    """With one partition there is nothing else to look at (mutant: ``count >= 1`` in
    ``Spread.order``, which divides by zero)."""
    spread = Spread(1)
    for _ in range(2 * VISIT_EVERY):
        assert spread.order() == [0]


def test_a_fruitless_visit_doubles_the_interval_up_to_the_most() -> None:
    """Each visit that finds nothing (or loses a race) doubles the calls until the next
    one, up to ``VISIT_MOST`` (mutant: tripled in ``Spread.visited``)."""
    spread = Spread(4)
    spread.settle(0)
    intervals = []
    for _ in range(12):
        spread.visited(1, claimed=False, lost_race=False, current_misses=0)
        intervals.append(spread.next_visit - spread.calls)
    assert intervals == [min(VISIT_EVERY * 2**n, VISIT_MOST) for n in range(1, 13)]
    assert intervals[-1] == VISIT_MOST


def test_a_fruitful_visit_home_brings_the_consumer_back_home() -> None:
    """A visit that claims at home without a lost race makes home current again (a
    thread that had moved away returns); one elsewhere, with no lost races at home
    since, moves nothing (mutants in ``Spread.visited``: ``!=`` for ``==``, current
    set ``None``)."""
    spread = Spread(4)
    spread.settle(0)
    spread.move(2, misses=0)
    spread.visited(0, claimed=True, lost_race=False, current_misses=0)
    assert (spread.home, spread.current) == (0, 0)
    spread.visited(3, claimed=True, lost_race=False, current_misses=0)
    assert (spread.home, spread.current) == (0, 0)


def test_a_consumer_whose_partition_loses_races_moves_to_a_free_one() -> None:
    """A visit that claims without a lost race, while the current partition lost races
    since the last look, moves there; if the current one was home, home moves too
    (another consumer serves it); one that lost none since stays (mutants in
    ``Spread.visited``: ``>=`` for ``>``, ``!=`` for ``==``, home or current set
    ``None``; ``mark`` starting at 1 in ``Spread.__init__``)."""
    at_home = Spread(4)
    at_home.settle(0)
    at_home.visited(2, claimed=True, lost_race=False, current_misses=1)  # its first
    assert (at_home.home, at_home.current) == (2, 2)
    away = Spread(4)
    away.settle(0)
    away.move(1, misses=5)
    away.visited(3, claimed=True, lost_race=False, current_misses=6)
    assert (away.home, away.current) == (0, 3)
    calm = Spread(4)
    calm.settle(0)
    calm.move(1, misses=5)
    calm.visited(3, claimed=True, lost_race=False, current_misses=5)
    assert (calm.home, calm.current) == (0, 1)


def test_a_message_a_partition_holds_back_is_counted_in_the_queue_s_stats(
    tmp_path: Path,
) -> None:
    """Past retention, two messages of one partition are dead-lettered into a queue
    with room for one: the other is held back in its partition, and the partitioned
    queue's ``stats().held_back`` counts it (mutant ``add_stats`` 39: ``held_back``
    not summed over the partitions)."""
    clock = ManualClock()
    dlq = vsqs.PlainQueue(tmp_path / "dlq", durable=False, clock=clock, capacity=1)
    queue = vsqs.PartitionedQueue(
        tmp_path / "q", partitions=2, durable=False, clock=clock, retention=10, dead_letter=dlq
    )
    group = _group_of(1, 2)
    queue.publish_batch([b"a", b"b"], group=group)
    clock.advance(11)
    assert queue.clean() == 2  # both past retention: one moved, one held back
    assert [m.body for m in dlq.browse()] == [b"a"]
    stats = queue.stats()
    assert [part.held_back for part in stats.partitions] == [0, 1]
    assert (stats.held_back, stats.held) == (1, 1)
