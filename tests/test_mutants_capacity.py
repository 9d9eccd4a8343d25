"""Guarantees of vsqs._capacity that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutant named in its docstring."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs, _scan
from vsqs._scan import NEW_GRACE_US
from vsqs.testing import ManualClock

from .fixtures_core import patch_fs

COUNTER = "capacity.count"


def _bounded(tmp_path: Path, capacity: int, *, durable: bool = False) -> vsqs.Queue:
    return vsqs.Queue(tmp_path / "q", durable=durable, capacity=capacity, clock=ManualClock())


def _plant_new(queue: vsqs.Queue, created_us: int) -> None:
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
    lists nothing: the counter holds the bound (mutant: ``str(None)`` written to it, which
    no reader can trust, so every publish lists the queue)."""
    queue = _bounded(tmp_path, 10)
    queue.publish(b"first", timeout=0)  # no counter yet: one listing, then the bound is 1
    listings: list[str] = []
    real_scan = _scan.scan

    def counted(path: str, *args: Any, **kwargs: Any) -> Any:
        listings.append(path)
        return real_scan(path, *args, **kwargs)

    monkeypatch.setattr(_scan, "scan", counted)
    for n in range(3):
        queue.publish(b"%d" % n, timeout=0)
    assert listings == []
    assert (Path(queue.path) / ".vsqs" / COUNTER).read_text() == "4"


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
