"""Receive counts, dead letters, redrive, history, retention and old directories."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs.testing import ManualClock, assert_consistent

from ._lifecycle_workers import forkserver, poison_consumer
from .conftest import names

T0 = 1_700_000_000.0


pytestmark = pytest.mark.usefixtures("fresh_ids")


def _receive(queue: vsqs.PlainQueue) -> vsqs.Message:
    message = queue.receive(timeout=0)
    assert message is not None
    return message


@pytest.mark.parametrize("with_attributes", [True, False])
def test_poison_reaches_dlq_after_exactly_n_receives_under_concurrent_consumers(
    tmp_path: Path, with_attributes: bool
) -> None:
    """Consumers in 3 processes never delete: each message is delivered with counts
    1..N exactly once each, then sits in the DLQ exactly once, with count N. Without
    attributes the queue starts with no metadata at all (consumers' views are older
    than the first metadata)."""
    qdir, dlq, stop = tmp_path / "q", tmp_path / "dlq", tmp_path / "stop"
    max_receives, poison = 4, 5
    source = vsqs.PlainQueue(qdir)
    ids = [
        source.publish(
            f"poison {n}".encode(), attributes={"n": str(n)} if with_attributes else None
        )
        for n in range(poison)
    ]
    ctx = forkserver()
    logs = [tmp_path / f"log{n}" for n in range(3)]
    procs = [
        ctx.Process(
            target=poison_consumer, args=(str(qdir), str(dlq), max_receives, str(stop), str(log))
        )
        for log in logs
    ]
    for proc in procs:
        proc.start()
    dead = vsqs.PlainQueue(dlq)
    deadline = time.monotonic() + 120  # generous: not a speed check
    while dead.size() < poison and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.touch()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    seen: dict[str, list[int]] = defaultdict(list)
    for log in logs:
        for line in log.read_text().splitlines():
            message_id, count = line.split()
            seen[message_id].append(int(count))
    assert {k: sorted(v) for k, v in seen.items()} == {i: [1, 2, 3, 4] for i in ids}
    assert source.size() == 0
    moved = vsqs.testing.drain(dead, delete=False)
    assert sorted(m.body for m in moved) == sorted(f"poison {n}".encode() for n in range(poison))
    for message in moved:
        expected = {"n": message.body.decode().split()[1]} if with_attributes else {}
        assert message.attributes == expected
        assert dead.history(message).receive_count == max_receives
    assert_consistent(source)


def test_dlq_keeps_body_attributes_and_history(tmp_path: Path, clock: ManualClock) -> None:
    """A dead letter keeps its body, attributes, and history: first sent, last received,
    count, source queue and id, when and why it was moved."""
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=clock)
    q = vsqs.PlainQueue(
        tmp_path / "q", visibility_timeout=10, dead_letter=dlq, max_receives=2, clock=clock
    )
    message_id = q.publish(b"body", attributes={"kind": "poison"})
    assert _receive(q).receive_count == 1
    clock.advance(11)
    second = _receive(q)
    assert second.receive_count == 2
    assert q.history(second).receive_count == 1  # one completed receive so far
    clock.advance(11)
    assert q.receive(timeout=0) is None  # the requeue dead-lettered it instead
    assert names(tmp_path / "q") == []
    dead = _receive(dlq)
    assert (dead.body, dict(dead.attributes)) == (b"body", {"kind": "poison"})
    assert dead.receive_count == 1  # counting starts again in the dead-letter queue
    history = dlq.history(dead)
    assert history == vsqs.History(
        receive_count=2,
        first_sent=T0,
        last_received=T0 + 11,
        source=q.path,
        source_id=message_id,
        dead_lettered=T0 + 22,
        reason="max_receives",
    )
    assert dlq.history(dead.id) == history  # by id too
    assert_consistent(q)


def _dead_lettered(
    tmp_path: Path, clock: ManualClock, count: int
) -> tuple[vsqs.PlainQueue, list[str]]:
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=clock)
    q = vsqs.PlainQueue(
        tmp_path / "q", visibility_timeout=1, dead_letter=dlq, max_receives=1, clock=clock
    )
    ids = [q.publish(f"m{n}".encode(), attributes={"n": str(n)}) for n in range(count)]
    for _ in range(count):
        _receive(q)
    clock.advance(2)
    assert q.receive(timeout=0) is None
    assert dlq.size() == count
    return q, ids


def test_redrive_all_back_to_the_source(tmp_path: Path, clock: ManualClock) -> None:
    """``redrive()`` moves every dead letter to the queue it came from, attributes kept,
    receive count reset, first-sent time kept."""
    q, ids = _dead_lettered(tmp_path, clock, 3)
    assert q.dead_letter is not None
    assert q.dead_letter.redrive() == 3
    assert q.dead_letter.size() == 0
    back = vsqs.testing.drain(q, delete=False)
    assert [m.id for m in back] == ids
    assert [dict(m.attributes) for m in back] == [{"n": "0"}, {"n": "1"}, {"n": "2"}]
    assert all(m.receive_count == 1 for m in back)
    assert q.history(back[0]).first_sent == T0
    assert_consistent(q.dead_letter)


def test_redrive_up_to_a_count_and_to_another_queue(tmp_path: Path, clock: ManualClock) -> None:
    """``redrive(limit=2)`` moves the two oldest; ``redrive(to=...)`` moves elsewhere."""
    q, ids = _dead_lettered(tmp_path, clock, 4)
    dlq = q.dead_letter
    assert dlq is not None
    assert dlq.redrive(limit=2) == 2
    assert [m.id for m in vsqs.testing.drain(q)] == ids[:2]
    other = tmp_path / "other"
    assert dlq.redrive(to=other) == 2
    assert sorted(os.listdir(other)) == sorted([*ids[2:], ".vsqs"])
    assert dlq.redrive() == 0
    with pytest.raises(ValueError, match="limit"):
        dlq.redrive(limit=-1)


def test_redrive_skips_messages_without_a_source(tmp_path: Path, clock: ManualClock) -> None:
    """A message published straight into a DLQ has no source: it stays."""
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=clock)
    message_id = dlq.publish(b"orphan")
    assert dlq.redrive() == 0
    assert names(tmp_path / "dlq") == [message_id]


def test_retention_drops_only_older_messages(qdir: Path, clock: ManualClock) -> None:
    """Retention by the publisher's clock: older than *retention* is dropped, a message
    exactly *retention* old or younger is kept."""
    q = vsqs.PlainQueue(qdir, retention=60, clock=clock)
    old = q.publish(b"old")
    clock.advance(40)
    edge = q.publish(b"edge")
    clock.advance(20)
    young = q.publish(b"young")
    clock.advance(0.5)  # old: 60.5 s, edge: 20.5 s
    got = _receive(q)
    assert got.id == edge
    assert old not in names(qdir)
    clock.advance(39.5)  # edge: exactly 60 s old
    q.change_visibility(got, 0)
    assert [m.id for m in vsqs.testing.drain(q)] == [edge, young]


def test_retention_dead_letters_when_configured(tmp_path: Path, clock: ManualClock) -> None:
    """With a DLQ, expired messages are moved there (reason ``retention``), and
    ``clean()`` applies retention too, without a consumer."""
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=clock)
    q = vsqs.PlainQueue(tmp_path / "q", retention=10, dead_letter=dlq, clock=clock)
    stale = q.publish(b"stale", attributes={"a": "b"})
    clock.advance(11)
    fresh = q.publish(b"fresh")
    assert q.clean() == 1
    assert names(tmp_path / "q") == [fresh]
    dead = _receive(dlq)
    assert dead.attributes == {"a": "b"}
    assert dlq.history(dead).reason == "retention"
    assert dlq.history(dead).source_id == stale


def test_plain_message_is_the_seed_file(qdir: Path, clock: ManualClock) -> None:
    """No attributes, no dedup id: exactly the seed's file, and no metadata at all."""
    q = vsqs.PlainQueue(qdir, clock=clock)
    message_id = q.publish(b"plain")
    assert names(qdir) == [message_id]
    assert (qdir / message_id).read_bytes() == b"plain"
    assert _receive(q).attributes == {}
    assert not (qdir / ".vsqs" / "meta").exists()  # (stats may live in .vsqs/stats)


def test_vsqs_03_directory_counts_from_the_first_receive_we_see(
    qdir: Path, clock: ManualClock
) -> None:
    """A directory written by vsqs 0.3 (no ``.vsqs``): plain files are received with
    count 1, then 2 after a lease ends; an expired 0.3 lease counts when we requeue it."""
    qdir.mkdir()
    plain = str(round(T0 * 1e6))
    leased = str(round(T0 * 1e6) + 1)
    (qdir / plain).write_bytes(b"plain")
    (qdir / f"{leased}.{round((T0 - 5) * 1e6)}.25").write_bytes(b"leased by 0.3")
    q = vsqs.PlainQueue(qdir, visibility_timeout=5, clock=clock)
    first = _receive(q)
    assert (first.id, first.receive_count) == (plain, 1)
    second = _receive(q)  # the expired 0.3 lease, requeued and counted by us
    assert (second.id, second.receive_count) == (leased, 2)
    clock.advance(6)
    again = _receive(q)
    assert (again.id, again.receive_count) == (plain, 2)
    assert _receive(q).receive_count == 3


def test_release_counts_as_a_receive(q: vsqs.PlainQueue, clock: ManualClock) -> None:
    """``change_visibility(m, 0)`` ends the receive: the next delivery counts one more."""
    q.publish(b"m")
    first = _receive(q)
    q.change_visibility(first, 0)
    clock.advance(1)  # the next lease gets another name
    assert _receive(q).receive_count == 2
    with pytest.raises(vsqs.LeaseLost):
        q.change_visibility(first, 0)


def test_requeuer_crash_after_its_hold_keeps_the_count_exact(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """A requeuer that died after taking its hold (``<id>.<hold>``) but before counting:
    the next requeue counts the lost lease once; one that died after counting (the
    metadata tagged with the hold) is not counted again."""
    message_id = q.publish(b"m")
    lease = _receive(q).receipt
    hold = f"{message_id}.{round((T0 + 100) * 1e6)}.0"
    os.rename(qdir / lease, qdir / hold)  # died right after the hold rename
    clock.advance(101)
    assert _receive(q).receive_count == 2
    clock.advance(31)
    assert q.requeue_expired() == 1  # counted, ready: 2 completed receives
    assert q.history(message_id).receive_count == 2
    second_hold = f"{message_id}.{round((T0 + 300) * 1e6)}.0"
    os.rename(qdir / message_id, qdir / second_hold)
    meta = q._meta.read(message_id)
    assert meta is not None
    meta.lease = second_hold.partition(".")[2]  # died after counting, before readying
    q._meta.write(message_id, meta, durable=False)
    clock.set(T0 + 400)
    assert _receive(q).receive_count == 3  # not 4


def test_history_of_a_fresh_message(q: vsqs.PlainQueue) -> None:
    """A message never requeued has count 0 and only its first-sent time."""
    message_id = q.publish(b"m")
    assert q.history(message_id) == vsqs.History(0, T0, None)
    with pytest.raises(vsqs.InvalidId):
        q.history("not-an-id")


def test_attributes_round_trip(q: vsqs.PlainQueue, clock: ManualClock) -> None:
    """Attributes come back on receive, browse and after a requeue; unicode is kept."""
    attributes = {"content-type": "application/json", "ünï": "cödé", "empty": ""}
    q.publish(b"m", attributes=attributes)
    assert dict(next(iter(q.browse())).attributes) == attributes
    first = _receive(q)
    assert dict(first.attributes) == attributes
    clock.advance(31)
    assert dict(_receive(q).attributes) == attributes


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({f"k{n}": "v" for n in range(11)}, "11 attributes, at most 10"),
        ({"big": "x" * 8200}, "at most 8192 allowed"),
        ({"k": 1}, "must be str"),
        ({2: "v"}, "must be str"),
        ({"": "v"}, "must be 1 to 256 chars"),
        ({"k" * 257: "v"}, "must be 1 to 256 chars"),
        ({"k": "\ud800"}, "not valid Unicode"),
        ([("k", "v")], "expected a mapping"),
    ],
)
def test_attribute_limits(q: vsqs.PlainQueue, qdir: Path, attributes: Any, reason: str) -> None:
    """Too many, too big, not str: a clear InvalidAttributes (a ValueError), nothing
    published."""
    with pytest.raises(vsqs.InvalidAttributes, match=reason) as info:
        q.publish(b"m", attributes=attributes)
    assert isinstance(info.value, ValueError)
    assert names(qdir) == []


def test_attribute_limits_accept_the_maximum(q: vsqs.PlainQueue) -> None:
    """Exactly 10 attributes of 8192 bytes together are accepted."""
    attributes = {f"k{n}": "v" * 817 for n in range(9)} | {"k9": "v" * 817}
    assert sum(len(k) + len(v) for k, v in attributes.items()) == 8190
    q.publish(b"m", attributes=attributes)
    assert dict(_receive(q).attributes) == attributes


def test_a_release_that_ends_the_last_receive_dead_letters_not_lease_lost(tmp_path: Path) -> None:
    """Releasing (visibility 0) the max_receives-th receive moves the message to the DLQ;
    that is not a lost lease."""
    dlq = vsqs.PlainQueue(tmp_path / "dlq")
    q = vsqs.PlainQueue(tmp_path / "q", dead_letter=dlq, max_receives=1)
    message_id = q.publish(b"poison")
    message = q.receive(timeout=0)
    assert message is not None
    released = q.change_visibility(message, 0)
    assert released.queue == dlq.path
    assert q.counts().total == 0
    dead = dlq.receive(timeout=0)
    assert dead is not None and dead.body == b"poison" and dead.id == message_id
