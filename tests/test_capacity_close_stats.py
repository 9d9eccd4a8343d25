"""Flow control across processes (issue 9): the capacity bound, close, and the stats."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock, drain

from . import procs
from .fixtures_core import children, wait_blocked_in_inotify

# -- capacity -------------------------------------------------------------------------


def test_producers_in_many_processes_never_exceed_the_capacity(qpath: str, tmp_path: Path) -> None:
    """Three producers push 450 messages through a capacity-5 queue drained by two
    consumers, while a watcher process lists the directory without pause: it never sees
    more than 5 messages (ready, held and being written together)."""
    capacity, producers, per_producer = 5, 3, 150
    stop = str(tmp_path / "stop")
    watch_report = str(tmp_path / "watch.json")
    reports = [str(tmp_path / f"consumer-{n}.json") for n in range(2)]
    with children() as kids:
        watcher = kids.start(procs.watch, qpath, stop, watch_report)
        consumers = [
            kids.start(procs.consume_all, qpath, r, {"durable": False, "visibility_timeout": 600})
            for r in reports
        ]
        for n in range(producers):
            kids.start(procs.bounded_produce, qpath, f"p{n}", per_producer, capacity)
        for producer in kids.processes[3:]:
            kids.join(producer, timeout=120)
        vsqs.PlainQueue(qpath, durable=False).shutdown()
        for consumer in consumers:
            kids.join(consumer, timeout=120)
        Path(stop).touch()
        kids.join(watcher)
    watched = procs.load(watch_report)
    assert watched["listings"] > 0
    assert 0 < watched["most"] <= capacity, watched
    delivered = Counter(body for r in reports for body, _ in procs.load(r))
    expected = {f"p{n}:{i}" for n in range(producers) for i in range(per_producer)}
    assert set(delivered) == expected and set(delivered.values()) == {1}


def test_a_blocked_producer_wakes_when_another_process_deletes(qpath: str, tmp_path: Path) -> None:
    """Its re-check is an hour away: only the delete's file event can wake it in time."""
    vsqs.PlainQueue(qpath, durable=False, capacity=1).publish(b"first")
    report = str(tmp_path / "producer.json")
    with children() as kids:
        producer = kids.start(procs.bounded_publish_one, qpath, report)
        wait_blocked_in_inotify(producer)
        assert not os.path.exists(report)  # still blocked: the queue is full
        kids.join(kids.start(procs.consume_some, qpath, 1, str(tmp_path / "consumer.json")))
        kids.join(producer)
    queue = vsqs.PlainQueue(qpath, durable=False)
    message = queue.receive(timeout=0)
    assert message is not None and message.body == b"waited"
    assert message.id == procs.load(report)


def test_publish_with_timeout_zero_on_a_full_queue_raises_at_once(qpath: str) -> None:
    clock = ManualClock()
    queue = vsqs.PlainQueue(qpath, durable=False, capacity=2, clock=clock)
    queue.publish_batch([b"a", b"b"])
    with pytest.raises(vsqs.QueueFull) as info:
        queue.publish(b"c", timeout=0)
    assert isinstance(info.value, TimeoutError)
    assert (info.value.path, info.value.capacity) == (queue.path, 2)
    assert clock.monotonic() == 0.0  # it did not wait at all
    with pytest.raises(vsqs.QueueFull):
        queue.publish(b"c", timeout=1.5)
    assert clock.monotonic() >= 1.5  # it waited (on the manual clock) as long as asked
    with pytest.raises(ValueError, match="can never fit"):
        queue.publish_batch([b"x"] * 3, timeout=0)
    # A delete by another queue object (another process) makes room for exactly one.
    other = vsqs.PlainQueue(qpath, durable=False, clock=clock)
    message = other.receive(timeout=0)
    assert message is not None and other.delete(message)
    queue.publish(b"c", timeout=0)
    with pytest.raises(vsqs.QueueFull):
        queue.publish(b"d", timeout=0)
    assert queue.size() == 2


# -- shutdown -------------------------------------------------------------------------


def test_shutting_down_twice_is_harmless_in_any_process(qpath: str, tmp_path: Path) -> None:
    """As Python 3.13's queue.Queue.shutdown(): a second shutdown does nothing."""
    queue = vsqs.PlainQueue(qpath, durable=False)
    queue.shutdown()
    queue.shutdown()
    vsqs.PlainQueue(qpath, durable=False).shutdown()
    report = str(tmp_path / "close.json")
    with children() as kids:
        kids.join(kids.start(procs.close_queue, qpath, report))
    assert procs.load(report) is None
    assert queue.is_shutdown
    with pytest.raises(vsqs.QueueClosed):
        queue.publish(b"late")


def test_closed_is_visible_and_enforced_in_other_processes(qpath: str, tmp_path: Path) -> None:
    before, after = str(tmp_path / "before.json"), str(tmp_path / "after.json")
    publish = str(tmp_path / "publish.json")
    queue = vsqs.PlainQueue(qpath, durable=False)
    with children() as kids:
        kids.join(kids.start(procs.report_closed, qpath, before))
        seen = [queue.is_shutdown]
        queue.shutdown()
        seen.append(queue.is_shutdown)
        assert seen == [False, True]
        kids.join(kids.start(procs.report_closed, qpath, after))
        kids.join(kids.start(procs.publish_when_closed, qpath, publish))
    assert procs.load(before) is False
    assert procs.load(after) is True
    assert procs.load(publish) == {"closed": True, "error": "QueueClosed", "path": queue.path}
    assert queue.size() == 0
    with pytest.raises(vsqs.QueueClosed):
        queue.publish_batch([b"a"])
    with pytest.raises(vsqs.QueueClosed):
        vsqs.PlainQueue(qpath, durable=False, capacity=3).publish(b"bounded")
    assert queue.stats().is_shutdown is True


# -- stats ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_stats_equal_what_several_processes_did(qpath: str, tmp_path: Path, method: str) -> None:
    """Three producers and two consumers run in their own processes and exit normally,
    without calling detach(): their counters reach the disk whatever the start method
    (fork and forkserver children end with ``os._exit``, skipping ``atexit``)."""
    sizes = [[1, 10, 100], [7] * 20, [0, 65_536]]
    with children(method) as kids:
        for batch in sizes:
            kids.start(procs.produce_sized, qpath, batch)
        kids.join_all()
    reports = [str(tmp_path / f"consumer-{n}.json") for n in range(2)]
    with children(method) as kids:
        kids.start(procs.consume_some, qpath, 10, reports[0])
        kids.start(procs.consume_some, qpath, 5, reports[1])
        kids.join_all()
    stats = vsqs.PlainQueue(qpath, durable=False).stats()
    flat = [size for batch in sizes for size in batch]
    assert (stats.produced_messages, stats.produced_bytes) == (len(flat), sum(flat))
    consumed_bytes = procs.load(reports[0]) + procs.load(reports[1])
    assert (stats.consumed_messages, stats.consumed_bytes) == (15, consumed_bytes)
    assert (stats.ready, stats.held, stats.delayed, stats.new) == (len(flat) - 15, 0, 0, 0)
    assert stats.oldest_ready_age is not None and stats.oldest_ready_age >= 0
    assert stats.is_shutdown is False


def test_stats_of_one_process_are_exact_at_once(qpath: str) -> None:
    # Ahead of every id this process drew before: ids never go back, so they would lead.
    clock = ManualClock(time.time() + 10 * 365 * 86400)
    queue = vsqs.PlainQueue(qpath, durable=False, clock=clock)
    queue.publish(b"abc")
    queue.publish_batch([b"de", b""])
    queue.publish(b"later", delay=60)
    message = queue.receive(timeout=0)
    assert message is not None and queue.delete(message)
    clock.advance(2)
    stats = queue.stats()
    assert (stats.produced_messages, stats.produced_bytes) == (4, 10)
    assert (stats.consumed_messages, stats.consumed_bytes) == (1, 3)
    assert (stats.ready, stats.held, stats.delayed, stats.new) == (2, 0, 1, 0)
    assert stats.oldest_ready_age == pytest.approx(2.0)


def test_a_forked_child_counts_what_it_does_with_an_inherited_queue(qpath: str) -> None:
    """The child uses the parent's Queue object: its counts are its own (not lost when it
    first flushes, not doubled with the parent's)."""
    queue = vsqs.PlainQueue(qpath, durable=False)
    queue.publish(b"parent")  # the first count is flushed at once...
    queue.publish(b"parent")  # ...this one waits in memory across the fork
    with children("fork") as kids:
        kids.join(kids.start(procs.publish_with, queue, 3))
    stats = queue.stats()
    assert (stats.produced_messages, stats.produced_bytes) == (5, 2 * 6 + 3 * 5)


def test_a_queue_dropped_without_detach_keeps_its_counts(qpath: str) -> None:
    def publish_and_forget() -> None:
        queue = vsqs.PlainQueue(qpath, durable=False)
        queue.publish(b"a")  # flushed at once (the first count)
        queue.publish(b"bb")  # waits in memory for the next flush

    publish_and_forget()
    gc.collect()  # the queue object (reference cycles) is collected here
    stats = vsqs.PlainQueue(qpath, durable=False).stats()
    assert (stats.produced_messages, stats.produced_bytes) == (2, 3)


# -- the bound holds for moves too (issue 32.2) ------------------------------------------


def _poison(q: vsqs.PlainQueue, clock: ManualClock, count: int) -> None:
    """Publish *count* messages, receive each once and let every lease end."""
    q.publish_batch([b"m%d" % n for n in range(count)])
    for _ in range(count):
        assert q.receive(timeout=0) is not None
    clock.advance(2)


def test_dead_lettering_takes_room_in_a_bounded_dead_letter_queue(tmp_path: Path) -> None:
    """A dead-letter queue whose stored capacity is 3 takes 3 of 6 poison messages; the
    others stay in their source, held back (counted in ``stats().held_back``, never
    delivered), and move once room is made and their hold ends. None is lost or copied."""
    clock = ManualClock()
    vsqs.PlainQueue(tmp_path / "dlq", clock=clock).configure(capacity=3)
    q = vsqs.PlainQueue(
        tmp_path / "q", clock=clock, visibility_timeout=1, dead_letter=tmp_path / "dlq",
        max_receives=1,
    )  # fmt: skip
    dlq = q.dead_letter
    assert dlq is not None
    _poison(q, clock, 6)
    q.requeue_expired()
    assert dlq.counts().total == 3
    assert q.stats().held_back == 3
    assert q.counts().held == 3
    assert q.receive(timeout=0) is None  # held back from delivery
    moved = [m.body for m in drain(dlq)]
    clock.advance(31)  # the holds end: the moves are tried again, and room is there
    q.requeue_expired()
    assert q.stats().held_back == 0
    assert q.counts().total == 0
    moved += [m.body for m in drain(dlq)]
    assert sorted(moved) == sorted(b"m%d" % n for n in range(6))


def test_retention_dead_letters_take_room_and_wait_for_it(tmp_path: Path) -> None:
    """Retention's dead-lettering takes room too; what finds none is held back without a
    receive being counted, and moves when room is made."""
    clock = ManualClock()
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=clock, capacity=1)
    q = vsqs.PlainQueue(tmp_path / "q", clock=clock, retention=10, dead_letter=dlq)
    q.publish_batch([b"a", b"b"])
    clock.advance(11)
    assert q.clean() == 2  # both were past retention: one moved, one held back
    assert [m.body for m in dlq.browse()] == [b"a"]
    assert q.stats().held_back == 1
    assert q.receive(timeout=0) is None
    assert [m.body for m in drain(dlq)] == [b"a"]
    clock.advance(31)
    q.requeue_expired()  # its hold ended: ready again, and past retention
    q.clean()
    (last,) = dlq.browse()
    assert last.body == b"b"
    assert dlq.history(last).receive_count == 0
    assert q.counts().total == 0


@pytest.mark.parametrize("stored", [True, False])
def test_redrive_stops_when_the_target_is_full(tmp_path: Path, stored: bool) -> None:
    """``redrive`` into a source queue of capacity 2 (stored, or given by the handle
    passed as ``to``) that holds 1 moves 1 of 4 dead letters, returns 1, and leaves the
    other 3 ready in the dead-letter queue."""
    clock = ManualClock()
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=clock)
    q = vsqs.PlainQueue(
        tmp_path / "q", clock=clock, visibility_timeout=1, dead_letter=dlq, max_receives=1
    )
    _poison(q, clock, 4)
    q.requeue_expired()
    assert dlq.counts().ready == 4
    q.publish(b"fresh")
    if stored:
        q.configure(capacity=2)
    target = None if stored else vsqs.PlainQueue(q.path, clock=clock, capacity=2)
    assert dlq.redrive(to=target) == 1
    assert q.counts().total == 2
    assert dlq.counts().ready == 3
    assert dlq.counts().held == 0
    assert sorted(m.body for m in drain(q)) == [b"fresh", b"m0"]
    assert dlq.redrive(to=target) == 2
    assert q.counts().total == 2


# -- a drain waits for every live publisher (issue 32) -----------------------------------


class _Gate:
    """Stops the thread named *who* in ``_fs.<name>`` (before the real call) until opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, who: str) -> None:
        self.reached, self.open = threading.Event(), threading.Event()
        real = getattr(_fs, name)

        def gated(*args: object) -> object:
            if threading.current_thread().name == who and not self.reached.is_set():
                self.reached.set()
                assert self.open.wait(60)
            return real(*args)

        monkeypatch.setattr(_fs, name, gated)


def _publisher(qdir: Path, clock: ManualClock, out: list[object]) -> threading.Thread:
    def run() -> None:
        try:
            out.append(vsqs.PlainQueue(qdir, durable=False, clock=clock).publish(b"late"))
        except vsqs.QueueClosed as exc:
            out.append(exc)

    return threading.Thread(target=run, name="publisher", daemon=True)


def test_a_drain_waits_for_a_publisher_whose_clock_is_70_s_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publisher 70 s behind passed its shutdown check and is about to rename: its
    ``.new`` has an id 70 s old but a fresh mtime. The drain waits for it (judged by
    mtime as well as id, as ``clean`` does): the message is delivered, then the queue
    is drained, and nothing is left behind."""
    qdir = tmp_path / "q"
    consumer = vsqs.PlainQueue(qdir, durable=False, clock=ManualClock(time.time()))
    gate = _Gate(monkeypatch, "rename_noreplace", "publisher")
    out: list[object] = []
    publisher = _publisher(qdir, ManualClock(time.time() - 70), out)
    publisher.start()
    assert gate.reached.wait(60)
    consumer.shutdown()
    assert consumer.receive(timeout=0) is None  # within the grace
    consumer.clock.advance(1)  # type: ignore[attr-defined]
    assert consumer.receive(timeout=0) is None  # not drained: the `.new` is alive
    gate.open.set()
    publisher.join(60)
    (message,) = consumer.receive_batch(10, timeout=0)
    assert message.body == b"late" and out == [message.id]
    consumer.delete(message)
    with pytest.raises(vsqs.QueueDrained):
        consumer.receive(timeout=0)
    assert consumer.counts().total == 0


def test_a_publisher_stalled_before_its_rename_through_a_shutdown_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publisher stalled for 70 s with its body written (the ``.new``'s id and mtime
    both 70 s old) does not hold the drain up; when it resumes it finds the queue shut
    down and withdraws its ``.new``: no message is left once ``consume()`` has returned."""
    qdir = tmp_path / "q"
    start = time.time()
    consumer = vsqs.PlainQueue(qdir, durable=False, clock=ManualClock(start))
    consumer.publish(b"early")
    gate = _Gate(monkeypatch, "exists", "publisher")  # its shutdown check, after the body
    out: list[object] = []
    publisher = _publisher(qdir, ManualClock(start - 70), out)
    publisher.start()
    assert gate.reached.wait(60)
    (new,) = qdir.glob("*.new")
    os.utime(new, (start - 70, start - 70))  # the stall: its body was written 70 s ago
    consumer.shutdown()
    consumer.clock.advance(2)  # type: ignore[attr-defined]  # past the shutdown's grace
    bodies = []
    for message in consumer.consume(timeout=0):
        bodies.append(message.body)
        consumer.delete(message)
    assert bodies == [b"early"]
    with pytest.raises(vsqs.QueueDrained):
        consumer.receive(timeout=0)  # consume() returned because the queue is drained
    gate.open.set()
    publisher.join(60)
    assert len(out) == 1 and isinstance(out[0], vsqs.QueueClosed)
    assert consumer.counts().total == 0
    assert sorted(p.name for p in qdir.iterdir()) == [".vsqs"]
