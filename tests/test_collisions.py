"""Two publishers (two hosts, two clocks) that draw the same id in the same tick, and
other same-name collisions: nothing is overwritten, lost, counted twice or dead-lettered
early. Each handle on its own ManualClock has its own id source, so two handles at the
same time draw the same ids, exactly as two hosts whose clocks agree do.
"""

from __future__ import annotations

import os
from pathlib import Path

import vsqs
from vsqs.testing import ManualClock

START = 1_700_000_000.0


def two_hosts(
    qdir: Path, **options: object
) -> tuple[vsqs.PlainQueue, vsqs.PlainQueue, ManualClock]:
    """Two handles on one queue with separate id sources; the first one's clock."""
    clock_a, clock_b = ManualClock(START), ManualClock(START)
    a = vsqs.PlainQueue(qdir, clock=clock_a, durable=False, **options)  # type: ignore[arg-type]
    b = vsqs.PlainQueue(qdir, clock=clock_b, durable=False, **options)  # type: ignore[arg-type]
    return a, b, clock_a


def drain(queue: vsqs.PlainQueue) -> list[vsqs.Message]:
    got = []
    while (message := queue.receive(timeout=0)) is not None:
        got.append(message)
        queue.delete(message)
    return got


def test_same_id_with_attributes_gets_a_fresh_id(qdir: Path) -> None:
    a, b, _ = two_hosts(qdir)
    first = a.publish(b"a", attributes={"who": "a"})
    second = b.publish(b"b", attributes={"who": "b"})
    assert first != second  # b's id had metadata already: it drew again
    got = {m.body: m.attributes for m in drain(a)}
    assert got == {b"a": {"who": "a"}, b"b": {"who": "b"}}


def test_same_id_with_dedup_id_is_repointed(qdir: Path) -> None:
    a, b, _ = two_hosts(qdir)
    first = a.publish(b"a")
    second = b.publish(b"b", dedup_id="order-1")
    assert second != first
    # The marker follows the id the message finally got: a retry is recognised.
    assert b.publish(b"b again", dedup_id="order-1") == second
    assert sorted(m.body for m in drain(a)) == [b"a", b"b"]


def test_two_delayed_publishes_of_one_id_keep_their_delay(qdir: Path) -> None:
    """The loser of a same-id delayed publish must not remove the winner's delay marker:
    the winner's message would come due as an expired lease (counted as a receive, and
    dead-lettered at once with max_receives=1) instead of as a delayed publish."""
    dlq = qdir.parent / "dlq"
    a, b, clock = two_hosts(qdir, dead_letter=dlq, max_receives=1)
    a.publish(b"a", delay=10)
    b.publish(b"b", delay=10)
    assert a.receive(timeout=0) is None
    clock.advance(11)
    got = drain(a)
    assert sorted(m.body for m in got) == [b"a", b"b"]
    assert [m.receive_count for m in got] == [1, 1]
    assert vsqs.PlainQueue(dlq).size() == 0


def test_claim_into_a_taken_lease_name_overwrites_nothing(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False, visibility_timeout=30)
    message_id = q.publish(b"mine")
    # A peer whose clock agrees claimed a same-id message into the very same expiry.
    planted = qdir / f"{message_id}.{clock.time_us() + 30_000_000}"
    planted.write_bytes(b"theirs")
    assert q.receive(timeout=0) is None  # the claim found its name taken: no overwrite
    assert planted.read_bytes() == b"theirs"
    assert (qdir / message_id).read_bytes() == b"mine"
    clock.advance(1)  # another expiry: the claim goes through
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"mine"


def test_extending_into_a_taken_lease_name_moves_one_microsecond(
    qdir: Path, clock: ManualClock
) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False, visibility_timeout=30)
    q.publish(b"mine")
    message = q.receive(timeout=0)
    assert message is not None
    target = clock.time_us() + 60_000_000
    delivery = message.receipt.split(".")[1]  # an extended lease carries its delivery
    planted = qdir / f"{message.id}.{target}.{delivery}"
    planted.write_bytes(b"theirs")
    extended = q.change_visibility(message, 60)
    assert extended.receipt == f"{message.id}.{target + 1}.{delivery}"
    assert planted.read_bytes() == b"theirs"
    assert q.delete(extended)
    assert planted.read_bytes() == b"theirs"


def test_requeue_hold_name_taken_moves_on(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False, visibility_timeout=1)
    q.publish(b"mine")
    message = q.receive(timeout=0)
    assert message is not None
    clock.advance(2)
    # A skewed peer holds a same-id message under the hold name this requeue would take.
    hold_us = clock.time_us() + 30_000_000  # the requeue hold: max(vt, 30 s)
    planted = qdir / f"{message.id}.{hold_us}.0"
    planted.write_bytes(b"theirs")
    again = q.receive(timeout=0)
    assert again is not None and again.body == b"mine" and again.receive_count == 2
    assert planted.read_bytes() == b"theirs"


def test_link_then_unlink_cut_short_is_one_message(qdir: Path, clock: ManualClock) -> None:
    """A requeue by link+unlink (filesystems without a no-replace rename) that died between
    the two calls leaves one inode under both names: it is delivered once, not twice."""
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False, visibility_timeout=1)
    q.publish(b"once")
    message = q.receive(timeout=0)
    assert message is not None
    os.link(qdir / message.receipt, qdir / message.id)  # the link happened; the unlink not
    clock.advance(2)
    got = drain(q)
    assert [m.body for m in got] == [b"once"]
    assert sorted(p.name for p in qdir.iterdir() if p.name != ".vsqs") == []


def test_dead_letter_into_a_taken_id(tmp_path: Path, clock: ManualClock) -> None:
    dlq = vsqs.PlainQueue(tmp_path / "dlq", clock=ManualClock(START), durable=False)
    q = vsqs.PlainQueue(
        tmp_path / "q", clock=clock, durable=False, visibility_timeout=1, dead_letter=dlq,
        max_receives=1,
    )  # fmt: skip
    message_id = q.publish(b"poison", attributes={"k": "v"})
    taken = dlq.publish(b"already there")  # the dead-letter queue's own clock: same id
    assert taken == message_id
    assert q.receive(timeout=0) is not None
    clock.advance(2)
    assert q.receive(timeout=0) is None
    bodies = {m.body: m for m in drain(dlq)}
    assert set(bodies) == {b"poison", b"already there"}
    assert bodies[b"poison"].attributes == {"k": "v"}


def test_receipt_caches_stay_bounded_and_correct(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False, visibility_timeout=60)
    q.publish_batch([b"x"] * 4200)
    held = q.receive_batch(4200)
    assert len(held) == 4200
    # Extending every lease supersedes 4,200 receipts: the oldest entries are dropped.
    extended = [q.change_visibility(m, 120) for m in held]
    assert sum(q.delete(m) for m in extended) == 4200
    assert q.size() == 0


def test_browse_skips_what_was_taken_meanwhile(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False)
    first, second, third = q.publish_batch([b"1", b"2", b"3"])
    seen = q.browse()
    assert next(seen).id == first
    q.delete(second)
    assert [m.id for m in seen] == [third]
    peeked = q.peek()
    assert peeked is not None and peeked.id == first and peeked.receive_count == 0


def test_a_delayed_publish_into_a_taken_name_draws_again(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False)
    # A peer's message held until exactly when ours would come due, under our next id.
    planted = qdir / f"{int(START * 1e6)}.{int((START + 10) * 1e6)}"
    planted.write_bytes(b"theirs")
    message_id = q.publish(b"mine", delay=10, attributes={"k": "v"})
    assert message_id != planted.name.partition(".")[0]
    assert planted.read_bytes() == b"theirs"
    clock.advance(11)
    got = {m.body: m for m in drain(q)}
    assert set(got) == {b"mine", b"theirs"}  # theirs came back when its lease ended
    assert got[b"mine"].attributes == {"k": "v"} and got[b"mine"].receive_count == 1


def test_delayed_publishes_with_attributes_of_one_id_from_two_hosts(qdir: Path) -> None:
    a, b, clock = two_hosts(qdir)
    a.publish(b"a", delay=5)
    b.publish(b"b", delay=5, attributes={"from": "b"})  # same id: marked already; draws again
    clock.advance(6)
    got = {m.body: m for m in drain(a)}
    assert set(got) == {b"a", b"b"}
    assert got[b"b"].attributes == {"from": "b"} and got[b"a"].attributes == {}
