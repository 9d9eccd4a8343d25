"""Partitioned queues, message groups and ``fifo=True``: every feature on N directories."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
import zlib
from pathlib import Path

import pytest

import vsqs
from vsqs import PartitionedQueue, Queue, QueueDrained, QueueFull, QueueRoot
from vsqs._sets._spread import STICKY_RUN, VISIT_EVERY, partition_name
from vsqs.testing import ManualClock


def _drain(queue: vsqs.AnyQueue) -> list[vsqs.Message]:
    got = []
    while (message := queue.receive(timeout=0)) is not None:
        got.append(message)
        assert queue.delete(message)
    return got


def _partition_of(queue: PartitionedQueue, message: vsqs.Message) -> int:
    return [part.path for part in queue.partition_queues].index(message.queue)


# -- creating and opening ---------------------------------------------------------------


def test_partitions_are_stored_and_each_is_a_plain_queue_directory(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    assert isinstance(queue, PartitionedQueue)
    assert queue.partitions == 4
    assert not queue.fifo
    names = sorted(os.listdir(queue.path))
    assert names == [".vsqs", *(partition_name(i) for i in range(4))]
    settings = json.loads((fast_tmp_path / "q" / ".vsqs" / "settings.json").read_text())
    assert settings == {"partitions": 4}
    reopened = Queue(queue.path)  # no option: the stored count
    assert isinstance(reopened, PartitionedQueue)
    assert reopened.partitions == 4
    # A partition opened on its own is a plain queue with the messages routed to it.
    queue.publish(b"x", group="g")
    part = queue.partition_for("g")
    alone = Queue(part.path)
    assert type(alone) is vsqs.PlainQueue
    assert alone.receive(timeout=0).body == b"x"  # type: ignore[union-attr]


def test_one_partition_is_todays_queue_byte_for_byte(fast_tmp_path: Path) -> None:
    queue = Queue(fast_tmp_path / "q", partitions=1)
    assert type(queue) is vsqs.PlainQueue
    assert vsqs.partitions_of(queue) == (queue,)
    assert not hasattr(queue, "partition_for")  # a plain queue knows nothing of partitions
    message_id = queue.publish(b"x")
    assert [n for n in os.listdir(queue.path) if n != ".vsqs"] == [message_id]  # no partition
    assert not (fast_tmp_path / "q" / ".vsqs" / "settings.json").exists()


def test_a_conflicting_count_is_refused_naming_both(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    with pytest.raises(ValueError, match=r"partitions=4.*partitions=2"):
        PartitionedQueue(queue.path, partitions=2)
    with pytest.raises(ValueError, match=r"partitions=4.*partitions=1"):
        Queue(queue.path, partitions=1)
    with pytest.raises(ValueError, match=r"fixed when a queue is created.*redrive"):
        queue.configure(partitions=8)
    assert PartitionedQueue(queue.path).partitions == 4


def test_a_plain_queue_with_messages_is_not_partitioned_in_place(fast_tmp_path: Path) -> None:
    plain = Queue(fast_tmp_path / "q")
    plain.publish(b"kept")
    with pytest.raises(ValueError, match=r"holds 1 messages.*redrive"):
        PartitionedQueue(plain.path, partitions=4)
    assert "partitions" not in plain.settings()
    assert type(Queue(plain.path)) is vsqs.PlainQueue
    # The documented way: a new queue, and a redrive that moves every message.
    bigger = PartitionedQueue(fast_tmp_path / "q4", partitions=4)
    assert plain.redrive(to=bigger) == 1
    assert [m.body for m in _drain(bigger)] == [b"kept"]


def test_bad_counts_and_groups_are_refused(fast_tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="partitions must be an int >= 1"):
        Queue(fast_tmp_path / "a", partitions=0)
    with pytest.raises(TypeError, match="partitions must be an int"):
        Queue(fast_tmp_path / "b", partitions="4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 1024"):
        PartitionedQueue(fast_tmp_path / "c", partitions=5000)
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2)
    for bad in ("", "with space", "x" * 129, "é"):
        with pytest.raises(ValueError, match="group must be 1 to 128 printable ASCII"):
            queue.publish(b"x", group=bad)
    with pytest.raises(TypeError, match="group must be a str"):
        queue.publish(b"x", group=7)  # type: ignore[arg-type]
    with pytest.raises(vsqs.InvalidAttributes, match="reserved"):
        queue.publish(b"x", attributes={"\x00group": "g"})
    assert queue.counts().total == 0


def test_queue_root_creates_partitioned_and_fifo_queues(fast_tmp_path: Path) -> None:
    root = QueueRoot(fast_tmp_path)
    queue = root.create("orders", partitions=3, fifo=True, visibility_timeout=5)
    assert isinstance(queue, PartitionedQueue)
    assert (queue.partitions, queue.fifo, queue.visibility_timeout) == (3, True, 5)
    again = root.get("orders")
    assert isinstance(again, PartitionedQueue)
    assert (again.partitions, again.fifo) == (3, True)
    assert root.list() == ["orders"]  # partitions are inside the queue, not beside it


def test_pickled_handle_opens_the_same_partitioned_queue(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=3)
    copy = pickle.loads(pickle.dumps(queue))  # noqa: S301 - our own object
    assert isinstance(copy, PartitionedQueue)
    assert copy.partitions == 3
    copy.publish(b"x")
    assert queue.counts().ready == 1


# -- groups and spreading -----------------------------------------------------------------


def test_a_group_keeps_its_order_in_its_stable_partition(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    for i in range(40):
        queue.publish(f"{i}".encode(), group=f"customer-{i % 5}")
    queue.publish_batch([b"b0", b"b1"], group="customer-1")
    got = _drain(Queue(queue.path))
    assert len(got) == 42
    for g in range(5):
        group = f"customer-{g}"
        bodies = [m.body for m in got if m.group == group]
        expected = [f"{i}".encode() for i in range(g, 40, 5)]
        assert bodies == ([*expected, b"b0", b"b1"] if g == 1 else expected)
        partitions = {m.queue for m in got if m.group == group}
        index = zlib.crc32(group.encode()) % 4  # documented: CRC-32 modulo the count
        assert partitions == {os.path.join(queue.path, partition_name(index))}


def test_a_publisher_without_groups_spreads_in_ordered_runs(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    ids = [queue.publish(b"%d" % i) for i in range(4 * STICKY_RUN)]
    per_partition = [part.counts().ready for part in queue.partition_queues]
    assert per_partition == [STICKY_RUN] * 4
    for part in queue.partition_queues:  # each run in publish order in its partition
        bodies = [int(m.body) for m in part.browse()]
        assert bodies == sorted(bodies)
        assert bodies[-1] - bodies[0] == STICKY_RUN - 1
    assert len(set(ids)) == len(ids)


def test_dedup_ids_are_unique_across_the_whole_queue(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    other = Queue(queue.path)  # another handle: another sticky partition
    first = [queue.publish(b"x", dedup_id=f"job-{i}") for i in range(20)]
    again = [other.publish(b"x", dedup_id=f"job-{i}") for i in range(20)]
    assert first == again
    batch = other.publish_batch([b"a", b"b", b"c"], dedup_ids=["job-1", "new-1", "job-2"])
    assert batch[0] == first[1] and batch[2] == first[2]
    assert queue.publish_batch([b"p", b"q"], batch_dedup_id="chunk") == other.publish_batch(
        [b"p", b"q"], batch_dedup_id="chunk"
    )
    assert queue.counts().ready == 20 + 1 + 2


def test_consumers_claim_from_their_home_first_and_steal_when_empty(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2)
    parts = queue.partition_queues
    for part in parts:
        part.publish_batch([b"%d" % i for i in range(10)])
    first, second = Queue(queue.path), Queue(queue.path)  # two handles: two homes
    a = [first.receive(timeout=0) for _ in range(5)]
    b = [second.receive(timeout=0) for _ in range(5)]
    homes_a = {m.queue for m in a if m}
    homes_b = {m.queue for m in b if m}
    assert len(homes_a) == 1 and len(homes_b) == 1 and homes_a != homes_b
    # Each partition's messages came out in order (strict FIFO in a partition).
    assert [m.body for m in a if m] == [b"0", b"1", b"2", b"3", b"4"]
    rest = _drain(first)  # home empties, then it takes from the other
    assert len(rest) == 10
    assert {m.queue for m in rest} == {p.path for p in parts}


def test_no_partition_starves_behind_a_busy_home(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2)
    consumer = PartitionedQueue(queue.path)
    assert consumer.receive(timeout=0) is None
    for part in consumer.partition_queues:
        part.publish(b"probe")
    probe = consumer.receive(timeout=0)
    assert probe is not None
    home_path = probe.queue
    busy = next(p for p in consumer.partition_queues if p.path == home_path)
    quiet = next(p for p in consumer.partition_queues if p.path != home_path)
    busy.publish_batch([b"busy"] * (2 * VISIT_EVERY))
    seen_quiet = False
    for _ in range(VISIT_EVERY):
        message = consumer.receive(timeout=0)
        assert message is not None
        seen_quiet |= message.queue == quiet.path
        consumer.delete(message)
    assert seen_quiet, "the other partition was never visited"


def test_a_blocked_receive_wakes_for_a_message_in_any_partition(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    consumer = Queue(queue.path)
    target = queue.partition_queues[3]
    timer = threading.Timer(0.2, target.publish, (b"late",))
    timer.start()
    started = time.monotonic()
    message = consumer.receive(timeout=10)
    timer.join()
    assert message is not None and message.body == b"late"
    assert time.monotonic() - started < 5


def test_messages_left_in_the_queue_directory_itself_are_delivered(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2)
    # As a vsqs 0.3 producer writes: a file named by its id, in the queue directory.
    stray = Path(queue.path) / str(time.time_ns() // 1000)
    stray.write_bytes(b"from 0.3")
    assert queue.counts().ready == 1
    message = queue.receive(timeout=0)
    assert message is not None and message.body == b"from 0.3"
    assert message.queue == queue.path
    assert queue.delete(message)
    assert not stray.exists()


# -- every feature on a partitioned queue -------------------------------------------------


def test_delete_and_change_visibility_route_by_message_and_receipt(fast_tmp_path: Path) -> None:
    clock = ManualClock()
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=3, clock=clock, visibility_timeout=10)
    for group in "abc":
        queue.publish(group.encode(), group=group)
    got = [queue.receive(timeout=0) for _ in range(3)]
    assert all(got)
    a, b, c = got
    assert a is not None and b is not None and c is not None
    assert queue.delete(a.receipt)  # a bare receipt finds its partition
    extended = queue.change_visibility(b, 100)
    clock.advance(50)
    assert queue.requeue_expired() == 1  # c's lease ended; b's was extended
    assert queue.delete_batch([extended]) == 1
    back = queue.receive(timeout=0)
    assert back is not None and back.body == c.body and back.receive_count == 2
    assert queue.history(back).receive_count == 1
    with queue.lease(back) as lease:
        assert lease.message.body == c.body
    assert queue.counts().total == 0


def test_capacity_is_a_total_over_every_partition(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4, capacity=3)
    for group in ("a", "b", "c"):
        queue.publish(b"x", group=group)
    with pytest.raises(QueueFull):
        queue.publish(b"x", group="d", timeout=0)
    with pytest.raises(QueueFull):
        Queue(queue.path, capacity=3).publish_batch([b"1", b"2"], timeout=0)
    message = queue.receive(timeout=0)
    assert message is not None and queue.delete(message)
    queue.publish(b"room again", timeout=0)
    assert queue.counts().total == 3


def test_shutdown_drains_the_whole_queue(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=3)
    queue.publish_batch([b"1", b"2"], group="g")
    queue.shutdown()
    assert queue.is_shutdown
    assert all(part.is_shutdown for part in queue.partition_queues)
    with pytest.raises(vsqs.QueueClosed):
        queue.publish(b"late")
    assert [m.body for m in queue.consume(timeout=1)] == [b"1", b"2"]  # nothing deleted
    assert [m.body for m in queue.browse()] == []  # all held by the consume above
    assert queue.purge() == 2
    with pytest.raises(QueueDrained):
        queue.receive(timeout=0)


def test_dead_letters_retention_and_redrive_keep_groups(fast_tmp_path: Path) -> None:
    clock = ManualClock()
    root = QueueRoot(fast_tmp_path, clock=clock)
    dlq = root.create("orders.dlq", partitions=2)
    queue = root.create(
        "orders", partitions=3, dead_letter="orders.dlq", max_receives=1, visibility_timeout=1
    )
    queue.publish(b"poison", group="g1", attributes={"k": "v"})
    first = queue.receive(timeout=0)
    assert first is not None
    clock.advance(2)  # the lease ends: its one receive is used up
    assert queue.receive(timeout=0) is None
    assert queue.counts().total == 0
    dead = list(dlq.browse())
    assert [(m.body, m.group, dict(m.attributes)) for m in dead] == [(b"poison", "g1", {"k": "v"})]
    assert isinstance(dlq, PartitionedQueue)
    assert dead[0].queue == dlq.partition_for("g1").path
    assert dlq.history(dead[0]).source == first.queue
    assert dlq.redrive() == 1
    back = queue.receive(timeout=0)
    assert back is not None and back.group == "g1" and back.queue == first.queue
    # Retention: an old unconsumed message is dropped (here into the dead-letter queue).
    keep = root.create("keep", partitions=2, retention=10)
    keep.publish(b"old")
    clock.advance(11)
    assert keep.receive(timeout=0) is None
    assert keep.counts().total == 0


def test_delay_attributes_stats_purge_and_clean(fast_tmp_path: Path) -> None:
    clock = ManualClock()
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2, clock=clock)
    queue.publish(b"later", delay=5, group="a")
    queue.publish(b"now", attributes={"x": "1"}, group="b")
    counts = queue.counts()
    assert (counts.ready, counts.delayed) == (1, 1)
    message = queue.receive(timeout=0)
    assert message is not None and dict(message.attributes) == {"x": "1"}
    assert queue.delete(message)
    clock.advance(6)
    stats = queue.stats()
    assert stats.ready + stats.delayed == 1
    assert stats.consumed_messages == 1 and stats.produced_messages == 2
    assert len(stats.partitions) == 2
    assert sum(p.ready for p in stats.partitions) == stats.ready
    assert sum(p.produced_messages for p in stats.partitions) == 2
    assert queue.receive(timeout=0, visibility_timeout=1) is not None  # the delay is over
    clock.advance(2)
    assert queue.requeue_expired() == 1
    assert queue.stats().oldest_ready_id is not None
    assert queue.peek_oldest_key() is not None
    assert queue.size() == len(queue) == 1
    assert queue.purge() == 1
    assert queue.clean(older_than=0) >= 0
    assert queue.counts().total == 0


def test_a_queue_set_reads_a_partitioned_queue(fast_tmp_path: Path) -> None:
    partitioned = PartitionedQueue(fast_tmp_path / "p", partitions=3)
    plain = Queue(fast_tmp_path / "plain")
    partitioned.publish(b"p", group="g")
    plain.publish(b"q")
    both = vsqs.QueueSet(partitioned, plain, order="priority")
    first = both.receive(timeout=0)
    assert first is not None and first.body == b"p"
    assert both.delete(first) is True


# -- fifo=True: one in flight per group ---------------------------------------------------


def test_fifo_holds_a_groups_next_message_until_the_first_is_done(fast_tmp_path: Path) -> None:
    clock = ManualClock()
    queue = Queue(fast_tmp_path / "q", fifo=True, visibility_timeout=10, clock=clock)
    assert isinstance(queue, PartitionedQueue) and queue.partitions == 8
    for i in range(3):
        queue.publish(b"%d" % i, group="g")
    other = Queue(queue.path, clock=clock)
    first = queue.receive(timeout=0)
    assert first is not None and first.body == b"0"
    assert other.receive(timeout=0) is None  # one in flight
    assert queue.receive(timeout=0) is None  # even for its own holder
    clock.advance(11)  # the lease ends: the same message comes back first
    again = other.receive(timeout=0)
    assert again is not None and again.body == b"0" and again.receive_count == 2
    assert other.delete(again)
    second = queue.receive(timeout=0)
    assert second is not None and second.body == b"1"
    released = queue.change_visibility(second, 0)  # a release lets it go again at once
    assert released.body == b"1"
    batch = other.receive_batch(10)
    assert [m.body for m in batch] == [b"1", b"2"]  # one consumer may hold a run, in order


def test_fifo_does_not_hold_other_partitions(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4, fifo=True)
    groups = ["a", "b", "c", "d", "e", "f", "g", "h"]
    partitions = {g: queue.partition_for(g).path for g in groups}
    distinct = list({path: g for g, path in partitions.items()}.values())
    assert len(distinct) >= 2
    for group in distinct:
        queue.publish_batch([b"1", b"2"], group=group)
    got = [queue.receive(timeout=0) for _ in distinct]
    assert all(m is not None and m.body == b"1" for m in got)
    assert {m.group for m in got if m} == set(distinct)
    assert queue.receive(timeout=0) is None


def test_a_blocked_fifo_receive_wakes_when_the_holder_deletes(fast_tmp_path: Path) -> None:
    queue = Queue(fast_tmp_path / "q", partitions=1, fifo=True)
    assert type(queue) is vsqs.PlainQueue and queue.fifo  # fifo on one directory: one in flight
    queue.publish_batch([b"1", b"2"], group="g")
    held = queue.receive(timeout=0)
    assert held is not None
    waiter = Queue(queue.path)
    timer = threading.Timer(0.2, queue.delete, (held,))
    timer.start()
    started = time.monotonic()
    nxt = waiter.receive(timeout=10)
    timer.join()
    assert nxt is not None and nxt.body == b"2"
    assert time.monotonic() - started < 5


def test_fifo_can_be_turned_off_and_on_for_every_partition(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=2, fifo=True)
    queue.configure(fifo=False)
    reopened = PartitionedQueue(queue.path)
    assert not reopened.fifo
    assert all(not part.fifo for part in reopened.partition_queues)
    reopened.publish_batch([b"1", b"2"], group="g")
    assert len(reopened.receive_batch(1)) == 1
    assert reopened.receive(timeout=0) is not None  # no longer one in flight


def test_a_lease_changed_by_its_receipt_alone_names_its_partition(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=3)
    queue.publish(b"x", group="g")
    message = queue.receive(timeout=0)
    assert message is not None
    extended = queue.change_visibility(message.receipt, 60)  # a receipt, no Message
    assert extended.queue == message.queue
    again = queue.change_visibility(extended, 120)  # the returned message routes
    bare = vsqs.Message(id=again.id, body=b"", receipt=again.receipt, expires_at=0.0)
    assert queue.delete(bare)  # a Message that names no directory: found by its receipt
    assert queue.counts().total == 0


def test_a_dedup_id_is_unique_across_groups_and_partitions(fast_tmp_path: Path) -> None:
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4)
    groups = [f"g{i}" for i in range(16)]
    apart = {queue.partition_for(g).path: g for g in groups}
    assert len(apart) >= 2  # groups that live in different partitions
    first, second = list(apart.values())[:2]
    one = queue.publish(b"x", group=first, dedup_id="order-7")
    assert Queue(queue.path).publish(b"x", group=second, dedup_id="order-7") == one
    batch = queue.publish_batch([b"a", b"b"], group=first, batch_dedup_id="job")
    assert (
        Queue(queue.path).publish_batch([b"a", b"b"], group=second, batch_dedup_id="job") == batch
    )
    assert queue.counts().ready == 3
    assert queue.clean(older_than=0) == 0  # no partition takes the markers for debris
