"""Guarantees of vsqs._capacity that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutant named in its docstring."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs._capacity import VERIFY_INTERVAL
from vsqs._scan import NEW_GRACE_US
from vsqs.testing import ManualClock

from ..fixtures_core import count_listings, patch_fs

COUNTER = "capacity.count"


def _bounded(tmp_path: Path, capacity: int, *, durable: bool = False) -> vsqs.AnyQueue:
    return vsqs.Queue(tmp_path / "q", durable=durable, capacity=capacity, clock=ManualClock())


def _plant_new(queue: vsqs.AnyQueue, created_us: int) -> None:
    """A publisher's ``.new`` whose id says it was created at *created_us*."""
    Path(queue.path, f"{created_us}.new").write_bytes(b"being written")


def test_a_publish_in_flight_takes_exactly_one_place(tmp_path: Path) -> None:
    """A young ``.new`` (a publisher writing now) counts as one message, not two
    (mutant: ``sum(2 for ...)`` in ``Capacity.count``)."""
    queue = _bounded(tmp_path, 2)
    _plant_new(queue, queue.clock.time_us())
    queue.publish(b"fits", timeout=0)  # one in flight + this one = 2
    with pytest.raises(vsqs.QueueFull):
        queue.publish(b"does not", timeout=0)


def test_a_new_file_exactly_the_grace_old_is_debris_for_the_capacity(tmp_path: Path) -> None:
    """A ``.new`` whose id is exactly ``NEW_GRACE_US`` old is a dead publisher's (as the
    drain judges it): it takes no room (mutant: ``created >= young``)."""
    queue = _bounded(tmp_path, 1)
    _plant_new(queue, queue.clock.time_us() - NEW_GRACE_US)
    queue.publish(b"fits", timeout=0)
    assert queue.counts().ready == 1


def test_a_bounded_publish_under_the_bound_needs_no_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within ``VERIFY_INTERVAL`` of a listing, a publish that fits the recorded bound
    lists nothing, up to the last place: the counter holds the bound (mutants: the
    counter never read, ``str(None)`` written to it, a listing when the bound reaches
    the capacity exactly)."""
    queue = _bounded(tmp_path, 4)
    queue.publish(b"first", timeout=0)  # no counter yet: one listing, then the bound is 1
    listings = count_listings(monkeypatch)
    for n in range(3):
        queue.publish(b"%d" % n, timeout=0)  # the last one fills the queue: 3 + 1 == 4
    assert listings == []
    assert (Path(queue.path) / ".vsqs" / COUNTER).read_text() == "4"


def test_the_counter_is_trusted_for_verify_interval_then_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process trusts the counter for ``VERIFY_INTERVAL`` seconds after its listing,
    that long included, and lists the queue again after (mutant: ``>=`` there)."""
    queue = _bounded(tmp_path, 10)
    queue.publish(b"first", timeout=0)
    listings = count_listings(monkeypatch)
    queue.clock.advance(VERIFY_INTERVAL)  # type: ignore[attr-defined]
    queue.publish(b"at the interval", timeout=0)
    assert listings == []
    queue.clock.advance(0.001)  # type: ignore[attr-defined]
    queue.publish(b"past it", timeout=0)
    assert listings == [queue.path]


def test_a_fresh_handle_lists_before_it_trusts_a_counter(tmp_path: Path) -> None:
    """A counter this handle never checked is not trusted: messages published without
    a capacity since it was written are counted (mutants: ``_verified_at = +inf`` at
    first, ``unchecked = None``, ``now + _verified_at``), and the queue does not overfill."""
    writer = _bounded(tmp_path, 2)
    writer.publish(b"bounded", timeout=0)  # the counter says 1
    vsqs.Queue(writer.path, durable=False).publish(b"unbounded")  # 2 there now
    fresh = vsqs.Queue(writer.path, durable=False, capacity=2, clock=ManualClock())
    with pytest.raises(vsqs.QueueFull):
        fresh.publish(b"one too many", timeout=0)
    assert fresh.counts().ready == 2


def _hold_lock(queue: vsqs.AnyQueue) -> int:
    """Take the queue's capacity lock as another publisher would (its own open file)."""
    queue.publish(b"makes the lock file", timeout=0)
    fd = os.open(Path(queue.path, ".vsqs", "capacity.lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_publish_that_cannot_get_the_lock_in_time_raises_and_publishes_nothing(
    tmp_path: Path,
) -> None:
    """Another publisher holds the capacity lock: ``publish(timeout=0.2)`` raises
    :class:`QueueFull` and adds nothing, and leaves no descriptor open (mutants:
    ``acquire`` returning ``True`` without the lock, or not closing its descriptor)."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, capacity=5)
    fd = _hold_lock(queue)
    try:
        with pytest.raises(vsqs.QueueFull):
            queue.publish(b"blocked", timeout=0.2)
        before = os.listdir("/proc/self/fd")
        with pytest.raises(vsqs.QueueFull):
            queue.publish(b"blocked again", timeout=0)
        assert os.listdir("/proc/self/fd") == before
        assert queue.counts().ready == 1
    finally:
        os.close(fd)


def test_a_publish_waits_for_the_lock_within_its_timeout(tmp_path: Path) -> None:
    """A lock released after 0.3 s is taken by a publish given 30 s (mutant: the lock's
    deadline computed as now minus the timeout, which gives up at once)."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, capacity=5)
    fd = _hold_lock(queue)
    releaser = threading.Timer(0.3, os.close, (fd,))
    releaser.start()
    try:
        queue.publish(b"after the wait", timeout=30)
    finally:
        releaser.join()
    assert queue.counts().ready == 2


def test_a_bounded_publish_with_durable_false_never_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable=False`` makes no sync call at all, the capacity counter included
    (mutant: the counter written with ``durable=True``)."""
    queue = _bounded(tmp_path, 5)
    syncs: list[str] = []
    for name in ("fsync", "fsync_dir", "sync_filesystem", "sync_files"):
        real: Callable[..., Any] = getattr(_fs, name)

        def traced(*args: Any, _real: Callable[..., Any] = real, _name: str = name) -> Any:
            syncs.append(_name)
            return _real(*args)

        patch_fs(monkeypatch, name, traced)
    queue.publish(b"a", timeout=0)
    queue.publish_batch([b"b", b"c"], timeout=0)
    assert syncs == []


def test_a_counter_neither_rewritten_nor_removed_is_recounted_before_it_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Capacity 2, the counter at 1: the next publish cannot rewrite it (ENOSPC) nor
    remove it (EIO), so it still says 1 with 2 messages there. The publish after that
    lists the queue rather than trust it, and finds it full (mutant: ``_verified_at =
    +inf``, which trusts the stale counter and overfills the queue). The failure is
    logged once, naming the queue, what failed and why (mutants of that message)."""
    queue = _bounded(tmp_path, 2)
    queue.publish(b"one", timeout=0)  # the counter says 1, checked just now
    real_replace, real_unlink = _fs.replace_at, _fs.unlink_at

    def replace_at(src: str, dst: str, fd: int) -> None:
        if dst == COUNTER:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst, fd)

    def unlink_at(name: str, fd: int) -> bool:
        if name == COUNTER:
            raise OSError(errno.EIO, "Input/output error")
        return real_unlink(name, fd)

    patch_fs(monkeypatch, "replace_at", replace_at)
    patch_fs(monkeypatch, "unlink_at", unlink_at)
    with caplog.at_level(logging.WARNING, logger="vsqs"):
        queue.publish(b"two", timeout=0)  # published; the counter is left at 1
    monkeypatch.undo()
    assert (Path(queue.path) / ".vsqs" / COUNTER).read_text() == "1"
    with pytest.raises(vsqs.QueueFull):
        queue.publish(b"three", timeout=0)
    assert queue.counts().ready == 2
    (record,) = [r for r in caplog.records if "capacity count" in r.getMessage()]
    text = record.getMessage()
    assert text.startswith(f"queue {queue.path}: could not record the capacity count (")
    assert "No space left on device" in text
