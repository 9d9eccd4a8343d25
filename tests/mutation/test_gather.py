"""Guarantees of vsqs._sets._gather that ``make mutate`` found unguarded
(docs/reliability.rst, "Mutation testing"): each test fails on the mutants of
``Gatherer`` named in its docstring (by method and number).

A consumer's home is pinned by holding the other partition's home lock here, as another
process would (``.vsqs/home-<i>.lock``, an exclusive ``flock``): with two partitions,
the handle's home, its current partition, is then partition 1.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import PartitionedQueue, QueueDrained, _fs
from vsqs._sets._spread import VISIT_EVERY, group_partition
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def _group(partition: int) -> str:
    """A group whose messages go to *partition* (of two)."""
    return next(g for n in range(100) if group_partition(g := f"g{n}", 2) == partition)


def _now(clock: ManualClock) -> float:
    return clock.time_us() / 1e6


@contextmanager
def _home_taken(queue: PartitionedQueue, partition: int) -> Iterator[int]:
    """Hold *partition*'s home lock as another consumer would; the descriptor."""
    fd = os.open(Path(queue.path, ".vsqs", f"home-{partition}.lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield fd
    finally:
        os.close(fd)


def _is_free(queue: PartitionedQueue, partition: int) -> bool:
    fd = os.open(Path(queue.path, ".vsqs", f"home-{partition}.lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _filled(tmp_path: Path, counts: tuple[int, int]) -> tuple[PartitionedQueue, ManualClock]:
    """Two partitions holding *counts* messages (bodies ``b"<partition>-<n>"``)."""
    clock = ManualClock()
    queue = PartitionedQueue(tmp_path / "q", partitions=2, durable=False, clock=clock)
    for partition, count in enumerate(counts):
        for n in range(count):
            queue.publish(b"%d-%d" % (partition, n), group=_group(partition))
    return queue, clock


def _partition(queue: PartitionedQueue, message: vsqs.Message | None) -> int:
    assert message is not None
    return [part.path for part in queue.partition_queues].index(message.queue)


def test_a_receive_visits_the_other_partition_every_visit_every_calls(tmp_path: Path) -> None:
    """Of single receives, calls 1 to ``VISIT_EVERY - 1`` claim from the home and call
    ``VISIT_EVERY`` from the other partition; a fruitful visit keeps the interval (mutants:
    ``poll_one`` 3, 4, 5; ``_look`` 17, 18, 25)."""
    queue, _ = _filled(tmp_path, (4 * VISIT_EVERY, 4 * VISIT_EVERY))
    with _home_taken(queue, 0):
        got = [_partition(queue, queue.receive(timeout=0)) for _ in range(3 * VISIT_EVERY)]
    visits = [call for call, partition in enumerate(got, 1) if partition == 0]
    assert visits == [VISIT_EVERY, 2 * VISIT_EVERY, 3 * VISIT_EVERY]


def test_a_drained_queue_says_so_on_every_call_visits_included(tmp_path: Path) -> None:
    """A shut down, empty partitioned queue raises ``QueueDrained`` naming it on every
    receive, a visit's included, and one whose other partition still holds a message in
    flight never does (mutants: ``_pass`` 21; ``_look`` 13 and 15; ``poll_one`` 38;
    ``receive_batch`` 15, 36, 37)."""
    queue, clock = _filled(tmp_path, (0, 0))
    queue.shutdown()
    clock.advance(5)  # past the shutdown's grace
    with _home_taken(queue, 0):
        for _ in range(2 * VISIT_EVERY):
            with pytest.raises(QueueDrained) as raised:
                queue.receive(timeout=0)
            assert raised.value.path == queue.path
        with pytest.raises(QueueDrained) as raised:
            queue.receive_batch(2, timeout=0)
        assert raised.value.path == queue.path
    held, clock = _filled(tmp_path / "held", (1, 0))
    other = PartitionedQueue(held.path, durable=False, clock=clock)
    assert other.partition_queues[0].receive(timeout=0) is not None  # in flight
    held.shutdown()
    clock.advance(5)
    with _home_taken(held, 0):
        for _ in range(2 * VISIT_EVERY):
            assert held.receive(timeout=0) is None


def test_every_claim_keeps_the_visibility_timeout_asked_for(tmp_path: Path) -> None:
    """A message claimed by a visit, by a move to another partition, or from the queue
    directory itself, by ``receive_batch`` or ``try_receive``, is leased for the
    visibility timeout asked for (mutants: ``_pass`` 14, 36, 58, 60; ``_look`` 9;
    ``_arrive`` 6; ``try_receive`` of the queue directory's)."""
    queue, clock = _filled(tmp_path, (2 * VISIT_EVERY, VISIT_EVERY))
    with _home_taken(queue, 0):
        for call in range(1, VISIT_EVERY + 1):
            (message,) = queue.receive_batch(1, visibility_timeout=100)
            assert message.expires_at == _now(clock) + 100
            assert _partition(queue, message) == (0 if call == VISIT_EVERY else 1)
        home = queue.partition_queues[1]
        while home.receive(timeout=0) is not None:  # the rest of the home...
            pass
        (moved,) = queue.receive_batch(1, visibility_timeout=100)  # ...then the other
        assert _partition(queue, moved) == 0 and moved.expires_at == _now(clock) + 100
    queue.purge()
    for name in ("1", "2"):  # as a vsqs 0.3 producer writes: in the queue directory
        Path(queue.path, str(clock.time_us() - int(name))).write_bytes(b"stray")
    (stray,) = queue.receive_batch(1, visibility_timeout=100)
    assert stray.queue == queue.path and stray.expires_at == _now(clock) + 100
    (other,) = queue.try_receive(1, visibility_timeout=100)
    assert other.queue == queue.path and other.expires_at == _now(clock) + 100


def test_a_batch_takes_exactly_its_limit_over_the_partitions(tmp_path: Path) -> None:
    """``receive_batch`` and ``try_receive`` claim at most their limit, adding each
    partition's claims to the last ones; and a visit's claims count against it (mutants:
    ``_pass`` 31, 40; ``_arrive`` 5, 18; ``try_receive`` 16, 22)."""
    queue, _ = _filled(tmp_path, (3, 0))
    with _home_taken(queue, 0):
        assert len(queue.receive_batch(3)) == 3  # the home is empty: all from the other
    queue, _ = _filled(tmp_path / "b", (2, 2))
    with _home_taken(queue, 0):
        assert len(queue.receive_batch(3)) == 3
        assert len(queue.receive_batch(3)) == 1
    queue, _ = _filled(tmp_path / "c", (2, 2))
    with _home_taken(queue, 0):
        got = queue.try_receive(3)
        assert len(got) == 3 and len(queue) == 4  # 3 held, 1 ready
    queue, _ = _filled(tmp_path / "d", (VISIT_EVERY, 4 * VISIT_EVERY))
    with _home_taken(queue, 0):
        for _ in range(VISIT_EVERY - 1):
            queue.receive_batch(1)
        assert len(queue.receive_batch(3)) == 3  # the visit's claim, then the home's


def test_try_receive_says_drained_or_serves_the_queue_directory(tmp_path: Path) -> None:
    """``try_receive`` on a shut down, empty queue raises ``QueueDrained``; a message in
    the queue directory itself is claimed once the partitions have none, shut down or
    not (mutants: ``try_receive`` 10, 11, 23, 24, 25, 27 to 33 of the code before, 30 of
    the code after;
    before the fix, a stray was never claimed by ``try_receive`` unless the queue was
    shut down and drained)."""
    queue, clock = _filled(tmp_path, (0, 0))
    Path(queue.path, str(clock.time_us() - 1)).write_bytes(b"stray")
    Path(queue.path, str(clock.time_us() - 3)).write_bytes(b"older")
    strays = queue.try_receive(3)
    assert [m.body for m in strays] == [b"older", b"stray"]
    assert queue.delete_batch(strays) == 2
    Path(queue.path, str(clock.time_us() - 2)).write_bytes(b"late")
    queue.shutdown()
    clock.advance(5)
    (late,) = queue.try_receive(2)
    assert late.body == b"late" and queue.delete(late)
    with pytest.raises(QueueDrained):
        queue.try_receive()


def test_bad_waits_are_refused_naming_the_argument(tmp_path: Path) -> None:
    """A bad ``visibility_timeout`` or ``timeout`` is refused naming it, and a receive
    without a timeout takes a ready message (mutants: ``receive_batch`` 4, 7, 8, 27, 31,
    34, 35; ``try_receive`` 4, 7, 8)."""
    queue, _ = _filled(tmp_path, (1, 0))
    with pytest.raises(ValueError, match=r"(^|\W)visibility_timeout\b"):
        queue.receive_batch(1, visibility_timeout=-1)
    with pytest.raises(ValueError, match=r"(^|\W)visibility_timeout\b"):
        queue.try_receive(1, visibility_timeout=-1)
    with pytest.raises(ValueError, match=r"(^|\W)timeout\b"):
        queue.receive_batch(1, timeout=-1)
    assert len(queue.receive_batch(1, timeout=None)) == 1


def test_a_handle_makes_one_waiter_on_its_clock_and_may_be_used_after_close(
    tmp_path: Path,
) -> None:
    """A handle's waiter is made once; a blocked receive waits on the handle's clock
    (five manual seconds, no real ones); its claim misses start at 0; closed, it
    receives again (mutants: ``waiter`` 1, 3, 12, 23; ``claim_misses`` 1; ``reset`` 1)."""
    queue, _ = _filled(tmp_path, (0, 0))
    assert queue.waiter() is queue.waiter()
    assert queue.claim_misses == 0
    started = time.monotonic()
    assert queue.receive(timeout=5) is None
    assert time.monotonic() - started < 2.5
    queue.close()
    queue.publish(b"again")
    assert queue.receive(timeout=0) is not None


def test_a_homeless_consumer_takes_a_home_freed_when_it_next_visits(tmp_path: Path) -> None:
    """A consumer that found every home taken takes the first one freed, at its next
    visit (mutants: ``_look`` 3 and 4)."""
    queue, _ = _filled(tmp_path, (4 * VISIT_EVERY, 4 * VISIT_EVERY))
    with _home_taken(queue, 1), _home_taken(queue, 0) as fd:
        assert queue.receive(timeout=0) is not None  # no home
        fcntl.flock(fd, fcntl.LOCK_UN)  # home 0 freed
        for _ in range(2 * VISIT_EVERY):
            assert queue.receive(timeout=0) is not None
        assert not _is_free(queue, 0)


def test_a_handles_waiter_polls_as_its_options_say(tmp_path: Path) -> None:
    """The waiter of a handle opened with ``wait="poll"`` and a ``poll_interval`` polls
    every directory at that interval, and rechecks no less often (mutants: ``waiter``
    10, 11, 20, 22)."""
    queue = PartitionedQueue(
        tmp_path / "q", partitions=2, durable=False, wait="poll", poll_interval=0.5
    )
    waiter = queue.waiter()
    assert (waiter.poll_interval, waiter.recheck, waiter.interval) == (0.5, 0.5, 0.5)
    assert waiter.fileno() == -1  # nothing watched with inotify: every directory polled
    assert len(waiter.paths) == 3


def test_an_empty_look_leaves_the_consumer_at_home(tmp_path: Path) -> None:
    """A receive that finds every partition empty does not move the consumer: its next
    receive looks at its home first (mutant: ``_pass`` 45, moving to an empty one)."""
    queue, clock = _filled(tmp_path, (0, 0))
    with _home_taken(queue, 0):
        assert queue.receive(timeout=0) is None
        queue.publish(b"other", group=_group(0))
        clock.advance(1)
        queue.publish(b"home", group=_group(1))
        message = queue.receive(timeout=0)
        assert message is not None and message.body == b"home"


def test_a_visit_takes_what_it_can_then_the_home_the_rest(tmp_path: Path) -> None:
    """At a visit, a batch takes up to its limit from the visited partition, and the
    home is asked only for the rest (mutants: ``_look`` 10; ``_pass`` 31)."""
    for other, expected in ((3, [0, 0, 0]), (1, [0, 1, 1])):
        queue, _ = _filled(tmp_path / str(other), (other, 4 * VISIT_EVERY))
        with _home_taken(queue, 0):
            for _ in range(VISIT_EVERY - 1):
                assert _partition(queue, queue.receive_batch(1)[0]) == 1
            got = queue.receive_batch(3)
        assert [_partition(queue, message) for message in got] == expected


def _moved_to(tmp_path: Path) -> tuple[PartitionedQueue, PartitionedQueue, ManualClock]:
    """A consumer whose home (partition 1) is empty and which has listed partition 0
    (holding ``b"a"`` ... ``b"d"`` published in that order) claiming ``b"a"``; and
    another handle on the queue."""
    queue, clock = _filled(tmp_path, (0, 0))
    for body in (b"a", b"b", b"c", b"d"):
        queue.publish(body, group=_group(0))
        clock.advance(1)
    (first,) = queue.partition_queues[0].try_receive(1)
    assert first.body == b"a"
    return queue, PartitionedQueue(queue.path, durable=False, clock=clock), clock


def test_a_move_that_finds_everything_taken_does_not_wait(
    tmp_path: Path,
) -> None:
    """A consumer whose listing of another partition went stale, every message there
    taken, comes back at once, without waiting, not even on the manual clock (mutants:
    ``_arrive`` 14, 19)."""
    queue, other, clock = _moved_to(tmp_path)
    taken = other.partition_queues[0].receive_batch(3)
    assert [m.body for m in taken] == [b"b", b"c", b"d"]
    before = clock.time_us()
    with _home_taken(queue, 0):
        assert queue.receive_batch(3) == []
    assert clock.time_us() == before  # no wait, not even on the manual clock


def test_a_fruitful_visit_to_its_home_brings_a_consumer_back(tmp_path: Path) -> None:
    """A consumer that moved away from its empty home comes back at the first visit
    that finds messages there, and claims from it from then on (mutant: ``_look`` 17,
    the visited partition not named)."""
    queue, _ = _filled(tmp_path, (4 * VISIT_EVERY, 0))
    with _home_taken(queue, 0):
        got = [_partition(queue, queue.receive(timeout=0))]  # home empty: moves to 0
        for _ in range(4 * VISIT_EVERY):
            queue.publish(b"home", group=_group(1))
        got += [_partition(queue, queue.receive(timeout=0)) for _ in range(VISIT_EVERY + 4)]
    assert got == [0] * (VISIT_EVERY - 1) + [1] * 6


class _Peer:
    """Another consumer, as on another host: armed for a directory, it claims and deletes
    a message this process is about to claim there, between this handle's listing and
    its rename (so that rename fails: a race lost), once per arming."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed: dict[Path, int] = {}  # directory: claims of ours to let through first
        self.took: list[str] = []
        rename = _fs.rename_noreplace

        def first(src: str, dst: str, *args: Any) -> None:
            where = Path(src).parent
            if where in self.armed:
                if self.armed[where] == 0:
                    del self.armed[where]
                    self.took.append(Path(src).name)
                    rename(src, dst)  # the peer's claim...
                    os.unlink(dst)  # ...and its delete
                else:
                    self.armed[where] -= 1
            rename(src, dst, *args)

        patch_fs(monkeypatch, "rename_noreplace", first)

    def arm(self, queue: PartitionedQueue, partition: int, *, after: int = 0) -> None:
        """Take the message of *partition* this process claims after *after* others."""
        self.armed[Path(queue.partition_queues[partition].path)] = after


def _published(queue: PartitionedQueue, clock: ManualClock, partition: int, n: int) -> list[str]:
    """*n* messages published into *partition*, a manual second apart; their bodies."""
    bodies = [f"{partition}-{k}" for k in range(n)]
    for body in bodies:
        queue.publish(body.encode(), group=_group(partition))
        clock.advance(1)
    return bodies


def test_a_move_that_loses_a_race_lists_again_and_keeps_what_it_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer moving to another partition that loses a race there after claiming
    some lists it again and claims the rest of its limit, no more, with the visibility
    timeout asked for, the claims before the race kept (mutants: ``_arrive`` 10, the
    first claims dropped though leased; 13 and 16, the default timeout; 18, past the
    limit)."""
    queue, clock = _filled(tmp_path, (0, 0))
    bodies = _published(queue, clock, 0, 6)
    peer = _Peer(monkeypatch)
    with _home_taken(queue, 0):
        peer.arm(queue, 0, after=1)  # "0-0" claimed, then "0-1" taken by the peer
        got = queue.receive_batch(3, visibility_timeout=100)
    assert len(peer.took) == 1
    assert [m.body.decode() for m in got] == [bodies[0], bodies[2], bodies[3]]
    assert all(m.expires_at == _now(clock) + 100 for m in got)
    queue.close()


def test_a_move_that_loses_no_race_lists_the_partition_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer moving from its empty home to a partition nobody else serves lists it
    once, however few it finds there (mutants: ``_arrive`` 7 and 9, a second listing
    when no race was lost)."""
    queue, clock = _filled(tmp_path, (0, 0))
    bodies = _published(queue, clock, 0, 2)
    where = Path(queue.partition_queues[0].path)
    scandir = _fs.scandir
    listings: list[Path] = []

    def listing(path: str) -> Any:
        listings.append(Path(path))
        return scandir(path)

    patch_fs(monkeypatch, "scandir", listing)
    with _home_taken(queue, 0):
        got = queue.receive_batch(3)
    assert [m.body.decode() for m in got] == bodies
    assert listings.count(where) == 1
    queue.close()


def test_a_partition_drained_by_peers_during_a_move_says_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shut down queue whose partition is emptied by other consumers while this one
    moves there is drained, and the receive says so: the message it meant to claim
    taken by a peer (the look gives up, and finds a message still held, not drained),
    and the held one deleted by its holder before the listing that follows (mutant:
    ``_arrive`` 20, the partition's ``QueueDrained`` swallowed: ``None``)."""
    queue, clock = _filled(tmp_path, (0, 0))
    _published(queue, clock, 0, 2)
    holder = PartitionedQueue(queue.path, durable=False, clock=clock)
    held = holder.partition_queues[0].receive(visibility_timeout=100, timeout=0)
    assert held is not None and held.body == b"0-0"
    queue.shutdown()
    clock.advance(5)  # past the shutdown's grace
    where = Path(queue.partition_queues[0].path)
    peer = _Peer(monkeypatch)
    scandir = _fs.scandir
    since: list[Path] = []  # listings of partition 0 since the peer's claim

    def listing(path: str) -> Any:
        if peer.took and Path(path) == where:
            since.append(where)
            if len(since) == 2:  # after the look's own drained check: the holder deletes
                assert holder.delete(held)
        return scandir(path)

    patch_fs(monkeypatch, "scandir", listing)
    with _home_taken(queue, 0):
        peer.arm(queue, 0)  # "0-1", the only one ready
        with pytest.raises(QueueDrained) as raised:
            queue.receive(timeout=0)
    assert raised.value.path == queue.path and peer.took and len(since) >= 2
    holder.close()
    queue.close()


def _where(queue: PartitionedQueue, calls: int) -> list[int]:
    return [_partition(queue, queue.receive(timeout=0)) for _ in range(calls)]


def test_a_visit_that_loses_a_race_comes_back_twice_as_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A visit that claims one message and then loses a race in the visited partition
    doubles the interval to the next visit (mutant: ``_look`` 19, the lost race not
    passed on: the next visit ``VISIT_EVERY`` calls later)."""
    queue, clock = _filled(tmp_path, (0, 0))
    _published(queue, clock, 1, 4 * VISIT_EVERY)
    _published(queue, clock, 0, 6)
    peer = _Peer(monkeypatch)
    with _home_taken(queue, 0):
        assert _where(queue, VISIT_EVERY - 1) == [1] * (VISIT_EVERY - 1)
        peer.arm(queue, 0, after=1)
        visit = queue.receive_batch(3)
        assert [_partition(queue, m) for m in visit] == [0, 1, 1] and peer.took
        assert _where(queue, 2 * VISIT_EVERY) == [1] * (2 * VISIT_EVERY - 1) + [0]
    queue.close()


def test_a_consumer_leaves_its_home_once_races_are_lost_there_since_the_last_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer that lost a race at a visit to another partition, and then one at
    home, moves to that partition at its next fruitful visit there: the races counted
    against home are home's, not the visited one's (mutants: ``_look`` 29 and 30, the
    visited partition's lost races taken for the home's)."""
    queue, clock = _filled(tmp_path, (0, 0))
    _published(queue, clock, 1, 6 * VISIT_EVERY)
    _published(queue, clock, 0, 4 * VISIT_EVERY)
    peer = _Peer(monkeypatch)
    with _home_taken(queue, 0):
        assert _where(queue, VISIT_EVERY - 1) == [1] * (VISIT_EVERY - 1)
        peer.arm(queue, 0)  # the visit finds its first candidate taken: none claimed
        assert _where(queue, 1) == [1]
        peer.arm(queue, 1)  # then home loses one
        got = _where(queue, 2 * VISIT_EVERY + 3)
    assert len(peer.took) == 2
    assert got == [1] * (2 * VISIT_EVERY - 1) + [0] * 4  # the visit, then it stays
    queue.close()


def test_a_consumer_back_home_counts_home_races_from_its_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer that moved away from its empty home, lost a race there, and came back
    home at a visit, leaves home for the other partition at the next fruitful visit once
    home lost a race since its return (mutants: ``_look`` 28 and 30, the races counted
    against home taken from the partition it left)."""
    queue, clock = _filled(tmp_path, (0, 0))
    _published(queue, clock, 0, 6 * VISIT_EVERY)
    peer = _Peer(monkeypatch)
    with _home_taken(queue, 0):
        assert _where(queue, 1) == [0]  # home empty: moves to 0
        peer.arm(queue, 0)
        assert _where(queue, VISIT_EVERY - 2) == [0] * (VISIT_EVERY - 2)
        _published(queue, clock, 1, 4 * VISIT_EVERY)
        assert _where(queue, 1) == [1]  # the visit home: back
        peer.arm(queue, 1)
        got = _where(queue, VISIT_EVERY + 3)
    assert len(peer.took) == 2
    assert got == [1] * (VISIT_EVERY - 1) + [0] * 4  # the visit to 0, then it stays
    queue.close()


class _Together:
    """A lock that lets in its first two takers only once both have come (each having
    found no waiter made yet): two threads making a handle's first waiter at once."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.met = threading.Barrier(2, timeout=30)

    def __enter__(self) -> None:
        self.met.wait()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_two_threads_making_the_first_waiter_at_once_share_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads that both find a handle without a waiter and make it at once get the
    same one (mutant: ``waiter`` 3, the second thread made another, replacing it)."""
    queue, _ = _filled(tmp_path, (0, 0))
    gatherer = queue._gatherer
    monkeypatch.setattr(gatherer, "_lock", _Together(gatherer._lock))
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(queue.waiter())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    monkeypatch.undo()
    assert len(got) == 2 and got[0] is got[1] is queue.waiter()
    queue.close()
