"""The one lock class (:mod:`vsqs._lock`): no lock is waited for without a bound.

A process stopped (SIGSTOP) while it holds one of a queue's locks costs a publish, a
receive or a settings change its own timeout, never more; the same code runs on the
manual clock; threads sharing one lock exclude each other.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import _stored
from vsqs._layout import CAPACITY_LOCK, SETTINGS_LOCK, Layout
from vsqs._lock import FileLock
from vsqs.testing import ManualClock

from . import _fifo_workers as workers
from .fixtures_core import Children, children, wait_until


def _stop_holding(kids: Children, directory: str, name: str, report: Path) -> None:
    """A child that takes ``.vsqs/<name>`` of *directory* and stops holding it."""
    holder = kids.start(workers.lock_and_stop, directory, str(report), name)
    wait_until(lambda: holder.pid is not None and workers.stopped(holder.pid), "the stop")
    assert report.exists()


def test_a_stopped_capacity_lock_holder_costs_a_publish_its_timeout(fast_tmp_path: Path) -> None:
    queue = vsqs.Queue(fast_tmp_path / "q", capacity=10, durable=False)
    with children() as kids:
        _stop_holding(kids, queue.path, CAPACITY_LOCK, fast_tmp_path / "held")
        began = time.monotonic()
        with pytest.raises(vsqs.QueueFull):
            queue.publish(b"x", timeout=1)
        assert 1.0 <= time.monotonic() - began < 1.5
    queue.publish(b"x", timeout=1)  # the holder is gone: so is its lock
    assert queue.size() == 1


def test_a_stopped_capacity_lock_holder_never_stalls_a_dead_lettering_receive(
    fast_tmp_path: Path,
) -> None:
    """A receive that dead-letters into a bounded queue whose lock is held by a stopped
    process keeps the message back (as for a full queue) and returns within its timeout."""
    dlq = vsqs.Queue(fast_tmp_path / "dlq", capacity=10, durable=False)
    queue = vsqs.Queue(fast_tmp_path / "q", dead_letter=dlq, max_receives=1, durable=False)
    queue.publish(b"poison")
    assert queue.receive(visibility_timeout=0.05, timeout=0) is not None
    time.sleep(0.1)  # its one receive has ended: the next look dead-letters it
    with children() as kids:
        _stop_holding(kids, dlq.path, CAPACITY_LOCK, fast_tmp_path / "held")
        began = time.monotonic()
        assert queue.receive(timeout=1) is None
        assert time.monotonic() - began < 1.5
    # Kept back, not lost: held until its hold ends, then moved (see _capacity).
    assert (queue.counts().held, dlq.size()) == (1, 0)


def test_a_stopped_settings_lock_holder_makes_configure_raise(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``configure`` gives up with :class:`vsqs.LockTimeout` (a ``TimeoutError`` naming
    the lock file) after ``LOCK_WAIT`` seconds, and changes nothing."""
    monkeypatch.setattr(_stored, "LOCK_WAIT", 0.5)  # 10 s in production: a test waits less
    queue = vsqs.Queue(fast_tmp_path / "q", visibility_timeout=30)
    with children() as kids:
        _stop_holding(kids, queue.path, SETTINGS_LOCK, fast_tmp_path / "held")
        began = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            queue.configure(visibility_timeout=60)
        assert 0.5 <= time.monotonic() - began < 1.5
    assert isinstance(caught.value, vsqs.LockTimeout)
    assert caught.value.path == f"{queue.path}/.vsqs/{SETTINGS_LOCK}"
    assert vsqs.Queue(queue.path).visibility_timeout == 30


def test_a_lock_waits_on_the_manual_clock_without_sleeping(fast_tmp_path: Path) -> None:
    """The same code on the manual clock: waiting for a stopped holder moves that clock
    by the timeout, in no real time to speak of."""
    queue = vsqs.Queue(fast_tmp_path / "q")
    clock = ManualClock()
    lock = FileLock.in_queue(Layout(queue.path), SETTINGS_LOCK, clock)
    with children() as kids:
        _stop_holding(kids, queue.path, SETTINGS_LOCK, fast_tmp_path / "held")
        began, moved = time.monotonic(), clock.monotonic()
        assert lock.acquire(300) is False
        assert clock.monotonic() - moved >= 300
        assert time.monotonic() - began < 30  # 300 s of manual time, polled in steps
    assert lock.acquire(0) is True  # its holder died: the lock died with it
    lock.release()


def test_threads_sharing_one_lock_exclude_each_other(fast_tmp_path: Path) -> None:
    queue = vsqs.Queue(fast_tmp_path / "q")
    lock = FileLock.in_queue(Layout(queue.path), SETTINGS_LOCK, vsqs.SystemClock(), timeout=30)
    inside = 0
    most = 0

    def work() -> None:
        nonlocal inside, most
        for _ in range(50):
            with lock:
                inside += 1
                most = max(most, inside)
                time.sleep(0.0005)
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most == 1


def test_a_lock_file_planted_as_a_link_is_never_followed(fast_tmp_path: Path) -> None:
    queue = vsqs.Queue(fast_tmp_path / "q")
    target = fast_tmp_path / "precious"
    target.write_bytes(b"keep")
    Path(queue.path, ".vsqs").mkdir(exist_ok=True)
    Path(queue.path, ".vsqs", SETTINGS_LOCK).symlink_to(target)
    with pytest.raises(OSError, match=r"settings\.lock"):
        queue.configure(visibility_timeout=5)
    assert target.read_bytes() == b"keep"
