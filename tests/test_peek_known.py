"""``peek_oldest_key(known=True)``: the oldest ready message a handle knows of, with no
listing while it knows of one, and the FIFO receive of ``vsqs serve`` built on it
(:func:`vsqs.serve._order.in_order`), whose cost must not grow with the backlog."""

from __future__ import annotations

import time
from pathlib import Path

import vsqs
from vsqs._consumer import Consumer
from vsqs.serve._order import in_order


def test_the_known_oldest_costs_no_listing_until_the_view_is_used_up(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    assert queue.peek_oldest_key(known=True) is None  # nothing to know of: listed, empty
    first, second = queue.publish_batch([b"1", b"2"])
    # The view was used up (empty), so this call lists and finds both.
    assert queue.peek_oldest_key(known=True) == int(first)
    other = vsqs.Queue(tmp_path / "q", durable=False)
    taken = other.receive(timeout=0)
    assert taken is not None and taken.id == first
    other.delete(taken)
    # No listing while the view has candidates: still the first, which is gone (a
    # listing says the second).
    assert queue.peek_oldest_key() == int(second)
    assert queue.peek_oldest_key(known=True) == int(first)
    got = queue.receive(timeout=0)  # the claim of the first misses, the next is taken
    assert got is not None and got.id == second
    queue.delete(got)
    (third,) = queue.publish_batch([b"3"])
    assert queue.peek_oldest_key(known=True) == int(third)  # used up: listed again


def test_a_listing_for_the_known_oldest_returns_ended_leases(tmp_path: Path) -> None:
    (message_id,) = vsqs.Queue(tmp_path / "q", durable=False).publish_batch([b"1"])
    holder = vsqs.Queue(tmp_path / "q", durable=False)
    assert holder.receive(visibility_timeout=0.05, timeout=0) is not None
    time.sleep(0.2)
    fresh = vsqs.Queue(tmp_path / "q", durable=False)
    assert fresh.peek_oldest_key(known=True) == int(message_id)
    assert (tmp_path / "q" / message_id).is_file()  # ready again, under its own id


def test_the_fifo_receive_takes_the_partition_of_the_oldest_message(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", partitions=4, fifo=True, durable=False)
    sent = [queue.publish(f"{i}".encode(), group=f"g{i}") for i in range(8)]
    got = in_order(queue, 3, 30)
    assert got[0].id == sent[0]  # the oldest's partition first
    queue.delete_batch(got)
    rest = in_order(queue, 10, 30)
    assert {m.id for m in got} | {m.id for m in rest} == set(sent)


def test_the_fifo_receive_goes_on_past_a_partition_another_consumer_emptied(
    tmp_path: Path,
) -> None:
    queue = vsqs.Queue(tmp_path / "q", partitions=4, fifo=True, durable=False)
    old = queue.publish(b"old", group="a")
    assert queue.peek_oldest_key(known=True) == int(old)
    for part in vsqs.partitions_of(queue):
        part.peek_oldest_key(known=True)  # every partition's view loaded
    new = queue.publish(b"new", group="b")
    assert isinstance(queue, vsqs.PartitionedQueue)
    partition_of = {m: queue.partition_for(g) for m, g in ((old, "a"), (new, "b"))}
    assert partition_of[old].path != partition_of[new].path, "pick groups in two partitions"
    index = [p.path for p in vsqs.partitions_of(queue)].index(partition_of[old].path)
    other = vsqs.partitions_of(vsqs.Queue(tmp_path / "q", partitions=4, fifo=True))[index]
    taken = other.receive(timeout=0)  # another consumer, of the old one's partition only
    assert taken is not None and taken.id == old
    other.delete(taken)
    # This handle still believes the old message is there; its partition gives nothing,
    # and the receive goes on to the partition that has the new one.
    got = in_order(queue, 1, 30)
    assert [m.id for m in got] == [new]


def test_a_consumers_peek_is_what_its_next_take_gives() -> None:
    """Listed candidates and ids put back (requeues of this handle) merged oldest first,
    as :meth:`Consumer.take` serves them; nothing is taken by a peek."""
    consumer = Consumer(refresh_interval=1.0)
    assert consumer.peek() is None
    consumer.load([10, 20], [], started_us=100, now=0.0, cost=0.0)
    assert consumer.peek() == 10
    consumer.put_back([4])
    seen = []
    while (code := consumer.peek()) is not None:
        assert consumer.peek() == code  # a peek takes nothing
        seen.append(code)
        assert consumer.take() == code
        if code == 10:
            consumer.put_back([30])
    assert seen == [4, 10, 20, 30]
