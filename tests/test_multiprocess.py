"""Shared use by real processes: exactly once for many, strict FIFO for one and one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import vsqs

from . import procs
from .fixtures_core import children

# No expiry can happen (a lease lasts ten minutes), so delivery must be exactly once.
CONSUMER: dict[str, Any] = {"durable": False, "visibility_timeout": 600}
PRODUCER: dict[str, Any] = {"durable": False}


def test_four_producers_and_four_consumers_deliver_each_message_exactly_once(
    tmp_path: Path,
) -> None:
    """4 producer × 4 consumer processes × 5,000 messages each: none lost, none twice.
    Consumers stop by themselves once the queue is shut down and drained."""
    path = str(tmp_path / "q")
    producers, consumers, per_producer = 4, 4, 5000
    reports = [str(tmp_path / f"consumer-{n}.json") for n in range(consumers)]
    with children() as kids:
        for report in reports:
            kids.start(procs.consume_all, path, report, CONSUMER)
        for n in range(producers):
            kids.start(procs.produce, path, f"p{n}", per_producer, PRODUCER)
        for producer in kids.processes[consumers:]:
            kids.join(producer, timeout=240)
        vsqs.Queue(path, durable=False).shutdown()
        kids.join_all(timeout=240)
    received = [entry for report in reports for entry in procs.load(report)]
    times = Counter(body for body, _ in received)
    duplicates = [body for body, n in times.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} delivered twice, e.g. {duplicates[:5]}"
    expected = {f"p{n}:{i}" for n in range(producers) for i in range(per_producer)}
    missing = expected - set(times)
    assert not missing, f"{len(missing)} lost, e.g. {sorted(missing)[:5]}"
    assert set(times) == expected
    assert {count for _, count in received} == {1}  # never redelivered
    assert vsqs.Queue(path, durable=False).counts().total == 0


def test_one_producer_and_one_consumer_get_strict_fifo(tmp_path: Path) -> None:
    """The consumer runs while the producer publishes, so it lists many times."""
    path = str(tmp_path / "q")
    report = str(tmp_path / "consumer.json")
    with children() as kids:
        consumer = kids.start(procs.consume_all, path, report, CONSUMER)
        kids.join(kids.start(procs.produce, path, "p", 3000, PRODUCER), timeout=240)
        vsqs.Queue(path, durable=False).shutdown()
        kids.join(consumer, timeout=240)
    assert [body for body, _ in procs.load(report)] == [f"p:{i}" for i in range(3000)]
