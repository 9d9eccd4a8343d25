"""QueueSet (several queues read as one) and NullQueue."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import vsqs
from vsqs._ids import parse_id
from vsqs.testing import ManualClock

from ._lifecycle_workers import forkserver, interleaved_producer, late_publisher

pytestmark = pytest.mark.usefixtures("fresh_ids")


def _produce(tmp_path: Path, count: int) -> list[vsqs.AnyQueue]:
    """Two producer processes, each cycling over three queues at once."""
    paths = [str(tmp_path / f"q{n}") for n in range(3)]
    ctx = forkserver()
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=interleaved_producer, args=(paths, count, tag, barrier))
        for tag in ("a", "b")
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    return [vsqs.Queue(path) for path in paths]


def test_oldest_order_across_queues_with_interleaved_producers(tmp_path: Path) -> None:
    """Messages published by two processes into three queues come out oldest first
    across the queues, single and batched, each routed back to its queue for delete."""
    queues = _produce(tmp_path, 60)
    qset = vsqs.QueueSet(*queues)
    got = []
    while (message := qset.receive(timeout=0)) is not None:
        got.append(message)
        assert qset.delete(message)
        if len(got) == 40:
            break
    while batch := qset.receive_batch(7):
        got += batch
        assert qset.delete_batch(batch) == len(batch)
    keys = [parse_id(m.id) or 0 for m in got]
    assert len(got) == 120
    assert keys == sorted(keys)
    assert {m.queue for m in got} == {q.path for q in queues}
    assert sorted(m.body for m in got) == sorted(
        f"{t}:{n}".encode() for t in "ab" for n in range(60)
    )
    assert qset.size() == 0


def test_priority_order(tmp_path: Path) -> None:
    """``order="priority"``: the first queue is emptied before the second is read."""
    queues = _produce(tmp_path, 30)
    qset = vsqs.QueueSet(*reversed(queues), order="priority")
    got = [m.queue for m in qset.consume(timeout=0)]
    expected = [q.path for q in reversed(queues) for _ in range(20)]
    assert got == expected


def test_change_visibility_and_release_route_to_the_queue(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A lease taken through the set is extended and released in its own queue."""
    first = vsqs.Queue(tmp_path / "a", clock=clock)
    second = vsqs.Queue(tmp_path / "b", clock=clock)
    second.publish(b"m")
    qset = vsqs.QueueSet(first, second)
    message = qset.receive(timeout=0)
    assert message is not None and message.queue == second.path
    longer = qset.change_visibility(message, 100)
    clock.advance(50)
    assert qset.receive(timeout=0) is None
    qset.change_visibility(longer, 0)
    again = qset.receive(timeout=0)
    assert again is not None and again.receive_count == 2
    stranger = vsqs.Queue(tmp_path / "c", clock=clock)
    stranger.publish(b"x")
    foreign = stranger.receive(timeout=0)
    assert foreign is not None
    with pytest.raises(vsqs.InvalidId, match="not from a queue of this set"):
        qset.delete(foreign)


def test_blocked_receive_waits_on_every_queue_without_rechecks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set receive blocked on three empty queues is woken by a publish to the *third*
    (another thread) at once: it looked once before the publish and once after it, not
    every re-check interval meanwhile (it used to wait on the first queue only and look
    at all of them every 0.05 s)."""
    queues = [vsqs.Queue(tmp_path / name) for name in "abc"]
    qset = vsqs.QueueSet(*queues)
    passes: list[float] = []
    claim = qset._claim  # counting the set's looks

    def counted(limit: int, visibility_timeout: float | None) -> tuple[list[vsqs.Message], int]:
        passes.append(time.monotonic())
        return claim(limit, visibility_timeout)

    monkeypatch.setattr(qset, "_claim", counted)
    published: list[float] = []

    def publish_later() -> None:
        while not passes:  # the receive has looked (and found nothing)
            time.sleep(0.01)
        time.sleep(0.5)  # ten of the old re-check intervals
        published.append(time.monotonic())
        queues[2].publish(b"third")

    thread = threading.Thread(target=publish_later)
    thread.start()
    message = qset.receive(timeout=30)  # the re-check under inotify is 1 s: never reached
    thread.join()
    assert message is not None and message.body == b"third"
    assert message.queue == queues[2].path
    if queues[2].waiter().fileno() >= 0:  # watched: not a filesystem that polls
        # One look before the publish, one after (a spurious wake-up may add one).
        assert len([at for at in passes if at < published[0]]) == 1, passes
        assert len(passes) <= 3, passes


def test_blocked_receive_wakes_for_any_queue(tmp_path: Path) -> None:
    """A set receive blocked on empty queues gets a message published by another
    process to the *second* queue."""
    first, second = vsqs.Queue(tmp_path / "a"), vsqs.Queue(tmp_path / "b")
    qset = vsqs.QueueSet(first, second)
    proc = forkserver().Process(target=late_publisher, args=(second.path, 0.3))
    proc.start()
    message = qset.receive(timeout=60)  # generous: not a speed check
    proc.join(60)
    assert proc.exitcode == 0
    assert message is not None and message.body == b"late"


def test_timeout_and_drained(tmp_path: Path, clock: ManualClock) -> None:
    """An empty set returns None after the timeout (manual seconds); once every queue
    is shut down and drained, receive raises QueueDrained and consume stops."""
    first = vsqs.Queue(tmp_path / "a", clock=clock)
    second = vsqs.Queue(tmp_path / "b", clock=clock)
    qset = vsqs.QueueSet(first, second)
    assert qset.receive(timeout=5) is None
    assert clock.monotonic() >= 5
    first.shutdown()
    second.publish(b"last")
    second.shutdown()
    assert [m.body for m in qset.consume(timeout=0)] == [b"last"]  # not deleted: held
    clock.advance(31)  # the lease ends: it comes back
    assert [qset.delete(m) for m in qset.consume()] == [True]  # stops once drained
    with pytest.raises(vsqs.QueueDrained):
        qset.receive(timeout=0)


def test_queue_set_arguments(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "a")
    with pytest.raises(ValueError, match="at least one"):
        vsqs.QueueSet()
    with pytest.raises(ValueError, match="twice"):
        vsqs.QueueSet(queue, vsqs.Queue(tmp_path / "a"))
    with pytest.raises(ValueError, match="order"):
        vsqs.QueueSet(queue, order="newest")
    with pytest.raises(TypeError):
        vsqs.QueueSet(str(tmp_path))  # type: ignore[arg-type]


def test_null_queue_accepts_and_discards(tmp_path: Path) -> None:
    """Same method names as Queue; publishing returns ids, nothing is ever received."""
    null = vsqs.NullQueue()
    ids = [null.publish(b"x"), *null.publish_batch([b"y", b"z"], attributes={"a": "b"})]
    assert len(set(ids)) == 3
    assert all(parse_id(i) is not None for i in ids)
    path = tmp_path / "file"
    path.write_bytes(b"data")
    assert parse_id(null.publish_file(path)) is not None
    assert not path.exists()
    assert null.receive(timeout=None) is None  # never waits: nothing will come
    assert null.receive_batch(10, timeout=5) == []
    assert list(null.consume()) == [] and list(null) == []
    assert (null.size(), len(null), null.counts().total, null.purge(), null.clean()) == (0,) * 5
    assert null.delete(ids[0]) is False
    with pytest.raises(vsqs.LeaseLost):
        null.change_visibility(ids[0] + ".1", 10)
    assert null.stats().produced_messages == 0
    missing = {
        name for name in dir(vsqs.Queue) if not name.startswith("_") and not hasattr(null, name)
    }
    queue_only = {"from_config", "waiter", "partition_queues", "partition_for", "refresh"}
    assert missing <= queue_only | {"claim_misses", "try_receive"}, missing
    with null as same:
        assert same is null


def test_null_queue_in_place_of_a_queue(tmp_path: Path) -> None:
    """A pipeline stage switched off: the producer code runs unchanged."""

    def stage(out: vsqs.AnyQueue | vsqs.NullQueue) -> int:
        for n in range(3):
            out.publish(str(n).encode())
        return out.size()

    assert stage(vsqs.Queue(tmp_path / "q")) == 3
    assert stage(vsqs.NullQueue()) == 0
