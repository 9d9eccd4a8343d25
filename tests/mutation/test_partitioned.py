"""Guarantees of vsqs._sets._partitioned that ``make mutate`` found unguarded
(docs/reliability.rst, "Mutation testing"): each test fails on the mutants of
``PartitionedQueue`` named in its docstring (by method and number)."""

from __future__ import annotations

import io
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import PartitionedQueue
from vsqs._ids import parse_id
from vsqs._sets._spread import group_partition
from vsqs.testing import ManualClock

PARTS = 3


def _named(partition: int, partitions: int = PARTS, prefix: str = "g") -> str:
    """A group (or dedup key) whose messages go to *partition*."""
    return next(
        name
        for n in range(1000)
        if group_partition(name := f"{prefix}{n}", partitions) == partition
    )


def _queue(path: Path, **options: object) -> tuple[PartitionedQueue, ManualClock]:
    clock = ManualClock()
    options.setdefault("durable", False)
    queue = PartitionedQueue(path, partitions=PARTS, clock=clock, **options)  # type: ignore[arg-type]
    return queue, clock


def _where(queue: PartitionedQueue) -> dict[bytes, int | None]:
    """Each ready message's body to the number of the partition holding it (``None``:
    the queue directory itself); browsing claims nothing."""
    paths = [part.path for part in queue.partition_queues]
    return {
        message.body: paths.index(message.queue) if message.queue in paths else None
        for message in queue.browse()
    }


def _received(queue: PartitionedQueue) -> list[vsqs.Message]:
    got = []
    while (message := queue.receive(timeout=0)) is not None:
        got.append(message)
    return got


def _now(clock: ManualClock) -> float:
    return clock.time_us() / 1e6


class _Chunks:
    """A readable (no ``readinto``) that remembers the sizes it was asked for."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)
        self.asked: list[int] = []

    def read(self, size: int = -1) -> bytes:
        self.asked.append(size)
        return self.data.read(size)


def test_each_publish_reaches_its_partition_with_every_option(
    tmp_path: Path,
) -> None:
    """``publish_stream`` and ``publish_file`` put the message in its group's partition
    (else its dedup key's), with its attributes, delay, group and dedup id, reading the
    stream in the chunks asked for; without a delay it is ready at once (mutants:
    ``publish_stream`` 1 to 6, 11 to 22; ``publish_file`` 3 to 6, 12, 15, 17, 18, 20;
    ``publish`` 4 and 6: a dedup id's partition not its own)."""
    queue, clock = _queue(tmp_path / "q")
    for number in range(PARTS):
        group = _named(number)
        stream = _Chunks(b"s" * 10)
        queue.publish_stream(stream, attributes={"k": "s"}, group=group, chunk_size=4)
        assert stream.asked[0] == 4
        body = tmp_path / f"f{number}"
        body.write_bytes(b"file %d" % number)
        queue.publish_file(body, attributes={"k": "f"}, group=group)
    for message in _received(queue):
        assert message.group is not None
        assert message.queue == queue.partition_for(message.group).path
        assert message.attributes == {"k": "s" if message.body == b"s" * 10 else "f"}
        assert queue.delete(message)
    for number in range(PARTS):  # a dedup id's partition, every partition in turn
        key = _named(number, prefix="s")
        first = queue.publish_stream(io.BytesIO(b"s%d" % number), dedup_id=key, delay=30)
        assert queue.publish_stream(io.BytesIO(b"s%d" % number), dedup_id=key, delay=30) == first
        body = tmp_path / f"keyed{number}"
        body.write_bytes(b"f%d" % number)
        queue.publish_file(body, dedup_id=_named(number, prefix="f"), delay=30)
        queue.publish(b"p%d" % number, dedup_id=_named(number, prefix="p"), delay=30)
    assert _where(queue) == {}  # all delayed
    assert queue.counts().delayed == 3 * PARTS
    clock.advance(31)
    assert queue.requeue_expired() == 3 * PARTS
    assert _where(queue) == {
        b"%s%d" % (kind, number): number for kind in (b"s", b"f", b"p") for number in range(PARTS)
    }


def test_a_streamed_or_file_message_takes_one_place_of_the_bound(tmp_path: Path) -> None:
    """A bounded queue with one place left takes a streamed and a file message in it,
    and a full one makes them wait until a message is deleted (mutants: ``publish_stream``
    7 to 10, ``publish_file`` 7 and 10: room for none, or for two)."""
    queue = PartitionedQueue(tmp_path / "q", partitions=PARTS, durable=False, capacity=2)
    body = tmp_path / "body"
    for publish in (
        lambda: queue.publish_stream(io.BytesIO(b"streamed")),
        lambda: (body.write_bytes(b"file"), queue.publish_file(body)),
    ):
        queue.publish(b"first")
        done = threading.Thread(target=publish)
        done.start()
        done.join(10)
        assert not done.is_alive()  # one place left: taken at once
        assert queue.size() == 2
        waiting = threading.Thread(target=publish)
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive()  # full: it waits
        assert queue.size() == 2
        for message in _received(queue)[:1]:
            assert queue.delete(message)
        waiting.join(10)
        assert not waiting.is_alive()
        assert queue.size() == 2
        assert queue.purge() == 2


def test_a_batch_goes_to_its_groups_or_keys_partition_with_every_option(tmp_path: Path) -> None:
    """A batch of a group goes whole to the group's partition, one with a
    ``batch_dedup_id`` to that id's, one with neither to a single partition, and one
    with per-message ``dedup_ids`` message by message to each id's; each with its
    attributes, delay and deduplication (mutants: ``publish_batch`` 19, 20, 22, 23, 24,
    27, 29, 32, 33, 37, 38, 39, 53, 56, 57)."""
    queue, clock = _queue(tmp_path / "q")
    attrs = {"k": "v"}
    for number in range(PARTS):
        group = _named(number)
        keys = [f"{group}-a", f"{group}-b"]
        queue.publish_batch(
            [b"g%d" % number, b"h%d" % number],
            group=group,
            dedup_ids=keys,
            attributes=attrs,
            delay=30,
        )
        queue.publish_batch([b"again"], group=group, dedup_ids=keys[:1], attributes=attrs, delay=30)
        batch_key = _named(number, prefix="b")
        queue.publish_batch([b"b%d" % number], batch_dedup_id=batch_key, attributes=attrs, delay=30)
    keys = [_named(number, prefix="k") for number in range(PARTS)]
    queue.publish_batch(
        [b"k%d" % n for n in range(PARTS)], dedup_ids=keys, attributes=attrs, delay=30
    )
    queue.publish_batch([b"again"] * PARTS, dedup_ids=keys, attributes=attrs, delay=30)
    queue.publish_batch([b"s1", b"s2", b"s3"], attributes=attrs, delay=30)
    assert _where(queue) == {}  # every one delayed
    clock.advance(31)
    assert queue.requeue_expired() == 4 * PARTS + 3
    where = _where(queue)
    assert len(queue) == len(where) == 4 * PARTS + 3
    for number in range(PARTS):
        assert where[b"g%d" % number] == where[b"h%d" % number] == number
        assert where[b"b%d" % number] == where[b"k%d" % number] == number
    assert where[b"s1"] == where[b"s2"] == where[b"s3"]
    assert all(message.attributes == {"k": "v"} for message in queue.browse())


def test_a_bad_batch_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    """Per-message ``dedup_ids`` of the wrong length, or with a ``batch_dedup_id``, are
    refused naming the problem, and nothing is published (mutants: ``publish_batch``
    12, 43, 44, 45)."""
    queue, _ = _queue(tmp_path / "q")
    with pytest.raises(ValueError, match=r"^1 dedup_ids for 2 bodies$"):
        queue.publish_batch([b"a", b"b"], dedup_ids=["x"])
    with pytest.raises(ValueError, match=r"^give dedup_ids or batch_dedup_id, not both$"):
        queue.publish_batch([b"a"], dedup_ids=["x"], batch_dedup_id="y")
    assert len(queue) == 0


def _dead_letters(tmp_path: Path) -> tuple[PartitionedQueue, ManualClock]:
    """A partitioned queue with two messages in each partition, oldest in partition 0."""
    queue, clock = _queue(tmp_path / "dlq")
    for number in range(PARTS):
        for copy in range(2):
            queue.publish(b"%d-%d" % (number, copy), group=_named(number))
            clock.advance(1)
    return queue, clock


def test_redrive_to_a_path_fills_the_partitions_there_up_to_the_limit(tmp_path: Path) -> None:
    """A redrive to the path of a partitioned queue moves the messages into its
    partitions, at most *limit* in all over every partition in turn, and returns how
    many (mutants: ``redrive`` 2, 3, 5, 6, 9, 10, 11, 16, 18, 20, 24, 25, 28 to 31)."""
    source, _ = _dead_letters(tmp_path)
    target = PartitionedQueue(tmp_path / "t", partitions=2, durable=False)
    assert source.redrive(to=str(target.path), limit=3) == 3
    assert len(source) == 3 and len(target) == 3
    assert source.redrive(to=target.path, limit=0) == 0
    assert source.redrive(to=target.path, limit=2) == 2
    assert source.redrive(to=target.path) == 1
    moved = _received(target)
    assert sorted(message.body for message in moved) == sorted(
        b"%d-%d" % (number, copy) for number in range(PARTS) for copy in range(2)
    )
    partitions = {part.path for part in target.partition_queues}
    assert all(message.queue in partitions for message in moved)


def test_redrive_opens_the_target_with_the_sources_durability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redrive from a queue that is not durable to a path opens the target the same:
    no ``fsync`` (mutants: ``redrive`` 7 and 12, the target opened durable)."""
    source, _ = _dead_letters(tmp_path)
    PartitionedQueue(tmp_path / "t", partitions=2, durable=False).close()
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert source.redrive(to=tmp_path / "t") == 2 * PARTS
    assert synced == []


def test_redrive_dates_a_taken_id_by_the_sources_clock(tmp_path: Path) -> None:
    """A dead letter whose id is taken in the target's partition gets a new id there,
    dated by the clock the source was opened with, as every message the handle makes
    (mutants: ``redrive`` 8 and 13, the target opened with the system clock)."""
    source, clock = _queue(tmp_path / "dlq")
    group = _named(1, partitions=2)
    message_id = source.publish(b"moved", group=group)
    target = PartitionedQueue(tmp_path / "t", partitions=2, durable=False)
    Path(target.partition_for(group).path, message_id).write_bytes(b"there before")
    assert source.redrive(to=target.path) == 1
    moved = {message.body: message.id for message in target.browse()}
    assert moved[b"there before"] == message_id != moved[b"moved"]
    made_us = parse_id(moved[b"moved"])
    assert made_us is not None and abs(made_us - clock.time_us()) < 1_000_000


def test_browse_peek_and_the_oldest_key_span_every_partition(tmp_path: Path) -> None:
    """``browse`` merges every partition oldest first, ``peek`` is the oldest and
    ``peek_oldest_key`` its time; an empty queue has neither (mutants: ``browse`` 2, 4
    to 7; ``peek`` 1 to 3; ``peek_oldest_key`` 4)."""
    queue, clock = _queue(tmp_path / "q")
    assert queue.peek() is None
    assert queue.peek_oldest_key() is None
    for number in (2, 0, 1, 2):
        queue.publish(b"%d" % number, group=_named(number))
        clock.advance(1)
    assert [message.body for message in queue.browse()] == [b"2", b"0", b"1", b"2"]
    oldest = queue.peek()
    assert oldest is not None and oldest.body == b"2"
    assert queue.peek_oldest_key() == vsqs.PlainQueue(oldest.queue).peek_oldest_key()


def test_a_message_of_the_queue_directory_itself_is_leased_extended_and_told(
    tmp_path: Path,
) -> None:
    """A message a vsqs 0.3 producer left in the queue directory can be leased, have its
    visibility changed and its history read through the partitioned handle (mutants:
    ``lease`` 6, ``change_visibility`` 6, ``history`` 3: that directory not known)."""
    queue, clock = _queue(tmp_path / "q")
    (Path(queue.path) / str(clock.time_us() - 1_000_000)).write_bytes(b"from 0.3")
    message = queue.receive(timeout=0)
    assert message is not None and message.queue == queue.path
    assert queue.history(message).receive_count == 0
    extended = queue.change_visibility(message, 100)
    with queue.lease(extended) as lease:
        assert lease.message.body == b"from 0.3"
    assert len(queue) == 0


def test_a_lease_keeps_its_maximum_and_visibility(tmp_path: Path) -> None:
    """``lease`` and ``consume_leases`` pass on ``max_duration`` (default an hour) and
    ``visibility_timeout`` (mutants:
    ``lease`` 1, 11, 13, 14; ``consume_leases`` 1 to 12)."""
    queue, clock = _queue(tmp_path / "q", visibility_timeout=30)
    for body in (b"a", b"b", b"c"):
        queue.publish(body)
    now = _now(clock)
    message = queue.receive(timeout=0)
    assert message is not None
    lease = queue.lease(message, max_duration=100, visibility_timeout=9)
    assert lease.deadline == now + 100
    # renewed a third of its visibility timeout before the message's expiry
    assert lease.next_renewal_us == clock.time_us() + 30_000_000 - 3_000_000
    assert queue.lease(message).deadline == now + 3600
    leases = queue.consume_leases(visibility_timeout=9, timeout=0, max_duration=100)
    got = list(leases)
    assert sorted(each.message.body for each in got) == [b"b", b"c"]
    for each in got:
        assert each.deadline == now + 100
        assert each.message.expires_at == now + 9
        assert each.next_renewal_us == round((now + 9 - 3) * 1e6)  # a third of 9 s before
    assert list(queue.consume_leases(timeout=0)) == []  # all held
    for each in got:
        each.release()
    leases = queue.consume_leases(timeout=0)  # kept: a dropped generator ends its lease
    default = next(leases)
    assert default.deadline == now + 3600
    assert default.message.expires_at == now + 30
    queue.close()  # no renewal thread outlives the test (tests/test_leases.py counts them)
    assert not [t for t in threading.enumerate() if t.name.startswith("vsqs-lease-renewer")]


def test_what_a_handle_says_of_itself(tmp_path: Path) -> None:
    """A partitioned handle is true, says its options and its layout, keeps them when
    pickled, routes a dedup key and a moved message's group as it publishes them, and
    counts a bound against the whole queue (mutants: ``__bool__`` 1, ``__init__`` 17,
    19, 20, 22 to 25, 28; ``__reduce__`` 3; ``partition_for`` 2; ``landing`` 1)."""
    (tmp_path / "dead").mkdir()
    queue, _ = _queue(
        tmp_path / "q", capacity=5, precision="ms", retention=600.0, dedup_window=60.0,
        max_receives=4, dead_letter=tmp_path / "dead", visibility_timeout=7.0,
    )  # fmt: skip
    assert bool(queue) is True
    assert queue.layout.path == queue.path
    assert queue.durable is False
    assert (queue.precision, queue.retention, queue.dedup_window) == ("ms", 600.0, 60.0)
    assert queue.max_receives == 4
    assert queue.dead_letter is not None and queue.dead_letter.path == str(tmp_path / "dead")
    pickled = PartitionedQueue(tmp_path / "p", partitions=2, durable=False, visibility_timeout=7)
    copy = pickle.loads(pickle.dumps(pickled))  # noqa: S301 - our own bytes, just made
    assert (copy.visibility_timeout, copy.durable) == (7.0, False)
    for number in range(PARTS):
        key = _named(number, prefix="k")
        group = _named(number)
        assert queue.partition_for(key=key) is queue.partition_queues[number]
        landed, bound = queue.landing(group)
        assert landed is queue.partition_queues[number]
        assert bound is not None


def test_the_home_locks_are_named_by_role_on_disk(tmp_path: Path) -> None:
    """A publisher's sticky run and a consumer's home are ``flock`` s on
    ``.vsqs/sticky-<i>.lock`` and ``.vsqs/home-<i>.lock``: the names every handle of
    every process and host contends on (mutants: ``__init__`` 32, 37, 38, 58, 63, 64)."""
    queue, _ = _queue(tmp_path / "q")
    queue.publish(b"x")
    assert queue.receive(timeout=0) is not None
    locks = sorted(name for name in os.listdir(Path(queue.path, ".vsqs")) if name.endswith(".lock"))
    roles = {name.rpartition("-")[0] for name in locks if "-" in name}
    assert {"home", "sticky"} <= roles, locks
    assert roles <= {"home", "sticky", "capacity", "settings", "fifo"}, locks


def test_the_receiving_defaults_and_options_of_a_partitioned_queue(tmp_path: Path) -> None:
    """``try_receive`` claims one by default and passes its visibility timeout,
    ``consume`` passes its own, ``receive_batch`` does not wait by default, ``size``
    counts held messages, and ``next_look`` ends at the deadline (mutants:
    ``try_receive`` 1 to 5, ``consume`` 2, ``receive_batch`` 1, ``size`` 2,
    ``next_look`` 1)."""
    queue, clock = _queue(tmp_path / "q", visibility_timeout=10)
    for body in (b"a", b"b", b"c", b"d"):
        queue.publish(body)
    assert len(queue.try_receive()) == 1
    assert len(queue.try_receive(2, visibility_timeout=100)) == 2
    consumed = next(queue.consume(visibility_timeout=100, timeout=0))
    assert consumed.expires_at == _now(clock) + 100
    assert queue.size() == 4  # all held
    clock.advance(50)
    assert queue.requeue_expired() == 1  # only try_receive()'s, of 10 s
    fresh = PartitionedQueue(queue.path, clock=clock)  # knows of no lease
    assert fresh.next_look(clock.monotonic() + 5) == pytest.approx(5)
    empty = PartitionedQueue(tmp_path / "empty", partitions=2, durable=False)
    started = time.monotonic()
    assert empty.receive_batch(1) == []
    assert time.monotonic() - started < 0.9


def test_housekeeping_of_a_partitioned_queue_uses_the_plain_defaults(tmp_path: Path) -> None:
    """``clean()`` removes a partition's ``.new`` left an hour and a half second ago;
    ``check()`` reports a ``.new`` unless told ``allow_new``; ``configure(fifo=True)``
    is stored in every partition; the count is refused (mutants: ``clean`` 1,
    ``check`` 1 and 2, ``configure`` 13)."""
    queue, clock = _queue(tmp_path / "q")
    part = queue.partition_queues[1]
    debris = Path(part.path, f"{clock.time_us() - 3_600_500_000}.new")
    debris.write_bytes(b"died")
    os.utime(debris, (_now(clock) - 3600.5, _now(clock) - 3600.5))
    assert queue.check(allow_new=True) == []
    assert len(queue.check()) == 1
    assert queue.clean() == 1
    assert not debris.exists()
    queue.configure(fifo=True)
    assert all(vsqs.PlainQueue(p.path).fifo for p in queue.partition_queues)
    with pytest.raises(ValueError, match="partition count is fixed"):
        queue.configure(partitions=4)
