"""``fifo=True`` keeps its listing between claim steps (issue 36): a receive costs
O(batch), not O(backlog), and the listing it claims from, however stale, never delivers
a group out of order or twice in flight, nor keeps a freed group waiting for long.

Other consumers are real processes (tests/_fifo_workers.py); listings are counted by
wrapping ``vsqs._scan.scan`` in this process (our code observed, not replaced).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import vsqs
from vsqs._groups import Held
from vsqs.testing import ManualClock

from . import _fifo_workers as workers
from .fixtures_core import children, count_listings, wait_until
from .procs import load


def test_own_delete_reopens_the_group_without_a_listing(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One group of 30: receive, delete, receive... delivers all in order from one
    listing: the handle's own delete frees the group in the listing it keeps."""
    queue = vsqs.Queue(
        fast_tmp_path / "q", fifo=True, partitions=1, durable=False, refresh_interval=60
    )
    queue.publish_batch([f"m{n}".encode() for n in range(30)], group="g")
    listings = count_listings(monkeypatch)
    bodies = []
    for _ in range(30):
        message = queue.receive(timeout=0)
        assert message is not None
        bodies.append(message.body.decode())
        assert queue.delete(message)
    assert bodies == [f"m{n}" for n in range(30)]
    assert len(listings) == 1
    assert queue.receive(timeout=0) is None


def test_a_group_freed_by_another_process_is_delivered_within_the_refresh(
    fast_tmp_path: Path,
) -> None:
    """Another process holds ``a:0`` then deletes it while this handle is busy with
    group ``b``: ``a:1`` comes within ``refresh_interval`` (the listing it kept showed
    ``a`` held), long before ``b`` is used up; when nothing else is admissible, at once."""
    path = fast_tmp_path / "q"
    queue = vsqs.Queue(path, fifo=True, partitions=1, durable=False, refresh_interval=0.3)
    queue.publish_batch([b"a:0", b"a:1"], group="a")
    queue.publish_batch([f"b:{n}".encode() for n in range(400)], group="b")
    report, go = fast_tmp_path / "holder.json", fast_tmp_path / "go"
    with children() as kids:
        kids.start(workers.hold_then_act, str(path), str(report), ["a"], "delete", str(go))
        wait_until(report.exists, "the holder")
        first = queue.receive(timeout=0)
        assert first is not None
        assert first.body == b"b:0"  # a is held elsewhere
        assert queue.delete(first)
        go.touch()
        wait_until(Path(f"{report}.done").exists, "the holder's delete")
        freed = time.monotonic()
        b_after = 0
        while True:
            message = queue.receive(timeout=0)
            assert message is not None
            assert queue.delete(message)
            if message.body == b"a:1":
                break
            b_after += 1
            time.sleep(0.005)  # b outlasts the refresh interval many times over
        waited = time.monotonic() - freed
        assert waited < 0.3 + 1.0, waited
        assert b_after < 300, b_after


def test_a_group_freed_elsewhere_comes_at_once_when_nothing_else_is_ready(
    fast_tmp_path: Path,
) -> None:
    """Nothing admissible in the kept listing is a reason to list: ``a:1`` comes on the
    first receive after another process deleted ``a:0``, whatever ``refresh_interval``."""
    path = fast_tmp_path / "q"
    queue = vsqs.Queue(path, fifo=True, partitions=1, durable=False, refresh_interval=60)
    queue.publish_batch([b"a:0", b"a:1"], group="a")
    report, go = fast_tmp_path / "holder.json", fast_tmp_path / "go"
    with children() as kids:
        kids.start(workers.hold_then_act, str(path), str(report), ["a"], "delete", str(go))
        wait_until(report.exists, "the holder")
        assert queue.receive(timeout=0) is None
        go.touch()
        wait_until(Path(f"{report}.done").exists, "the holder's delete")
        message = queue.receive(timeout=0)
        assert message is not None
        assert message.body == b"a:1"


def test_an_ended_lease_of_another_process_is_returned_only_through_a_listing(
    fast_tmp_path: Path,
) -> None:
    """Another process holds ``a:0`` and ``b:0`` for 1.5 s, then extends ``a:0``. After
    the 1.5 s this handle (which listed before the extension, and keeps busy with
    group ``c``) returns ``b:0`` at once, as a fresh listing shows it ended, but never
    delivers ``a:*``: the end it remembered for ``a:0`` is no longer true."""
    path = fast_tmp_path / "q"
    queue = vsqs.Queue(path, fifo=True, partitions=1, durable=False, refresh_interval=60)
    for group in "ab":
        queue.publish_batch([f"{group}:0".encode(), f"{group}:1".encode()], group=group)
    queue.publish_batch([f"c:{n}".encode() for n in range(5000)], group="c")
    report, go = fast_tmp_path / "holder.json", fast_tmp_path / "go"
    with children() as kids:
        kids.start(workers.hold_then_act, str(path), str(report), ["a", "b"], "extend", str(go))
        wait_until(report.exists, "the holder")
        held_at = time.monotonic()
        first = queue.receive(timeout=0)  # lists: a:0 and b:0 held until ~1.5 s
        assert first is not None
        assert first.body == b"c:0"
        assert queue.delete(first)
        go.touch()
        wait_until(Path(f"{report}.done").exists, "the holder's extension")
        got_b_at = None
        while time.monotonic() - held_at < 3.5:
            message = queue.receive(timeout=0)
            if message is None:
                time.sleep(0.001)
                continue
            assert not message.body.startswith(b"a:"), message.body
            assert queue.delete(message)
            if message.body == b"b:0" and got_b_at is None:
                got_b_at = time.monotonic() - held_at
            time.sleep(0.001)
        assert got_b_at is not None, "the ended lease of b:0 was not returned"
        assert got_b_at < 1.5 + 1.0, got_b_at


def test_two_processes_many_groups_one_in_flight_per_group_in_order(
    fast_tmp_path: Path,
) -> None:
    """Three processes serve 24 groups x 25 from listings that go stale as the others
    claim: every message once, each group in order, never two consumers in one group."""
    path = fast_tmp_path / "q"
    queue = vsqs.Queue(path, fifo=True, partitions=1, durable=False)
    groups = [f"g{n}" for n in range(24)]
    for index in range(25):
        for group in groups:
            queue.publish(f"{group}:{index}".encode(), group=group)
    inflight, start = fast_tmp_path / "inflight", fast_tmp_path / "start"
    inflight.mkdir()
    reports = [fast_tmp_path / f"consumer-{n}.json" for n in range(3)]
    with children() as kids:
        for report in reports:
            kids.start(workers.serve_groups, str(path), str(report), str(inflight), str(start))
        start.touch()
        kids.join_all()
    seen = sorted((entry for report in reports for entry in load(str(report))), key=lambda e: e[3])
    assert not [entry for entry in seen if entry[2]], "a group was in flight twice"
    for group in groups:
        indexes = [entry[1] for entry in seen if entry[0] == group]
        assert indexes == list(range(25)), (group, indexes)
    assert all(load(str(report)) for report in reports), "a consumer got nothing"


def test_retention_applies_to_every_step(fast_tmp_path: Path) -> None:
    """With retention, a step never claims from a kept listing: messages that passed
    their retention since the last listing are dropped, not delivered."""
    clock = ManualClock()
    queue = vsqs.Queue(
        fast_tmp_path / "q",
        fifo=True,
        partitions=1,
        durable=False,
        retention=10,
        refresh_interval=1000,
        clock=clock,
    )
    for n in range(5):
        queue.publish(f"m{n}".encode(), group=f"g{n}")
        clock.advance(0.001)
    first = queue.receive(timeout=0)
    assert first is not None
    assert first.body == b"m0"
    assert queue.delete(first)
    clock.advance(11)
    assert queue.receive(timeout=0) is None
    assert queue.size() == 0


def test_a_message_passed_over_for_its_held_group_is_offered_again(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a:1`` is passed over while this handle holds ``a:0``; once ``a:0`` is deleted,
    the next receive gives ``a:1`` (the oldest admissible), from the same listing."""
    queue = vsqs.Queue(
        fast_tmp_path / "q", fifo=True, partitions=1, durable=False, refresh_interval=60
    )
    queue.publish_batch([b"a:0", b"a:1"], group="a")
    queue.publish_batch([f"b:{n}".encode() for n in range(20)], group="b")
    listings = count_listings(monkeypatch)
    held = queue.receive(timeout=0)
    assert held is not None
    assert held.body == b"a:0"
    other = queue.receive(timeout=0)
    assert other is not None
    assert other.body == b"b:0"  # a:1 passed over: a is in flight
    assert queue.delete(other)
    assert queue.delete(held)
    again = queue.receive(timeout=0)
    assert again is not None
    assert again.body == b"a:1"
    assert len(listings) == 1


def test_held_names_stay_right_through_many_claims_and_deletes() -> None:
    """A :class:`~vsqs._groups.Held` that drops deleted names lazily (and compacts now
    and then) still says exactly which names are held and when the first one ends."""
    held = Held()
    held.load([(10**12, "other.lease")], set())  # another consumer's long lease
    for n in range(5000):
        end = 10_000 - n  # each claim ends before the last: it is the one due first
        held.add(f"{n}.claim", end)
        assert not held.due(end - 1)
        assert held.due(end), n
        if n:
            held.discard(f"{n - 1}.claim")
    assert sorted(held.snapshot()[0]) == [(5001, "4999.claim"), (10**12, "other.lease")]
    held.discard("4999.claim")
    assert not held.due(10**12 - 1)
    assert held.due(10**12)
