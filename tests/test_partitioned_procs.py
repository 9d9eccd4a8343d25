"""A partitioned queue under real processes: groups in order, exactly once, one in flight.

Every test publishes 2 producers × 5 groups × 60 messages (``<producer>:<group>:<n>``,
each group's messages published by both producers) into a queue of 4 partitions while 4
consumer processes receive them. Consumers record each message they finish (see
:func:`tests._partitioned_workers.consume_recording`) and run until the parent has seen
all 600 finished.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import vsqs

from . import _partitioned_workers as workers
from .fixtures_core import children, wait_until

PRODUCERS = ("p0", "p1")
PER_GROUP = 60  # per producer and group
TOTAL = len(PRODUCERS) * len(workers.GROUPS) * PER_GROUP
PARTITIONS = 4
CONSUMERS = 4
DEADLINE_S = 60.0  # generous: a bound against hangs, not a speed check


class Done(NamedTuple):
    """One finished message, as its consumer recorded it."""

    body: str
    group: str | None
    receive_count: int
    start: int  # ns, CLOCK_MONOTONIC
    end: int
    consumer: int

    @property
    def producer(self) -> str:
        return self.body.split(":")[0]

    @property
    def body_group(self) -> str:
        return self.body.split(":")[1]

    @property
    def n(self) -> int:
        return int(self.body.split(":")[2])


def _done(line: str, consumer: int) -> Done:
    body, group, receive_count, start, end = json.loads(line)
    return Done(body, group, receive_count, start, end, consumer)


def _read(records: Sequence[Path]) -> list[list[Done]]:
    found = []
    for consumer, record in enumerate(records):
        lines = record.read_text().splitlines() if record.exists() else []
        found.append([_done(line, consumer) for line in lines])
    return found


def _run(
    base: Path,
    *,
    fifo: bool,
    visibility_timeout: float,
    hold_s: float = 0.0,
    victims: int = 0,
    die_at: int = 0,
) -> list[list[Done]]:
    """Run the scenario; return each consumer's records, in the order it finished them."""
    path = str(base / "q")
    vsqs.Queue(path, partitions=PARTITIONS, fifo=fifo, durable=False)
    records = [base / f"consumer-{i}.jsonl" for i in range(CONSUMERS)]
    stop = str(base / "stop")
    options: dict[str, Any] = {"durable": False, "visibility_timeout": visibility_timeout}
    with children() as kids:
        consumers = [
            kids.start(
                workers.consume_recording,
                path,
                str(record),
                stop,
                options,
                workers.Behaviour(hold_s, die_at if i < victims else 0),
            )
            for i, record in enumerate(records)
        ]
        # Producers start once every consumer is ready, so that each takes its share.
        for record in records:
            wait_until(Path(f"{record}.ready").exists, f"{record.name} to be ready")
        producers = [
            kids.start(workers.produce_groups, path, name, PER_GROUP, {"durable": False})
            for name in PRODUCERS
        ]
        for producer in producers:
            kids.join(producer)
        deadline = time.monotonic() + DEADLINE_S
        while len({d.body for done in _read(records) for d in done}) < TOTAL:
            assert time.monotonic() < deadline, "not every message was finished in time"
            assert all(c.is_alive() for c in consumers[victims:]), "a consumer failed"
            time.sleep(0.02)
        Path(stop).touch()
        for i, consumer in enumerate(consumers):
            if i < victims:
                consumer.join(DEADLINE_S)
                assert consumer.exitcode == -signal.SIGKILL, "a victim was not killed mid-run"
            else:
                kids.join(consumer)
    assert vsqs.Queue(path, durable=False).counts().total == 0
    return _read(records)


def _assert_each_group_in_order(done: Sequence[Done], who: str) -> None:
    """Within *done* (in the order given), each producer's messages of a group by n."""
    last: dict[tuple[str, str], int] = {}
    for d in done:
        key = (d.producer, d.body_group)
        assert d.n > last.get(key, -1), f"{who}: {d.body} after n={last[key]} of its group"
        last[key] = d.n


def _assert_all_finished_once(records: Sequence[Sequence[Done]]) -> None:
    times = Counter(d.body for done in records for d in done)
    expected = {
        workers.body(p, g, n) for p in PRODUCERS for g in workers.GROUPS for n in range(PER_GROUP)
    }
    assert set(times) == expected, f"lost: {sorted(expected - set(times))[:5]}"
    twice = [body for body, count in times.items() if count > 1]
    assert not twice, f"{len(twice)} finished twice, e.g. {twice[:5]}"
    assert all(d.group == d.body_group for done in records for d in done)  # Message.group


def _assert_one_in_flight_per_group(records: Sequence[Sequence[Done]]) -> None:
    """No two holds of one group overlap, and each group was processed in order."""
    by_group: dict[str, list[Done]] = defaultdict(list)
    for done in records:
        for d in done:
            by_group[d.body_group].append(d)
    for group, holds in by_group.items():
        holds.sort(key=lambda d: d.start)
        for before, after in itertools.pairwise(holds):
            assert after.start >= before.end, (
                f"{group}: {after.body} (consumer {after.consumer}) was held while "
                f"{before.body} (consumer {before.consumer}) still was"
            )
        _assert_each_group_in_order(holds, group)


def test_four_consumers_see_each_group_in_order_and_every_message_once(
    fast_tmp_path: Path,
) -> None:
    """2 producers × 5 groups × 60 messages, 4 consumer processes on 4 partitions: each
    consumer finishes each group's messages in order; all 600 are delivered exactly once."""
    records = _run(fast_tmp_path, fifo=False, visibility_timeout=600)
    for i, done in enumerate(records):
        _assert_each_group_in_order(done, f"consumer {i}")
    _assert_all_finished_once(records)
    assert all(d.receive_count == 1 for done in records for d in done)  # none redelivered


def test_fifo_holds_one_message_per_group_at_a_time(fast_tmp_path: Path) -> None:
    """``fifo=True``, consumers holding each message 3 ms: no two messages of one group are
    held at once, and each group is processed in order."""
    records = _run(fast_tmp_path, fifo=True, visibility_timeout=600, hold_s=0.003)
    _assert_all_finished_once(records)
    _assert_one_in_flight_per_group(records)
    assert sum(1 for done in records if done) >= 2  # the consumers did share the work


def test_fifo_groups_resume_in_order_after_two_consumers_are_killed(
    fast_tmp_path: Path,
) -> None:
    """``fifo=True``, 2 of the 4 consumers SIGKILLed while each holds a message: nothing is
    lost, each group is still processed in order (the held message comes back first, when
    its 2 s lease ends), and no two messages of one group were held at once."""
    records = _run(
        fast_tmp_path, fifo=True, visibility_timeout=2.0, hold_s=0.003, victims=2, die_at=20
    )
    _assert_all_finished_once(records)
    _assert_one_in_flight_per_group(records)
    assert [len(records[i]) for i in range(2)] == [19, 19]  # each victim died on its 20th
    redelivered = [d for done in records for d in done if d.receive_count > 1]
    assert len(redelivered) >= 2, "the victims' messages were not delivered again"
