"""Guarantees of vsqs._shutdown that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutant named in its docstring."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs._scan import NEW_GRACE_US
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def _trace_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``fsync:<file>`` and ``fsync_dir:<directory>`` for every flush from now on."""
    calls: list[str] = []
    real_fsync: Callable[[int, str], None] = _fs.fsync
    real_fsync_dir: Callable[[str], None] = _fs.fsync_dir

    def fsync(fd: int, directory: str) -> None:
        calls.append("fsync:" + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd, directory)

    def fsync_dir(path: str, *args: Any) -> None:
        calls.append(f"fsync_dir:{path}")
        real_fsync_dir(path, *args)

    patch_fs(monkeypatch, "fsync", fsync)
    patch_fs(monkeypatch, "fsync_dir", fsync_dir)
    return calls


def test_a_durable_shutdown_flushes_its_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a durable queue, ``shutdown()`` flushes ``.vsqs/closed`` (its content, the time
    of the shutdown) before it returns (mutant: the marker created with ``durable=None``)."""
    queue = vsqs.Queue(tmp_path / "q", clock=ManualClock())
    calls = _trace_syncs(monkeypatch)
    queue.shutdown()
    marker = str(Path(queue.path, ".vsqs", "closed"))
    assert f"fsync:{marker}" in calls


def test_a_non_durable_shutdown_flushes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable=False`` makes no sync call at all, a shutdown included."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    calls = _trace_syncs(monkeypatch)
    queue.shutdown()
    assert calls == []


def test_a_shutdown_is_seen_at_once_by_every_handle_of_the_process(tmp_path: Path) -> None:
    """A handle that just published trusts, for ``CLOSE_GRACE``, that the queue is open;
    a shutdown through another handle of the same process (same clock) ends that trust
    at once: its next publish raises (mutant: the trust of another path dropped)."""
    clock = ManualClock()
    publisher = vsqs.Queue(tmp_path / "q", durable=False, clock=clock)
    publisher.publish(b"trusted open")
    vsqs.Queue(tmp_path / "q", durable=False, clock=clock).shutdown()
    with pytest.raises(vsqs.QueueClosed):
        publisher.publish(b"after the shutdown")
    assert publisher.counts().ready == 1


def test_shutting_down_again_refuses_publishes_on_that_handle_at_once(tmp_path: Path) -> None:
    """``shutdown()`` on a handle whose queue another handle shut down already: it
    returns, and that handle refuses the next publish, even within the time it trusted
    the queue open (mutants: ``seen`` left unset when the marker existed)."""
    publisher = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    publisher.publish(b"trusted open")
    vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock()).shutdown()  # other clock
    publisher.shutdown()
    with pytest.raises(vsqs.QueueClosed):
        publisher.publish(b"after the shutdown")


def test_shutting_down_again_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idempotent: a second ``shutdown()`` makes no file event (no wake-up poke) and
    changes nothing (mutant: ``mark`` saying it shut the queue down when it was already)."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    queue.shutdown()
    made: list[str] = []
    real: Callable[..., int] = _fs.create_exclusive

    def create_exclusive(path: str, *args: Any) -> int:
        made.append(path)
        return real(path, *args)

    patch_fs(monkeypatch, "create_exclusive", create_exclusive)
    queue.shutdown()
    assert made == []


def _shut_down_past_its_grace(path: Path, start: float) -> vsqs.AnyQueue:
    """A queue shut down at *start* (by its manual clock), which now reads *start* + 2 s."""
    queue = vsqs.Queue(path, durable=False, clock=ManualClock(start))
    queue.shutdown()
    queue.clock.advance(2)  # type: ignore[attr-defined]
    return queue


def _plant_new(queue: vsqs.AnyQueue, created_us: int, mtime_ns: int) -> None:
    """A publisher's ``.new``: its id says *created_us*, its mtime *mtime_ns*."""
    path = Path(queue.path, f"{created_us}.new")
    path.write_bytes(b"being written")
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _drained(queue: vsqs.AnyQueue) -> bool:
    try:
        assert queue.receive(timeout=0) is None
    except vsqs.QueueDrained:
        return True
    return False


def test_a_fresh_id_with_an_old_mtime_holds_the_drain_up(tmp_path: Path) -> None:
    """A ``.new`` whose id is young by this clock (a publisher whose clock runs ahead, or
    one writing now) is waited for, however old its mtime (mutants: a young id taken
    for a dead one; the grace added to the clock instead of taken from it)."""
    now = time.time()
    queue = _shut_down_past_its_grace(tmp_path / "q", now - 2)
    _plant_new(queue, queue.clock.time_us(), round((now - 70) * 1e9))
    assert not _drained(queue)


def test_a_new_file_exactly_the_grace_old_is_a_dead_publishers(tmp_path: Path) -> None:
    """Id and mtime both exactly ``NEW_GRACE_US`` old: a dead publisher's, so the queue
    is drained (as the capacity also judges it; mutant: ``newest >= stale_before``)."""
    queue = _shut_down_past_its_grace(tmp_path / "q", float(int(time.time()) - 10))
    stale_before = queue.clock.time_us() - NEW_GRACE_US
    _plant_new(queue, stale_before, stale_before * 1000)
    assert _drained(queue)


def test_a_clock_ahead_of_the_files_does_not_call_a_live_publishers_file_dead(
    tmp_path: Path,
) -> None:
    """This consumer's clock runs two minutes ahead: a ``.new`` written just now has an
    id and an mtime that look old by it, but fresh by the filesystem's clock, which is
    behind, so it is waited for (mutant: the grace added to the filesystem's time)."""
    now = time.time()
    queue = _shut_down_past_its_grace(tmp_path / "q", now + 120)
    _plant_new(queue, round(now * 1e6), round(now * 1e9))
    assert not _drained(queue)


def test_the_filesystems_clock_decides_at_exactly_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By the filesystem's clock, an mtime exactly ``NEW_GRACE_US`` old is a dead
    publisher's, as by this clock (mutant: ``<`` there)."""
    queue = _shut_down_past_its_grace(tmp_path / "q", time.time())
    mtime_us = int(time.time() - 100) * 1_000_000
    _plant_new(queue, mtime_us, mtime_us * 1000)
    patch_fs(monkeypatch, "now_us_at", lambda fd: mtime_us + NEW_GRACE_US)
    assert _drained(queue)


def test_a_filesystem_without_a_clock_to_read_is_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the filesystem's clock cannot be read (read-only now: nobody can publish,
    so nothing can appear), a ``.new`` old by this clock does not hold the drain up
    (mutant: not drained then)."""
    queue = _shut_down_past_its_grace(tmp_path / "q", time.time())
    old_us = round((time.time() - 100) * 1e6)
    _plant_new(queue, old_us, old_us * 1000)

    def read_only(fd: int) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    patch_fs(monkeypatch, "now_us_at", read_only)
    assert _drained(queue)


def test_the_drain_waits_the_grace_unless_the_shutdown_is_provably_older(
    tmp_path: Path,
) -> None:
    """A handle whose clock says the shutdown was exactly ``CLOSE_GRACE + DRAIN_SKEW``
    ago cannot prove the grace is over (it may be that much ahead): it waits the
    grace from when it saw the marker (mutant: ``>=`` there, drained at once)."""
    start = float(int(time.time()))
    vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock(start)).shutdown()
    consumer = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock(start + 1.1))
    assert not _drained(consumer)
    consumer.clock.advance(0.2)  # type: ignore[attr-defined]
    assert _drained(consumer)
