"""Partitions that scale: every publish path spreads, consumers take distinct partitions,
clear errors, one protocol for every kind of queue, exactly once under real processes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import vsqs
from vsqs import NullQueue, PartitionedQueue, PlainQueue, QueueLike
from vsqs.aio import AsyncQueue
from vsqs.cli import cli

from . import _scale_workers as workers
from .fixtures_core import children, wait_until


def _per_partition(queue: PartitionedQueue) -> list[int]:
    """Messages in each partition directory (one listing each)."""
    return [part.counts().total for part in queue.partition_queues]


def _spread(counts: list[int], total: int) -> None:
    """Every partition got a fair share: none empty, none with more than half."""
    assert sum(counts) == total, counts
    assert min(counts) > 0 and max(counts) <= total // 2, counts


# -- every publish path spreads -----------------------------------------------------------


@pytest.mark.parametrize(("calls", "size"), [(10, 1000), (100, 10), (2000, 1)])
def test_batches_of_any_size_spread_over_the_partitions(
    fast_tmp_path: Path, calls: int, size: int
) -> None:
    """``publish_batch`` without a group spreads whatever its size: the sticky run counts
    messages, not calls, and a batch goes whole to one partition (10 batches of 1,000
    into 4 partitions: 3,000, 3,000, 2,000, 2,000; before, all 10,000 in one)."""
    queue = PartitionedQueue(fast_tmp_path / "q", partitions=4, durable=False)
    for _ in range(calls):
        ids = queue.publish_batch([b"x"] * size)
        assert len({queue.history(i).first_sent for i in ids}) >= 1
    counts = _per_partition(queue)
    _spread(counts, calls * size)
    if size == 1000:
        assert sorted(counts) == [2000, 2000, 3000, 3000]


def test_single_stream_and_file_publishes_spread(fast_tmp_path: Path) -> None:
    """``publish``, ``publish_stream`` and ``publish_file`` spread as batches do."""
    for kind in ("publish", "stream", "file"):
        queue = PartitionedQueue(fast_tmp_path / kind, partitions=4, durable=False)
        for n in range(400):
            if kind == "publish":
                queue.publish(b"x")
            elif kind == "stream":
                queue.publish_stream(io.BytesIO(b"x"))
            else:
                source = fast_tmp_path / f"{kind}-{n}"
                source.write_bytes(b"x")
                queue.publish_file(source)
        _spread(_per_partition(queue), 400)


def test_async_and_cli_batches_spread(fast_tmp_path: Path) -> None:
    """AsyncQueue's ``publish_batch`` (through its publishing thread) and ``vsqs publish``
    with several bodies per call spread over the partitions too."""
    path = str(fast_tmp_path / "aio")
    PartitionedQueue(path, partitions=4)

    async def main() -> None:
        async with AsyncQueue(path) as aq:
            for _ in range(20):
                await aq.publish_batch([b"x"] * 100)

    asyncio.run(main())
    _spread(_per_partition(PartitionedQueue(path)), 2000)
    path = str(fast_tmp_path / "cli")
    PartitionedQueue(path, partitions=4)
    # Each `vsqs publish` is a new handle, which starts at a random partition and keeps
    # its 10 messages there (fewer than a sticky run): 100 of them leave a partition empty
    # or over half full about once in 10 million runs (20 of 50 did it once in 35).
    for _ in range(100):
        result = CliRunner().invoke(cli, ["publish", path, *(["x"] * 10)])
        assert result.exit_code == 0, result.output
    _spread(_per_partition(PartitionedQueue(path)), 1000)


# -- errors -------------------------------------------------------------------------------


def test_partitioning_a_queue_with_held_or_delayed_messages_says_what_to_do(
    fast_tmp_path: Path,
) -> None:
    """A plain queue whose messages are all received (held) or delayed is refused with a
    ValueError naming it and the way out (before: AttributeError '_meta'); nothing is
    stored and nothing is lost."""
    plain = PlainQueue(fast_tmp_path / "q")
    plain.publish(b"held")
    plain.publish(b"later", delay=60)
    held = plain.receive(timeout=0)
    assert held is not None
    with pytest.raises(ValueError, match=r"holds 2 messages.*1 received.*1 delayed.*redrive") as e:
        vsqs.Queue(plain.path, partitions=4)
    assert plain.path in str(e.value)
    assert "partitions" not in plain.settings()
    assert plain.delete(held)
    assert plain.counts().delayed == 1


def test_vsqs_create_never_changes_an_existing_queue(fast_tmp_path: Path) -> None:
    """``vsqs create Q --partitions 4`` (or ``--fifo``) on an existing queue, even an
    empty one, is refused naming the queue and what it has; ``vsqs queues create`` too."""
    path = str(fast_tmp_path / "q")
    queue = PlainQueue(path)
    queue.shutdown()
    for extra in (["--partitions", "4"], ["--fifo"]):
        result = CliRunner().invoke(cli, ["create", path, *extra])
        assert result.exit_code == 2
        assert path in result.output and "never changes an existing queue" in result.output
    assert type(vsqs.Queue(path)) is PlainQueue and vsqs.Queue(path).settings() == {}
    root = fast_tmp_path / "root"
    vsqs.QueueRoot(root).create("a", partitions=2)
    result = CliRunner().invoke(
        cli, ["queues", "create", "--root", str(root), "a", "--partitions", "3"]
    )
    assert result.exit_code != 0 and "partitions=2" in result.output
    assert CliRunner().invoke(cli, ["create", path]).exit_code == 0  # no shape: opened


# -- one protocol ---------------------------------------------------------------------------


def _every_method(queue: QueueLike, tmp: Path) -> dict[str, Any]:
    """Call every public method of :class:`QueueLike` on *queue*; what each gave, in a
    form that does not depend on the queue's kind (ids and paths left out)."""
    out: dict[str, Any] = {}
    with queue:
        out["publish"] = isinstance(queue.publish(b"a"), str)
        out["publish_batch"] = len(queue.publish_batch([b"b", b"c"]))
        source = tmp / "file"
        source.write_bytes(b"d")
        out["publish_file"] = isinstance(queue.publish_file(source), str)
        out["publish_stream"] = isinstance(queue.publish_stream(io.BytesIO(b"e")), str)
        out["counts"] = queue.counts().total
        out["size"] = (queue.size(), len(queue))
        out["browse"] = sorted(m.body for m in queue.browse())
        peeked = queue.peek()
        out["peek"] = None if peeked is None else len(peeked.body)
        out["peek_oldest_key"] = queue.peek_oldest_key() is not None
        out["stats"] = queue.stats().ready
        out["try_receive"] = sorted(m.body for m in queue.try_receive(2))
        one = queue.receive(timeout=0)
        out["receive"] = None if one is None else len(one.body)
        out["history"] = None if one is None else queue.history(one).receive_count
        if one is not None:
            out["change_visibility"] = queue.change_visibility(one, 0).body == one.body
        out["receive_batch"] = len(queue.receive_batch(10, timeout=0))
        out["requeue_expired"] = queue.requeue_expired() >= 0
        got = queue.receive_batch(10, timeout=0)
        out["delete"] = queue.delete(got[0]) if got else None
        out["delete_batch"] = queue.delete_batch(got[1:])
        out["consume"] = [m.body for m in queue.consume(timeout=0)]
        out["consume_leases"] = list(queue.consume_leases(timeout=0))
        queue.publish(b"f")
        message = queue.receive(timeout=0)
        if message is not None:
            with queue.lease(message) as lease:
                out["lease"] = lease.message.body
        out["next_look"] = queue.next_look(0) <= 0.001
        out["redrive"] = queue.redrive(limit=0)
        out["settings"] = {k: v for k, v in queue.settings().items() if k != "partitions"}
        out["purge"] = queue.purge() >= 0
        out["clean"] = queue.clean(older_than=3600) >= 0
        out["is_shutdown"] = queue.is_shutdown
        queue.shutdown()
        out["shutdown"] = queue.is_shutdown
    return out


def test_plain_partitioned_and_null_queues_answer_every_method_alike(fast_tmp_path: Path) -> None:
    """One protocol (QueueLike), every method called on each kind: a plain and a
    partitioned queue give the same results (before, ``try_receive(4)`` on a partitioned
    queue holding messages gave []); the null queue gives its empty answers."""
    plain = _every_method(PlainQueue(fast_tmp_path / "plain", durable=False), fast_tmp_path)
    parted = PartitionedQueue(fast_tmp_path / "parted", partitions=4, durable=False)
    assert parted.try_receive(4) == []
    parted.publish_batch([b"1"] * 8)
    assert len(parted.try_receive(4)) == 4
    parted.purge()
    partitioned = _every_method(parted, fast_tmp_path)
    assert partitioned == plain
    assert plain["try_receive"] == [b"a", b"b"] and plain["receive_batch"] == 3
    null = _every_method(NullQueue(), fast_tmp_path)
    assert null["counts"] == 0 and null["try_receive"] == [] and null["receive"] is None
    for kind in (PlainQueue(fast_tmp_path / "p2"), parted, NullQueue()):
        assert isinstance(kind, QueueLike)


# -- consumers take distinct partitions, with real processes -------------------------------


@pytest.mark.parametrize("consumers", [2, 4])
def test_consumers_started_together_take_one_partition_each(
    fast_tmp_path: Path, consumers: int
) -> None:
    """K consumer processes started together on K partitions: each takes a distinct home
    on its first receive (a lock on the partition's home file), so each one's next
    receive, with two messages in each partition, gets a different partition's (two
    consumers with one home would both take from it)."""
    chance = random.Random(consumers)
    for round_ in range(4):  # a spread by process id and handle count alone collides often
        base = fast_tmp_path / f"r{round_}"
        base.mkdir()
        path = str(base / "q")
        queue = PartitionedQueue(path, partitions=consumers, durable=False)
        records = [base / f"c{i}" for i in range(consumers)]
        go, stop = base / "go", base / "stop"
        with children() as kids:
            procs = [
                kids.start(workers.take_home, path, str(r), str(go), str(stop), chance.randrange(8))
                for r in records
            ]
            for record in records:
                wait_until(Path(f"{record}.ready").exists, f"{record.name} to be ready")
            for part in queue.partition_queues:
                part.publish_batch([b"one", b"two"])  # two: a shared home gives both
            go.touch()
            for record in records:
                wait_until(record.exists, f"{record.name} to receive")
            stop.touch()
            for proc in procs:
                kids.join(proc)
        taken = [record.read_text() for record in records]
        assert len(set(taken)) == consumers, f"round {round_}: two consumers shared a home"


def test_a_home_left_by_a_consumer_is_taken_over(fast_tmp_path: Path) -> None:
    """A consumer's home dies with it (the lock is the kernel's): a handle that found
    every home taken takes it over at its next look elsewhere."""
    path = str(fast_tmp_path / "q")
    PartitionedQueue(path, partitions=2, durable=False)
    a, b, c = (PartitionedQueue(path, durable=False) for _ in range(3))
    for handle in (a, b, c):
        assert handle.receive(timeout=0) is None  # each looks for a home
    homes = {handle: handle._gatherer.threads.spread for handle in (a, b, c)}
    assert [homes[h].homed for h in (a, b, c)] == [True, True, False]
    a.close()  # its home is free now
    a_home = 1 - homes[b].home
    c.publish_batch([b"x"] * 300)
    for _ in range(200):
        message = c.receive(timeout=0)
        if message is not None:
            c.delete(message)
    spread = c._gatherer.threads.spread
    assert spread.homed and spread.home == a_home


# -- exactly once, in order, with real processes --------------------------------------------


@pytest.mark.parametrize("size", [10, 1000])
def test_three_batch_producers_four_consumers_exactly_once_in_order(
    fast_tmp_path: Path, size: int
) -> None:
    """3 producers publishing batches of *size*, 4 consumers, 4 partitions: every
    message is delivered exactly once; each consumer sees each producer's messages of
    one partition in publish order; and the batches did spread over the partitions."""
    path = str(fast_tmp_path / "q")
    PartitionedQueue(path, partitions=4, durable=False)
    count = 3000 if size == 10 else 6000
    records = [fast_tmp_path / f"c{i}.jsonl" for i in range(4)]
    stop = fast_tmp_path / "stop"
    producers = ("p0", "p1", "p2")
    with children() as kids:
        consumers = [kids.start(workers.consume_to, path, str(r), str(stop)) for r in records]
        for record in records:
            wait_until(Path(f"{record}.ready").exists, f"{record.name} to be ready")
        for proc in [kids.start(workers.produce_batches, path, p, count, size) for p in producers]:
            kids.join(proc)

        def lines() -> list[list[list[str]]]:
            return [
                [json.loads(x) for x in r.read_text().splitlines()] if r.exists() else []
                for r in records
            ]

        wait_until(lambda: sum(map(len, lines())) >= 3 * count, "every message", 120)
        stop.touch()
        for proc in consumers:
            kids.join(proc)
    seen = lines()
    times = Counter(body for got in seen for body, _, _ in got)
    expected = {f"{p}:{n}" for p in producers for n in range(count)}
    assert set(times) == expected
    assert all(n == 1 for n in times.values()), "a message was delivered twice"
    directories: defaultdict[str, int] = defaultdict(int)
    for got in seen:
        last: dict[tuple[str, str], int] = {}
        for body, directory, _ in got:
            producer, n = body.split(":")
            key = (producer, directory)
            assert int(n) > last.get(key, -1), f"{body} after {last[key]} in {directory}"
            last[key] = int(n)
            directories[directory] += 1
    assert len(directories) == 4 and max(directories.values()) <= 3 * count // 2
    assert vsqs.Queue(path, durable=False).counts().total == 0
    assert all(os.path.isdir(d) for d in directories)
