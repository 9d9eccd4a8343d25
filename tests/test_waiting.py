"""Waiting (issue 9): blocked consumers wake on a publish, a release, an expiry or a close.

The blocked consumers run in child processes with ``poll_interval=3600``: the periodic
re-check is then an hour, so within the test's bounds only the event under test (or the
earliest known expiry) can wake them. A child that never wakes fails its join.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _inotify, _inotify_hub, _waiters

from . import procs
from .fixtures_core import (
    children,
    fd_targets,
    inotify_fds,
    wait_blocked_in_inotify,
    wait_until,
)

NO_RECHECK: dict[str, Any] = {"durable": False, "wait": "inotify", "poll_interval": 3600}

needs_inotify = pytest.mark.skipif(not _inotify.have_inotify(), reason="inotify is Linux-only")


@needs_inotify
def test_a_consumer_blocked_forever_is_woken_by_a_publish_in_another_process(
    qpath: str, tmp_path: Path
) -> None:
    report = str(tmp_path / "report.json")
    with children() as kids:
        consumer = kids.start(procs.receive_one, qpath, report, NO_RECHECK, None)
        wait_blocked_in_inotify(consumer)
        vsqs.PlainQueue(qpath, durable=False).publish(b"wake up")
        kids.join(consumer)
    assert procs.load(report) == {"body": "wake up", "receive_count": 1}


@needs_inotify
def test_a_consumer_blocked_forever_is_woken_by_a_release_in_another_process(
    qpath: str, tmp_path: Path
) -> None:
    """The message is held for an hour by another process, which then releases it."""
    vsqs.PlainQueue(qpath, durable=False).publish(b"released")
    report = str(tmp_path / "report.json")
    with children() as kids:
        ready, go = procs_events()
        holder = kids.start(procs.release_later, qpath, ready, go)
        assert ready.wait(60)
        consumer = kids.start(procs.receive_one, qpath, report, NO_RECHECK, None)
        wait_blocked_in_inotify(consumer)
        go.set()
        kids.join(holder)
        kids.join(consumer)
    assert procs.load(report) == {"body": "released", "receive_count": 2}


@needs_inotify
def test_a_consumer_blocked_forever_is_woken_by_an_expiry_without_any_file_event(
    qpath: str, tmp_path: Path
) -> None:
    """Another process holds the message for 2 s and never touches it again: the blocked
    consumer must wake at the expiry it saw in its listing (no file event happens)."""
    holder = vsqs.PlainQueue(qpath, durable=False)
    holder.publish(b"abandoned")
    held = holder.receive(visibility_timeout=2.0, timeout=0)
    assert held is not None
    report = str(tmp_path / "report.json")
    with children() as kids:
        kids.join(kids.start(procs.receive_one, qpath, report, NO_RECHECK, None))
    assert procs.load(report) == {"body": "abandoned", "receive_count": 2}
    assert time.time() >= held.expires_at  # it was not served before its lease ended


@needs_inotify
def test_close_wakes_every_blocked_consumer(qpath: str, tmp_path: Path) -> None:
    """Three consumers blocked in receive() get QueueDrained; one iterating consume()
    sees the iterator end."""
    reports = [str(tmp_path / f"consumer-{n}.json") for n in range(4)]
    with children() as kids:
        blocked = [kids.start(procs.receive_one, qpath, r, NO_RECHECK, None) for r in reports[:3]]
        blocked.append(kids.start(procs.consume_to_end, qpath, reports[3], NO_RECHECK))
        for consumer in blocked:
            wait_blocked_in_inotify(consumer)
        vsqs.PlainQueue(qpath, durable=False).shutdown()
        kids.join_all()
    assert [procs.load(r) for r in reports[:3]] == ["drained"] * 3
    assert procs.load(reports[3]) == {"ended": True, "bodies": []}


def test_close_lets_consumers_drain_what_is_left_first(qpath: str, tmp_path: Path) -> None:
    queue = vsqs.PlainQueue(qpath, durable=False)
    queue.publish_batch([b"a", b"b"])
    queue.shutdown()
    report = str(tmp_path / "report.json")
    with children() as kids:
        kids.join(kids.start(procs.consume_to_end, qpath, report, {"durable": False}))
    assert procs.load(report) == {"ended": True, "bodies": ["a", "b"]}
    with pytest.raises(vsqs.QueueDrained):
        queue.receive(timeout=None)


@pytest.mark.parametrize("wait", ["auto", "poll"])
def test_a_receive_with_a_timeout_returns_none_after_about_that_long(qpath: str, wait: str) -> None:
    """Generous bounds: it must neither return early nor hang (not a speed assertion)."""
    queue = vsqs.PlainQueue(qpath, durable=False, wait=wait, poll_interval=0.05)
    started = time.monotonic()
    assert queue.receive(timeout=0.3) is None
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 10
    started = time.monotonic()
    assert queue.receive_batch(5, timeout=0.3) == []
    assert 0.3 <= time.monotonic() - started < 10


def test_a_blocked_receive_wakes_when_its_own_earliest_lease_ends(qpath: str) -> None:
    """Leases this handle took end in expiry order, not in claim order: a shorter lease
    taken after longer ones is the one a blocked receive of the same handle waits for."""
    queue = vsqs.PlainQueue(qpath, **{**NO_RECHECK, "poll_interval": 30})
    queue.publish_batch([b"long", b"longer", b"short"])
    assert queue.receive(visibility_timeout=60, timeout=0) is not None
    assert queue.receive(visibility_timeout=120, timeout=0) is not None
    short = queue.receive(visibility_timeout=0.5, timeout=0)
    assert short is not None and short.body == b"short"
    assert queue.next_look() <= 0.6  # from its own leases: it listed before claiming them
    started = time.monotonic()
    back = queue.receive(timeout=20)  # no file event: only the lease's end can wake it
    assert back is not None and back.body == b"short" and back.receive_count == 2
    assert time.time() >= short.expires_at and time.monotonic() - started < 15


@needs_inotify
def test_threads_waiting_on_one_queue_share_one_inotify_descriptor(qpath: str) -> None:
    """Twenty threads, each with its own Queue object on the directory, block at once:
    the process holds one inotify descriptor for all, and none once they let go."""
    gc.collect()  # queues of earlier tests (reference cycles) release their descriptors
    before = inotify_fds()
    waited: set[int] = set()
    lock = threading.Lock()
    real_wait = _inotify_hub._Instance.wait

    def counting_wait(
        instance: _inotify_hub._Instance, wd: int, token: int, seconds: float
    ) -> tuple[int, list[int] | None]:
        with lock:
            waited.add(threading.get_ident())
        return real_wait(instance, wd, token, seconds)

    queues = [vsqs.PlainQueue(qpath, **{**NO_RECHECK, "poll_interval": 30}) for _ in range(20)]
    got: list[vsqs.Message | None] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_inotify_hub._Instance, "wait", counting_wait)
        threads = [
            threading.Thread(target=lambda q=q: got.append(q.receive(timeout=60))) for q in queues
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(waited) == 20, "all threads to wait")
        vsqs.PlainQueue(qpath, durable=False).publish_batch([b"m"] * 20)
        for thread in threads:
            thread.join(60)
    assert len(got) == 20 and all(m is not None for m in got)
    assert len({m.id for m in got if m is not None}) == 20
    assert inotify_fds() == before + 1  # one for everybody, still open for the next wait
    for queue in queues:
        queue.detach()
    queues.clear()
    threads.clear()  # their targets hold the queues too
    gc.collect()
    assert inotify_fds() == before


def _threads() -> set[threading.Thread]:
    # The counters' flusher of an earlier test may end meanwhile: not the constructor's.
    return {t for t in threading.enumerate() if t.name != "vsqs-stats-flusher"}


def test_the_constructor_opens_no_descriptor_and_starts_no_thread(qpath: str) -> None:
    before_fds, before_threads = sorted(fd_targets()), _threads()
    queues = [vsqs.PlainQueue(qpath, wait=wait) for wait in ("auto", "inotify", "poll")]
    queues.append(vsqs.PlainQueue(qpath, capacity=3, durable=False))
    assert sorted(fd_targets()) == before_fds
    assert _threads() == before_threads
    assert inotify_fds() == before_fds.count("anon_inode:inotify")


def test_poll_waiting_works_and_opens_no_inotify_descriptor(qpath: str) -> None:
    queue = vsqs.PlainQueue(qpath, durable=False, wait="poll", poll_interval=0.02)
    before = inotify_fds()
    publisher = threading.Timer(0.2, lambda: vsqs.PlainQueue(qpath, durable=False).publish(b"p"))
    publisher.start()
    message = queue.receive(timeout=30)
    publisher.join()
    assert message is not None and message.body == b"p"
    assert inotify_fds() == before


def test_an_unknown_wait_mode_is_refused_when_the_queue_is_made(qpath: str) -> None:
    with pytest.raises(ValueError, match="wait must be"):
        vsqs.PlainQueue(qpath, durable=False, wait="sometimes")


def procs_events() -> tuple[Any, Any]:
    """Two events a spawned child can wait on and set."""
    from .fixtures_core import SPAWN

    return SPAWN.Event(), SPAWN.Event()


def test_no_waiter_is_left_behind_by_a_drained_child(qpath: str, tmp_path: Path) -> None:
    """Sanity check of the harness: a child exits by itself once drained."""
    vsqs.PlainQueue(qpath, durable=False).shutdown()
    report = str(tmp_path / "r.json")
    with children() as kids:
        kids.join(kids.start(procs.receive_one, qpath, report, {"durable": False}, None))
    assert procs.load(report) == "drained"
    assert os.path.isdir(qpath)


def test_an_endless_receive_on_a_manual_clock_waits_without_spinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``receive()`` with no timeout on a manual clock: time does not pass by itself, so
    only another thread can end the wait. It waits in real time, in slices (a few looks,
    not a busy loop), says so once, and returns what the other thread publishes."""
    import threading
    import time as real_time

    from vsqs.testing import ManualClock

    clock = ManualClock()
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False, clock=clock)
    looks: list[int] = []
    real_relist = queue._relist

    def counting_relist(now_us: int) -> None:
        looks.append(now_us)
        real_relist(now_us)

    monkeypatch.setattr(queue, "_relist", counting_relist)
    publisher = threading.Timer(0.5, lambda: queue.publish(b"late"))
    publisher.start()
    started = real_time.monotonic()
    with pytest.warns(RuntimeWarning, match="without a timeout"):
        message = queue.receive()
    publisher.join()
    assert message is not None and message.body == b"late"
    elapsed = real_time.monotonic() - started
    assert len(looks) <= 4 * (elapsed / 0.05) + 4  # one or two listings per 50 ms slice
    assert clock.monotonic() == 0.0  # no manual time was made up


# -- waiting degrades, never crashes (hostile-conditions issue, item 5) ----------------


@needs_inotify
def test_a_blocked_receive_works_in_a_process_with_over_1024_descriptors(qpath: str) -> None:
    """select() refuses descriptors >= 1024; a busy server has that many. poll() does not."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), max(hard, 4096)))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        queue = vsqs.PlainQueue(qpath, **{**NO_RECHECK, "poll_interval": 30})
        publisher = threading.Timer(
            0.3, lambda: vsqs.PlainQueue(qpath, durable=False).publish(b"p")
        )
        publisher.start()
        message = queue.receive(timeout=30)
        publisher.join()
        assert message is not None and message.body == b"p"
        assert max(int(fd) for fd in os.listdir("/proc/self/fd")) > 1024
        bounded = vsqs.PlainQueue(qpath, capacity=1, durable=False)
        with pytest.raises(vsqs.QueueFull):
            bounded.publish(b"full", timeout=0.2)  # a bounded publish waits the same way
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@needs_inotify
def test_one_inotify_descriptor_serves_more_queues_than_the_instance_limit(
    tmp_path: Path,
) -> None:
    """140 queues waited on in one process (the per-user instance limit is 128) cost one
    inotify descriptor, and every wait is woken by its own queue's publish."""
    gc.collect()
    before = inotify_fds()
    paths = [str(tmp_path / f"q{n}") for n in range(140)]
    queues = [vsqs.PlainQueue(path, **{**NO_RECHECK, "poll_interval": 30}) for path in paths]
    for queue in queues:
        assert queue.receive(timeout=0.01) is None  # each adds its watch
    assert inotify_fds() == before + 1
    got: list[vsqs.Message | None] = []
    waiters = [
        threading.Thread(target=lambda q=q: got.append(q.receive(timeout=60))) for q in queues[-5:]
    ]
    for thread in waiters:
        thread.start()
    time.sleep(0.2)
    for path in paths[-5:]:
        vsqs.PlainQueue(path, durable=False).publish(path.encode())
    for thread in waiters:
        thread.join(60)
    assert sorted(m.body for m in got if m is not None) == sorted(p.encode() for p in paths[-5:])
    for queue in queues:
        queue.close()
    queues.clear()
    waiters.clear()
    gc.collect()
    assert inotify_fds() == before


@needs_inotify
# It takes every inotify instance of the user for a while: in the integration tier, run
# alone, not beside the quick tier's parallel workers (which would find none left).
@pytest.mark.integration
def test_when_inotify_runs_out_waiting_polls_and_says_so_once(
    qpath: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every inotify instance of this user taken: a blocked receive falls back to
    polling (one warning through logging) and still gets the message."""
    import ctypes

    from vsqs._inotify_hub import _instances

    libc = ctypes.CDLL(None, use_errno=True)
    _instances.clear()  # the process-wide instance is made anew below, and fails
    monkeypatch.setattr(_waiters, "_warned", False)
    taken = []
    while (fd := libc.inotify_init1(os.O_CLOEXEC)) >= 0:
        taken.append(fd)
        assert len(taken) < 10_000
    try:
        queue = vsqs.PlainQueue(qpath, durable=False, wait="inotify", poll_interval=0.05)
        publisher = threading.Timer(
            0.3, lambda: vsqs.PlainQueue(qpath, durable=False).publish(b"p")
        )
        publisher.start()
        with caplog.at_level("WARNING", logger="vsqs"):
            message = queue.receive(timeout=30)
            assert queue.receive(timeout=0.1) is None
        publisher.join()
        assert message is not None and message.body == b"p"
        warnings = [r for r in caplog.records if "inotify is unavailable" in r.getMessage()]
        assert len(warnings) == 1  # once, however many waits
    finally:
        for fd in taken:
            os.close(fd)


# -- vsqs.MultiWaiter: one waiter on several directories --------------------------------


@needs_inotify
def test_a_multi_waiter_wakes_for_any_directory_on_the_one_shared_descriptor(
    tmp_path: Path,
) -> None:
    """A thread blocked on three directories wakes for a publish to the third (another
    process); the watches are the process's own, shared with each queue's waiter (one
    descriptor), and drain() names the directory that changed, once."""
    gc.collect()
    before = inotify_fds()
    paths = [str(tmp_path / name) for name in "abc"]
    queues = [vsqs.PlainQueue(path, **NO_RECHECK) for path in paths]
    assert queues[0].receive(timeout=0.01) is None  # the first queue's own watch
    waiter = vsqs.MultiWaiter(paths, recheck=3600)
    assert waiter.paths == paths and waiter.interval == 3600
    assert waiter.fileno() >= 0 and inotify_fds() == before + 1
    token = waiter.token()
    assert waiter.drain() == []
    with children() as kids:
        child = kids.start(procs.publish_after, paths[2], 0.3)
        started = time.monotonic()
        waiter.wait(token, 60)
        assert time.monotonic() - started < 30  # woken, not timed out
        kids.join(child)
    assert waiter.token() != token
    assert waiter.changed() == [paths[2]]  # counted by the wait: named once
    assert waiter.drain() == waiter.changed() == []
    waiter.remove(paths[2])
    waiter.remove(paths[2])  # again: nothing
    assert waiter.add(paths[1]) is True  # already watched: nothing changes
    assert waiter.paths == paths[:2]
    waiter.close()
    assert waiter.paths == [] and waiter.fileno() == -1
    for queue in queues:
        queue.close()
    gc.collect()
    assert inotify_fds() == before


@needs_inotify
def test_an_event_loop_drains_a_multi_waiter_without_blocking(tmp_path: Path) -> None:
    """The event-loop side: fileno() becomes readable on a change, drain() reads it
    without blocking and names what changed; a change made before add() is not seen."""
    import select

    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    vsqs.PlainQueue(first, durable=False).publish(b"before")
    publisher = vsqs.PlainQueue(second, durable=False)
    with vsqs.MultiWaiter([first]) as waiter:
        poller = select.poll()
        poller.register(waiter.fileno(), select.POLLIN)
        assert poller.poll(0) == []
        assert waiter.add(second) is True
        with pytest.raises(FileNotFoundError):
            waiter.add(tmp_path / "missing")
        publisher.publish(b"after")
        assert poller.poll(5000) != []
        assert waiter.drain() == [second]
        assert poller.poll(0) == []  # read: no longer readable
        assert waiter.drain() == []


def test_a_multi_waiter_polls_what_it_cannot_watch(
    tmp_path: Path, clock: vsqs.testing.ManualClock
) -> None:
    """``wait="poll"`` (as a network filesystem would be): no descriptor, nothing named,
    and a wait lasts at most the polling interval; on a manual clock it moves the clock
    instead of waiting."""
    path = str(tmp_path / "q")
    vsqs.PlainQueue(path)
    waiter = vsqs.MultiWaiter(wait="poll", poll_interval=0.01, clock=clock)
    assert waiter.add(path) is False
    assert waiter.add(path) is False
    assert waiter.fileno() == -1 and waiter.drain() == [] and waiter.interval == 0.01
    assert repr(waiter) == f"MultiWaiter([{path!r}])"
    token = waiter.token()
    waiter.wait(token, 30)
    assert clock.monotonic() >= 30
    started = time.monotonic()
    vsqs.MultiWaiter([path], wait="poll", poll_interval=0.01).wait(token, 30)
    assert time.monotonic() - started < 10  # one interval, not the 30 s asked for
    with pytest.raises(ValueError, match="wait must be one of"):
        vsqs.MultiWaiter(wait="sometimes")
    with pytest.raises(ValueError, match="poll_interval"):
        vsqs.MultiWaiter(poll_interval=0)


@needs_inotify
def test_a_multi_waiter_polls_where_inotify_ran_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-user watch limit reached: the directory is polled (one warning)."""

    def no_room(fd: int, path: str) -> int:
        raise OSError(28, "inotify_add_watch: No space left on device", path)

    monkeypatch.setattr(_waiters, "_warned", False)
    monkeypatch.setattr(_inotify, "add_watch", no_room)
    path = str(tmp_path / "q")
    vsqs.PlainQueue(path)
    with caplog.at_level("WARNING", logger="vsqs"):
        waiter = vsqs.MultiWaiter(wait="inotify")
        assert waiter.add(path) is False
    assert waiter.fileno() == -1 and waiter.interval == waiter.poll_interval
    assert [r for r in caplog.records if "inotify is unavailable" in r.getMessage()]


@needs_inotify
def test_a_multi_waiter_in_a_forked_child_watches_on_its_own_descriptor(
    tmp_path: Path,
) -> None:
    """A waiter made before a fork works in the child (its own descriptor and watches),
    and is woken there by a publish."""
    paths = [str(tmp_path / name) for name in "ab"]
    for path in paths:
        vsqs.PlainQueue(path)
    waiter = vsqs.MultiWaiter(paths, recheck=3600)
    with children("fork") as kids:
        child = kids.start(procs.multi_waiter_child, waiter, paths[1])
        kids.join(child)
    waiter.close()


@needs_inotify
def test_threads_waiting_on_a_multi_waiter_take_turns_reading_and_all_wake(
    tmp_path: Path,
) -> None:
    """Three threads block on one waiter: one reads the descriptor, the others sleep on
    its condition; one publish wakes all three (and no thread spins meanwhile)."""
    paths = [str(tmp_path / name) for name in "ab"]
    for path in paths:
        vsqs.PlainQueue(path)
    waiter = vsqs.MultiWaiter(paths, recheck=3600)
    token = waiter.token()
    woken: list[int] = []

    def wait() -> None:
        waiter.wait(token, 60)
        woken.append(waiter.token())

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for thread in threads:
        thread.start()
    instance = _inotify_hub.process_instance()
    wait_until(lambda: instance.reader and instance.sleepers == 2, "one reader, two sleepers")
    vsqs.PlainQueue(paths[0], durable=False).publish(b"x")
    for thread in threads:
        thread.join(60)
    assert len(woken) == 3 and token not in woken
    waiter.close()
