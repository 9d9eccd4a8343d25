"""``fifo=True`` is one in flight *per group*: unrelated groups, delays and stalled
consumers never hold back what is not theirs (issue 38, items 3 and 4).

Real processes hold messages and locks; the rules themselves are checked on the manual
clock (:func:`test_the_gate_rules_on_the_manual_clock`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs.testing import ManualClock

from . import _fifo_workers as workers
from .fixtures_core import children, wait_until
from .procs import load

GROUPS = [f"g{i}" for i in range(40)]
PARTITIONS = 8


def _fifo(base: Path, partitions: int = PARTITIONS) -> vsqs.PartitionedQueue:
    return vsqs.PartitionedQueue(base / "q", partitions=partitions, fifo=True, durable=False)


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """*call*'s result and how long it took, run in a thread joined for 10 s at most (a
    receive that waits for a stopped holder forever fails the test, not the run)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(10)
    assert result, "the call was still waiting after 10 s"
    return result[0], time.monotonic() - started


def test_forty_groups_on_eight_partitions_are_all_in_flight_at_once(fast_tmp_path: Path) -> None:
    """40 groups x 2 messages on 8 partitions: 4 processes' 40 receives that do not wait,
    nothing deleted, hold the first message of every group; a group's second comes only
    once its first is deleted. (With a whole partition held by one message: 8.)"""
    queue = _fifo(fast_tmp_path)
    for group in GROUPS:
        queue.publish_batch([f"{group}:0".encode(), f"{group}:1".encode()], group=group)
    reports = [fast_tmp_path / f"consumer-{i}.json" for i in range(4)]
    start = fast_tmp_path / "start"
    with children() as kids:
        consumers = [
            kids.start(workers.receive_some, queue.path, str(report), 10, str(start))
            for report in reports
        ]
        for report in reports:
            wait_until(Path(f"{report}.ready").exists, f"{report.name} ready")
        start.touch()
        for consumer in consumers:
            kids.join(consumer)
    held = [entry for report in reports for entry in load(str(report))]
    assert None not in held, f"{held.count(None)} of 40 receives found nothing"
    assert sorted(body for body, _, _ in held) == sorted(f"{g}:0" for g in GROUPS)
    assert {group for _, group, _ in held} == set(GROUPS)
    assert queue.receive(timeout=0) is None  # every group has its one in flight
    done = {group for _, group, _ in held[:20]}
    for _, _, receipt in held[:20]:
        assert queue.delete(receipt)  # a receipt, from another process than its receiver
    second = [queue.receive(timeout=0) for _ in range(21)]
    assert second[-1] is None
    assert sorted(m.body.decode() for m in second[:20] if m) == sorted(f"{g}:1" for g in done)


def test_a_stopped_holder_of_one_group_holds_back_no_other(fast_tmp_path: Path) -> None:
    """A consumer stopped (SIGSTOP) while it holds group A's first message: group B, in
    the same partition, is delivered at once; A's second never; a receive with
    ``timeout=1`` that finds nothing returns after its second, not later."""
    queue = _fifo(fast_tmp_path)
    a, b = workers.same_partition(queue, 2)
    queue.publish_batch([b"a:0", b"a:1"], group=a)
    queue.publish(b"b:0", group=b)
    report = fast_tmp_path / "held.json"
    with children() as kids:
        holder = kids.start(workers.hold_and_stop, queue.path, str(report), 60.0)
        assert holder.pid is not None
        wait_until(lambda: holder.pid is not None and workers.stopped(holder.pid), "the stop")
        assert load(str(report)) == ["a:0", a]
        got = queue.receive(timeout=0)
        assert got is not None and (got.body, got.group) == (b"b:0", b)
        nothing, took = _timed(lambda: queue.receive(timeout=1))
        assert nothing is None and 1.0 <= took < 1.5, took
        batch, took = _timed(lambda: queue.receive_batch(10, timeout=1))
        assert batch == [] and took < 1.5, took


@pytest.mark.parametrize("partitions", [1, PARTITIONS])
def test_a_stopped_claim_lock_holder_costs_a_receive_no_more_than_its_timeout(
    fast_tmp_path: Path, partitions: int
) -> None:
    """A process stopped while it holds a directory's claim lock: other partitions are
    delivered at once, and ``receive(timeout=1)`` (and a batch's) returns within 1.5 s."""
    queue = vsqs.Queue(fast_tmp_path / "q", partitions=partitions, fifo=True, durable=False)

    def where(group: str) -> vsqs.PlainQueue:
        return queue.partition_for(group) if isinstance(queue, vsqs.PartitionedQueue) else queue

    blocked = where("a")
    queue.publish(b"a:0", group="a")
    others = [g for g in GROUPS if where(g).path != blocked.path][:3]
    for group in others:
        queue.publish(f"{group}:0".encode(), group=group)
    report = fast_tmp_path / "locked.json"
    with children() as kids:
        holder = kids.start(workers.lock_and_stop, blocked.path, str(report))
        wait_until(lambda: holder.pid is not None and workers.stopped(holder.pid), "the stop")
        assert load(str(report)) is True
        delivered = set()
        for _ in others:
            got, took = _timed(lambda: queue.receive(timeout=1))
            assert got is not None and took < 0.5, (got, took)
            delivered.add(got.group)
        assert delivered == set(others)
        nothing, took = _timed(lambda: queue.receive(timeout=1))
        assert nothing is None and took < 1.5, took
        batch, took = _timed(lambda: queue.receive_batch(10, timeout=1))
        assert batch == [] and took < 1.5, took


def test_a_delayed_producer_holds_back_no_ready_message(fast_tmp_path: Path) -> None:
    """While a producer publishes ``delay=1`` messages to every group (and ungrouped
    ones) in every partition, the 40 ready messages published before them are all
    delivered at once: a delayed message holds back only its own group's later ones."""
    queue = _fifo(fast_tmp_path)
    for group in GROUPS:
        queue.publish(f"{group}:ready".encode(), group=group)
    stop = fast_tmp_path / "stop"
    with children() as kids:
        producer = kids.start(workers.publish_delayed, queue.path, GROUPS, str(stop))
        wait_until(lambda: queue.counts().delayed >= 2 * len(GROUPS), "delayed messages")
        got = [queue.receive(timeout=0) for _ in GROUPS]
        stop.touch()
        kids.join(producer)
    assert None not in got, f"{got.count(None)} of 40 receives found nothing"
    assert sorted(m.body.decode() for m in got if m) == sorted(f"{g}:ready" for g in GROUPS)


def test_the_gate_rules_on_the_manual_clock(fast_tmp_path: Path) -> None:
    """One directory: a batch takes every group's ready run in id order (several of one
    group); a held message holds back its group; a delayed one only its group's later
    messages; ungrouped messages are one group of their own."""
    clock = ManualClock()
    queue = vsqs.PlainQueue(fast_tmp_path / "q", fifo=True, clock=clock, visibility_timeout=30)
    queue.publish(b"a:0", group="a")
    queue.publish(b"b:0", group="b")
    queue.publish(b"u:0")
    queue.publish(b"a:late", group="a", delay=5)
    queue.publish(b"a:1", group="a")
    queue.publish(b"u:1")
    queue.publish(b"b:1", group="b")
    batch = queue.receive_batch(10)
    assert [m.body for m in batch] == [b"a:0", b"b:0", b"u:0", b"u:1", b"b:1"]
    assert queue.receive(timeout=0) is None  # a, b and the ungrouped are all in flight
    queue.delete(batch[0])
    assert queue.receive(timeout=0) is None  # a:1 waits for a:late, which is delayed
    clock.advance(5)
    late = queue.receive(timeout=0)
    assert late is not None and late.body == b"a:late"
    assert queue.receive(timeout=0) is None
    assert queue.delete(late)
    last = queue.receive(timeout=0)
    assert last is not None and last.body == b"a:1"
    assert vsqs.Queue(queue.path, clock=clock).counts().held == 5
